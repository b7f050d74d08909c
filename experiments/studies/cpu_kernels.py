"""Does a setting make a learner's row independent of the CPU kernels it runs?

torch, MKL and oneDNN pick their kernels by the CPU (MKL also by its vendor and cache sizes), so a seeded
learner's row repeats only on a CPU of the same kind (docs/protocol.md). Each library can be told to use
other code than it would pick: ``ATEN_CPU_CAPABILITY`` (torch's own kernels: ``default``, ``avx2``,
``avx512``), ``MKL_CBWR`` (MKL's reproducible branches: ``COMPATIBLE``, ``AUTO``, ``AVX2``, ...),
``MKL_ENABLE_INSTRUCTIONS`` (the widest code MKL's dispatch may use), ``DNNL_MAX_CPU_ISA`` (oneDNN's), and
oneDNN can be switched off (``torch.backends.mkldnn.enabled``). This script runs one cell (a method, task,
seed and tier budget) once per *setting* (:data:`SETTINGS`, ``--settings``; default: all, in order), each
in a fresh process, and prints what each run gives: evaluations, latency, a hash of the placement, of the
history (the best latency so far after each distinct placement) and, for an SB3 learner, of every
parameter of the trained policy (bit for bit), and the seconds it took. Two settings that give the same
parameter hash trained through bit-identical arithmetic. Run it pinned to one core (``taskset -c 0``); a
setting named twice runs twice (to time it).

Example:
    python -m experiments.studies.cpu_kernels --method ppo_gnn --task inception_v3/cpu-dgpu --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

#: name -> (environment variables, oneDNN on)
SETTINGS: dict[str, tuple[dict[str, str], bool]] = {
    "native": ({}, True),
    "aten=avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, True),
    "aten=default": ({"ATEN_CPU_CAPABILITY": "default"}, True),
    "mkl=compatible": ({"MKL_CBWR": "COMPATIBLE"}, True),
    "mkl=avx2": ({"MKL_CBWR": "AVX2"}, True),
    "mkl=avx512": ({"MKL_CBWR": "AVX512"}, True),
    "mkl=auto": ({"MKL_CBWR": "AUTO"}, True),
    "dnnl=avx2": ({"DNNL_MAX_CPU_ISA": "AVX2"}, True),
    "no-mkldnn": ({}, False),
    # an AVX2 machine as far as the three libraries can tell
    "all=avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}, True),
    # candidate portable settings: MKL and oneDNN pinned, torch's own kernels at either width
    "pinned+aten=avx512": ({"MKL_CBWR": "COMPATIBLE", "DNNL_MAX_CPU_ISA": "AVX2"}, True),
    "pinned+aten=avx2": (
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "DNNL_MAX_CPU_ISA": "AVX2"}, True
    ),
    "pinned+aten=default": (
        {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "DNNL_MAX_CPU_ISA": "AVX2"}, True
    ),
    # this machine made to look like an AVX2 one to each library (MKL_ENABLE_INSTRUCTIONS caps MKL's dispatch)
    "mkl-isa=avx2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, True),
    "avx2-machine": (
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}, True
    ),
    # the portable setting: torch's kernels at AVX2, MKL's reproducible SSE2 branch; here and on an "AVX2 machine"
    "portable": ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}, True),
    "portable@avx2-machine": (
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
         "DNNL_MAX_CPU_ISA": "AVX2"}, True
    ),
    "mkl=compatible@mkl-isa=avx2": ({"MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, True),
}  # fmt: skip
_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def run_one(method: str, task: str, seed: int, tier: str, mkldnn: bool) -> dict:
    """Run the cell in this process; what it gave."""
    import torch

    from agents.specs import parse_spec
    from placement_gym import protocol
    from placement_gym.benchmark import run_agent
    from placement_gym.envs import DevicePlacementEnv
    from placement_gym.results import cpu_identity

    torch.backends.mkldnn.enabled = mkldnn
    model, platform = task.split("/")
    budget = protocol.TIERS[tier]
    agent = parse_spec(method).build()
    env = DevicePlacementEnv(model, platform, protocol.BACKEND, coarsening=protocol.COARSENING)
    start = time.perf_counter()
    try:
        outcome = run_agent(agent, env, budget, seed)
    finally:
        env.close()
    seconds = time.perf_counter() - start
    policy = getattr(getattr(agent, "model", None), "policy", None)  # an SB3 learner keeps its model
    params = "n/a"
    if policy is not None:
        digest = hashlib.sha256()
        for name, tensor in sorted(policy.state_dict().items()):
            digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
        params = digest.hexdigest()[:12]
    history = hashlib.sha256(json.dumps([[int(e), float(t)] for e, t in outcome.history]).encode())
    placement = [int(d) for d in outcome.placement]
    return {
        "torch_kernels": str(torch.backends.cpu.get_cpu_capability()),
        "cpu_fingerprint": cpu_identity()["cpu_fingerprint"],
        "evaluations": int(outcome.evaluations),
        "latency_ms": round(float(outcome.latency) * 1e3, 6),
        "placement_sha": hashlib.sha256(json.dumps(placement).encode()).hexdigest()[:12],
        "history_sha": history.hexdigest()[:12],
        "params_sha": params,
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="ppo_gnn")
    parser.add_argument("--task", default="inception_v3/cpu-dgpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tier", default="standard")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _, mkldnn = SETTINGS[args.child]
        print(json.dumps(run_one(args.method, args.task, args.seed, args.tier, mkldnn)))
        return
    print(f"{args.method} {args.task} seed {args.seed} ({args.tier} tier); load {open('/proc/loadavg').read().split()[:3]}")
    for name in args.settings:
        variables, _ = SETTINGS[name]
        env = {k: v for k, v in os.environ.items() if k not in _VARIABLES} | variables
        command = [sys.executable, "-m", "experiments.studies.cpu_kernels", "--child", name,
                   "--method", args.method, "--task", args.task, "--seed", str(args.seed), "--tier", args.tier]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name:22s} failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:22s} " + " ".join(f"{k}={v}" for k, v in result.items()), flush=True)


if __name__ == "__main__":
    main()
