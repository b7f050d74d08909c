"""Statistics of the simulator's acceptance test (:mod:`experiments.sim_vs_measured`): simulator vs
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
        "| model | Spearman per run | MAPE per run | self-agreement per run | max diff Spearman / MAPE | agree |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in models:
        sp = [r["models"][m]["summary"]["all"]["spearman"] for r in runs]
        mape = [r["models"][m]["summary"]["all"]["mape"] for r in runs]
        self_ = [r["models"][m]["summary"].get("self_all", {}).get("spearman", float("nan")) for r in runs]
        d_sp = max((abs(a - b) for a, b in itertools.combinations(sp, 2)), default=0.0)
        d_mape = max((abs(a - b) for a, b in itertools.combinations(mape, 2)), default=0.0)
        agree = bool(d_sp <= AGREE_SPEARMAN and d_mape <= AGREE_MAPE)
        out[m] = {"spearman": sp, "mape": mape, "self": self_, "max_diff_spearman": d_sp,
                  "max_diff_mape": d_mape, "agree": agree}  # fmt: skip
        lines.append(
            f"| {m} | {' / '.join(fmt(x) for x in sp)} | {' / '.join(fmt(x, True) for x in mape)} | "
            f"{' / '.join(fmt(x) for x in self_)} | {d_sp:.3f} / {100 * d_mape:.1f} pts | "
            f"{'yes' if agree else 'NO'} |"
        )
    return out, lines
