"""Run a call that may crash the process (a segfault in a native library) in a child process.

OpenVINO's CPU plugin crashes on some models it has never seen (a deep MLP with residual adds segfaults
its compile: an upstream bug), and a crash in-process kills the whole program with exit status 139 and
no message. :func:`run_isolated` runs such a call in a fresh interpreter that runs only the project's own
entry point (``python -m placement_gym.isolation_child``): the function is named by module and qualified
name, its arguments and result travel through files in a private temporary folder, and nothing of the
caller's ``__main__``, threads or OpenVINO state reaches the child. So a script without an
``if __name__ == "__main__":`` guard, code fed on stdin, ``python -c`` and notebooks work (a fork server
or ``spawn`` would re-run the caller's ``__main__`` in the child). The child's death becomes a
:class:`~placement_gym.errors.BackendError` that says which call crashed and with which signal. An
exception the call raises is re-raised in the parent as it was (or, if it cannot be sent back, as a
``BackendError`` with its text).

Each call starts a new Python process that imports placement-gym and OpenVINO (seconds, not
milliseconds). Only calls on models the project has not seen run isolated, once per model (callers
memoise): the zoo's models are compiled in-process.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from placement_gym.errors import BackendError

T = TypeVar("T")
#: The folder that holds the ``placement_gym`` package: put first on the child's import path, so the child
#: runs the same code as the caller even when the caller found it through ``sys.path`` edits.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
CHILD_MODULE = "placement_gym.isolation_child"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def function_reference(fn: Callable[..., Any]) -> tuple[str, str]:
    """``(module, qualified name)`` by which the child imports ``fn``.

    Raises:
        BackendError: If ``fn`` is not an importable module-level function (a lambda, a nested function,
            or one defined in ``__main__``, which the child never runs).
    """
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or module == "__main__" or "<" in name:
        raise BackendError(
            f"run_isolated needs a function importable by module and name, got {fn!r} "
            f"(module {module!r}); define it at the top level of a module"
        )
    return module, name


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _PROJECT_ROOT + (os.pathsep + path if path else "")
    env["PYTHONSAFEPATH"] = "1"  # the caller's current folder is not put on the child's import path
    return env


def run_isolated(fn: Callable[..., T], *args: Any, what: str, timeout: float | None = None) -> T:
    """``fn(*args)`` computed in a child process (a fresh interpreter; see the module docstring).

    Args:
        fn: A module-level function (imported by the child by module and name); its arguments and result
            must pickle.
        *args: Its arguments.
        what: What the call does, for messages (``"compiling model.xml to read its fusions"``).
        timeout: Seconds to wait before the child is killed (``None``: no limit).

    Raises:
        BackendError: If ``fn`` cannot be named for the child, the child dies (a crash: the signal is
            named), is killed after ``timeout``, or sends back an exception that cannot be re-created here.
        Exception: Whatever ``fn`` raised, re-raised as it was.
    """
    module, name = function_reference(fn)
    folder = Path(tempfile.mkdtemp(prefix="placement-gym-isolated-"))  # mode 0700: only this user
    try:
        request, answer = folder / "request.pickle", folder / "answer.pickle"
        try:
            request.write_bytes(pickle.dumps((module, name, args)))
        except Exception as exc:
            raise BackendError(f"{what}: its arguments cannot be sent to a child process ({exc})") from exc
        command = [sys.executable, "-m", CHILD_MODULE, str(request), str(answer)]
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=_child_env(), cwd=folder
        )
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise BackendError(f"{what} did not finish within {timeout:g} s and was stopped") from None
        except BaseException:  # Ctrl-C in the parent: do not leave the child running
            process.kill()
            process.wait()
            raise
        if not answer.is_file():
            how = _signal_name(code) if code < 0 else f"exit status {code}"
            raise BackendError(
                f"{what} crashed the process it ran in ({how}); this is a failure of the library on this "
                "model, not of your input: try another OpenVINO release or export of the model "
                "(placement-gym ran the call in a child process, so only that process died)"
            )
        status, value = pickle.loads(answer.read_bytes())  # written by our own child, in our own folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if status == "ok":
        return value
    if status == "error":
        raise value
    raise BackendError(f"{what} failed: {value}")


__all__ = ["function_reference", "run_isolated"]
