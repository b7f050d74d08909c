"""placement-gym: device placement of neural-network graphs as a reinforcement-learning benchmark.

Importing the package registers the Gymnasium environments, one ID per task and MDP
(:mod:`placement_gym.registration`): ``DevicePlacement<MDP>-<model>-<platform>-<backend>-v<N>``, ``<MDP>``
nothing (one-shot), ``Sequential`` or ``Improve``, ``<platform>`` the platform's name with ``_`` for ``-``,
``<backend>`` ``sim`` or ``measured``; :func:`env_id` returns the ID of a task:

* ``DevicePlacement<MDP>-<model>-<platform>-sim-v0``: the simulated tasks, for every MDP: the zoo models
  ``inception_v3``, ``resnet50``, ``bert`` on ``cpu_dgpu`` (CPU + discrete GPU, calibrated against HSDAG's
  published speedups), ``cpu_igpu`` (CPU + integrated GPU), ``multi_accel`` (CPU + 2 GPUs + NPU) and
  ``model_parallel`` (CPU + 2 GPUs, each too small for the model: the placement must split it), reference
  optima in :mod:`placement_gym.tasks`; the mask-binding tasks (:data:`MASKED_TASK_PAIRS`, not in the
  protocol's train split): ``resnet50`` on ``cpu_igpu_lowmem`` (an iGPU memory of 8% of the weights: the
  masks block its largest groups, but hardly any placement fits) and ``whisper_tiny`` on
  ``cpu_igpu_carveout`` (twice the weights: the masks block the four groups whose outputs exceed it, and
  the placements they allow fit); the held-out families (:data:`HELD_OUT_MODELS`, for
  zero-shot transfer: not for training) on ``cpu_igpu`` and ``multi_accel``;
* ``DevicePlacement-<model>-cpu_dgpu_v0-sim-v0``: one-shot on ``cpu-dgpu-v0``, the first calibration of
  ``cpu-dgpu`` (its GPU 4.3-4.6x faster than the CPU), kept so that old results stay reproducible;
* ``DevicePlacement-<model>-local-measured-v1``: reward measured with OpenVINO on the ``local`` platform
  (nondeterministic), each latency the median of runs repeated until its 95% interval is within +-2%;
  ``-v0``: the same with the first protocol (a fixed 5 runs, :data:`MEASURED_V0_PROTOCOL`);
* ``DevicePlacement<MDP>-v0``: any ``model=`` (zoo name, IR or ONNX path), ``platform=``, ``backend=``,
  ``coarsening=``.

The IDs of the first scheme (``DevicePlacementSim-<model>-v<N>``, ``DevicePlacement-<model>-v<N>``) stay
registered as aliases of their twins (:data:`ALIASES`). :data:`ENV_IDS` lists the one-shot IDs,
:data:`SEQUENTIAL_IDS` the sequential ones, :data:`IMPROVE_IDS` the improvement ones.

:class:`PlacementProblem` (graph, platform, backend, reward; validation, counting, single and batched
evaluation) is what methods work on; :func:`problem_of` returns the problem behind an env.
"""

from __future__ import annotations

from placement_gym.registration import (
    ALIASES,
    BACKEND_TOKENS,
    BENCHMARK_MODELS,
    HELD_OUT_MODELS,
    HELD_OUT_PLATFORMS,
    IMPROVE_PLATFORMS,
    MASKED_MODELS,
    MASKED_PLATFORMS,
    MASKED_TASK_PAIRS,
    MDPS,
    MEASURED_V0_PROTOCOL,
    SIM_PLATFORM,
    SIM_PLATFORM_VERSIONS,
    SUITE_PLATFORMS,
    env_id,
    improve_id,
    register_all,
    simulated_tasks,
    suite_id,
)

__version__ = "0.1.0"

_ids = register_all()
#: The one-shot IDs (:class:`~placement_gym.envs.DevicePlacementEnv`), aliases included.
ENV_IDS: tuple[str, ...] = tuple(_ids[0])
#: The sequential-MDP IDs (``mode="sequential"``).
SEQUENTIAL_IDS: tuple[str, ...] = tuple(_ids[1])
#: The improvement-MDP IDs (:class:`~placement_gym.envs.DevicePlacementImproveEnv`).
IMPROVE_IDS: tuple[str, ...] = tuple(_ids[2])
del _ids


def __getattr__(name: str):
    # The problem pulls in OpenVINO and numba: import it on first use, not when registering the IDs.
    if name in ("PlacementProblem", "problem_of", "Evaluation"):
        from placement_gym import problem

        return getattr(problem, name)
    raise AttributeError(f"module 'placement_gym' has no attribute {name!r}")


__all__ = [
    "ALIASES",
    "BACKEND_TOKENS",
    "BENCHMARK_MODELS",
    "ENV_IDS",
    "HELD_OUT_MODELS",
    "HELD_OUT_PLATFORMS",
    "MASKED_MODELS",
    "MASKED_PLATFORMS",
    "MASKED_TASK_PAIRS",
    "MDPS",
    "MEASURED_V0_PROTOCOL",
    "IMPROVE_IDS",
    "IMPROVE_PLATFORMS",
    "SIM_PLATFORM",
    "SEQUENTIAL_IDS",
    "SIM_PLATFORM_VERSIONS",
    "SUITE_PLATFORMS",
    "Evaluation",
    "PlacementProblem",
    "problem_of",
    "__version__",
    "env_id",
    "improve_id",
    "simulated_tasks",
    "suite_id",
]
