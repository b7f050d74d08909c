"""Tests of the weightless blobs of compiled segments: evicted segments come back by import with the
unpartitioned model's outputs, the blobs stay within their bound, a blob that cannot be imported is compiled
instead, a changed weights file drops them, and models without an IR file compile every time."""

from __future__ import annotations

import os

import numpy as np
import openvino as ov
import openvino.opset13 as opset

from placement_gym.benchmarks import load_benchmark
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.measured.blobs import MAX_BLOB_BYTES, WEIGHTLESS, SegmentBlobs
from placement_gym.zoo.loading import core
from tests.measured.test_backend import _assert_same_outputs, _random_placements, _reference


def test_evicted_segments_come_back_by_import(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(
        tiny_bert, graph, platform, max_compiled_bytes=6 << 20, max_blob_bytes=MAX_BLOB_BYTES
    )
    compiler = backend.executor.compiler
    assert compiler.blobs is not None and compiler.blobs.weights == tiny_bert.ir_weights
    placements = _random_placements(graph, 5, seed=21)
    reference = _reference(tiny_bert)
    _assert_same_outputs(backend, placements + placements, reference)
    assert compiler.stats["imported"] > 0  # segments evicted by the small bound were imported back
    assert len(compiler.blobs) == compiler.stats["compiled"]  # every compiled segment left its blob
    backend.close()


def test_a_placement_imported_whole_computes_the_same(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, max_blob_bytes=MAX_BLOB_BYTES)
    executor = backend.executor
    placement = _random_placements(graph, 1, seed=22)[-1]
    first = backend.infer(placement)
    executor.clear_compiled()
    assert executor.num_compiled == 0 and executor.compiled_bytes == 0
    before = executor.compiler.stats["imported"]
    again = backend.infer(placement)
    plan = executor.prepare(graph.expand(placement))
    assert executor.compiler.stats["imported"] - before == len(plan.parts)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))  # bit-identical
    backend.close()


def test_blobs_stay_within_their_bound(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, max_blob_bytes=100_000)
    blobs = backend.executor.compiler.blobs
    for placement in _random_placements(graph, 3, seed=23)[2:]:  # many small segments
        backend.infer(placement)
        assert 0 < blobs.bytes <= 100_000
        assert blobs.bytes == sum(len(b) for b in blobs._blobs.values())
    assert len(blobs) < backend.executor.compiler.stats["compiled"]  # the oldest were dropped
    backend.close()
    backend = MeasuredBackend(tiny_bert, graph, platform)  # the default keeps none
    assert backend.executor.compiler.blobs is None
    backend.close()


def test_a_blob_that_cannot_be_imported_is_compiled_instead(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, max_blob_bytes=MAX_BLOB_BYTES)
    executor = backend.executor
    placement = _random_placements(graph, 1, seed=24)[-1]
    backend.infer(placement)
    blobs = executor.compiler.blobs
    for key in list(blobs._blobs):
        blobs.drop(key)
        blobs._blobs[key] = b"not a compiled model"
    executor.clear_compiled()
    compiled = executor.compiler.stats["compiled"]
    _assert_same_outputs(backend, [placement], _reference(tiny_bert))
    assert executor.compiler.stats["compiled"] > compiled
    assert all(blob != b"not a compiled model" for blob in blobs._blobs.values())  # replaced
    backend.close()


def _weighted_model(tmp_path) -> ov.Model:
    """A two-op model with a constant, saved as IR and read back (its constant comes from the .bin)."""
    x = opset.parameter([2, 4], np.float32, name="x")
    weight = opset.constant(np.arange(16, dtype=np.float32).reshape(4, 4))
    model = ov.Model([opset.relu(opset.matmul(x, weight, False, False))], [x])
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    return core().read_model(tmp_path / "m.xml")


def test_a_changed_weights_file_drops_the_blobs(tmp_path):
    model = _weighted_model(tmp_path)
    blobs = SegmentBlobs(tmp_path / "m.bin")
    compiled = core().compile_model(model, "CPU", blobs.compile_config({"INFERENCE_NUM_THREADS": 1}))
    blobs.put("k", compiled)
    blob = blobs.get("k")
    assert blob is not None and len(blobs) == 1
    imported = blobs.load(core(), blob, "CPU", {"INFERENCE_NUM_THREADS": 1})
    x = np.ones((2, 4), np.float32)
    assert np.array_equal(imported({"x": x})[0], compiled({"x": x})[0])
    stat = os.stat(tmp_path / "m.bin")
    os.utime(tmp_path / "m.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # rewritten
    assert blobs.get("k") is None and len(blobs) == 0 and blobs.bytes == 0
    blobs.put("k", compiled)
    assert len(blobs) == 0  # nothing is kept for a file that changed under it
    assert WEIGHTLESS["ENABLE_WEIGHTLESS"] is True


def test_models_without_an_ir_file_compile_every_time(tmp_path, platform, tiny_cnn):
    assert tiny_cnn.ir_weights is not None and tiny_cnn.ir_weights.is_file()
    bench = load_benchmark(_weighted_model(tmp_path).clone())  # in memory: no file to refer to
    assert bench.ir_weights is None
    backend = MeasuredBackend(bench, bench.coarsen("ops"), platform, max_blob_bytes=MAX_BLOB_BYTES)
    assert backend.executor.compiler.blobs is None
    assert len(backend.infer(np.zeros(bench.coarsen("ops").num_groups, np.int64))) == 1
    backend.close()
