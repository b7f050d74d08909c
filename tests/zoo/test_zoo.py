from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from placement_gym.cache import cached_entry
from placement_gym.errors import CorruptModelError, ModelError, UnknownNameError
from placement_gym.zoo import MODELS, ModelSpec, ir_path, load_model
from placement_gym.zoo.loading import IN_PROCESS_ENV_VAR
from placement_gym.zoo.models import TinyBranchyCNN


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "ir").iterdir()) if (cache / "ir").exists() else []


def test_unknown_model_lists_known_and_suggests():
    with pytest.raises(UnknownNameError) as err:
        load_model("bret")
    msg = str(err.value)
    assert (
        "unknown model 'bret'" in msg
        and "bert, convnext_t, efficientnet_b0, gpt2, inception_v3" in msg
        and "Did you mean 'bert'" in msg
    )


def test_conversion_is_cached_with_its_version(fresh_cache):
    xml = ir_path("tiny_cnn")
    assert xml.is_file() and xml.with_suffix(".bin").is_file()
    meta = json.loads((xml.parent / "meta.json").read_text())
    assert meta["name"] == "tiny_cnn" and meta["version"] == MODELS["tiny_cnn"].version
    assert set(meta["files"]) == {"model.xml", "model.bin"}
    mtime = xml.stat().st_mtime_ns
    assert ir_path("tiny_cnn") == xml and xml.stat().st_mtime_ns == mtime  # no second conversion
    assert [e for e in _entries(fresh_cache) if not e.startswith(".")] == [xml.parent.name]
    model = load_model("tiny_cnn")
    assert model.version == 1 and [tuple(i.get_shape()) for i in model.model.inputs] == [(1, 3, 16, 16)]


def test_zoo_models_are_converted_in_a_child_process(fresh_cache, monkeypatch):
    """The conversion's memory (PyTorch, the model, its heap) never enters the process that uses the IR."""

    def not_here(*args, **kwargs):
        raise AssertionError("converted in the calling process")

    monkeypatch.delenv(IN_PROCESS_ENV_VAR, raising=False)  # the suite converts in-process (tests/conftest.py)
    monkeypatch.setattr("placement_gym.zoo.loading._convert_torch", not_here)
    xml = ir_path("tiny_cnn")
    meta = json.loads((xml.parent / "meta.json").read_text())
    assert type(meta["torch"]) is str and meta["torch"] == str(torch.__version__)
    assert load_model("tiny_cnn").version == MODELS["tiny_cnn"].version


def test_converting_a_zoo_model_leaves_torch_out_of_the_process(fresh_cache):
    """What a measured env's process holds after a cold make: no PyTorch (its libraries, its heap, the model)."""
    import subprocess
    import sys

    code = "import sys; from placement_gym.zoo import ir_path; ir_path('tiny_cnn'); print('torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != IN_PROCESS_ENV_VAR}  # the default: a child process
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split()[-1] == "False"
    assert (fresh_cache / "ir").is_dir()


def test_the_in_process_setting_converts_in_the_calling_process(fresh_cache, monkeypatch):
    """``PLACEMENT_GYM_CONVERT_IN_PROCESS=1`` (set by this suite) converts without a child process and stores
    the same entry: the IR and its metadata."""

    def no_child(*args, **kwargs):
        raise AssertionError("converted in a child process")

    monkeypatch.setenv(IN_PROCESS_ENV_VAR, "1")
    monkeypatch.setattr("placement_gym.zoo.loading.run_isolated", no_child)
    xml = ir_path("tiny_cnn")
    meta = json.loads((xml.parent / "meta.json").read_text())
    assert meta["name"] == "tiny_cnn" and meta["torch"] == str(torch.__version__)
    assert load_model("tiny_cnn").version == MODELS["tiny_cnn"].version


def test_the_conversion_sends_back_no_torch_objects(tmp_path):
    """Unpickling a torch object (``torch.__version__`` is a str subclass of torch's) would import torch into
    the process the metadata is sent back to."""
    from placement_gym.zoo import loading

    meta = loading._write_ir(MODELS["tiny_cnn"], tmp_path)
    assert all(type(v).__module__ == "builtins" for v in meta.values())


def test_corrupt_entry_is_detected_and_rebuilt(fresh_cache):
    xml = ir_path("tiny_cnn")
    bin_path = xml.with_suffix(".bin")
    size = bin_path.stat().st_size
    bin_path.write_bytes(bin_path.read_bytes()[: size // 2])
    with pytest.raises(CorruptModelError, match="truncated"):
        cached_entry("ir", xml.parent.name, lambda d: {}, rebuild_corrupt=False)
    assert ir_path("tiny_cnn") == xml and bin_path.stat().st_size == size
    xml.write_text(xml.read_text().replace("Convolution", "Convolutoin", 1))
    assert ir_path("tiny_cnn") == xml and "Convolutoin" not in xml.read_text()
    assert not [e for e in _entries(fresh_cache) if "corrupt" in e or ".tmp." in e]


def test_failed_conversion_leaves_nothing_behind(fresh_cache, monkeypatch):
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    spec = ModelSpec("broken", 1, "fails", Broken, lambda: {"x": torch.zeros(1, 2)})
    monkeypatch.setitem(MODELS, "broken", spec)
    with pytest.raises(ModelError, match="could not convert"):
        ir_path("broken")
    assert [e for e in _entries(fresh_cache) if not e.endswith(".lock")] == []


def _convert_in_child(cache: str) -> str:
    import os

    os.environ["PLACEMENT_GYM_CACHE"] = cache
    from placement_gym.zoo import ir_path

    return str(ir_path("tiny_cnn"))


def test_concurrent_writers_produce_one_entry(fresh_cache):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        paths = pool.map(_convert_in_child, [str(fresh_cache)] * 2)
    assert paths[0] == paths[1]
    assert [e for e in _entries(fresh_cache) if not e.startswith(".")] == [Path(paths[0]).parent.name]
    assert not [e for e in _entries(fresh_cache) if ".tmp." in e]
    load_model(paths[0])  # readable


def test_user_model_sources(tmp_path):
    module = TinyBranchyCNN().eval()
    example = torch.zeros(1, 3, 16, 16)
    from_torch = load_model(module, example_input=example)
    assert from_torch.name == "TinyBranchyCNN" and from_torch.version == 0
    onnx_path = tmp_path / "tiny.onnx"
    torch.onnx.export(module, (example,), onnx_path, dynamo=False, input_names=["pixel_values"])
    from_onnx = load_model(onnx_path)
    assert from_onnx.name == "tiny" and len(from_onnx.model.get_ordered_ops()) > 10
    from_ir = load_model(ir_path("tiny_cnn"))
    assert from_ir.model.get_ordered_ops()
    with pytest.raises(ModelError, match="example_input"):
        load_model(module)


def test_bad_model_files(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "missing.xml")
    bad = tmp_path / "bad.xml"
    bad.write_text("<net><broken")
    bad.with_suffix(".bin").write_bytes(b"")
    with pytest.raises(CorruptModelError, match="bad.xml"):
        load_model(bad)
    lonely = tmp_path / "lonely.xml"
    lonely.write_text("<net/>")
    with pytest.raises(ModelError, match="no weights file"):
        load_model(lonely)
    other = tmp_path / "model.pb"
    other.write_text("x")
    with pytest.raises(ModelError, match="unsupported model file"):
        load_model(other)


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_benchmark_architectures_are_canonical():
    """Parameter and layer counts equal the reference implementations' (torchvision / Google's BERT)."""
    inception = MODELS["inception_v3"].build()
    assert _params(inception) == 23_834_568  # torchvision inception_v3(aux_logits=False)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in inception.modules()) == 94
    resnet = MODELS["resnet50"].build()
    assert _params(resnet) == 25_557_032  # torchvision resnet50
    assert sum(isinstance(m, torch.nn.Conv2d) for m in resnet.modules()) == 53
    bert = MODELS["bert"].build()
    assert _params(bert) == 109_482_240  # bert-base-uncased with pooler
    x = MODELS["inception_v3"].inputs()["pixel_values"]
    assert x.shape == (1, 3, 299, 299)
    with torch.no_grad():
        assert inception(x).shape == (1, 1000)
