"""Sim-to-real's pick of the fine-tuned placement: re-measure the fine-tune's best candidates, then choose.

The fine-tune measures each placement once, so the fastest of ~100 single measurements is biased low (the
winner's curse: among many placements of about the same latency, the one that measured luckiest wins).
The pick is therefore made on fresh measurements of a few candidates instead:

* candidates (:func:`candidates`): the ``k`` placements of the fine-tune with the fastest single
  measurement, the simulator's best and the all-on-host placement always among them (they take the last
  places if they are not): a simulator that finds splits cheap on a machine where they are not (one core
  shared by both virtual CPUs) must not leave the pick a choice of splits only;
* re-measurement: ``rounds`` rounds of all candidates, drift-corrected against the all-on-host placement
  (:mod:`experiments.fidelity.rounds`), each candidate pooled over its rounds into a 95% interval;
* pick (:func:`pick`): the simulator's best stays unless a candidate is faster with disjoint intervals;
  of those, the one with the lowest median. The fine-tune has to show it found something better. With
  all-on-host re-measured too, the pick is never a placement whose interval lies wholly above the
  all-on-host placement's: if all-on-host is clearly faster than the simulator's best, so is whatever is
  picked instead, and none of those is clearly slower than it.
"""

from __future__ import annotations

from typing import Any

#: Candidates re-measured and rounds of it, by default (docs/sim-to-real.md says why these).
CANDIDATES = 4
REMEASURE_ROUNDS = 4


def candidates(
    evals: list[dict[str, Any]], sim_best: list[int], host: list[int], k: int
) -> list[dict[str, Any]]:
    """The ``k`` fastest placements of the fine-tune's ``fine_tune_eval`` rows, the simulator's best and
    the all-on-host placement among them.

    Args:
        evals: One model's ``fine_tune_eval`` rows (``placement``, ``latency_ms``; None if infeasible).
        sim_best: The simulator's best placement.
        host: The all-on-host placement.
        k: Candidates wanted (>= 2: room for the simulator's best and all-on-host).

    Returns:
        ``{"placement", "fine_tune_ms"}`` per candidate, fastest single measurement first, then the
        simulator's best and all-on-host, in that order, if they were not among the fastest (their
        ``fine_tune_ms`` None if never measured). Fewer than ``k`` if the fine-tune measured fewer
        feasible placements than ``k`` minus those two.
    """
    if k < 2:
        raise ValueError(f"k must be >= 2 (the simulator's best and all-on-host), got {k}")
    best: dict[tuple[int, ...], float] = {}
    for r in evals:
        if r["latency_ms"] is not None:
            key = tuple(r["placement"])
            best[key] = min(best.get(key, float("inf")), float(r["latency_ms"]))
    ranked = sorted(best, key=lambda p: best[p])[:k]
    reserved = list(dict.fromkeys([tuple(sim_best), tuple(host)]))  # one entry if they are the same
    missing = [p for p in reserved if p not in ranked]
    ranked = [p for p in ranked if p not in reserved][: k - len(reserved)]
    ranked = sorted(ranked + [p for p in reserved if p not in missing], key=lambda p: best[p]) + missing
    return [{"placement": list(p), "fine_tune_ms": best.get(p)} for p in ranked]


def pick(stats: dict[int, dict[str, Any]], sim_index: int, rounds: int) -> int:
    """The index of the fine-tuned placement among the candidates, from their pooled re-measurement.

    Args:
        stats: Per candidate index, its pooled re-measurement (:func:`experiments.fidelity.rounds.pool`:
            ``latency_ms``, ``low_ms``, ``high_ms``, ``rounds``).
        sim_index: The simulator's best's index.
        rounds: Rounds measured; a candidate infeasible in any of them is not picked.

    Returns:
        ``sim_index`` unless some candidate's interval lies wholly below the simulator's best's; then the
        one of those with the lowest median. If the simulator's best itself failed a round, the complete
        candidate with the lowest median (``sim_index`` if none is complete).
    """
    complete = {i: s for i, s in stats.items() if s["rounds"] >= rounds}
    base = complete.get(sim_index)
    if base is None:
        return min(complete, key=lambda i: complete[i]["latency_ms"], default=sim_index)
    faster = [i for i, s in complete.items() if s["high_ms"] < base["low_ms"]]
    return min(faster, key=lambda i: complete[i]["latency_ms"], default=sim_index)
