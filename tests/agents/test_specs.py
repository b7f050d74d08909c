"""agents.specs: the one parser of method specs (registered names and outside agents)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from agents.specs import method_spec, parse_spec, render_value, spec_label, split_arguments
from placement_gym.errors import ConfigError, PlacementGymError, UnknownNameError


def test_a_registered_spec_is_checked_and_converted() -> None:
    spec = parse_spec("milp:time_limit=30,warm_start=false")
    assert spec.name == "milp" and spec.registered and not spec.is_function
    assert spec.kwargs == {"time_limit": 30.0, "warm_start": False}
    assert type(spec.kwargs["time_limit"]) is float
    assert parse_spec("single_device:device=cpu").kwargs == {"device": "cpu"}
    assert parse_spec("single_device:device=1").kwargs == {"device": 1}  # str | int | None: an index
    assert parse_spec("ppo_mlp:net_arch=[32,16]").kwargs == {"net_arch": (32, 16)}
    assert parse_spec("ppo_gnn:target_kl=null").kwargs == {"target_kl": None}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("milp:time_limit=30", "milp:time_limit=30.0"),
        ("milp:warm_start=false,time_limit=30", "milp:time_limit=30.0,warm_start=False"),
        ("heft:insertion=true", "heft:insertion=True"),
        ("ppo_mlp:net_arch=[64,64]", "ppo_mlp:net_arch=[64.0,64]"[:0] + "ppo_mlp:net_arch=[64, 64]"),
    ],
)
def test_equivalent_specs_normalise_to_one_text(a: str, b: str) -> None:
    assert parse_spec(a) == parse_spec(b)
    assert parse_spec(a).text == parse_spec(b).text
    assert hash(parse_spec(a)) == hash(parse_spec(b))
    assert parse_spec(parse_spec(a).text) == parse_spec(a)  # the text parses back to itself


def test_the_normalised_text_keeps_the_stored_forms() -> None:
    for text in ("milp:time_limit=30", "heft:insertion=false", "guided_improvement:ranker=cost", "hsdag"):
        assert parse_spec(text).text == text
    assert parse_spec("milp:time_limit=0.5").text == "milp:time_limit=0.5"


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("milp:time_limit=NaN", ConfigError, "time_limit must be a finite number, got 'NaN'"),
        ("milp:time_limit=inf", ConfigError, "finite"),
        ("milp:time_limit=-inf", ConfigError, "finite"),
        ("milp:time_limit=1e999", ConfigError, "finite"),
        ("milp:time_limit=abc", ConfigError, "time_limit must be a number, got 'abc'"),
        ("milp:time_limit=", ConfigError, "empty value"),
        ("milp:time_limit", ConfigError, "expected key=value"),
        ("milp:time_limit=1,time_limit=2", ConfigError, "twice"),
        ("milp:time_limit=1,,", ConfigError, "empty item"),
        ("milp:time_limt=3", UnknownNameError, "Did you mean 'time_limit'"),
        ("ppo_gnn:n_step=3", UnknownNameError, "Did you mean 'n_steps'"),
        ("heft:insertion=no", ConfigError, "insertion must be true or false"),
        ("hsdag:hidden=1.5", ConfigError, "hidden must be an integer"),
        ("hsdag:hidden=10**9", ConfigError, "hidden must be an integer"),
        ("m_etf:x=1", ConfigError, "m_etf takes no arguments"),
        ("ppo_gnn:n_steps=-4", ConfigError, "n_steps must be >= 1, got -4"),
        ("ppo_gnn:n_steps=1000000000", ConfigError, "needs at least"),
        ("ppo_gnn:hidden=1000000000", ConfigError, "hidden=1000000000 needs at least"),
        ("ppo_gnn:positional=-1", ConfigError, "positional must be >= 0"),
        ("ppo_gnn:pair_bias_scale=-3", ConfigError, "pair_bias_scale must be >= 0"),
        ("ppo_mlp:net_arch=[64,0]", ConfigError, "net_arch must be >= 1"),
        ("ppo_mlp:net_arch=[64,", ConfigError, "not valid JSON"),
        ("ppo_gnn:rollout_buffer_class=x", UnknownNameError, "unknown ppo_gnn argument"),
        ("hef", UnknownNameError, "Did you mean 'heft'"),
        ("milpp:time_limit=3", UnknownNameError, "Did you mean 'milp'"),
        ("", ConfigError, "empty"),
        (" heft", ConfigError, "spaces"),
        ("x" * 5000, ConfigError, "too long"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_problem(text: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace("*", r"\*")) as info:
        parse_spec(text)
    assert isinstance(info.value, PlacementGymError)


def test_outside_agents_class_function_and_what_is_neither(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_agents.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            class Greedy:
                def __init__(self, width: int = 2, scale: float = 1.0):
                    self.width, self.scale = width, scale

                def place(self, problem, budget=None, seed=0):
                    return np.zeros(problem.num_groups, dtype=np.int64)

            def all_host(problem, budget, seed, offset: int = 0):
                return np.full(problem.num_groups, problem.host + offset)

            class NoPlace:
                pass

            def two_args(problem, budget):
                return None

            NUMBER = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_agents", raising=False)
    spec = parse_spec("my_agents:Greedy:scale=2,width=3")
    assert spec.name == "my_agents:Greedy" and not spec.registered
    assert spec.text == "my_agents:Greedy:width=3,scale=2"
    agent = spec.build()
    assert (agent.width, agent.scale) == (3, 2.0)
    function = parse_spec("my_agents:all_host:offset=1")
    assert function.is_function and function.build().keywords == {"offset": 1}
    with pytest.raises(UnknownNameError, match="Did you mean 'width'"):
        parse_spec("my_agents:Greedy:widht=3")
    with pytest.raises(ConfigError, match="scale must be a finite number"):
        parse_spec("my_agents:Greedy:scale=nan")
    with pytest.raises(ConfigError, match="class without a place"):
        parse_spec("my_agents:NoPlace")
    with pytest.raises(ConfigError, match=r"cannot be called as two_args\(problem, budget, seed\)"):
        parse_spec("my_agents:two_args")
    with pytest.raises(ConfigError, match="is a int, not an agent"):
        parse_spec("my_agents:NUMBER")
    with pytest.raises(UnknownNameError, match="Did you mean 'Greedy'"):
        parse_spec("my_agents:Gready")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        parse_spec("no_such_module_xyz:Agent")


def test_typed_arguments_from_json_are_checked_the_same_way() -> None:
    assert method_spec("milp", {"time_limit": 30}).text == "milp:time_limit=30"
    assert method_spec("hsdag", {"hidden": 8}).kwargs == {"hidden": 8}
    for bad, message in (
        ({"hidden": 1e9}, "hidden must be an integer"),
        ({"hidden": True}, "hidden must be an integer"),
        ({"hidden": 10**9}, "needs at least"),
        ({"lr": float("nan")}, "finite"),
        ({"hiden": 8}, "Did you mean 'hidden'"),
    ):
        with pytest.raises(PlacementGymError, match=message):
            method_spec("hsdag", bad)


def test_helpers() -> None:
    assert split_arguments("a=1,b=[1,2],c={\"x\":1,\"y\":2}") == ["a=1", "b=[1,2]", 'c={"x":1,"y":2}']
    assert split_arguments("") == []
    assert render_value(30.0) == "30" and render_value(0.25) == "0.25" and render_value(None) == "null"
    assert spec_label("single_device:device=cpu") == "cpu_only"
    assert spec_label("some.module:Agent") == "some.module:Agent"  # textual: not imported


# ---------------------------------------------------------------------- one spec check: reserved keys, non-agents, defaults
@pytest.mark.parametrize(
    "spec, key",
    [("heft:budget=3", "budget"), ("random_search:budget=10", "budget"), ("random_search:seed=3", "seed"),
     ("milp:problem=1", "problem"), ("stable_baselines3:PPO:env=x", "env"), ("heft:envs=2", "envs")],
)  # fmt: skip
def test_a_spec_cannot_give_what_the_benchmark_passes(spec, key):
    with pytest.raises(ConfigError, match=rf"{key}= cannot be given in a method spec"):
        parse_spec(spec)


@pytest.mark.parametrize("spec", ["os.path:join", "subprocess:call", "builtins:print", "os:makedirs"])
def test_library_functions_are_not_agents(spec):
    """A function that merely takes three arguments is not run: an agent's first parameter names what the
    protocol passes (problem, view, env or envs)."""
    with pytest.raises(ConfigError, match="is not an agent"):
        parse_spec(spec)


def test_agent_functions_classes_instances_and_sb3_algorithms_are_agents(tmp_path, monkeypatch):
    (tmp_path / "agents_ok.py").write_text(
        textwrap.dedent(
            """
            def on_problem(problem, budget, seed):
                return None

            def on_view(view, budget, seed):
                return None

            def train(env, budget, seed):
                return None

            def vector(envs, budget, seed, num_envs: int = 2):
                return None

            class Agent:
                def place(self, problem, budget=None, seed=0):
                    return None

            agent = Agent()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "agents_ok", raising=False)
    for name in ("on_problem", "on_view", "train", "vector", "Agent"):
        assert parse_spec(f"agents_ok:{name}").text == f"agents_ok:{name}"
    instance = parse_spec("agents_ok:agent")
    assert instance.build() is instance.target and hasattr(instance.build(), "place")
    assert parse_spec("agents_ok:vector:num_envs=2").text == "agents_ok:vector"  # the default
    assert parse_spec("stable_baselines3:PPO").text == "stable_baselines3:PPO"


@pytest.mark.parametrize(
    "spec, same",
    [("random_search:batch_size=32", "random_search"), ("milp:time_limit=60.0", "milp"),
     ("milp:time_limit=60,warm_start=true", "milp"), ("stable_baselines3:PPO:n_steps=2048", "stable_baselines3:PPO"),
     ("heft:insertion=true", "heft")],
)  # fmt: skip
def test_a_default_written_out_is_the_same_method(spec, same):
    assert parse_spec(spec) == parse_spec(same) and parse_spec(spec).text == same


def test_a_default_written_out_is_a_repeat_on_the_command_line(capsys):
    from experiments.cli import main

    assert main(["bench", "--methods", "random_search", "random_search:batch_size=32"]) == 2
    assert "random_search is given twice" in capsys.readouterr().err


def test_a_non_ascii_attribute_is_looked_up_in_its_module(tmp_path, monkeypatch):
    """``mod:ret_nonë`` names an attribute of ``mod`` (Python names may be non-ASCII), not a method 'mod'."""
    (tmp_path / "mod_x.py").write_text("def ret_none(problem, budget, seed):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mod_x", raising=False)
    with pytest.raises(UnknownNameError, match="attribute of module mod_x 'ret_nonë'.*Did you mean 'ret_none'"):
        parse_spec("mod_x:ret_nonë")
    with pytest.raises(ConfigError, match="'ret-none' is not a Python name"):
        parse_spec("mod_x:ret-none")
