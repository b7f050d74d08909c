"""Shipped records hold no path of the machine that wrote them (placement_gym.record_paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement_gym.record_paths import portable_args, portable_path
from tests.doc_checks import ROOT, absolute_paths

#: Every shipped policy's metadata, and the transfer rows that copy a policy's pretraining record.
SHIPPED = sorted((ROOT / "agents").rglob("meta.json"))
SHIPPED += sorted((ROOT / "results" / "leaderboard" / "transfer").glob("*.jsonl"))


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_shipped_policies_are_found() -> None:
    names = {_id(p) for p in SHIPPED}
    assert {"agents/sb3/pretrained/all/meta.json", "agents/learned/pretrained/meta.json"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=_id)
def test_no_shipped_record_holds_an_absolute_path(path: Path) -> None:
    found = absolute_paths(path.read_text())
    assert not found, f"{_id(path)} names machine paths {sorted(set(found))[:3]} (see portable_path)"


def test_a_path_inside_the_repository_is_written_relative_to_it() -> None:
    root = Path("/repo")
    assert portable_path("/repo/agents/learned/pretrained", root) == "agents/learned/pretrained"
    assert portable_path("/repo/runs/../agents/x", root) == "agents/x"
    assert portable_path(ROOT / "agents" / "sb3") == "agents/sb3"


def test_a_path_elsewhere_keeps_only_its_name_and_a_relative_one_stays() -> None:
    root = Path("/repo")
    assert portable_path("/work/data/rl-pretrain/all-seg", root) == "<dir>/all-seg"
    assert portable_path("/repository/x", root) == "<dir>/x"  # a sibling with a longer name is outside
    assert portable_path("/", root) == "<dir>"
    assert portable_path("runs/rl-pretrain/all", root) == "runs/rl-pretrain/all"


def test_command_arguments_lose_their_machine_paths() -> None:
    argv = ["--out", "/tmp/run", "--data=/home/me/a.npz", "--models", "bert", "--ship", "runs/x"]
    assert portable_args(argv, Path("/repo")) == [
        "--out", "<dir>/run", "--data=<dir>/a.npz", "--models", "bert", "--ship", "runs/x",
    ]  # fmt: skip
    assert not absolute_paths(" ".join(portable_args(argv, Path("/repo"))))


def test_the_pretraining_commands_write_no_absolute_out(tmp_path: Path) -> None:
    from experiments.pretraining.pretrained_ppo import training_command

    progress = {"models": ["bert"], "env_steps": 8, "synthetic": 0.0, "moves": "single",
                "platforms": ["cpu-igpu"], "n_envs": 1, "chunk": 8, "max_steps": 4, "seed": 0}  # fmt: skip
    command = training_command(progress, tmp_path / "run")
    assert "--out '<dir>/run'" in command and not absolute_paths(command)
