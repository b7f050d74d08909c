"""The replay validator: it accepts rows that reproduce and rejects altered ones, one line per row."""

from __future__ import annotations

import dataclasses
import json

import pytest

from experiments import cli
from experiments.leaderboard import run_tier
from experiments.validate import validate
from placement_gym.results import ResultRow, ResultStore, row_line

TASK = ("resnet50", "cpu-igpu")


@pytest.fixture(scope="module")
def row(tmp_path_factory) -> ResultRow:
    """HEFT's row on one small task, written by the leaderboard runner at the tiny tier."""
    out = tmp_path_factory.mktemp("rows")
    run_tier("tiny", ["heft"], out, tasks=["/".join(TASK)], log=lambda *_: None)
    (stored,) = ResultStore(out / "tiny" / "heft.jsonl").rows()
    return stored


def write(path, *rows: ResultRow) -> str:
    path.write_text("".join(row_line(r) for r in rows))
    return str(path)


def test_accepts_a_stored_row(row, tmp_path):
    (verdict,) = validate([write(tmp_path / "rows.jsonl", row)])
    assert verdict.ok and verdict.replayed_latency == pytest.approx(row.latency, rel=1e-12)
    assert verdict.line().startswith("OK")


def test_rejects_an_altered_placement_latency_version_task_or_score(row, tmp_path):
    moved = list(row.placement)
    moved[len(moved) // 2] = 1 - moved[len(moved) // 2]
    altered = [
        (dataclasses.replace(row, placement=moved), "replays at"),
        (dataclasses.replace(row, latency=row.latency * 0.99), "replays at"),
        (dataclasses.replace(row, graph_version=row.graph_version + 1), "graph version"),
        (dataclasses.replace(row, platform="cpu-dgpu-v0"), "not a task of protocol"),
        (dataclasses.replace(row, backend="measured"), "cannot be replayed"),
        (dataclasses.replace(row, score=row.score + 0.1), "stored score"),
        (dataclasses.replace(row, placement=row.placement[:-1]), "placement has"),
        (dataclasses.replace(row, placement=[5] * len(row.placement)), "placement rejected"),
        (dataclasses.replace(row, evaluations=row.budget + 1), "over the budget"),
        (dataclasses.replace(row, task_sha256="0" * 64), "task hash"),
    ]
    verdicts = validate([write(tmp_path / "rows.jsonl", row, *(r for r, _ in altered))])
    assert verdicts[0].ok
    for verdict, (_, reason) in zip(verdicts[1:], altered):
        assert not verdict.ok and reason in verdict.line(), verdict.line()
        assert verdict.line().startswith("REJECTED") and "line" in verdict.where


def test_cli_exit_status_and_messages(row, tmp_path, capsys):
    good = write(tmp_path / "good.jsonl", row)
    assert cli.main(["validate", good]) == 0
    assert "all 1 rows reproduce" in capsys.readouterr().out

    bad = tmp_path / "bad.jsonl"
    data = json.loads(row_line(row))
    data["latency"] = data["latency"] / 2
    bad.write_text(row_line(row) + json.dumps(data) + "\n" + '{"model": "resnet50", "torn\n')
    assert cli.main(["validate", good, str(bad)]) != 0
    captured = capsys.readouterr()
    assert captured.out.count("OK") == 2 and captured.out.count("REJECTED") == 2
    assert "bad.jsonl line 2" in captured.out and "bad.jsonl line 3" in captured.out
    assert "2 of 4 rows rejected" in captured.err
    assert cli.main(["validate", str(tmp_path / "missing.jsonl")]) != 0
    assert "no such results file" in capsys.readouterr().err
