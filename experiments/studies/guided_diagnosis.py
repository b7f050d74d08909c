"""Why guided improvement stops short of the optimum: its placement against the proven one, one task.

Takes a ``guided_improvement`` placement from a ``learned_vs_search`` rows file and prints: how many groups
differ from the stored optimum, the latency change of flipping each differing group alone toward the
optimum, and, for every move of the current move set (:func:`agents.learned.moves.propose`), how many
improve, by kind, with the rank of the first improving one under the shipped scorer (or ``--weights``). ``--descend N`` then
runs up to N steps of best-improvement descent evaluating every move (thousands of evaluations a step: a
diagnosis, not a method).

    python -m experiments.studies.guided_diagnosis --rows results/learned-vs-search/rows.jsonl \\
        --model inception_v3 --platform multi-accel --descend 20
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from agents.baselines.common import allowed_devices
from agents.learned.moves import KINDS, MoveFeaturizer, branch_sets, propose, twin_classes
from agents.learned.scorer import PRETRAINED, MoveScorer
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem


def neighbourhood(
    problem: PlacementProblem, placement: np.ndarray, scorer: MoveScorer, top: int = 96
) -> dict:
    """Every move of ``placement`` evaluated: improving moves by kind, the best one, the scorer's rank
    of the first improving move, and how many moves are infeasible (over memory), in all and among the
    scorer's first ``top`` (the method's default depth)."""
    cost = problem.cost_model()
    moves = propose(placement, allowed_devices(problem), twin_classes(cost), branch_sets(cost))
    latency = problem.evaluate(placement).latency
    after = moves.apply_all(placement)
    lat = np.array([e.latency if e.feasible else math.inf for e in problem.evaluate_batch(after)])
    better = lat < latency * (1 - 1e-9)
    order = np.argsort(scorer.predict(MoveFeaturizer(cost).features(placement, latency, moves)))
    ranks = np.flatnonzero(better[order])
    best = int(np.argmin(lat))
    return {
        "moves": len(moves),
        "improving": {k: int((better & (moves.kind == i)).sum()) for i, k in enumerate(KINDS)},
        "first_improving_rank": int(ranks[0]) if len(ranks) else None,
        "infeasible": int(np.isinf(lat).sum()),
        "infeasible_in_top": int(np.isinf(lat[order[:top]]).sum()),
        "best_change": float(lat[best] / latency - 1),
        "best_kind": KINDS[int(moves.kind[best])],
        "best": after[best],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--platform", required=True)
    parser.add_argument("--method", default="guided_improvement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--descend", type=int, default=0)
    parser.add_argument("--weights", default=str(PRETRAINED), help="the scorer whose ranks are reported")
    args = parser.parse_args(argv)
    rows = [json.loads(x) for x in Path(args.rows).read_text().splitlines() if x]
    found = [
        r for r in rows
        if (r["model"], r["platform"], r["method"], r["seed"]) == (args.model, args.platform, args.method, args.seed)
    ]  # fmt: skip
    if not found:
        raise PlacementGymError(f"no row of {args.method} seed {args.seed} on {args.model} / {args.platform}")
    problem = PlacementProblem.make(args.model, args.platform, "simulated")
    if problem.reference is None:
        raise PlacementGymError(f"{args.model} / {args.platform} has no stored optimum")
    optimum = np.asarray(problem.reference.placement, dtype=np.int64)
    current = np.asarray(found[0]["placement"], dtype=np.int64)
    latency = problem.evaluate(current).latency
    differ = np.flatnonzero(current != optimum)
    print(f"ratio {latency / problem.reference.latency:.4f}; {len(differ)} of {len(current)} groups differ")
    flips = []
    for g in differ:
        flipped = current.copy()
        flipped[g] = optimum[g]
        flips.append(problem.evaluate(flipped).latency / latency - 1)
    print("single flips toward the optimum (group: change):",
          " ".join(f"{g}:{c:+.4f}" for g, c in zip(differ.tolist(), flips)))  # fmt: skip
    scorer = MoveScorer.load(args.weights)
    for step in range(args.descend + 1):
        info = neighbourhood(problem, current, scorer)
        print(json.dumps({"step": step, "ratio": round(latency / problem.reference.latency, 4),
                          **{k: v for k, v in info.items() if k != "best"}}), flush=True)  # fmt: skip
        if step == args.descend or info["best_change"] >= 0:
            break
        current = info["best"]
        latency = problem.evaluate(current).latency


if __name__ == "__main__":
    main()
