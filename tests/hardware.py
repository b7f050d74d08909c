"""Probes of what the test machine can do right now, for tests that depend on real parallel hardware."""

from __future__ import annotations

import time

import numpy as np


def parallel_ratio() -> float:
    """2-thread over 1-thread time of one OpenVINO CPU inference right now (ideal 0.5, 1.0: no parallelism).

    A VM's two vCPUs may share one physical core under contention (another job on the host); then no
    two devices can overlap and a concurrency test measures the host, not placement-gym.
    """
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([64, 512], ov.Type.f32, name="x")
    y = x
    for _ in range(10):
        y = ops.matmul(
            y, ops.constant(rng.standard_normal((512, 512)).astype(np.float32) * 0.04), False, False
        )
    model = ov.Model([y], [x], "matmuls")
    core = ov.Core()
    data = ov.Tensor(np.ones((64, 512), dtype=np.float32))

    def best_time(threads: int) -> float:
        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
        request = core.compile_model(model, "CPU", config).create_infer_request()
        request.set_input_tensor(data)
        request.infer()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(20):
                request.infer()
            times.append(time.perf_counter() - t0)
        return min(times)

    return best_time(2) / best_time(1)


def two_threads_run_in_parallel(threshold: float = 0.7) -> bool:
    """Whether a 2-thread OpenVINO CPU inference runs clearly faster than a 1-thread one right now: its
    time is below ``threshold`` x the 1-thread time (see :func:`parallel_ratio`)."""
    return parallel_ratio() < threshold
