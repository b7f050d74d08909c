"""One ID scheme: every suite task has an ID for every MDP, the old IDs are aliases of their twins."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import placement_gym
from placement_gym.errors import UnknownNameError
from placement_gym.transfer import TRANSFER_TASKS, protocol_tasks

SCHEME = re.compile(
    r"^DevicePlacement(Sequential|Improve)?-(?P<model>\w+)-(?P<platform>\w+)-(sim|measured)-v\d+$"
)
ENTRIES = {
    "oneshot": "placement_gym.envs.device_placement:DevicePlacementEnv",
    "sequential": "placement_gym.envs.device_placement:DevicePlacementEnv",
    "improve": "placement_gym.envs.improve:DevicePlacementImproveEnv",
}
SUITE = sorted({(t.model, t.platform) for t in protocol_tasks("v1") + TRANSFER_TASKS})


def _mdp(spec: gym.envs.registration.EnvSpec) -> str:
    if "Improve" in str(spec.entry_point):
        return "improve"
    return spec.kwargs.get("mode", "oneshot")


def test_the_suite_is_every_split() -> None:
    splits = {t.split for t in protocol_tasks("v1") + TRANSFER_TASKS}
    assert splits == {"train", "held-out", "masked"}
    assert ("bert", "cpu-dgpu") in SUITE and ("resnet50", "cpu-igpu-lowmem") in SUITE


@pytest.mark.parametrize("mdp", placement_gym.MDPS)
def test_every_suite_task_has_an_id_in_the_scheme_for_every_mdp(mdp: str) -> None:
    for model, platform in SUITE:
        env_id = placement_gym.env_id(model, platform, mdp=mdp)
        assert SCHEME.match(env_id), env_id
        assert env_id.startswith(placement_gym.registration.MDP_PREFIXES[mdp] + "-")
        assert env_id == f"{env_id.split('-')[0]}-{model}-{platform.replace('-', '_')}-sim-v0"
        spec = gym.spec(env_id)
        assert (spec.kwargs["model"], spec.kwargs["platform"], spec.kwargs["backend"]) == (
            model,
            platform,
            "simulated",
        )
        assert str(spec.entry_point) == ENTRIES[mdp] and _mdp(spec) == mdp and not spec.nondeterministic


def test_gym_make_builds_every_simulated_id_of_the_scheme() -> None:
    """Every registered simulated ID that is not an alias (the real models: the graphs are cached)."""
    ids = [i for i in gym.registry if SCHEME.match(i) and i.endswith("-sim-v0")]
    assert len(ids) == 3 * len(placement_gym.simulated_tasks()) + len(placement_gym.BENCHMARK_MODELS)
    for env_id in ids:
        env = gym.make(env_id)
        spec = gym.spec(env_id)
        assert env.unwrapped.problem.benchmark.name == spec.kwargs["model"], env_id
        assert env.unwrapped.problem.platform.name == spec.kwargs["platform"], env_id
        if _mdp(spec) != "improve":
            assert env.unwrapped.mode == _mdp(spec), env_id
        env.close()


def test_the_measured_ids_are_in_the_scheme() -> None:
    for model in placement_gym.BENCHMARK_MODELS:
        newest = placement_gym.env_id(model, "local", backend="measured")
        assert newest == f"DevicePlacement-{model}-local-measured-v1"
        first = placement_gym.env_id(model, "local", backend="measured", version=0)
        assert gym.spec(first).kwargs["backend_kwargs"] == placement_gym.MEASURED_V0_PROTOCOL
        assert gym.spec(newest).nondeterministic and "backend_kwargs" not in gym.spec(newest).kwargs


def test_every_registered_id_is_in_the_scheme_an_alias_or_generic() -> None:
    ours = [k for k, s in gym.registry.items() if str(s.entry_point).startswith("placement_gym")]
    generic = {f"{p}-v0" for p in placement_gym.registration.MDP_PREFIXES.values()}
    odd = [i for i in ours if not SCHEME.match(i) and i not in placement_gym.ALIASES and i not in generic]
    assert not odd, odd
    assert not set(placement_gym.ALIASES) & set(placement_gym.ALIASES.values())
    assert set(ours) == set(placement_gym.ENV_IDS + placement_gym.SEQUENTIAL_IDS + placement_gym.IMPROVE_IDS)


def test_every_old_id_is_an_alias_with_its_twins_spec() -> None:
    expected = {}
    for model in placement_gym.BENCHMARK_MODELS:
        expected[f"DevicePlacementSim-{model}-v1"] = f"DevicePlacement-{model}-cpu_dgpu-sim-v0"
        expected[f"DevicePlacementSim-{model}-v0"] = f"DevicePlacement-{model}-cpu_dgpu_v0-sim-v0"
        expected[f"DevicePlacement-{model}-v1"] = f"DevicePlacement-{model}-local-measured-v1"
        expected[f"DevicePlacement-{model}-v0"] = f"DevicePlacement-{model}-local-measured-v0"
    assert placement_gym.ALIASES == expected
    for old, new in placement_gym.ALIASES.items():
        a, b = gym.spec(old), gym.spec(new)
        assert a.kwargs is b.kwargs, old  # one dict: the two cannot drift
        assert (a.entry_point, a.nondeterministic, a.max_episode_steps) == (
            b.entry_point,
            b.nondeterministic,
            b.max_episode_steps,
        )
    assert gym.spec("DevicePlacementSim-bert-v0").kwargs["platform"] == "cpu-dgpu-v0"
    assert gym.spec("DevicePlacementSim-bert-v1").kwargs == {
        "model": "bert",
        "platform": "cpu-dgpu",
        "backend": "simulated",
    }


def test_an_alias_makes_the_same_env_as_its_twin() -> None:
    old = gym.make("DevicePlacementSim-resnet50-v1", model="tiny_cnn")
    new = gym.make("DevicePlacement-resnet50-cpu_dgpu-sim-v0", model="tiny_cnn")
    assert old.spec.id == "DevicePlacementSim-resnet50-v1"  # the alias keeps its own ID
    assert old.unwrapped.problem.platform.name == new.unwrapped.problem.platform.name == "cpu-dgpu"
    a, b = (e.unwrapped.problem.evaluate([1] * e.unwrapped.num_groups).latency for e in (old, new))
    assert a == b


def test_the_shorthands_are_env_id() -> None:
    assert placement_gym.suite_id("bert", "cpu-dgpu") == placement_gym.env_id("bert", "cpu-dgpu")
    assert placement_gym.improve_id("bert", "cpu-igpu") == "DevicePlacementImprove-bert-cpu_igpu-sim-v0"
    assert (
        placement_gym.env_id("bert", "cpu_igpu", mdp="sequential")
        == "DevicePlacementSequential-bert-cpu_igpu-sim-v0"
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ("bret", "cpu-igpu"),
            r"unknown oneshot simulated task 'bret on cpu-igpu'.*Did you mean 'bert on cpu-igpu'",
        ),
        (("bert", "cpu-dgpu-v0", "improve"), r"unknown improve simulated task 'bert on cpu-dgpu-v0'"),
        (("bert", "cpu-igpu", "one-shot"), r"unknown MDP 'one-shot'; known: improve, oneshot, sequential"),
        (("bert", "cpu-igpu", "oneshot", "sim"), r"unknown backend 'sim'"),
        (("bert", "cpu-igpu", "oneshot", "measured"), r"unknown oneshot measured task"),
    ],
)
def test_env_id_names_what_is_wrong(args: tuple[str, ...], match: str) -> None:
    with pytest.raises(UnknownNameError, match=match):
        placement_gym.env_id(*args)
    with pytest.raises(UnknownNameError, match=r"unknown version .*'v2'; known: v0, v1"):
        placement_gym.env_id("bert", "local", backend="measured", version=2)


@pytest.mark.parametrize(
    ("env_id", "error", "match"),
    [
        (
            "DevicePlacement-bert-cpu_dgbu-sim-v0",
            gym.error.NameNotFound,
            "Did you mean: `DevicePlacement-bert-cpu_dgpu-sim`",
        ),
        (
            "DevicePlacement-bert-cpu_igpu-sim-v1",
            gym.error.VersionNotFound,
            r"provides versioned environments: \[ `v0` \]",
        ),
        ("DevicePlacementImprove-bert-local-measured-v0", gym.error.NameNotFound, "doesn't exist"),
    ],
)
def test_a_wrong_id_gets_a_clear_error(env_id: str, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        gym.make(env_id)
