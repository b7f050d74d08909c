"""Where the improvement MDP's move sets get stuck: best-improvement descents over each move set.

For each task and move set of :class:`~placement_gym.envs.DevicePlacementImproveEnv`, a descent from the
env's start (HEFT, or the best single device) simulates every allowed action of the current placement
(offline: no budget), takes the best, and stops at a local optimum (no action improves). The end point's
latency over the stored reference optimum says how far a policy that only ever improves can get with
those moves; a start that is already a local optimum of a move set caps that set.

    python -m experiments.records.improve_descent --out results/improve-descent/descent.json
    python -m experiments.records.improve_descent --table results/improve-descent/descent.json  # the table again
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import placement_gym
from placement_gym.envs import DevicePlacementImproveEnv

MOVE_SETS = ("single", "single,class", "single,segment", "single,branch", "single,class,segment,branch")


def descent(env: DevicePlacementImproveEnv, start: str) -> dict:
    """Best-improvement descent over ``env``'s actions from ``start``; the end point and its cost."""
    _, info = env.reset(seed=0, options={"start": start})
    problem = env.problem
    evaluated, steps = 0, 0
    while True:
        actions = np.flatnonzero(env.action_masks())
        s, d = np.divmod(actions, env.num_devices)
        rows = np.repeat(env.placement[None, :], len(actions), axis=0)
        for i, (set_index, device) in enumerate(zip(s.tolist(), d.tolist())):
            rows[i, env._members[set_index]] = device
        latencies = np.array([e.latency for e in problem.evaluate_batch(rows)])
        evaluated += len(rows)
        best = int(np.argmin(latencies))
        if not latencies[best] < info["current_latency"]:
            break
        _, _, _, _, info = env.step(int(actions[best]))
        steps += 1
    return {"latency": info["current_latency"], "steps": steps, "evaluated": evaluated}


def markdown(rows: list[dict]) -> str:
    """End ratios to the optimum, one row per (task, start), one column per move set."""
    head = "| model | platform | start | start ratio | " + " | ".join(MOVE_SETS) + " |"
    lines = [head, "|" + "---|" * (4 + len(MOVE_SETS))]
    cells: dict[tuple, dict[str, float]] = {}
    starts: dict[tuple, float] = {}
    for r in rows:
        key = (r["model"], r["platform"], r["start"])
        cells.setdefault(key, {})[r["moves"]] = r["end_ratio"]
        starts[key] = r["start_ratio"]
    for key, ends in cells.items():
        values = " | ".join(f"{ends[m]:.4f}" if m in ends else "" for m in MOVE_SETS)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {starts[key]:.4f} | {values} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(placement_gym.BENCHMARK_MODELS))
    parser.add_argument("--platforms", nargs="+", default=list(placement_gym.IMPROVE_PLATFORMS))
    parser.add_argument("--starts", nargs="+", default=["heft", "best_single"])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the table of a written --out file")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(markdown(json.loads(args.table.read_text())["rows"]))
        return
    rows = []
    for model in args.models:
        for platform in args.platforms:
            for moves in MOVE_SETS:
                env = gym.make(
                    placement_gym.improve_id(model, platform), moves=moves, max_steps=10**6
                ).unwrapped
                optimum = env.problem.reference.latency
                for start in args.starts:
                    t = time.process_time()
                    out = descent(env, start)
                    start_latency = env.problem.evaluate(
                        env.heft_placement() if start == "heft" else env.problem.baseline_placement
                    ).latency
                    row = dict(
                        model=model, platform=platform, moves=moves, start=start,
                        start_ratio=start_latency / optimum, end_ratio=out["latency"] / optimum,
                        steps=out["steps"], evaluated=out["evaluated"], cpu_s=round(time.process_time() - t, 2),
                    )  # fmt: skip
                    rows.append(row)
                    print(
                        f"{model:13s} {platform:14s} {start:11s} {moves:28s} start {row['start_ratio']:.4f} "
                        f"-> {row['end_ratio']:.4f} ({row['steps']} moves, {row['evaluated']} simulated)",
                        flush=True,
                    )
                env.close()
    print(markdown(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"command": "python -m experiments.records.improve_descent", "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
