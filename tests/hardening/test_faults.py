"""Faults of the measured backend (issue #12, 7): hung single-segment runs, a bad ``cache_path``, forged
result-cache lines."""

from __future__ import annotations

import gc
import json
import queue
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from placement_gym.backends.base import LatencyResult
from placement_gym.backends.result_cache import ResultCache, fingerprint, line_checksum
from placement_gym.errors import BackendError
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.measured.dataflow import DRIVERS, PartitionedExecutor, Plan, _Compiled
from placement_gym.measured.executor import ExecutionFailure
from placement_gym.measured.hetero import HeteroExecutor, HeteroPlan
from placement_gym.platforms import platform_from_dict


class _HungRequest:
    """An infer request whose inference never finishes until cancelled (a wedged device driver)."""

    def __init__(self) -> None:
        self.cancelled = False
        self._released = threading.Event()

    def infer(self) -> None:  # blocks (on a worker thread) until cancel()
        self._released.wait(30)

    def start_async(self) -> None:
        pass

    def wait_for(self, timeout_ms: int) -> bool:
        time.sleep(timeout_ms / 1000)
        return False

    def cancel(self) -> None:
        self.cancelled = True
        self._released.set()

    def wait(self) -> None:
        pass


def _executor(cls, timeout: float, driver: str = "threads"):
    executor = cls.__new__(cls)  # only the run path is exercised; no model needed
    executor.run_timeout = timeout
    if cls is PartitionedExecutor:
        executor._done = queue.SimpleQueue()
        executor.driver, executor.cores, executor._workers = driver, {}, None
        executor.platform = SimpleNamespace(num_devices=1)
    return executor


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_hung_single_segment_inference_times_out(driver) -> None:
    request = _HungRequest()
    plan = Plan([_Compiled(segment=SimpleNamespace(device=0), request=request)], deps=[[]], users=[[]])
    start = time.perf_counter()
    executor = _executor(PartitionedExecutor, 0.05, driver)
    with pytest.raises(ExecutionFailure, match=r"did not finish within 0.05 s") as info:
        executor.run(plan)
    assert not info.value.cacheable and request.cancelled and time.perf_counter() - start < 5
    if executor._workers is not None:
        executor._workers.stop()


def test_a_hung_hetero_inference_times_out() -> None:
    request = _HungRequest()
    with pytest.raises(ExecutionFailure, match="did not finish"):
        _executor(HeteroExecutor, 0.05).run(HeteroPlan(compiled=None, request=request))
    assert request.cancelled


_DEVICE = {
    "kind": "virtual", "ov_device": "CPU", "precision": "f32", "memory_bytes": 8 << 30,
    "peak_flops": {"f32": 5e10}, "mem_bandwidth": 1e10, "launch_overhead": 1e-5,
    "ov_config": {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False},
}  # fmt: skip


@pytest.fixture(scope="module")
def two_cpus():
    return platform_from_dict(
        {
            "name": "two-vcpu",
            "devices": [{**_DEVICE, "name": "cpu0"}, {**_DEVICE, "name": "cpu1"}],
            "default_link": {"latency": 1e-6, "bandwidth": 1e10},
        }
    )


def test_single_segment_measurement_still_runs(tiny_cnn, two_cpus) -> None:
    graph = tiny_cnn.coarsen("fused")
    backend = MeasuredBackend(tiny_cnn, graph, two_cpus, warmup=0, repeats=2, rel_ci=None, run_timeout=30)
    result = backend.evaluate(np.zeros(graph.num_groups, np.int64))
    assert result.feasible and result.samples == 2 and 0 < result.latency < 30


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_budget": "10"}, "time_budget must be a finite number"),
        ({"time_budget": float("inf")}, "time_budget"),
        ({"run_timeout": -1}, "run_timeout"),
        ({"run_timeout": float("nan")}, "run_timeout"),
        ({"seed": "0"}, "seed"),
        ({"max_compiled_ops": 0}, "max_compiled_ops"),
    ],
)
def test_measured_backend_arguments_are_checked(tiny_cnn, two_cpus, kwargs, message) -> None:
    with pytest.raises(BackendError, match=message):
        MeasuredBackend(tiny_cnn, tiny_cnn.coarsen("fused"), two_cpus, **kwargs)


def test_cache_path_that_is_a_directory_fails_at_construction(tiny_cnn, two_cpus, tmp_path) -> None:
    graph = tiny_cnn.coarsen("fused")
    with pytest.raises(BackendError, match="is a directory"):
        MeasuredBackend(tiny_cnn, graph, two_cpus, cache_path=str(tmp_path))
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(BackendError, match="is a file, not a directory"):
        MeasuredBackend(tiny_cnn, graph, two_cpus, cache_path=str(afile / "results.jsonl"))


def test_a_cache_file_that_becomes_unwritable_does_not_fail_evaluation(tmp_path) -> None:
    path = tmp_path / "sub" / "results.jsonl"
    cache = ResultCache(8, {"a": 1}, path)
    path.parent.mkdir()
    path.mkdir()  # the file's place is taken by a directory after construction
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        cache.put(np.zeros(3, np.int64), LatencyResult(latency=0.1))
    assert cache.path is None and len(cache) == 1


def _line(config: dict, **fields) -> str:
    row = {
        "type": "result", "fingerprint": fingerprint(config), "placement": [0, 1, 0], "latency": 0.01,
        "spread": 0.0, "feasible": True, "reason": "", "samples": 3,
    }  # fmt: skip
    row.update(fields)
    row["checksum"] = line_checksum(row)  # forged well enough to pass the checksum: the schema refuses it
    return json.dumps(row) + "\n"


@pytest.mark.parametrize(
    "forged",
    [
        {"feasible": "false", "latency": float("inf")},
        {"feasible": "true"},
        {"feasible": 1},
        {"latency": "0.01"},
        {"latency": float("inf")},  # "feasible" with an infinite latency
        {"feasible": False},  # infeasible with a finite latency
        {"latency": -0.01},
        {"placement": [0, 1]},  # wrong length
        {"placement": [0, 1, 7]},  # device out of range
        {"placement": [0, 1.5, 0]},
        {"samples": "3"},
        {"spread": None},
        {"reason": 5},
    ],
)
def test_result_cache_rejects_forged_lines(tmp_path, forged: dict) -> None:
    config = {"benchmark": "x"}
    path = tmp_path / "results.jsonl"
    path.write_text(_line(config, **forged) + "[" * 100_000 + "\n")  # and a hostile deep line
    cache = ResultCache(8, config, path, width=3, num_devices=2)
    assert len(cache) == 0 and cache.rejected == 1


def test_result_cache_reads_valid_lines(tmp_path) -> None:
    config = {"benchmark": "x"}
    path = tmp_path / "results.jsonl"
    path.write_text(_line(config) + _line(config, placement=[1, 1, 1], feasible=False, latency=float("inf")))
    cache = ResultCache(8, config, path, width=3, num_devices=2)
    hit = cache.get(np.array([1, 1, 1], np.int64).tobytes())
    assert len(cache) == 2 and hit is not None and not hit.feasible and cache.rejected == 0


class _Request:
    """A stand-in infer request: sleeps ``seconds``, then fails if ``fails``."""

    def __init__(self, seconds: float = 0.0, fails: bool = False) -> None:
        self.seconds, self.fails = seconds, fails

    def infer(self) -> None:
        time.sleep(self.seconds)
        if self.fails:
            raise RuntimeError("device lost")

    def cancel(self) -> None:
        pass


def _part(device: int, request: _Request) -> _Compiled:
    return _Compiled(segment=SimpleNamespace(device=device), request=request)


def test_threads_driver_waits_for_a_failed_runs_other_device() -> None:
    """After a segment fails, the next run waits for the other device's segment of the failed run to end
    instead of failing (or sharing the device with it)."""
    executor = _executor(PartitionedExecutor, 5.0, "threads")
    executor.platform = SimpleNamespace(num_devices=2)
    slow = _Request(seconds=0.3)
    failing = Plan([_part(0, _Request(fails=True)), _part(1, slow)], deps=[[], []], users=[[], []])
    with pytest.raises(ExecutionFailure, match="device lost"):
        executor.run(failing)
    start = time.perf_counter()
    assert executor.run(Plan([_part(1, _Request())], deps=[[]], users=[[]])) >= 0
    assert time.perf_counter() - start > 0.1  # it waited for the slow segment
    executor._workers.stop()


def test_threads_driver_workers_stop_when_the_executor_is_dropped() -> None:
    """An executor dropped without close() does not leave its device threads waiting until exit."""
    executor = _executor(PartitionedExecutor, 5.0, "threads")
    executor.platform = SimpleNamespace(num_devices=2)
    assert executor.run(Plan([_part(0, _Request()), _part(1, _Request())], deps=[[], []], users=[[], []])) >= 0
    threads = executor._workers.threads
    assert all(t.is_alive() for t in threads)
    del executor
    gc.collect()
    for t in threads:
        t.join(timeout=5.0)
    assert not any(t.is_alive() for t in threads)


def test_a_plan_runs_its_parts_on_their_segments_devices_unless_told() -> None:
    parts = [_part(1, _Request()), _part(0, _Request())]
    assert Plan(parts, deps=[[], []], users=[[], []]).devices == [1, 0]
    assert Plan(parts, deps=[[], []], users=[[], []], devices=[0, 0]).devices == [0, 0]
    with pytest.raises(ValueError, match="1 devices given for 2 parts"):
        Plan(parts, deps=[[], []], users=[[], []], devices=[0])
