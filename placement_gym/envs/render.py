"""Renderings of a placement: a text table (``ansi``) and a picture of the graph (``rgb_array``)."""

from __future__ import annotations

import numpy as np

from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import PlacementGymError
from placement_gym.platforms import Platform


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def placement_table(
    coarse: CoarseGraph,
    platform: Platform,
    placement: np.ndarray,
    latency: float | None,
    start: int = 0,
    max_rows: int | None = None,
) -> str:
    """Groups, their size and main op type, and their device, plus the latency, as text.

    Every group by default (the env's ``ansi`` render); ``start`` and ``max_rows`` show one page of them,
    and the table then says which groups it shows and how to see the others.

    Raises:
        PlacementGymError: If ``start`` is not a group index or ``max_rows`` is below 1.
    """
    q = coarse.graph
    if not _is_int(start) or not 0 <= start < max(q.num_nodes, 1):
        raise PlacementGymError(f"start={start!r} must be a group index in [0, {q.num_nodes - 1}]")
    if max_rows is not None and not (_is_int(max_rows) and max_rows >= 1):
        raise PlacementGymError(f"max_rows={max_rows!r} must be an integer >= 1 (or None: every group)")
    stop = q.num_nodes if max_rows is None else min(q.num_nodes, start + max_rows)
    members = np.bincount(coarse.assignment, minlength=q.num_nodes)
    lines = [f"{'group':>5}  {'ops':>4}  {'main op':<18} {'GFLOP':>8}  device"]
    for g in range(start, stop):
        dev = platform.devices[int(placement[g])].name if placement[g] >= 0 else "-"
        lines.append(
            f"{g:>5}  {members[g]:>4}  {q.op_types[g][:18]:<18} {q.nodes['flops'][g] / 1e9:>8.3f}  {dev}"
        )
    if (start, stop) != (0, q.num_nodes):
        lines.append(f"  groups {start}-{stop - 1} of {q.num_nodes} (start= and max_rows= show the others)")
    counts = {d.name: int(np.sum(placement == i)) for i, d in enumerate(platform.devices)}
    lines.append("groups per device: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    if latency is not None:
        lines.append(f"latency: {latency * 1e3:.3f} ms" if np.isfinite(latency) else "latency: infeasible")
    return "\n".join(lines)


def placement_figure(coarse: CoarseGraph, platform: Platform, placement: np.ndarray, title: str = ""):
    """A matplotlib figure of the quotient graph, nodes coloured by device (layered by topological depth)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    q = coarse.graph
    depth = np.zeros(q.num_nodes, dtype=np.int64)
    for s, d in zip(q.edge_src.tolist(), q.edge_dst.tolist()):  # edges sorted by source: one pass suffices
        depth[d] = max(depth[d], depth[s] + 1)
    row = np.zeros(q.num_nodes)
    for level in np.unique(depth):
        idx = np.flatnonzero(depth == level)
        row[idx] = np.arange(len(idx)) - (len(idx) - 1) / 2
    fig = Figure(figsize=(8, 4), dpi=80)
    ax = fig.add_subplot()
    for s, d in zip(q.edge_src.tolist(), q.edge_dst.tolist()):
        ax.plot([depth[s], depth[d]], [row[s], row[d]], color="0.75", lw=0.6, zorder=1)
    cmap = matplotlib.colormaps["tab10"]
    for i, dev in enumerate(platform.devices):
        sel = placement == i
        ax.scatter(depth[sel], row[sel], s=18, color=cmap(i % 10), label=dev.name, zorder=2)
    unplaced = placement < 0
    if unplaced.any():
        ax.scatter(
            depth[unplaced], row[unplaced], s=18, facecolors="none", edgecolors="0.3", label="unplaced"
        )
    ax.set_xlabel("topological depth")
    ax.set_yticks([])
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def figure_to_rgb(fig) -> np.ndarray:
    """Render a matplotlib figure to an ``(H, W, 3)`` uint8 array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def render_placement(mode: str | None, problem, placement: np.ndarray, latency: float | None):
    """An env's ``render()``: the ``ansi`` table or the ``rgb_array`` picture of ``placement`` on ``problem``
    (a :class:`~placement_gym.problem.PlacementProblem`), titled with ``latency`` (``None``: not evaluated
    yet; ``inf``: infeasible); ``None`` for any other mode."""
    if mode == "ansi":
        return placement_table(problem.coarse, problem.platform, placement, latency)
    if mode == "rgb_array":
        title = f"{problem.benchmark.name} on {problem.platform.name}"
        if latency is not None:
            title += f": {latency * 1e3:.2f} ms" if np.isfinite(latency) else ": infeasible"
        return figure_to_rgb(placement_figure(problem.coarse, problem.platform, placement, title))
    return None
