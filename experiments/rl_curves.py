"""Score against evaluations for the SB3 learners and the searches on the simulated suite tasks.

One run per (task, method, seed) with the largest checkpoint as its budget; the score at a checkpoint
``n`` is the normalised score (0: best single device, 1: stored optimum) of the best placement among the
run's first ``n`` evaluations. Where a method's settings do not depend on its budget, the first ``n``
evaluations of a long run are those of a run with budget ``n`` (up to the final deterministic placement,
one evaluation); ``ppo_gnn`` and ``maskable_ppo_gnn`` take a learning rate that falls with the budget
(:func:`agents.sb3.recipe.budget_learning_rate`), so their score at budget ``n`` is a run with
``--checkpoints ... n`` as its largest. Rows are JSON lines (one per run, written when the run ends); a
rerun skips every run already stored, so the script resumes. ``--table`` prints the medians over seeds.

    nice -n 10 python -m experiments.rl_curves --out /work/data/rl-policy/curves \
        --tasks inception_v3:cpu-igpu resnet50:cpu-igpu bert:cpu-igpu --methods ppo_gnn ppo_mlp \
        --seeds 0 1 2 --checkpoints 100 500 5000 20000
    python -m experiments.rl_curves --out /work/data/rl-policy/curves --table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from agents.specs import parse_spec
from placement_gym.problem import PlacementProblem

CPU_IGPU = ("inception_v3:cpu-igpu", "resnet50:cpu-igpu", "bert:cpu-igpu")
#: The 12 simulated suite tasks: three models on cpu-dgpu, cpu-igpu, multi-accel, model-parallel.
SUITE = tuple(
    f"{m}:{p}"
    for p in ("cpu-dgpu", "cpu-igpu", "multi-accel", "model-parallel")
    for m in ("inception_v3", "resnet50", "bert")
)
LEARNERS = ("ppo_gnn", "a2c_gnn", "maskable_ppo_gnn", "ppo_mlp")
SEARCHES = ("random_search", "local_search")


def best_at(history: list[tuple[int, float]], checkpoints: list[int]) -> list[float]:
    """Best latency among the first ``n`` evaluations of ``history``, for each ``n`` of ``checkpoints``."""
    used = np.array([h[0] for h in history], dtype=np.int64)
    best = np.array([h[1] for h in history], dtype=np.float64)
    out = []
    for n in checkpoints:
        i = np.searchsorted(used, n, side="right") - 1
        out.append(float(best[i]) if i >= 0 else float("inf"))
    return out


def run(task: str, spec: str, seed: int, checkpoints: list[int]) -> dict:
    """One run: a JSON-able row with the score and ratio to the optimum at every checkpoint."""
    model, platform = task.split(":")
    problem = PlacementProblem.make(model, platform, "simulated")
    method = parse_spec(spec).build()
    cpu0 = time.process_time()
    result = method.place(problem, budget=max(checkpoints), seed=seed)
    cpu = time.process_time() - cpu0
    ref = problem.reference
    lat = best_at(result.history, checkpoints)
    return {
        "task": task,
        "method": spec,
        "seed": seed,
        "checkpoints": checkpoints,
        "score": [round(problem.score(x), 4) for x in lat],
        "ratio": [round(x / ref.latency, 4) for x in lat],
        "evaluations": result.evaluations,
        "wall_s": round(result.wall_time, 1),
        "cpu_s": round(cpu, 1),
        "load": os.getloadavg()[0],
    }


def _key(row: dict) -> tuple:
    return row["task"], row["method"], row["seed"], tuple(row["checkpoints"])


def read_rows(path: Path) -> list[dict]:
    """The rows stored at ``path`` (a torn last line is skipped)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: median over seeds of score (ratio to optimum) at each checkpoint, per task and method."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["method"], tuple(r["checkpoints"]))].append(r)
    lines = []
    for cps in sorted({key[2] for key in groups}):
        lines += ["", "| task | method | seeds | " + " | ".join(f"@{c}" for c in cps) + " |"]
        lines.append("|" + "---|" * (3 + len(cps)))
        for (task, method, key_cps), rs in sorted(groups.items()):
            if key_cps != cps:
                continue
            cells = [
                f"{statistics.median(r['score'][i] for r in rs):.3f} "
                f"({statistics.median(r['ratio'][i] for r in rs):.4f})"
                for i in range(len(cps))
            ]
            lines.append(f"| {task} | {method} | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines[1:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of rows.jsonl")
    parser.add_argument("--tasks", nargs="+", default=list(CPU_IGPU), help="model:platform (or 'suite')")
    parser.add_argument("--methods", nargs="+", default=[*LEARNERS, *SEARCHES], help="method specs")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--checkpoints", nargs="+", type=int, default=[100, 500, 5000, 20000])
    parser.add_argument("--table", action="store_true", help="only print the table of the stored rows")
    args = parser.parse_args(argv)
    path = args.out / "rows.jsonl"
    if args.table:
        print(table(read_rows(path)))
        return
    tasks = list(SUITE) if args.tasks == ["suite"] else args.tasks
    args.out.mkdir(parents=True, exist_ok=True)
    done = {_key(r) for r in read_rows(path)}
    for seed in args.seeds:
        for task in tasks:
            for spec in args.methods:
                key = (task, spec, seed, tuple(args.checkpoints))
                if key in done:
                    continue
                row = run(task, spec, seed, args.checkpoints)
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
