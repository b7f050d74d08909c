"""Do segments imported from their weightless blobs run like segments compiled afresh? Both on the same
placements.

The partitioned executor exports every compiled segment as a weightless blob (the compiled graph; the
weights stay in the model's IR file) and imports a segment from it when it is needed again, instead of
compiling it again (:mod:`placement_gym.measured.blobs`). For each never-seen random placement of
``--model`` (fused coarse graph, ``local`` platform) two executors prepare the placement, drop their
compiled segments and prepare it again (so both plans' memory is equally fresh; which executor goes first
alternates): in one every segment is compiled with its device's own configuration and no blob, in the other
every segment is imported from the blob its first preparation exported. It checks that the two give
bit-identical outputs, and times them: two warm-up runs each, then ``--rounds`` runs each, alternating which
goes first. With ``--control`` the second executor compiles too (no blob): the ratios that two identical
plans give, the method's own spread. Per placement one JSON line (appended to
``--out``): the CPU seconds of compiling and of importing the segments, the median run time of each and
their ratio imported / compiled. The last line: the median ratio with its 95% interval (order statistics)
and quartiles, how many placements had identical outputs, the mean bytes of a blob, and the load average
before and after.

Usage:
    python -m experiments.fidelity.imported_segments --model bert --count 20 --rounds 15 --out runs/imported_segments.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from placement_gym.benchmarks import load_benchmark
from placement_gym.measured.dataflow import PartitionedExecutor
from placement_gym.measured.stats import median_ci
from placement_gym.platforms import load_platform
from placement_gym.zoo.loading import core, random_inputs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--control", action="store_true", help="compile in both executors (no blob)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    out = open(args.out, "a") if args.out else None

    def emit(row: dict) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    load_before = os.getloadavg()[0]
    bench = load_benchmark(args.model)
    if bench.ir_weights is None:
        raise SystemExit(f"{args.model} was not read from an IR file: it has no blobs to import")
    graph = bench.coarsen("fused")
    platform = load_platform("local")
    inputs = random_inputs(bench.model, 0)

    def executor(**kwargs) -> PartitionedExecutor:
        return PartitionedExecutor(
            bench.model, bench.ops, platform, core(), inputs, compile_threads=1, **kwargs
        )

    compiled = executor(max_blob_bytes=0)  # the device's own configuration, no blob
    imported = executor(max_blob_bytes=0) if args.control else executor(weights=bench.ir_weights)
    rng = np.random.default_rng(args.seed)
    ratios, same = [], 0
    for i in range(args.count):
        op_device = graph.expand(rng.integers(0, platform.num_devices, graph.num_groups))
        order = ("compiled", "imported") if i % 2 == 0 else ("imported", "compiled")
        executors = {"compiled": compiled, "imported": imported}
        for name in order:
            executors[name].prepare(op_device)  # the imported executor exports every segment's blob
            executors[name].clear_compiled()
        before = imported.compiler.stats["imported"]
        plans, cpu = {}, {}
        for name in order:
            start = time.process_time()
            plans[name] = (executors[name], executors[name].prepare(op_device))
            cpu[name] = time.process_time() - start
        plan_c, plan_i = plans["compiled"][1], plans["imported"][1]
        all_imported = imported.compiler.stats["imported"] - before == (
            0 if args.control else len(plan_i.parts)
        )
        for ex, plan in plans.values():
            ex.run(plan)
        equal = all(np.array_equal(a, b) for a, b in zip(compiled.outputs(plan_c), imported.outputs(plan_i)))
        same += equal
        for ex, plan in plans.values():
            ex.run(plan)
        times: dict[str, list[float]] = {name: [] for name in plans}
        for r in range(args.rounds):
            for name in ("compiled", "imported") if (r + i) % 2 == 0 else ("imported", "compiled"):
                ex, plan = plans[name]
                times[name].append(ex.run(plan))
        medians = {name: float(np.median(t)) for name, t in times.items()}
        ratio = medians["imported"] / medians["compiled"]
        ratios.append(ratio)
        emit(
            {
                "index": i,
                "segments": len(plan_c.parts),
                "all_imported": all_imported,
                "outputs_identical": equal,
                "compile_cpu_s": round(cpu["compiled"], 4),
                "import_cpu_s": round(cpu["imported"], 4),
                "median_s": medians,
                "ratio": ratio,
                "load": os.getloadavg()[0],
            }
        )
        compiled.clear_compiled()
        imported.clear_compiled()
    ci = median_ci(np.asarray(ratios))
    emit(
        {
            "summary": True,
            "model": args.model,
            "control": args.control,
            "placements": args.count,
            "outputs_identical": same,
            "ratio_median": ci.median,
            "ratio_ci95": [ci.low, ci.high],
            "ratio_q1_q3": [float(q) for q in np.percentile(ratios, [25, 75])],
            "blob_bytes": imported.compiler.blobs.bytes / len(imported.compiler.blobs) if not args.control else None,
            "load_before_after": [load_before, os.getloadavg()[0]],
        }
    )


if __name__ == "__main__":
    main()
