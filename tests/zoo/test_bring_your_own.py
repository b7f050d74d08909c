"""Bring your own model: the two usual exports work in the project's environment as the docs show them.

* ``torch.onnx.export`` on its default (dynamo) path, which needs ``onnxscript`` (a dependency);
* ``ov.convert_model`` of a torch module, whose IR has dynamic shapes: the CLI's one-line error names the
  ``--input-shape`` to pass, and the command it suggests runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from experiments import cli
from placement_gym.benchmarks import load_benchmark


class Net(torch.nn.Module):
    """Two branches of convolutions that meet: a few groups to place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return self.c(torch.relu(self.b(y)) + y)


def test_torch_onnx_export_default_path(tmp_path: Path) -> None:
    path = tmp_path / "net.onnx"
    torch.onnx.export(Net().eval(), (torch.zeros(1, 3, 16, 16),), path, input_names=["x"])  # dynamo, onnxscript
    bench = load_benchmark(path)
    assert bench.ops.num_nodes >= 5 and bench.input_shapes in (None, {})


def test_a_dynamic_ir_from_convert_model_names_the_input_shape_to_pass(tmp_path: Path, capsys) -> None:
    import openvino as ov

    path = tmp_path / "net.xml"
    ov.save_model(ov.convert_model(Net().eval(), example_input=torch.zeros(1, 3, 16, 16)), path)
    argv = ["bench", "--models", str(path), "--methods", "heft", "--platform", "cpu-igpu", "--no-progress"]
    assert cli.main([*argv, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-shape x=1,3,H,W, with H, W the sizes" in err, err
    flag = re.search(r"--input-shape (\S+),", err).group(1).replace("H", "16").replace("W", "16")
    assert cli.main([*argv, "--out", str(tmp_path / "b"), "--input-shape", flag]) == 0
    assert "heft" in capsys.readouterr().out
