"""The transfer page, ``docs/LEADERBOARD-transfer.md``: protocol transfer-v1's rows ranked per track.

Written by ``placement-gym leaderboard`` next to the per-task page, from the rows under
``results/leaderboard/transfer``: one table per track (black-box, white-box) with each method's IQM and
optimality gap of the normalised scores (95% stratified-bootstrap intervals, :mod:`experiments.aggregate`),
its pretraining budget (env steps, CPU-seconds) and its mean score per held-out task.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from placement_gym.errors import PlacementGymError
from placement_gym.results import ResultRow, ResultStore, first_per_cell
from placement_gym.transfer import BUDGET, PRETRAIN_CPU_SECONDS, TRANSFER_TASKS, VERSION, Pretraining

#: The generated page.
PAGE = Path("docs") / "LEADERBOARD-transfer.md"
#: Tracks in page order; rows of a method with no declared track go to the last table.
TRACKS = ("black-box", "white-box")
#: Methods the page is expected to show (the references and the project's pretrained learners).
EXPECTED = ("pretrained_ppo", "guided_ppo", "guided_improvement", "heft", "local_search", "random_search")
#: Why a method the track should show is not on it.
MISSING = (
    "Placeto in its generalising form is missing: `placeto` takes a pretrained `policy=`, but no Placeto "
    "policy pretrained on the train tasks ships and nothing pretrains one; see docs/protocol.md, \"The "
    "transfer track\"."
)


def transfer_rows(results: Path, validated: bool = True, rejected: list[str] | None = None) -> list[ResultRow]:
    """Every transfer-v1 row stored under ``results`` (``*.jsonl``, rejected files left out); with
    ``validated`` only the rows that pass ``placement-gym validate`` (``rejected`` receives
    ``"<file> line <n>: reason"`` of each row left out)."""
    from experiments.records.validation import validate

    paths = [p for p in sorted(results.glob("*.jsonl")) if not p.name.endswith(".rejected.jsonl")]
    if not paths:
        return []
    if not validated:
        return [r for path in paths for r in ResultStore(path).rows() if r.protocol == VERSION]
    rows = []
    for v in validate(paths):
        if v.ok and v.row.protocol == VERSION:
            rows.append(v.row)
        elif not v.ok and rejected is not None:
            rejected.append(f"{v.where}: {'; '.join(v.problems)}")
    return first_per_cell(rows)


def row_track(row: ResultRow) -> str:
    """The track a row ran in: its own, else its method spec's declared track, else ``"undeclared"``."""
    if row.track:
        return row.track
    from agents.specs import method_track

    try:
        return method_track(row.method)
    except (PlacementGymError, OSError, ValueError):  # a method this code cannot build (e.g. a module that is not installed)
        return "undeclared"


def _pretraining_cells(rows: Sequence[ResultRow]) -> tuple[str, str]:
    records = {str(r.extra.get("pretraining")) for r in rows}
    rec = Pretraining.from_dict(rows[0].extra.get("pretraining") or {"env_steps": 0, "evaluations": 0,
                                                                        "cpu_s": 0.0, "wall_s": 0.0})
    if len(records) > 1:
        return "varies", "varies"
    steps = f"{rec.env_steps:,}"
    if rec.cpu_s is not None:
        cpu = f"{rec.cpu_s:,.0f}"
    elif rec.wall_s is not None:
        cpu = f"<= {rec.wall_s:,.0f} (wall)"
    else:
        cpu = "-"
    return steps, cpu


def track_table(rows: Sequence[ResultRow], track: str) -> list[str]:
    """One track's section: the ranked table and the mean score per task."""
    from experiments.aggregate import rank_methods

    ranking = rank_methods(list(rows))
    matrices, tasks, left_out = ranking.matrices, ranking.tasks, ranking.left_out
    stats, order, by_method = ranking.stats, ranking.order, ranking.by_method

    def cell(value: tuple[float, float, float]) -> str:
        return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"

    lines = [
        f"## {track.capitalize()} track",
        "",
        "| rank | method | IQM [95% CI] | optimality gap [95% CI] | runs | pretraining env steps | "
        "pretraining CPU-s | evaluations | wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rank, m in enumerate(order, 1):
        rs = by_method[m]
        steps, cpu = _pretraining_cells(rs)
        lines.append(
            f"| {rank} | `{m}` | {cell(stats[m]['iqm'])} | {cell(stats[m]['optimality_gap'])} | {len(rs)} | "
            f"{steps} | {cpu} | {np.mean([r.evaluations for r in rs]):.0f} | "
            f"{np.mean([r.wall_time for r in rs]):.1f} |"
        )
    if left_out:
        lines += ["", "Not ranked: " + "; ".join(f"`{m}`: {why}" for m, why in sorted(left_out.items())) + "."]
    lines += [
        "",
        "Mean normalised score per held-out task (over its runs):",
        "",
        "| method | " + " | ".join(f"{m} / {p}" for m, p in tasks) + " |",
        "|---|" + "---|" * len(tasks),
    ]
    lines += [f"| `{m}` | " + " | ".join(f"{v:.3f}" for v in matrices[m].mean(axis=0)) + " |" for m in order]
    return lines + [""]


def render_transfer(rows: Sequence[ResultRow], missing_note: str = MISSING, rejected: Sequence[str] = ()) -> str:
    """The transfer page (``rejected``: the rows validation left out, counted on the page)."""
    tasks = ", ".join(f"`{t.name}`" for t in TRANSFER_TASKS)
    lines = [
        "# Leaderboard: the transfer track",
        "",
        "<!-- generated by `placement-gym leaderboard` from results/leaderboard/transfer/; do not edit by hand -->",
        "",
        f"Protocol {VERSION} (docs/protocol.md, \"The transfer track\"): a method pretrains on the 12 train tasks "
        f"(and may use the pretraining-only families), within at most {PRETRAIN_CPU_SECONDS:,.0f} CPU-seconds, "
        f"then places each held-out task with {BUDGET} distinct placements per run, seeds 0-4, with no "
        f"task-specific training beyond those placements. Held-out tasks: {tasks}. A run's score is the "
        "normalised score of its placement's simulated latency: 0 = the best single device, 1 = the task's "
        "stored optimum. IQM and optimality gap over all runs of all tasks, with 95% stratified-bootstrap "
        "intervals (`experiments.aggregate`). The pretraining columns are the method's stated budget, read "
        "from its policy's metadata or its `pretraining.json` (`<= N (wall)`: only the wall time of a "
        "single-threaded run was recorded). Evaluations and wall time are means per run, on a shared, loaded "
        "machine.",
        "",
        "Made with `placement-gym transfer run` (resumable) and regenerated with `placement-gym leaderboard`. "
        "Every row replays: `placement-gym validate results/leaderboard/transfer/*.jsonl`.",
        "",
    ]
    by_track: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_track.setdefault(row_track(r), []).append(r)
    for track in (*TRACKS, *sorted(set(by_track) - set(TRACKS))):
        if track in by_track:
            lines += track_table(by_track[track], track)
        else:
            lines += [f"## {track.capitalize()} track", "", "No rows yet.", ""]
    shown = {r.method.partition(":")[0] for r in rows}
    absent = [m for m in EXPECTED if m not in shown]
    if absent:
        lines += ["No rows yet: " + ", ".join(f"`{m}`" for m in absent) + ".", ""]
    if missing_note:
        lines += [missing_note, ""]
    if rejected:
        lines += [f"{len(rejected)} stored rows are left out because they do not validate "
                  "(`placement-gym validate results/leaderboard/transfer/*.jsonl` names them).", ""]  # fmt: skip
    return "\n".join(lines) + "\n"
