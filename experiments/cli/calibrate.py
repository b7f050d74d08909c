"""Redo the per-layer profiles of the local platform's devices (validated; see placement_gym.measured.profiling).

For each model and each distinct device configuration of the ``local`` platform (its two virtual CPUs
share one), the model is profiled afresh (``PERCENTILE`` of 15 runs per layer), the per-op sum is checked
against the whole-model time of the same compiled model, and the profile is stored with the machine's
fingerprint, the OpenVINO version and the host load. The table says what validation did (``ok``,
``reprofiled`` or ``rescaled`` with its factor). Profile on a quiet machine: the load is printed so a busy
one shows.

With ``--boundaries`` it also (re)measures the ``local`` platform's figures on the cores this process may
run on (copies, segment starts, how much its two virtual CPUs overlap) and what a segment boundary of the
partitioned executor costs there (:mod:`placement_gym.measured.boundary_costs`: chains of small layers cut
into 1, 2, 4, 8 segments; the slope per boundary), stored with the machine's fingerprint and the core set,
and prints the figures beside the ``local`` platform's own. ``--boundaries-only`` skips the model profiles.

Every calibration records how busy the host was while it ran: the share of the calibrated cores' time
other processes took (:mod:`placement_gym.platforms.quiet`). One made while they took more than a quarter
is measured again, and after three busy attempts the command stops with one line saying so and stores
nothing; ``--allow-busy`` (or ``PLACEMENT_GYM_ALLOW_BUSY=1``) stores it anyway, recorded as busy. Last, the command says when and how busy
the host was for the ``local`` platform's figures in use.

Example:
    placement-gym calibrate --model resnet50 bert inception_v3 --boundaries
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def calibrate(
    models: list[str], platform: str = "local", allow_busy: bool | None = None
) -> list[dict[str, Any]]:
    """Re-profile every model in ``models`` on each distinct device of ``platform`` (``allow_busy``: store
    profiles made while the host was busy; default ``$PLACEMENT_GYM_ALLOW_BUSY``).

    Returns:
        One record per (model, device): the stored profile record plus ``model`` and ``device``.

    Raises:
        UnknownNameError: For an unknown model or platform.
        BackendError: If a device cannot run a model.
        BusyHostError: If the host stayed busy and busy profiles are not accepted.
    """
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.measured.profiling import profile_record
    from placement_gym.platforms import load_platform

    plat = load_platform(platform)
    rows = []
    for name in models:
        bench = load_benchmark(name)
        seen: set[str] = set()
        for device in plat.devices:
            config = json.dumps([device.ov_device, device.compile_config()], sort_keys=True, default=str)
            if config in seen:  # same compiled model, same profile
                continue
            seen.add(config)
            _, record, _ = profile_record(bench, device, force=True, allow_busy=allow_busy)
            rows.append({**record, "model": name, "device": device.name})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of calibration records."""
    from placement_gym.platforms import quiet

    lines = [
        "| model | device | per-op sum (ms) | whole model (ms) | sum / whole | action | factor | load before / after "
        "| host |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['device']} | {r['layer_sum'] * 1e3:.3f} | {r['whole'] * 1e3:.3f} | "
            f"{r['ratio']:.3f} | {r['action']} | {r['factor']:.3f} | {r['load_before']:.2f} / {r['load_after']:.2f} "
            f"| {quiet.short(quiet.host_activity(r))} |"
        )
    return "\n".join(lines)


def boundary_table(record: dict[str, Any]) -> str:
    """A Markdown table of a boundary micro-benchmark record (:func:`~placement_gym.measured.boundary_costs.measure_boundary_costs`)."""
    lines = [
        "| chain | tensor bytes | median run time per k (ms) | slope per boundary (us) |",
        "| --- | --- | --- | --- |",
    ]
    for kind, c in record["chains"].items():
        times = ", ".join(f"k={k}: {t * 1e3:.3f}" for k, t in zip(c["ks"], c["times"]))
        lines.append(f"| {kind} | {c['tensor_bytes']} | {times} | {c['slope'] * 1e6:.1f} |")
    lines += [
        "",
        f"fixed cost per boundary {record['fixed'] * 1e6:.1f} us; boundary bandwidth plain "
        f"{record['bandwidth'] / 1e9:.2f} GB/s, blocked {record['blocked_bandwidth'] / 1e9:.2f} GB/s "
        f"(load {record['load_before']:.2f} -> {record['load_after']:.2f})",
    ]
    return "\n".join(lines)


def figures_in_use() -> str:
    """Lines saying when and how busy the host was for each stored calibration the ``local`` platform of
    this process's cores is built from (:func:`~placement_gym.platforms.local.calibration_records`)."""
    from placement_gym.platforms import quiet
    from placement_gym.platforms.local import calibration_records

    lines = ["figures in use:"]
    for what, record in calibration_records():
        lines.append(f"  {what}: {quiet.describe(record)}")
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> None:
    from placement_gym.platforms import quiet
    from placement_gym.zoo import BENCHMARK_MODELS

    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    allow_busy = args.allow_busy or quiet.allow_busy_default()  # the flag, or $PLACEMENT_GYM_ALLOW_BUSY
    with quiet.accept_busy(allow_busy):
        if not args.boundaries_only:
            print(table(calibrate(args.model or list(BENCHMARK_MODELS), args.platform, allow_busy)))
        if args.boundaries or args.boundaries_only:
            from placement_gym.measured.boundary_costs import boundary_costs
            from placement_gym.platforms.local import recalibrate

            platform = recalibrate(allow_busy)
            print(f"local platform: {platform.description}; contention {platform.devices[0].contention:.2f}")
            print(boundary_table(boundary_costs(platform)))
        if args.platform == "local" or args.boundaries or args.boundaries_only:
            print(figures_in_use())
