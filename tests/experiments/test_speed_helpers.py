"""The helpers the speed scripts share: never-seen random placements, the measured-env scripts' parser and
row writer, the throughput ratio of two worker counts, and the breakdown of the measuring workers' ratio
into its factors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.speed.measured_env import DEFAULT_ENV, row_writer, step_parser, unseen_actions
from experiments.speed.measuring_workers import breakdown, factors, steps_per_second
from experiments.speed.ray_backend import rate_ratio


def test_unseen_actions_are_all_different_and_repeat_with_the_seed() -> None:
    nvec = np.array([2, 2, 2])  # 8 placements: drawing 8 forces redraws of repeats
    drawn = [a.tolist() for a in unseen_actions(nvec, np.random.default_rng(0), 8)]
    assert len({tuple(a) for a in drawn}) == 8
    assert drawn == [a.tolist() for a in unseen_actions(nvec, np.random.default_rng(0), 8)]


def test_step_parser_has_the_shared_options_and_the_scripts_add_theirs() -> None:
    parser = step_parser("First line.\nMore.", steps=20)
    parser.add_argument("--trim", action="store_true")
    args = parser.parse_args([])
    assert vars(args) == {"env": DEFAULT_ENV, "steps": 20, "seed": 0, "out": None, "trim": False}
    assert parser.description == "First line."
    assert step_parser("", steps=0).parse_args(["--steps", "3", "--out", "x"]).steps == 3


def test_row_writer_adds_its_fields_and_the_load_and_appends_each_row(tmp_path, capsys) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"earlier": 1}\n')  # appended to, not replaced
    emit = row_writer(str(path), env="e", executor=None)
    emit({"figure": "make", "seconds": 1.5})
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"earlier": 1} and list(rows[1]) == ["figure", "seconds", "env", "executor", "load"]
    assert rows[1]["env"] == "e" and rows[1]["load"] >= 0
    assert json.loads(capsys.readouterr().out) == rows[1]
    row_writer(None, env="e")({"figure": "step"})  # no file: printed only
    assert json.loads(capsys.readouterr().out)["figure"] == "step"


def test_rate_ratio_pools_the_runs_of_each_worker_count() -> None:
    rows = [
        {"workers": 1, "cells": 10, "seconds": 10.0},
        {"workers": 2, "cells": 10, "seconds": 4.0},
        {"workers": 1, "cells": 10, "seconds": 30.0},  # pooled: 20 cells in 40 s, not a mean of rates
        {"workers": 2, "cells": 30, "seconds": 16.0},
        {"workers": None, "cells": 99, "seconds": 1.0},  # a run without Ray counts for neither
    ]
    assert rate_ratio(rows, "cells", 1, 2) == pytest.approx((40 / 20) / (20 / 40))


def _history(steps: list[tuple[float, list[float]]], in_process: bool = False) -> list[dict[str, str]]:
    """history.csv rows: per vector step its time and each worker's evaluation seconds (the rows of a step
    written a millisecond apart, as the listeners write them); ``in_process``: one env, no worker column."""
    rows = []
    for step, (wall, seconds) in enumerate(steps, 1):
        for worker, s in enumerate(seconds):
            rows.append(
                {
                    "evaluation": str(len(rows) + 1),
                    "wall_s": f"{wall + 0.001 * worker:.3f}",
                    "worker": "" if in_process else str(worker),
                    "evaluation_s": str(s),
                    "vector_step": "" if in_process else str(step),
                }
            )
    return rows


def test_the_measuring_workers_breakdown_multiplies_up_to_the_ratio() -> None:
    one = breakdown(_history([(1.0, [9.0]), (2.0, [0.6]), (3.0, [0.8]), (4.0, [0.6]), (5.0, [0.8])], True))
    assert one is not None and one["vector_steps"] == 4  # the first step (start-up) is left out
    assert one["evaluation_s"] == pytest.approx(0.7) and one["max_evaluation_s"] == pytest.approx(0.7)
    assert one["lockstep"] == pytest.approx(1.0) and one["vector_step_s"] == pytest.approx(1.0)
    assert one["rest_s"] == pytest.approx(0.3) and one["steps_per_second"] == pytest.approx(1.0)
    assert one["worker_evaluation_s"] == pytest.approx([0.7])
    # 2 workers: step 3 waits 1.2 s for worker 1 while worker 0 took 0.8 s; steps every 1.5 s
    two = breakdown(_history([(1.0, [0.3, 9.0]), (2.5, [0.8, 1.2]), (4.0, [1.0, 0.6]), (5.5, [0.9, 0.9])]))
    assert two is not None and two["vector_steps"] == 3 and two["evaluations_per_step"] == 2
    assert two["worker_evaluation_s"] == pytest.approx([0.9, 0.9])
    assert two["step_max_evaluation_s"] == pytest.approx([1.2, 1.0, 0.9])
    assert two["evaluation_s"] == pytest.approx(0.9) and two["max_evaluation_s"] == pytest.approx(3.1 / 3)
    assert two["lockstep"] == pytest.approx(3.1 / 3 / 0.9) and two["vector_step_s"] == pytest.approx(1.5)
    assert two["rest_s"] == pytest.approx(1.5 - 3.1 / 3) and two["steps_per_second"] == pytest.approx(2 / 1.5)
    ratio = two["steps_per_second"] / one["steps_per_second"]
    f = factors([one], [two], ratio * 0.9)  # a measured ratio 10% below the history's
    assert f is not None and f["parallelism"] == pytest.approx(2.0)
    assert f["contention"] == pytest.approx(0.9 / 0.7) and f["lockstep"] == pytest.approx(3.1 / 3 / 0.9)
    assert f["overhead"] == pytest.approx((1.5 / (3.1 / 3)) / (1.0 / 0.7))
    product = f["parallelism"] / (f["contention"] * f["lockstep"] * f["overhead"])
    assert f["product_ratio"] == pytest.approx(product) == pytest.approx(ratio)
    assert f["residual"] == pytest.approx(0.9)
    assert f["rest_s"] == pytest.approx(1.5 - 3.1 / 3) and f["one_worker_rest_s"] == pytest.approx(0.3)


def test_the_breakdown_needs_seconds_and_two_steps() -> None:
    rows = _history([(1.0, [0.5, 0.5]), (2.0, [0.5, 0.5])])
    assert breakdown(rows[:2]) is None  # one vector step: nothing after the first
    rows[3]["evaluation_s"] = ""  # a simulated worker reports no seconds
    assert breakdown(rows) is None
    repeat = _history([(1.0, [0.5, 0.5]), (2.0, [0.4, 0.6]), (3.0, [0.2])])  # worker 1 repeated a placement
    b = breakdown(repeat)
    assert b is not None and b["evaluations_per_step"] == 1.5 and b["worker_evaluation_s"] == pytest.approx([0.3, 0.6])
    assert factors([], [b], 1.0) is None


def test_the_rate_leaves_out_every_evaluation_of_the_first_vector_step() -> None:
    """Worker 1's row of the first step is written 1 ms after worker 0's: it is still the first step."""
    two = _history([(1.0, [0.3, 9.0]), (2.5, [0.8, 1.2]), (4.0, [1.0, 0.6])])
    assert float(two[1]["wall_s"]) > float(two[0]["wall_s"])
    assert steps_per_second(two) == pytest.approx(4 / 3.001)  # 4 evaluations, to the last one's time
    one = _history([(1.0, [9.0]), (2.0, [0.6]), (3.0, [0.8])], in_process=True)
    assert steps_per_second(one) == pytest.approx(1.0) and steps_per_second(one[:1]) is None
