"""Your own agent (``module:attribute[:k=v]``, examples/my_agent.py) through the spec parser and the bench CLI."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from agents.specs import parse_spec
from experiments import cli
from placement_gym.errors import ConfigError, UnknownNameError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_own_agents_resolve_from_the_current_folder(monkeypatch):
    """A module that is not installed is found in the current folder (appended to sys.path)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLES))])
    monkeypatch.delitem(sys.modules, "my_agent", raising=False)
    assert parse_spec("my_agent:greedy").build().__name__ == "greedy"
    assert sys.path[-1] == str(EXAMPLES)
    bound = parse_spec("my_agent:greedy:passes=2").build()
    assert isinstance(bound, functools.partial) and bound.keywords == {"passes": 2}
    assert parse_spec("my_agent:GreedyAgent:passes=3").build().passes == 3
    with pytest.raises(UnknownNameError, match="steps"):
        parse_spec("my_agent:GreedyAgent:steps=3")


def test_an_outside_module_that_is_nowhere_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="cannot import 'not_a_module'"):
        parse_spec("not_a_module:thing")


def test_bench_runs_an_outside_agent_through_the_cli_at_a_tier(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(EXAMPLES)
    out = tmp_path / "tier"
    argv = ["bench", "--tier", "tiny", "--tasks", "resnet50/cpu-dgpu", "--methods", "my_agent:greedy", "heft",
            "--seeds", "0", "1", "--out", str(out), "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "IQM" in text and "my_agent:greedy" in text and (out / "aggregate.md").is_file()
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["seed"]) for r in rows) == [
        ("heft", 0),
        ("my_agent:greedy", 0),
        ("my_agent:greedy", 1),
    ]
    assert all(r["protocol"] == "v1" and r["tier"] == "tiny" and r["evaluations"] <= 100 for r in rows)
    assert (out / "performance_profile.png").is_file() and (out / "score_vs_evaluations.png").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budget", "50"], "drop --budget"),
        (["--preset", "small"], "drop --preset"),
        (["--coarsening", "ops"], "drop --coarsening"),
        (["--tasks", "tiny_cnn/cpu-dgpu"], "unknown protocol task or split 'tiny_cnn/cpu-dgpu'"),
    ],
)
def test_a_tier_refuses_what_the_protocol_fixes(tmp_path, capsys, extra, message):
    argv = ["bench", "--tier", "tiny", "--methods", "heft", "--out", str(tmp_path), *extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "results.jsonl").exists()
