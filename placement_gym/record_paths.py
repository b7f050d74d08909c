"""Paths as shipped records write them: never a path of the machine that wrote the record.

A policy's ``meta.json``, a pretraining record and the result rows that copy it travel with the repository,
so a path in them is written relative to the repository when it lies inside it, as given when it is
relative already, and as ``<dir>/NAME`` (a placeholder for wherever the reader keeps it) when it lies
elsewhere on the writer's machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: The folder of the repository (of the package, in an installed copy).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: What stands for a folder outside the repository.
PLACEHOLDER = "<dir>"


def portable_path(path: str | os.PathLike, root: Path = REPO_ROOT) -> str:
    """``path`` as a record may hold it: relative paths as given, absolute ones relative to ``root`` when
    inside it, else ``<dir>/`` and the last component.

    >>> portable_path("/elsewhere/runs/all-v3", Path("/repo"))
    '<dir>/all-v3'
    >>> portable_path("/repo/agents/learned/pretrained", Path("/repo"))
    'agents/learned/pretrained'
    """
    p = Path(path)
    if not p.is_absolute():
        return str(p)
    p = Path(os.path.normpath(p))
    if p.is_relative_to(root):
        return str(p.relative_to(root))
    return f"{PLACEHOLDER}/{p.name}" if p.name else PLACEHOLDER


def portable_args(argv: Sequence[str], root: Path = REPO_ROOT) -> list[str]:
    """Command-line arguments with every absolute path (an argument, or the value of ``--name=PATH``)
    made :func:`portable_path`."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if os.path.isabs(value):
            out.append(f"{name}{eq}{portable_path(value, root)}")
        else:
            out.append(arg)
    return out
