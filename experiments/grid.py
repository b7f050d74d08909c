"""The benchmark grid's cells: one method with one seed and a budget on a fresh env gives one
replayable row (:func:`run_cell`); a grid of them runs resumably into a
:class:`~placement_gym.results.ResultStore` (:func:`run_grid`), locally or as Ray tasks
(:mod:`experiments.ray_cells`). ``placement-gym bench`` (:mod:`experiments.cli.bench`), the leaderboard, the
transfer track and the replay of rows all run their cells here.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from agents.specs import MethodSpec, parse_spec, spec_label
from experiments.ray_cells import Cell, Ran, cell_runner
from experiments.runs import ResultRow, ResultStore, speedup_text
from placement_gym import protocol
from placement_gym.benchmark import (  # noqa: F401 (cpu_device, speedup, speedup_reference: re-exported)
    cpu_device,
    failure_text,
    is_agent_failure,
    make_row,
    run_agent,
    speedup,
    speedup_reference,
)
from placement_gym.benchmarks import load_benchmark
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import AgentFailedError
from placement_gym.platforms import load_platform
from placement_gym.results import cell_key
from placement_gym.zoo import MODELS

#: Methods whose result does not depend on the seed (run once, reported for every seed count).
_SEEDLESS = protocol.SEEDLESS


def coarse_label(coarsening: str, k: int | None) -> str:
    """The ``CoarseGraph.level`` an env built with these arguments has (the key of its rows)."""
    if k is None:
        return coarsening
    return f"{'ops' if coarsening == 'ops' else 'fused'}+k{k}"


def graph_version(model: str) -> int:
    """The graph version a row of ``model`` gets: the zoo recipe's, 0 for a model file."""
    return MODELS[model].version if model in MODELS else 0


def run_cell(
    model: str,
    spec: str | MethodSpec,
    seed: int,
    budget: int | None,
    platform: str,
    backend: str,
    coarsening: str,
    k: int | None = None,
    backend_kwargs: dict[str, Any] | None = None,
    listeners: tuple = (),
    input_shapes: dict[str, list[int]] | None = None,
    protocol_version: str | None = None,
    tier: str | None = None,
) -> ResultRow:
    """Run one agent (a registered method or your own, see :mod:`agents.specs`) on a fresh env and
    return its row (``input_shapes``: for a dynamic-shape model file).

    Raises:
        AgentFailedError: If the agent raised or called ``sys.exit`` (one line naming the cell and why).
    """
    spec = spec if isinstance(spec, MethodSpec) else parse_spec(spec)
    agent = spec.build()
    source = load_benchmark(model, input_shapes=input_shapes) if input_shapes else model
    env = DevicePlacementEnv(
        source, platform, backend, coarsening=coarsening, k=k, backend_kwargs=backend_kwargs
    )
    try:
        try:
            outcome = run_agent(agent, env, budget, seed, listeners)
        except (Exception, SystemExit) as exc:
            if not is_agent_failure(exc):
                raise
            raise AgentFailedError(f"{model} {spec_label(spec.text)} seed {seed}: {failure_text(exc)}") from exc
        return make_row(
            env.problem, model, backend, spec.text, seed, budget, outcome, protocol_version, tier,
            modules=spec.modules,
        )  # fmt: skip
    finally:
        env.close()


def grid_cells(
    models: list[str], specs: list[MethodSpec], seeds: list[int], budget: int | None, platform_name: str,
    backend: str, label: str, protocol_version: str | None = None,
) -> list[tuple[tuple, str, MethodSpec, int]]:
    """Every cell of the grid as ``(key, model, spec, seed)``, each once (repeated models or seeds are
    dropped; a seedless method runs with the first seed only)."""
    cells = {}
    for model in dict.fromkeys(models):
        for spec in specs:
            for seed in list(dict.fromkeys(seeds))[: 1 if spec.name in _SEEDLESS else None]:
                key = cell_key(model, graph_version(model), platform_name, backend, label, spec.text, seed,
                               budget, protocol_version)  # fmt: skip
                cells.setdefault(key, (key, model, spec, seed))
    return list(cells.values())


def run_grid(
    out: Path,
    models: list[str],
    methods: list[str],
    seeds: list[int],
    budget: int | None,
    platform: str,
    backend: str,
    coarsening: str = "fused",
    k: int | None = None,
    backend_kwargs: dict | None = None,
    progress: bool = True,
    input_shapes: dict[str, list[int]] | None = None,
    protocol_version: str | None = None,
    tier: str | None = None,
    failures: list[str] | None = None,
    ray_address: str | None = None,
    ray_cpus: float = 1.0,
) -> list[ResultRow]:
    """Run every missing cell of the grid, appending rows to ``out/results.jsonl``; returns all rows
    (with ``ray_address``: as Ray tasks of ``ray_cpus`` CPUs each, see :mod:`experiments.ray_cells`).

    Repeated models, methods (after normalisation: ``milp:time_limit=30`` and ``milp:time_limit=30.0`` are
    one) or seeds run once. Each cell is claimed in the store before it runs, so a second ``bench`` on the
    same ``out`` runs the other cells (and takes over the cells of a writer that died); a cell is stored once.

    A cell whose agent raises or calls ``sys.exit`` stores no row (it runs again on a resume) and is
    reported with one ``FAILED`` line; the other cells run. Its line is appended to ``failures`` if given,
    else :class:`AgentFailedError` is raised once every cell ran.
    """
    specs = unique_specs(methods)  # a bad method fails now, not after the cells before it have run
    for spec in specs:
        spec.build()  # the constructors' own checks (cheap: nothing is trained or allocated here)
    store = ResultStore(out / "results.jsonl")
    for reason in store.set_aside():
        print(f"note: set aside {reason} (moved to {store.rejected_path}; its cell runs again)")
    platform_name = load_platform(platform).name  # rows record the name, also for a platform file
    label = coarse_label(coarsening, k)
    cells = grid_cells(models, specs, seeds, budget, platform_name, backend, label, protocol_version)
    done = store.keys()
    todo = [cell for cell in cells if cell[0] not in done]
    bar = _progress(len(todo), progress)
    failed: list[str] = []

    def store_row(model: str, spec: MethodSpec, seed: int, ran: Ran) -> None:
        row = ran.row
        store.append(row)
        bar.update(1)
        bar.write(
            f"{model:>12} {spec_label(spec.text):>28} seed {seed}: {row.latency * 1e3:9.3f} ms "
            f"({speedup_text(row)}, {row.evaluations} evals, {ran.seconds:.1f} s)"
        )

    def cell_failed(exc: BaseException) -> bool:
        if not isinstance(exc, AgentFailedError):
            return False
        failed.append(str(exc))  # this cell fails, the others go on
        bar.update(1)
        bar.write(f"FAILED {exc}")
        return True

    try:
        runner = cell_runner(ray_address, ray_cpus)  # local: each cell runs at submit; Ray: as tasks
        for key, model, spec, seed in todo:
            if not store.claim(key):  # stored or being run by another process meanwhile
                bar.update(1)
                continue
            bar.set_description(f"{model} {spec_label(spec.text)} seed {seed}")
            args = (model, spec, seed, budget, platform, backend, coarsening, k, backend_kwargs)
            kwargs = dict(input_shapes=input_shapes, protocol_version=protocol_version, tier=tier)
            on_row = functools.partial(store_row, model, spec, seed)
            runner.submit(Cell(key, run_cell, args, kwargs), store, on_row, cell_failed)
        runner.drain()
    finally:
        bar.close()
    elsewhere = store.claimed_elsewhere([cell[0] for cell in cells])
    if elsewhere:
        print(f"note: {len(elsewhere)} cell(s) are being run by another process on {out}; rerun to include them")
    if failures is not None:
        failures.extend(failed)
    else:
        raise_failures(failed)
    return store.rows()


def raise_failures(failed: list[str]) -> None:
    """Raise one :class:`AgentFailedError` naming the failed cells (none: nothing)."""
    if failed:
        raise AgentFailedError(
            f"{len(failed)} cell(s) failed, the others ran (their rows are stored; a rerun with the same "
            f"--out runs the failed ones again): {'; '.join(failed)}"
        )


def unique_specs(methods: list[str | MethodSpec]) -> list[MethodSpec]:
    """The parsed specs, each once (after normalisation: ``milp:time_limit=30`` and
    ``milp:time_limit=30.0`` are one), so no cell runs or counts twice. (The CLI refuses a repeat.)

    Raises:
        UnknownNameError, ConfigError: For a bad spec (see :func:`agents.specs.parse_spec`).
    """
    return list(dict.fromkeys(m if isinstance(m, MethodSpec) else parse_spec(m) for m in methods))


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="cell", dynamic_ncols=True)
