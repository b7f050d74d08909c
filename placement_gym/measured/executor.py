"""The contract between the measured backend and the things that run a placement on OpenVINO.

An :class:`Executor` turns a per-op placement into something runnable (:meth:`Executor.prepare`,
which compiles) and runs it once per :meth:`Executor.run`, returning the wall time of one inference.
Failures are :class:`ExecutionFailure` s that say whether they are a property of the placement
(``cacheable``: a compile error happens again) or transient (a runtime error, a timeout).
"""

from __future__ import annotations

import abc
import math
import time
from typing import Any

import numpy as np

from placement_gym.errors import BackendError
from placement_gym.platforms.devices import Device

#: Compile failures an executor remembers (the oldest is forgotten first), so a placement or segment that
#: failed to compile is not compiled again while it is remembered.
MAX_FAILED = 4096


class ExecutionFailure(BackendError):
    """A placement could not be compiled or run.

    Attributes:
        reason: One line for :meth:`LatencyResult.infeasible`.
        cacheable: True if the same placement would fail again (compile errors); False if transient.
    """

    def __init__(self, reason: str, *, cacheable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cacheable = cacheable


def first_line(exc: BaseException, limit: int = 300) -> str:
    """A short one-line description of ``exc`` for a result's reason."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def device_available(device: Device, available: list[str]) -> bool:
    """Whether OpenVINO on this machine offers ``device.ov_device``.

    ``"GPU"`` matches ``"GPU.0"`` and vice versa when the machine lists only one of the two spellings.
    """
    want = device.ov_device
    if want in available:
        return True
    base = want.split(".")[0]
    if "." not in want:
        return any(d.split(".")[0] == base for d in available)
    return want.endswith(".0") and base in available


def timed_infer(request: Any, timeout: float) -> float:
    """Run one inference of ``request`` (an ``ov.InferRequest``) and return its wall time in seconds.

    Started with ``start_async`` and awaited with ``wait_for``, so that an inference that hangs is
    cancelled after ``timeout`` seconds instead of blocking the caller forever.

    Raises:
        ExecutionFailure: If the inference fails or does not finish within ``timeout`` (not cacheable).
    """
    start = time.perf_counter()
    try:
        request.start_async()
        done = request.wait_for(max(1, math.ceil(timeout * 1000)))
    except Exception as exc:
        raise ExecutionFailure(f"inference failed: {first_line(exc)}", cacheable=False) from exc
    elapsed = time.perf_counter() - start
    if not done:
        try:
            request.cancel()
            request.wait()
        except Exception:  # a cancelled request raises here; it is idle either way
            pass
        raise ExecutionFailure(f"inference did not finish within {timeout:g} s", cacheable=False)
    return elapsed


class Executor(abc.ABC):
    """Runs one model under per-op placements.

    Attributes:
        name: ``"partitioned"`` or ``"hetero"``.
    """

    name: str = "executor"

    @abc.abstractmethod
    def prepare(self, op_device: np.ndarray) -> Any:
        """Compile (or fetch from a cache) what runs the per-op placement ``op_device``, shape ``(n,)``.

        Raises:
            ExecutionFailure: If compiling fails.
        """

    @abc.abstractmethod
    def run(self, plan: Any) -> float:
        """Run one inference of a prepared plan; returns its wall time in seconds.

        Raises:
            ExecutionFailure: If the inference fails or times out.
        """

    @abc.abstractmethod
    def outputs(self, plan: Any) -> list[np.ndarray]:
        """Copies of the model outputs of the last :meth:`run` of ``plan``, in ``model.outputs`` order."""

    def is_warm(self, plan: Any) -> bool:
        """Whether every compiled model of ``plan`` has run before (warm-up can be skipped)."""
        return False

    def close(self) -> None:
        """Release compiled models and infer requests."""
