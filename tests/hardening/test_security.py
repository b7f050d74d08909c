"""Security (issue #12, 1-3): policy files that could run code, platform names, CSV formula injection."""

from __future__ import annotations

import base64
import csv
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementGymError, UntrustedFileError


class _WritesAFile:
    """Unpickling this creates a folder: the smallest proof that loading ran code of the file's choice."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def _env():
    return DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", max_nodes=32, max_edges=64)


@pytest.fixture(scope="module")
def trained():
    from agents.sb3.methods import PPOGNN

    method = PPOGNN(gnn="gcn", hidden=16, layers=2, head=(16,))
    method.place(_env(), budget=40, seed=0)
    return method


# ---------------------------------------------------------------------- 1. policy files
def test_a_crafted_sb3_zip_is_refused_without_trusted(trained, tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    from agents.sb3.methods import PPOGNN

    honest = tmp_path / "honest.zip"
    trained.model.save(honest)  # SB3's own format
    marker = tmp_path / "pwned"
    crafted = tmp_path / "crafted.zip"
    with zipfile.ZipFile(honest) as src, zipfile.ZipFile(crafted, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "data":
                fields = json.loads(data)
                payload = base64.b64encode(pickle.dumps(_WritesAFile(marker))).decode()
                fields["policy_class"] = {":type:": "<class 'type'>", ":serialized:": payload}
                data = json.dumps(fields).encode()
            dst.writestr(item, data)

    with pytest.raises(UntrustedFileError, match="trusted=True"):
        PPOGNN().load(crafted)
    assert not marker.exists()
    with pytest.raises(Exception):  # noqa: B017 - SB3 itself runs the payload, then fails on the result
        PPO.load(crafted)
    assert marker.exists(), "the crafted file must really run code when SB3 loads it"
    assert PPOGNN().load(honest, trusted=True) is not None


def test_the_safe_format_round_trips_and_predicts_the_same_placement(trained, tmp_path: Path) -> None:
    from agents.sb3.methods import PPOGNN

    folder = trained.save(tmp_path / "policy")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["method"] == "ppo_gnn" and meta["kwargs"]["gnn"] == "gcn" and meta["versions"]["torch"]
    assert meta["action_space"]["nvec"] == [2] * 32
    loaded = PPOGNN()  # built with other arguments: the saved ones win
    loaded.load(folder)
    env = _env()
    assert np.array_equal(loaded.predict_placement(env), trained.predict_placement(env))
    assert loaded.gnn == "gcn" and loaded.hidden == 16
    with pytest.raises(PlacementGymError, match="without .zip"):
        trained.save(tmp_path / "policy.zip")
    other = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", max_nodes=48, max_edges=64)
    with pytest.raises(PlacementGymError, match="spaces differ"):
        PPOGNN().load(folder, env=other)


def test_pickled_weights_in_a_policy_folder_are_refused(trained, tmp_path: Path) -> None:
    from agents.sb3.methods import PPOGNN, PPOMLP

    folder = trained.save(tmp_path / "policy")
    with pytest.raises(PlacementGymError, match="holds a 'ppo_gnn' policy"):
        PPOMLP().load(folder)
    marker = tmp_path / "pwned"
    (folder / "weights.pt").write_bytes(pickle.dumps(_WritesAFile(marker)))
    with pytest.raises(PlacementGymError, match="not a readable saved policy"):
        PPOGNN().load(folder)
    assert not marker.exists()


# ---------------------------------------------------------------------- 3. CSV formula injection
@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("-1.5", "-1.5"),
        ("heft", "heft"),
        (-1.5, -1.5),
    ],
)
def test_csv_cells_a_spreadsheet_would_evaluate_are_escaped(cell, written) -> None:
    from experiments.records.report import csv_safe

    assert csv_safe(cell) == written


def test_summary_csv_of_a_method_named_like_a_formula(tmp_path: Path) -> None:
    from experiments.grid import run_grid

    rows = run_grid(
        tmp_path, models=["tiny_cnn"], methods=["heft"], seeds=[0], budget=5, platform="cpu-dgpu",
        backend="simulated", progress=False,
    )  # fmt: skip
    from dataclasses import replace

    from experiments.records.report import write_report

    write_report([replace(rows[0], method="=1+1", model="@evil", speedup_vs_cpu=-0.5)], tmp_path / "r")
    with open(tmp_path / "r" / "summary.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["method"] == "'=1+1" and row["model"] == "'@evil" and row["label"] == "'=1+1"
    assert float(row["latency_ms"]) > 0
