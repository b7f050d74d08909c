"""Replay result rows: re-evaluate each row's placement on its task and reject rows that do not reproduce.

Every row of the given files is rebuilt as its task (model, platform, fused coarsening, simulated backend),
and is rejected, with one line naming the file, line and reason, when:

* it is not a valid row (not JSON, a missing or mistyped field);
* its backend is not ``simulated`` (only the simulator is deterministic, so only its rows replay);
* its task is not a protocol task (for rows run under a protocol), or its model, platform or coarsening
  cannot be built;
* its graph version is not the model's current one, or its group count is not the graph's, or the task's
  content hash it records (``task_sha256``: graph and every platform figure) is not the task's;
* its placement is malformed (wrong length, a device index out of range);
* the replayed latency differs from the stored one (relative tolerance :data:`REL_TOL`; an infeasible
  placement must be stored as infeasible), or the stored normalised score differs from the replayed one;
* it spent more evaluations than its budget.

The command exits with status 0 if every row reproduces, and with an error naming the count otherwise.

Usage:
    placement-gym validate results/leaderboard/standard/*.jsonl
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from experiments.arguments import module_main
from placement_gym.errors import PlacementGymError, RecordError
from placement_gym.problem import PlacementProblem
from placement_gym.results import ResultRow, parse_row

#: Relative tolerance of a replayed latency (the simulator is deterministic; this absorbs JSON rounding).
REL_TOL = 1e-9


@dataclass(frozen=True)
class Verdict:
    """The replay of one row.

    Attributes:
        where: ``"<file> line <n>"``.
        row: The row (``None`` if the line is not a valid row).
        problems: Why it was rejected (empty: it reproduces).
        replayed_latency: The latency of its placement now (``nan`` if not replayed).
    """

    where: str
    row: ResultRow | None
    problems: tuple[str, ...]
    replayed_latency: float = math.nan

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """One line for the terminal: ``OK`` or ``REJECTED`` with the row's cell and the reasons."""
        if self.row is None:
            return f"REJECTED {self.where}: {'; '.join(self.problems)}"
        r = self.row
        cell = f"{r.model}/{r.platform} {r.method} seed {r.seed}"
        if self.ok:
            return f"OK       {self.where}: {cell}, {r.latency * 1e3:.4f} ms"
        return f"REJECTED {self.where}: {cell}: {'; '.join(self.problems)}"


class Replayer:
    """Rebuilds each task once and replays rows on it."""

    def __init__(self) -> None:
        self._problems: dict[tuple[str, str, str], PlacementProblem | str] = {}

    def _problem(self, row: ResultRow) -> PlacementProblem | str:
        key = (row.model, row.platform, row.coarsening)
        if key not in self._problems:
            try:
                self._problems[key] = PlacementProblem.make(
                    row.model, row.platform, "simulated", coarsening=row.coarsening
                )
            except PlacementGymError as exc:
                self._problems[key] = (
                    f"task {row.model}/{row.platform} ({row.coarsening}) cannot be built: {exc}"
                )
        return self._problems[key]

    def replay(self, row: ResultRow, where: str) -> Verdict:
        """Replay one row on its task."""
        problems = _static_problems(row)
        if problems:
            return Verdict(where, row, tuple(problems))
        problem = self._problem(row)
        if isinstance(problem, str):
            return Verdict(where, row, (problem,))
        if row.graph_version != problem.benchmark.version:
            problems.append(
                f"graph version {row.graph_version} is not {row.model}'s current version {problem.benchmark.version}"
            )
        if row.groups != problem.num_groups:
            problems.append(f"{row.groups} groups stored, the task's graph has {problem.num_groups}")
        if row.task_sha256 is not None and row.task_sha256 != problem.task_sha256:
            problems.append(
                f"task hash {row.task_sha256[:12]}... is not the task's {problem.task_sha256[:12]}... "
                "(another graph or other platform figures under the same names)"
            )
        if len(row.placement) != problem.num_groups:
            problems.append(
                f"placement has {len(row.placement)} entries, the task has {problem.num_groups} groups"
            )
        if problems:
            return Verdict(where, row, tuple(problems))
        try:
            result = problem.backend.evaluate(problem.validate(row.placement))
        except PlacementGymError as exc:
            return Verdict(where, row, (f"placement rejected: {exc}",))
        latency = result.latency if result.feasible else math.inf
        if not _same(latency, row.latency):
            problems.append(
                f"stored latency {_ms(row.latency)} but its placement replays at {_ms(latency)}"
                + ("" if result.feasible else f" (infeasible: {result.reason})")
            )
        elif not math.isnan(row.score):
            score = problem.score(latency)
            if not math.isclose(score, row.score, rel_tol=1e-6, abs_tol=1e-9):
                problems.append(f"stored score {row.score:.6f} but the replayed latency scores {score:.6f}")
        return Verdict(where, row, tuple(problems), latency)


def _static_problems(row: ResultRow) -> list[str]:
    """What is wrong with a row before replaying it."""
    from placement_gym.protocol import BACKEND, COARSENING, HELD_OUT_TASKS, TRAIN_TASKS

    problems = []
    if row.backend != BACKEND:
        problems.append(
            f"backend {row.backend!r} cannot be replayed (only {BACKEND!r} rows are deterministic)"
        )
    if row.protocol is not None:
        tasks = {(t.model, t.platform) for t in TRAIN_TASKS + HELD_OUT_TASKS}
        if (row.model, row.platform) not in tasks or row.coarsening != COARSENING:
            problems.append(
                f"task {row.model}/{row.platform} ({row.coarsening}) is not a task of protocol {row.protocol}"
            )
    if row.budget is not None and row.evaluations > row.budget:
        problems.append(f"{row.evaluations} evaluations spent, over the budget of {row.budget}")
    return problems


def _same(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL)


def _ms(latency: float) -> str:
    return "infeasible" if math.isinf(latency) else f"{latency * 1e3:.6f} ms"


def read_lines(paths: Iterable[Path]) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every non-blank line of the files."""
    for path in paths:
        if not Path(path).is_file():
            raise RecordError(f"{path}: no such results file")
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                if text.strip():
                    yield f"{path} line {number}", text


def validate(paths: Iterable[Path]) -> list[Verdict]:
    """Replay every row of the files (see the module docstring)."""
    replayer = Replayer()
    verdicts = []
    for where, text in read_lines(paths):
        try:
            row = parse_row(text, where)
        except RecordError as exc:
            verdicts.append(Verdict(where, None, (str(exc).removeprefix(f"{where}: "),)))
            continue
        verdicts.append(replayer.replay(row, where))
    return verdicts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rows", nargs="+", type=Path, help="results files (JSON lines)")
    parser.add_argument("--quiet", action="store_true", help="print only the rejected rows")


def run_from_args(args: argparse.Namespace) -> None:
    verdicts = validate(args.rows)
    for v in verdicts:
        if not (args.quiet and v.ok):
            print(v.line())
    rejected = sum(not v.ok for v in verdicts)
    if not verdicts:
        raise RecordError(f"no rows in {', '.join(map(str, args.rows))}")
    if rejected:
        raise RecordError(f"{rejected} of {len(verdicts)} rows rejected (see the REJECTED lines above)")
    print(f"all {len(verdicts)} rows reproduce")


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
