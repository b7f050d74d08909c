"""Defaults that the CLI's parsers share with the code behind them, in a module light enough for ``--help``
(no import beyond the standard library): where the leaderboard keeps its rows and page, and the CPUs a
cell's Ray task reserves."""

from __future__ import annotations

from pathlib import Path

#: Where the leaderboard's stored rows live, one folder per tier, one file per method.
LEADERBOARD_RESULTS = Path("results") / "leaderboard"
#: The generated leaderboard page.
LEADERBOARD_PAGE = Path("docs") / "LEADERBOARD.md"
#: CPUs a cell's Ray task reserves unless told otherwise.
RAY_CPUS = 1.0
