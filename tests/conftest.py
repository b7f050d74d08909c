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
# The suite calibrates on whatever machine runs it, often beside other work: store calibrations made on a
# busy host (recorded as such) instead of failing tests that are not about it. The tests of that check
# (tests/platforms/test_quiet.py) set it themselves; PLACEMENT_GYM_ALLOW_BUSY=0 keeps the check on for a run.
os.environ.setdefault("PLACEMENT_GYM_ALLOW_BUSY", "1")
# Zoo models are converted in this process, not in a child that imports PyTorch and OpenVINO afresh (several
# seconds a conversion, paid for every model in every empty cache the suite makes). The tests of the child
# process and of its memory purpose (tests/zoo/test_zoo.py) unset it themselves.
os.environ.setdefault("PLACEMENT_GYM_CONVERT_IN_PROCESS", "1")


@pytest.fixture(scope="session")
def tiny_cnn():
    from placement_gym.benchmarks import load_benchmark

    return load_benchmark("tiny_cnn")


@pytest.fixture(scope="session")
def tiny_bert():
    from placement_gym.benchmarks import load_benchmark

    return load_benchmark("tiny_bert")
