"""Score against evaluations for the SB3 learners and the searches on the simulated suite tasks.

One run per (task, method, seed) with the largest checkpoint as its budget; the score at a checkpoint
``n`` is the normalised score (0: best single device, 1: stored optimum) of the best placement among the
run's first ``n`` evaluations. Where a method's settings do not depend on its budget, the first ``n``
evaluations of a long run are those of a run with budget ``n`` (up to the final deterministic placement,
one evaluation); ``ppo_gnn`` and ``maskable_ppo_gnn`` take a learning rate that falls with the budget
(:func:`agents.sb3.recipe.budget_learning_rate`), so their score at budget ``n`` is a run with
``--checkpoints ... n`` as its largest. Rows are JSON lines (one per run, written when the run ends); a
rerun skips every run already stored, so the script resumes. ``--table`` prints the medians over seeds
per set of checkpoints; ``--curves`` prints one curve per task and method, reading each checkpoint of a
seed from that seed's shortest run that reaches it (:func:`curves`), and ``--plot PATH`` draws them.

    nice -n 10 python -m experiments.records.rl_curves --out /work/data/rl-policy/curves \
        --tasks inception_v3:cpu-igpu resnet50:cpu-igpu bert:cpu-igpu --methods ppo_gnn ppo_mlp \
        --seeds 0 1 2 --checkpoints 100 500 5000 20000
    python -m experiments.records.rl_curves --out /work/data/rl-policy/curves --table
    python -m experiments.records.rl_curves --out /work/data/rl-policy/curves --curves --plot curves.png
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
from experiments.runs import read_json_lines
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
TARGET = 1.03  # the suite's ratio to the optimum to reach, drawn in every panel


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
        "graph_version": problem.benchmark.version,
        "groups": problem.num_groups,
        "optimum_ms": ref.latency * 1e3,
        "evaluations": result.evaluations,
        "wall_s": round(result.wall_time, 1),
        "cpu_s": round(cpu, 1),
        "load": os.getloadavg()[0],
    }


def _key(row: dict) -> tuple:
    return row["task"], row["method"], row["seed"], tuple(row["checkpoints"])


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


def curves(rows: list[dict]) -> dict[tuple[str, str], dict[int, list[dict]]]:
    """Per (task, method) and checkpoint ``n``, the runs that give the curve's point at ``n``: for each
    seed, its run of the smallest budget (largest checkpoint) among those that reach ``n``. A method whose
    settings do not depend on its budget is thus read from whatever runs a seed has (a long one, or a
    shorter one where only that was run); one whose do (``ppo_gnn``'s learning rate) from its run of
    budget ``n`` where there is one."""
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        runs[(r["task"], r["method"])].append(r)
    out: dict[tuple[str, str], dict[int, list[dict]]] = {}
    for key, rs in runs.items():
        points: dict[int, list[dict]] = {}
        for n in sorted({c for r in rs for c in r["checkpoints"]}):
            shortest: dict[int, dict] = {}
            for r in rs:
                if n in r["checkpoints"] and (
                    r["seed"] not in shortest or max(r["checkpoints"]) < max(shortest[r["seed"]]["checkpoints"])
                ):
                    shortest[r["seed"]] = r
            points[n] = [shortest[seed] for seed in sorted(shortest)]
        out[key] = points
    return out


def _median_at(runs: list[dict], n: int, field: str) -> float:
    return statistics.median(r[field][r["checkpoints"].index(n)] for r in runs)


def curve_table(rows: list[dict]) -> str:
    """Markdown: per task and method, the median score (ratio to the optimum) over seeds at every
    checkpoint of :func:`curves` (a point over fewer seeds than the most says how many), and the median
    evaluations the runs of the last point spent (a policy that only resamples placements it has already
    seen stops spending its budget: a repeat is answered from the run's memo)."""
    found = curves(rows)
    most = max(len(runs) for points in found.values() for runs in points.values())
    cps = sorted({n for points in found.values() for n in points})
    lines = [
        "| task | method | " + " | ".join(f"@{c}" for c in cps) + " | evaluations spent |",
        "|" + "---|" * (3 + len(cps)),
    ]
    order = {t: i for i, t in enumerate(SUITE)}
    for (task, method), points in sorted(found.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0])):
        cells = []
        for n in cps:
            if n not in points:
                cells.append("")
                continue
            runs = points[n]
            cells.append(
                f"{_median_at(runs, n, 'score'):.3f} ({_median_at(runs, n, 'ratio'):.4f})"
                + ("" if len(runs) == most else f" [{len(runs)} seeds]")
            )
        spent = statistics.median(r["evaluations"] for r in points[max(points)])
        cells.append(f"{spent:,.0f} of {max(points):,}")
        lines.append(f"| {task.replace(':', ' / ')} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """One panel per task: the median latency above the optimum (%, log scale; the optimum itself is
    drawn at 0.01%) against evaluations (log scale), one line per method, from :func:`curves`, without
    the points over fewer seeds than the rest of their curve; a dotted line marks :data:`TARGET`."""
    from matplotlib.figure import Figure

    found = curves(rows)
    tasks = [t for t in SUITE if any(k[0] == t for k in found)]
    tasks += sorted({k[0] for k in found} - set(tasks))
    methods = sorted({k[1] for k in found})
    styles = {m: (f"C{i % 10}", "osD^v<>p*h"[i % 10]) for i, m in enumerate(methods)}
    # a point over fewer seeds than the rest of its curve is left out: its median is of other seeds
    medians = {}
    for key, points in found.items():
        seeds = max(map(len, points.values()))
        medians[key] = {n: _median_at(runs, n, "ratio") for n, runs in points.items() if len(runs) == seeds}
    top = max(max(max(m.values()) for m in medians.values()) - 1.0, 1e-3) * 100 * 1.5
    checkpoints = sorted({n for m in medians.values() for n in m})
    handles = {}
    cols = 3
    rows_n = -(-len(tasks) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows_n), dpi=80)
    for i, task in enumerate(tasks):
        ax = fig.add_subplot(rows_n, cols, i + 1)
        for method in methods:
            ratio = medians.get((task, method))
            if not ratio:
                continue
            xs = sorted(ratio)
            ys = [max(ratio[n] - 1.0, 1e-4) * 100 for n in xs]
            colour, marker = styles[method]
            (handles[method],) = ax.plot(xs, ys, marker=marker, ms=4, lw=1, color=colour, alpha=0.8)
        ax.axhline(100 * (TARGET - 1.0), ls=":", lw=0.8, color="grey")  # issue #22's 1.03x
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.007, top)
        ax.set_xlim(checkpoints[0] / 1.5, checkpoints[-1] * 1.5)
        ax.set_title(task.replace(":", " / "), fontsize=9)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("% above the optimum", fontsize=8)
        if i >= len(tasks) - cols:
            ax.set_xlabel("evaluations", fontsize=8)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(methods), 5), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of rows.jsonl")
    parser.add_argument("--tasks", nargs="+", default=list(CPU_IGPU), help="model:platform (or 'suite')")
    parser.add_argument("--methods", nargs="+", default=[*LEARNERS, *SEARCHES], help="method specs")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--checkpoints", nargs="+", type=int, default=[100, 500, 5000, 20000])
    parser.add_argument("--table", action="store_true", help="only print the table of the stored rows")
    parser.add_argument("--curves", action="store_true", help="only print the stored rows' curves")
    parser.add_argument("--plot", type=Path, help="only draw the stored rows' curves to this image")
    args = parser.parse_args(argv)
    path = args.out / "rows.jsonl"
    if args.table or args.curves or args.plot:
        rows = read_json_lines(path)
        if not rows:
            parser.error(f"no stored runs in {path}")
        if args.table:
            print(table(rows))
        if args.curves:
            print(curve_table(rows))
        if args.plot:
            plot(rows, args.plot)
        return
    tasks = list(SUITE) if args.tasks == ["suite"] else args.tasks
    args.out.mkdir(parents=True, exist_ok=True)
    done = {_key(r) for r in read_json_lines(path)}
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
