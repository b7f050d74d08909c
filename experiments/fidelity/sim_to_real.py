"""Sim-to-real, end to end: search in the simulator calibrated to this machine, fine-tune on the measured
env, then measure the three answers back to back.

Per model, on the ``local`` platform (fused groups), three stages, each written to ``<out>.jsonl`` as it
finishes (a rerun resumes where the last one stopped):

1. ``sim``: the simulator calibrated to this machine (``local`` platform, ``simulated`` backend: per-layer
   profiles and segment-boundary figures measured here). HEFT's placement on its cost model; the
   simulator's best placement, the fastest simulated of a one-group-flip descent from HEFT's and from each
   single device and of the shipped pretrained policy (``pretrained_ppo``, ``--policy``) run on the
   simulator for ``--sim-budget`` evaluations.
2. ``fine_tune``: the shipped policy fine-tuned on the measured problem of ``DevicePlacement-<model>-local-measured-v1``
   (``measured`` backend, its default protocol): ``--fine-tune`` measured evaluations of MaskablePPO
   updates (episodes of the improvement MDP from HEFT's placement), then the policy-ranked descent from the
   simulator's best placement, ``--budget`` measured placements in all (fine-tuning included). The final
   placement is the best measured placement seen during fine-tuning (the simulator's best, measured as the
   descent's start, among them). Each measured placement is written as a ``fine_tune_eval`` row as it comes;
   measurements are persisted in ``<out>.<model>.cache.jsonl``, so a restarted fine-tune replays them.
3. ``compare``: the fine-tuned placement, the simulator's best and HEFT's measured in one run with the
   measured backend's drift correction (``reference="host"``: every timed run of a candidate is paired with
   a run of the all-on-host placement), ``--rounds`` rounds, the three back to back in an order that
   cycles through all six permutations, every round a fresh measurement (no result cache). Per placement
   the per-pair ratios of all rounds are pooled: latency = median ratio x the median of all the run's
   reference runs, with the 95% interval of the median ratio (order statistics) scaled alike; the raw
   median of its own runs is reported beside it.

The summary ``<out>.md`` has one line per model and placement and the verdict of the target (the
fine-tuned placement no worse than the other two: its interval's lower end not above theirs' upper end).
Run the timing pinned to one core (see docs/sim-to-real.md for the command and what one core means for
the two virtual CPUs of ``local``).

Usage:
    python -m experiments.fidelity.sim_to_real --models inception_v3 resnet50 --budget 100 --out runs/sim_to_real
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from experiments.runs import read_json_lines
from placement_gym.problem import PlacementProblem

#: The three placements of the final comparison, in the order of the first round.
KINDS = ("fine_tuned", "sim_best", "heft")
#: The orders of the rounds (round ``r`` takes ``ORDERS[r % 6]``).
ORDERS = list(itertools.permutations(KINDS))


def _append(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _load() -> float:
    return os.getloadavg()[0]


def sim_stage(model: str, policy: str, sim_budget: int, seed: int) -> dict[str, Any]:
    """Stage 1: HEFT's and the simulator's best placement on the calibrated simulator."""
    from agents import make_method
    from experiments.fidelity.executor_agreement import placements

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # ProfileWarning: stored profile vs a fresh time
        warnings.simplefilter("always")
        found = dict((k, p) for k, p in placements(model, 0, seed) if k in ("heft", "sim_best"))
        sim = PlacementProblem.make(model, "local", "simulated")
    for w in caught:
        print(f"warning: {w.message}", flush=True)
    candidates = {"descent": found["sim_best"]}
    if sim_budget:
        result = make_method("pretrained_ppo", policy=policy).place(sim, budget=sim_budget, seed=seed)
        candidates[f"pretrained_ppo:{policy}"] = np.asarray(result.placement, dtype=np.int64)
    simulated = {k: float(sim.backend.evaluate(p).latency) for k, p in candidates.items()}
    source = min(simulated, key=lambda k: simulated[k])  # ties: the descent's (first)
    return {
        "model": model,
        "stage": "sim",
        "heft": found["heft"].tolist(),
        "heft_sim_ms": float(sim.backend.evaluate(found["heft"]).latency) * 1e3,
        "sim_best": candidates[source].tolist(),
        "sim_best_sim_ms": simulated[source] * 1e3,
        "sim_best_source": source,
        "candidates_sim_ms": {k: v * 1e3 for k, v in simulated.items()},
        "single_sim_ms": [
            float(sim.backend.evaluate(np.full(sim.num_groups, d, dtype=np.int64)).latency) * 1e3
            for d in range(sim.num_devices)
        ],
        "warnings": sorted({str(w.message) for w in caught}),
        "wall_s": time.perf_counter() - start,
    }


def _from_start_method(start: np.ndarray, **kwargs: Any) -> Any:
    """``pretrained_ppo`` whose ranked descent starts from ``start`` (not HEFT / the best single device)."""
    from agents.sb3.pretrained_ppo import PretrainedPPO

    class FromStart(PretrainedPPO):
        def _start(self, env: Any, tracker: Any) -> tuple[dict, float]:
            obs, info = env.reset(seed=0, options={"placement": start})
            return obs, float(info["latency"])

    return FromStart(**kwargs)


def fine_tune_stage(
    model: str,
    start: np.ndarray,
    args: argparse.Namespace,
    cache: Path,
    log: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Stage 2: the shipped policy fine-tuned on the measured problem; the best measured placement seen."""
    problem = PlacementProblem.make(model, "local", "measured", backend_kwargs={"cache_path": str(cache)})
    method = _from_start_method(start, policy=args.policy, fine_tune=args.fine_tune)
    begin = time.perf_counter()
    seen_start: list[float] = []

    def listen(run: Any, placement: np.ndarray, latency: float, feasible: bool) -> None:
        if np.array_equal(placement, start):
            seen_start.append(latency * 1e3 if feasible else float("inf"))
        log(
            {
                "model": model,
                "stage": "fine_tune_eval",
                "evaluation": int(run.used),
                "placement": np.asarray(placement).tolist(),
                "latency_ms": latency * 1e3 if feasible else None,
                "best_ms": run.best_latency * 1e3 if np.isfinite(run.best_latency) else None,
                "load": _load(),
                "elapsed_s": time.perf_counter() - begin,
            }
        )

    load_before = _load()
    result = method.place(problem, budget=args.budget, seed=args.seed, listeners=[listen])
    problem.backend.close()
    return {
        "model": model,
        "stage": "fine_tune",
        "policy": args.policy,
        "budget": args.budget,
        "fine_tune": args.fine_tune,
        "evaluations": int(result.evaluations),
        "fine_tune_evaluations": result.extra.get("fine_tune_evaluations"),
        "placement": np.asarray(result.placement).tolist(),
        "best_measured_ms": float(result.latency) * 1e3,
        "start_measured_ms": seen_start[0] if seen_start else None,
        "load": [load_before, _load()],
        "wall_s": time.perf_counter() - begin,
    }


def compare_stage(
    model: str,
    chosen: dict[str, np.ndarray],
    args: argparse.Namespace,
    done: set[tuple[int, str]],
    log: Callable[[dict[str, Any]], None],
) -> None:
    """Stage 3: the three placements in alternating order, ``args.rounds`` rounds, drift-corrected."""
    todo = [(r, k) for r in range(args.rounds) for k in ORDERS[r % len(ORDERS)] if (r, k) not in done]
    if not todo:
        return
    protocol = {"reference": "host", "cache_size": 0, "rel_ci": args.rel_ci, "time_budget": args.time_budget}
    problem = PlacementProblem.make(model, "local", "measured", backend_kwargs=protocol)
    backend = problem.backend
    for r, kind in todo:
        load_before = _load()
        result = backend.evaluate(chosen[kind])
        timing = getattr(backend, "last_timing", None)
        row: dict[str, Any] = {
            "model": model,
            "stage": "compare",
            "round": r,
            "kind": kind,
            "placement": chosen[kind].tolist(),
            "feasible": bool(result.feasible),
            "latency_ms": result.latency * 1e3 if result.feasible else None,
            "ci_ms": result.ci * 1e3 if result.feasible and result.ci is not None else None,
            "times": list(timing.times) if timing else [],
            "reference_times": list(timing.reference_times) if timing else [],
            "load": [load_before, _load()],
            "protocol": protocol,
            "reason": result.reason,
        }
        log(row)
        print(f"{model} round {r} {kind:10s} {_ms(row['latency_ms'])} load {row['load'][1]:.2f}", flush=True)
    backend.close()


def _ms(value: float | None) -> str:
    return "infeasible" if value is None else f"{value:.2f} ms"


def pooled(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind, from one model's ``compare`` rows: the pooled drift-corrected latency and its 95% interval,
    the raw median of its runs and its interval, the rounds and the load range (milliseconds)."""
    from placement_gym.measured.stats import median_ci

    reference = [t for r in rows for t in r["reference_times"]]
    level = float(np.median(reference)) if reference else float("nan")
    out = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind and r["feasible"] and r["times"]]
        if not mine:
            continue
        times = np.array([t for r in mine for t in r["times"]])
        refs = np.array([t for r in mine for t in r["reference_times"]])
        ratio = median_ci(times / refs) if refs.size == times.size else None
        raw = median_ci(times)
        loads = [x for r in mine for x in r["load"]]
        out[kind] = {
            "latency_ms": ratio.median * level * 1e3 if ratio else float("nan"),
            "low_ms": ratio.low * level * 1e3 if ratio else float("nan"),
            "high_ms": ratio.high * level * 1e3 if ratio else float("nan"),
            "ratio_to_host": ratio.median if ratio else float("nan"),
            "raw_ms": raw.median * 1e3,
            "raw_low_ms": raw.low * 1e3,
            "raw_high_ms": raw.high * 1e3,
            "rounds": len(mine),
            "runs": int(times.size),
            "load": (min(loads), max(loads)),
            "placement": mine[0]["placement"],
        }
    return out


def verdict(stats: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Fine-tuned against each other placement: ``better`` / ``worse`` (intervals disjoint) or ``tie``."""
    out = {}
    ft = stats.get("fine_tuned")
    for kind in KINDS[1:]:
        other = stats.get(kind)
        if ft is None or other is None:
            out[kind] = "missing"
        elif ft["high_ms"] < other["low_ms"]:
            out[kind] = "better"
        elif ft["low_ms"] > other["high_ms"]:
            out[kind] = "worse"
        else:
            out[kind] = "tie"
    return out


def summary(rows: list[dict[str, Any]], rounds: int) -> list[str]:
    """Markdown lines: per model the three placements' measured latencies, intervals and the verdict."""
    lines = [
        "| model | placement | groups on cpu0 / cpu1 | simulated ms | measured ms (95% interval) "
        "| ratio to all-on-host "
        "| raw median ms (95% interval) | rounds | load (min-max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for model in dict.fromkeys(r["model"] for r in rows):
        sim = next((r for r in rows if r["model"] == model and r["stage"] == "sim"), None)
        tune = next((r for r in rows if r["model"] == model and r["stage"] == "fine_tune"), None)
        stats = pooled([r for r in rows if r["model"] == model and r["stage"] == "compare"])
        for kind in KINDS:
            s = stats.get(kind)
            if s is None:
                continue
            counts = np.bincount(np.asarray(s["placement"]), minlength=2)
            simulated = _simulated(sim, s["placement"])
            lines.append(
                f"| {model} | {kind} | {counts[0]} / {counts[1]} | "
                f"{'-' if simulated is None else f'{simulated:.2f}'} | "
                f"{s['latency_ms']:.2f} ({s['low_ms']:.2f}-{s['high_ms']:.2f}) | {s['ratio_to_host']:.3f} | "
                f"{s['raw_ms']:.2f} ({s['raw_low_ms']:.2f}-{s['raw_high_ms']:.2f}) | "
                f"{s['rounds']}/{rounds} | "
                f"{s['load'][0]:.2f}-{s['load'][1]:.2f} |"
            )
        if stats.get("fine_tuned") and stats.get("sim_best"):
            same = stats["fine_tuned"]["placement"] == stats["sim_best"]["placement"]
            notes.append(
                f"- {model}: the fine-tuned placement "
                + ("is the simulator's best (no placement measured faster than it during the fine-tune)"
                   if same else "differs from the simulator's best")
            )
        if stats:
            v = verdict(stats)
            met = all(x in ("better", "tie") for x in v.values())
            notes.append(
                f"- {model}: fine-tuned vs simulator's best: {v['sim_best']}; vs HEFT: {v['heft']}; "
                f"target {'met' if met else 'NOT met'}"
                + (
                    f" (fine-tune: {tune['evaluations']} measured placements, "
                    f"best seen {tune['best_measured_ms']:.2f} ms)"
                    if tune
                    else ""
                )
            )
        stages = {r["stage"] for r in rows if r["model"] == model}
        missing = [s for s in ("sim", "fine_tune") if s not in stages]
        if missing or any(stats.get(k, {}).get("rounds", 0) < rounds for k in KINDS):
            notes.append(f"- {model}: unfinished ({', '.join(missing) or 'compare rounds'} missing)")
    return lines + [""] + notes


def _simulated(sim: dict[str, Any] | None, placement: list[int]) -> float | None:
    """The simulated latency (ms) of ``placement`` if it is the simulator's best or HEFT's, else None."""
    if sim is None:
        return None
    for key in ("sim_best", "heft"):
        if sim[key] == placement:
            return float(sim[f"{key}_sim_ms"])
    return None


def run_model(model: str, args: argparse.Namespace, out: Path) -> None:
    """The three stages of one model, each skipped when its rows are already in ``out``."""
    rows = [r for r in read_json_lines(out) if r.get("model") == model]

    def log(row: dict[str, Any]) -> None:
        _append(out, row)

    sim = next((r for r in rows if r["stage"] == "sim"), None)
    if sim is None:
        sim = sim_stage(model, args.policy, args.sim_budget, args.seed)
        log(sim)
        print(f"{model} sim: best {sim['sim_best_sim_ms']:.2f} ms ({sim['sim_best_source']}), "
              f"HEFT {sim['heft_sim_ms']:.2f} ms", flush=True)
    tune = next((r for r in rows if r["stage"] == "fine_tune"), None)
    if tune is None:
        cache = out.with_name(f"{out.stem}.{model}.cache.jsonl")
        tune = fine_tune_stage(model, np.asarray(sim["sim_best"], dtype=np.int64), args, cache, log)
        log(tune)
        print(f"{model} fine-tune: best measured {tune['best_measured_ms']:.2f} ms after "
              f"{tune['evaluations']} placements", flush=True)
    chosen = {
        "fine_tuned": np.asarray(tune["placement"], dtype=np.int64),
        "sim_best": np.asarray(sim["sim_best"], dtype=np.int64),
        "heft": np.asarray(sim["heft"], dtype=np.int64),
    }
    done = {(r["round"], r["kind"]) for r in rows if r["stage"] == "compare"}
    compare_stage(model, chosen, args, done, log)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v3", "resnet50"])
    parser.add_argument("--policy", default="all", help="shipped pretrained_ppo policy (or a policy folder)")
    parser.add_argument("--sim-budget", type=int, default=1000, help="simulated evaluations of the policy")
    parser.add_argument("--budget", type=int, default=100, help="measured placements of the fine-tune in all")
    parser.add_argument("--fine-tune", type=int, default=30, help="of them, evaluations of PPO updates")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the final comparison")
    parser.add_argument("--rel-ci", type=float, default=0.02, help="comparison: target half-width per round")
    parser.add_argument("--time-budget", type=float, default=10.0, help="comparison: seconds per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sim_to_real", help="writes <out>.jsonl and <out>.md")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.budget < 2 or not 0 <= args.fine_tune < args.budget - 1:
        raise SystemExit(f"--fine-tune {args.fine_tune} must leave 2 of --budget {args.budget} to the search")
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    out = Path(args.out + ".jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        run_model(model, args, out)
    text = "\n".join(summary(read_json_lines(out), args.rounds)) + "\n"
    Path(args.out + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
