"""The entry point of an isolated call's child process (see :mod:`placement_gym.isolation`).

``python -m placement_gym.isolation_child REQUEST ANSWER`` reads ``(module, qualified name, args)`` from
the pickle file ``REQUEST``, imports the function, calls it and writes ``("ok", result)``,
``("error", exception)`` or ``("text", message)`` to ``ANSWER`` (renamed into place when complete, so a
child that dies leaves no answer). It runs nothing else: not the caller's ``__main__``.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any


def _resolve(module: str, name: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _answer(path: Path, message: tuple[str, Any]) -> None:
    try:
        data = pickle.dumps(message)
    except Exception:  # an unpicklable result or exception: send its text
        status, value = message
        if status == "error":
            text = "".join(traceback.format_exception_only(type(value), value)).strip()
        else:
            text = f"its result (a {type(value).__name__}) cannot be sent back"
        data = pickle.dumps(("text", text))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    request, answer = Path(argv[0]), Path(argv[1])
    try:
        module, name, args = pickle.loads(request.read_bytes())  # written by our parent, in its own folder
        result: tuple[str, Any] = ("ok", _resolve(module, name)(*args))
    except BaseException as exc:  # sent back to the parent, which raises it
        result = ("error", exc)
    _answer(answer, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
