"""The registered env IDs: one scheme for every task and MDP, the old IDs as aliases, and :func:`env_id`.

Every task's ID is ``DevicePlacement<MDP>-<model>-<platform>-<backend>-v<N>``:

* ``<MDP>``: nothing for the one-shot MDP (one action places every group), ``Sequential`` for the
  sequential one (``mode="sequential"``: one group per step), ``Improve`` for the improvement MDP
  (:class:`~placement_gym.envs.DevicePlacementImproveEnv`: start from HEFT, move one group per step);
* ``<platform>``: the platform's name with ``-`` written ``_`` (``cpu_igpu``, ``cpu_dgpu_v0``, ``local``);
* ``<backend>``: ``sim`` (simulated) or ``measured``;
* ``v<N>``: the version of the env behind that name, counting its own changes. A name starts at ``v0``;
  the measured IDs keep the versions of the IDs they replace (``v0`` the fixed 5 runs per placement,
  ``v1`` the adaptive repeats). A new calibration of a platform is a new platform name
  (``cpu-dgpu-v0`` is the first calibration of ``cpu-dgpu``), so a new name, not a new version.

``DevicePlacement<MDP>-v0`` takes everything as arguments. The IDs of the first scheme stay registered
as aliases (:data:`ALIASES`, old ID -> its ID in this scheme): an alias's spec shares its twin's entry
point, keyword arguments (the same dict) and nondeterminism, so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import register, registry

_ENTRY = "placement_gym.envs.device_placement:DevicePlacementEnv"
_IMPROVE_ENTRY = "placement_gym.envs.improve:DevicePlacementImproveEnv"
BENCHMARK_MODELS = ("inception_v3", "resnet50", "bert")  # kept equal to zoo.BENCHMARK_MODELS by a test
#: Model families kept out of training for zero-shot transfer (kept equal to zoo.HELD_OUT_MODELS by a test).
HELD_OUT_MODELS = ("vit_b16", "convnext_t", "swin_t", "mobilevit_s", "whisper_tiny")
SIM_PLATFORM = "cpu-dgpu"
#: Platform of each version of the old ``DevicePlacementSim-<model>-v<N>`` (aliases of
#: ``DevicePlacement-<model>-cpu_dgpu-sim-v0`` and ``DevicePlacement-<model>-cpu_dgpu_v0-sim-v0``).
SIM_PLATFORM_VERSIONS = {0: "cpu-dgpu-v0", 1: SIM_PLATFORM}
#: The suite's platforms besides :data:`SIM_PLATFORM`.
SUITE_PLATFORMS = ("cpu-igpu", "multi-accel", "model-parallel")
#: Measured-backend settings of ``DevicePlacement-<model>-local-measured-v0``: the protocol before the
#: adaptive repeats.
MEASURED_V0_PROTOCOL = {"rel_ci": None, "repeats": 5}
#: Platforms of the held-out families' IDs (no memory-constrained tasks: those need a stored baseline split).
HELD_OUT_PLATFORMS = ("cpu-igpu", "multi-accel")
#: Platforms of the zoo models' suite tasks: ``cpu-dgpu`` and the suite's.
IMPROVE_PLATFORMS = (SIM_PLATFORM, *SUITE_PLATFORMS)
#: The mask-binding tasks (model, platform), not in the train split: a small iGPU memory makes the memory
#: masks block (group, device) pairs. IDs ``DevicePlacement<MDP>-<model>-<platform>-sim-v0``.
MASKED_TASK_PAIRS: tuple[tuple[str, str], ...] = (
    ("resnet50", "cpu-igpu-lowmem"),
    ("whisper_tiny", "cpu-igpu-carveout"),
)
#: Platforms of the mask-binding tasks.
MASKED_PLATFORMS = tuple(dict.fromkeys(p for _, p in MASKED_TASK_PAIRS))
#: The models of the mask-binding tasks (those with a proven optimum there).
MASKED_MODELS = tuple(dict.fromkeys(m for m, _ in MASKED_TASK_PAIRS))
#: The MDPs every simulated task is registered for, and the ID prefix of each.
MDP_PREFIXES = {
    "oneshot": "DevicePlacement",
    "sequential": "DevicePlacementSequential",
    "improve": "DevicePlacementImprove",
}
MDPS = tuple(MDP_PREFIXES)
#: The backend names and their token in an ID.
BACKEND_TOKENS = {"simulated": "sim", "measured": "measured"}
_ENTRIES = {"oneshot": _ENTRY, "sequential": _ENTRY, "improve": _IMPROVE_ENTRY}
_MDP_KWARGS: dict[str, dict[str, Any]] = {"oneshot": {}, "sequential": {"mode": "sequential"}, "improve": {}}

#: ``(mdp, backend, model, platform)`` -> ``{version: ID}`` of every registered task ID of the scheme.
_TASK_IDS: dict[tuple[str, str, str, str], dict[int, str]] = {}


def simulated_tasks() -> list[tuple[str, str]]:
    """``(model, platform)`` of every simulated task registered for every MDP: the zoo models on ``cpu-dgpu``
    and the suite's platforms, the mask-binding tasks and the held-out families' tasks."""
    tasks = [(m, p) for m in BENCHMARK_MODELS for p in IMPROVE_PLATFORMS]
    tasks += list(MASKED_TASK_PAIRS)
    tasks += [(m, p) for m in HELD_OUT_MODELS for p in HELD_OUT_PLATFORMS]
    return tasks


def _name(model: str, platform: str, mdp: str, backend: str) -> str:
    return f"{MDP_PREFIXES[mdp]}-{model}-{platform.replace('-', '_')}-{BACKEND_TOKENS[backend]}"


def env_id(
    model: str, platform: str, mdp: str = "oneshot", backend: str = "simulated", version: int | None = None
) -> str:
    """The registered ID of ``model`` on ``platform`` for ``mdp`` on ``backend`` (newest version unless
    ``version`` is given), e.g. ``env_id("bert", "cpu-igpu", mdp="improve")`` is
    ``"DevicePlacementImprove-bert-cpu_igpu-sim-v0"``.

    Args:
        model: Zoo model name (``bert``...).
        platform: Platform name (``cpu-igpu``; ``local`` for the measured IDs).
        mdp: ``"oneshot"``, ``"sequential"`` or ``"improve"``.
        backend: ``"simulated"`` or ``"measured"``.
        version: The ID's version; ``None`` for the newest.

    Raises:
        UnknownNameError: If the MDP, the backend, the task or the version is not registered.
    """
    from placement_gym.errors import UnknownNameError

    if mdp not in MDP_PREFIXES:
        raise UnknownNameError("MDP", mdp, MDPS)
    if backend not in BACKEND_TOKENS:
        raise UnknownNameError("backend", backend, BACKEND_TOKENS)
    versions = _TASK_IDS.get((mdp, backend, model, platform.replace("_", "-")))
    if not versions:
        known = [f"{m} on {p}" for (d, b, m, p) in _TASK_IDS if (d, b) == (mdp, backend)]
        raise UnknownNameError(f"{mdp} {backend} task", f"{model} on {platform}", known)
    if version is None:
        return versions[max(versions)]
    if version not in versions:
        raise UnknownNameError(
            f"version of {_name(model, platform, mdp, backend)}", f"v{version}", [f"v{v}" for v in versions]
        )
    return versions[version]


def suite_id(model: str, platform: str) -> str:
    """The registered one-shot ID of the simulated task ``model`` on ``platform`` (:func:`env_id`'s default)."""
    return env_id(model, platform)


def improve_id(model: str, platform: str) -> str:
    """The registered improvement-MDP ID of the simulated task ``model`` on ``platform``."""
    return env_id(model, platform, mdp="improve")


def _register(env_id_: str, entry_point: str, kwargs: dict[str, Any], nondeterministic: bool) -> None:
    if env_id_ not in registry:
        register(id=env_id_, entry_point=entry_point, kwargs=kwargs, nondeterministic=nondeterministic)


def _register_task(
    mdp: str, backend: str, model: str, platform: str, version: int, kwargs: dict[str, Any]
) -> str:
    env_id_ = f"{_name(model, platform, mdp, backend)}-v{version}"
    kwargs = {"model": model, "platform": platform, "backend": backend, **kwargs, **_MDP_KWARGS[mdp]}
    _register(env_id_, _ENTRIES[mdp], kwargs, backend == "measured")
    _TASK_IDS.setdefault((mdp, backend, model, platform), {})[version] = env_id_
    return env_id_


def _alias(old: str, new: str) -> None:
    """Register ``old`` with ``new``'s spec: the same entry point, keyword arguments and nondeterminism."""
    spec = registry[new]
    _register(old, str(spec.entry_point), spec.kwargs, spec.nondeterministic)
    ALIASES[old] = new


#: Every old ID -> its ID in the scheme (both registered; see docs/environments.md).
ALIASES: dict[str, str] = {}


def register_all() -> tuple[list[str], list[str], list[str]]:
    """Register every ID (once); return the one-shot, sequential and improvement IDs, aliases included."""
    ids: dict[str, list[str]] = {mdp: [] for mdp in MDPS}
    generic = {"platform": "local", "backend": "measured"}
    for mdp in MDPS:
        name = f"{MDP_PREFIXES[mdp]}-v0"
        _register(name, _ENTRIES[mdp], {**generic, **_MDP_KWARGS[mdp]}, True)
        ids[mdp].append(name)
    for model in BENCHMARK_MODELS:
        measured = {0: {"backend_kwargs": MEASURED_V0_PROTOCOL}, 1: {}}
        for version, kwargs in measured.items():
            new = _register_task("oneshot", "measured", model, "local", version, kwargs)
            _alias(f"DevicePlacement-{model}-v{version}", new)
            ids["oneshot"] += [new, f"DevicePlacement-{model}-v{version}"]
        for platform in SIM_PLATFORM_VERSIONS.values():
            if platform != SIM_PLATFORM:  # the first calibration: one-shot only, kept for old results
                ids["oneshot"].append(_register_task("oneshot", "simulated", model, platform, 0, {}))
    for mdp in MDPS:
        for model, platform in simulated_tasks():
            ids[mdp].append(_register_task(mdp, "simulated", model, platform, 0, {}))
    for model in BENCHMARK_MODELS:
        for version, platform in SIM_PLATFORM_VERSIONS.items():
            _alias(f"DevicePlacementSim-{model}-v{version}", env_id(model, platform))
            ids["oneshot"].append(f"DevicePlacementSim-{model}-v{version}")
    return ids["oneshot"], ids["sequential"], ids["improve"]
