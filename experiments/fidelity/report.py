"""The Markdown report of one :mod:`experiments.fidelity.sim_vs_measured` run: the per-model table, which of issue
#13's targets each model meets, and what stops self-agreement (the noise ceiling)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.fidelity.stats import TARGETS, fmt


def report_lines(results: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The Markdown report of one run."""
    c = meta["command"]
    lines = [
        "# Simulated vs measured latency (local platform)",
        "",
        f"OpenVINO {meta['openvino']}, {meta['date']}; per model {c['count']} iid + {c['count']} blocks + the "
        f"single-device placements at level `{c['level']}`, {c['replicates']} replicates"
        + (f" (chunks of {c['chunk']})" if c["chunk"] else " (full passes)")
        + f"; measured: partitioned executor, warm-up {c['warmup']}, "
        + (
            f"{c['rounds']} passes over the chunk per replicate, {c['round_repeats']} runs each, pooled "
            if c.get("rounds", 1) > 1
            else f"{c['repeats']}-{c['max_repeats']} runs until the median's 95% CI is within "
            f"+-{100 * c['rel_ci']:.0f}% "
        )
        + f"(time budget {c['time_budget']} s), reference `{c['reference']}`. Command: `{meta['argv']}`.",
        "",
        "MAPE (relative): measured latencies as drift-corrected ratios to the all-on-host reference timed in "
        "the same window, against simulated / simulated all-on-host: a slowdown of the whole machine, even "
        "during the one measurement of the reference level, cancels (the level-scaled MAPE beside it does "
        "not; the raw one is the plain median)."
        + (
            f" Rescored from the stored rows ({meta['rescored']['date']}"
            + (
                f", re-simulated with the segment-boundary figures of `{meta['rescored']['costs']}`"
                if meta["rescored"]["costs"]
                else ""
            )
            + ")"
            + (f": `{meta['rescored']['argv']}`." if meta["rescored"].get("argv") else ".")
            if meta.get("rescored")
            else ""
        ),
        "",
        "| model | groups | feasible | Spearman all / iid / blocks (raw) | MAPE all / iid / blocks (raw) "
        "| MAPE relative all / iid / blocks | self-agreement all / blocks (raw) | ceiling Spearman / floor MAPE "
        "| median CI / runs | load before -> after | wall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in results.items():
        s = res["summary"]
        sa, sb = s.get("self_all", {}), s.get("self_blocks", {})
        ra, rb = s.get("self_raw_all", {}), s.get("self_raw_blocks", {})
        lines.append(
            f"| {name} | {s['groups']} | {s['feasible']}/{s['evaluated']} | "
            f"{fmt(s['all']['spearman'])} / {fmt(s['iid']['spearman'])} / {fmt(s['blocks']['spearman'])} "
            f"({fmt(s['all_raw']['spearman'])}) | "
            f"{fmt(s['all']['mape'], True)} / {fmt(s['iid']['mape'], True)} / {fmt(s['blocks']['mape'], True)} "
            f"({fmt(s['all_raw']['mape'], True)}) | "
            + " / ".join(
                fmt(s.get("relative", {}).get(k, {}).get("mape"), True) for k in ("all", "iid", "blocks")
            )
            + " | "
            f"{fmt(sa.get('spearman'))} / {fmt(sb.get('spearman'))} "
            f"({fmt(ra.get('spearman'))} / {fmt(rb.get('spearman'))}) | "
            f"{fmt(sa.get('ceiling_spearman'))} / {fmt(sa.get('floor_mape'), True)} | "
            f"+-{fmt(s['rel_ci_median'], True)} / {s['samples_median']:.0f} | "
            f"{s['load_before'][0]:.2f} -> {s['load_after'][0]:.2f} | {s['wall_seconds']:.0f} s |"
        )
    lines += ["", "Targets: " + target_line(results), "", *noise_lines(results), ""]
    for name, res in results.items():
        p = res["summary"]["profile"]
        lines.append(
            f"- {name} profile: per-op sum / whole model {p['ratio']:.3f} ({p['action']}, factor "
            f"{p['factor']:.3f}, load {p['load_before']:.2f}); replicates {res['summary'].get('replicate_separation_s', float('nan')):.0f} s apart"
            + "".join(f"; warning: {w}" for w in res["summary"]["profile_warnings"])
        )
    return lines


def noise_lines(results: dict[str, Any]) -> list[str]:
    """What stops self-agreement, per model (see :func:`~experiments.fidelity.stats.noise_ceiling`)."""
    lines = [
        "Noise ceiling (true latencies = mean of the replicates; two copies with log-normal noise of the "
        "measured per-replicate sd; runs needed if the sd shrinks as 1/sqrt(runs), which drift within a "
        "window does not):",
        "",
    ]
    for name, res in results.items():
        s = res["summary"]
        parts = []
        for kind, c in s.get("noise_ceiling", {}).items():
            parts.append(
                f"{kind}: sd per replicate {fmt(c['sd'], True)} gives {c['agreement']:.3f} (measured "
                f"{fmt(s.get('self_' + kind, {}).get('spearman'))}); {c['target']:.2f} needs sd "
                f"{fmt(c['sd_needed'], True)} (95% CI +-{fmt(c['ci_needed'], True)}), about "
                f"{c['runs_needed']:.0f} runs per replicate instead of {s['samples_median']:.0f}"
            )
        ref = s.get("window_reference")
        level = s.get("reference_level")
        drift = (
            f"; reference level {level * 1e3:.2f} ms, median reference over the run's windows {ref * 1e3:.2f} ms"
            if level and ref and np.isfinite(ref)
            else ""
        )
        lines.append(f"- {name}: " + "; ".join(parts) + drift)
    by_segments = [(n, r["summary"].get("noise_by_segments")) for n, r in results.items()]
    if any(b for _, b in by_segments):
        lines += [
            "",
            "Where the replicates disagree: per-replicate sd of the split placements by the executor's "
            "segment count (three bins of equal count), and the Spearman of |log(replicate 1 / replicate 2)| "
            "with the segment count:",
            "",
        ]
        for name, b in by_segments:
            if b:
                bins = "; ".join(
                    f"{x['segments'][0]}-{x['segments'][1]} segments: {fmt(x['sd'], True)}" for x in b["bins"]
                )
                lines.append(f"- {name}: {bins}; Spearman {b['spearman']:.2f}")
    return lines


def target_line(results: dict[str, Any]) -> str:
    """Which of issue #13's targets each model meets."""
    parts = []
    for name, res in results.items():
        s = res["summary"]
        checks = {
            "self all >= 0.95": s.get("self_all", {}).get("spearman", float("nan")) >= TARGETS["self_all"],
            "self blocks >= 0.85": s.get("self_blocks", {}).get("spearman", float("nan"))
            >= TARGETS["self_blocks"],
            "Spearman >= 0.9": s["all"]["spearman"] >= TARGETS["spearman"],
            "MAPE <= 10%": s["all"]["mape"] <= TARGETS["mape"],
        }
        parts.append(f"{name}: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in checks.items()))
    return "; ".join(parts)
