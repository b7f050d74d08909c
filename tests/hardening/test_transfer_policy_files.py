"""Transfer-policy folders (``pretrained_ppo:policy=PATH``, ``placement-gym place --policy PATH``) get the
protection of every saved policy: one reader (agents.sb3.policy_file), a schema of what the project writes,
bounded sizes, regular files only, finite weights, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from agents import make_method
from agents.sb3.policy_file import (
    TransferMeta,
    read_meta,
    read_policy,
    read_transfer_policy,
    write_transfer_policy,
)
from agents.sb3.pretrained_ppo import DEFAULT_ARCH, PPO_KWARGS, PRETRAINED_DIR, shipped_policies
from experiments import cli
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The shipped control policy, copied so it can be tampered with."""
    return Path(shutil.copytree(PRETRAINED_DIR / "untrained", tmp_path / "policy"))


def _edit_meta(folder: Path, edit) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    edit(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 1000
    return text


def test_the_shipped_policies_load_through_the_one_reader() -> None:
    assert set(shipped_policies()) >= {"all", "no-bert", "no-resnet50", "no-inception_v3", "untrained"}
    for name in shipped_policies():
        folder = PRETRAINED_DIR / name
        assert isinstance(read_meta(folder), TransferMeta)
        saved = read_transfer_policy(folder)
        assert saved.meta.arch.extractor.hidden == DEFAULT_ARCH["extractor"]["hidden"]
        assert saved.meta.ppo.kwargs() == PPO_KWARGS
        assert saved.policy_state and all(torch.isfinite(t).all() for t in saved.policy_state.values())


def test_written_policies_read_back_and_a_bad_one_is_not_written(copy: Path, tmp_path: Path) -> None:
    state = read_transfer_policy(copy).policy_state
    folder = write_transfer_policy(tmp_path / "new", state, DEFAULT_ARCH, PPO_KWARGS, {"env_steps": 3})
    again = read_transfer_policy(folder)
    assert again.meta.training.env_steps == 3 and again.policy_state.keys() == state.keys()
    wide = {**DEFAULT_ARCH, "head": [10**6]}
    with pytest.raises(PlacementGymError, match=r"arch\.head\.0"):
        write_transfer_policy(tmp_path / "bad", state, wide, PPO_KWARGS, {})
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("how", ["all nan", "one inf"])
def test_non_finite_weights_are_refused(copy: Path, how: str) -> None:
    weights = torch.load(copy / "weights.pt", weights_only=True)
    name = next(k for k, t in weights["policy"].items() if t.numel() > 1)
    if how == "all nan":
        weights["policy"] = {k: torch.full_like(t, float("nan")) for k, t in weights["policy"].items()}
    else:
        weights["policy"][name].view(-1)[0] = float("inf")
    torch.save(weights, copy / "weights.pt")
    with pytest.raises(PlacementGymError, match="NaN or infinite") as err:
        read_transfer_policy(copy)
    assert "weights.pt" in _one_line(err)


TAMPERED = [
    ("unknown field", lambda m: m.update(script="rm -rf"), "script: not a field"),
    ("unknown arch field", lambda m: m["arch"]["extractor"].update(gnn="gat"), "arch.extractor.gnn"),
    (
        "write path",
        lambda m: m["ppo"].update(tensorboard_log="/tmp/x"),
        "ppo.tensorboard_log: may not be set",
    ),
    ("device", lambda m: m["ppo"].update(device="cuda:7"), "ppo.device: may not be set"),
    ("record path", lambda m: m["training"].update(tensorboard_log="/tmp/x"), "training.tensorboard_log"),
    ("n_steps", lambda m: m["ppo"].update(n_steps=10**9), "ppo.n_steps"),
    ("absurd width", lambda m: m["arch"]["extractor"].update(hidden=10**6), "arch.extractor.hidden"),
    ("absurd head", lambda m: m["arch"].update(head=[64, 2**40]), r"arch.head.1"),
    ("params", lambda m: m["arch"]["extractor"].update(hidden=4096, layers=64), "parameters"),
    ("float layers", lambda m: m["arch"]["extractor"].update(layers=2.5), "arch.extractor.layers"),
    ("bool width", lambda m: m["arch"]["extractor"].update(hidden=True), "arch.extractor.hidden"),
    ("no head", lambda m: m["arch"].update(head=[]), "arch.head"),
    ("huge batch", lambda m: m["ppo"].update(batch_size=10**9), "ppo.batch_size"),
    ("absurd lr", lambda m: m["ppo"].update(learning_rate=1e300), "ppo.learning_rate"),
    ("gamma", lambda m: m["ppo"].update(gamma=5), "ppo.gamma"),
    ("moves", lambda m: m["training"].update(moves="single;rm -rf /"), "training.moves"),
    ("long command", lambda m: m["training"].update(command="x" * 10**4), "training.command"),
    ("format", lambda m: m.update(format=2), "format"),
    ("no arch", lambda m: m.pop("arch"), "arch: Field required"),
]


@pytest.mark.parametrize("name, edit, message", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_tampered_meta_json_is_refused_with_one_clear_error(copy: Path, name, edit, message) -> None:
    _edit_meta(copy, edit)
    for reader in (read_meta, read_transfer_policy):
        with pytest.raises(PlacementGymError, match=message) as err:
            reader(copy)
        assert str(copy / "meta.json") in _one_line(err)


@pytest.mark.parametrize("file", ["weights.pt", "meta.json"])
def test_a_linked_file_is_refused_even_to_a_valid_one(copy: Path, tmp_path: Path, file: str) -> None:
    real = tmp_path / f"real-{file}"
    (copy / file).rename(real)
    (copy / file).symlink_to(real)
    with pytest.raises(PlacementGymError, match="symbolic link") as err:
        read_transfer_policy(copy)
    assert file in _one_line(err)


def test_each_reader_refuses_the_other_kind(copy: Path, tmp_path: Path) -> None:
    with pytest.raises(PlacementGymError, match="not an SB3 learner's"):
        read_policy(copy)
    _edit_meta(copy, lambda m: m.update(method="ppo_gnn"))
    with pytest.raises(PlacementGymError, match="'ppo_gnn' policy, not a pretrained_ppo one"):
        read_transfer_policy(copy)


def test_the_method_reads_through_the_checks(copy: Path, tiny_cnn) -> None:
    _edit_meta(copy, lambda m: m["ppo"].update(tensorboard_log="/tmp/elsewhere"))
    problem = PlacementProblem.make(tiny_cnn, "cpu-dgpu", "simulated")
    with pytest.raises(PlacementGymError, match="tensorboard_log"):
        make_method("pretrained_ppo", policy=str(copy)).place(problem, budget=8)


def _nan_weights(folder: Path) -> None:
    weights = torch.load(folder / "weights.pt", weights_only=True)
    weights["policy"] = {k: torch.full_like(t, float("nan")) for k, t in weights["policy"].items()}
    torch.save(weights, folder / "weights.pt")


def _linked_weights(folder: Path) -> None:
    (folder / "weights.pt").unlink()
    (folder / "weights.pt").symlink_to(PRETRAINED_DIR / "all" / "weights.pt")


CLI_BAD = [
    ("nan weights", _nan_weights, "NaN or infinite"),
    (
        "write path",
        lambda f: _edit_meta(f, lambda m: m["ppo"].update(tensorboard_log=str(f))),
        "tensorboard_log",
    ),
    ("unknown field", lambda f: _edit_meta(f, lambda m: m.update(hook="x")), "hook: not a field"),
    ("absurd width", lambda f: _edit_meta(f, lambda m: m["arch"].update(head=[2**40])), "arch.head.0"),
    ("linked weights", _linked_weights, "symbolic link"),
]


@pytest.mark.parametrize("name, damage, message", CLI_BAD, ids=[t[0] for t in CLI_BAD])
def test_place_with_a_bad_policy_gives_one_line_and_exit_2(copy: Path, capsys, name, damage, message) -> None:
    damage(copy)
    argv = ["place", "--model", "tiny_cnn", "--platform", "cpu-dgpu", "--budget", "8", "--policy", str(copy)]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("placement-gym: error: ") and "\n" not in err and message in err
    assert "Traceback" not in captured.err and not captured.out
