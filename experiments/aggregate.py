"""Aggregates of protocol rows, as rliable computes them (Agarwal et al., "Deep Reinforcement Learning at the
Edge of the Statistical Precipice", NeurIPS 2021): per tier and method, the interquartile mean (IQM) and
optimality gap of the normalised scores with 95% stratified-bootstrap intervals, the probability of
improvement between methods, performance profiles and score-vs-evaluations curves.

The scores of a method form a ``(runs, tasks)`` matrix (a seedless method's one run per task counts once
for each seed the seeded methods ran). The statistics are rliable's:

* IQM: the mean of the middle 50% of all runs x tasks scores (``scipy.stats.trim_mean(..., 0.25)``);
* optimality gap: ``1 - mean(min(score, 1))``;
* probability of improvement ``P(X > Y)``: per task the Mann-Whitney ``U / (n m)`` (ties count half),
  averaged over tasks;
* performance profile: the share of all runs x tasks with a score above ``tau``;
* intervals: 95% percentile intervals of a stratified bootstrap (runs resampled within each task; for
  ``P(X > Y)`` the runs of X and Y independently), by ``scipy.stats.bootstrap`` (each task's runs one
  sample). rliable itself is not a dependency (its ``arch`` dependency needs ``pandas``, which nothing
  else here uses); ``tests/experiments/test_aggregate.py`` checks these numbers against rliable's own
  on a fixed input.

    python -m experiments.aggregate results/protocol-v1-standard --tier standard
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from placement_gym import protocol
from placement_gym.results import CHECKPOINTS, ResultRow, ResultStore
from placement_gym.tasks import reference_for

#: Bootstrap resamples of the aggregate intervals (rliable's default) and of the curves and profiles.
REPS, CURVE_REPS = 50_000, 2_000
CONFIDENCE = 0.95
#: Score thresholds of the performance profiles.
TAUS = np.linspace(-0.5, 1.0, 61)

Statistic = Callable[[np.ndarray], float]


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all scores (rliable's ``aggregate_iqm``)."""
    return float(stats.trim_mean(np.asarray(scores, dtype=np.float64).reshape(-1), proportiontocut=0.25))


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """``gamma - mean(min(score, gamma))`` (rliable's ``aggregate_optimality_gap``)."""
    return float(gamma - np.mean(np.minimum(scores, gamma)))


def _columns(matrix: np.ndarray) -> list[np.ndarray]:
    return [matrix[:, j] for j in range(matrix.shape[1])]


def stratified_interval(
    matrix: np.ndarray, statistic: Statistic, reps: int = REPS, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of ``statistic(matrix)`` under a stratified bootstrap of a ``(runs, tasks)``
    matrix: each task's runs are resampled with replacement, independently of the other tasks."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape[0] < 2:
        value = statistic(matrix)
        return value, value

    if np.ptp(matrix, axis=0).max() == 0:  # every task's runs equal: no spread to resample
        value = statistic(matrix)
        return value, value
    res = stats.bootstrap(
        _columns(matrix), _vectorised(statistic, matrix.shape[1]), n_resamples=reps, confidence_level=CONFIDENCE,
        method="percentile", vectorized=True, random_state=np.random.default_rng(seed), batch=2_000,
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _vectorised(statistic: Statistic, tasks: int) -> Callable[..., np.ndarray]:
    """``statistic`` of ``(runs, tasks)`` matrices, applied to scipy's batches of resampled task columns."""
    fast = _FAST.get(statistic)

    def stat(*cols: np.ndarray, axis: int = -1) -> np.ndarray:
        stacked = np.stack(cols, axis=-1)  # (batch..., runs, tasks)
        if fast is not None:
            return fast(stacked.reshape(*stacked.shape[:-2], -1))
        flat = stacked.reshape(-1, *stacked.shape[-2:])
        return np.array([statistic(m) for m in flat]).reshape(stacked.shape[:-2])

    return stat


_FAST: dict[Statistic, Callable[[np.ndarray], np.ndarray]] = {
    iqm: lambda x: stats.trim_mean(x, 0.25, axis=-1),
    optimality_gap: lambda x: 1.0 - np.minimum(x, 1.0).mean(axis=-1),
}


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``P(X > Y)`` of two ``(runs, tasks)`` score matrices: per task Mann-Whitney ``U / (n m)`` (ties
    half), averaged over tasks (rliable's ``probability_of_improvement``)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return float(np.mean([_pairwise(x[:, j], y[:, j]) for j in range(x.shape[1])]))


def _pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``P(a > b) + P(a = b) / 2`` over the last axis of ``a`` (..., n) and ``b`` (..., m)."""
    greater = (a[..., :, None] > b[..., None, :]).mean(axis=(-1, -2))
    ties = (a[..., :, None] == b[..., None, :]).mean(axis=(-1, -2))
    return greater + 0.5 * ties


def improvement_interval(
    x: np.ndarray, y: np.ndarray, reps: int = CURVE_REPS, seed: int = 0
) -> tuple[float, float]:
    """95% interval of :func:`probability_of_improvement` under a stratified bootstrap that resamples the
    runs of X and of Y independently within each task."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    tasks = x.shape[1]
    if min(x.shape[0], y.shape[0]) < 2 or (np.ptp(x, axis=0).max() == 0 and np.ptp(y, axis=0).max() == 0):
        value = probability_of_improvement(x, y)
        return value, value

    def stat(*cols: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([_pairwise(cols[j], cols[tasks + j]) for j in range(tasks)], axis=0)

    res = stats.bootstrap(
        _columns(x) + _columns(y), stat, n_resamples=reps, confidence_level=CONFIDENCE, method="percentile",
        vectorized=True, random_state=np.random.default_rng(seed), batch=500,
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def performance_profile(matrix: np.ndarray, taus: np.ndarray = TAUS) -> np.ndarray:
    """Share of all runs x tasks scores above each ``tau`` (rliable's score distribution)."""
    return (np.asarray(matrix)[..., None] > taus).reshape(-1, len(taus)).mean(axis=0)


# ---------------------------------------------------------------------- rows -> score matrices
def score_matrices(
    rows: list[ResultRow],
) -> tuple[dict[str, np.ndarray], list[tuple[str, str]], dict[str, str]]:
    """Per method the ``(runs, tasks)`` score matrix over the tasks every complete method covers.

    A seedless method (:data:`~placement_gym.protocol.SEEDLESS`) with one row per task counts it once for
    each distinct seed among the rows (so a run of seed 0 alone is one run per task, never repeated into
    five); a seeded method's rows are its runs (a method run with seed 0 only has one run per task). Methods
    missing a task, or with unequal runs per task, are left out (with the reason).

    Returns:
        ``(matrices, tasks, left_out)``: ``left_out`` maps a method to why it has no matrix.
    """
    by: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by[row.method][(row.model, row.platform)].append(row.score)
    tasks = sorted({t for cells in by.values() for t in cells})
    seeds = len({row.seed for row in rows}) or 1  # the seeds the rows ran (not the protocol's: 1 run is 1 run)
    matrices, left_out = {}, {}
    for method, cells in by.items():
        missing = [t for t in tasks if t not in cells]
        if missing:
            left_out[method] = (
                f"no rows on {len(missing)} of {len(tasks)} tasks (e.g. {'/'.join(missing[0])})"
            )
            continue
        runs = {len(cells[t]) for t in tasks}
        if runs == {1} and method.partition(":")[0] in protocol.SEEDLESS:
            cols = [np.repeat(cells[t], seeds) for t in tasks]
        elif len(runs) == 1:
            cols = [np.asarray(cells[t]) for t in tasks]
        else:
            left_out[method] = f"unequal seeds per task ({sorted(runs)})"
            continue
        matrix = np.stack(cols, axis=1)
        if not np.isfinite(matrix).all():
            left_out[method] = "a row without a normalised score (a task without a reference optimum)"
            continue
        matrices[method] = matrix
    return matrices, tasks, left_out


@dataclass
class Ranking:
    """Methods ranked by the IQM of their normalised scores (ties by name), for a leaderboard table.

    Attributes:
        matrices, tasks, left_out: :func:`score_matrices` of the rows.
        stats: Per method, ``"iqm"`` and ``"optimality_gap"`` as ``(point, low, high)`` (95% intervals).
        order: The ranked methods.
        by_method: The rows of each method.
    """

    matrices: dict[str, np.ndarray]
    tasks: list[tuple[str, str]]
    left_out: dict[str, str]
    stats: dict[str, dict[str, tuple[float, float, float]]]
    order: list[str]
    by_method: dict[str, list[ResultRow]]


def rank_methods(rows: list[ResultRow]) -> Ranking:
    """The :class:`Ranking` of ``rows``' methods."""
    matrices, tasks, left_out = score_matrices(list(rows))
    stats = {
        m: {f.__name__: (f(s), *stratified_interval(s, f)) for f in (iqm, optimality_gap)}
        for m, s in matrices.items()
    }
    order = sorted(matrices, key=lambda m: (-stats[m]["iqm"][0], m))
    by_method: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_method.setdefault(r.method, []).append(r)
    return Ranking(matrices, tasks, left_out, stats, order, by_method)


def score_curves(rows: list[ResultRow], budget: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per method the IQM of the normalised score of the best placement after each checkpoint number of
    evaluations, with its interval: ``(checkpoints, {method: (3, C) array of iqm, low, high})``."""
    points = np.array([c for c in CHECKPOINTS if c <= budget])
    by: dict[str, dict[tuple, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        ref = reference_for(
            row.model, row.graph_version, row.platform, row.coarsening, row.groups, row.task_sha256
        )
        if ref is None or not row.history:
            continue
        evals = np.array([e for e, _ in row.history])
        best = np.array([b for _, b in row.history], dtype=np.float64)
        idx = np.searchsorted(evals, points, side="right") - 1  # last entry at or before each checkpoint
        latency = np.where(idx >= 0, best[np.maximum(idx, 0)], np.inf)
        score = np.array([ref.score(lat) if lat > 0 else np.nan for lat in latency])
        by[row.method][(row.model, row.platform)].append(score)
    curves = {}
    for method, cells in by.items():
        runs = {len(v) for v in cells.values()}
        if len(runs) != 1:
            continue
        cube = np.stack([np.stack(v) for v in cells.values()], axis=1)  # (runs, tasks, C)
        out = np.empty((3, len(points)))
        for c in range(len(points)):
            out[0, c] = iqm(cube[:, :, c])
            out[1:, c] = stratified_interval(cube[:, :, c], iqm, reps=CURVE_REPS)
        curves[method] = out
    return points, curves


# ---------------------------------------------------------------------- report
def write_aggregate(rows: list[ResultRow], out: Path, tier: str | None = None) -> str:
    """Write ``out/aggregate.md`` (IQM and optimality gap with intervals, probability of improvement) and
    ``out/performance_profile.png``, ``out/score_vs_evaluations.png``; return the markdown."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    matrices, tasks, left_out = score_matrices(rows)
    budget = max((r.budget or 0 for r in rows), default=0)
    head = f"protocol {protocol.VERSION}" + (
        f", tier {tier} ({budget} distinct placements per run)" if tier else ""
    )
    lines = [
        f"# Aggregates: {head}",
        "",
        f"{len(tasks)} tasks; normalised scores (0 = best single device, 1 = proven optimum); 95% stratified-"
        f"bootstrap percentile intervals ({REPS:,} resamples). Generated by `experiments.aggregate`.",
        "",
        "| method | runs x tasks | IQM [95% CI] | optimality gap [95% CI] | mean |",
        "|---|---|---|---|---|",
    ]
    order = sorted(matrices, key=lambda m: -iqm(matrices[m]))
    for method in order:
        m = matrices[method]
        lo, hi = stratified_interval(m, iqm)
        glo, ghi = stratified_interval(m, optimality_gap)
        lines.append(
            f"| {method} | {m.shape[0]} x {m.shape[1]} | {iqm(m):.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{optimality_gap(m):.3f} [{glo:.3f}, {ghi:.3f}] | {m.mean():.3f} |"
        )
    for method, why in sorted(left_out.items()):
        lines.append(f"| {method} | left out: {why} | - | - | - |")
    if len(order) > 1:
        lines += ["", "Probability of improvement P(row > column) [95% CI]:", ""]
        lines += ["| | " + " | ".join(order) + " |", "|---|" + "---|" * len(order)]
        for a in order:
            cells = []
            for b in order:
                if a == b:
                    cells.append("-")
                    continue
                p = probability_of_improvement(matrices[a], matrices[b])
                lo, hi = improvement_interval(matrices[a], matrices[b])
                cells.append(f"{p:.2f} [{lo:.2f}, {hi:.2f}]")
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (out / "aggregate.md").write_text(text)
    if matrices:
        _plot_profiles(matrices, out / "performance_profile.png", head)
        points, curves = score_curves([r for r in rows if r.method in matrices], budget)
        if curves:
            _plot_curves(points, curves, out / "score_vs_evaluations.png", head)
    return text


def _plot_profiles(matrices: dict[str, np.ndarray], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, m in matrices.items():
        ax.plot(TAUS, performance_profile(m), label=method)
    ax.set(
        xlabel="normalised score tau", ylabel="fraction of runs with score > tau", title=title, ylim=(0, 1.02)
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_curves(points: np.ndarray, curves: dict[str, np.ndarray], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, (mid, lo, hi) in curves.items():
        ax.plot(points, mid, marker=".", label=method)
        ax.fill_between(points, lo, hi, alpha=0.2)
    ax.set(
        xscale="log",
        xlabel="distinct placements evaluated",
        ylabel="IQM normalised score (95% CI)",
        title=title,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a bench --tier output folder (its results.jsonl)")
    parser.add_argument("--tier", choices=sorted(protocol.TIERS), required=True)
    parser.add_argument("--methods", nargs="+", help="only these method specs")
    args = parser.parse_args(argv)
    rows = [
        r for r in ResultStore(args.folder / "results.jsonl").rows()
        if r.protocol == protocol.VERSION and r.tier == args.tier and (not args.methods or r.method in args.methods)
    ]  # fmt: skip
    print(write_aggregate(rows, args.folder, args.tier))


if __name__ == "__main__":
    main()
