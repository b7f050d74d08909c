"""Sim-to-real, end to end: search in the simulator calibrated to this machine, fine-tune on the measured
env, re-measure the fine-tune's best candidates to pick one, then measure the three answers back to back.

Per model, on the ``local`` platform (fused groups), four stages, each written to ``<out>.jsonl`` as it
goes (a rerun resumes where the last one stopped):

1. ``sim``: the simulator calibrated to this machine (``local`` platform, ``simulated`` backend: per-layer
   profiles and segment-boundary figures measured here). HEFT's placement on its cost model; the
   simulator's best placement, the fastest simulated of a one-group-flip descent from HEFT's and from each
   single device and of the shipped pretrained policy (``pretrained_ppo``, ``--policy``) run on the
   simulator for ``--sim-budget`` evaluations.
2. ``fine_tune``: the shipped policy fine-tuned on the measured problem of ``DevicePlacement-<model>-local-measured-v1``
   (``measured`` backend, its default protocol): ``--fine-tune`` measured evaluations of MaskablePPO
   updates (episodes of the improvement MDP from HEFT's placement), then the policy-ranked descent from the
   simulator's best placement, ``--budget`` measured placements in all (fine-tuning included), each
   measured once. Each measured placement is written as a ``fine_tune_eval`` row as it comes;
   measurements are persisted in ``<out>.<model>.cache.jsonl``, so a restarted fine-tune replays them.
3. ``remeasure`` and ``pick`` (:mod:`experiments.fidelity.remeasure`): the ``--candidates`` placements of
   the fine-tune with the fastest single measurement, the simulator's best and the all-on-host placement
   always among them, measured
   again in ``--remeasure-rounds`` rotating rounds drift-corrected like the comparison (a ``remeasure``
   row each); the fine-tuned placement (the ``pick`` row) is the simulator's best unless a candidate
   re-measured faster with disjoint 95% intervals (then the fastest such).
4. ``compare``: the fine-tuned placement, the simulator's best and HEFT's measured in one run with the
   measured backend's drift correction (``reference="host"``: every timed run of a candidate is paired with
   a run of the all-on-host placement), ``--rounds`` rounds, the three back to back in an order that
   cycles through all six permutations, every round a fresh measurement (no result cache), independent of
   the re-measurement the pick was made on. Per placement the per-pair ratios of all rounds are pooled
   (:mod:`experiments.fidelity.rounds`): latency = median ratio x the median of all the run's reference
   runs, with the 95% interval of the median ratio (order statistics) scaled alike; the raw median of its
   own runs is reported beside it.

The summary ``<out>.md`` has one line per model and placement and the verdict of the target (the
fine-tuned placement no worse than the other two: its interval's lower end not above theirs' upper end),
then the re-measured candidates of the pick. Run the timing pinned to one core (see docs/sim-to-real.md
for the command and what one core means for the two virtual CPUs of ``local``).

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

from experiments.fidelity import rounds
from experiments.fidelity.remeasure import CANDIDATES, REMEASURE_ROUNDS, candidates, pick
from experiments.fidelity.sim_to_real_report import KINDS, summary
from experiments.runs import read_json_lines
from placement_gym.problem import PlacementProblem

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
    """Stage 2: the shipped policy fine-tuned on the measured problem, each placement measured once."""
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
    """Stage 4: the three placements in alternating order, ``args.rounds`` rounds, drift-corrected."""
    todo = [(r, k) for r in range(args.rounds) for k in ORDERS[r % len(ORDERS)] if (r, k) not in done]
    rounds.measure(
        model,
        chosen,
        todo,
        rounds.protocol(args.rel_ci, args.time_budget),
        lambda r, kind: {"model": model, "stage": "compare", "round": r, "kind": kind},
        log,
    )


def remeasure_stage(
    model: str,
    cands: list[dict[str, Any]],
    args: argparse.Namespace,
    done: set[tuple[int, int]],
    log: Callable[[dict[str, Any]], None],
) -> None:
    """Stage 3: the fine-tune's candidates, ``args.remeasure_rounds`` rounds, drift-corrected."""
    todo = [x for x in rounds.rotations(range(len(cands)), args.remeasure_rounds) if x not in done]
    placements = {i: np.asarray(c["placement"], dtype=np.int64) for i, c in enumerate(cands)}
    rounds.measure(
        model,
        placements,
        todo,
        rounds.protocol(args.rel_ci, args.time_budget),
        lambda r, i: {
            "model": model,
            "stage": "remeasure",
            "round": r,
            "candidate": i,
            "fine_tune_ms": cands[i]["fine_tune_ms"],
        },
        log,
    )


def pick_row(
    model: str,
    cands: list[dict[str, Any]],
    sim_best: list[int],
    measured: list[dict[str, Any]],
    remeasure_rounds: int,
) -> dict[str, Any]:
    """The ``pick`` row: the fine-tuned placement chosen from the candidates' re-measurement rows."""
    stats = rounds.pool(measured, "candidate", range(len(cands)))
    sim_index = next(i for i, c in enumerate(cands) if c["placement"] == sim_best)
    index = pick(stats, sim_index, remeasure_rounds)
    return {
        "model": model,
        "stage": "pick",
        "index": index,
        "placement": cands[index]["placement"],
        "sim_index": sim_index,
        "candidates": cands,
        "remeasured": [stats.get(i) for i in range(len(cands))],
        "rounds": remeasure_rounds,
    }


def run_model(model: str, args: argparse.Namespace, out: Path) -> None:
    """The four stages of one model, each skipped (or resumed) when its rows are already in ``out``."""
    rows = [r for r in read_json_lines(out) if r.get("model") == model]

    def log(row: dict[str, Any]) -> None:
        _append(out, row)
        rows.append(row)

    def stage(name: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["stage"] == name]

    sim = next(iter(stage("sim")), None)
    if sim is None:
        sim = sim_stage(model, args.policy, args.sim_budget, args.seed)
        log(sim)
        print(
            f"{model} sim: best {sim['sim_best_sim_ms']:.2f} ms ({sim['sim_best_source']}), "
            f"HEFT {sim['heft_sim_ms']:.2f} ms",
            flush=True,
        )
    tune = next(iter(stage("fine_tune")), None)
    if tune is None:
        cache = out.with_name(f"{out.stem}.{model}.cache.jsonl")
        tune = fine_tune_stage(model, np.asarray(sim["sim_best"], dtype=np.int64), args, cache, log)
        log(tune)
        print(
            f"{model} fine-tune: best measured {tune['best_measured_ms']:.2f} ms after "
            f"{tune['evaluations']} placements",
            flush=True,
        )
    chosen = next(iter(stage("pick")), None)
    if chosen is None:
        if stage("compare"):
            raise SystemExit(
                f"{out}: {model} was compared with the fine-tune's pick by one measurement "
                "(no re-measurement rows); give a new --out"
            )
        host = [0] * len(sim["sim_best"])  # local's host is its device 0
        cands = candidates(stage("fine_tune_eval"), sim["sim_best"], host, args.candidates)
        if any(
            r["candidate"] >= len(cands) or r["placement"] != cands[r["candidate"]]["placement"]
            for r in stage("remeasure")
        ):
            raise SystemExit(
                f"{out}: {model}'s candidates were re-measured with another --candidates (or before "
                "all-on-host was always among them); give the options of that run or a new --out"
            )
        done = {(r["round"], r["candidate"]) for r in stage("remeasure")}
        remeasure_stage(model, cands, args, done, log)
        chosen = pick_row(model, cands, sim["sim_best"], stage("remeasure"), args.remeasure_rounds)
        log(chosen)
        print(
            f"{model} pick: candidate {chosen['index']} of {len(cands)} "
            f"(the simulator's best is {chosen['sim_index']})",
            flush=True,
        )
    fine_tuned = np.asarray(chosen["placement"], dtype=np.int64)
    placements = {
        "fine_tuned": fine_tuned,
        "sim_best": np.asarray(sim["sim_best"], dtype=np.int64),
        "heft": np.asarray(sim["heft"], dtype=np.int64),
    }
    done = {(r["round"], r["kind"]) for r in stage("compare")}
    compare_stage(model, placements, args, done, log)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v3", "resnet50"])
    parser.add_argument("--policy", default="all", help="shipped pretrained_ppo policy (or a policy folder)")
    parser.add_argument("--sim-budget", type=int, default=1000, help="simulated evaluations of the policy")
    parser.add_argument("--budget", type=int, default=100, help="measured placements of the fine-tune in all")
    parser.add_argument("--fine-tune", type=int, default=30, help="of them, evaluations of PPO updates")
    parser.add_argument(
        "--candidates",
        type=int,
        default=CANDIDATES,
        help="placements re-measured before the pick (>= 2: the simulator's best and all-on-host among them)",
    )
    parser.add_argument(
        "--remeasure-rounds",
        type=int,
        default=REMEASURE_ROUNDS,
        help="rounds of the re-measurement of the candidates",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the final comparison")
    parser.add_argument(
        "--rel-ci", type=float, default=0.02, help="re-measure and compare: half-width per round"
    )
    parser.add_argument(
        "--time-budget", type=float, default=10.0, help="re-measure and compare: s per measurement"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sim_to_real", help="writes <out>.jsonl and <out>.md")
    parser.add_argument("--report", action="store_true", help="only write <out>.md from <out>.jsonl")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.budget < 2 or not 0 <= args.fine_tune < args.budget - 1:
        raise SystemExit(f"--fine-tune {args.fine_tune} must leave 2 of --budget {args.budget} to the search")
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    if args.candidates < 2:
        raise SystemExit(
            f"--candidates must be >= 2 (the simulator's best and the all-on-host placement), "
            f"got {args.candidates}"
        )
    if args.remeasure_rounds < 1:
        raise SystemExit(f"--remeasure-rounds must be >= 1, got {args.remeasure_rounds}")
    out = Path(args.out + ".jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.report and not out.is_file():
        raise SystemExit(f"--report needs the rows of a run: {out} does not exist")
    for model in [] if args.report else args.models:
        run_model(model, args, out)
    text = "\n".join(summary(read_json_lines(out), args.rounds, args.remeasure_rounds)) + "\n"
    Path(args.out + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
