"""Tests of the partitioned executor's compiled-segment cache: identically configured devices share compiled
segments, the cache stays within its bounds in ops and estimated bytes, evicted segments are recompiled
with the outputs still identical to the unpartitioned model's, segments built from one clone are the
models built from a clone each, and segments compiled on several threads are the ones compiled on one."""

from __future__ import annotations

import threading

import numpy as np
import openvino as ov
import pytest

from placement_gym.errors import BackendError
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.measured.dataflow import COMPILED_OVERHEAD, PartitionedExecutor
from tests.measured.test_backend import (
    _assert_same_outputs,
    _device,
    _platform,
    _random_placements,
    _reference,
)


def _structure(model: ov.Model) -> list[tuple]:
    """Everything compile_model sees of a model: per op in order, its type, name, inputs and constants."""
    index = {op.get_instance_id(): i for i, op in enumerate(model.get_ordered_ops())}
    rows = []
    for op in model.get_ordered_ops():
        inputs = [(index[i.get_source_output().get_node().get_instance_id()], i.get_source_output().get_index()) for i in op.inputs()]
        data = op.get_data().tobytes() if op.get_type_name() == "Constant" else b""
        shapes = [str(o.get_partial_shape()) for o in op.outputs()]
        rows.append((op.get_type_name(), op.get_friendly_name(), inputs, shapes, data))
    return rows


def test_one_clone_builds_the_same_segments(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform)
    executor = backend.executor
    for placement in _random_placements(graph, 3, seed=11):
        segments = executor.segments(graph.expand(placement))
        together = executor.index.build_many(segments)
        for segment, model in zip(segments, together):
            assert _structure(model) == _structure(executor.index.build(segment))
    with pytest.raises(BackendError, match="disjoint"):
        executor.index.build_many([segments[0], segments[0]])
    backend.close()


def test_identically_configured_devices_share_compiled_segments(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, repeats=1, warmup=0, rel_ci=None)
    executor = backend.executor
    ones = np.zeros(graph.num_groups, np.int64)
    backend.evaluate(ones)
    compiled = executor.num_compiled
    plan = executor.prepare(graph.expand(1 - ones))  # everything on the other virtual CPU
    assert executor.num_compiled == compiled and executor.is_warm(plan)  # nothing new, no warm-up
    assert plan.devices == [1] * len(plan.parts)
    _assert_same_outputs(backend, [1 - ones], _reference(tiny_bert))
    backend.close()


def test_differently_configured_devices_compile_their_own(tiny_cnn):
    platform = _platform(_device("cpu0"), _device("cpu1", INFERENCE_NUM_THREADS=2), name="mixed")
    graph = tiny_cnn.coarsen("fused")
    backend = MeasuredBackend(tiny_cnn, graph, platform)
    zeros = np.zeros(graph.num_groups, np.int64)
    backend.infer(zeros)
    backend.infer(1 - zeros)
    assert {p.segment.device for p in backend.executor._compiled.values()} == {0, 1}
    backend.close()


@pytest.mark.parametrize("limit", ["max_compiled_ops", "max_compiled_bytes"])
def test_the_compiled_segments_stay_within_their_bound(tiny_bert, platform, limit):
    graph = tiny_bert.coarsen("fused")
    bound = 6 if limit == "max_compiled_ops" else 3 * COMPILED_OVERHEAD
    options = {"max_compiled_bytes": None, limit: bound}
    backend = MeasuredBackend(tiny_bert, graph, platform, **options)
    executor = backend.executor
    reference = _reference(tiny_bert)
    for placement in _random_placements(graph, 4, seed=5):
        _assert_same_outputs(backend, [placement], reference)  # evicted segments are recompiled, still exact
        kept = list(executor._compiled.values())
        used = sum(len(p.segment.ops) for p in kept) if limit == "max_compiled_ops" else executor.compiled_bytes
        assert used <= bound or len(kept) == 1
        assert executor.compiled_bytes == sum(executor.estimate(p.segment) for p in kept)
    assert executor.stats["compiled"] > executor.num_compiled  # something was evicted and compiled again
    backend.close()


def test_room_is_made_before_compiling(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform)
    executor = backend.executor
    placements = _random_placements(graph, 3, seed=9)
    sizes = []
    for placement in placements:
        plan = executor.prepare(graph.expand(placement))
        sizes.append(sum(executor.estimate(p.segment) for p in plan.parts))
    executor.max_compiled_bytes = bound = max(sizes)
    seen = {"peak": 0}
    compile_model = executor.core.compile_model

    class Watch:
        def compile_model(self, *args, **kwargs):
            seen["peak"] = max(seen["peak"], executor.compiled_bytes)
            return compile_model(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(executor.core, name)

    executor.core = Watch()
    for placement in _random_placements(graph, 4, seed=10):
        plan = executor.prepare(graph.expand(placement))
        assert executor.compiled_bytes <= bound
    assert 0 < seen["peak"] <= bound  # old segments were evicted before new ones were compiled
    backend.close()


def test_estimates_cover_weights_and_written_tensors(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform)
    executor: PartitionedExecutor = backend.executor
    plan = executor.prepare(graph.expand(np.zeros(graph.num_groups, np.int64)))
    weights = int(np.asarray(tiny_bert.ops.nodes["param_bytes"]).sum())
    written = int(np.asarray(tiny_bert.ops.nodes["out_bytes"]).sum())
    assert executor.compiled_bytes == weights + written + len(plan.parts) * COMPILED_OVERHEAD
    backend.close()


def test_the_byte_bound_is_checked(tiny_cnn, platform):
    with pytest.raises(BackendError, match="max_compiled_bytes"):
        MeasuredBackend(tiny_cnn, tiny_cnn.coarsen("fused"), platform, max_compiled_bytes=0)


@pytest.mark.parametrize("executor", ["partitioned", "hetero"])
def test_remembered_compile_failures_are_bounded(tiny_cnn, executor, monkeypatch):
    module = "placement_gym.measured." + ("dataflow" if executor == "partitioned" else "hetero")
    monkeypatch.setattr(f"{module}.MAX_FAILED", 2)
    graph = tiny_cnn.coarsen("ops")
    broken = _device("bad", INFERENCE_NUM_THREADS="abc")
    backend = MeasuredBackend(tiny_cnn, graph, _platform(broken, _device("cpu1")), executor=executor, cache_size=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        placement = rng.integers(0, 2, graph.num_groups)
        placement[0] = 0  # something on the broken device
        assert not backend.evaluate(placement).feasible
        assert len(backend.executor._failed) <= 2
    backend.close()


class _ThreadWatch:
    """An ``ov.Core`` that records the thread of every ``compile_model`` (everything else passes through)."""

    def __init__(self, core):
        self._core, self.threads = core, []

    def compile_model(self, *args, **kwargs):
        self.threads.append(threading.current_thread().name)
        return self._core.compile_model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._core, name)


def test_segments_compiled_on_threads_compute_the_unpartitioned_outputs(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    placements = _random_placements(graph, 4, seed=13)
    kept = {}
    for threads in (1, 3):
        backend = MeasuredBackend(tiny_bert, graph, platform, compile_threads=threads)
        watch = backend.executor.core = _ThreadWatch(backend.executor.core)
        _assert_same_outputs(backend, placements, _reference(tiny_bert))
        on_threads = [name.startswith("compile") for name in watch.threads]
        assert any(on_threads) if threads > 1 else not any(on_threads)  # one new segment: no thread
        kept[threads] = {key: p.segment for key, p in backend.executor._compiled.items()}
        assert backend.executor.compiled_bytes == sum(backend.executor.estimate(s) for s in kept[threads].values())
        backend.close()
    assert kept[1] == kept[3]  # the same segments compiled, kept and wired to the same tensors


def test_a_segment_that_fails_on_a_compile_thread_is_remembered(tiny_cnn):
    graph = tiny_cnn.coarsen("ops")
    broken = _device("bad", INFERENCE_NUM_THREADS="abc")
    backend = MeasuredBackend(tiny_cnn, graph, _platform(broken, _device("cpu1")), compile_threads=2, cache_size=0)
    placement = np.ones(graph.num_groups, np.int64)
    placement[graph.num_groups // 2 :] = 0  # several segments, the later ones on the broken device
    result = backend.evaluate(placement)
    assert not result.feasible and "compiling a segment" in result.reason
    assert backend.executor._failed and backend.evaluate(placement).reason == result.reason
    assert backend.evaluate(np.ones(graph.num_groups, np.int64)).feasible
    backend.close()


def test_compile_threads_are_checked(tiny_cnn, platform):
    with pytest.raises(BackendError, match="compile_threads"):
        MeasuredBackend(tiny_cnn, tiny_cnn.coarsen("fused"), platform, compile_threads=0)


def test_only_kept_segments_hold_boundary_tensors(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, max_compiled_bytes=3 * COMPILED_OVERHEAD)
    executor = backend.executor
    reference = _reference(tiny_bert)
    placements = _random_placements(graph, 4, seed=12)
    held = executor.prepare(graph.expand(placements[-1]))  # a plan kept while its segments are evicted
    dropped = 0
    for placement in placements[:-1]:
        _assert_same_outputs(backend, [placement], reference)
        used = {k for p in executor._compiled.values() for k in (*p.segment.inputs, *p.segment.outputs)}
        permanent = {k for k in executor._tensors if k[0] < 0} | set(executor.index.outputs)
        assert set(executor._tensors) == used | permanent
        dropped += len(executor.index.specs) - len(executor._tensors)
    assert dropped > 0 and not any(p.segment.cache_key in executor._compiled for p in held.parts)
    executor.run(held)  # its evicted segments still share their own tensors
    for got, want in zip(executor.outputs(held), reference):
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5)
    backend.close()
