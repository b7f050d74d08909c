"""Do the piecewise and the partitioned executors measure the same thing? Both on the same placements.

The partitioned executor compiles each same-device segment of a placement (what a deployment of that
placement would compile); the piecewise executor compiles every group once and chains the pieces
(:mod:`placement_gym.measured.pieces`). For each model (fused coarse graph, ``local`` platform) this
measures, with the measured backend's adaptive protocol, on the same placements:

* ``single``: every group on one device (each device);
* ``heft``: HEFT's placement on the simulator's cost model of this machine;
* ``sim_best``: the simulator's best placement found by a one-group-flip descent from HEFT's and from
  each single device (simulated backend, same platform);
* ``random``: ``--count`` placements, each group on a uniformly random device.

The two executors measure each placement back to back, in alternating order (so drift hits both alike);
the partitioned executor's compile time is recorded but not timed. Rows are appended to
``<out>.jsonl`` as they are measured, one per placement; a rerun skips the placements already there
(resumable). The summary (``<out>.md``): per model and overall, Spearman rank correlation of the two
latencies, the median and the quartiles of the ratio pieces / partitioned, by kind, and the load average.

Usage:
    python -m experiments.fidelity.executor_agreement --models resnet50 bert --count 50 --out results/executor_agreement
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from scipy.stats import spearmanr

from placement_gym.benchmarks import load_benchmark
from placement_gym.heuristics.heft import heft_placement
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.platforms import load_platform
from placement_gym.problem import PlacementProblem

EXECUTORS = ("partitioned", "pieces")


def _descend(problem: PlacementProblem, start: np.ndarray, passes: int = 3) -> tuple[np.ndarray, float]:
    """One-group-flip descent on the simulator from ``start``; the best placement and its latency."""
    best = start.copy()
    best_lat = problem.backend.evaluate(best).latency
    for _ in range(passes):
        improved = False
        for g in range(problem.num_groups):
            for d in range(problem.num_devices):
                if d == best[g]:
                    continue
                trial = best.copy()
                trial[g] = d
                lat = problem.backend.evaluate(trial).latency
                if lat < best_lat:
                    best, best_lat, improved = trial, lat, True
        if not improved:
            break
    return best, best_lat


def placements(model: str, count: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """``(kind, placement of shape (G,))``: single devices, HEFT's, the simulator's best, then random."""
    sim = PlacementProblem.make(model, "local", "simulated")
    g, d = sim.num_groups, sim.num_devices
    allowed = np.ones((g, d), dtype=bool)
    heft, _ = heft_placement(sim.cost_model(), allowed)
    heft = np.asarray(heft, dtype=np.int64)
    starts = [heft] + [np.full(g, k, dtype=np.int64) for k in range(d)]
    best = min((_descend(sim, s) for s in starts), key=lambda r: r[1])[0]
    out = [("single", np.full(g, k, dtype=np.int64)) for k in range(d)]
    out += [("heft", heft), ("sim_best", best)]
    rng = np.random.default_rng(seed)
    out += [("random", rng.integers(0, d, g).astype(np.int64)) for _ in range(count)]
    return out


def _result(backend: MeasuredBackend, placement: np.ndarray) -> dict[str, Any]:
    backend.results.clear()
    start = time.perf_counter()
    r = backend.evaluate(placement)
    timing = backend.last_timing
    return {
        "latency": r.latency if r.feasible else None,
        "ci": r.ci if r.feasible else None,
        "samples": r.samples,
        "stop": timing.stop if timing else None,
        "wall_s": time.perf_counter() - start,
        "reason": r.reason,
    }


def measure_model(model: str, args: argparse.Namespace, rows_path: Path) -> None:
    done = set()
    if rows_path.exists():
        for line in rows_path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a torn last line from an interrupted run
                continue
            if row.get("model") == model:
                done.add(row["index"])
    todo = [(i, k, p) for i, (k, p) in enumerate(placements(model, args.count, args.seed)) if i not in done]
    if not todo:
        return
    bench = load_benchmark(model)
    graph = bench.coarsen("fused")
    platform = load_platform("local")
    protocol = dict(rel_ci=args.rel_ci, max_repeats=args.max_repeats, time_budget=args.time_budget)
    backends = {
        "partitioned": MeasuredBackend(
            bench, graph, platform, executor="partitioned", max_compiled_ops=2 * bench.ops.num_nodes, **protocol
        ),
        "pieces": MeasuredBackend(bench, graph, platform, executor="pieces", **protocol),
    }
    for index, kind, placement in todo:
        order = EXECUTORS if index % 2 == 0 else EXECUTORS[::-1]
        row: dict[str, Any] = {"model": model, "index": index, "kind": kind, "placement": placement.tolist()}
        load_before = os.getloadavg()[0]
        for name in order:
            backend = backends[name]
            start = time.perf_counter()
            backend.executor.prepare(graph.expand(placement))  # compile outside the timed evaluation
            row[f"{name}_prepare_s"] = time.perf_counter() - start
            row[name] = _result(backend, placement)
        row["segments"] = len(backends["partitioned"].executor.segments(graph.expand(placement)))
        row["load"] = [load_before, os.getloadavg()[0]]
        row["protocol"] = protocol
        row["openvino"] = ov.get_version()
        with open(rows_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            f"{model} {index:3d} {kind:8s} partitioned {_ms(row['partitioned'])} pieces {_ms(row['pieces'])} "
            f"segments {row['segments']} load {row['load'][1]:.1f}",
            flush=True,
        )
    for backend in backends.values():
        backend.close()


def _ms(result: dict[str, Any]) -> str:
    return "inf" if result["latency"] is None else f"{result['latency'] * 1e3:.2f} ms"


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per model (and overall) Spearman and ratio quartiles, by kind."""
    ok = [r for r in rows if r["partitioned"]["latency"] and r["pieces"]["latency"]]
    lines = [
        "| model | kind | placements | Spearman | ratio pieces / partitioned: median (q1-q3) | load (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for model in sorted({r["model"] for r in ok}):
        mine = [r for r in ok if r["model"] == model]
        for kind in ("all", "single", "heft", "sim_best", "random"):
            sel = mine if kind == "all" else [r for r in mine if r["kind"] == kind]
            if not sel:
                continue
            a = np.array([r["partitioned"]["latency"] for r in sel])
            b = np.array([r["pieces"]["latency"] for r in sel])
            ratio = b / a
            rho = f"{spearmanr(a, b).statistic:.3f}" if len(sel) >= 3 else "-"
            q1, med, q3 = np.percentile(ratio, [25, 50, 75])
            loads = [x for r in sel for x in r["load"]]
            lines.append(
                f"| {model} | {kind} | {len(sel)} | {rho} | {med:.3f} ({q1:.3f}-{q3:.3f}) | "
                f"{min(loads):.1f}-{max(loads):.1f} |"
            )
    failed = len(rows) - len(ok)
    if failed:
        lines.append(f"\n{failed} placements infeasible on an executor (left out).")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert"])
    parser.add_argument("--count", type=int, default=50, help="random placements per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rel-ci", type=float, default=0.02)
    parser.add_argument("--max-repeats", type=int, default=30)
    parser.add_argument("--time-budget", type=float, default=10.0)
    parser.add_argument("--out", default="results/executor_agreement")
    args = parser.parse_args(argv)
    rows_path = Path(args.out + ".jsonl")
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        measure_model(model, args, rows_path)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    text = "\n".join(summary(rows)) + "\n"
    Path(args.out + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
