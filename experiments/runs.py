"""The result rows the experiment scripts write.

The row format and its store live in :mod:`placement_gym.results` (re-exported here for the scripts):
one :class:`ResultRow` per cell, appended under a lock, resumable, safe with two writers. Method specs
are parsed by :mod:`agents.specs`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from placement_gym.results import (
    CHECKPOINTS,
    ResultRow,
    ResultStore,
    RowSchema,
    library_versions,
    parse_row,
    reject_bool,
    thin_history,
)

__all__ = [
    "CHECKPOINTS",
    "ResultRow",
    "ResultStore",
    "RowSchema",
    "library_versions",
    "parse_row",
    "read_json_lines",
    "reject_bool",
    "speedup_text",
    "thin_history",
]


def speedup_text(row: ResultRow) -> str:
    """``x1.23 vs cpu_only`` (the reference the speedup is against), or why there is none."""
    if row.speedup_reference == "none" or not math.isfinite(row.speedup_vs_cpu):
        return "no single device fits: no speedup"
    return f"x{row.speedup_vs_cpu:.2f} vs {row.speedup_reference}"


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, none if it does not exist; a torn line (a writer stopped
    mid-line) is skipped."""
    rows: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
