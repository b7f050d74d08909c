"""Tests of the piecewise executor: outputs identical to the unpartitioned model's, no compile for a
never-seen placement once every piece is compiled, pieces shared by identically configured devices, and
its bounded cache of compiled pieces."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.benchmarks import load_benchmark
from placement_gym.errors import BackendError
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.measured.dataflow import DRIVERS
from placement_gym.measured.pieces import device_classes
from tests.measured.test_backend import (
    _assert_same_outputs,
    _device,
    _platform,
    _random_placements,
    _reference,
)


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_bert"])
@pytest.mark.parametrize("level", ["ops", "fused"])
@pytest.mark.parametrize("driver", DRIVERS)
def test_pieces_compute_the_unpartitioned_outputs(model, level, driver, platform):
    bench = load_benchmark(model)
    graph = bench.coarsen(level)
    backend = MeasuredBackend(bench, graph, platform, executor="pieces", driver=driver)
    _assert_same_outputs(backend, _random_placements(graph, 4, seed=1), _reference(bench))
    backend.close()


def test_a_new_placement_compiles_nothing(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, executor="pieces", repeats=1, warmup=1, rel_ci=None)
    executor = backend.executor
    assert executor.driver == "threads" and backend.config["driver"] == "threads"
    assert backend.config["executor"] == "pieces"
    backend.evaluate(np.zeros(graph.num_groups, np.int64))
    # the two virtual CPUs compile identically: one piece per group serves both
    assert device_classes(platform) == [0, 0] and executor.num_compiled == graph.num_groups
    compiled = executor.core.compile_model

    def no_compile(*args, **kwargs):
        raise AssertionError("a never-seen placement must not compile")

    executor.core.compile_model = no_compile
    try:
        for placement in _random_placements(graph, 3, seed=7)[1:]:
            plan = executor.prepare(graph.expand(placement))
            assert executor.is_warm(plan)  # no warm-up runs either
            assert plan.devices == placement.tolist()
            result = backend.evaluate(placement)
            assert result.feasible and not result.cached
    finally:
        executor.core.compile_model = compiled
    backend.close()


def test_differently_configured_devices_get_their_own_pieces(tiny_cnn):
    platform = _platform(_device("cpu0"), _device("cpu1", INFERENCE_NUM_THREADS=2), name="mixed")
    assert device_classes(platform) == [0, 1]
    graph = tiny_cnn.coarsen("fused")
    backend = MeasuredBackend(tiny_cnn, graph, platform, executor="pieces")
    _assert_same_outputs(backend, _random_placements(graph, 2, seed=3), _reference(tiny_cnn))
    assert backend.executor.num_compiled == 2 * graph.num_groups
    assert {p.segment.device for p in backend.executor._compiled.values()} == {0, 1}
    backend.close()


@pytest.mark.parametrize("limit", ["max_pieces", "max_piece_bytes"])
def test_the_piece_cache_is_bounded(tiny_bert, platform, limit):
    graph = tiny_bert.coarsen("fused")
    options = {"max_pieces": 3} if limit == "max_pieces" else {"max_piece_bytes": 4096}
    backend = MeasuredBackend(tiny_bert, graph, platform, executor="pieces", **options)
    executor = backend.executor
    reference = _reference(tiny_bert)
    for placement in _random_placements(graph, 3, seed=5):
        _assert_same_outputs(backend, [placement], reference)  # evicted pieces are recompiled, still exact
        if limit == "max_pieces":
            assert executor.num_compiled <= 3
        else:
            assert executor.piece_bytes <= 4096 or executor.num_compiled == 1
        assert executor.piece_bytes == sum(executor._bytes.values()) and len(executor._bytes) == executor.num_compiled
    assert graph.num_groups > 3
    backend.close()


def test_piece_bytes_estimate_the_weights(tiny_bert, platform):
    graph = tiny_bert.coarsen("fused")
    backend = MeasuredBackend(tiny_bert, graph, platform, executor="pieces")
    backend.infer(np.zeros(graph.num_groups, np.int64))
    weights = int(np.asarray(tiny_bert.ops.nodes["param_bytes"]).sum())
    assert weights <= backend.executor.piece_bytes < weights + 64 * 2**20
    backend.close()


def test_bad_piece_limits_raise(tiny_cnn, platform):
    graph = tiny_cnn.coarsen("fused")
    with pytest.raises(BackendError, match="max_pieces"):
        MeasuredBackend(tiny_cnn, graph, platform, executor="pieces", max_pieces=0)
    with pytest.raises(BackendError, match="max_piece_bytes"):
        MeasuredBackend(tiny_cnn, graph, platform, executor="pieces", max_piece_bytes=-1)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet50", "bert"])
def test_pieces_are_exact_on_benchmark_models(model):
    bench = load_benchmark(model)
    reference = _reference(bench)
    graph = bench.coarsen("fused")
    backend = MeasuredBackend(bench, graph, _platform(), executor="pieces")
    _assert_same_outputs(backend, _random_placements(graph, 2, seed=4), reference)
    backend.close()
