"""Fixtures shared by the agent tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Small networks: one thread is faster and makes results independent of the core count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
