"""placement-gym: device placement of neural-network graphs as a reinforcement-learning benchmark.

Importing the package registers the Gymnasium environments:

* ``DevicePlacement-<model>-v1``: reward measured with OpenVINO on the ``local`` platform (nondeterministic),
  each latency the median of runs repeated until its 95% interval is within +-2%;
  ``DevicePlacement-<model>-v0``: the same with the first protocol (a fixed 5 runs,
  :data:`MEASURED_V0_PROTOCOL`), kept so that old results stay reproducible;
* ``DevicePlacementSim-<model>-v1``: reward from the simulator on the ``cpu-dgpu`` reference platform
  (CPU + discrete GPU, calibrated against HSDAG's published speedups);
* ``DevicePlacementSim-<model>-v0``: the same on ``cpu-dgpu-v0``, the platform's first calibration (its
  GPU 4.3-4.6x faster than the CPU), kept so that old results stay reproducible;
* ``DevicePlacement-<model>-<platform>-sim-v0``: the task suite where placement matters, simulated, on
  ``cpu_igpu`` (CPU + integrated GPU), ``multi_accel`` (CPU + 2 GPUs + NPU) and ``model_parallel`` (CPU +
  2 GPUs, each too small for the model: the placement must split it); reference optima in
  :mod:`placement_gym.tasks`; and ``resnet50`` on ``cpu_igpu_lowmem`` (:data:`MASKED_PLATFORMS`:
  ``cpu-igpu`` with an iGPU memory of 8% of the model's weights, so the memory masks block the largest
  groups), the mask-binding task, not in the protocol's train split;
* ``DevicePlacement-v0``: any ``model=`` (zoo name, IR or ONNX path), ``platform=``, ``backend=``,
  ``coarsening=``;
* ``DevicePlacementImprove-<model>-<platform>-sim-v0`` (:data:`IMPROVE_IDS`): the improvement MDP
  (:class:`~placement_gym.envs.DevicePlacementImproveEnv`: start from HEFT, move one group per step) on the
  12 suite tasks (``<platform>`` in ``cpu_dgpu``, ``cpu_igpu``, ``multi_accel``, ``model_parallel``) and the
  held-out families' tasks; ``DevicePlacementImprove-v0``: any arguments.

``<model>`` is one of ``inception_v3``, ``resnet50``, ``bert``. The held-out families ``vit_b16`` and
``convnext_t`` (:data:`HELD_OUT_MODELS`, for zero-shot transfer: not for training) have only the suite IDs
``DevicePlacement-<model>-<cpu_igpu|multi_accel>-sim-v0`` (and their ``DevicePlacementImprove`` twins).
:data:`ENV_IDS` lists the placement IDs, :data:`IMPROVE_IDS` the improvement IDs.

:class:`PlacementProblem` (graph, platform, backend, reward; validation, counting, single and batched
evaluation) is what methods work on; :func:`problem_of` returns the problem behind an env.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

_ENTRY = "placement_gym.envs.device_placement:DevicePlacementEnv"
_IMPROVE_ENTRY = "placement_gym.envs.improve:DevicePlacementImproveEnv"
BENCHMARK_MODELS = ("inception_v3", "resnet50", "bert")  # kept equal to zoo.BENCHMARK_MODELS by a test
#: Model families kept out of training for zero-shot transfer (kept equal to zoo.HELD_OUT_MODELS by a test).
HELD_OUT_MODELS = ("vit_b16", "convnext_t", "swin_t", "mobilevit_s", "whisper_tiny")
SIM_PLATFORM = "cpu-dgpu"
#: Platform of each version of ``DevicePlacementSim-<model>-v<N>``.
SIM_PLATFORM_VERSIONS = {0: "cpu-dgpu-v0", 1: SIM_PLATFORM}
#: Platforms of the suite ``DevicePlacement-<model>-<platform with _>-sim-v0``.
SUITE_PLATFORMS = ("cpu-igpu", "multi-accel", "model-parallel")
#: Measured-backend settings of ``DevicePlacement-<model>-v0``: the protocol before the adaptive repeats.
MEASURED_V0_PROTOCOL = {"rel_ci": None, "repeats": 5}
#: Platforms of the held-out families' IDs (no memory-constrained tasks: those need a stored baseline split).
HELD_OUT_PLATFORMS = ("cpu-igpu", "multi-accel")
#: Platforms of the improvement IDs of the zoo models: ``cpu-dgpu`` (``DevicePlacementSim-<model>-v1``'s) and
#: the suite's.
IMPROVE_PLATFORMS = (SIM_PLATFORM, *SUITE_PLATFORMS)
#: Platform of the mask-binding tasks (its small iGPU memory blocks the largest groups), not in the train
#: split: ``DevicePlacement-<model>-cpu_igpu_lowmem-sim-v0`` and its ``DevicePlacementImprove`` twin.
MASKED_PLATFORMS = ("cpu-igpu-lowmem",)
#: The models of the mask-binding tasks (those with a proven optimum there).
MASKED_MODELS = ("resnet50",)


def suite_id(model: str, platform: str) -> str:
    """The registered ID of the suite task ``model`` on ``platform``."""
    return f"DevicePlacement-{model}-{platform.replace('-', '_')}-sim-v0"


def improve_id(model: str, platform: str) -> str:
    """The registered ID of the improvement MDP on the simulated task ``model`` on ``platform``."""
    return f"DevicePlacementImprove-{model}-{platform.replace('-', '_')}-sim-v0"


def _register_all() -> list[str]:
    ids = []
    specs = [("DevicePlacement-v0", {"platform": "local", "backend": "measured"}, True)]
    for model in BENCHMARK_MODELS:
        measured = {"model": model, "platform": "local", "backend": "measured"}
        specs.append((f"DevicePlacement-{model}-v0", {**measured, "backend_kwargs": MEASURED_V0_PROTOCOL}, True))
        specs.append((f"DevicePlacement-{model}-v1", measured, True))
        for version, platform in SIM_PLATFORM_VERSIONS.items():
            sim = {"model": model, "platform": platform, "backend": "simulated"}
            specs.append((f"DevicePlacementSim-{model}-v{version}", sim, False))
        for platform in SUITE_PLATFORMS + (MASKED_PLATFORMS if model in MASKED_MODELS else ()):
            sim = {"model": model, "platform": platform, "backend": "simulated"}
            specs.append((suite_id(model, platform), sim, False))
    for model in HELD_OUT_MODELS:
        for platform in HELD_OUT_PLATFORMS:
            sim = {"model": model, "platform": platform, "backend": "simulated"}
            specs.append((suite_id(model, platform), sim, False))
    for env_id, kwargs, nondeterministic in specs:
        if env_id not in registry:
            register(id=env_id, entry_point=_ENTRY, kwargs=kwargs, nondeterministic=nondeterministic)
        ids.append(env_id)
    return ids


def _register_improve() -> list[str]:
    tasks = [(m, p) for m in BENCHMARK_MODELS for p in IMPROVE_PLATFORMS]
    tasks += [(m, p) for m in MASKED_MODELS for p in MASKED_PLATFORMS]
    tasks += [(m, p) for m in HELD_OUT_MODELS for p in HELD_OUT_PLATFORMS]
    specs = [("DevicePlacementImprove-v0", {"platform": "local", "backend": "measured"}, True)]
    for model, platform in tasks:
        sim = {"model": model, "platform": platform, "backend": "simulated"}
        specs.append((improve_id(model, platform), sim, False))
    for env_id, kwargs, nondeterministic in specs:
        if env_id not in registry:
            register(id=env_id, entry_point=_IMPROVE_ENTRY, kwargs=kwargs, nondeterministic=nondeterministic)
    return [env_id for env_id, _, _ in specs]


ENV_IDS: tuple[str, ...] = tuple(_register_all())
#: The improvement-MDP IDs (:class:`~placement_gym.envs.DevicePlacementImproveEnv`).
IMPROVE_IDS: tuple[str, ...] = tuple(_register_improve())


def __getattr__(name: str):
    # The problem pulls in OpenVINO and numba: import it on first use, not when registering the IDs.
    if name in ("PlacementProblem", "problem_of", "Evaluation"):
        from placement_gym import problem

        return getattr(problem, name)
    raise AttributeError(f"module 'placement_gym' has no attribute {name!r}")



__all__ = [
    "BENCHMARK_MODELS",
    "ENV_IDS",
    "HELD_OUT_MODELS",
    "HELD_OUT_PLATFORMS",
    "MASKED_MODELS",
    "MASKED_PLATFORMS",
    "IMPROVE_IDS",
    "IMPROVE_PLATFORMS",
    "SIM_PLATFORM",
    "SIM_PLATFORM_VERSIONS",
    "SUITE_PLATFORMS",
    "Evaluation",
    "PlacementProblem",
    "problem_of",
    "__version__",
    "improve_id",
    "suite_id",
]
