"""placement-gym: device placement of neural-network graphs as a reinforcement-learning benchmark.

Importing the package registers the Gymnasium environments:

* ``DevicePlacement-<model>-v0``: reward measured with OpenVINO on the ``local`` platform (nondeterministic);
* ``DevicePlacementSim-<model>-v0``: reward from the simulator on the ``cpu-dgpu`` reference platform;
* ``DevicePlacement-v0``: any ``model=`` (zoo name, IR or ONNX path), ``platform=``, ``backend=``,
  ``coarsening=``.

``<model>`` is one of ``inception_v3``, ``resnet50``, ``bert``.

:class:`PlacementProblem` (graph, platform, backend, reward; validation, counting, single and batched
evaluation) is what methods work on; :func:`problem_of` returns the problem behind an env.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

_ENTRY = "placement_gym.envs.device_placement:DevicePlacementEnv"
BENCHMARK_MODELS = ("inception_v3", "resnet50", "bert")  # kept equal to zoo.BENCHMARK_MODELS by a test
SIM_PLATFORM = "cpu-dgpu"


def _register_all() -> list[str]:
    ids = []
    specs = [("DevicePlacement-v0", {"platform": "local", "backend": "measured"}, True)]
    for model in BENCHMARK_MODELS:
        specs.append(
            (
                f"DevicePlacement-{model}-v0",
                {"model": model, "platform": "local", "backend": "measured"},
                True,
            )
        )
        specs.append(
            (
                f"DevicePlacementSim-{model}-v0",
                {"model": model, "platform": SIM_PLATFORM, "backend": "simulated"},
                False,
            )
        )
    for env_id, kwargs, nondeterministic in specs:
        if env_id not in registry:
            register(id=env_id, entry_point=_ENTRY, kwargs=kwargs, nondeterministic=nondeterministic)
        ids.append(env_id)
    return ids


ENV_IDS: tuple[str, ...] = tuple(_register_all())



def __getattr__(name: str):
    # The problem pulls in OpenVINO and numba: import it on first use, not when registering the IDs.
    if name in ("PlacementProblem", "problem_of", "Evaluation"):
        from placement_gym import problem

        return getattr(problem, name)
    raise AttributeError(f"module 'placement_gym' has no attribute {name!r}")


__all__ = ["BENCHMARK_MODELS", "ENV_IDS", "SIM_PLATFORM", "Evaluation", "PlacementProblem", "__version__", "problem_of"]
