"""Checks of values a user gives: numbers within declared ranges, and integer index arrays.

Each check raises a :class:`~placement_gym.errors.PlacementGymError` subclass that names the bad value and
what is expected, never a raw numpy error or a silent clip.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement_gym.errors import ConfigError, PlacementError
from placement_gym.limits import require_memory


@dataclass(frozen=True)
class Range:
    """The values a numeric argument may take, and the memory a value needs (for size arguments).

    Args:
        low: Smallest allowed value (``None``: no lower bound).
        high: Largest allowed value (``None``: no upper bound).
        low_open: ``low`` itself is not allowed (``Range(0, low_open=True)``: strictly positive).
        high_open: ``high`` itself is not allowed.
        memory: Bytes a value needs at least (``hidden -> 4 * hidden**2`` for a square weight matrix);
            a value needing more than the machine has is refused with the figure.

    Example::

        Range(1)                                  # a count: >= 1
        Range(0.0, 1.0)                           # a probability
        Range(1, memory=lambda h: 4.0 * h * h)    # a layer width
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    memory: Callable[[float], float] | None = None

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return " and ".join(parts) or "any finite number"

    def check(self, value: float, what: str) -> None:
        """Raise :class:`ConfigError` naming ``what`` (``"milp argument time_limit"``) unless ``value`` fits."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ConfigError(f"{what} must be a finite number, got {value!r}")
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            raise ConfigError(f"{what} must be {self.describe()}, got {value!r}")
        if self.memory is not None:
            require_memory(self.memory(value), f"{what}={value!r}")


def as_index_array(
    values: object, length: int | None = None, high: int | None = None, what: str = "placement"
) -> np.ndarray:
    """``values`` as an int64 array of indices, refusing anything that is not plainly integer indices.

    Args:
        values: An array or (nested) sequence of integers.
        length: Required length of the last axis (``None``: any).
        high: Indices must lie in ``[0, high)`` (``None``: the range is not checked).
        what: The name used in messages (``"placement"``, ``"action"``).

    Returns:
        A contiguous int64 array with the shape of ``values``.

    Raises:
        PlacementError: A ragged sequence, booleans, floats (even integral ones), text or other objects,
            the wrong length, or an index out of range, each named in the message.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # older NumPy only warns on ragged input
            arr = np.asarray(values)
    except (ValueError, TypeError, Warning) as exc:
        raise PlacementError(
            f"{what} must be a rectangular array of integer indices (rows of equal length), "
            f"got {_preview(values)} ({' '.join(str(exc).split())[:120]})"
        ) from None
    if arr.dtype == np.bool_:
        raise PlacementError(f"{what} holds booleans; give integer device indices (0, 1, ...), got {_preview(values)}")
    if arr.dtype == object:  # Python ints too large for int64, or mixed objects
        flat = arr.reshape(-1).tolist()
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in flat):
            raise PlacementError(f"{what} must hold integer indices, got {_preview(values)}")
        if any(not -(2**63) <= int(v) < 2**63 for v in flat):
            bad = next(v for v in flat if not -(2**63) <= int(v) < 2**63)
            raise PlacementError(f"{what} index {bad} is out of range" + (f" [0, {high})" if high else ""))
        arr = arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.inexact):
        raise PlacementError(
            f"{what} must hold integer indices, got dtype {arr.dtype} ({_preview(values)}); floats are not "
            "accepted, not even integral ones (cast with .astype(int) if they are indices)"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        raise PlacementError(f"{what} must hold integer indices, got dtype {arr.dtype} ({_preview(values)})")
    if length is not None and (arr.ndim == 0 or arr.shape[-1] != length):
        raise PlacementError(f"{what} must have {length} entries (one per group), got shape {arr.shape}")
    if arr.size and np.issubdtype(arr.dtype, np.unsignedinteger) and int(arr.max()) >= 2**63:
        raise PlacementError(f"{what} index {int(arr.max())} is out of range" + (f" [0, {high})" if high else ""))
    arr = arr.astype(np.int64, order="C", copy=False)  # (a 0-d scalar stays 0-d)
    if high is not None and arr.size and (arr.min() < 0 or arr.max() >= high):
        bad = int(arr[(arr < 0) | (arr >= high)][0])
        raise PlacementError(f"{what} index {bad} is out of range [0, {high})")
    return arr


def _preview(values: object, limit: int = 80) -> str:
    text = repr(values)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def padding_size(value: object, name: str, at_least: int, bytes_each: float) -> int:
    """A padding size such as ``max_nodes``: an integer ``>= at_least`` whose arrays fit in memory.

    Args:
        value: The size given.
        name: Its argument name, for messages.
        at_least: The smallest allowed value (the graph's own size).
        bytes_each: Bytes the padded arrays take per unit of the size.

    Raises:
        ConfigError: Not an integer (``57.5``, ``True``, ``"8"``), smaller than ``at_least``, or too large
            for memory (with the figure).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < at_least:
        raise ConfigError(f"{name}={value} is smaller than the graph ({at_least}); use at least {at_least}")
    require_memory(value * bytes_each, f"{name}={value}")
    return value
