"""Saved policy folders: meta.json through a schema of what save() writes (no file-chosen write paths, no
absurd shapes or arguments), finite bounded weights; one reader for SB3Method.load and `place`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from agents import METHODS, method_class
from agents.sb3.policy_file import PolicyMeta, read_meta, read_policy
from experiments import cli
from experiments.cli.place import policy_meta
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementGymError

#: The SB3Method learners (SB3Method.save's format; pretrained_ppo, also in agents.sb3, has its own format).
SB3_METHODS = [
    name
    for name in METHODS
    if METHODS[name].startswith("agents.sb3.") and hasattr(method_class(name), "algo_class")
]


def _env():
    return DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", max_nodes=32, max_edges=64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    from agents.sb3.methods import PPOGNN

    method = PPOGNN(gnn="gcn", hidden=16, layers=2, head=(16,))
    method.place(_env(), budget=20, seed=0)
    return method.save(tmp_path_factory.mktemp("policy") / "policy")


@pytest.fixture
def copy(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "policy"))


def _edit_meta(folder: Path, edit) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    edit(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


def _load(folder: Path):
    from agents.sb3.methods import PPOGNN

    return PPOGNN().load(folder)


TAMPERED = [
    ("tensorboard_log", lambda m: m["kwargs"].update(tensorboard_log="/tmp/elsewhere"), "may not be set"),
    ("device", lambda m: m["kwargs"].update(device="cuda:7"), "may not be set"),
    ("n_envs", lambda m: m["kwargs"].update(n_envs=4096), "may not be set"),
    ("unknown kwarg", lambda m: m["kwargs"].update(steal=True), "not an argument"),
    ("huge hidden", lambda m: m["kwargs"].update(hidden=10**6), r"hidden = 1000000 is outside \[1, 4096\]"),
    ("huge head", lambda m: m["kwargs"].update(head=[16, 2**40]), r"head\[1\]"),
    ("float layers", lambda m: m["kwargs"].update(layers=2.5), "whole number"),
    ("huge n_steps", lambda m: m["kwargs"].update(n_steps=10**9), "n_steps"),
    ("negative batch", lambda m: m["kwargs"].update(batch_size=-1), "batch_size"),
    ("absurd lr", lambda m: m["kwargs"].update(learning_rate=1e300), "learning_rate"),
    ("negative lr", lambda m: m["kwargs"].update(learning_rate=-1e-3), "learning_rate"),
    ("gamma above 1", lambda m: m["kwargs"].update(gamma=5), "gamma"),
    ("no layers", lambda m: m["kwargs"].update(layers=0), "layers"),
    (
        "policy class arg",
        lambda m: m["kwargs"]["policy_kwargs"].update(optimizer_class="os.system"),
        "policy",
    ),
    ("long string", lambda m: m["kwargs"].update(gnn="g" * 10**4), "at most 64"),
    ("unknown field", lambda m: m.update(script="rm -rf"), "not a field"),
    ("unknown method", lambda m: m.update(method="ppo_gnm"), "not registered"),
    ("not an sb3 method", lambda m: m.update(method="heft"), "not a Stable-Baselines3"),
    ("other algorithm", lambda m: m.update(algorithm="A2C"), "algorithm"),
    ("format", lambda m: m.update(format=2), "format"),
    ("huge shape", lambda m: m["observation_space"]["node_mask"].update(shape=[2**30]), "shape"),
    (
        "huge obs",
        lambda m: m["observation_space"]["node_mask"].update(shape=[2**12, 2**12, 4]),
        "observation",
    ),
    ("devices", lambda m: m["action_space"].update(nvec=[10**6] * 4), "nvec"),
    ("dtype", lambda m: m["observation_space"]["node_mask"].update(dtype="object"), "dtype"),
]


@pytest.mark.parametrize("name, edit, message", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_tampered_meta_json_is_refused_before_sb3_sees_it(copy: Path, name, edit, message) -> None:
    _edit_meta(copy, edit)
    for reader in (_load, policy_meta, read_meta):
        with pytest.raises(PlacementGymError, match=message) as err:
            reader(copy)
        assert len(str(err.value)) < 1000 and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ['{"format": NaN}', "[]", "{" * 100_000, "x" * (70 * 2**10)])
def test_meta_json_that_is_not_a_small_json_object_is_refused(copy: Path, text: str) -> None:
    (copy / "meta.json").write_text(text)
    with pytest.raises(PlacementGymError):
        read_meta(copy)


@pytest.mark.parametrize("how", ["all nan", "one inf"])
def test_non_finite_weights_are_refused_on_load(copy: Path, how: str) -> None:
    weights = torch.load(copy / "weights.pt", weights_only=True)
    name = next(k for k, t in weights["policy"].items() if t.is_floating_point() and t.numel() > 1)
    if how == "all nan":
        weights["policy"] = {k: torch.full_like(t, float("nan")) if t.is_floating_point() else t
                             for k, t in weights["policy"].items()}  # fmt: skip
    else:
        weights["policy"][name].view(-1)[0] = float("inf")
    torch.save(weights, copy / "weights.pt")
    with pytest.raises(PlacementGymError, match="NaN or infinite"):
        _load(copy)


def test_weights_of_other_content_or_size_are_refused(copy: Path, monkeypatch) -> None:
    weights = torch.load(copy / "weights.pt", weights_only=True)
    torch.save({**weights, "extra": torch.zeros(1)}, copy / "weights.pt")
    with pytest.raises(PlacementGymError, match="exactly 'policy' and 'bounds'"):
        read_policy(copy)
    weights["bounds"] = {k: v for k, v in list(weights["bounds"].items())[1:]}
    torch.save(weights, copy / "weights.pt")
    with pytest.raises(PlacementGymError, match="bounds do not fit"):
        read_policy(copy)
    from agents.sb3 import policy_file

    (copy / "weights.pt").unlink()
    (copy / "weights.pt").symlink_to("/dev/zero")
    with pytest.raises(PlacementGymError, match="not a regular file"):
        read_policy(copy)
    (copy / "weights.pt").unlink()
    torch.save(weights, copy / "weights.pt")
    monkeypatch.setattr(policy_file, "MAX_WEIGHTS_BYTES", 100)
    with pytest.raises(PlacementGymError, match="bytes"):
        read_policy(copy)


def test_the_intact_policy_still_loads_and_predicts(saved: Path) -> None:
    model = _load(saved)
    placement = model.policy.obs_to_tensor(_env().reset(seed=0)[0])[0]
    assert placement is not None
    meta = read_meta(saved)
    assert policy_meta(saved) == {"method": "ppo_gnn", "max_nodes": 32, "max_edges": 64, "devices": 2}
    assert meta.padding("placement", 1) == 2


def test_fine_tuning_writes_nothing_where_meta_json_says(copy: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "chosen-by-the-file"
    _edit_meta(copy, lambda m: m["kwargs"].update(tensorboard_log=str(target)))
    argv = [
        "place",
        "--policy",
        str(copy),
        "--model",
        "tiny_cnn",
        "--platform",
        "cpu-dgpu",
        "--fine-tune",
        "4",
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placement-gym: error: ") and "tensorboard_log" in err and "\n" not in err
    assert not target.exists()


@pytest.mark.parametrize("name", SB3_METHODS)
def test_every_registered_sb3_learner_round_trips_its_own_meta(name: str) -> None:
    """The schema reads the registry and the classes' signatures, so a learner added to agents.METHODS is
    accepted without a list of today's classes here."""
    method = method_class(name)()
    meta = {
        "format": 1,
        "method": name,
        "algorithm": method.algo_class.__name__,
        "kwargs": json.loads(json.dumps(method._saved_kwargs())),
        "observation_space": {"node_mask": {"shape": [32], "dtype": "float32"}},
        "action_space": {"nvec": [2] * 32},
        "versions": {"torch": torch.__version__},
    }
    assert PolicyMeta.model_validate(meta).method == name


def test_a_move_scorer_with_nan_weights_or_a_tampered_layer_count_is_refused(tmp_path: Path) -> None:
    from agents.learned.scorer import PRETRAINED, MoveScorer

    folder = Path(shutil.copytree(PRETRAINED, tmp_path / "scorer"))
    MoveScorer.load(folder)  # intact
    _edit_meta(folder, lambda m: m.update(layers=10**9))
    with pytest.raises(PlacementGymError, match="damaged"):
        MoveScorer.load(folder)
    _edit_meta(
        folder, lambda m: m.update(layers=json.loads((Path(PRETRAINED) / "meta.json").read_text())["layers"])
    )
    weights = torch.load(folder / "weights.pt", weights_only=True)
    weights["w0"] = torch.full_like(weights["w0"], float("nan"))
    torch.save(weights, folder / "weights.pt")
    with pytest.raises(PlacementGymError, match="NaN or infinite"):
        MoveScorer.load(folder)
