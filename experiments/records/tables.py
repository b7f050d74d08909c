"""The tables of record: each rendered from the rows stored for it, and checked against the docs.

Every table of ``docs/RESULTS.md`` sits between ``<!-- table:NAME -->`` and ``<!-- /table -->`` and is
rendered from ``results/NAME/`` (or, for the reference optima, from ``placement_gym/tasks/optima.json``)
by the function named in :data:`TABLES`. A figure the README quotes is written
``<!-- quote:NAME row="ROW" column="COLUMN" -->VALUE<!-- /quote -->`` and must equal that cell of the
table: one source, no copies that drift.

    python -m experiments.records.tables          # print every table
    python -m experiments.records.tables --write  # rewrite the tables in docs/RESULTS.md from their rows
    python -m experiments.records.tables --check  # exit 1 on missing or stale rows, a table that differs
                                                  # from its rows, or a README quote that differs

``--check`` fails when a table's rows are missing, when a row is of a graph the task no longer has (its
graph version or group count differs from the stored reference optimum's, or its optimum changed), when
a table in ``docs/RESULTS.md`` differs from what its rows give, and when a quoted figure differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.fidelity.stats import compare_runs
from experiments.records import rl_curves
from experiments.records.learned_vs_search import table as guided_table
from experiments.records.reference_optima import solver_table
from experiments.records.report import merge_rows, suite_table, summarise
from experiments.records.systems_table import targets_table
from experiments.runs import ResultRow, ResultStore
from placement_gym import HELD_OUT_MODELS
from placement_gym.tasks import OPTIMA_PATH, ReferenceOptimum, reference_optima

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
RESULTS_MD = ROOT / "docs" / "RESULTS.md"
README = ROOT / "README.md"


class StaleRows(Exception):
    """A table's rows are missing or of a graph, optimum or format the task no longer has."""


@dataclass(frozen=True)
class Table:
    """One table of record.

    Attributes:
        name: Its marker in ``docs/RESULTS.md`` and its folder ``results/<name>/``.
        render: Rows folder -> the Markdown table; raises :class:`StaleRows`.
    """

    name: str
    render: Callable[[Path], str]


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _reference(model: str, version: int, platform: str) -> ReferenceOptimum:
    ref = reference_optima().get(f"{model}/v{version}/{platform}/fused")
    if ref is None:
        raise StaleRows(f"no stored reference optimum for {model} v{version} on {platform} (fused)")
    return ref


def result_rows(folder: Path) -> list[ResultRow]:
    """The rows ``placement-gym bench --out folder`` wrote (``folder/results.jsonl``; a cell written twice:
    the last row), each checked to be of the task's current graph."""
    path = folder / "results.jsonl"
    if not path.is_file():
        raise StaleRows(f"{_shown(path)} is missing")
    rows, rejected = ResultStore(path).read()
    if rejected:
        raise StaleRows(f"{_shown(path)}: {len(rejected)} unreadable rows ({rejected[0][2]})")
    for row in rows:
        ref = _reference(row.model, row.graph_version, row.platform)
        if row.backend != "simulated" or row.coarsening != "fused" or row.groups != len(ref.placement):
            raise StaleRows(
                f"{_shown(path)}: {row.model} / {row.platform} / {row.method} seed {row.seed} has "
                f"{row.groups} groups ({row.backend}, {row.coarsening}); the task has {len(ref.placement)}"
            )
    if not rows:
        raise StaleRows(f"{_shown(path)} holds no rows")
    return merge_rows(rows)


def _jsonl_rows(folder: Path) -> tuple[Path, list[dict]]:
    """``folder/rows.jsonl`` and its rows; a missing or empty file is :class:`StaleRows`."""
    path = folder / "rows.jsonl"
    if not path.is_file():
        raise StaleRows(f"{_shown(path)} is missing")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise StaleRows(f"{_shown(path)} holds no rows")
    return path, rows


def _check_scored(
    path: Path, label: str, model: str, version: int, platform: str, groups: int, optimum_ms: float
) -> None:
    """Raise :class:`StaleRows` for a row (``label``) of another group count or optimum than the stored
    reference of its task."""
    ref = _reference(model, version, platform)
    if groups != len(ref.placement) or abs(optimum_ms - ref.latency * 1e3) > 1e-9:
        raise StaleRows(f"{_shown(path)}: {label} is of another graph or optimum than the stored reference")


def guided_rows(folder: Path) -> list[dict]:
    """The rows of :mod:`experiments.records.learned_vs_search` in ``folder/rows.jsonl``, checked likewise (and
    against the optimum they were scored with)."""
    path, rows = _jsonl_rows(folder)
    for r in rows:
        label = f"{r['model']} / {r['platform']} / {r['method']} seed {r['seed']}"
        _check_scored(path, label, r["model"], r["graph_version"], r["platform"], len(r["placement"]), r["optimum_ms"])
    return rows


def _behaviour_cloning(folder: Path) -> str:
    """The behaviour-cloning example's rows (``examples/behaviour_cloning.py --out``): one per task."""
    path, rows = _jsonl_rows(folder)
    lines = ["| split | task | BC score | HEFT score | BC placement feasible |", "|---|---|---|---|---|"]
    for split in ("train", "held-out"):
        scores = []
        for r in (r for r in rows if r["split"] == split):
            label = f"{r['model']} / {r['platform']}"
            _check_scored(path, label, r["model"], r["graph_version"], r["platform"], r["groups"], r["optimum_ms"])
            scores.append((r["bc_score"], r["heft_score"]))
            feasible = "yes" if r["feasible"] else "no"
            lines.append(
                f"| {split} | {r['model']} / {r['platform']} | {r['bc_score']:.3f} | {r['heft_score']:.3f} "
                f"| {feasible} |"
            )
        for name, fn in (("mean", np.mean), ("median", np.median)):
            if scores:
                bc, heft = fn(np.array(scores), axis=0)
                lines.append(f"| {split} | {name} of {len(scores)} | {bc:.3f} | {heft:.3f} | |")
    return "\n".join(lines)


def _optima(held_out: bool) -> Callable[[Path], str]:
    def render(_: Path) -> str:
        refs = [r for r in reference_optima().values() if (r.model in HELD_OUT_MODELS) == held_out]
        if not refs:
            raise StaleRows(f"{_shown(OPTIMA_PATH)} holds no reference optima")
        return solver_table(sorted(refs, key=lambda r: (r.platform, r.model)))

    return render


def _suite(folder: Path) -> str:
    return suite_table(summarise(result_rows(folder)))


def _systems(folder: Path) -> str:
    rows = result_rows(folder)
    small = [r for r in rows if r.budget == 500]
    large = [r for r in rows if r.budget == 2000]
    return targets_table(small, large).strip()


def _guided(held_out: bool = False) -> Callable[[Path], str]:
    def render(folder: Path) -> str:
        return guided_table(guided_rows(folder), set(HELD_OUT_MODELS) if held_out else set())

    return render


def _curves(folder: Path) -> str:
    """:mod:`experiments.records.rl_curves`' rows (``folder/rows.jsonl``) as its curve table, each row checked to be
    of the task's current graph and optimum."""
    path, rows = _jsonl_rows(folder)
    for r in rows:
        model, platform = r["task"].split(":")
        version, groups, optimum_ms = r.get("graph_version", -1), r.get("groups", -1), r.get("optimum_ms", 0.0)
        _check_scored(path, f"{r['task']} / {r['method']}", model, version, platform, groups, optimum_ms)
    return rl_curves.curve_table(rows)


def _fidelity(folder: Path) -> str:
    paths = sorted(folder.glob("run*.json"))
    if not paths:
        raise StaleRows(f"{_shown(folder)} holds no run*.json")
    _, lines = compare_runs([json.loads(p.read_text()) for p in paths], [p.stem for p in paths])
    start = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    return "\n".join(lines[start:]).strip()


#: The tables of record, in the order of docs/RESULTS.md (their commands are written there).
TABLES: tuple[Table, ...] = (
    Table("optima", _optima(held_out=False)),
    Table("optima-heldout", _optima(held_out=True)),
    Table("suite-scores", _suite),
    Table("heldout-scores", _suite),
    Table("rl-ablations-igpu", _suite),
    Table("guided", _guided()),
    Table("guided-model-parallel", _guided()),
    Table("guided-heldout", _guided(held_out=True)),
    Table("systems", _systems),
    Table("curves", _curves),
    Table("sim-fidelity", _fidelity),
    Table("behaviour-cloning", _behaviour_cloning),
)
BY_NAME = {t.name: t for t in TABLES}

_TABLE_BLOCK = re.compile(r"<!-- table:([\w-]+) -->\n(.*?)<!-- /table -->", re.S)
_QUOTE = re.compile(r'<!-- quote:([\w-]+) row="([^"]+)" column="([^"]+)" -->(.*?)<!-- /quote -->')


def render(name: str) -> str:
    """Table ``name`` rendered from its rows."""
    table = BY_NAME[name]
    return table.render(RESULTS / name).strip()


def cell(markdown: str, row: str, column: str) -> str:
    """The cell of ``markdown`` (a table) in ``column`` of the row whose first cells read ``row``
    (``"bert | multi-accel"`` matches a row starting with those two cells).

    Raises:
        KeyError: If there is no such row or column, or several rows match.
    """
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    split = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    header = split[0]
    if column not in header:
        raise KeyError(f"no column {column!r} (columns: {header})")
    want = [c.strip() for c in row.split("|")]
    found = [cells for cells in split[2:] if cells[: len(want)] == want]
    if len(found) != 1:
        raise KeyError(f"{len(found)} rows start with {row!r}")
    return found[0][header.index(column)]


def check(results_md: Path = RESULTS_MD, readme: Path = README) -> list[str]:
    """Everything wrong with the tables of record and the README's quotes (empty: all good)."""
    problems: list[str] = []
    rendered: dict[str, str] = {}
    for table in TABLES:
        try:
            rendered[table.name] = render(table.name)
        except StaleRows as exc:
            problems.append(f"{table.name}: {exc}")
    shown = dict(_TABLE_BLOCK.findall(results_md.read_text()))
    for name in sorted(set(shown) - set(BY_NAME)):
        problems.append(f"{results_md.name} shows a table {name!r} that is not a table of record")
    for name, text in rendered.items():
        if name not in shown:
            problems.append(f"{results_md.name} does not show table {name!r}")
        elif shown[name].strip() != text:
            problems.append(f"{results_md.name}: table {name!r} differs from its rows (--write rewrites it)")
    for name, row, column, value in _QUOTE.findall(readme.read_text()):
        if name not in rendered:
            problems.append(f"{readme.name} quotes table {name!r}, which is not a table of record or failed")
            continue
        try:
            actual = cell(rendered[name], row, column)
        except KeyError as exc:
            problems.append(f"{readme.name} quotes {name} [{row}] [{column}]: {exc}")
            continue
        if value != actual:
            problems.append(
                f"{readme.name} quotes {value!r} from {name} [{row}] [{column}]; the table says {actual!r}"
            )
    return problems


def write(results_md: Path = RESULTS_MD) -> None:
    """Rewrite every table block of ``results_md`` from its rows."""
    text = results_md.read_text()

    def replace(match: re.Match) -> str:
        name = match.group(1)
        body = render(name) if name in BY_NAME else match.group(2)
        return f"<!-- table:{name} -->\n{body}\n<!-- /table -->"

    results_md.write_text(_TABLE_BLOCK.sub(replace, text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="fail on anything stale or drifting")
    action.add_argument("--write", action="store_true", help="rewrite the tables in docs/RESULTS.md")
    parser.add_argument("names", nargs="*", help=f"tables to print (default: all of {', '.join(BY_NAME)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BY_NAME))
    if unknown:
        parser.error(f"unknown tables {unknown}; known: {', '.join(BY_NAME)}")
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(TABLES)} tables of record: " + ("ok" if not problems else f"{len(problems)} problems"))
        return 1 if problems else 0
    if args.write:
        write()
        return 0
    for name in args.names or BY_NAME:
        print(f"<!-- table:{name} -->\n{render(name)}\n<!-- /table -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
