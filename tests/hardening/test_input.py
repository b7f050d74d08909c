"""Bad input (issue #12, 8-10): empty and corrupt models, dynamic shapes, constructor arguments, platforms."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.platforms import Device, load_platform, platform_from_dict

_DEVICE = {
    "name": "a", "kind": "cpu", "ov_device": "CPU", "precision": "f32", "memory_bytes": 1e9,
    "peak_flops": {"f32": 1e12}, "mem_bandwidth": 1e10, "launch_overhead": 1e-6,
}  # fmt: skip
_PLATFORM = {
    "name": "two",
    "host": "a",
    "devices": [_DEVICE, {**_DEVICE, "name": "b"}],
    "default_link": {"latency": 1e-6, "bandwidth": 1e9},
}


def _platform(**change) -> dict:
    data = copy.deepcopy(_PLATFORM)
    data.update(change)
    return data


# ---------------------------------------------------------------------- 2. platform names and files
@pytest.mark.parametrize("name", ["../../somewhere/x", "platforms/cpu-dgpu", "/etc/passwd", "cpu-dgpu/"])
def test_a_platform_name_with_a_path_is_refused(name: str) -> None:
    with pytest.raises(UnknownNameError, match="unknown platform"):
        load_platform(name)


def test_a_platform_file_loads_as_path_or_yaml_suffix(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_platform()))
    assert load_platform(path).name == "two"
    assert load_platform(str(path)).num_devices == 2
    with pytest.raises(ConfigError, match="does not exist"):
        load_platform(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"must end in \.yaml"):
        load_platform(tmp_path / "mine.txt")
    path.write_text("devices: [unclosed")
    with pytest.raises(ConfigError, match="cannot read platform file"):
        load_platform(path)
    with pytest.raises(ConfigError, match="a name or a path"):
        load_platform(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- 10. platform schema
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"host": "gpu"}, "host 'gpu' names no device"),
        (
            {"devices": [{**_DEVICE, "speed": 3}, {**_DEVICE, "name": "b"}]},
            r"devices\[0\] 'a'.speed: unknown field",
        ),
        (
            {
                "devices": [
                    {k: v for k, v in _DEVICE.items() if k != "memory_bytes"},
                    {**_DEVICE, "name": "b"},
                ]
            },
            r"devices\[0\] 'a'.*exactly one of memory_bytes",
        ),
        (
            {"devices": [{**_DEVICE, "launch_overhead": math.inf}, {**_DEVICE, "name": "b"}]},
            "launch_overhead",
        ),
        ({"devices": [{**_DEVICE, "launch_overhead": -1}, {**_DEVICE, "name": "b"}]}, "launch_overhead"),
        ({"devices": [{**_DEVICE, "mem_bandwidth": "fast"}, {**_DEVICE, "name": "b"}]}, "mem_bandwidth"),
        ({"devices": [_DEVICE, _DEVICE]}, "unique"),
        ({"devices": []}, "devices"),
        ({"default_link": {"latency": 1e-6, "bandwidth": math.nan}}, "default_link.bandwidth"),
    ],
)
def test_platform_schema_names_the_bad_field(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        platform_from_dict(_platform(**change))


def test_platform_file_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        platform_from_dict(["a", "b"])


def test_yaml_exponent_strings_still_read_as_numbers() -> None:
    plat = platform_from_dict(
        _platform(devices=[{**_DEVICE, "mem_bandwidth": "76.8e9"}, {**_DEVICE, "name": "b"}])
    )
    assert plat.devices[0].mem_bandwidth == 76.8e9 and plat.host == 0


@pytest.mark.parametrize("field", ["launch_overhead", "invoke_overhead", "mem_bandwidth"])
@pytest.mark.parametrize("value", [math.inf, math.nan, "1e-6", True])
def test_device_rejects_non_finite_or_non_numbers(field: str, value: object) -> None:
    kwargs = {**_DEVICE, field: value}
    with pytest.raises(ConfigError, match=field):
        Device(**kwargs)


# ---------------------------------------------------------------------- 10. constructor arguments
def test_unknown_backend_option_is_named_with_a_suggestion(tiny_cnn) -> None:
    from placement_gym.backends import backend_options, make_backend
    from placement_gym.envs import DevicePlacementEnv

    with pytest.raises(UnknownNameError, match="option of the simulated backend 'cache_sise'.*'cache_size'"):
        make_backend(
            "simulated", tiny_cnn, tiny_cnn.coarsen("fused"), load_platform("cpu-dgpu"), cache_sise=3
        )
    with pytest.raises(UnknownNameError, match="run_timeout"):  # the measured backend's options are listed
        DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "measured", backend_kwargs={"timeout": 3})
    assert "cache_size" in backend_options("simulated") and "run_timeout" in backend_options("measured")


@pytest.mark.parametrize("value", ["abc", math.nan, math.inf, True, None])
def test_infeasible_reward_must_be_a_finite_number(value) -> None:
    from placement_gym.envs import DevicePlacementEnv
    from placement_gym.rewards import get_reward

    if value is None:
        assert get_reward("speedup", value).infeasible == -1.0
        return
    with pytest.raises(ConfigError, match="infeasible_reward must be a finite number"):
        get_reward("speedup", value)
    with pytest.raises(ConfigError):
        DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", infeasible_reward=value)


@pytest.mark.parametrize("value", ["10", -1, 2.5, math.inf, math.nan, True])
def test_simulated_cache_size_is_checked(tiny_cnn, value) -> None:
    from placement_gym.errors import BackendError
    from placement_gym.simulation.backend import SimulatedBackend

    with pytest.raises(BackendError, match="cache_size"):
        SimulatedBackend(tiny_cnn, tiny_cnn.coarsen("fused"), load_platform("cpu-dgpu"), cache_size=value)


# ---------------------------------------------------------------------- 8-9. model files
def _conv_ir(directory: Path, shape: list[int], name: str = "m") -> Path:
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter(shape, ov.Type.f32, name="x")
    w = ops.constant(np.ones((4, 3, 3, 3), np.float32))
    y = ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    path = directory / f"{name}.xml"
    ov.save_model(ov.Model([y], [x], name), path, compress_to_fp16=False)
    return path


def test_an_ir_with_no_ops_is_refused_at_load(tmp_path: Path) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    from placement_gym.benchmarks import load_benchmark
    from placement_gym.errors import ModelError

    x = ops.parameter([1, 3], ov.Type.f32, name="x")
    ov.save_model(ov.Model([ops.result(x)], [x], "empty"), tmp_path / "empty.xml")
    with pytest.raises(ModelError, match="no executable ops"):
        load_benchmark(tmp_path / "empty.xml")


def test_a_corrupt_weights_file_keeps_openvinos_reason(tmp_path: Path) -> None:
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.errors import CorruptModelError

    path = _conv_ir(tmp_path, [1, 3, 8, 8])
    weights = path.with_suffix(".bin")
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CorruptModelError, match="Incorrect weights in bin file"):
        load_benchmark(path)


def test_a_dynamic_batch_alone_defaults_to_one(tmp_path: Path, caplog) -> None:
    import logging

    from placement_gym.benchmarks import load_benchmark

    path = _conv_ir(tmp_path, [-1, 3, 8, 8])
    with caplog.at_level(logging.INFO, logger="placement_gym"):
        bench = load_benchmark(path)
    assert "dynamic batch dimension" in caplog.text and "using batch 1" in caplog.text
    assert bench.ops.out_shapes[0] == (1, 4, 8, 8)
    assert (
        bench.identity()["model_path"] == str(path.resolve()) and len(bench.identity()["model_sha256"]) == 64
    )


def test_dynamic_shapes_need_input_shapes(tmp_path: Path) -> None:
    import pickle

    from placement_gym.benchmarks import load_benchmark
    from placement_gym.errors import ModelError

    path = _conv_ir(tmp_path, [-1, 3, -1, -1])
    with pytest.raises(ModelError, match=r"dynamic input shapes \(x \[\?,3,\?,\?\]\); pass --input-shape x=1,3,H,W,"):
        load_benchmark(path)
    bench = load_benchmark(path, input_shapes={"x": [2, 3, 16, 16]})
    assert bench.ops.out_shapes[0] == (2, 4, 16, 16) and bench.input_shapes == {"x": [2, 3, 16, 16]}
    again = pickle.loads(pickle.dumps(bench))  # a worker process reloads the model with the same shapes
    assert list(again.model.inputs[0].get_shape()) == [2, 3, 16, 16]
    with pytest.raises(UnknownNameError, match="model input 'y'"):
        load_benchmark(path, input_shapes={"y": [1, 3, 8, 8]})
    with pytest.raises(ConfigError, match="positive integers"):
        load_benchmark(path, input_shapes={"x": [1, 3, 0, 8]})
    with pytest.raises(ModelError, match="cannot reshape"):
        load_benchmark(path, input_shapes={"x": [1, 5, 8, 8]})  # 5 channels for a 3-channel kernel
    with pytest.raises(ConfigError, match="fixed input shapes"):
        load_benchmark("tiny_cnn", input_shapes={"x": [1, 3, 8, 8]})


@pytest.mark.parametrize("text", ["x", "x=", "=1,2", "x=1,a", "x=1,0", "x=-1,3"])
def test_parse_input_shape_rejects(text: str) -> None:
    from experiments.cli.arguments import parse_input_shape

    with pytest.raises(ConfigError, match="NAME=D1,D2"):
        parse_input_shape(text)


def test_parse_input_shape() -> None:
    from experiments.cli.arguments import parse_input_shape

    assert parse_input_shape("input_ids=1,128") == ("input_ids", [1, 128])
