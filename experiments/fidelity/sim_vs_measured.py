"""The simulator's acceptance test: simulated vs measured latency on the ``local`` platform, with the noise
ceiling of the measurements themselves.

For each model, placements of its fused coarse graph are measured with the measured backend (partitioned
executor, adaptive protocol: runs until the median's 95% interval is within ``--rel-ci``, drift-corrected
against the all-on-host placement with ``--reference host``) and simulated with the simulated backend
(validated per-layer profiles of the same devices). Three kinds of placement:

* ``single``: everything on one device (each device once);
* ``iid``: every group independently on ``cpu1`` with probability ``p ~ U(0, 1)`` (``--count`` of them);
* ``blocks``: the groups, in topological order, cut into 2-8 contiguous blocks alternating devices
  (``--count``; close latencies, the hardest to rank).

Every placement is measured ``--replicates`` times (default 2). ``--chunk K`` (default 10) measures the
replicates of K placements before moving on: each placement is compiled once and its replicates are
seconds apart (the report gives the median separation); ``--chunk 0`` makes each replicate a full pass
over all placements, minutes apart, and compiles every placement once per pass. ``--rounds R`` (default
1) measures each replicate of a chunk in R passes over the chunk, ``--round-repeats`` timed runs (paired
with the reference) per pass, and pools them: a placement's runs are spread over the chunk's time rather
than taken in one window of about a second (the data: how much of the replicates' disagreement is the
state of one window). Drift between runs at
different times is what ``--runs`` / ``--compare`` check.

Wall time: compiling a placement takes about 0.35 s (resnet50), 0.8 s (inception_v3) and 1.1 s (bert) of
CPU on the reference machine, one run 0.085 / 0.12 / 0.23 s of CPU; with the defaults (6-12 runs,
1.5 s per evaluation, 102 placements x 2 replicates per model) a run of the three models is estimated at
about 14 minutes with ``--reference none`` and about 21 with the host reference, which doubles the timed
runs. Time one model first (``--models resnet50``). Reported per model and kind:

* simulator vs measured: Spearman rank correlation and MAPE (measured = median over replicates), and
  the same against the raw medians (no drift correction);
* the drift-corrected relative MAPE, beside (never instead of) the others: each measured latency as its
  drift-corrected ratio to the all-on-host reference timed in the same window, against simulated /
  simulated all-on-host. The level-scaled MAPE multiplies the ratios by one reference level measured
  once per model, so a slow moment during that one measurement moves every latency of the run (BERT in
  ``results/sim_vs_measured-run2``: level 254 ms against a median of 218 ms over the run's windows, MAPE
  19.0% against 4.0% relative); the report gives both the level and that median;
* self-agreement: Spearman and MAPE between replicates 1 and 2 (overall and on ``blocks``), for the
  drift-corrected estimate and for the raw median of the same runs (the data on whether drift correction
  helps);
* the noise ceiling: with replicate agreement ``r``, the mean of two replicates has reliability
  ``2r / (1 + r)`` (Spearman-Brown), so no simulator can correlate with it beyond ``sqrt(2r / (1 + r))``;
  the MAPE a perfect simulator would still show is about half the mean relative gap between replicates;
  and what stops self-agreement: the per-replicate relative sd, the sd (and 95% CI half-width) the
  target needs when the true latencies are the replicates' mean and two noisy copies are compared, and
  the runs per replicate that implies (:func:`~experiments.fidelity.stats.noise_ceiling`);
* host load before and after each model, wall time, the profiles' validation records and any
  :class:`~placement_gym.errors.ProfileWarning`.

Targets (issue #13): self-agreement >= 0.95 overall and >= 0.85 on blocks; simulator vs measured Spearman
>= 0.9 and MAPE <= 10% on every model.

``--runs N`` repeats the whole comparison N times (``--gap`` seconds apart) and compares them;
``--compare A.json B.json ...`` compares runs made earlier (agree: Spearman within 0.03, MAPE within 3
points; judged on the level-scaled and on the relative MAPE). ``--rescore A.json`` recomputes a stored
run's figures from its rows without measuring them again (with ``--schedule groups|segments``, re-simulated
with that schedule, this machine's per-layer profiles and its ``local`` platform figures for the process's
cores; with ``--costs F.json``, with the segment-boundary figures fitted by
:mod:`experiments.fidelity.residuals`). Re-simulating needs each model's profile: one not stored yet is
profiled first, a measurement (``placement-gym calibrate --model ...`` on a quiet machine beforehand).
Results: ``<out>.json`` (replayable rows: placement, every replicate, CI, load, versions) and ``<out>.md``.

Example:
    python -m experiments.fidelity.sim_vs_measured --models resnet50 bert inception_v3 --out results/sim_vs_measured
"""

from __future__ import annotations

import argparse
import json
import os
import platform as pyplatform
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from experiments.fidelity.report import report_lines
from experiments.fidelity.stats import (
    compare_runs,
    noise_by_segments,
    noise_ceiling,
    relative_figures,
    summarize_rows,
    window_reference,
)
from placement_gym.benchmarks import load_benchmark
from placement_gym.errors import ProfileWarning
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.measured.profiling import profile_record
from placement_gym.measured.timing import Timing, summarize
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SimulatedBackend


def sample_placements(
    num_groups: int, num_devices: int, count: int, seed: int
) -> list[tuple[str, np.ndarray]]:
    """The single-device placements, then ``count`` iid and ``count`` block placements alternately, each
    ``(kind, placement of shape (G,))``."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, np.ndarray]] = [
        ("single", np.full(num_groups, d, dtype=np.int64)) for d in range(num_devices)
    ]
    for _ in range(count):
        p = rng.uniform(0.0, 1.0)
        probs = np.array([1.0 - p] + [p / (num_devices - 1)] * (num_devices - 1))
        out.append(("iid", rng.choice(num_devices, size=num_groups, p=probs).astype(np.int64)))
        blocks = int(rng.integers(2, min(8, num_groups) + 1))
        cuts = np.sort(rng.choice(np.arange(1, num_groups), size=blocks - 1, replace=False))
        start = int(rng.integers(num_devices))
        label = np.zeros(num_groups, dtype=np.int64)
        for i, c in enumerate(cuts):
            label[c:] = (start + i + 1) % num_devices
        label[: cuts[0]] = start
        out.append(("blocks", label))
    return out


def _measure_all(
    meas: MeasuredBackend,
    name: str,
    placements: list[tuple[str, np.ndarray]],
    replicates: int,
    chunk: int,
    rounds: int = 1,
) -> list[list[dict[str, Any]]]:
    """``records[i][r]``: replicate ``r`` of placement ``i`` (latency, raw median, CI, samples, load, time).

    With ``rounds > 1`` each replicate of a chunk is measured in ``rounds`` passes over the chunk (each
    evaluation making ``meas``'s fixed number of runs), and the replicate's estimate pools the runs of its
    rounds (:func:`~placement_gym.measured.timing.summarize`): a placement's runs are spread over the
    chunk's time instead of one window of about a second.
    """
    records: list[list[dict[str, Any]]] = [[] for _ in placements]
    order = list(range(len(placements)))
    blocks = [order] if chunk <= 0 else [order[i : i + chunk] for i in range(0, len(order), chunk)]
    t0 = time.perf_counter()
    for block in blocks:
        for r in range(replicates):
            pooled: dict[int, list[Any]] = {i: [] for i in block}
            for _ in range(rounds):
                for i in block:
                    m = meas.evaluate(placements[i][1])
                    pooled[i].append((m, meas.last_timing))
            for i in block:
                rec = _pooled_record(pooled[i], time.perf_counter() - t0)
                records[i].append(rec)
                kind = placements[i][0]
                lat = (
                    f"{rec['latency'] * 1e3:8.2f} ms +-{100 * rec['ci'] / rec['latency']:4.1f}%"
                    if rec["latency"] is not None
                    else rec["reason"]
                )
                print(
                    f"{name} pass {r + 1} {i + 1}/{len(placements)} {kind:6s} {lat} n={rec['samples']} "
                    f"({rec['t']:.0f} s, load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    return records


def _pooled_record(evaluations: list[tuple[Any, Timing | None]], t: float) -> dict[str, Any]:
    """The record of one replicate from its rounds' ``(LatencyResult, Timing)`` (one round: as measured)."""
    m, timing = evaluations[-1]
    if not all(e.feasible and tm is not None for e, tm in evaluations):
        bad = next(e for e, tm in evaluations if not (e.feasible and tm is not None))
        return {"latency": None, "raw": None, "ci": m.ci, "samples": m.samples, "stop": "",
                "host_load": bad.host_load, "t": t, "reason": bad.reason}  # fmt: skip
    if len(evaluations) > 1:
        times = [x for _, tm in evaluations for x in tm.times]
        refs = [x for _, tm in evaluations for x in tm.reference_times]
        timing = summarize(times, refs, timing.reference_level if refs else None, stop="rounds")
        latency, ci = timing.estimate, timing.ci_half_width
    else:
        latency, ci = m.latency, m.ci
    return {
        "latency": latency,
        "raw": timing.median,
        "ci": ci,
        "samples": timing.samples,
        "stop": timing.stop,
        "host_load": float(np.mean([e.host_load for e, _ in evaluations])),
        "t": t,
        "reason": m.reason,
        "rounds": len(evaluations),
    }


def segment_counts(bench: Any, coarse: Any, placements: list[tuple[str, np.ndarray]]) -> list[int]:
    """How many segments the partitioned executor runs for each placement."""
    from placement_gym.measured.segments import split_segments

    return [len(split_segments(bench.ops, coarse.expand(p))) for _, p in placements]


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measure (``args.replicates`` times) and simulate the placements of model ``name``."""
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    bench = load_benchmark(name)
    coarse = bench.coarsen(args.level)
    plat = load_platform("local")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProfileWarning)
        sim = SimulatedBackend(bench, coarse, plat)
    profile_warnings = [str(w.message) for w in caught if issubclass(w.category, ProfileWarning)]
    _, profile, _ = profile_record(bench, plat.devices[0])
    placements = sample_placements(coarse.num_groups, plat.num_devices, args.count, args.seed)
    ops = bench.ops.num_nodes
    meas = MeasuredBackend(
        bench,
        coarse,
        plat,
        warmup=args.warmup,
        repeats=args.round_repeats if args.rounds > 1 else args.repeats,
        max_repeats=args.round_repeats if args.rounds > 1 else args.max_repeats,
        rel_ci=None if args.rounds > 1 else args.rel_ci,
        reference=None if args.reference == "none" else args.reference,
        time_budget=args.time_budget,
        cache_size=0,
        max_compiled_ops=(args.chunk + 2) * ops if args.chunk > 0 else None,  # the chunk + the reference
    )
    try:
        records = _measure_all(meas, name, placements, args.replicates, args.chunk, args.rounds)
        reference_level = meas.reference_level
    finally:
        meas.close()
    rows = []
    for (kind, placement), recs, segments in zip(placements, records, segment_counts(bench, coarse, placements)):
        s = sim.evaluate(placement)
        lat = [r["latency"] for r in recs]
        raw = [r["raw"] for r in recs]
        ok = all(v is not None for v in lat)
        rows.append(
            {
                "kind": kind,
                "placement": placement.tolist(),
                "measured": float(np.median(lat)) if ok else None,
                "measured_replicates": lat,
                "raw_replicates": raw,
                "replicates": recs,
                "simulated": s.latency if s.feasible else None,
                "simulated_reason": s.reason,
                "segments": segments,
            }
        )
    summary = full_summary(rows, args.replicates, reference_level)
    summary.update(
        groups=coarse.num_groups,
        load_before=list(load_before),
        load_after=list(os.getloadavg()),
        wall_seconds=time.perf_counter() - t0,
        profile={k: profile[k] for k in ("layer_sum", "whole", "ratio", "action", "factor", "load_before")},
        profile_warnings=profile_warnings,
    )
    return {"summary": summary, "rows": rows, "cost_model": sim.cost_model.meta}


def full_summary(
    rows: list[dict[str, Any]], replicates: int, reference_level: float | None
) -> dict[str, Any]:
    """:func:`summarize_rows` plus the figures that need the reference level: simulator vs measured
    relative to the all-on-host placement (``relative``), the median reference time over the run's
    windows (``window_reference``) and what stops self-agreement (``noise_ceiling``)."""
    summary = summarize_rows(rows, replicates)
    summary["reference_level"] = reference_level
    summary["relative"] = relative_figures(rows, reference_level)
    summary["window_reference"] = window_reference(rows, reference_level)
    summary["noise_ceiling"] = noise_ceiling(rows, summary["samples_median"]) if replicates >= 2 else {}
    summary["noise_by_segments"] = noise_by_segments(rows) if replicates >= 2 else {}
    return summary


def rescore(
    payload: dict[str, Any], costs: Path | None = None, schedule: str | None = None
) -> dict[str, Any]:
    """Recompute a stored run's figures from its rows, without measuring.

    Args:
        payload: A run's ``<out>.json``.
        costs: A :class:`~placement_gym.simulation.partition_costs.PartitionCosts` JSON (e.g. from
            ``experiments.fidelity.residuals``): re-simulate every placement with these segment-boundary figures
            (stored profiles, not re-timed).
        schedule: ``"groups"`` or ``"segments"``: re-simulate every placement with this schedule (and
            ``costs``, else the ``local`` platform's figures on this machine: what the simulator gives
            today). With neither, the stored simulated latencies are kept. Re-simulating uses each model's
            stored per-layer profile and profiles a model that has none (a measurement).

    Returns:
        The payload with new summaries (and simulated latencies), ``meta["rescored"]`` saying how; a
        re-simulated model's ``cost_model["resimulated_with"]`` records the profiles and platform
        calibrations it used (their per-op sums, dates and host activity).
    """
    from placement_gym.simulation.partition_costs import PartitionCosts

    fitted = PartitionCosts.from_dict(json.loads(costs.read_text())) if costs is not None else None
    models: dict[str, Any] = {}
    for name, res in payload["models"].items():
        rows = [dict(r) for r in res["rows"]]
        if any("segments" not in r for r in rows):
            bench = load_benchmark(name)
            coarse = bench.coarsen(payload["meta"]["command"]["level"])
            placements = [(r["kind"], np.asarray(r["placement"])) for r in rows]
            for row, segments in zip(rows, segment_counts(bench, coarse, placements)):
                row["segments"] = segments
        meta = dict(res.get("cost_model", {}))
        if fitted is not None or schedule is not None:
            from experiments.fidelity.residuals import ModelData, platform_costs

            data = ModelData(
                name, payload["meta"]["command"]["level"], [rows], [res["summary"].get("reference_level")]
            )
            figures = fitted if fitted is not None else platform_costs(data.platform)
            # without a schedule, --costs keeps the group schedule the fitted figures were first made for
            for row, lat in zip(rows, data.simulate(figures, schedule or "groups")):
                row["simulated"] = float(lat) if np.isfinite(lat) else None
            meta["partition_costs"] = figures.as_dict()
            meta["schedule"] = schedule or "groups"
            meta["resimulated_with"] = _calibrations_used(data, fitted is None)
        old = res["summary"]
        summary = full_summary(rows, payload["meta"]["command"]["replicates"], old.get("reference_level"))
        keep = ("groups", "load_before", "load_after", "wall_seconds", "profile", "profile_warnings")
        summary.update({k: old[k] for k in keep if k in old})
        models[name] = {"summary": summary, "rows": rows, "cost_model": meta}
    meta = {**payload["meta"], "rescored": {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                            "costs": str(costs) if costs else None,
                                            "schedule": schedule}}  # fmt: skip
    return {"meta": meta, "models": models}


def _calibrations_used(data: Any, platform_figures: bool) -> dict[str, Any]:
    """What a re-simulation used, from the cache (nothing measured): each device's per-layer profile (its
    per-op sum, when and how quietly it was taken) and, with ``platform_figures``, the ``local`` platform's
    calibrations of this process's cores (how quietly each was measured)."""
    from placement_gym.measured.profiling import profile_record
    from placement_gym.platforms.local import calibration_records

    profiles = {}
    for device in data.platform.devices:
        _, record, _ = profile_record(data.bench, device)
        activity = record.get("host_activity", {})
        profiles[device.name] = {
            "layer_sum": record.get("layer_sum"),
            "profiled_at": record.get("profiled_at"),
            "host": activity.get("status"),
            "others_share": activity.get("others_share"),
        }
    used: dict[str, Any] = {"profiles": profiles}
    if platform_figures:
        fields = ("status", "measured_at", "others_share")
        used["platform"] = {what: {k: r.get(k) for k in fields} for what, r in calibration_records()}
    return used


def write(out: Path, payload: dict[str, Any], lines: list[str]) -> None:
    """Write ``<out>.json`` (compact: indenting would double a run's ~330 KB) and ``<out>.md``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(payload, default=float) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace, out: Path, argv: str) -> dict[str, Any]:
    """One full comparison over ``args.models``, written to ``out`` after every model."""
    meta = {
        "command": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "argv": argv,
        "openvino": ov.get_version(),
        "python": pyplatform.python_version(),
        "machine": pyplatform.processor() or pyplatform.machine(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "platform": "local",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    results: dict[str, Any] = {}
    for name in args.models:
        results[name] = run_model(name, args)
        write(out, {"meta": meta, "models": results}, report_lines(results, meta))
        print(json.dumps({name: results[name]["summary"]}, indent=1, default=float), flush=True)
    return {"meta": meta, "models": results}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert", "inception_v3"])
    parser.add_argument("--count", type=int, default=50, help="placements of each kind (iid, blocks), >= 2")
    parser.add_argument("--level", default="fused", help="coarsening level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=6, help="minimum timed runs per evaluation")
    parser.add_argument("--max-repeats", type=int, default=12, help="most timed runs per evaluation")
    parser.add_argument(
        "--rel-ci", type=float, default=0.02, help="target half-width of the median's 95%% CI"
    )
    parser.add_argument("--time-budget", type=float, default=1.5, help="seconds of runs per evaluation")
    parser.add_argument("--reference", choices=("host", "none"), default="host", help="drift correction")
    parser.add_argument("--replicates", type=int, default=2, help="measurements of every placement (>= 2)")
    parser.add_argument("--chunk", type=int, default=10, help="placements per chunk (0: full passes)")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="passes over a chunk per replicate, pooled (> 1: fixed --round-repeats runs per pass)",
    )  # fmt: skip
    parser.add_argument("--round-repeats", type=int, default=3, help="timed runs per pass with --rounds")
    parser.add_argument("--runs", type=int, default=1, help="full comparisons in a row, then compared")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between runs")
    parser.add_argument(
        "--compare", nargs="+", type=Path, default=None, help="compare earlier <out>.json runs"
    )
    parser.add_argument(
        "--rescore", type=Path, default=None, help="recompute a stored <out>.json's figures, no measuring"
    )
    parser.add_argument(
        "--costs", type=Path, default=None,
        help="with --rescore: re-simulate with these segment-boundary figures (experiments.fidelity.residuals)",
    )  # fmt: skip
    parser.add_argument(
        "--schedule", choices=("groups", "segments"), default=None,
        help="with --rescore: re-simulate with this schedule (and --costs, else the platform's figures)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results/sim_vs_measured"))
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import sys

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rescore:
        payload = rescore(json.loads(args.rescore.read_text()), args.costs, args.schedule)
        rest = argv if argv is not None else sys.argv[1:]
        payload["meta"]["rescored"]["argv"] = "python -m experiments.fidelity.sim_vs_measured " + " ".join(rest)
        lines = report_lines(payload["models"], payload["meta"])
        write(args.out, payload, lines)
        print("\n".join(lines))
        return payload
    if args.costs is not None or args.schedule is not None:
        parser.error("--costs and --schedule only apply with --rescore")
    if args.compare:
        runs = [json.loads(p.read_text()) for p in args.compare]
        summary, lines = compare_runs(runs, [str(p) for p in args.compare])
        write(args.out, {"runs": [str(p) for p in args.compare], "models": summary}, lines)
        print("\n".join(lines))
        return summary
    if args.count < 2 or args.replicates < 1 or args.runs < 1 or args.chunk < 0:
        parser.error("--count must be >= 2, --replicates and --runs >= 1, --chunk >= 0")
    if args.rounds < 1 or args.round_repeats < 1:
        parser.error(f"--rounds and --round-repeats must be >= 1, got {args.rounds}, {args.round_repeats}")
    if not 0 < args.rel_ci < 1:
        parser.error(f"--rel-ci must be in (0, 1), got {args.rel_ci}")
    command = "python -m experiments.fidelity.sim_vs_measured " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.runs == 1:
        return run(args, args.out, command)
    done = []
    for i in range(args.runs):
        if i and args.gap > 0:
            time.sleep(args.gap)
        done.append(run(args, args.out.with_name(f"{args.out.name}-run{i + 1}"), command))
    summary, lines = compare_runs(done, [f"{args.out.name}-run{i + 1}" for i in range(args.runs)])
    write(args.out.with_name(f"{args.out.name}-agreement"), {"models": summary}, lines)
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main()
