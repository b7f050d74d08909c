"""Shared fixtures: a session-wide model cache so converted IR is reused across tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Use the cache CI or the developer points at, else one private to this test session's temp area.
if "PLACEMENT_GYM_CACHE" not in os.environ:
    os.environ["PLACEMENT_GYM_CACHE"] = str(
        Path(os.environ.get("TMPDIR", "/tmp")) / "placement_gym_test_cache"
    )


@pytest.fixture(scope="session")
def tiny_cnn():
    from placement_gym.benchmarks import load_benchmark

    return load_benchmark("tiny_cnn")


@pytest.fixture(scope="session")
def tiny_bert():
    from placement_gym.benchmarks import load_benchmark

    return load_benchmark("tiny_bert")
