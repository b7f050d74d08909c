"""Run a call that may crash the process (a segfault in a native library) in a child process.

OpenVINO's CPU plugin crashes on some models it has never seen (a deep MLP with residual adds segfaults
its compile: an upstream bug), and a crash in-process kills the whole program with exit status 139 and
no message. :func:`run_isolated` runs such a call in a child process forked from a fork server (a clean
single-threaded process started once, which has imported the fusion reader: nothing of the parent's
threads or OpenVINO state is inherited; ``spawn`` where there is no fork server) and turns its death into a
:class:`~placement_gym.errors.BackendError` that says which call crashed and with which signal. An
exception the call raises is re-raised in the parent as it was (or, if it cannot be sent back, as a
``BackendError`` with its text).

The first child pays for starting the fork server (a new Python process importing placement-gym and
OpenVINO); later ones are forks of it. Only calls on models the project has not seen run isolated, once
per model (callers memoise): the zoo's models are compiled in-process.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from placement_gym.errors import BackendError

T = TypeVar("T")


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result: tuple[str, Any] = ("ok", fn(*args))
    except BaseException as exc:  # sent back to the parent, which raises it
        result = ("error", exc)
    try:
        conn.send(result)
    except Exception:  # an unpicklable result or exception: send its text
        text = "".join(traceback.format_exception_only(type(result[1]), result[1])).strip()
        conn.send(("text", text))
    conn.close()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _context() -> Any:
    """A fork server (Linux) that has imported the fusion reader once, so each child is a cheap fork of a
    clean single-threaded process; ``spawn`` where there is none."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["placement_gym.fusion"])
    return context


def run_isolated(fn: Callable[..., T], *args: Any, what: str, timeout: float | None = None) -> T:
    """``fn(*args)`` computed in a child process.

    Args:
        fn: A module-level function (it is pickled by reference); its arguments and result must pickle.
        *args: Its arguments.
        what: What the call does, for messages (``"compiling model.xml to read its fusions"``).
        timeout: Seconds to wait before the child is killed (``None``: no limit).

    Raises:
        BackendError: If the child dies (a crash: the signal is named), is killed after ``timeout``, or
            sends back an exception that cannot be re-created here.
        Exception: Whatever ``fn`` raised, re-raised as it was.
    """
    context = _context()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(send, fn, args), daemon=True)
    process.start()
    send.close()
    message, timed_out = None, False
    try:
        if receive.poll(timeout):
            message = receive.recv()
        else:
            timed_out = process.is_alive()
    except (EOFError, OSError):  # the child died before it answered
        pass
    finally:
        receive.close()
        process.join(5.0 if message is not None else 0.1)
        if process.is_alive():
            process.kill()
        process.join()
    if message is None:
        if timed_out:
            raise BackendError(f"{what} did not finish within {timeout:g} s and was stopped")
        code = process.exitcode or 0
        how = _signal_name(code) if code < 0 else f"exit status {code}"
        raise BackendError(
            f"{what} crashed the process it ran in ({how}); this is a failure of the library on this model, "
            "not of your input: try another OpenVINO release or export of the model (placement-gym ran the "
            "call in a child process, so only that process died)"
        )
    status, value = message
    if status == "ok":
        return value
    if status == "error":
        raise value
    raise BackendError(f"{what} failed: {value}")


__all__ = ["run_isolated"]
