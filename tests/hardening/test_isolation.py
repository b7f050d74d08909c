"""A crash in OpenVINO (a segfault while compiling a model it has not seen) is a BackendError in a child
process, not a dead CLI."""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path

import pytest

from placement_gym import fusion
from placement_gym.errors import BackendError
from placement_gym.isolation import run_isolated


def segfault(*args: object) -> None:
    """Really crash the process: read address 0."""
    ctypes.string_at(0)


def exit_silently(*args: object) -> None:
    os._exit(3)


def raise_value_error(text: str) -> None:
    raise ValueError(text)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_a_segfault_in_the_child_is_a_backend_error_naming_the_signal() -> None:
    with pytest.raises(BackendError, match=r"compiling m crashed the process it ran in \(SIGSEGV\)"):
        run_isolated(segfault, what="compiling m")


def test_a_child_that_exits_without_answering_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="exit status 3"):
        run_isolated(exit_silently, what="reading m")


def test_results_and_exceptions_come_back_as_they_were() -> None:
    assert run_isolated(divmod, 17, 5, what="dividing") == (3, 2)
    with pytest.raises(ValueError, match="bad input"):
        run_isolated(raise_value_error, "bad input", what="failing")


def test_only_importable_module_level_functions_run_isolated() -> None:
    def nested() -> None:
        pass

    for fn in (lambda: None, nested):
        with pytest.raises(BackendError, match="importable by module and name"):
            run_isolated(fn, what="nothing")


def test_an_unpicklable_result_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="reading m failed: its result .* cannot be sent back"):
        run_isolated(make_generator, what="reading m")


def make_generator() -> object:
    return (i for i in range(3))


def test_a_hung_child_is_stopped_after_the_timeout() -> None:
    with pytest.raises(BackendError, match="did not finish within 0.5 s"):
        run_isolated(sleep, 60.0, what="sleeping", timeout=0.5)


@pytest.fixture
def crashing_compiler(monkeypatch):
    """Fusions are read by a child that segfaults, as OpenVINO's CPU compile does on some models."""
    monkeypatch.setattr(fusion, "_fused_layers_of_file", segfault)
    monkeypatch.setattr(fusion, "_ISOLATED", {})


def _user_model(tmp_path: Path) -> Path:
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 16], ov.Type.f32, name="x")
    y = x
    for _ in range(4):  # a small MLP with residual adds
        w = ops.constant(np.full((16, 16), 0.01, dtype=np.float32))
        y = ops.add(y, ops.relu(ops.matmul(y, w, False, False)))
    path = tmp_path / "mlp.xml"
    ov.save_model(ov.Model([y], [x], "mlp"), path)
    return path


def test_the_fusion_reader_of_an_unknown_model_survives_a_compiler_crash(tmp_path, crashing_compiler) -> None:
    from placement_gym.benchmarks import load_benchmark

    with pytest.raises(
        BackendError, match=r"compiling model 'mlp' on CPU to read its fusions crashed.*SIGSEGV"
    ):
        load_benchmark(str(_user_model(tmp_path)))


def test_the_cli_reports_a_compiler_crash_in_one_line_with_status_2(
    tmp_path, crashing_compiler, capsys
) -> None:
    from experiments import cli

    kwargs = {"model": str(_user_model(tmp_path)), "platform": "cpu-dgpu", "backend": "simulated"}
    argv = ["train", "--agent", "heft", "--env", "DevicePlacement-v0", "--env-kwargs", json.dumps(kwargs)]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placement-gym: error: ") and "SIGSEGV" in err and "\n" not in err


def test_an_unknown_model_is_read_in_a_child_once_and_zoo_models_never(tmp_path, monkeypatch) -> None:
    from placement_gym.benchmarks import load_benchmark

    calls: list = []
    real = fusion.run_isolated
    monkeypatch.setattr(fusion, "run_isolated", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(fusion, "_ISOLATED", {})
    path = _user_model(tmp_path)
    first = load_benchmark(str(path))
    again = load_benchmark(str(path))
    assert len(calls) == 1 and first.fused_layers == again.fused_layers
    in_process = fusion.runtime_fused_layers(first.model)  # names the compiler makes up may differ
    assert (
        fusion.op_layer_index(first.ops, first.fused_layers) == fusion.op_layer_index(first.ops, in_process)
    ).all()
    load_benchmark("tiny_cnn")
    assert len(calls) == 1
