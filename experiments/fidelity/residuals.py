"""What the simulator gets wrong on the ``local`` platform, from recorded ``sim_vs_measured`` runs (no
measuring): the residual ``log(measured / simulated)`` against placement properties, and a fit of the
segment-boundary figures (:class:`~placement_gym.simulation.partition_costs.PartitionCosts`) on one run,
validated on another.

Properties of each placement: executor segments (:func:`~placement_gym.measured.segments.split_segments`),
the simulator's subgraphs (connected same-device components), cut quotient edges, plain and
blocked-layout megabytes crossing devices, and the share of groups on ``cpu1``. The fit minimises, summed
over models, the mean squared residual after removing each model's median (the overall scale of a model
is its profile's business; the fit is about how latency changes between placements), over
``--free`` figures (log-parameterised, multi-start Nelder-Mead); the others keep the platform's measured
values. Simulated latencies come from the stored, validated profiles without re-timing the models (a
model with no stored profile on this machine is profiled first, which measures it: do that on a quiet
machine with ``placement-gym calibrate``).

Example:
    python -m experiments.fidelity.residuals --fit results/sim_vs_measured-run1.json \\
        --validate results/sim_vs_measured-run2.json --out results/sim_fidelity
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import spearmanr

from experiments.fidelity.stats import KINDS, compare, fmt, host_row
from placement_gym.simulation.partition_costs import FIELDS, PartitionCosts, apply_partition_costs

PROPERTIES = (
    "segments", "subgraphs", "cut_edges", "plain_mb", "blocked_mb", "share_cpu1",
    "cut_into_concat", "cut_into_add", "cut_into_matmul",
)  # fmt: skip
#: Op types whose cut inputs are counted (``cut_into_<type>``): a Concat the CPU plugin would fill in
#: place, an Add it would fuse into the producing convolution, a MatMul reading a moved activation.
CUT_INTO = ("Concat", "Add", "MatMul")


class ModelData:
    """One model's cost model, placements and the measurements of one or more runs."""

    def __init__(
        self,
        name: str,
        level: str,
        rows_by_run: list[list[dict[str, Any]]],
        reference_levels: list[float | None] | None = None,
    ) -> None:
        from placement_gym.benchmarks import load_benchmark
        from placement_gym.measured.profiling import profile_op_times
        from placement_gym.platforms import load_platform
        from placement_gym.simulation.cost_model import CostModel

        self.name = name
        self.bench = load_benchmark(name)
        self.coarse = self.bench.coarsen(level)
        self.platform = load_platform("local")
        times = [profile_op_times(self.bench, d, check=False) for d in self.platform.devices]
        self.cost = CostModel.from_op_times(self.coarse, self.platform, np.stack(times, 1))
        self.rows_by_run = rows_by_run
        #: Each run's drift-reference level (seconds) or None: what its drift-corrected latencies are
        #: scaled by (see :func:`~experiments.fidelity.stats.relative_figures`).
        self.reference_levels = reference_levels or [None] * len(rows_by_run)
        self.placements = np.array([r["placement"] for r in rows_by_run[0]], dtype=np.int64)  # (N, G)
        for rows in rows_by_run[1:]:
            if not np.array_equal(np.array([r["placement"] for r in rows]), self.placements):
                raise ValueError(f"{name}: the runs measured different placements")
        self.kinds = np.array([r["kind"] for r in rows_by_run[0]])

    def measured(self, run: int) -> np.ndarray:
        """Measured (drift-corrected) latency of each placement in run ``run``, shape ``(N,)``."""
        return np.array([r["measured"] for r in self.rows_by_run[run]], dtype=np.float64)

    def simulate(self, costs: PartitionCosts, schedule: str = "segments") -> np.ndarray:
        """Simulated latency of each placement with ``costs`` and ``schedule`` (``"groups"``: the list
        schedule of groups; ``"segments"``: of the executor's segments), shape ``(N,)``."""
        from placement_gym.simulation.schedule import Schedule
        from placement_gym.simulation.segment_schedule import SegmentSchedule

        model = apply_partition_costs(self.cost, self.coarse, costs)
        build = SegmentSchedule.build if schedule == "segments" else Schedule.build
        return build(model).run_batch(self.placements)[0]

    def properties(self) -> np.ndarray:
        """:data:`PROPERTIES` of each placement, shape ``(N, 9)``: executor segments, the group schedule's
        subgraphs (connected same-device parts), cut quotient edges, plain and blocked MB crossing devices,
        the share of groups on ``cpu1``, and the op edges between devices that feed a Concat, an Add, a
        MatMul."""
        from placement_gym.measured.segments import split_segments
        from placement_gym.simulation.partition_costs import split_edge_bytes

        plain, block = split_edge_bytes(self.coarse)
        src, dst = self.cost.edge_src, self.cost.edge_dst
        ops = self.bench.ops
        into = [np.array([t == kind for t in ops.op_types])[ops.edge_dst] for kind in CUT_INTO]  # (E_ops,)
        out = []
        for p in self.placements:
            op_device = self.coarse.expand(p)
            op_cut = op_device[ops.edge_src] != op_device[ops.edge_dst]
            segments = len(split_segments(ops, op_device))
            same = p[src] == p[dst]
            joined = coo_matrix((np.ones(int(same.sum())), (src[same], dst[same])), shape=(len(p), len(p)))
            subgraphs = connected_components(joined, directed=False)[0]
            cut = ~same
            out.append(
                [segments, subgraphs, cut.sum(), plain[cut].sum() / 1e6, block[cut].sum() / 1e6, p.mean()]
                + [int(np.count_nonzero(op_cut & kind)) for kind in into]
            )
        return np.array(out, dtype=np.float64)


def split_halves(kinds: np.ndarray) -> np.ndarray:
    """Every other placement of each kind, shape ``(N,)`` bool: two halves with the same mix of kinds for
    cross-validation."""
    half = np.zeros(len(kinds), dtype=bool)
    for kind in np.unique(kinds):
        half[np.flatnonzero(kinds == kind)[::2]] = True
    return half


def platform_costs(platform: Any) -> PartitionCosts:
    """The ``local`` platform's own (micro-benchmarked) figures."""
    link = platform.links[(0, 1)]
    device = platform.devices[0]
    return PartitionCosts(
        invoke_overhead=device.invoke_overhead,
        transfer_latency=link.latency,
        bandwidth=link.bandwidth,
        blocked_bandwidth=link.blocked_bandwidth or link.bandwidth,
        contention=device.contention,
    )


def _costs(x: np.ndarray, free: tuple[str, ...], base: PartitionCosts) -> PartitionCosts:
    values = base.as_dict()
    for name, v in zip(free, x):
        values[name] = float(1 / (1 + np.exp(-v))) if name == "contention" else float(np.exp(v))
    return PartitionCosts(**values)


def shape_loss(
    models: list[ModelData],
    costs: PartitionCosts,
    run: int,
    schedule: str = "segments",
    subset: list[np.ndarray] | None = None,
) -> float:
    """Sum over models of the mean squared ``log(simulated / measured)`` after removing its median (over
    the placements ``subset[i]`` of model ``i`` if given, boolean ``(N,)``)."""
    total = 0.0
    for i, m in enumerate(models):
        r = np.log(m.simulate(costs, schedule) / m.measured(run))
        if subset is not None:
            r = r[subset[i]]
        total += float(np.mean((r - np.median(r)) ** 2))
    return total


def fit(
    models: list[ModelData],
    free: tuple[str, ...],
    base: PartitionCosts,
    run: int = 0,
    schedule: str = "segments",
    subset: list[np.ndarray] | None = None,
) -> PartitionCosts:
    """The ``free`` figures minimising :func:`shape_loss` on run ``run`` (and ``subset``); the rest from
    ``base``.

    Starts from every corner of a small grid (each free figure at half and at twice its base value; an
    overhead that is ~0 starts at 10 us and 300 us; contention at 0.27 and 0.88) and keeps the best.
    """
    starts = []
    for name in free:
        value = getattr(base, name)
        if name == "contention":
            starts.append((-1.0, 2.0))
        elif name in ("invoke_overhead", "transfer_latency") and value < 1e-5:
            starts.append((np.log(1e-5), np.log(3e-4)))
        else:
            starts.append((np.log(value / 2), np.log(value * 2)))
    best = None
    for x0 in itertools.product(*starts):
        res = minimize(
            lambda x: shape_loss(models, _costs(x, free, base), run, schedule, subset),
            np.array(x0),
            method="Nelder-Mead",
            options={"maxiter": 400, "xatol": 1e-3, "fatol": 1e-8},
        )
        if best is None or res.fun < best.fun:
            best = res
    return _costs(best.x, free, base)


def figures(
    m: ModelData, simulated: np.ndarray, run: int, subset: np.ndarray | None = None
) -> dict[str, Any]:
    """Spearman / MAPE (level-scaled) and relative MAPE per kind, of ``simulated`` against run ``run``.

    Relative: measured / the run's reference level (the drift-corrected ratio to the host reference, as
    :func:`~experiments.fidelity.stats.relative_figures`; without a level, / the host row's
    measured latency) against simulated / simulated all-on-host.
    """
    measured = m.measured(run)
    rows = m.rows_by_run[run]
    host = rows.index(host_row(rows))
    level = m.reference_levels[run] or measured[host]
    out: dict[str, Any] = {}
    for kind in (None, *KINDS):
        sel = np.ones(len(measured), bool) if kind is None else m.kinds == kind
        if subset is not None:
            sel = sel & subset
        stats = compare(measured[sel], simulated[sel])
        rel = compare(measured[sel] / level, simulated[sel] / simulated[host])
        out["all" if kind is None else kind] = {**stats, "relative_mape": rel["mape"]}
    return out


def residual_repeat(m: ModelData, simulated: np.ndarray, a: int, b: int) -> float:
    """Pearson correlation between runs ``a`` and ``b`` of the residual ``log(measured / simulated)``: near
    0 if what the simulator misses is measurement noise, near 1 if it is a property of the placements."""
    ra, rb = np.log(m.measured(a) / simulated), np.log(m.measured(b) / simulated)
    return float(np.corrcoef(ra, rb)[0, 1])


def residual_table(
    m: ModelData, simulated: np.ndarray, run: int, props: np.ndarray | None = None
) -> dict[str, dict[str, float]]:
    """Spearman of the residual ``log(measured / simulated)`` with each placement property (``props``:
    :meth:`ModelData.properties`, computed if None), and of what is left of the residual once its linear
    dependence on the segment count is removed (``partial``: what a property adds to the segment count)."""
    props = m.properties() if props is None else props
    resid = np.log(m.measured(run) / simulated)
    design = np.column_stack([props[:, 0], np.ones(len(resid))])
    rest = resid - design @ np.linalg.lstsq(design, resid, rcond=None)[0]

    def rho(x: np.ndarray, y: np.ndarray) -> float:
        return float(spearmanr(x, y)[0]) if np.ptp(x) > 0 else float("nan")

    return {
        name: {
            "min": float(props[:, j].min()),
            "max": float(props[:, j].max()),
            "spearman": rho(props[:, j], resid),
            "partial": rho(props[:, j], rest),
        }  # fmt: skip
        for j, name in enumerate(PROPERTIES)
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fit", type=Path, required=True, help="run whose rows the figures are fitted on")
    parser.add_argument("--validate", type=Path, nargs="*", default=[], help="runs to validate on")
    parser.add_argument(
        "--free",
        nargs="+",
        default=["invoke_overhead", "transfer_latency", "blocked_bandwidth", "contention"],
        choices=FIELDS,
        help="figures to fit",
    )
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument(
        "--schedule", choices=("groups", "segments"), default="segments",
        help="simulate groups (the list schedule) or the executor's segments (the local platform's default)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results/sim_fidelity"))
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in [args.fit, *args.validate]]
    names = args.models or list(runs[0]["models"])
    level = runs[0]["meta"]["command"]["level"]
    models = [
        ModelData(
            n,
            level,
            [r["models"][n]["rows"] for r in runs],
            [r["models"][n]["summary"].get("reference_level") for r in runs],
        )
        for n in names
    ]
    base = platform_costs(models[0].platform)
    schedule, free = args.schedule, tuple(args.free)
    fitted = fit(models, free, base, 0, schedule)
    halves = [split_halves(m.kinds) for m in models]
    folds = [fit(models, free, base, 0, schedule, [h == k for h in halves]) for k in (True, False)]
    labels = [str(args.fit), *map(str, args.validate)]
    result: dict[str, Any] = {
        "fit_on": str(args.fit), "validate_on": [str(p) for p in args.validate], "free": args.free,
        "schedule": schedule, "platform_costs": base.as_dict(), "fitted_costs": fitted.as_dict(),
        "fold_costs": [f.as_dict() for f in folds],
        "loss": {"platform": shape_loss(models, base, 0, schedule),
                 "fitted": shape_loss(models, fitted, 0, schedule)},
        "models": {},
    }  # fmt: skip
    for m, even in zip(models, halves):
        recorded = np.array([r["simulated"] for r in m.rows_by_run[0]], dtype=np.float64)
        before, after = m.simulate(base, schedule), m.simulate(fitted, schedule)
        # each half scored with the figures fitted on the other half (of the fit run)
        held_out = np.where(even, m.simulate(folds[1], schedule), m.simulate(folds[0], schedule))
        props = m.properties()
        excess = props[:, 0] - props[:, 1]  # executor segments beyond the group schedule's subgraphs
        result["models"][m.name] = {
            "segments_beyond_subgraphs": {k: float(excess[m.kinds == k].mean()) for k in KINDS},
            "residual_vs_properties_recorded": residual_table(m, recorded, 0, props),
            "residual_vs_properties": residual_table(m, before, 0, props),
            "residual_vs_properties_fitted": residual_table(m, after, 0, props),
            "recorded": [figures(m, recorded, i) for i in range(len(runs))],
            "before": [figures(m, before, i) for i in range(len(runs))],
            "after": [figures(m, after, i) for i in range(len(runs))],
            "cross_validated": [
                {
                    "platform": [figures(m, before, i, h)["all"] for h in (even, ~even)],
                    "held_out": [figures(m, held_out, i, h)["all"] for h in (even, ~even)],
                }
                for i in range(len(runs))
            ],
            "residual_repeat": [
                [residual_repeat(m, sim, 0, i) for i in range(1, len(runs))] for sim in (before, after)
            ],
        }
    lines = report(result, labels)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_name(args.out.name + "-costs.json").write_text(json.dumps(fitted.as_dict(), indent=1))
    print("\n".join(lines))
    return result


def _show(x: float) -> str:
    """3 significant digits; 0 below 1e-3 (an overhead the fit drove to nothing)."""
    return "0" if abs(x) < 1e-3 else f"{x:.3g}"


def report(result: dict[str, Any], labels: list[str]) -> list[str]:
    """Markdown of :func:`main`'s result."""
    units = {"invoke_overhead": 1e6, "transfer_latency": 1e6, "bandwidth": 1e-9, "blocked_bandwidth": 1e-9,
             "contention": 1.0}  # fmt: skip
    suffix = {"invoke_overhead": " us", "transfer_latency": " us", "bandwidth": " GB/s",
              "blocked_bandwidth": " GB/s", "contention": ""}  # fmt: skip
    lines = [
        "# Simulator residuals and fitted segment-boundary figures (local platform)",
        "",
        f"Fitted on `{labels[0]}` (free: {', '.join(result['free'])}), validated on "
        + (", ".join(f"`{x}`" for x in labels[1:]) or "nothing")
        + ". Command: `python -m experiments.fidelity.residuals --fit "
        + labels[0]
        + (" --validate " + " ".join(labels[1:]) if labels[1:] else "")
        + f" --schedule {result['schedule']}`.",
        "",
        "| figure | platform (micro-benchmark) | fitted |",
        "| --- | --- | --- |",
    ]
    for name in FIELDS:
        a, b = result["platform_costs"][name], result["fitted_costs"][name]
        lines.append(
            f"| {name} | {_show(a * units[name])}{suffix[name]} | {_show(b * units[name])}{suffix[name]} |"
        )
    lines += [
        "",
        f"Shape loss on the fit run (sum over models of the mean squared demedianed log residual): "
        f"{result['loss']['platform']:.5f} -> {result['loss']['fitted']:.5f}.",
        "",
        "Spearman of the residual log(measured / simulated) with placement properties, fit run (the simulator "
        "the run recorded -> the platform's figures -> fitted):",
        "",
        "| model | " + " | ".join(PROPERTIES) + " |",
        "| --- |" + " --- |" * len(PROPERTIES),
    ]
    for name, res in result["models"].items():
        r, a, b = (res[f"residual_vs_properties{x}"] for x in ("_recorded", "", "_fitted"))
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{r[p]['spearman']:+.2f} -> {a[p]['spearman']:+.2f} -> {b[p]['spearman']:+.2f}"
                for p in PROPERTIES
            )
            + " |"
        )
    lines += [
        "",
        "The same, of what is left of the residual once its linear dependence on the segment count is "
        "removed (platform figures; near 0: the property adds nothing to the segment count):",
        "",
        "| model | " + " | ".join(PROPERTIES[1:]) + " |",
        "| --- |" + " --- |" * (len(PROPERTIES) - 1),
    ]
    for name, res in result["models"].items():
        a = res["residual_vs_properties"]
        lines.append(f"| {name} | " + " | ".join(f"{a[p]['partial']:+.2f}" for p in PROPERTIES[1:]) + " |")
    lines += [
        "",
        "Executor segments beyond the group schedule's subgraphs (connected same-device parts), mean per "
        "kind: "
        + "; ".join(
            f"{name} " + ", ".join(f"{k} {v:.1f}" for k, v in res["segments_beyond_subgraphs"].items())
            for name, res in result["models"].items()
        )
        + ".",
    ]
    lines += [
        "",
        f"Simulator vs measured, the simulator the run recorded -> the `{result['schedule']}` schedule with the "
        "platform's figures -> with the fitted figures: Spearman / MAPE / relative MAPE (measured and "
        "simulated both relative to the all-on-host placement: drift-corrected).",
        "",
        "| model | run | all | iid | blocks |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, res in result["models"].items():
        for i, label in enumerate(labels):
            cells = []
            for kind in ("all", *KINDS):
                cells.append(
                    " -> ".join(
                        f"{fmt(f['spearman'])} / {fmt(f['mape'], True)} / {fmt(f['relative_mape'], True)}"
                        for f in (res["recorded"][i][kind], res["before"][i][kind], res["after"][i][kind])
                    )
                )
            lines.append(
                f"| {name} | {'fit' if i == 0 else 'validate'} `{Path(label).stem}` | "
                + " | ".join(cells)
                + " |"
            )
    lines += [
        "",
        "Cross-validated over placements: the figures fitted on one half of the fit run's placements (every "
        "other placement of each kind) score the other half, and vice versa (Spearman / relative MAPE of "
        "each held-out half; the platform's figures on the same halves beside them):",
        "",
        "| model | run | platform (half A / half B) | fitted on the other half (A / B) |",
        "| --- | --- | --- | --- |",
    ]
    for name, res in result["models"].items():
        for i, label in enumerate(labels):
            cv = res["cross_validated"][i]
            cells = [
                " / ".join(f"{fmt(f['spearman'])}, {fmt(f['relative_mape'], True)}" for f in cv[key])
                for key in ("platform", "held_out")
            ]
            lines.append(f"| {name} | `{Path(label).stem}` | " + " | ".join(cells) + " |")
    if labels[1:]:
        lines += [
            "",
            "Is the residual noise or structure? Correlation of log(measured / simulated) between the fit run "
            "and each validation run (0: noise; 1: the same placements are mis-predicted the same way):",
            "",
        ]
        for name, res in result["models"].items():
            before, after = res["residual_repeat"]
            lines.append(
                f"- {name}: platform figures {', '.join(f'{x:.2f}' for x in before)}; fitted "
                f"{', '.join(f'{x:.2f}' for x in after)}"
            )
    return lines


if __name__ == "__main__":
    main()
