"""Cache entries prove what they hold: results are keyed by the model's content hash, every cached line or
entry carries a checksum, and an edited or swapped one is rebuilt (or measured again) with a warning,
never served."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from placement_gym import cache
from placement_gym.backends.base import LatencyResult
from placement_gym.backends.result_cache import ResultCache
from placement_gym.errors import CacheWarning, CorruptModelError
from placement_gym.zoo import loading

CONFIG = {"benchmark": "m", "model_sha256": "ab" * 32}


def _cache_with_one_result(path: Path) -> np.ndarray:
    placement = np.array([0, 1, 0], np.int64)
    ResultCache(8, CONFIG, path, width=3, num_devices=2).put(placement, LatencyResult(latency=0.004))
    return placement


def _edit_result_line(path: Path, **fields) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[-1].update(fields)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize(
    "edit",
    [{"latency": 1e-9}, {"placement": [1, 1, 0]}, {"checksum": None}, {"feasible": False, "latency": 1e300}],
)
def test_an_edited_result_line_is_not_served_and_is_measured_again(tmp_path, edit) -> None:
    path = tmp_path / "results.jsonl"
    placement = _cache_with_one_result(path)
    _edit_result_line(path, **edit)
    with pytest.warns(CacheWarning, match="1 result.* do not match their checksum"):
        reread = ResultCache(8, CONFIG, path, width=3, num_devices=2)
    assert len(reread) == 0 and reread.tampered == 1
    assert reread.get(np.asarray(edit.get("placement", placement), np.int64).tobytes()) is None
    if "placement" not in edit:  # measured again: the later, valid line wins and no warning is left
        reread.put(placement, LatencyResult(latency=0.004))
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)  # rebuilt: no warning is left
            again = ResultCache(8, CONFIG, path, width=3, num_devices=2)
        assert again.get(placement.tobytes()).latency == 0.004 and again.tampered == 1


def test_a_line_moved_to_another_configuration_is_not_served(tmp_path) -> None:
    path = tmp_path / "results.jsonl"
    _cache_with_one_result(path)
    other = {**CONFIG, "model_sha256": "cd" * 32}  # the same model name, another file content
    fresh = ResultCache(8, other, path, width=3, num_devices=2)
    assert len(fresh) == 0  # another configuration: nothing is shared
    _edit_result_line(path, fingerprint=fresh.fingerprint)  # swapped into the other configuration
    with pytest.warns(CacheWarning):
        assert len(ResultCache(8, other, path, width=3, num_devices=2)) == 0


def test_a_model_file_is_hashed_once_while_unchanged_and_again_when_replaced(tmp_path, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"A" * 4096)
    first = loading.file_sha256(path)
    reads: list = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: reads.append(p) or real_open(p, *a, **k))
    assert loading.file_sha256(path) == first and reads == []  # memoised by (size, inode, times)
    monkeypatch.undo()
    replacement = tmp_path / "new.onnx"
    replacement.write_bytes(b"B" * 4096)  # the same size, at the same path
    os.replace(replacement, path)
    assert loading.file_sha256(path) != first
    with open(path, "r+b") as f:  # edited in place, same size: the change time moves
        f.write(b"C")
    assert loading.file_sha256(path) not in (first, loading.hashlib.sha256(b"B" * 4096).hexdigest())


def test_a_model_files_hash_is_recorded_for_other_processes_and_an_edited_record_is_ignored(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.onnx"
    path.write_bytes(b"A" * 4096)
    first = loading.file_sha256(path)
    loading._FILE_HASHES.clear()  # a new process: only the record on disk
    reads: list = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: reads.append(p) or real_open(p, *a, **k))
    assert loading.file_sha256(path) == first and not any(str(r) == str(path) for r in reads)
    monkeypatch.setattr("builtins.open", real_open)
    record = cache._digest_record_path(str(path.resolve()))
    forged = json.loads(record.read_text())
    forged["sha256"] = "0" * 64  # an edited record: its checksum no longer matches
    record.write_text(json.dumps(forged))
    loading._FILE_HASHES.clear()
    assert loading.file_sha256(path) == first  # hashed again, not the forged digest
    with open(path, "r+b") as f:  # the file edited in place: the record's stamps no longer match
        f.write(b"C")
    loading._FILE_HASHES.clear()
    assert loading.file_sha256(path) == loading.hashlib.sha256(b"C" + b"A" * 4095).hexdigest()


def _mlp(path: Path, width: int) -> Path:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, width], ov.Type.f32, name="x")
    y = x
    for _ in range(2):
        y = ops.relu(ops.matmul(y, ops.constant(np.full((width, width), 0.01, np.float32)), False, False))
    ov.save_model(ov.Model([y], [x], "user_mlp"), path)
    return path


def test_a_model_file_replaced_at_the_same_path_is_never_served_the_old_results(tmp_path) -> None:
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.measured.backend import MeasuredBackend
    from placement_gym.platforms import platform_from_dict

    platform = platform_from_dict(
        {
            "name": "two-vcpu",
            "devices": [
                {"name": f"cpu{i}", "kind": "virtual", "ov_device": "CPU", "precision": "f32",
                 "memory_bytes": 2**30, "peak_flops": {"f32": 5e10}, "mem_bandwidth": 1e10,
                 "launch_overhead": 1e-5,
                 "ov_config": {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False}}
                for i in range(2)
            ],
            "default_link": {"latency": 1e-6, "bandwidth": 1e10},
        }
    )  # fmt: skip
    model, results = tmp_path / "my.xml", tmp_path / "results.jsonl"
    settings = {"repeats": 1, "rel_ci": None, "warmup": 0, "cache_path": str(results)}

    def evaluate() -> LatencyResult:
        bench = load_benchmark(str(model))
        graph = bench.coarsen("fused")
        backend = MeasuredBackend(bench, graph, platform, **settings)
        return backend.evaluate(np.zeros(graph.num_groups, np.int64)), backend

    _mlp(model, 16)
    narrow, backend = evaluate()
    assert evaluate()[0].cached  # the same file: served from the cache
    _mlp(model, 256)  # the same graph, 16x wider, at the same path
    wide, wide_backend = evaluate()
    assert not wide.cached and wide_backend.config["model_sha256"] != backend.config["model_sha256"]
    assert wide_backend.config["ops"] == backend.config["ops"]  # the old key could not tell them apart


def test_an_unpickled_benchmark_refuses_a_model_file_replaced_since(tmp_path) -> None:
    from placement_gym.benchmarks import load_benchmark

    path = _mlp(tmp_path / "my.xml", 16)
    copy = pickle.loads(pickle.dumps(load_benchmark(str(path))))
    _mlp(path, 64)
    with pytest.raises(CorruptModelError, match="changed since it was loaded"):
        copy.model


def _writer(calls: list, payload: dict):
    def write(directory: Path) -> dict:
        calls.append(directory)
        (directory / "data.npy").write_bytes(b"\0" * 16)
        return dict(payload)

    return write


@pytest.mark.parametrize("field, value", [("factor", 1e-9), ("files", {}), ("model_sha256", "0" * 64)])
def test_an_edited_meta_json_is_rebuilt_with_a_warning(tmp_path, field, value) -> None:
    calls: list = []
    write = _writer(calls, {"factor": 1.0, "model_sha256": "f" * 64})
    directory, meta = cache.cached_entry("profile", "k", write, root=tmp_path)
    assert "meta_sha256" not in meta
    record = json.loads((directory / "meta.json").read_text())
    record[field] = value
    (directory / "meta.json").write_text(json.dumps(record))
    with pytest.raises(CorruptModelError, match="does not match its checksum"):
        cache.verify_entry(directory, kind="profile", key="k")
    with pytest.warns(CacheWarning, match="rebuilding cache entry profile/k"):
        _, meta = cache.cached_entry("profile", "k", write, root=tmp_path)
    assert len(calls) == 2 and meta["factor"] == 1.0


def test_an_entry_written_before_meta_checksums_is_kept(tmp_path) -> None:
    calls: list = []
    write = _writer(calls, {"factor": 1.0})
    directory, _ = cache.cached_entry("profile", "k", write, root=tmp_path)
    record = json.loads((directory / "meta.json").read_text())
    del record["meta_sha256"]
    (directory / "meta.json").write_text(json.dumps(record))
    cache.cached_entry("profile", "k", write, root=tmp_path)
    assert len(calls) == 1  # its files are still checked against their recorded hashes


def test_a_profile_is_keyed_by_the_models_content() -> None:
    from placement_gym.measured.profiling import _profile_key
    from placement_gym.platforms import Device

    device = Device(name="cpu", kind="cpu", ov_device="CPU", precision="f32", memory_bytes=2**30,
                    peak_flops={"f32": 5e10}, mem_bandwidth=1e10, launch_overhead=1e-5)  # fmt: skip
    ops = SimpleNamespace(names=["x", "matmul", "relu"])
    narrow = SimpleNamespace(name="my", version=0, ops=ops, content_sha256="a" * 64)
    wide = SimpleNamespace(name="my", version=0, ops=ops, content_sha256="b" * 64)
    assert _profile_key(narrow, device, 3, 15) != _profile_key(wide, device, 3, 15)
