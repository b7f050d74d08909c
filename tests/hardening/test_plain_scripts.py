"""A user's first script has no ``if __name__ == "__main__":`` guard, or is fed on stdin or ``-c``: making an
env on a model the project has not seen (whose fusions are read in an isolated child) must work there, and
the child must not re-run the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _new_model(folder: Path) -> Path:
    """A small IR no process has seen before (its weights are new for each test)."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 8], ov.Type.f32, name="x")
    y = x
    for i in range(3):
        w = ops.constant(np.full((8, 8), 0.01 * (i + 1), dtype=np.float32) + np.float32(os.getpid() % 97))
        y = ops.relu(ops.matmul(y, w, False, False))
    path = folder / "my.xml"
    ov.save_model(ov.Model([y], [x], "my_model"), path)
    return path


def _script(model: Path, marker: Path) -> str:
    # no main guard; the marker counts how often the top level runs (a fork server or spawn re-runs it)
    return (
        "import gymnasium as gym\n"
        "import placement_gym\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write('ran\\n')\n"
        f"env = gym.make('DevicePlacement-v0', model={str(model)!r})\n"
        "obs, info = env.reset(seed=0)\n"
        "print('made', env.action_space)\n"
    )


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


@pytest.mark.parametrize(
    "how",
    ["script", pytest.param("stdin", marks=pytest.mark.slow), pytest.param("-c", marks=pytest.mark.slow)],
)
def test_a_script_without_a_main_guard_makes_an_env_on_a_new_model(tmp_path, how) -> None:
    model, marker = _new_model(tmp_path), tmp_path / "marker.txt"
    code = _script(model, marker)
    if how == "script":
        (tmp_path / "first.py").write_text(code)
        done = _run(["first.py"], tmp_path)
    elif how == "stdin":
        done = _run(["-"], tmp_path, stdin=code)
    else:
        done = _run(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("made "), done.stdout
    assert marker.read_text() == "ran\n"  # the top level ran once: the child did not re-run it
