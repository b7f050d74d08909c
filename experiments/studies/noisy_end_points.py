"""How far ``guided_improvement`` variants' end points move when their early choices change a little.

The learned ranker is deterministic, so seeds only break ties and the issue's statistic (median of three
seeds) can rest on one favourable trajectory. Here every run's ranker scores get Gaussian noise of
``--noise`` times their spread (:class:`agents.learned.search.NoisyRanker`), ``--runs`` seeds per task and
method spec, on the simulated backend; the table gives the median (best-worst) ratio to the stored optimum.

    python -m experiments.studies.noisy_end_points --models inception_v3 --platforms multi-accel model-parallel \\
        --methods guided_improvement guided_improvement:tabu=local,late=5,late_after=2 --runs 24 \\
        --out results/noisy-end-points
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agents.learned.guided import GuidedImprovement
from agents.specs import parse_spec
from experiments.studies.landscape import perturbed_runs
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem


def noisy_ratios(model: str, platform: str, spec: str, budget: int, noise: float, runs: int) -> list[float]:
    """Ratios to the reference optimum of ``runs`` noisy runs of the method ``spec`` on one task."""
    method = parse_spec(spec).build()
    if not isinstance(method, GuidedImprovement):
        raise PlacementGymError(
            f"{spec!r} is not a guided_improvement spec; only its ranker can be perturbed"
        )

    def make() -> PlacementProblem:
        return PlacementProblem.make(model, platform, "simulated")

    reference = make().reference
    if reference is None:
        raise PlacementGymError(f"{model} / {platform} has no stored reference optimum")
    return [lat / reference.latency for lat in perturbed_runs(make, budget, noise, runs, method)]


def table(rows: list[dict], specs: list[str]) -> str:
    """Markdown: one line per task, per spec the median (best-worst) and the mean."""
    lines = ["| task | " + " | ".join(specs) + " |", "|---|" + "---|" * len(specs)]
    tasks = dict.fromkeys((r["model"], r["platform"]) for r in rows)
    for model, platform in tasks:
        cells = []
        for spec in specs:
            ratios = [
                r["ratios"]
                for r in rows
                if (r["model"], r["platform"], r["method"]) == (model, platform, spec)
            ]
            if not ratios:
                cells.append("-")
                continue
            x = np.array(ratios[0])
            cells.append(f"{np.median(x):.4f} ({x.min():.4f}-{x.max():.4f}; mean {x.mean():.4f})")
        lines.append(f"| {model} / {platform} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["inception_v3", "resnet50", "bert"])
    parser.add_argument("--platforms", nargs="+", default=["cpu-igpu", "multi-accel", "model-parallel"])
    parser.add_argument("--methods", nargs="+", default=["guided_improvement"])
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        for platform in args.platforms:
            for spec in args.methods:
                ratios = noisy_ratios(model, platform, spec, args.budget, args.noise, args.runs)
                row = {"model": model, "platform": platform, "method": spec, "budget": args.budget,
                       "noise": args.noise, "runs": args.runs, "ratios": ratios}  # fmt: skip
                rows.append(row)
                print(json.dumps({**row, "median": float(np.median(ratios))}), flush=True)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(rows, args.methods)
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
