"""Does the way the partitioned executor dispatches segments set the measurement noise? (issue #13)

The replicates of :mod:`experiments.fidelity.sim_vs_measured` disagree more the more segments a placement has
(single-device placements 0.1-0.9% per-replicate sd, the most-split ones 2.7-4.5%), so the noise lives
where segments meet. This script measures the same placements (the iid and blocks placements of
:func:`experiments.fidelity.sim_vs_measured.sample_placements`) under several *variants* of the measured backend,
interleaved placement by placement (the variants' order alternates), in ``--passes`` passes, and compares
the passes of each variant:

* ``queue``: the default driver (``start_async``, completions through a queue read by the calling thread:
  two thread handoffs per segment);
* ``threads``: one worker thread per device, pinned to its own CPU, running its segments with a blocking
  ``infer`` (no handoff along a same-device chain, one to another device's reader);
* ``queue+awake``: the default driver while one idle-priority (``SCHED_IDLE``) busy-loop process per CPU
  keeps every vCPU from halting. On a VM an idle vCPU halts, and waking it for the next segment costs a
  trip through the hypervisor; an idle-priority task gives way at once to any real work but keeps the
  vCPU running. It costs nothing but power, and shows up in the load average (+1 per CPU, reported).

Reported per variant: the mean of the raw medians, the mean relative gap between the two passes of a
placement (with a bootstrap 95% interval over placements), the median within-evaluation coefficient of
variation of the runs, and the passes' Spearman agreement (all placements and blocks). The host's cpuidle
governor and halt-polling setting are recorded (read only). Nothing else may run meanwhile.

Example:
    python -m experiments.studies.dispatch_noise --model bert --count 12 --out results/dispatch-noise
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from experiments.fidelity.sim_vs_measured import sample_placements
from experiments.fidelity.sim_vs_measured import build_parser as build_sim_vs_measured_parser
from placement_gym.benchmarks import load_benchmark
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.platforms import load_platform

VARIANTS = ("queue", "threads", "queue+awake")
_SPIN = "while True:\n    pass\n"


def _idle_on(cpu: int) -> None:
    """Run the calling (forked, not yet exec'd) process on ``cpu`` alone at idle priority."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


class Spinners:
    """One idle-priority busy-loop process per CPU of this process, stopped except inside :meth:`awake`.

    A stop takes effect only when the spinner next runs, which for an idle-priority task on a busy CPU
    can be much later, so the constructor and the end of :meth:`awake` wait until every spinner stopped.
    """

    def __init__(self) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", _SPIN], preexec_fn=lambda c=cpu: _idle_on(c))
            for cpu in sorted(os.sched_getaffinity(0))
        ]
        self._stop()

    def _stop(self) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGSTOP)
        for p in self.procs:
            os.waitpid(p.pid, os.WUNTRACED)  # returns once the spinner is stopped

    @contextmanager
    def awake(self):
        for p in self.procs:
            os.kill(p.pid, signal.SIGCONT)
        try:
            yield
        finally:
            self._stop()

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def host_idle_settings() -> dict[str, str]:
    """The cpuidle governor and the guest halt-polling window, where the kernel exposes them."""
    files = {
        "cpuidle_governor": "/sys/devices/system/cpu/cpuidle/current_governor_ro",
        "cpuidle_driver": "/sys/devices/system/cpu/cpuidle/current_driver",
        "guest_halt_poll_ns": "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
    }
    out = {}
    for key, path in files.items():
        try:
            out[key] = Path(path).read_text().strip()
        except OSError:
            out[key] = "n/a"
    return out


def bootstrap_mean_ci(x: np.ndarray, seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of ``x``."""
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(draws, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


#: Estimators compared on the same runs: the backend's (median of the candidate / reference ratios),
#: the raw median, and the fastest run alone and as a ratio to the fastest reference run of its window.
ESTIMATORS: dict[str, Any] = {
    "median ratio": lambda rec: rec["latency"],
    "raw median": lambda rec: rec["raw"],
    "raw min": lambda rec: min(rec["times"]),
    "min ratio": lambda rec: min(rec["times"]) / min(rec["reference_times"]),
}


def agreement(pairs: np.ndarray, blocks: np.ndarray) -> dict[str, Any]:
    """How two passes of estimates, shape ``(P, 2)``, agree: mean relative gap (with its bootstrap
    interval) and Spearman, overall and on the blocks placements."""
    gap = np.abs(pairs[:, 0] - pairs[:, 1]) / pairs.mean(axis=1)
    low, high = bootstrap_mean_ci(gap)
    return {
        "gap_mean": float(gap.mean()),
        "gap_ci": [low, high],
        "spearman": float(spearmanr(pairs[:, 0], pairs[:, 1])[0]),
        "spearman_blocks": float(spearmanr(pairs[blocks, 0], pairs[blocks, 1])[0]),
    }


def summarize_variant(rows: list[dict[str, Any]], variant: str) -> dict[str, Any]:
    """The passes' agreement of one variant (see the module docstring), for each of :data:`ESTIMATORS`
    that its records allow (the backend's estimate first, at the top level)."""
    recs = [[r[variant][p] for p in range(2)] for r in rows]
    blocks = np.array([r["kind"] == "blocks" for r in rows])
    raw = np.array([[x["raw"] for x in pair] for pair in recs])
    cv = np.array([x["cv"] for pair in recs for x in pair])
    by_estimator = {}
    for name, estimate in ESTIMATORS.items():
        try:
            by_estimator[name] = agreement(np.array([[estimate(x) for x in pair] for pair in recs]), blocks)
        except (KeyError, ValueError):  # records without run times, or a variant without a reference
            continue
    return {
        "raw_mean_ms": 1e3 * float(raw.mean()),
        **by_estimator["median ratio"],
        "cv_median": float(np.median(cv)),
        "load": float(np.mean([x["load"] for pair in recs for x in pair])),
        "estimators": by_estimator,
    }


def sim_vs_measured_protocol() -> dict[str, Any]:
    """The measured backend's settings in :mod:`experiments.fidelity.sim_vs_measured`'s defaults (no result cache)."""
    d = build_sim_vs_measured_parser().parse_args([])
    return {"warmup": d.warmup, "repeats": d.repeats, "max_repeats": d.max_repeats, "rel_ci": d.rel_ci,
            "reference": d.reference, "time_budget": d.time_budget, "cache_size": 0}  # fmt: skip


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    bench = load_benchmark(args.model)
    coarse = bench.coarsen("fused")
    plat = load_platform("local")
    placements = [
        (k, p)
        for k, p in sample_placements(coarse.num_groups, plat.num_devices, args.count, args.seed)
        if k != "single"
    ]
    limit = (len(placements) + 2) * bench.ops.num_nodes
    protocol = sim_vs_measured_protocol()
    backends = {
        v: MeasuredBackend(bench, coarse, plat, driver=v.split("+")[0], max_compiled_ops=limit, **protocol)
        for v in args.variants
        if v in ("queue", "threads")
    }
    if "queue+awake" in args.variants:
        backends["queue+awake"] = backends.get("queue") or MeasuredBackend(
            bench, coarse, plat, max_compiled_ops=limit, **protocol
        )
    spinners = Spinners() if "queue+awake" in args.variants else None
    rows = [{"kind": k, "placement": p.tolist(), **{v: [] for v in args.variants}} for k, p in placements]
    t0 = time.perf_counter()
    try:
        for pass_ in range(2):
            for i, (_, placement) in enumerate(placements):
                shift = (i + pass_) % len(args.variants)
                for v in args.variants[shift:] + args.variants[:shift]:
                    backend = backends[v]
                    with spinners.awake() if v == "queue+awake" else nullcontext():
                        result = backend.evaluate(placement)
                    times = np.array(backend.last_timing.times)
                    rows[i][v].append(
                        {
                            "latency": result.latency,
                            "raw": backend.last_timing.median,
                            "cv": float(times.std() / times.mean()),
                            "samples": result.samples,
                            "load": result.host_load,
                            "times": list(backend.last_timing.times),
                            "reference_times": list(backend.last_timing.reference_times),
                        }
                    )
                print(
                    f"pass {pass_ + 1} {i + 1}/{len(placements)} ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
    finally:
        if spinners is not None:
            spinners.close()
        for b in {id(b): b for b in backends.values()}.values():  # queue+awake shares queue's backend
            b.close()
    summary = {v: summarize_variant(rows, v) for v in args.variants}
    meta = {
        "command": command,
        "model": args.model,
        "placements": len(placements),
        "protocol": protocol,
        "host_idle": host_idle_settings(),
        "wall_seconds": time.perf_counter() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    return {"meta": meta, "summary": summary, "rows": rows}


def report(payload: dict[str, Any]) -> list[str]:
    meta = payload["meta"]
    lines = [
        f"# Dispatch and measurement noise: {meta['model']} on `local`, {meta['placements']} placements x 2 passes",
        "",
        f"`{meta['command']}` ({meta['date']}, {meta['wall_seconds'] / 60:.1f} min; host idle settings: "
        + ", ".join(f"{k} {v}" for k, v in meta["host_idle"].items())
        + ")",
        "",
        "| variant | raw mean ms | mean gap between passes (95% CI) | median run CV | Spearman passes | blocks | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for v, s in payload["summary"].items():
        lines.append(
            f"| {v} | {s['raw_mean_ms']:.1f} | {100 * s['gap_mean']:.2f}% ({100 * s['gap_ci'][0]:.2f}-"
            f"{100 * s['gap_ci'][1]:.2f}%) | {100 * s['cv_median']:.2f}% | {s['spearman']:.3f} | "
            f"{s['spearman_blocks']:.3f} | {s['load']:.2f} |"
        )
    lines += [
        "",
        "The same runs under other estimators (mean gap between passes / Spearman / blocks):",
        "",
        "| variant | " + " | ".join(ESTIMATORS) + " |",
        "|---|" + "---|" * len(ESTIMATORS),
    ]
    for v, s in payload["summary"].items():
        cells = [
            f"{100 * e['gap_mean']:.2f}% / {e['spearman']:.3f} / {e['spearman_blocks']:.3f}"
            if (e := s["estimators"].get(name))
            else "n/a"
            for name in ESTIMATORS
        ]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument("--count", type=int, default=12, help="placements of each kind (iid, blocks)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("results/dispatch-noise"))
    args = parser.parse_args(argv)
    payload = run(
        args, "python -m experiments.studies.dispatch_noise " + " ".join(sys.argv[1:] if argv is None else argv)
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1))
    lines = report(payload)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
