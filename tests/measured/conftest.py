"""Fixtures shared by the measured-backend tests."""

from __future__ import annotations

import pytest

from tests.measured.test_backend import _platform


@pytest.fixture(scope="module")
def platform():
    """The two-virtual-CPU platform the measured tests run on (one per test module)."""
    return _platform()
