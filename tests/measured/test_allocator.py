"""Tests of the malloc arena cap (:mod:`placement_gym.measured.allocator`): what it asks glibc for, that a
cap in the environment is left alone, and that importing :mod:`placement_gym.measured` applies it in time
(before the threads OpenVINO and the executor start have made arenas of their own)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from placement_gym.measured.allocator import M_ARENA_MAX, arena_cap, limit_malloc_arenas


class _FakeLibc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_cap_is_one_arena_per_cpu_at_least_two(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    libc = _FakeLibc()
    assert limit_malloc_arenas(libc) == arena_cap() == max(2, len(os.sched_getaffinity(0)))
    assert libc.calls == [(M_ARENA_MAX, arena_cap())]


def test_a_cap_in_the_environment_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    libc = _FakeLibc()
    assert limit_malloc_arenas(libc) is None
    assert libc.calls == []


def test_a_refused_cap_is_none(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas(_FakeLibc(answer=0)) is None


_COUNT_ARENAS = textwrap.dedent(
    """
    import ctypes, os, tempfile, threading
    import placement_gym.measured as measured
    import openvino  # noqa: F401

    def allocate():
        keep = [bytes(4000 + i) for i in range(200)]  # malloc'd on this thread (above pymalloc's sizes)
        barrier.wait()

    barrier = threading.Barrier(24)
    threads = [threading.Thread(target=allocate) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    path = os.path.join(tempfile.mkdtemp(), "info.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    print(measured.MALLOC_ARENAS, open(path).read().count("<heap nr="))
    """
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas")
def test_importing_measured_caps_the_arenas_of_later_threads():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", _COUNT_ARENAS]
    run = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    cap, arenas = map(int, run.stdout.split())
    assert cap == arena_cap()
    # 24 threads allocating at once: without the cap, one arena each up to glibc's default (16 on two CPUs)
    assert arenas <= cap
