"""Convert rows of the older ``experiments.records.learned_vs_search`` format into :class:`ResultRow` s.

Those rows (``results/*/rows.jsonl`` written before the one row format) hold latencies in ms and no
CPU-only latency or history. The conversion rebuilds each task's simulated problem to evaluate the CPU-only
placement (cheap), takes the score from the stored reference optimum, and marks the row
``extra["converted_from"]``; the history stays empty and ``versions`` unknown.

    python -m experiments.records.convert_rows results/learned-vs-search/rows.jsonl --out /tmp/lvs/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym.benchmark import cpu_device
from placement_gym.errors import RecordError
from placement_gym.problem import PlacementProblem
from placement_gym.results import ResultRow, ResultStore, parse_row

#: Keys that tell an old learned-vs-search row.
LEGACY_KEYS = frozenset({"latency_ms", "optimum_ms", "best_single_ms", "wall_s"})


def convert(
    data: dict[str, Any], source: str, problems: dict[tuple[str, str], PlacementProblem]
) -> ResultRow:
    """One old row as a :class:`ResultRow` (``problems``: a cache of simulated problems per task).

    Raises:
        RecordError: If a field is missing.
    """
    try:
        task = (data["model"], data["platform"])
        if task not in problems:
            problems[task] = PlacementProblem.make(*task, "simulated")
        problem = problems[task]
        latency = data["latency_ms"] / 1e3 if data["latency_ms"] is not None else math.inf
        cpu = problem.evaluate(
            np.full(problem.num_groups, cpu_device(problem.platform), dtype=np.int64)
        ).latency
        return ResultRow(
            model=data["model"], graph_version=data.get("graph_version", problem.benchmark.version),
            platform=problem.platform.name, backend="simulated", coarsening=problem.coarse.level,
            groups=len(data["placement"]), method=data["method"], seed=data["seed"], budget=data["budget"],
            latency=latency, cpu_only_latency=cpu, speedup_vs_cpu=cpu / latency if math.isfinite(latency) else 0.0,
            evaluations=data["evaluations"], wall_time=data["wall_s"], placement=list(data["placement"]),
            extra={"converted_from": source, "best_single_ms": data["best_single_ms"]},
            score=problem.score(latency),
        )  # fmt: skip
    except KeyError as exc:
        raise RecordError(f"{source}: an old learned-vs-search row without {exc}") from None


def read_rows(path: str | Path) -> list[ResultRow]:
    """Every row of a JSON-lines file in either format (old learned-vs-search rows converted)."""
    problems: dict[tuple[str, str], PlacementProblem] = {}
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, dict) and LEGACY_KEYS <= data.keys():
            rows.append(convert(data, where, problems))
        else:
            rows.append(parse_row(line, where))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="a results.jsonl to append the rows to")
    args = parser.parse_args(argv)
    store = ResultStore(args.out)
    written = sum(store.append(row) for path in args.files for row in read_rows(path))
    print(f"{written} rows appended to {args.out}")


if __name__ == "__main__":
    main()
