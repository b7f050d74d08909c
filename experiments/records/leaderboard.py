"""The leaderboard's rows and page: run the protocol's cells of a tier resumably (:func:`run_tier`),
read the stored rows that replay (:func:`stored_rows`) and render ``docs/LEADERBOARD.md`` (:func:`render`).
The command is ``placement-gym leaderboard`` (:mod:`experiments.cli.leaderboard`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from experiments.defaults import LEADERBOARD_RESULTS as RESULTS
from experiments.defaults import LEADERBOARD_PAGE as PAGE  # noqa: F401 (re-exported)
from experiments.records import curves_page, identical_methods
from placement_gym.errors import ConfigError
from placement_gym.protocol import SEEDLESS  # noqa: F401 (re-exported: methods run once per task)
from placement_gym.results import ResultRow, ResultStore, first_per_cell

#: Every method of the leaderboard, in run order (cheap classical baselines and searches first, then the
#: MILP-based methods with a 30 s time limit, then the expensive published systems, then the SB3 learners).
METHODS: tuple[str, ...] = (
    "single_device",
    "random_search",
    "heft",
    "m_topo",
    "m_etf",
    "m_sct",
    "metis",
    "local_search",
    "simulated_annealing",
    "guided_improvement",
    "hsdag",
    "milp:time_limit=30",
    "moirai:time_limit=30",
    "exact:segment_time_limit=10,time_limit=30",
    "grouper_placer",
    "rl_placement",
    "placeto",
    "ppo_gnn",
    "a2c_gnn",
    "maskable_ppo_gnn",
    "ppo_mlp",
    "ppo_gnn:observation=graph",
    "a2c_gnn:observation=graph",
)
#: The methods of the ``large`` tier (5,000 distinct placements), in run order: the searches, the SB3
#: learners and the torch PPO example, then the published systems (seed 0 only where a run takes over 10
#: minutes on one core).
LARGE_METHODS: tuple[str, ...] = (
    "random_search",
    "local_search",
    "simulated_annealing",
    "guided_improvement",
    "a2c_gnn",
    "ppo_gnn",
    "maskable_ppo_gnn",
    "ppo_torch:train",
    "pretrained_ppo",
    "guided_ppo",
    "maskable_ppo_improve",
    "hsdag",
    "rl_placement",
    "grouper_placer",
    "placeto",
)
#: The methods each tier is run for (its page names those without rows); other tiers: :data:`METHODS`.
TIER_METHODS: dict[str, tuple[str, ...]] = {"large": LARGE_METHODS}
#: Progress lines, flushed (the run is long and usually logs to a file).
_PRINT = functools.partial(print, flush=True)


def method_name(spec: str) -> str:
    """The registry name of a method spec (``milp:time_limit=30`` -> ``milp``)."""
    return spec.partition(":")[0]


def store_path(results: Path, tier: str, spec: str) -> Path:
    """The rows file of one method in one tier."""
    return results / tier / f"{method_name(spec)}.jsonl"


def code_version() -> str:
    """The commit of the code running (``+dirty`` if tracked files outside ``results/`` have changes), or
    ``unknown``."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def compact(row: ResultRow) -> ResultRow:
    """``row`` with only scalar extras (losses and other lists stay out of the committed store)."""
    extra = {k: v for k, v in row.extra.items() if isinstance(v, (int, float, str, bool)) or v is None}
    return dataclasses.replace(row, extra=extra)


def run_tier(
    tier: str,
    methods: Sequence[str] = METHODS,
    results: Path = RESULTS,
    tasks: Sequence[str] | None = None,
    log: Callable[[str], None] = _PRINT,
    ray_address: str | None = None,
    ray_cpus: float = 1.0,
    seeds: Sequence[int] | None = None,
) -> int:
    """Run every missing cell of ``tier`` for ``methods`` (in order); returns the number of cells run.
    ``seeds`` (default: the protocol's) are the seeds of the seeded methods (a seedless one runs seed 0).
    With ``ray_address`` the cells run as Ray tasks of ``ray_cpus`` CPUs each (:mod:`experiments.ray_cells`).

    Raises:
        ConfigError: If a seed is not one of the protocol's.
    """
    from agents.specs import parse_spec
    from experiments.grid import run_cell
    from experiments.ray_cells import Cell, Ran, cell_runner
    from placement_gym.protocol import BACKEND, COARSENING, SEEDS, VERSION, resolve_tasks, tier_budget
    from placement_gym.results import cell_key
    from placement_gym.tasks import reference_optimum
    from placement_gym.zoo import MODELS

    budget = tier_budget(tier)
    run_seeds = tuple(dict.fromkeys(SEEDS if seeds is None else seeds))
    outside = [s for s in run_seeds if s not in SEEDS]
    if outside or not run_seeds:
        raise ConfigError(
            f"seeds {outside or '(none)'} are not seeds of protocol {VERSION} ({', '.join(map(str, SEEDS))})"
        )
    for spec in methods:  # an unknown method or a bad argument fails now, not after an hour of other cells
        parse_spec(spec)
    task_list = resolve_tasks(list(tasks) if tasks else ["train"])
    code = code_version()
    ran = 0

    def store_row(store: ResultStore, key: tuple, spec: str, task_name: str, seed: int, cell: Ran) -> None:
        nonlocal ran
        row = compact(cell.row)
        if math.isnan(row.score):  # the protocol's row carries it; computed here if not
            ref = reference_optimum(row.model, row.graph_version, row.platform, row.coarsening)
            row = dataclasses.replace(row, score=ref.score(row.latency))
        extra = {**row.extra, "code": code, "cpu_seconds": round(cell.cpu_seconds, 3)}  # wall time: shared
        row = dataclasses.replace(row, extra=extra)
        store.append(row)
        store.release(key)  # append releases the row's own key; this one too if they differ
        ran += 1
        log(
            f"{tier} {spec} {task_name} seed {seed}: score {row.score:.3f}, {row.evaluations} evals, "
            f"{row.wall_time:.1f} s wall, {cell.cpu_seconds:.1f} s CPU"
        )

    runner = cell_runner(ray_address, ray_cpus)  # local: each cell runs at submit; Ray: as tasks
    for spec in methods:
        store = ResultStore(store_path(results, tier, spec))
        for reason in store.set_aside():
            log(f"note: set aside {reason} (its cell runs again)")
        cell_seeds = SEEDS[:1] if method_name(spec) in SEEDLESS else run_seeds
        done = {
            (r.model, r.platform, r.seed)
            for r in store.rows()
            if r.method == spec and r.budget == budget and r.protocol == VERSION
        }
        for task in task_list:
            for seed in cell_seeds:
                if (task.model, task.platform, seed) in done:
                    continue
                key = cell_key(
                    task.model, MODELS[task.model].version, task.platform, BACKEND, COARSENING, spec, seed,
                    budget, VERSION,
                )  # fmt: skip
                if not store.claim(key):  # stored meanwhile, or another live process runs it
                    continue
                args = (task.model, spec, seed, budget, task.platform, BACKEND, COARSENING)
                cell = Cell(key, run_cell, args, dict(protocol_version=VERSION, tier=tier))
                runner.submit(cell, store, functools.partial(store_row, store, key, spec, task.name, seed))
    runner.drain()
    return ran


def stored_rows(
    results: Path = RESULTS, validated: bool = True, rejected: list[str] | None = None
) -> dict[str, list[ResultRow]]:
    """Every stored leaderboard row of the current protocol, by the tier it records; with ``validated``
    only the rows that pass ``placement-gym validate`` (replayed; verdicts cached per code version) and
    are filed under their own tier's folder. ``rejected`` (if given) receives ``"<file> line <n>: reason"``
    of each row left out."""
    from experiments.records.validation import validate
    from placement_gym.protocol import TIERS, VERSION

    out: dict[str, list[ResultRow]] = {}
    rejected = [] if rejected is None else rejected
    for folder in sorted(p for p in results.glob("*") if p.is_dir()):
        paths = [p for p in sorted(folder.glob("*.jsonl")) if not p.name.endswith(".rejected.jsonl")]
        if not paths:
            continue
        if validated:
            rows = []
            for v in validate(paths):
                if not v.ok:
                    rejected.append(f"{v.where}: {'; '.join(v.problems)}")
                elif v.row.tier != folder.name:
                    rejected.append(f"{v.where}: a row of tier {v.row.tier!r} filed under {folder.name}/")
                else:
                    rows.append(v.row)
            rows = first_per_cell(rows)
        else:
            rows = [r for path in paths for r in ResultStore(path).rows()]
        for row in rows:
            if row.protocol == VERSION and row.tier in TIERS:
                out.setdefault(row.tier, []).append(row)
    return out


def md_name(name: str) -> str:
    """A method name as table text: as code if it is a plain spec, else with every character that
    Markdown or HTML reads escaped (a name cannot add cells, rows, links or tags to the page)."""
    if re.fullmatch(r"[A-Za-z0-9_.:=,+-]{1,200}", name):
        return f"`{name}`"
    text = " ".join(name.split())[:200]
    out = []
    for ch in text:
        if ch in "<>&|\"`*_[](){}#!~\\":
            out.append(f"&#{ord(ch)};")
        elif not ch.isprintable():
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def _interval(point: float, low: float, high: float) -> str:
    return f"{point:.3f} [{low:.3f}, {high:.3f}]"


#: The heading of each track's table.
TRACK_TITLES = {
    "black-box": "Black-box track: methods that only evaluate placements",
    "white-box": "White-box track: methods that also read the cost model",
}


@functools.lru_cache(maxsize=None)
def spec_track(spec: str) -> str:
    """The track the method of ``spec`` declares (``agents.specs.method_track``)."""
    from agents.specs import method_track

    return method_track(spec)


def row_track(row: ResultRow) -> str:
    """The track a row ran in: its own record, or, for a row written before tracks, its method's."""
    return row.track or spec_track(row.method)


def tier_table(
    rows: Sequence[ResultRow],
    tier: str,
    track: str | None = None,
    tier_tasks: set[tuple[str, str]] | None = None,
) -> list[str]:
    """The page's section of one tier and track: the ranked table (IQM order), the per-task scores, the
    methods left out and why. A method without rows on one of ``tier_tasks`` (default: the tasks of
    ``rows``; the page passes those of the whole tier) is not ranked (its run is not complete)."""
    from experiments.aggregate import rank_methods
    from placement_gym.protocol import SEEDS, TIERS, TRAIN_TASKS

    train = tier_tasks if tier_tasks is not None else {(r.model, r.platform) for r in rows}
    covered: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        covered.setdefault(r.method, set()).add((r.model, r.platform))
    partial = {m: len(train & c) for m, c in covered.items() if not train <= c}
    ranking = rank_methods([r for r in rows if r.method not in partial])
    matrices, tasks, left_out = ranking.matrices, ranking.tasks, dict(ranking.left_out)
    left_out.update({m: f"rows on {n} of {len(train)} tasks so far" for m, n in partial.items()})
    by_method = {**ranking.by_method}
    for r in rows:
        if r.method in partial:
            by_method.setdefault(r.method, []).append(r)
    stats, order = ranking.stats, ranking.order
    heading = (
        f"### Tier `{tier}`, {TRACK_TITLES[track]}"
        if track is not None
        else f"## Tier `{tier}` ({TIERS.get(tier, '?')} evaluations per run)"
    )
    lines = [heading, ""] + (
        [
            "| rank | method | IQM [95% CI] | optimality gap [95% CI] | runs | evaluations | wall time (s) "
            "| code |",
            "|---|---|---|---|---|---|---|---|",
        ]
        if order
        else ["No method of this track has rows on every task of the tier yet."]
    )
    for rank, m in enumerate(order, 1):
        rs = by_method[m]
        codes = sorted({str(r.extra.get("code", "unknown")) for r in rs})
        lines.append(
            f"| {rank} | {md_name(m)} | {_interval(*stats[m]['iqm'])} | {_interval(*stats[m]['optimality_gap'])} | "
            f"{len(rs)} | {np.mean([r.evaluations for r in rs]):.0f} | {np.mean([r.wall_time for r in rs]):.1f} | "
            f"{', '.join(codes)} |"
        )
    if left_out:
        lines += [
            "",
            "Not ranked: " + "; ".join(f"{md_name(m)}: {why}" for m, why in sorted(left_out.items())) + ".",
        ]
    lines += identical_methods.note(rows)
    short = {m: coverage(rs) for m, rs in sorted(by_method.items()) if not _complete(m, rs)}
    if short:
        lines += [
            "",
            "Runs short of the protocol's "
            f"{len(TRAIN_TASKS)} tasks x seeds {_seed_text(set(SEEDS))}: "
            + "; ".join(f"{md_name(m)}: {text}" for m, text in short.items())
            + ".",
        ]
    if not order:
        return lines + [""]
    lines += [
        "",
        f"Mean normalised score per task (over its runs), tier `{tier}`"
        + (f", {track}:" if track is not None else ":"),
        "",
        "| method | " + " | ".join(f"{m} / {p}" for m, p in tasks) + " |",
        "|---|" + "---|" * len(tasks),
    ]
    lines += [f"| {md_name(m)} | " + " | ".join(f"{v:.3f}" for v in matrices[m].mean(axis=0)) + " |" for m in order]
    return lines + [""]


def split_masked(
    rows_by_tier: dict[str, list[ResultRow]],
) -> tuple[dict[str, list[ResultRow]], list[ResultRow]]:
    """The rows of every task but the mask-binding ones, by tier, and the mask-binding tasks' rows (the
    ``masked`` split is ranked apart, so that the train tables compare every method on the same tasks)."""
    from placement_gym.protocol import MASKED_TASKS

    masked_tasks = {(t.model, t.platform) for t in MASKED_TASKS}
    rest = {
        tier: [r for r in rows if (r.model, r.platform) not in masked_tasks] for tier, rows in rows_by_tier.items()
    }
    masked = [r for rows in rows_by_tier.values() for r in rows if (r.model, r.platform) in masked_tasks]
    return rest, masked


def _seed_text(seeds: set[int]) -> str:
    """``0-4``, ``0, 2``, ``0 only``."""
    order = sorted(seeds)
    if len(order) == 1:
        return f"{order[0]} only"
    if order == list(range(order[0], order[-1] + 1)):
        return f"{order[0]}-{order[-1]}"
    return ", ".join(map(str, order))


def coverage(rows: Sequence[ResultRow]) -> str:
    """What one method's rows of a tier cover: ``12 tasks x seeds 0-2``, ``5 of 12 tasks x seed 0 only``
    (seed sets that differ between tasks are named per count of tasks)."""
    from placement_gym.protocol import TRAIN_TASKS

    by_task: dict[tuple[str, str], set[int]] = {}
    for r in rows:
        by_task.setdefault((r.model, r.platform), set()).add(r.seed)
    total = len(TRAIN_TASKS)
    sets = sorted({frozenset(v) for v in by_task.values()}, key=lambda v: (-len(v), sorted(v)))
    parts = []
    for seeds in sets:
        n = sum(1 for v in by_task.values() if v == seeds)
        word = "seed" if len(seeds) == 1 else "seeds"
        parts.append(f"{n if n == total else f'{n} of {total}'} tasks x {word} {_seed_text(set(seeds))}")
    return ", ".join(parts)


def _complete(method: str, rows: Sequence[ResultRow]) -> bool:
    """Whether ``rows`` cover every train task with every protocol seed (a seedless method: seed 0)."""
    from placement_gym.protocol import SEEDS, TRAIN_TASKS

    seeds = SEEDS[:1] if method_name(method) in SEEDLESS else SEEDS
    cells = {(r.model, r.platform, r.seed) for r in rows}
    return all((t.model, t.platform, s) in cells for t in TRAIN_TASKS for s in seeds)


#: What the page says of a tier besides its tables.
TIER_NOTES: dict[str, str] = {
    "large": (
        "The `large` tier is run where compute fits: the searches with seeds 0-4, the learners with "
        "seeds 0-2 (or more), and a method whose `large` run takes over 10 minutes on one core (the "
        "REINFORCE systems, Placeto) with seed 0 only. Each table names every method whose runs fall short "
        "of the protocol's; a method with rows on some tasks only is not ranked until its run is complete. "
        "A run resumes where it stopped: "
        "`placement-gym leaderboard --run large --methods NAME --seeds 0 1 2`."
    ),
}


def render(rows_by_tier: dict[str, list[ResultRow]], rejected: Sequence[str] = ()) -> str:
    """The leaderboard page: one ranked table per tier, of that tier's rows only (``rejected``: the rows
    validation left out, counted on the page)."""
    from placement_gym.protocol import SEEDS, TIERS, TRAIN_TASKS, VERSION

    lines = [
        "# Leaderboard",
        "",
        "<!-- generated by `placement-gym leaderboard` from results/leaderboard/; do not edit by hand -->",
        "",
        f"Protocol {VERSION} (docs/protocol.md): the {len(TRAIN_TASKS)} train tasks, seeds "
        f"{', '.join(map(str, SEEDS))} (a seedless method's one run per task counts for every seed), a budget "
        "of distinct evaluated placements per run. A run's score is the normalised score of its placement's "
        "simulated latency: 0 = the best single device, 1 = the task's proven optimum. IQM: interquartile "
        "mean over all runs of all tasks; optimality gap: the mean shortfall below 1 (lower is better); both "
        "with 95% stratified-bootstrap intervals (`experiments.aggregate`). Runs, evaluations and wall time "
        "are per method: rows stored, mean evaluations and mean seconds per run (wall time on a shared, "
        "loaded machine). `code` is the commit that produced the rows. Every row replays: "
        "`placement-gym validate results/leaderboard/<tier>/*.jsonl`.",
        "",
        "Each tier ranks two tracks apart (docs/protocol.md): black-box methods only evaluate placements; "
        "white-box methods also read the analytic cost model (list schedulers, solvers, HEFT-started "
        "searches, and the learners whose observation holds the device-aware costs). A method's track is "
        "what it declares (`agents.specs.method_track`), recorded in its rows.",
        "",
        "Made with `placement-gym leaderboard --run <tier>` (resumable; `--methods` picks methods) and regenerated "
        "with `placement-gym leaderboard`. Every method runs with its defaults, except the MILP-based ones: "
        "`milp` and `moirai` with a 30 s HiGHS time limit, `exact` with 10 s per segment MILP (and 30 s for "
        "the whole solve where memory can bind). These limits are wall-clock, and the rows were made on two "
        "cores shared with other jobs (load average 10-23), so these methods got a fraction of a core and an "
        "idle machine may give them better scores.",
        "",
    ]
    rows_by_tier, masked = split_masked(rows_by_tier)
    for tier in sorted((t for t in rows_by_tier if t in TIERS), key=lambda t: (TIERS[t], t)):
        rows = [r for r in rows_by_tier[tier] if r.protocol == VERSION and r.tier == tier]
        if rows:
            lines += [f"## Tier `{tier}` ({TIERS.get(tier, '?')} evaluations per run)", ""]
            if tier in TIER_NOTES:
                lines += [TIER_NOTES[tier], ""]
            ran = {r.method for r in rows}
            missing = [m for m in TIER_METHODS.get(tier, METHODS) if m not in ran]
            if missing:
                lines += ["No rows at this tier yet: " + ", ".join(f"`{m}`" for m in missing) + ".", ""]
            for track in TRACK_TITLES:
                part = [r for r in rows if row_track(r) == track]
                if part:
                    lines += tier_table(part, tier, track, {(r.model, r.platform) for r in rows})
    from experiments.records import masked_task  # builds the tasks' problems: imported only to write the page

    lines += masked_task.section([r for r in masked if r.protocol == VERSION])
    lines += curves_page.section(rows_by_tier)
    if rejected:
        lines += [
            f"{len(rejected)} stored row{'s' if len(rejected) != 1 else ''} did not pass "
            f"`placement-gym validate` and {'are' if len(rejected) != 1 else 'is'} not shown.",
            "",
        ]
    lines += SUBMISSION
    return "\n".join(lines) + "\n"


SUBMISSION = [
    "## Submitting a result",
    "",
    "1. Run your method on every train task with every seed of a tier, through the protocol (the budget",
    "   counts distinct placements; the problem refuses a new placement past it):",
    "",
    "   ```bash",
    "   placement-gym bench --tier standard --methods my_pkg.my_module:MyAgent --out results/my-agent",
    "   ```",
    "",
    "   or, for a method of `agents.METHODS`, `placement-gym leaderboard --run standard --methods NAME`,",
    "   which writes `results/leaderboard/standard/NAME.jsonl` and regenerates this page.",
    "2. Check that every row replays (exit status 0, one `OK` line per row):",
    "",
    "   ```bash",
    "   placement-gym validate results/my-agent/results.jsonl",
    "   ```",
    "",
    "3. Open a pull request adding the rows under `results/leaderboard/<tier>/` (one JSON line per run,",
    "   the format of `placement_gym.results.ResultRow`: task (`model`, `graph_version`, `platform`,",
    "   `backend`, `coarsening`, `groups`), `method`, `seed`, `budget`, `tier`, `protocol`, the",
    "   `placement`, its `latency` and `score`, `evaluations`, `wall_time`, the `history` at fixed",
    "   checkpoints, `versions`), and the regenerated page (`placement-gym leaderboard`). CI replays every",
    "   stored row on the simulated backend; a row whose placement, latency, score, graph version or task",
    "   does not match is rejected.",
]
