"""Node and edge counts of the benchmark graphs at every coarsening level, as a markdown table.

Usage:
    python -m experiments.records.graph_table [--models inception_v3 resnet50 bert] [--k 64]
"""

from __future__ import annotations

import argparse

from placement_gym.benchmarks import load_benchmark
from placement_gym.zoo import BENCHMARK_MODELS


def graph_table(models: list[str], k: int) -> str:
    """Markdown table: per model, IR ops and the nodes/edges of the ops, fused and k levels."""
    rows = [
        "| model | version | IR ops | ops: nodes / edges | fused: nodes / edges | "
        f"fused+k{k}: nodes / edges | GFLOP | weights (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in models:
        bench = load_benchmark(name)
        levels = [bench.coarsen("ops"), bench.coarsen("fused"), bench.coarsen("fused", k=k)]
        cells = [f"{c.graph.num_nodes} / {c.graph.num_edges}" for c in levels]
        ir_ops = len(bench.model.get_ordered_ops())
        rows.append(
            f"| {name} | {bench.version} | {ir_ops} | {' | '.join(cells)} | "
            f"{bench.ops.nodes['flops'].sum() / 1e9:.2f} | {bench.ops.nodes['param_bytes'].sum() / 1e6:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(BENCHMARK_MODELS))
    parser.add_argument("--k", type=int, default=64, help="maximum groups of the k level")
    args = parser.parse_args(argv)
    print(graph_table(args.models, args.k))


if __name__ == "__main__":
    main()
