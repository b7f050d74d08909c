"""The leaderboard's learning-curve view: scores after 100 / 500 / 5,000 distinct placements, and profiles.

A stored row keeps its best-so-far latency at fixed checkpoints (``ResultRow.history``, thinned at
:data:`~placement_gym.results.CHECKPOINTS`), so one run yields its score after every checkpoint it reached:
the normalised score of the best placement among its first ``n`` distinct placements (a run that ended
earlier keeps its last best). A method's curve is read from the runs of its largest tier (a ``large`` run
gives all three points; a ``standard`` run the first two), with the IQM over runs x tasks and a 95%
stratified-bootstrap interval (:func:`experiments.aggregate.stratified_interval`), as a table and a PNG.
Performance profiles (rliable's score distributions): per tier and method, the fraction of runs x tasks
with a final score above ``tau``, with a 95% band from the same stratified bootstrap (each task's runs
resampled).

:func:`section` gives the page's markdown; :func:`write_figures` draws the PNGs it links.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from placement_gym.results import ResultRow
from placement_gym.tasks import reference_for

#: Distinct placements at which the curves are read (the protocol's tier budgets).
POINTS: tuple[int, ...] = (100, 500, 5_000)
#: Bootstrap resamples of the curve intervals and profile bands.
REPS = 2_000
#: Where the figures go, relative to the page's folder.
FIGURES = "leaderboard"
CURVES_PNG, PROFILES_PNG = "learning_curves.png", "performance_profiles.png"


def score_at(row: ResultRow, n: int) -> float:
    """The normalised score of the best placement among ``row``'s first ``n`` distinct placements (its last
    best if it ended earlier; NaN if the task has no reference optimum or the run evaluated nothing by then)."""
    ref = reference_for(row.model, row.graph_version, row.platform, row.coarsening, row.groups, row.task_sha256)
    best = [latency for evaluations, latency in row.history if evaluations <= n]
    if ref is None or not best or not ref.latency < ref.baseline_latency:
        return math.nan
    return ref.score(best[-1]) if best[-1] > 0 else math.nan


def _protocol_rows(rows_by_tier: dict[str, list[ResultRow]]) -> dict[str, list[ResultRow]]:
    """The rows of the current protocol version run at their folder's tier, by tier (empty tiers left out)."""
    from placement_gym.protocol import VERSION

    out = {t: [r for r in rows if r.protocol == VERSION and r.tier == t] for t, rows in rows_by_tier.items()}
    return {t: rows for t, rows in out.items() if rows}


def _budgets(rows_by_tier: dict[str, list[ResultRow]]) -> dict[str, int]:
    from placement_gym.protocol import TIERS

    return {t: TIERS.get(t, max((r.budget or 0 for r in rows), default=0)) for t, rows in rows_by_tier.items()}


def curve_table(
    rows_by_tier: dict[str, list[ResultRow]], points: Sequence[int] = POINTS
) -> tuple[dict[str, tuple[str, int, list[tuple[float, float, float] | None]]], list[int]]:
    """Per method: ``(tier read, runs, [(iqm, low, high) or None per point])``; and the points.

    A method's curve comes from its largest tier; a point past that tier's budget is ``None``.
    """
    from experiments.aggregate import iqm, score_matrices, stratified_interval

    rows_by_tier = _protocol_rows(rows_by_tier)
    budgets = _budgets(rows_by_tier)
    out: dict[str, tuple[str, int, list[tuple[float, float, float] | None]]] = {}
    for tier in sorted(rows_by_tier, key=lambda t: budgets[t]):  # later (larger) tiers replace earlier ones
        rows = rows_by_tier[tier]
        per_point = {}
        for n in points:
            if n > budgets[tier]:
                continue
            matrices, _, _ = score_matrices([dataclasses.replace(r, score=score_at(r, n)) for r in rows])
            per_point[n] = matrices
        for method in {r.method for r in rows}:
            cells: list[tuple[float, float, float] | None] = []
            runs = 0
            for n in points:
                m = per_point.get(n, {}).get(method)
                if m is None:
                    cells.append(None)
                    continue
                runs = m.size
                cells.append((iqm(m), *stratified_interval(m, iqm, reps=REPS)))
            if any(c is not None for c in cells):
                out[method] = (tier, runs, cells)
    return out, list(points)


def profile_bands(matrix: np.ndarray, taus: np.ndarray, reps: int = REPS, seed: int = 0) -> np.ndarray:
    """``(3, len(taus))``: the fraction of runs x tasks scores above each ``tau`` and its 95% band under a
    stratified bootstrap (each task's runs resampled with replacement, independently of the others)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    runs, tasks = matrix.shape
    point = (matrix[..., None] > taus).reshape(-1, len(taus)).mean(axis=0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.take_along_axis(np.broadcast_to(matrix, (reps, runs, tasks)), idx, axis=1)
    profiles = (resampled[..., None] > taus).reshape(reps, -1, len(taus)).mean(axis=1)
    low, high = np.percentile(profiles, [2.5, 97.5], axis=0)
    return np.stack([point, low, high])


def section(rows_by_tier: dict[str, list[ResultRow]]) -> list[str]:
    """The page's markdown: the curve table, the figures' links and how to read them."""
    table, points = curve_table(rows_by_tier)
    if not table:
        return []
    from placement_gym.protocol import TIERS

    tier_of_point = {budget: tier for tier, budget in TIERS.items()}
    lines = [
        "## Learning curves",
        "",
        "IQM normalised score [95% CI] of the best placement among a run's first 100 / 500 / 5,000 distinct "
        "placements, over runs x tasks, read from the rows' stored histories. A method's curve comes from the "
        "runs of its largest tier (the `tier` column): a `large` run (5,000) gives all three points, a "
        "`standard` run (500) the first two. Methods whose settings depend on the budget (the PPO learners' "
        "learning rate falls with it) may score differently at 500 in a `large` run than in a `standard` one.",
        "",
        "| method | tier | runs x tasks | " + " | ".join(f"{n:,}" for n in points) + " |",
        "|---|---|---|" + "---|" * len(points),
    ]
    order = sorted(table, key=lambda m: (-max((c[0] for c in table[m][2] if c), default=-math.inf), m))
    for method in order:
        tier, runs, cells = table[method]
        text = [
            f"{c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]" if c else f"no `{tier_of_point.get(n, n)}` rows yet"
            for n, c in zip(points, cells)
        ]
        lines.append(f"| `{method}` | `{tier}` | {runs} | " + " | ".join(text) + " |")
    lines += [
        "",
        f"![IQM score against distinct placements]({FIGURES}/{CURVES_PNG})",
        "",
        "Performance profiles (rliable's score distributions): per tier, the fraction of runs x tasks whose "
        "final normalised score exceeds tau, with a 95% stratified-bootstrap band. A curve above another "
        "everywhere dominates it.",
        "",
        f"![Performance profiles per tier]({FIGURES}/{PROFILES_PNG})",
        "",
    ]
    return lines


def _label(method: str, width: int = 48) -> str:
    """A legend label: the method spec, shortened past ``width`` characters."""
    return method if len(method) <= width else method[: width - 3] + "..."


def write_figures(rows_by_tier: dict[str, list[ResultRow]], folder: Path) -> list[Path]:
    """Draw the curve and profile PNGs into ``folder`` (Agg backend); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.aggregate import TAUS, score_matrices

    rows_by_tier = _protocol_rows(rows_by_tier)
    table, points = curve_table(rows_by_tier)
    if not table:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    styles = [(c, ls) for ls in ("-", "--", ":") for c in plt.get_cmap("tab20").colors]
    methods = sorted(set(table) | {r.method for rows in rows_by_tier.values() for r in rows})
    style_of = dict(zip(methods, styles * (len(methods) // len(styles) + 1)))  # one style per method
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for method in sorted(table):
        color, style = style_of[method]
        tier, _, cells = table[method]
        xs = [n for n, c in zip(points, cells) if c]
        mid, low, high = (np.array([c[i] for c in cells if c]) for i in range(3))
        ax.errorbar(
            xs, mid, yerr=[mid - low, high - mid], marker=".", capsize=2, color=color, linestyle=style,
            label=f"{_label(method)} ({tier})",
        )  # fmt: skip
    ax.set(xscale="log", xticks=points, xticklabels=[f"{n:,}" for n in points])
    ax.set(xlabel="distinct placements evaluated", ylabel="IQM normalised score (95% CI)")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    curves = folder / CURVES_PNG
    fig.savefig(curves, dpi=110, bbox_inches="tight")
    plt.close(fig)
    tiers = sorted(rows_by_tier, key=lambda t: _budgets(rows_by_tier)[t])
    fig, axes = plt.subplots(len(tiers), 1, figsize=(10, 4.5 * len(tiers)), squeeze=False)
    for ax, tier in zip(axes[:, 0], tiers):
        matrices, _, _ = score_matrices(rows_by_tier[tier])
        for method in sorted(matrices):
            color, style = style_of[method]
            mid, low, high = profile_bands(matrices[method], TAUS)
            ax.plot(TAUS, mid, color=color, linestyle=style, label=_label(method))
            ax.fill_between(TAUS, low, high, alpha=0.12, color=color)
        ax.set(title=f"tier {tier}", xlabel="normalised score tau", ylabel="fraction of runs with score > tau")
        ax.set(ylim=(0, 1.02))
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    profiles = folder / PROFILES_PNG
    fig.savefig(profiles, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [curves, profiles]
