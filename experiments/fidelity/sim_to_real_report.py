"""The sim-to-real summary (:mod:`experiments.fidelity.sim_to_real`): the comparison's pooled latencies,
the verdict of the target, and the markdown tables of the comparison and of the pick's re-measurement."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.fidelity.remeasure import REMEASURE_ROUNDS
from experiments.fidelity.rounds import pool

#: The three placements of the final comparison, in the order of the first round.
KINDS = ("fine_tuned", "sim_best", "heft")
#: Single measurements of the fine-tune this close to its fastest are counted: with +-2% intervals (the
#: measured env's default protocol) two such placements cannot be told apart by one measurement each.
CLOSE = 0.04


def pooled(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind, from one model's ``compare`` rows: the pooled drift-corrected latency and its 95% interval,
    the raw median of its runs and its interval, the rounds and the load range (milliseconds)."""
    return pool(rows, "kind", KINDS)


def verdict(stats: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Fine-tuned against each other placement: ``better`` / ``worse`` (intervals disjoint) or ``tie``."""
    out = {}
    ft = stats.get("fine_tuned")
    for kind in KINDS[1:]:
        other = stats.get(kind)
        if ft is None or other is None:
            out[kind] = "missing"
        elif ft["high_ms"] < other["low_ms"]:
            out[kind] = "better"
        elif ft["low_ms"] > other["high_ms"]:
            out[kind] = "worse"
        else:
            out[kind] = "tie"
    return out


def summary(rows: list[dict[str, Any]], rounds: int, remeasure_rounds: int = REMEASURE_ROUNDS) -> list[str]:
    """Markdown lines: per model the three placements' measured latencies, intervals and the verdict, then
    the re-measured candidates of the pick."""
    lines = [
        "| model | placement | groups on cpu0 / cpu1 | simulated ms | measured ms (95% interval) "
        "| ratio to all-on-host "
        "| raw median ms (95% interval) | rounds | load (min-max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    picks = [
        "",
        "The pick: the fine-tune's candidates re-measured (fastest single measurement of the fine-tune first)",
        "",
        "| model | candidate | groups on cpu0 / cpu1 | fine-tune ms (one measurement) "
        "| re-measured ms (95% interval) | ratio to all-on-host | rounds | load (min-max) | role |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        sim = next((r for r in mine if r["stage"] == "sim"), None)
        tune = next((r for r in mine if r["stage"] == "fine_tune"), None)
        chosen = next((r for r in mine if r["stage"] == "pick"), None)
        measured = [r for r in mine if r["stage"] == "remeasure"]
        stats = pooled([r for r in mine if r["stage"] == "compare"])
        for kind in KINDS:
            s = stats.get(kind)
            if s is None:
                continue
            simulated = _simulated(sim, s["placement"])
            lines.append(
                f"| {model} | {kind} | {_split(s['placement'])} | "
                f"{'-' if simulated is None else f'{simulated:.2f}'} | "
                f"{s['latency_ms']:.2f} ({s['low_ms']:.2f}-{s['high_ms']:.2f}) | {s['ratio_to_host']:.3f} | "
                f"{s['raw_ms']:.2f} ({s['raw_low_ms']:.2f}-{s['raw_high_ms']:.2f}) | "
                f"{s['rounds']}/{rounds} | "
                f"{s['load'][0]:.2f}-{s['load'][1]:.2f} |"
            )
        picks += _pick_lines(model, sim, chosen, measured, remeasure_rounds)
        notes += _pick_notes(model, sim, chosen, measured, stats)
        for name, stage in (
            ("re-measurement", measured),
            ("comparison", [r for r in mine if r["stage"] == "compare"]),
        ):
            if stage:
                notes.append(f"- {model}: {name}: {_cost(stage)}")
        if stats:
            v = verdict(stats)
            met = all(x in ("better", "tie") for x in v.values())
            notes.append(
                f"- {model}: fine-tuned vs simulator's best: {v['sim_best']}; vs HEFT: {v['heft']}; "
                f"target {'met' if met else 'NOT met'}"
                + (
                    f" (fine-tune: {tune['evaluations']} measured placements{_wall(tune)}, "
                    f"best seen {tune['best_measured_ms']:.2f} ms, "
                    f"{_close([r for r in mine if r['stage'] == 'fine_tune_eval'])} of them within "
                    f"{CLOSE:.0%} of it, it included)"
                    if tune
                    else ""
                )
            )
        stages = {r["stage"] for r in mine}
        old_rule = chosen is None and not measured and "compare" in stages
        missing = [
            s for s in ("sim", "fine_tune", "pick") if s not in stages and not (old_rule and s == "pick")
        ]
        if missing or any(stats.get(k, {}).get("rounds", 0) < rounds for k in KINDS):
            notes.append(f"- {model}: unfinished ({', '.join(missing) or 'compare rounds'} missing)")
    return lines + (picks if len(picks) > 5 else []) + [""] + notes


def _close(evals: list[dict[str, Any]]) -> int:
    """Distinct placements of ``fine_tune_eval`` rows measured within ``CLOSE`` of the fastest."""
    best: dict[tuple[int, ...], float] = {}
    for r in evals:
        if r["latency_ms"] is not None:
            best[tuple(r["placement"])] = min(best.get(tuple(r["placement"]), float("inf")), r["latency_ms"])
    fastest = min(best.values(), default=float("nan"))
    return sum(ms <= fastest * (1 + CLOSE) for ms in best.values())


def _wall(row: dict[str, Any]) -> str:
    return f" in {row['wall_s']:.0f} s" if "wall_s" in row else ""


def _cost(rows: list[dict[str, Any]]) -> str:
    """How long measuring ``rows`` took: their timed runs' seconds, and wall seconds where rows record them."""
    runs = sum(sum(r["times"]) + sum(r["reference_times"]) for r in rows)
    walls = [r["wall_s"] for r in rows if "wall_s" in r]
    wall = f", {sum(walls):.0f} s of wall time" if len(walls) == len(rows) else ""
    return f"{len(rows)} measurements, {runs:.0f} s of timed runs (candidates and reference){wall}"


def _split(placement: list[int]) -> str:
    counts = np.bincount(np.asarray(placement), minlength=2)
    return f"{counts[0]} / {counts[1]}"


def _candidates(chosen: dict[str, Any] | None, measured: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The candidates of the pick by index: from its row, or (pick not made yet) those re-measured so far."""
    if chosen is not None:
        return dict(enumerate(chosen["candidates"]))
    found = {
        r["candidate"]: {"placement": r["placement"], "fine_tune_ms": r["fine_tune_ms"]} for r in measured
    }
    return dict(sorted(found.items()))


def _pick_lines(
    model: str,
    sim: dict[str, Any] | None,
    chosen: dict[str, Any] | None,
    measured: list[dict[str, Any]],
    remeasure_rounds: int,
) -> list[str]:
    """The re-measurement table's lines of one model."""
    cands = _candidates(chosen, measured)
    stats = pool(measured, "candidate", cands)
    remeasure_rounds = chosen["rounds"] if chosen is not None else remeasure_rounds
    lines = []
    for i, c in cands.items():
        s = stats.get(i)
        role = [
            name
            for name, yes in (
                ("simulator's best", sim is not None and c["placement"] == sim["sim_best"]),
                ("all on host", not any(c["placement"])),  # local's host is its device 0
                ("picked", chosen is not None and chosen["index"] == i),
            )
            if yes
        ]
        single = "-" if c["fine_tune_ms"] is None else f"{c['fine_tune_ms']:.2f}"
        again = (
            f"{s['latency_ms']:.2f} ({s['low_ms']:.2f}-{s['high_ms']:.2f}) | {s['ratio_to_host']:.3f} | "
            f"{s['rounds']}/{remeasure_rounds} | {s['load'][0]:.2f}-{s['load'][1]:.2f}"
            if s
            else f"infeasible | - | 0/{remeasure_rounds} | -"
        )
        lines.append(f"| {model} | {i} | {_split(c['placement'])} | {single} | {again} | {', '.join(role)} |")
    return lines


def _pick_notes(
    model: str,
    sim: dict[str, Any] | None,
    chosen: dict[str, Any] | None,
    measured: list[dict[str, Any]],
    stats: dict[str, dict[str, Any]],
) -> list[str]:
    """What the pick chose and why, and whether the fine-tuned placement is the simulator's best."""
    notes = []
    if chosen is not None:
        first = chosen["candidates"][0]
        if chosen["index"] == chosen["sim_index"]:
            notes.append(
                f"- {model}: the pick kept the simulator's best: no candidate re-measured faster "
                "with disjoint 95% intervals"
            )
        else:
            notes.append(
                f"- {model}: the pick took candidate {chosen['index']} "
                f"({_split(chosen['placement'])}): re-measured faster than the simulator's best "
                "with disjoint 95% intervals"
            )
        if chosen["index"] != 0:
            notes.append(
                f"- {model}: one measurement would have picked candidate 0 ({_split(first['placement'])}, "
                f"{first['fine_tune_ms']:.2f} ms once in the fine-tune)"
            )
    elif not measured and stats:
        notes.append(
            f"- {model}: the fine-tuned placement was picked by one measurement (rows made before "
            "the re-measured pick)"
        )
    if stats.get("fine_tuned") and stats.get("sim_best"):
        same = stats["fine_tuned"]["placement"] == stats["sim_best"]["placement"]
        notes.append(
            f"- {model}: the fine-tuned placement "
            + ("is the simulator's best" if same else "differs from the simulator's best")
        )
    return notes


def _simulated(sim: dict[str, Any] | None, placement: list[int]) -> float | None:
    """The simulated latency (ms) of ``placement`` if it is the simulator's best or HEFT's, else None."""
    if sim is None:
        return None
    for key in ("sim_best", "heft"):
        if sim[key] == placement:
            return float(sim[f"{key}_sim_ms"])
    return None
