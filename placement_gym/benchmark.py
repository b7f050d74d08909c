"""Benchmark any agent under the protocol: ``evaluate(agent, tasks=..., budget=..., seeds=...)``.

An agent is either

* an object with ``place(target, budget=..., seed=...)`` (a ``agents.base.PlacementMethod`` instance, or
  anything shaped like one) returning a placement or a result with a ``placement`` attribute;
* such a class (a ``PlacementMethod`` subclass): a fresh instance, built without arguments, for each run;
* a plain callable ``place(problem, budget, seed) -> placement``;
* an agent that steps a Gymnasium env, ``train(env, budget, seed)`` (or ``train(envs, ...)`` for a vector
  env), as a function or a method: the protocol builds the env and ends its episodes with a truncation when
  the budget is spent (:mod:`placement_gym.env_agents`; Stable-Baselines3 algorithms by spec);
* or a method spec as text (``"heft"``, ``"milp:time_limit=30"``, ``"stable_baselines3:PPO"``).

Each (task, seed) is one run on a fresh :class:`~placement_gym.problem.PlacementProblem` inside a
:class:`~placement_gym.budget.Run` of ``budget`` distinct placements: a repeat is free, a new placement
past the budget is refused by the problem (:class:`~placement_gym.errors.BudgetExhaustedError`, which ends
the run: its row then holds the best placement the agent evaluated, ``extra["stopped_by_budget"]``); so
does a stall (:class:`~placement_gym.errors.RunStalledError`, ``extra["stalled"]``; every row records its
evaluation requests, repeats included, as ``extra["env_steps"]``). The
placement the agent returns is evaluated once more after the run (free if the agent evaluated it; outside
the budget otherwise: the agent never sees that latency) and its latency and normalised score make the
row (:class:`~placement_gym.results.ResultRow`).

    from placement_gym.benchmark import evaluate
    rows = evaluate(my_place, tasks=["train"], tier="standard", out="results/mine")
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym import protocol, sealing
from placement_gym.budget import Run, TrackerListener
from placement_gym.env_agents import is_env_agent, train_in_env
from placement_gym.errors import (
    AgentFailedError,
    BudgetExhaustedError,
    ConfigError,
    ProtocolAccessError,
    RunStalledError,
    UnknownNameError,
)
from placement_gym.platforms import Platform
from placement_gym.problem import PlacementProblem, problem_of
from placement_gym.results import (
    ResultRow,
    ResultStore,
    cell_key,
    library_versions,
    module_versions,
    thin_history,
)
from placement_gym.tasks import fresh_score
from placement_gym.view import TaskView

#: A plain-callable agent: ``place(problem, budget, seed) -> placement``.
PlaceFunction = Callable[[PlacementProblem, "int | None", int], Any]


@dataclass
class Outcome:
    """What one run of an agent gave.

    Attributes:
        placement: The ``(G,)`` placement the agent returned (its best evaluated one if it returned none).
        latency: That placement's latency, seconds.
        evaluations: Distinct placements the agent evaluated.
        wall_time: Seconds the agent ran.
        history: ``(evaluations, best latency so far)`` after each distinct placement.
        extra: The agent's extras (of a ``PlacementResult``) and ``stopped_by_budget``.
    """

    placement: np.ndarray
    latency: float
    evaluations: int
    wall_time: float
    history: list[tuple[int, float]]
    extra: dict[str, Any] = field(default_factory=dict)


def check_agent(agent: Any) -> None:
    """Refuse what is neither an object with ``place`` nor a callable ``place(problem, budget, seed)``.

    Raises:
        ConfigError: Naming what was given and what is expected.
    """
    if is_env_agent(agent):
        return
    if inspect.isclass(agent):
        if not callable(getattr(agent, "place", None)):
            raise ConfigError(
                f"agent {agent.__name__} is a class without a place() method: give a class or instance with "
                "place(target, budget=, seed=) or train(env, budget, seed), or a function "
                "place(problem, budget, seed) -> placement"
            )
        return
    if hasattr(agent, "place") and callable(agent.place):
        return
    if not callable(agent):
        raise ConfigError(
            f"agent {agent!r} is neither an object with place(target, budget=, seed=) nor a callable "
            "place(problem, budget, seed) -> placement"
        )


def agent_track(agent: Any) -> str:
    """The track an agent declares with a ``track`` attribute (on its class, instance or function):
    ``"black-box"`` (the default) or ``"white-box"``.

    Raises:
        ConfigError: For a ``track`` that is not one of :data:`~placement_gym.sealing.TRACKS`.
    """
    while isinstance(agent, functools.partial):  # a function with a spec's arguments bound
        agent = agent.func
    return sealing.check_track(getattr(agent, "track", sealing.DEFAULT_TRACK))


def run_agent(
    agent: Any,
    target: Any,
    budget: int | None,
    seed: int,
    listeners: Sequence[TrackerListener] = (),
    track: str | None = None,
) -> Outcome:
    """One run of ``agent`` on ``target`` (a problem, or an env for agents that step it) within ``budget``,
    sealed in ``track`` (default: :func:`agent_track`).

    The problem is sealed while the agent runs (:meth:`~placement_gym.problem.PlacementProblem.seal`): the
    stored optimum, the backend and the run's counters are out of reach, and in a black-box run so is the
    cost model. The agent gets a :class:`~placement_gym.view.TaskView` of the problem (or the env it was
    given, built over the sealed problem).

    Raises:
        ConfigError: If ``agent`` is not an agent (:func:`check_agent`), or declares an unknown track.
        PlacementError: If the agent returns a malformed placement.
    """
    check_agent(agent)
    if inspect.isclass(agent):
        agent = agent()  # a fresh instance per run
    track = sealing.check_track(track) if track is not None else agent_track(agent)
    problem = problem_of(target)
    extra: dict[str, Any] = {}
    view = TaskView(problem, track)
    if isinstance(target, PlacementProblem):
        target = view
    with problem.seal(track):
        run = Run(problem, budget)
        run.listeners.extend(listeners)
        start = time.perf_counter()
        try:
            if is_env_agent(agent):  # it steps an env the protocol builds (placement_gym.env_agents)
                returned, env_extra = train_in_env(agent, problem, run, seed)
                extra.update(env_extra)
            elif hasattr(agent, "place"):
                returned = agent.place(target, budget=budget, seed=seed)
            else:
                returned = agent(view, budget, seed)
        except BudgetExhaustedError as exc:
            returned, extra["stopped_by_budget"] = None, True
            extra["stalled"] = isinstance(exc, RunStalledError)
        finally:
            wall = time.perf_counter() - start
            run.detach()
    if returned is not None and hasattr(returned, "placement"):
        extra.update(getattr(returned, "extra", None) or {})
        returned = returned.placement
    extra["stalled"] = bool(extra.get("stalled", False) or run.stalled)
    extra["env_steps"] = run.requests
    if returned is None:
        if run.best_placement is None:
            returned = np.full(problem.num_groups, problem.host, dtype=np.int64)
        else:
            returned = run.best_placement
    placement = problem.validate(returned)
    latency = problem.evaluate(placement).latency  # the memo's answer if the agent evaluated it
    extra["track"] = track
    return Outcome(placement, float(latency), run.used, wall, list(run.history), extra)



def cpu_device(platform: Platform) -> int:
    """Index of the reference "CPU-only" device: the host if it is a CPU, else the first CPU."""
    devices = platform.devices
    if devices[platform.host].kind in ("cpu", "virtual"):
        return platform.host
    return next((i for i, d in enumerate(devices) if d.kind == "cpu"), platform.host)


def speedup_reference(problem: PlacementProblem) -> tuple[float, str, float]:
    """What a row's speedup is measured against: ``(CPU-only latency, reference, reference latency)``.

    The reference is the CPU-only placement (``"cpu_only"``); where it does not fit in memory, the fastest
    single device that does (``"<device>_only"``); where none fits (``model-parallel``), ``"none"`` with an
    infinite latency, and the speedup is undefined. Evaluated after the run: not charged to its budget.
    """
    devices = problem.platform.devices

    def alone(d: int) -> float:
        return problem.evaluate(np.full(problem.num_groups, d, dtype=np.int64)).latency

    host = cpu_device(problem.platform)
    cpu = alone(host)
    if np.isfinite(cpu):
        return cpu, "cpu_only", cpu
    fits = {devices[d].name: lat for d in range(len(devices)) if d != host and np.isfinite(lat := alone(d))}
    if not fits:
        return cpu, "none", math.inf
    best = min(fits, key=fits.get)
    return cpu, f"{best}_only", fits[best]


def speedup(reference_latency: float, latency: float) -> float:
    """``reference / latency``: 0 for an infeasible result, NaN where no single device fits."""
    if not np.isfinite(reference_latency):
        return math.nan
    return reference_latency / latency if np.isfinite(latency) else 0.0


def make_row(
    problem: PlacementProblem,
    model: str,
    backend: str,
    method: str,
    seed: int,
    budget: int | None,
    outcome: Outcome,
    protocol_version: str | None = None,
    tier: str | None = None,
    modules: Iterable[str] = (),
) -> ResultRow:
    """The row of one run (the speedup's reference is evaluated here, after the run: not charged).
    ``modules``: the modules outside placement-gym that the method's spec names (``MethodSpec.modules``),
    whose identity the row records in its versions (:func:`~placement_gym.results.module_versions`)."""
    cpu, reference, reference_latency = speedup_reference(problem)
    track = outcome.extra.get("track")
    extra = {
        k: v
        for k, v in outcome.extra.items()
        if k != "track" and isinstance(v, (int, float, str, bool, list, dict))
    }
    identity = problem.benchmark.identity()
    latency = outcome.latency
    return ResultRow(
        model=model,
        graph_version=problem.benchmark.version,
        platform=problem.platform.name,
        backend=backend,
        coarsening=problem.coarse.level,
        groups=problem.num_groups,
        method=method,
        seed=seed,
        budget=budget,
        latency=latency,
        cpu_only_latency=cpu,
        speedup_vs_cpu=speedup(reference_latency, latency),
        speedup_reference=reference,
        evaluations=outcome.evaluations,
        wall_time=outcome.wall_time,
        placement=outcome.placement.tolist(),
        history=thin_history(outcome.history),
        extra=extra,
        versions={**library_versions(), **module_versions(modules)},
        model_path=identity.get("model_path"),
        model_sha256=identity.get("model_sha256"),
        input_shapes=identity.get("input_shapes"),
        task_sha256=problem.task_sha256,
        protocol=protocol_version,
        tier=tier,
        score=fresh_score(problem.task_sha256, latency) if problem.reference is not None else math.nan,
        track=track,
    )


def agent_name(agent: Any) -> str:
    """A default method label: the agent's ``name`` attribute (unless ``PlacementMethod``'s default
    ``"method"``), else ``module:qualname`` of its class or function."""
    name = getattr(agent, "name", None)
    if isinstance(name, str) and name and name != "method" and not inspect.isfunction(agent):
        return name
    target = agent if inspect.isfunction(agent) or inspect.isclass(agent) else type(agent)
    return f"{target.__module__}:{target.__qualname__}"


def evaluate(
    agent: Any,
    tasks: Sequence[str] | None = None,
    budget: int | None = None,
    seeds: Sequence[int] | None = None,
    *,
    tier: str | None = None,
    name: str | None = None,
    out: str | os.PathLike | None = None,
) -> list[ResultRow]:
    """Benchmark ``agent`` on protocol tasks: one row per (task, seed).

    Args:
        agent: A ``PlacementMethod`` instance (or any object with ``place(target, budget=, seed=)``), such
            a class (a fresh instance per run), a callable ``place(problem, budget, seed) -> placement``,
            an env agent ``train(env, budget, seed)`` (:mod:`placement_gym.env_agents`), or a method spec
            as ``bench --methods`` takes it (``"heft"``, ``"milp:time_limit=30"``,
            ``"stable_baselines3:PPO"``; built afresh for each run, the rows labelled with the normalised spec).
        tasks: Split names (``train``, ``held-out``) and ``model/platform`` task names (default: train);
            without a ``tier`` any zoo model on any platform (``tiny_cnn/cpu-dgpu``).
        budget: Distinct placements per run; give this or ``tier``.
        seeds: Seeds (default: the protocol's 0-4); repeats are run once.
        tier: A protocol tier (``tiny``, ``standard``, ``large``): sets the budget and marks the rows with
            the protocol version.
        name: The method label of the rows (default: :func:`agent_name`).
        out: A folder: rows are appended to ``out/results.jsonl`` and finished cells are skipped (also
            those another process is running: see :class:`~placement_gym.results.ResultStore`).

    Returns:
        The rows of the requested cells that are stored (``out``) or were run, in task and seed order.

    Raises:
        ConfigError: For a bad agent, or neither/both of ``budget`` and ``tier``.
        UnknownNameError: For an unknown task or tier.
        AgentFailedError: After every cell ran, if the agent raised or called ``sys.exit`` in some (one
            line per failed cell; those cells store no row and run again on a resume).
    """
    spec = _parse_spec(agent) if isinstance(agent, str) else None
    if spec is not None:
        agent = spec.build()  # checks the constructor's arguments now; each run gets a fresh build
    check_agent(agent)
    if (budget is None) == (tier is None):
        raise ConfigError(
            "give exactly one of budget= (distinct placements per run) or tier= (a protocol tier)"
        )
    if tier is not None:
        budget = protocol.tier_budget(tier)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ConfigError(f"budget must be a positive integer number of distinct placements, got {budget!r}")
    version = protocol.VERSION if tier is not None else None
    label = name or (spec.text if spec is not None else agent_name(agent))
    chosen = _tasks(tasks, protocol_run=tier is not None)
    seed_list = list(dict.fromkeys(int(s) for s in (protocol.SEEDS if seeds is None else seeds)))
    store = ResultStore(Path(out) / "results.jsonl") if out is not None else None
    rows: list[ResultRow] = []
    failures: list[tuple[str, BaseException]] = []
    for task in chosen:
        for seed in seed_list:
            key = cell_key(
                task.model, _zoo_version(task.model), task.platform, protocol.BACKEND, protocol.COARSENING,
                label, seed, int(budget), version,
            )  # fmt: skip
            if store is not None and not store.claim(key):
                continue
            try:
                problem = PlacementProblem.make(task.model, task.platform, protocol.BACKEND)
                try:
                    try:
                        run_with = spec.build() if spec is not None else agent
                        outcome = run_agent(run_with, problem, int(budget), seed)
                    except (Exception, SystemExit) as exc:  # the agent's failure: this cell fails, others go on
                        if not is_agent_failure(exc):
                            raise  # a bad agent or spec fails every cell alike
                        failures.append((f"{task.name} seed {seed}", exc))
                        if store is not None:
                            store.release(key)
                        continue
                    row = make_row(
                        problem,
                        task.model,
                        protocol.BACKEND,
                        label,
                        seed,
                        int(budget),
                        outcome,
                        version,
                        tier,
                        modules=spec.modules if spec is not None else (),
                    )
                finally:
                    problem.close()
            except BaseException:
                if store is not None:
                    store.release(key)
                raise
            if store is not None:
                store.append(row)
            else:
                rows.append(row)
    if failures:
        lines = "; ".join(f"{cell}: {_failure(exc)}" for cell, exc in failures)
        raise AgentFailedError(f"agent {label} failed in {len(failures)} cell(s) (the others ran): {lines}") from (
            failures[0][1]
        )
    if store is None:
        return rows
    wanted = {
        cell_key(t.model, _zoo_version(t.model), t.platform, protocol.BACKEND, protocol.COARSENING, label, s,
                 int(budget), version)
        for t in chosen for s in seed_list
    }  # fmt: skip
    return [row for row in store.rows() if row.key in wanted]


def _parse_spec(text: str) -> Any:
    """The checked method spec of ``text`` (``"heft"``, ``"milp:time_limit=30"``, ``"my_module:train"``,
    ``"stable_baselines3:PPO:n_steps=64"``): the spec grammar is the ``agents`` package's, looked up by name
    here so that ``placement_gym`` keeps no import of it (``bench --methods`` parses the same way)."""
    import importlib

    return importlib.import_module("agents.specs").parse_spec(text)


def is_agent_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised while an agent ran, fails only its cell (the agent raised, called
    ``sys.exit``, or read what its run does not let it read) rather than every cell alike (a bad agent
    or spec: a :class:`ConfigError`). An interrupt (``KeyboardInterrupt``) is neither: it stops the run."""
    if isinstance(exc, ConfigError) and not isinstance(exc, ProtocolAccessError):
        return False
    return isinstance(exc, (Exception, SystemExit))


def failure_text(exc: BaseException) -> str:
    """One line for an agent's failure (``it called sys.exit(0)``, ``RuntimeError: boom``)."""
    return _failure(exc)


def _failure(exc: BaseException) -> str:
    """One line for an agent's failure."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _tasks(tasks: Sequence[str] | None, protocol_run: bool) -> list[protocol.Task]:
    """Protocol tasks; without a tier also any ``zoo_model/platform`` (e.g. ``tiny_cnn/cpu-dgpu``)."""
    if isinstance(tasks, str):
        tasks = [tasks]
    if protocol_run or tasks is None:
        return protocol.resolve_tasks(list(tasks) if tasks is not None else None)
    out = []
    for item in tasks:
        model, sep, platform = item.partition("/")
        if item in protocol.SPLITS or not sep:
            out += protocol.resolve_tasks([item])
        else:
            _zoo_version(model)
            out.append(protocol.Task(model, platform, "custom"))
    return list(dict.fromkeys(out))


def _zoo_version(model: str) -> int:
    from placement_gym.zoo import MODELS

    if model not in MODELS:
        raise UnknownNameError("zoo model of a task", model, MODELS)
    return MODELS[model].version
