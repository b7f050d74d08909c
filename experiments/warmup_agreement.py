"""Whether warming up only a placement's never-run segments measures what warming up the whole placement does.

Two measured backends of one env ID, one per ``warmup_scope`` (``"segments"``, ``"placement"``), each with
its own compiled segments, measure the same never-seen random placements back to back, in alternating
order. Per placement one JSON line: both latencies, their intervals, the warm-up and step seconds of each;
the last line: the median ratio segments / placement with its quartiles, the Spearman correlation, and the
median seconds per step of each scope.

Usage:
    python -m experiments.warmup_agreement --env DevicePlacement-bert-local-measured-v1 --count 20 --out runs/warmup_agreement.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time

SCOPES = ("segments", "placement")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="DevicePlacement-bert-local-measured-v1")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)
    from scipy.stats import spearmanr

    out = open(args.out, "a") if args.out else None

    def emit(row: dict) -> None:
        row.update(env=args.env, load=os.getloadavg()[0])
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    backends = {
        scope: gym.make(args.env, backend_kwargs={"warmup_scope": scope}).unwrapped.problem.backend
        for scope in SCOPES
    }
    num_groups = backends["segments"].graph.num_groups
    num_devices = backends["segments"].platform.num_devices
    rng = np.random.default_rng(args.seed)
    latencies: dict[str, list[float]] = {scope: [] for scope in SCOPES}
    seconds: dict[str, list[float]] = {scope: [] for scope in SCOPES}
    for i in range(args.count):
        placement = rng.integers(0, num_devices, num_groups)
        order = SCOPES if i % 2 == 0 else SCOPES[::-1]
        row: dict = {"index": i, "first": order[0]}
        for scope in order:
            start = time.perf_counter()
            result = backends[scope].evaluate(placement)
            took = time.perf_counter() - start
            latencies[scope].append(result.latency)
            seconds[scope].append(took)
            row[scope] = {"latency": result.latency, "ci": result.ci, "samples": result.samples, "seconds": took}
        emit(row)
    ratio = np.asarray(latencies["segments"]) / np.asarray(latencies["placement"])
    emit(
        {
            "summary": True,
            "count": args.count,
            "ratio_median": float(np.median(ratio)),
            "ratio_q1_q3": [float(q) for q in np.percentile(ratio, [25, 75])],
            "spearman": float(spearmanr(latencies["segments"], latencies["placement"]).statistic),
            "seconds_median": {scope: float(np.median(seconds[scope])) for scope in SCOPES},
        }
    )


if __name__ == "__main__":
    main()
