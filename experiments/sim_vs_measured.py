"""How well does the simulator rank placements? Simulated vs measured latency on the ``local`` platform.

For each model, ``--count`` placements of its fused coarse graph are measured with the measured backend
(partitioned executor) and simulated with the simulated backend (measured per-layer profiles of the same
devices). The placements mix three kinds, so the set spans a wide range of latencies:

* ``iid``: every group independently on ``cpu1`` with probability ``p ~ U(0, 1)``;
* ``blocks``: the groups, in topological order, cut into 2-8 contiguous blocks alternating devices;
* ``single``: everything on one device (both devices, once each).

With ``--replicates 2`` (default) every placement is measured in two passes; the Spearman and MAPE between
the passes show how far measurement noise alone limits any simulator on this machine.

Reported: Spearman rank correlation (``scipy.stats.spearmanr``) and mean absolute percentage error (MAPE)
of simulated against measured latency, overall and per kind. Results go to
``<out>.json`` (replayable rows: placement, both latencies, versions) and ``<out>.md``.

Example:
    PLACEMENT_GYM_CACHE=/tmp/pgcache python -m experiments.sim_vs_measured --models resnet50 bert --count 50
"""

from __future__ import annotations

import argparse
import json
import platform as pyplatform
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from scipy.stats import spearmanr

from placement_gym.benchmarks import load_benchmark
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SimulatedBackend


def sample_placements(
    num_groups: int, num_devices: int, count: int, seed: int
) -> list[tuple[str, np.ndarray]]:
    """``count`` placements ``(kind, placement of shape (G,))``: the single-device ones, then iid and
    contiguous-block placements alternately."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, np.ndarray]] = [
        ("single", np.full(num_groups, d, dtype=np.int64)) for d in range(num_devices)
    ]
    while len(out) < count:
        if len(out) % 2 == 0:
            p = rng.uniform(0.0, 1.0)
            probs = np.array([1.0 - p] + [p / (num_devices - 1)] * (num_devices - 1))
            out.append(("iid", rng.choice(num_devices, size=num_groups, p=probs).astype(np.int64)))
        else:
            blocks = int(rng.integers(2, 9))
            cuts = np.sort(rng.choice(np.arange(1, num_groups), size=blocks - 1, replace=False))
            start = int(rng.integers(num_devices))
            label = np.zeros(num_groups, dtype=np.int64)
            for i, c in enumerate(cuts):
                label[c:] = (start + i + 1) % num_devices
            label[: cuts[0]] = start
            out.append(("blocks", label))
    return out[:count]


def compare(measured: np.ndarray, simulated: np.ndarray) -> dict[str, float]:
    """Spearman rho (and its p-value) and MAPE of ``simulated`` against ``measured``, both shape ``(n,)``."""
    rho, pvalue = spearmanr(measured, simulated) if len(measured) > 2 else (float("nan"), float("nan"))
    mape = float(np.mean(np.abs(simulated - measured) / measured)) if len(measured) else float("nan")
    return {"n": int(len(measured)), "spearman": float(rho), "p_value": float(pvalue), "mape": mape}


def run_model(
    name: str, count: int, seed: int, warmup: int, repeats: int, level: str, replicates: int = 1
) -> dict[str, Any]:
    """Measure (``replicates`` passes) and simulate ``count`` placements of model ``name``.

    Each pass measures every placement once more (the measured backend's cache is off), so replicates of a
    placement are minutes apart; their agreement (Spearman between passes 1 and 2) is the ceiling any
    simulator can reach on this machine. ``measured`` is the median over the passes.
    """
    bench = load_benchmark(name)
    coarse = bench.coarsen(level)
    plat = load_platform("local")
    sim = SimulatedBackend(bench, coarse, plat)
    meas = MeasuredBackend(
        bench, coarse, plat, warmup=warmup, repeats=repeats, time_budget=30.0, cache_size=0
    )
    placements = sample_placements(coarse.num_groups, plat.num_devices, count, seed)
    passes: list[list[float | None]] = []
    reasons: list[str] = [""] * len(placements)
    t0 = time.perf_counter()
    try:
        for r in range(replicates):
            latencies: list[float | None] = []
            for i, (kind, placement) in enumerate(placements):
                m = meas.evaluate(placement)
                latencies.append(m.latency if m.feasible else None)
                reasons[i] = reasons[i] or m.reason
                print(
                    f"{name} pass {r + 1} {i + 1}/{count} {kind:6s} measured {m.latency * 1e3:8.2f} ms "
                    f"simulated {sim.evaluate(placement).latency * 1e3:8.2f} ms ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
            passes.append(latencies)
    finally:
        meas.close()
    rows = []
    for i, (kind, placement) in enumerate(placements):
        reps = [p[i] for p in passes]
        s = sim.evaluate(placement)
        rows.append(
            {
                "kind": kind,
                "placement": placement.tolist(),
                "measured": float(np.median(reps)) if all(v is not None for v in reps) else None,
                "measured_replicates": reps,
                "measured_reason": reasons[i],
                "simulated": s.latency if s.feasible else None,
                "simulated_reason": s.reason,
            }
        )
    ok = [r for r in rows if r["measured"] is not None and r["simulated"] is not None]
    summary: dict[str, Any] = {"groups": coarse.num_groups, "evaluated": len(rows), "feasible": len(ok)}
    for kind in (None, "iid", "blocks"):
        sel = [r for r in ok if kind is None or r["kind"] == kind]
        stats = compare(np.array([r["measured"] for r in sel]), np.array([r["simulated"] for r in sel]))
        summary["all" if kind is None else kind] = stats
    if replicates >= 2:
        first = np.array([r["measured_replicates"][0] for r in ok])
        second = np.array([r["measured_replicates"][1] for r in ok])
        summary["measured_vs_measured"] = compare(first, second)
    return {"summary": summary, "rows": rows, "cost_model": sim.cost_model.meta}


def write_report(results: dict[str, Any], out: Path, args: argparse.Namespace) -> None:
    """Write ``<out>.json`` and ``<out>.md``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "openvino": ov.get_version(),
        "python": pyplatform.python_version(),
        "machine": pyplatform.processor() or pyplatform.machine(),
        "platform": "local",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "models": results}, indent=1))
    lines = [
        "# Simulated vs measured latency (local platform)",
        "",
        f"OpenVINO {meta['openvino']}, {args.count} placements per model at level `{args.level}`, "
        f"measured backend: partitioned executor, warm-up {args.warmup}, median of {args.repeats}.",
        "",
        "| model | groups | placements | Spearman (all) | MAPE (all) | Spearman iid | Spearman blocks "
        "| measured vs measured Spearman | MAPE |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in results.items():
        s = res["summary"]
        lines.append(
            f"| {name} | {s['groups']} | {s['feasible']}/{s['evaluated']} | {s['all']['spearman']:.3f} | "
            f"{100 * s['all']['mape']:.1f}% | {s['iid']['spearman']:.3f} | {s['blocks']['spearman']:.3f} | "
            + (
                f"{mm['spearman']:.3f} | {100 * mm['mape']:.1f}% |"
                if (mm := s.get("measured_vs_measured"))
                else "- | - |"
            )
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert"])
    parser.add_argument("--count", type=int, default=50, help="placements per model (>= 2)")
    parser.add_argument("--level", default="fused", help="coarsening level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--replicates", type=int, default=2, help="measurement passes (>= 2 reports the noise ceiling)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/sim_vs_measured"))
    args = parser.parse_args(argv)
    if args.count < 2:
        parser.error("--count must be >= 2")
    results = {}
    for name in args.models:
        results[name] = run_model(
            name, args.count, args.seed, args.warmup, args.repeats, args.level, args.replicates
        )
        write_report(results, args.out, args)
        print(json.dumps({name: results[name]["summary"]}, indent=1), flush=True)
    return results


if __name__ == "__main__":
    main()
