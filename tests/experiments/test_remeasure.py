"""Sim-to-real's pick: the candidates of the fine-tune and the choice made on their re-measurement."""

from __future__ import annotations

import pytest

from experiments.fidelity.remeasure import candidates, pick
from experiments.fidelity.rounds import rotations

SIM = [0, 1, 1]
HOST = [0, 0, 0]


def _eval(placement: list[int], ms: float | None) -> dict:
    return {"placement": placement, "latency_ms": ms}


def test_candidates_are_the_fastest_single_measurements_with_the_simulators_best_and_all_on_host():
    evals = [_eval([1, 0, 0], 9.0), _eval(SIM, 10.0), _eval([0, 1, 0], 9.5), _eval([1, 1, 1], None)]
    evals += [_eval(HOST, 9.2), _eval([0, 0, 1], 11.0), _eval([1, 0, 0], 9.0)]  # a replayed row counts once
    got = candidates(evals, SIM, HOST, 4)
    assert [c["placement"] for c in got] == [[1, 0, 0], HOST, [0, 1, 0], SIM]
    assert [c["fine_tune_ms"] for c in got] == [9.0, 9.2, 9.5, 10.0]


def test_the_simulators_best_and_all_on_host_take_the_last_places_when_they_measured_slow_or_never():
    evals = [_eval([1, 0, 0], 9.0), _eval([0, 1, 0], 9.5), _eval([0, 0, 1], 9.7), _eval(SIM, 12.0)]
    got = candidates(evals, SIM, HOST, 3)
    assert [c["placement"] for c in got] == [[1, 0, 0], SIM, HOST]
    assert got[2]["fine_tune_ms"] is None  # all-on-host was never measured by the fine-tune
    only = candidates(evals[:3], SIM, HOST, 2)
    assert [c["placement"] for c in only] == [SIM, HOST] and only[0]["fine_tune_ms"] is None


def test_all_on_host_is_one_candidate_when_it_is_the_simulators_best():
    evals = [_eval([1, 0, 0], 9.0), _eval([0, 1, 0], 9.5), _eval([0, 0, 1], 9.7)]
    assert [c["placement"] for c in candidates(evals, HOST, HOST, 3)] == [[1, 0, 0], [0, 1, 0], HOST]


def test_candidates_need_room_for_both():
    with pytest.raises(ValueError, match="k must be >= 2"):
        candidates([], SIM, HOST, 1)


def _stats(ms: float, half: float, rounds: int = 4) -> dict:
    return {"latency_ms": ms, "low_ms": ms - half, "high_ms": ms + half, "rounds": rounds}


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        # the fine-tune's lucky winner (0) re-measures slower: the simulator's best (2) stays
        ({0: _stats(10.5, 0.1), 1: _stats(10.2, 0.1), 2: _stats(10.0, 0.1)}, 2),
        # faster, but the intervals overlap: no evidence, the simulator's best stays
        ({0: _stats(9.9, 0.1), 2: _stats(10.0, 0.1)}, 2),
        # faster with disjoint intervals: the fastest such is picked
        ({0: _stats(9.5, 0.1), 1: _stats(9.0, 0.1), 2: _stats(10.0, 0.1)}, 1),
        # a candidate infeasible in a round is not picked
        ({0: _stats(9.0, 0.1, rounds=3), 2: _stats(10.0, 0.1)}, 2),
        # the simulator's best failed a round: the fastest complete candidate
        ({0: _stats(9.9, 0.1), 1: _stats(9.5, 0.1), 2: _stats(9.0, 0.1, rounds=2)}, 1),
    ],
)
def test_pick_keeps_the_simulators_best_unless_a_candidate_is_clearly_faster(stats, expected):
    assert pick(stats, 2, 4) == expected


def test_with_all_on_host_among_the_candidates_the_pick_is_never_clearly_slower_than_it():
    # the simulator's best (2) and a fine-tune split (0) are splits 1.4x slower than all-on-host (1)
    stats = {0: _stats(108.6, 0.5), 1: _stats(78.0, 0.3), 2: _stats(110.1, 0.5)}
    assert pick(stats, 2, 4) == 1


def test_rotations_put_every_candidate_once_in_every_position():
    order = rotations(range(3), 3)
    assert [k for r, k in order if r == 1] == [1, 2, 0]
    for position in range(3):
        assert sorted(order[3 * r + position][1] for r in range(3)) == [0, 1, 2]
