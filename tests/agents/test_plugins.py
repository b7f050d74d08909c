"""Method specs naming your own agent (``module:attribute[:k=v]``), through the API and the bench CLI."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from agents.baselines.heft import HEFT
from agents.plugins import parse_spec, resolve_agent
from experiments import cli
from placement_gym.errors import ConfigError, UnknownNameError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_specs_parse_into_registered_and_external_targets():
    assert parse_spec("milp:time_limit=30,warm_start=false").kwargs == {"time_limit": 30, "warm_start": False}
    assert not parse_spec("heft").external and parse_spec("heft").name == "heft"
    spec = parse_spec("my_pkg.my_module:MyAgent:steps=3,mode=fast")
    assert (
        spec.external
        and spec.target == "my_pkg.my_module:MyAgent"
        and spec.kwargs == {"steps": 3, "mode": "fast"}
    )
    for bad in ("", "heft:x", "heft:a=1,a=2", "my.mod:9x", ":attr"):
        with pytest.raises((ConfigError, UnknownNameError)):
            resolve_agent(bad)


def test_own_agents_resolve_from_the_current_folder(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    assert resolve_agent("my_agent:greedy").__name__ == "greedy"
    bound = resolve_agent("my_agent:greedy:passes=2")
    assert isinstance(bound, functools.partial) and bound.keywords == {"passes": 2}
    assert resolve_agent("my_agent:GreedyAgent:passes=3").passes == 3
    assert isinstance(resolve_agent("heft"), HEFT)
    with pytest.raises(ConfigError, match="unexpected keyword argument 'steps'.*passes"):
        resolve_agent("my_agent:GreedyAgent:steps=3")
    with pytest.raises(ConfigError, match="passes"):
        resolve_agent("my_agent:greedy:steps=3")
    with pytest.raises(UnknownNameError, match="greedy"):
        resolve_agent("my_agent:greed")
    with pytest.raises(ConfigError, match="no place"):
        resolve_agent("my_agent:PlacementProblem")
    with pytest.raises(ConfigError, match="not_a_module"):
        resolve_agent("not_a_module:thing")
    with pytest.raises(ConfigError, match="milp:time_limit=..."):
        resolve_agent("milp:time_limit")


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
