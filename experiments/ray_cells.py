"""Run leaderboard and bench cells on a Ray cluster: one cell a Ray task, every row stored by the driver.

``placement-gym leaderboard --run TIER --ray-address ADDR`` and ``placement-gym bench ... --ray-address
ADDR`` hand their cells to a :class:`CellRunner`. :class:`LocalCells` runs each cell when it is submitted
(the path without Ray); :class:`RayCells` sends it to the cluster as a task reserving ``num_cpus`` CPUs and
runs nothing itself. Either way the driver claims a cell in its :class:`~placement_gym.results.ResultStore`
before submitting it, and the row comes back to the driver, which appends it under the store's lock and
releases the claim: workers never touch the store, so it needs no shared file system.

Faults: a task whose worker process dies (killed, out of memory, its node lost) is run again by Ray, up to
``max_retries`` times; a try that died returned nothing, so the cell still gets one row. A cell that raises
(a bad method, a failing agent), or whose retries all died, stops the run as it does locally: the cells not
yet stored are cancelled and their claims released, and a rerun resumes with them.

What differs from a local run's row: ``wall_time`` and the timings a method reports in ``extra``
(:data:`TIMING_SUFFIXES`) are measured where the cell ran; everything else is the same computation and the
same bytes (:func:`comparable`). Methods stopped by a wall-clock limit (``milp``, ``moirai``, ``exact``)
depend on the machine's speed and load, with or without Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.defaults import RAY_CPUS as DEFAULT_CPUS
from placement_gym.errors import BackendError, ConfigError
from placement_gym.results import ResultRow, ResultStore, row_line

#: ``extra`` keys ending so are timings of the machine that ran the cell (``train_time``, ``solve_time``,
#: ``build_time``, ``steps_per_second``): like ``wall_time``, they may differ between two runs of a cell.
TIMING_SUFFIXES = ("_time", "_seconds", "per_second")
#: Times Ray runs a cell again after its worker died.
DEFAULT_RETRIES = 3


def comparable(row: ResultRow) -> str:
    """``row`` as its JSON line without the fields that are timings of the machine that ran it
    (``wall_time`` and the ``extra`` timings): two runs of a deterministic cell give the same text."""
    extra = {k: v for k, v in row.extra.items() if not k.endswith(TIMING_SUFFIXES)}
    return row_line(dataclasses.replace(row, wall_time=0.0, extra=extra))


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell: its key in the store, and the function that runs it (:func:`experiments.grid.run_cell`,
    importable on the workers) with its arguments."""

    key: tuple
    run: Callable[..., ResultRow]
    args: tuple
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Ran:
    """A cell's row and where it ran: ``cpu_seconds`` and ``seconds`` of the worker spent on it, ``host``
    and ``pid`` of that worker."""

    row: ResultRow
    cpu_seconds: float
    seconds: float
    host: str
    pid: int


def run_one(run: Callable[..., ResultRow], args: tuple, kwargs: dict[str, Any], cwd: str | None = None) -> Ran:
    """Run one cell here (the body of a Ray task; ``cwd``: the driver's folder, entered when this machine
    has it, so relative model paths and agent modules resolve as on the driver)."""
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    wall, cpu = time.perf_counter(), time.process_time()
    row = run(*args, **kwargs)
    return Ran(row, time.process_time() - cpu, time.perf_counter() - wall, socket.gethostname(), os.getpid())


OnRow = Callable[[Ran], None]
#: Called with a cell's exception: True if the cell just failed and the run goes on (its claim is released).
OnError = Callable[[BaseException], bool]


def _no_handler(exc: BaseException) -> bool:
    return False


class CellRunner:
    """Runs claimed cells and hands each one's :class:`Ran` to its callback, in the driver's process."""

    def submit(self, cell: Cell, store: ResultStore, on_row: OnRow, on_error: OnError = _no_handler) -> None:
        """Run ``cell`` (claimed in ``store`` by the caller); ``on_row`` stores its row. A cell that raises
        has its claim released; the run goes on if ``on_error`` returns True, else the error stops it."""
        raise NotImplementedError

    def drain(self) -> None:
        """Wait for every submitted cell (a failed cell raises, after the others are released)."""

    def close(self) -> None:
        """Give up the cells not run (their claims released)."""


class LocalCells(CellRunner):
    """Each cell runs in this process when it is submitted."""

    def submit(self, cell: Cell, store: ResultStore, on_row: OnRow, on_error: OnError = _no_handler) -> None:
        try:
            ran = run_one(cell.run, cell.args, cell.kwargs)
        except BaseException as exc:
            store.release(cell.key)  # another writer may take the cell
            if isinstance(exc, Exception) and on_error(exc):
                return
            raise
        on_row(ran)


def connect(address: str, num_cpus: int | None = None) -> Any:
    """Ray, connected to ``address`` (``local``: a new instance on this machine with ``num_cpus`` CPUs,
    all of them by default; ``auto``: the cluster ``ray start`` runs here; ``host:port`` or
    ``ray://host:10001``); an instance this process already started or joined is used as it is.

    Raises:
        BackendError: If Ray is not installed or the cluster cannot be reached.
    """
    try:
        import ray
    except ImportError as exc:
        raise BackendError("--ray-address needs Ray: pip install 'placement-gym[ray]'") from exc
    if not ray.is_initialized():
        extra: dict[str, Any] = {"include_dashboard": False, "num_cpus": num_cpus} if address == "local" else {}
        try:
            ray.init(address=address, log_to_driver=False, **extra)
        except Exception as exc:
            raise BackendError(f"cannot connect to Ray at {address!r}: {_first_line(exc)}") from exc
    return ray


def runtime_env() -> dict[str, Any]:
    """The Ray runtime environment of the cells' tasks: this copy of the code first on ``PYTHONPATH``
    (on the driver's machine the workers run the driver's code; elsewhere, the installed one)."""
    root = str(Path(__file__).resolve().parents[1])
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": pythonpath}}


class RayCells(CellRunner):
    """Each cell is a Ray task reserving ``num_cpus`` CPUs; rows come back here, in the order they finish.

    Args:
        address: See :func:`connect`.
        num_cpus: CPUs each cell's task reserves (Ray runs as many cells at a time on a node as fit).
        max_retries: Times a cell is run again after its worker died.
    """

    def __init__(
        self, address: str, num_cpus: float = DEFAULT_CPUS, max_retries: int = DEFAULT_RETRIES
    ) -> None:
        if not num_cpus > 0:
            raise ConfigError(f"CPUs per cell must be > 0, got {num_cpus!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"retries per cell must be an integer >= 0, got {max_retries!r}")
        self._ray = connect(address)
        self._task = self._ray.remote(run_one).options(
            num_cpus=num_cpus,
            max_retries=max_retries,
            retry_exceptions=False,  # an exception is the cell's result, not a lost worker
            runtime_env=runtime_env(),
        )
        self._cwd = os.getcwd()
        self._pending: dict[Any, tuple[Cell, ResultStore, OnRow, OnError]] = {}

    def submit(self, cell: Cell, store: ResultStore, on_row: OnRow, on_error: OnError = _no_handler) -> None:
        ref = self._task.remote(cell.run, cell.args, cell.kwargs, self._cwd)
        self._pending[ref] = (cell, store, on_row, on_error)

    def drain(self) -> None:
        ray = self._ray
        try:
            while self._pending:
                ready, _ = ray.wait(list(self._pending), num_returns=1)
                for ref in ready:
                    cell, store, on_row, on_error = self._pending.pop(ref)
                    try:
                        ran = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:  # the cell raised: the error is its own
                        store.release(cell.key)
                        cause = getattr(exc, "cause", None)
                        if isinstance(cause, Exception) and on_error(cause):
                            continue
                        if isinstance(cause, BaseException):
                            raise cause from exc  # the cell's own error (one line at the CLI), Ray's trace chained
                        raise
                    except ray.exceptions.RayError as exc:  # its worker died on every try, or Ray failed
                        store.release(cell.key)
                        raise BackendError(f"cell {_describe(cell)} was lost on Ray: {_first_line(exc)}") from None
                    on_row(ran)
        except BaseException:  # a failed cell or an interrupt: the cells not stored are given up
            self.close()
            raise

    def close(self) -> None:
        for ref, (cell, store, *_) in list(self._pending.items()):
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # finished or gone meanwhile: nothing left to stop
                pass
            store.release(cell.key)
        self._pending.clear()

    def __del__(self) -> None:  # a run that stopped before drain(): its claims go back
        try:
            self.close()
        except Exception:  # Ray already shut down at exit: the claims die with this process
            pass


def _describe(cell: Cell) -> str:
    model, spec, seed = cell.args[:3]
    return f"{model} {spec} seed {seed}"


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def cell_runner(
    address: str | None, num_cpus: float = DEFAULT_CPUS, max_retries: int = DEFAULT_RETRIES
) -> CellRunner:
    """The runner of a run: :class:`RayCells` on ``address``, or :class:`LocalCells` for ``None``."""
    return LocalCells() if address is None else RayCells(address, num_cpus, max_retries)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--ray-cpus`` that is not positive, or given without ``--ray-address``."""
    cpus = getattr(args, "ray_cpus", DEFAULT_CPUS)
    if not cpus > 0:
        raise ConfigError(f"--ray-cpus must be > 0, got {cpus:g}")
    if cpus != DEFAULT_CPUS and getattr(args, "ray_address", None) is None:
        raise ConfigError("--ray-cpus is the CPUs of a Ray task; give --ray-address too (e.g. --ray-address local)")

