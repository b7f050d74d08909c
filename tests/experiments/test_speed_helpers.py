"""The helpers the speed scripts share: never-seen random placements, the measured-env scripts' parser and
row writer, and the throughput ratio of two worker counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.speed.measured_env import DEFAULT_ENV, row_writer, step_parser, unseen_actions
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
