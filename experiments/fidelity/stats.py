"""Statistics of the simulator's acceptance test (:mod:`experiments.fidelity.sim_vs_measured`): simulator vs
measurement, agreement of replicates and the noise ceiling it implies, agreement of whole runs."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from scipy.stats import spearmanr

KINDS = ("iid", "blocks")
#: Issue #13's targets.
TARGETS = {"self_all": 0.95, "self_blocks": 0.85, "spearman": 0.9, "mape": 0.10}
#: Runs agree when their Spearman differ by at most this much and their MAPE by at most this many points.
AGREE_SPEARMAN, AGREE_MAPE = 0.03, 0.03


def fmt(x: float | None, pct: bool = False) -> str:
    """``x`` with 3 decimals, or as a percentage; "-" for None or non-finite."""
    if x is None or not np.isfinite(x):
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def compare(measured: np.ndarray, simulated: np.ndarray) -> dict[str, float]:
    """Spearman rho (and its p-value) and MAPE of ``simulated`` against ``measured``, both shape ``(n,)``."""
    if len(measured) > 2:
        rho, pvalue = spearmanr(measured, simulated)
    else:
        rho, pvalue = float("nan"), float("nan")
    mape = float(np.mean(np.abs(simulated - measured) / measured)) if len(measured) else float("nan")
    return {"n": int(len(measured)), "spearman": float(rho), "p_value": float(pvalue), "mape": mape}


def self_agreement(first: np.ndarray, second: np.ndarray) -> dict[str, float]:
    """Agreement of two replicates (shape ``(n,)`` each) and the ceiling it puts on any simulator.

    Returns:
        ``spearman`` and ``mape`` between the replicates (MAPE relative to their mean), ``ceiling_spearman``
        = ``sqrt(2r / (1 + r))`` (Spearman-Brown for the mean of two; nan for ``r <= 0``) and
        ``floor_mape`` = half the mean relative gap, the error a perfect simulator would still show
        against the mean.
    """
    stats = compare(first, second)
    mean = (first + second) / 2
    gap = np.abs(first - second) / mean if len(mean) else np.array([np.nan])
    r = stats["spearman"]
    return {
        "n": stats["n"],
        "spearman": r,
        "mape": float(np.mean(gap)),
        "ceiling_spearman": float(np.sqrt(2 * r / (1 + r))) if r > 0 else float("nan"),
        "floor_mape": float(np.mean(gap) / 2),
    }


def summarize_rows(rows: list[dict[str, Any]], replicates: int) -> dict[str, Any]:
    """Simulator-vs-measured statistics per kind, self-agreement and its ceiling (see the module docstring)."""
    ok = [r for r in rows if r["measured"] is not None and r["simulated"] is not None]
    summary: dict[str, Any] = {"evaluated": len(rows), "feasible": len(ok)}
    for kind in (None, *KINDS):
        sel = [r for r in ok if kind is None or r["kind"] == kind]
        stats = compare(np.array([r["measured"] for r in sel]), np.array([r["simulated"] for r in sel]))
        summary["all" if kind is None else kind] = stats
    raw = [r for r in ok if None not in r["raw_replicates"]]
    summary["all_raw"] = compare(
        np.array([float(np.median(r["raw_replicates"])) for r in raw]),
        np.array([r["simulated"] for r in raw]),
    )
    if replicates >= 2:
        for label, key in (("self", "measured_replicates"), ("self_raw", "raw_replicates")):
            for kind in (None, "blocks"):
                sel = [r for r in ok if (kind is None or r["kind"] == kind) and None not in r[key]]
                a = np.array([r[key][0] for r in sel])
                b = np.array([r[key][1] for r in sel])
                summary[f"{label}_{'all' if kind is None else kind}"] = self_agreement(a, b)
        times = [r["replicates"][1]["t"] - r["replicates"][0]["t"] for r in ok]
        summary["replicate_separation_s"] = float(np.median(times)) if times else float("nan")
    cis = [rec["ci"] / rec["latency"] for r in ok for rec in r["replicates"] if rec["latency"]]
    samples = [rec["samples"] for r in ok for rec in r["replicates"]]
    summary["rel_ci_median"] = float(np.median(cis)) if cis else float("nan")
    summary["rel_ci_p90"] = float(np.percentile(cis, 90)) if cis else float("nan")
    summary["samples_median"] = float(np.median(samples)) if samples else float("nan")
    return summary


def compare_runs(runs: list[dict[str, Any]], names: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Do several runs agree (Spearman within ``AGREE_SPEARMAN``, MAPE within ``AGREE_MAPE``)?

    Returns:
        Per model: each run's Spearman, MAPE and self-agreement, the largest pairwise differences and
        whether they agree; and the Markdown lines.
    """
    models = sorted(set.intersection(*(set(r["models"]) for r in runs)))
    out: dict[str, Any] = {}
    lines = [
        "# Agreement of sim_vs_measured runs",
        "",
        "Runs: " + ", ".join(f"`{n}` ({r['meta']['date']})" for n, r in zip(names, runs)),
        "",
        "MAPE: level-scaled (drift-corrected estimate x the reference level measured once per run) and "
        "relative (drift-corrected ratio to the all-on-host reference against simulated / simulated host, "
        "see `relative_figures`); runs agree on a figure when Spearman differs by <= 0.03 and MAPE by <= 3 "
        "points.",
        "",
        "| model | Spearman per run | MAPE per run | relative MAPE per run | self-agreement per run "
        "| max diff Spearman / MAPE / relative MAPE | agree (level-scaled / relative) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in models:
        summaries = [r["models"][m]["summary"] for r in runs]
        sp = [s["all"]["spearman"] for s in summaries]
        mape = [s["all"]["mape"] for s in summaries]
        rel = [s.get("relative", {}).get("all", {}).get("mape", float("nan")) for s in summaries]
        self_ = [s.get("self_all", {}).get("spearman", float("nan")) for s in summaries]
        d_sp, d_mape, d_rel = (
            max((abs(a - b) for a, b in itertools.combinations(x, 2)), default=0.0) for x in (sp, mape, rel)
        )
        agree = bool(d_sp <= AGREE_SPEARMAN and d_mape <= AGREE_MAPE)
        agree_rel = bool(d_sp <= AGREE_SPEARMAN and d_rel <= AGREE_MAPE)
        out[m] = {"spearman": sp, "mape": mape, "relative_mape": rel, "self": self_,
                  "max_diff_spearman": d_sp, "max_diff_mape": d_mape, "max_diff_relative_mape": d_rel,
                  "agree": agree, "agree_relative": agree_rel}  # fmt: skip
        lines.append(
            f"| {m} | {' / '.join(fmt(x) for x in sp)} | {' / '.join(fmt(x, True) for x in mape)} | "
            f"{' / '.join(fmt(x, True) for x in rel)} | {' / '.join(fmt(x) for x in self_)} | "
            f"{d_sp:.3f} / {100 * d_mape:.1f} / {100 * d_rel:.1f} pts | "
            f"{'yes' if agree else 'NO'} / {'yes' if agree_rel else 'NO'} |"
        )
    pooled = {m: pooled_figures([r["models"][m] for r in runs]) for m in models}
    if any(pooled.values()):
        lines += [
            "",
            "**Simulator vs the runs pooled.** Where every run measured the same placements and simulated them "
            "alike, each placement's drift-corrected ratio to the all-on-host reference (the median of a run's "
            "replicates) is averaged over the runs (geometric mean): a measurement with the runs' noise averaged out, against `simulated / simulated "
            "host`. `split halves` is how the pooled first and second half of the runs agree with each other "
            "(the noise left in a half of the pooled measurement).",
            "",
            "| model | runs pooled | Spearman all / iid / blocks | relative MAPE | split halves Spearman |",
            "| --- | --- | --- | --- | --- |",
        ]
        for m, f in pooled.items():
            if f:
                out[m]["pooled"] = f
                lines.append(
                    f"| {m} | {f['runs']} | {fmt(f['all']['spearman'])} / {fmt(f['iid']['spearman'])} / "
                    f"{fmt(f['blocks']['spearman'])} | {fmt(f['all']['mape'], True)} | "
                    f"{fmt(f['split_halves'])} |"
                )
    return out, lines


def pooled_figures(models: list[dict[str, Any]]) -> dict[str, Any]:
    """Simulator vs the geometric mean over several runs (``models``: one model's entry of each run) of the
    measured ratio to the host reference; ``{}`` unless all runs hold the same placements, simulated alike,
    with a reference level and a host row.

    Returns:
        ``runs``, :func:`compare` stats per kind (``all``, ``iid``, ``blocks``) and ``split_halves``: the
        Spearman between the pooled first and second halves of the runs (all placements).
    """
    rows = [m.get("rows") for m in models]
    levels = [m["summary"].get("reference_level") for m in models]
    if len(rows) < 2 or not all(rows):
        return {}
    first = rows[0]
    same = all(
        len(r) == len(first)
        and all(
            a["placement"] == b["placement"] and a["simulated"] == b["simulated"] for a, b in zip(first, r)
        )
        for r in rows[1:]
    )
    host = host_row(first)
    if not same or not all(levels) or host is None or host["simulated"] is None:
        return {}
    keep = [
        i
        for i, row in enumerate(first)
        if row["simulated"] is not None and all(r[i]["measured"] is not None for r in rows)
    ]
    # (runs, placements): each run's drift-corrected ratio to the host reference, in logs
    logs = np.array([[np.log(r[i]["measured"] / level) for i in keep] for r, level in zip(rows, levels)])
    measured = np.exp(logs.mean(axis=0))
    simulated = np.array([first[i]["simulated"] / host["simulated"] for i in keep])
    kinds = np.array([first[i]["kind"] for i in keep])
    out: dict[str, Any] = {"runs": len(rows)}
    for kind in (None, *KINDS):
        sel = np.ones(len(keep), bool) if kind is None else kinds == kind
        out["all" if kind is None else kind] = compare(measured[sel], simulated[sel])
    half = len(rows) // 2
    out["split_halves"] = float(spearmanr(logs[:half].mean(axis=0), logs[half:].mean(axis=0))[0])
    return out


def host_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The all-on-host single-device row (the drift reference's own placement), or None."""
    return next((r for r in rows if r["kind"] == "single" and not any(r["placement"])), None)


def relative_figures(rows: list[dict[str, Any]], reference_level: float | None) -> dict[str, Any]:
    """Simulator vs measured with both latencies relative to the all-on-host placement.

    The drift-corrected estimate of a replicate is ``ratio x reference_level``, where ``ratio`` is the
    median of the candidate / host-reference pairs timed in the same window; dividing by
    ``reference_level`` gives back ``ratio``, which a slowdown of the whole machine cancels in, even one
    that hit the single measurement of the level. It is compared with ``simulated / simulated(host)``.
    Spearman equals the level-scaled one; MAPE no longer depends on the level.

    Returns:
        ``compare`` stats (``all`` and per kind), or an empty dict without a reference or a host row.
    """
    host = host_row(rows)
    if not reference_level or host is None or host["simulated"] is None:
        return {}
    ok = [r for r in rows if r["measured"] is not None and r["simulated"] is not None]
    out: dict[str, Any] = {}
    for kind in (None, *KINDS):
        sel = [r for r in ok if kind is None or r["kind"] == kind]
        measured = np.array([r["measured"] / reference_level for r in sel])
        simulated = np.array([r["simulated"] / host["simulated"] for r in sel])
        out["all" if kind is None else kind] = compare(measured, simulated)
    return out


def window_reference(rows: list[dict[str, Any]], reference_level: float | None) -> float:
    """Median over the run of the host reference's interleaved run times, seconds (nan without them).

    Each drift-corrected replicate stores its raw median and ``ratio x level``; ``raw / ratio`` is the
    reference's time in that replicate's window. Set against the once-measured ``reference_level`` it shows
    whether the level itself was taken in a slow (or fast) moment.
    """
    if not reference_level:
        return float("nan")
    times = [
        rec["raw"] * reference_level / rec["latency"]
        for r in rows
        for rec in r["replicates"]
        if rec.get("latency") and rec.get("raw")
    ]
    return float(np.median(times)) if times else float("nan")


def replicate_sd(first: np.ndarray, second: np.ndarray) -> float:
    """Relative standard deviation of one replicate, from two replicates of shape ``(n,)``:
    ``sd(log(first / second)) / sqrt(2)``."""
    return float(np.std(np.log(first / second), ddof=1) / np.sqrt(2))


def noisy_agreement(truth: np.ndarray, rel_sd: float, trials: int = 200, seed: int = 0) -> float:
    """Expected Spearman between two copies of ``truth`` (shape ``(n,)``), each multiplied by independent
    log-normal noise of relative sd ``rel_sd``: the self-agreement that noise alone allows."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((trials, 2, len(truth))) * rel_sd
    copies = np.log(truth)[None, None, :] + noise
    return float(np.mean([spearmanr(c[0], c[1])[0] for c in copies]))


def sd_for_agreement(truth: np.ndarray, target: float, trials: int = 200) -> float:
    """Largest relative sd per replicate whose :func:`noisy_agreement` still reaches ``target`` (bisection
    in log space between 0.01% and 100%)."""
    low, high = 1e-4, 1.0
    if noisy_agreement(truth, high, trials) >= target:
        return high
    for _ in range(30):
        mid = float(np.sqrt(low * high))
        if noisy_agreement(truth, mid, trials) >= target:
            low = mid
        else:
            high = mid
    return low


def noise_ceiling(rows: list[dict[str, Any]], samples: float) -> dict[str, Any]:
    """What stops self-agreement: per kind (all, blocks), the measured per-replicate relative sd, the sd
    the issue's target would need (with true latencies = the mean of the replicates), the 95% CI
    half-width that sd means (1.96 x sd) and the timed runs per replicate it implies if the sd shrinks as
    ``1 / sqrt(runs)`` from ``samples`` (the median runs per replicate now).

    Returns:
        ``{"all": {...}, "blocks": {...}}`` with ``n``, ``sd``, ``agreement`` (what that sd gives),
        ``target``, ``sd_needed``, ``ci_needed`` and ``runs_needed``; empty without two replicates.
    """
    out: dict[str, Any] = {}
    for kind, target in ((None, TARGETS["self_all"]), ("blocks", TARGETS["self_blocks"])):
        sel = [
            r for r in rows
            if (kind is None or r["kind"] == kind) and len(r["measured_replicates"]) >= 2
            and None not in r["measured_replicates"][:2]
        ]  # fmt: skip
        if len(sel) < 3:
            continue
        first = np.array([r["measured_replicates"][0] for r in sel])
        second = np.array([r["measured_replicates"][1] for r in sel])
        truth = (first + second) / 2
        sd = replicate_sd(first, second)
        needed = sd_for_agreement(truth, target)
        out["all" if kind is None else kind] = {
            "n": len(sel),
            "sd": sd,
            "agreement": noisy_agreement(truth, sd),
            "target": target,
            "sd_needed": needed,
            "ci_needed": 1.96 * needed,
            "runs_needed": float(samples * (sd / needed) ** 2),
        }
    return out


def noise_by_segments(rows: list[dict[str, Any]], bins: int = 3) -> dict[str, Any]:
    """Where the replicates disagree: the split placements (rows with ``segments``, the executor's
    segment count, and two measured replicates) in ``bins`` bins of equal count by segments, each with its
    segment range and per-replicate relative sd (:func:`replicate_sd`), and the Spearman between
    ``|log(first / second)|`` and the segment count. Empty for too few such rows (old runs lack
    ``segments``)."""
    sel = [
        r for r in rows
        if r["kind"] != "single" and r.get("segments") is not None
        and len(r["measured_replicates"]) >= 2 and None not in r["measured_replicates"][:2]
    ]  # fmt: skip
    if len(sel) < 3 * bins:
        return {}
    sel.sort(key=lambda r: r["segments"])
    segments = np.array([r["segments"] for r in sel], dtype=np.float64)
    first = np.array([r["measured_replicates"][0] for r in sel])
    second = np.array([r["measured_replicates"][1] for r in sel])
    out = []
    for part in np.array_split(np.arange(len(sel)), bins):
        out.append(
            {
                "segments": [int(segments[part[0]]), int(segments[part[-1]])],
                "n": len(part),
                "sd": replicate_sd(first[part], second[part]),
            }
        )
    rho = spearmanr(np.abs(np.log(first / second)), segments)[0]
    return {"bins": out, "spearman": float(rho)}
