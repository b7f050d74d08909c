"""Measuring workers on their own cores: disjoint core sets, pinning, and the worker's view of itself.

Several processes that time placements at once (the env copies of an SB3 learner's ``n_envs``, the actors
of the Ray pool) must not share cores, or each one's timings include the others' work. Each worker gets a
disjoint set of ``cores_per_worker`` cores of this process's affinity (:func:`assign_cores`), pins itself
to them before it builds anything (:func:`pin_process`: OpenVINO's threads inherit the affinity of the
thread that starts them) and then builds its env, whose ``local`` platform is built for and calibrated on
the worker's cores (:func:`~placement_gym.platforms.local.local_platform` follows the process's affinity
and keys its stored figures by the core set).

The ``local`` platform of a CPU-only machine is two 1-thread virtual CPUs: a worker with two cores runs
them on a core each (the platform of an unpinned process on a 2-core machine); a worker with one core
runs both on that core, a different platform (calibrated there, their measured contention is about 1: they
take turns), which is what :func:`assign_cores` says to use when the machine is short of cores.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from placement_gym.errors import ConfigError
from placement_gym.platforms.machine import core_span, process_cores


def cores_per_device(platform: Any) -> int:
    """Cores a measuring worker of ``platform`` needs to run its devices at once: one per 1-thread CPU
    device (two for the ``local`` platform of a CPU-only machine), at least one."""
    single = [
        d
        for d in platform.devices
        if d.ov_device == "CPU" and str(d.ov_config.get("INFERENCE_NUM_THREADS")) == "1"
    ]
    return max(1, len(single))


def assign_cores(
    workers: int,
    cores_per_worker: int,
    available: Sequence[int] | None = None,
    count_option: str = "--n-envs",
) -> list[tuple[int, ...]]:
    """Disjoint core sets, ``cores_per_worker`` cores each, for ``workers`` measuring workers, taken in
    order from ``available`` (default: this process's affinity set,
    :func:`~placement_gym.platforms.machine.process_cores`). ``count_option`` is the option that sets the
    worker count, named in the error.

    Raises:
        ConfigError: If a count is below 1, or there are fewer cores than ``workers x cores_per_worker``
            (one line saying how many are needed, how many there are and what to change).
    """
    for name, value in (("workers", workers), ("cores_per_worker", cores_per_worker)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    cores = sorted(set(process_cores() if available is None else available))
    need = workers * cores_per_worker
    if need > len(cores):
        options = []
        fit = len(cores) // workers
        if 1 <= fit < cores_per_worker:
            options.append(f"--cores-per-worker {fit} (a different platform, built on {_count(fit, 'core')})")
        if len(cores) >= cores_per_worker:
            options.append(f"{count_option} {len(cores) // cores_per_worker}")
        elif count_option == "--n-envs":
            options.append("--n-envs 1 (one process, measuring on the cores it has)")
        options.append(f"a machine with {need} cores")
        raise ConfigError(
            f"{_count(workers, 'measuring worker')} of {_count(cores_per_worker, 'core')}"
            f"{' each need' if workers > 1 else ' needs'} {need} cores, but this process may run on "
            f"{len(cores)} (cores {core_span(cores)}): use {', or '.join(options)}"
        )
    return [tuple(cores[i * cores_per_worker : (i + 1) * cores_per_worker]) for i in range(workers)]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def default_cores_per_worker(platform: str | Any, workers: int = 1) -> int:
    """Cores a process measuring on ``platform`` (a name or a :class:`~placement_gym.platforms.Platform`)
    needs: one per 1-thread CPU device (2 for the ``local`` platform of a CPU-only machine, 1 with
    accelerators, whose CPU device takes the cores it is given).

    Raises:
        ConfigError: If ``workers > 1`` processes would share the ``local`` platform's GPU or NPU.
    """
    if isinstance(platform, str) and platform == "local":
        from placement_gym.platforms.local import VIRTUAL_CPUS, local_accelerators

        accelerators = local_accelerators()
        if accelerators and workers > 1:
            raise ConfigError(
                f"{workers} measuring workers would share this machine's {', '.join(accelerators)}: pinning "
                "gives each its own CPU cores only; measure with one worker per machine (a Ray pool)"
            )
        return 1 if accelerators else VIRTUAL_CPUS
    from placement_gym.platforms import load_platform

    return cores_per_device(load_platform(platform) if isinstance(platform, str) else platform)


def measuring_layout(
    platform: str | Any,
    workers: int,
    cores_per_worker: int | None = None,
    available: Sequence[int] | None = None,
    count_option: str = "--n-envs",
) -> list[tuple[int, ...]]:
    """The core sets of ``workers`` processes that measure on ``platform``: :func:`assign_cores` with
    ``cores_per_worker`` cores each (default: :func:`default_cores_per_worker`).

    Raises:
        ConfigError: If there are too few cores (see :func:`assign_cores`), or several workers would share
            the ``local`` platform's GPU or NPU.
    """
    default = default_cores_per_worker(platform, workers)
    per = default if cores_per_worker is None else cores_per_worker
    return assign_cores(workers, per, available, count_option)


def pin_process(cores: Sequence[int]) -> None:
    """Restrict every thread of this process (and the threads it starts later) to ``cores`` (Linux).

    Raises:
        ConfigError: If this platform cannot pin processes, or ``cores`` is empty.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError("pinning a measuring worker to cores needs Linux (os.sched_setaffinity)")
    if not cores:
        raise ConfigError("a measuring worker needs at least one core to be pinned to")
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # the thread ended meanwhile
            pass


class MeasuringWorker(gym.Wrapper):
    """An env copy built inside a worker process pinned to ``cores`` (see :func:`pinned_env`).

    Attributes:
        cores: The cores the worker was pinned to.
    """

    def __init__(self, env: gym.Env, cores: tuple[int, ...]) -> None:
        super().__init__(env)
        self.cores = cores

    def describe(self) -> dict[str, Any]:
        """The worker's process id, assigned cores, affinity now and its platform's description."""
        problem = getattr(self.env.unwrapped, "problem", None)
        return {
            "pid": os.getpid(),
            "cores": list(self.cores),
            "affinity": list(process_cores()),
            "platform": None if problem is None else problem.platform.description,
        }


def pinned_env(blob: bytes, cores: tuple[int, ...]) -> MeasuringWorker:
    """Pin this process to ``cores``, then rebuild the pickled env ``blob`` here (so its ``local`` platform
    is the one of these cores): what one worker process of a vector env runs first."""
    pin_process(cores)
    return MeasuringWorker(pickle.loads(blob), tuple(cores))
