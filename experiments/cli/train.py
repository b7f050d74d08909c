"""Train (or run) any placement method on any registered env ID, with progress, logs and the best placement.

Writes into ``--out``:
    best_placement.json   the best placement so far (rewritten atomically on every improvement, so an
                          interrupted run keeps it), with latency, model (for a model file: its path and
                          SHA-256), graph version and platform
    history.csv           one row per evaluated placement: evaluation (its number), latency_s, feasible,
                          best_latency_s, wall_s (seconds since the run started), worker (the env copy,
                          i.e. measuring worker, that evaluated it: its index in the vector env; empty for
                          an evaluation made in this process, as with one env), evaluation_s (the wall
                          seconds its backend spent on it, compiles and timed runs included; empty where
                          it was not timed alone: a batch evaluated in one call, a worker's simulated
                          env) and vector_step (the vector env's step, from 1, whose evaluations share
                          it; empty with worker)
    tb/                   TensorBoard scalars: latency and best latency per evaluation (every method);
                          Stable-Baselines3 learners also log their training scalars (losses, entropy)
    checkpoints/          learners only: Stable-Baselines3 policies every ``--checkpoint-every``
                          evaluations and at the end (``eval-<n>/``, ``final/``; the safe format of
                          :meth:`agents.sb3.methods.SB3Method.save`); the published systems' final policy
                          weights (``final_policy.pt``, a state_dict). Classical methods have no model and
                          write none; the published systems write no intermediate checkpoints.

Usage:
    python -m experiments.cli.train --agent ppo_gnn --env DevicePlacement-bert-cpu_dgpu-sim-v0 --budget 2000 --seed 0
    placement-gym train --agent hsdag --env DevicePlacement-resnet50-local-measured-v1 --budget 500
    placement-gym train --agent ppo_gnn --env DevicePlacement-resnet50-v1 --n-envs 2       # 2 measuring workers, 2 cores each
    placement-gym train --agent ppo_gnn --env DevicePlacement-resnet50-v1 --n-envs 2 --cores-per-worker 1
    placement-gym train --agent ppo_gnn --env DevicePlacement-bert-local-measured-v1 --n-envs 4 --ray-address auto
    placement-gym train --agent ppo_gnn --env DevicePlacement-resnet50-cpu_dgpu-sim-v0 DevicePlacement-bert-cpu_dgpu-sim-v0 \
        --budget 2000 --max-nodes 320 --max-edges 512 --agent-kwargs '{"observation": "device"}'

Several ``--env`` IDs train one policy on all of them (one budget across the tasks; OUT/policy, OUT/results.json).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import placement_gym  # noqa: F401  (registers the env IDs)
from agents.base import BudgetTracker, PlacementMethod, PlacementResult
from agents.specs import method_spec, parameters
from experiments.cli import arguments
from experiments.cli.parsers.train import OUTPUTS, add_arguments
from experiments.filenames import file_stem
from experiments.runs import library_versions
from placement_gym.errors import ConfigError
from placement_gym.problem import problem_of
from placement_gym.protocol import check_trainable


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


#: The columns of ``history.csv`` (the module docstring says what each holds); new ones are added at the end.
HISTORY_HEADER = "evaluation,latency_s,feasible,best_latency_s,wall_s,worker,evaluation_s,vector_step"


class RunLogger:
    """A :class:`BudgetTracker` listener: progress bar, TensorBoard, history CSV and best-placement JSON."""

    def __init__(
        self, out: Path, env: gym.Env, budget: int | None, meta: dict[str, Any], progress: bool = True
    ):
        from torch.utils.tensorboard import SummaryWriter

        self.out, self.problem, self.meta = out, problem_of(env), meta
        out.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(out / "tb"))
        try:  # created exclusively: a second run into the same --out never appends to this one's history
            self.history = open(out / "history.csv", "x")
        except FileExistsError:
            self.writer.close()
            raise ConfigError(
                f"{out / 'history.csv'} already exists (another run writes into {out}); choose another --out"
            ) from None
        self.history.write(f"{HISTORY_HEADER}\n")
        # the bar appears with the first evaluation: a run refused before it prints only its one error line
        self._bar_kwargs = dict(total=budget, disable=not progress, unit="eval", dynamic_ncols=True)
        self._bar: Any = None
        self.evaluations = 0
        self.start = time.perf_counter()
        self.best = float("inf")

    @property
    def bar(self) -> Any:
        """The progress bar (tqdm), made on first use."""
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(**self._bar_kwargs)
        return self._bar

    def __call__(self, tracker: BudgetTracker, placement: np.ndarray, latency: float, feasible: bool) -> None:
        step = tracker.used
        if feasible:
            self.writer.add_scalar("eval/latency_ms", latency * 1e3, step)
        self.writer.add_scalar("eval/best_latency_ms", tracker.best_latency * 1e3, step)
        worker = "" if tracker.worker is None else tracker.worker
        seconds = "" if tracker.evaluation_s is None else f"{tracker.evaluation_s:.6f}"
        vector_step = "" if tracker.vector_step is None else tracker.vector_step
        self.history.write(
            f"{step},{latency},{int(feasible)},{tracker.best_latency},{time.perf_counter() - self.start:.3f},"
            f"{worker},{seconds},{vector_step}\n"
        )
        self.bar.update(1)
        self.evaluations = step
        if tracker.best_latency < self.best:
            self.best = tracker.best_latency
            self.bar.set_postfix(best_ms=f"{self.best * 1e3:.3f}")
            self.save_best(tracker.best_placement, self.best, step)

    def save_best(self, placement: np.ndarray, latency: float, evaluations: int, **extra: Any) -> None:
        problem = self.problem
        _write_json_atomic(
            self.out / "best_placement.json",
            {
                **self.meta,
                **problem.benchmark.identity(),
                "platform": problem.platform.name,
                "devices": [d.name for d in problem.platform.devices],
                "coarsening": problem.coarse.level,
                "groups": problem.num_groups,
                "latency": latency,
                "evaluations": evaluations,
                "placement": np.asarray(placement).tolist(),
                "versions": library_versions(),
                **extra,
            },
        )

    def close(self) -> None:
        if self._bar is not None:
            if self.bar.total is not None and self.bar.n < self.bar.total:
                self.bar.total = self.bar.n  # a one-shot method used fewer evaluations than the budget allows
                self.bar.refresh()
            self.bar.close()
        self.writer.close()
        self.history.close()


class Checkpointer:
    """Saves a learner's model into ``folder``: periodically while a Stable-Baselines3 learner trains, and
    at the end for every method that returns a model (see the module docstring).

    Args:
        method: The method about to run.
        folder: The ``checkpoints/`` folder (created when the first checkpoint is written).
        every: Evaluations between checkpoints of an SB3 learner (0: only the final one).
    """

    def __init__(self, method: PlacementMethod, folder: Path, every: int) -> None:
        self.method, self.folder, self.every = method, folder, every

    def __call__(self, tracker: BudgetTracker, placement: np.ndarray, latency: float, feasible: bool) -> None:
        from agents.sb3.methods import SB3Method

        # an SB3 method holds the model it trains from the first evaluation on (SB3Method.model)
        if isinstance(self.method, SB3Method) and self.method.model is not None:
            if self.every and tracker.used % self.every == 0:
                self.method.save(self.folder / f"eval-{tracker.used:06d}")

    def final(self, result: PlacementResult) -> Path | None:
        """Save the trained model of ``result``; returns where, or None for a method without one."""
        import torch

        from agents.sb3.methods import SB3Method

        if isinstance(self.method, SB3Method) and self.method.model is not None:
            return self.method.save(self.folder / "final")
        policy = result.extra.get("policy")
        if isinstance(policy, torch.nn.Module):
            self.folder.mkdir(parents=True, exist_ok=True)
            torch.save(policy.state_dict(), self.folder / "final_policy.pt")
            return self.folder / "final_policy.pt"
        return None


def prepare_out(out: Path, overwrite: bool = False) -> None:
    """Make ``out`` ready for a new run: refuse one that holds a run's outputs, or (``overwrite``) remove
    those outputs only (other files in ``out`` stay; a link is removed, never followed).

    Raises:
        ConfigError: ``out`` is a file, or holds outputs of a run and ``overwrite`` is false (names them).
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder")
    present = [name for name in OUTPUTS if (out / name).exists() or (out / name).is_symlink()]
    if present and not overwrite:
        raise ConfigError(
            f"--out {out} already holds a run ({', '.join(present)}); a second run would mix with it: "
            "choose another --out, or pass --overwrite to remove these outputs first"
        )
    for name in present:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)


def measuring_cores(
    env_id: str,
    env_kwargs: dict[str, Any],
    workers: int,
    cores_per_worker: int | None,
    ray_address: str | None = None,
) -> list[tuple[int, ...]] | None:
    """The core sets of a run's measuring workers on this machine: the ``workers`` env copies of a
    measured env (:func:`~placement_gym.measured.workers.measuring_layout`), or the actors of a Ray pool
    started here (``ray_address="local"``, checked before Ray would wait for CPUs it lacks); None when
    the run measures nothing here, or measures in this one process with no ``cores_per_worker`` asked.

    Raises:
        ConfigError: Too few cores (one line: needed, present, what to change), or ``workers > 1`` with a
            local Ray pool (every env copy would start its own).
    """
    from placement_gym.measured.workers import measuring_layout

    spec_kwargs = {**gym.spec(env_id).kwargs, **env_kwargs}
    if spec_kwargs.get("backend", "measured") != "measured":
        if cores_per_worker is not None:
            print(f"note: {env_id} does not measure; --cores-per-worker is ignored")
        return None
    platform = spec_kwargs.get("platform", "local")
    if ray_address is not None:
        if ray_address == "local" and workers > 1:
            raise ConfigError(
                f"--n-envs {workers} with --ray-address local would start a Ray instance per env copy: use "
                "--n-envs for measuring workers on this machine, or --ray-address with --n-envs 1"
            )
        return None
    if workers == 1 and cores_per_worker is None:
        return None  # one process measures, on the cores it has (its local platform is built for them)
    return measuring_layout(platform, workers, cores_per_worker)


def make_env(
    env_id: str,
    env_kwargs: dict[str, Any],
    ray_address: str | None,
    ray_workers: int,
    input_shapes: dict[str, list[int]] | None = None,
    cores_per_worker: int | None = None,
) -> gym.Env:
    """``gym.make`` with the Ray pool wrapped around the env's backend when a Ray address is given
    (``"local"`` starts a local Ray instance; the actors of a measured env pin themselves to
    ``cores_per_worker`` cores each, by default a core per virtual CPU), and a dynamic-shape model made
    static with ``input_shapes``.

    Raises:
        ConfigError: For ``env_kwargs`` the env does not accept, ``input_shapes`` without a model, or a
            local Ray pool of measuring actors that this machine has too few cores for.
    """
    spec_kwargs = {**gym.spec(env_id).kwargs, **env_kwargs}
    if input_shapes:
        from placement_gym.benchmarks import load_benchmark

        if spec_kwargs.get("model") is None:
            raise ConfigError(
                f"--input-shape needs a model file: {env_id} has none (use DevicePlacement-v0 with "
                '--env-kwargs \'{"model": "path/to/model.xml"}\')'
            )
        env_kwargs = {**env_kwargs, "model": load_benchmark(spec_kwargs["model"], input_shapes=input_shapes)}
    if ray_address is not None:
        inner = spec_kwargs.get("backend", "measured")
        pool: dict[str, Any] = {}
        if inner == "measured":  # each actor measures on cores of its own, its local platform built there
            from placement_gym.measured.workers import default_cores_per_worker, measuring_layout

            platform = spec_kwargs.get("platform", "local")
            per = cores_per_worker or default_cores_per_worker(platform)
            if ray_address == "local":  # this machine: say now that it lacks cores, not after Ray's timeout
                measuring_layout(platform, ray_workers, per, count_option="--ray-workers")
            pool = {"pin_cpus": True, "cpus_per_worker": float(per)}
        env_kwargs = {
            **env_kwargs,
            "backend": "ray",
            "backend_kwargs": {
                "inner": inner,
                "address": None if ray_address == "local" else ray_address,
                "num_workers": ray_workers,
                "inner_kwargs": spec_kwargs.get("backend_kwargs") or {},
                **pool,
            },
        }
    try:
        return gym.make(env_id, **env_kwargs)
    except TypeError as exc:  # an argument the env does not have
        raise ConfigError(f"--env-kwargs for {env_id}: {exc}") from exc


def _method(agent: str, agent_kwargs: dict[str, Any], n_envs: int, tensorboard: Path) -> PlacementMethod:
    """The method with its arguments: ``n_envs`` where the method has it, SB3's TensorBoard log folder."""
    from agents.sb3.methods import SB3Method

    kwargs = dict(agent_kwargs)
    if "n_envs" in parameters(method_spec(agent).target)[0]:
        kwargs.setdefault("n_envs", n_envs)
    elif n_envs > 1:
        print(f"note: {agent} evaluates one placement at a time; --n-envs is ignored")
    spec = method_spec(agent, kwargs)  # checked: names, types, finiteness, ranges, memory
    extra: dict[str, Any] = {}
    if inspect.isclass(spec.target) and issubclass(spec.target, SB3Method):
        extra["tensorboard_log"] = spec.kwargs.get("tensorboard_log", str(tensorboard))
    try:
        return spec.build(**extra)
    except TypeError as exc:
        raise ConfigError(f"--agent-kwargs for {agent}: {exc}") from exc


def train(
    agent: str,
    env_id: str,
    out: Path,
    budget: int | None,
    seed: int,
    env_kwargs: dict[str, Any],
    agent_kwargs: dict[str, Any],
    n_envs: int = 1,
    ray_address: str | None = None,
    ray_workers: int = 2,
    progress: bool = True,
    checkpoint_every: int = 0,
    input_shapes: dict[str, list[int]] | None = None,
    overwrite: bool = False,
    cores_per_worker: int | None = None,
) -> PlacementResult:
    """Run ``agent`` on ``env_id`` and write the outputs listed in the module docstring (into a fresh
    ``out``: see :func:`prepare_out`).

    A measured env's ``n_envs`` copies (an SB3 learner's) are measuring workers on disjoint cores
    (:func:`measuring_cores`); this process is pinned to the first worker's cores before the env is made,
    so that what it measures itself (the final placement; every placement with one env) is measured on
    the same platform as the workers' placements.
    """
    from agents.sb3.methods import SB3Method
    from placement_gym.measured.workers import pin_process

    method = _method(agent, agent_kwargs, n_envs, out / "tb")
    workers = method.n_envs if isinstance(method, SB3Method) else 1
    cores = measuring_cores(env_id, env_kwargs, workers, cores_per_worker, ray_address)
    if cores is not None:
        pin_process(cores[0])
        if isinstance(method, SB3Method) and workers > 1:
            method.worker_cores = cores
    env = make_env(env_id, env_kwargs, ray_address, ray_workers, input_shapes, cores_per_worker)
    try:
        prepare_out(out, overwrite)
    except BaseException:
        env.close()
        raise
    logger = RunLogger(
        out,
        env,
        budget,
        {"agent": agent, "env_id": env_id, "seed": seed, "agent_kwargs": agent_kwargs},
        progress=progress,
    )
    checkpoints = Checkpointer(method, out / "checkpoints", checkpoint_every)
    try:
        result = method.place(env, budget=budget, seed=seed, listeners=[logger, checkpoints])
        if np.isfinite(result.latency):
            extra = {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, bool))}
            logger.save_best(
                result.placement, result.latency, result.evaluations, wall_time=result.wall_time, **extra
            )
        checkpoints.final(result)
    finally:
        logger.close()
        env.close()
    return result


def train_tasks(
    agent: str,
    env_ids: list[str],
    out: Path,
    budget: int | None,
    seed: int,
    env_kwargs: dict[str, Any],
    agent_kwargs: dict[str, Any],
    max_nodes: int | None = None,
    max_edges: int | None = None,
    overwrite: bool = False,
) -> list[PlacementResult]:
    """Train one SB3 policy on several env IDs with one budget; writes ``OUT/policy`` (the safe format)
    and ``OUT/results.json`` (each task's best latency, placement and evaluations)."""
    from agents.sb3.methods import SB3Method
    from agents.sb3.multitask import train_multitask

    method = _method(agent, agent_kwargs, 1, out / "tb")
    if not isinstance(method, SB3Method):
        raise ConfigError(f"training on several envs needs a Stable-Baselines3 learner; {agent} is not one")
    if budget is None:
        budget = method.budget
    envs = [make_env(env_id, env_kwargs, None, 1) for env_id in env_ids]
    try:
        prepare_out(out, overwrite)
        results = train_multitask(method, envs, budget, seed, max_nodes, max_edges)
        method.save(out / "policy")
        rows = [
            {
                "env_id": env_id,
                "task": r.extra["task"],
                "latency": r.latency,
                "evaluations": r.evaluations,
                "placement": r.placement.tolist(),
            }
            for env_id, r in zip(env_ids, results)
        ]
        _write_json_atomic(out / "results.json", {"agent": agent, "seed": seed, "budget": budget, "tasks": rows})
    finally:
        for env in envs:
            env.close()
    return results


def run_from_args(args: argparse.Namespace) -> None:
    for env_id in args.env:  # the protocol's held-out families are never trained on
        try:
            model = {**gym.spec(env_id).kwargs, **(args.env_kwargs or {})}.get("model")
        except gym.error.Error:
            continue  # an unknown ID: make_env says so
        if isinstance(model, str):
            check_trainable(model)
    if len(args.env) == 1 and (args.max_nodes is not None or args.max_edges is not None):
        raise ConfigError(
            "--max-nodes and --max-edges pad the graphs of multi-task training (several --env); "
            "with one --env they do nothing: drop them"
        )
    run = dict(
        budget=args.budget,
        seed=args.seed,
        env_kwargs=args.env_kwargs,
        agent_kwargs=args.agent_kwargs,
        overwrite=args.overwrite,
    )
    if len(args.env) > 1:
        out = args.out or Path("runs") / "multitask" / f"{args.agent}-s{args.seed}"
        results = train_tasks(
            args.agent, args.env, out, max_nodes=args.max_nodes, max_edges=args.max_edges, **run
        )
        for env_id, r in zip(args.env, results):
            print(f"{args.agent} on {env_id}: best latency {r.latency * 1e3:.3f} ms after {r.evaluations} evaluations")
        print(f"{sum(r.evaluations for r in results)} evaluations in total; policy written to {out / 'policy'}")
        return
    args.env = args.env[0]
    out = args.out or Path("runs") / file_stem(args.env) / f"{args.agent}-s{args.seed}"
    result = train(
        args.agent,
        args.env,
        out,
        n_envs=args.n_envs,
        ray_address=args.ray_address,
        ray_workers=args.ray_workers,
        progress=not args.no_progress,
        checkpoint_every=args.checkpoint_every,
        input_shapes=arguments.input_shapes(args.input_shapes),
        cores_per_worker=args.cores_per_worker,
        **run,
    )
    print(
        f"{args.agent} on {args.env}: best latency {result.latency * 1e3:.3f} ms after {result.evaluations} "
        f"evaluations in {result.wall_time:.1f} s; written to {out}"
    )


def main(argv: list[str] | None = None) -> int:
    return arguments.module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
