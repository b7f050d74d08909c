"""Time to build a benchmark graph with all coarsening levels, cold (conversion included) and warm, and to
read the OpenVINO model itself from the cache (the cached IR's files are hash-verified on that read).

Each measurement runs in a fresh interpreter so that nothing is shared in memory; imports are timed
separately. Cold uses an empty temporary cache; warm reuses the one the cold run filled.

Usage:
    python -m experiments.speed.graphs [--model bert] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from placement_gym.benchmarks import load_benchmark
t1 = time.perf_counter()
bench = load_benchmark(sys.argv[1])
levels = [bench.coarsen("ops"), bench.coarsen("fused"), bench.coarsen("fused", k=64)]
t2 = time.perf_counter()
bench.model  # reads (and verifies) the cached IR
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "model_s": t3 - t2,
                  "groups": [c.num_groups for c in levels]}))
"""


def _run(model: str, cache: str) -> dict:
    env = dict(os.environ, PLACEMENT_GYM_CACHE=cache)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, model], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    cold, warm = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(_run(args.model, cache))
            warm.append(_run(args.model, cache))
    for label, runs in (("cold", cold), ("warm", warm)):
        build = [r["build_s"] for r in runs]
        imports = [r["import_s"] for r in runs]
        model = [r["model_s"] for r in runs]
        print(
            f"{args.model} {label}: build + all levels median {statistics.median(build):.3f} s "
            f"(min {min(build):.3f}, max {max(build):.3f}; n={len(build)}); "
            f"reading the model median {statistics.median(model):.3f} s (min {min(model):.3f}); "
            f"imports {statistics.median(imports):.2f} s; groups ops/fused/k64 = {runs[0]['groups']}"
        )


if __name__ == "__main__":
    main()
