"""The transfer track (protocol transfer-v1): pretrain on the train tasks, then place the held-out families.

Two subcommands, one per stage (docs/protocol.md, "The transfer track"):

    placement-gym transfer pretrain --method my_agent:pretrain --out runs/my-policy --steps 20000
    placement-gym transfer run --methods my_agent:MyAgent:policy=runs/my-policy \\
        --pretraining runs/my-policy/pretraining.json --results results/my-transfer

``pretrain`` calls ``pretrain(envs, steps=, seed=, out=)`` with one Gymnasium env per train task (the
one-shot placement env, or ``--env improve``: the improvement MDP), counts every env step across them and
ends an episode with ``truncated=True`` and ``info["budget_exhausted"] = True`` once ``--steps`` are spent;
the function saves what it learned under ``out``. The command then writes ``out/pretraining.json``: env
steps, evaluations, CPU-seconds of the process and its children, wall seconds, the models and platforms.

``run`` runs every missing cell (method x held-out task x seed 0-4) at 100 distinct placements per run, one
row per cell in ``<results>/<method>.jsonl`` (resumable: stored cells are skipped), each row carrying the
method's pretraining record (``extra["pretraining"]``) and its track. The shipped learners' records are
read from their policies' metadata; the classical references do not pretrain; any other method needs
``--pretraining FILE`` (or ``--pretraining none``). ``placement-gym leaderboard`` renders the rows of
``results/leaderboard/transfer`` as ``docs/LEADERBOARD-transfer.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from experiments.cli.arguments import module_main
from experiments.cli.parsers.transfer import METHODS, RESULTS, add_arguments
from placement_gym.errors import ConfigError
from placement_gym.record_paths import portable_path
from placement_gym.results import ResultRow, ResultStore
from placement_gym.transfer import (
    BUDGET,
    NO_PRETRAINING,
    TIER,
    TRANSFER_SEEDS,
    TRANSFER_TASKS,
    VERSION,
    Pretraining,
    check_pretraining,
    read_pretraining,
)

_ROOT = Path(__file__).resolve().parents[2]
#: The pretraining record of each shipped learner on the held-out families (the policy it loads there).
SHIPPED_PRETRAINING: dict[str, Path] = {
    "pretrained_ppo": Path("agents/sb3/pretrained/all/meta.json"),
    "guided_ppo": Path("agents/sb3/pretrained-guided/all/meta.json"),
    "guided_improvement": Path("agents/learned/pretrained/meta.json"),
}
#: Methods that learn nothing before the run (the references).
NOT_PRETRAINED = frozenset({"heft", "local_search", "random_search", "single_device", "simulated_annealing"})
_PRINT = functools.partial(print, flush=True)


def method_name(spec: str) -> str:
    """The registry name of a method spec (``guided_ppo:fine_tune=0`` -> ``guided_ppo``)."""
    return spec.partition(":")[0]


def pretraining_of(spec: str, record: str | None = None) -> Pretraining:
    """The pretraining record of ``spec``: from ``record`` (a JSON file, or ``"none"``), else the shipped
    policy's metadata, else none for a reference method; checked against transfer-v1's rules.

    Raises:
        ConfigError: For a method with no known record, or a record outside the rules.
    """
    name = method_name(spec)
    if record is not None:
        out = NO_PRETRAINING if record == "none" else read_pretraining(record)
    elif name in SHIPPED_PRETRAINING:
        out = read_pretraining(_ROOT / SHIPPED_PRETRAINING[name])
        out = dataclasses.replace(out, source=str(SHIPPED_PRETRAINING[name]))
    elif name in NOT_PRETRAINED:
        out = NO_PRETRAINING
    else:
        raise ConfigError(
            f"{spec}: give its pretraining record (--pretraining runs/NAME/pretraining.json, written by "
            "`placement-gym transfer pretrain`), or --pretraining none for a method that does not pretrain"
        )
    check_pretraining(out)
    return out


def run_transfer(
    methods: Sequence[str] = METHODS,
    results: Path = RESULTS,
    pretraining: str | None = None,
    tasks: Sequence[str] | None = None,
    seeds: Sequence[int] = TRANSFER_SEEDS,
    log: Callable[[str], None] = _PRINT,
) -> int:
    """Run every missing transfer cell of ``methods``; returns the number of cells run."""
    from agents.specs import parse_spec
    from experiments.grid import run_cell
    from experiments.records.leaderboard import SEEDLESS, code_version, compact
    from placement_gym.protocol import BACKEND, COARSENING
    from placement_gym.results import cell_key
    from placement_gym.zoo import MODELS

    records = {spec: pretraining_of(spec, pretraining) for spec in methods}
    for spec in methods:
        parse_spec(spec)
    known = {t.name: t for t in TRANSFER_TASKS}
    unknown = [t for t in tasks or () if t not in known]
    if unknown:
        raise ConfigError(f"{unknown[0]} is not a {VERSION} task (tasks: {', '.join(known)})")
    task_list = [known[t] for t in tasks] if tasks else list(TRANSFER_TASKS)
    unsolved = [t.name for t in task_list if not _has_optimum(t.model, t.platform)]
    if unsolved:
        log(f"note: no stored optimum yet for {', '.join(unsolved)}: skipped (no score)")
        task_list = [t for t in task_list if t.name not in unsolved]
    code = code_version()
    ran = 0
    for spec in methods:
        store = ResultStore(results / f"{method_name(spec)}.jsonl")
        run_seeds = list(seeds)[:1] if method_name(spec) in SEEDLESS else list(seeds)
        done = {(r.model, r.platform, r.seed) for r in store.rows() if r.method == spec and r.protocol == VERSION}
        for task in task_list:
            for seed in run_seeds:
                if (task.model, task.platform, seed) in done:
                    continue
                key = cell_key(task.model, MODELS[task.model].version, task.platform, BACKEND, COARSENING, spec,
                               seed, BUDGET, VERSION)  # fmt: skip
                if not store.claim(key):
                    continue
                start = time.process_time()
                try:
                    row = run_cell(task.model, spec, seed, BUDGET, task.platform, BACKEND, COARSENING,
                                   protocol_version=VERSION, tier=TIER)  # fmt: skip
                except BaseException:
                    store.release(key)
                    raise
                row = transfer_row(compact(row), records[spec], code)
                store.append(row)
                store.release(key)
                ran += 1
                log(
                    f"{VERSION} {spec} {task.name} seed {seed}: score {row.score:.3f}, {row.evaluations} evals, "
                    f"{row.wall_time:.1f} s wall, {time.process_time() - start:.1f} s CPU, load {os.getloadavg()[0]:.1f}"
                )
    return ran


def _has_optimum(model: str, platform: str) -> bool:
    from placement_gym.tasks import reference_optima
    from placement_gym.zoo import MODELS

    return f"{model}/v{MODELS[model].version}/{platform}/fused" in reference_optima()


def transfer_row(row: ResultRow, record: Pretraining, code: str) -> ResultRow:
    """``row`` with its pretraining record, the code's commit and (where the runner left it out) its track."""
    track = row.track
    if track is None:  # a runner that did not record it: the spec's declared track
        from agents.specs import method_track

        track = method_track(row.method)
    extra = {**row.extra, "pretraining": record.as_dict(), "code": code}
    return dataclasses.replace(row, extra=extra, track=track)


# ---------------------------------------------------------------------- pretraining
class StepBudget:
    """Env steps shared by the pretraining envs: every step counts; past the budget, episodes truncate."""

    def __init__(self, steps: int) -> None:
        self.steps, self.used = steps, 0


class CountedEnv(gym.Wrapper):
    """A train-task env whose steps count against a shared :class:`StepBudget`.

    Once the budget is spent, the step that spends it ends its episode with ``truncated=True`` and
    ``info["budget_exhausted"] = True``, and so does every later step (the learner sees a spent budget the
    documented way, never an exception).
    """

    def __init__(self, env: gym.Env, budget: StepBudget) -> None:
        super().__init__(env)
        self.budget = budget

    def step(self, action: Any):  # type: ignore[override]
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.budget.used += 1
        if self.budget.used >= self.budget.steps:
            truncated, info = True, {**info, "budget_exhausted": True}
        return obs, reward, terminated, truncated, info

    @property
    def exhausted(self) -> bool:
        return self.budget.used >= self.budget.steps


def train_envs(budget: StepBudget, kind: str = "placement") -> list[gym.Env]:
    """One counted env per train task of protocol v1 (simulated, fused): the one-shot placement env or the
    improvement MDP."""
    from placement_gym.envs.device_placement import DevicePlacementEnv
    from placement_gym.envs.improve import DevicePlacementImproveEnv
    from placement_gym.protocol import TRAIN_TASKS

    make = {"placement": DevicePlacementEnv, "improve": DevicePlacementImproveEnv}
    if kind not in make:
        raise ConfigError(f"unknown env kind {kind!r}; known: {', '.join(make)}")
    return [CountedEnv(make[kind](t.model, t.platform, "simulated"), budget) for t in TRAIN_TASKS]


def run_pretraining(method: str, out: Path, steps: int, seed: int = 0, kind: str = "placement") -> Pretraining:
    """Call the user's ``pretrain(envs, steps=, seed=, out=)`` on the train tasks' envs and write
    ``out/pretraining.json`` (its cost, checked against transfer-v1's rules)."""
    from placement_gym.protocol import TRAIN_TASKS

    fn = load_function(method)
    out.mkdir(parents=True, exist_ok=True)
    budget = StepBudget(steps)
    envs = train_envs(budget, kind)
    cpu0, wall0, load0 = _cpu_seconds(), time.perf_counter(), os.getloadavg()[0]
    try:
        fn(envs, steps=steps, seed=seed, out=out)
        evaluations = sum(int(getattr(e.unwrapped.problem, "evaluations", 0) or 0) for e in envs)
    finally:
        for env in envs:
            env.close()
    record = Pretraining(
        env_steps=budget.used,
        evaluations=evaluations,
        cpu_s=round(_cpu_seconds() - cpu0, 2),
        wall_s=round(time.perf_counter() - wall0, 2),
        models=tuple(dict.fromkeys(t.model for t in TRAIN_TASKS)),
        platforms=tuple(dict.fromkeys(t.platform for t in TRAIN_TASKS)),
        command=f"placement-gym transfer pretrain --method {method} --out {portable_path(out)} --steps {steps} "
        f"--seed {seed}" + (f" --env {kind}" if kind != "placement" else ""),
        source=f"{portable_path(out)}/pretraining.json",
        extra={"load_1min_at_start": round(load0, 2), "load_1min_at_end": round(os.getloadavg()[0], 2)},
    )
    check_pretraining(record)
    (out / "pretraining.json").write_text(json.dumps({"pretraining": record.as_dict()}, indent=1) + "\n")
    return record


def load_function(text: str) -> Callable[..., Any]:
    """The function at ``module:function`` (a module of the current folder is found too).

    Raises:
        ConfigError: If it cannot be imported or is not callable.
    """
    import importlib
    import sys

    module_name, _, attr = text.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--method {text!r}: give module:function, e.g. my_agent:pretrain")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # after everything installed: a local module never shadows one
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--method {text}: cannot import it ({exc})") from exc
    if not callable(fn):
        raise ConfigError(f"--method {text} is a {type(fn).__name__}, not a function pretrain(envs, steps=, seed=, out=)")
    return fn


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ---------------------------------------------------------------------- CLI
def run_from_args(args: argparse.Namespace) -> None:
    if args.stage == "pretrain":
        if args.steps < 0:
            raise ConfigError(f"--steps must be >= 0, got {args.steps}")
        record = run_pretraining(args.method, args.out, args.steps, args.seed, args.env)
        print(f"wrote {args.out / 'pretraining.json'}: {record.env_steps} env steps, {record.cpu_s} CPU-s")
        return
    if any(s not in TRANSFER_SEEDS for s in args.seeds):
        raise ConfigError(f"{VERSION} seeds are {', '.join(map(str, TRANSFER_SEEDS))}")
    ran = run_transfer(args.methods, args.results, args.pretraining, args.tasks, args.seeds)
    print(f"ran {ran} cells; rows in {args.results}")


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
