"""Validation of result rows: check what each row claims (:mod:`experiments.records.provenance`),
replay its placement on its task, and rerun the deterministic methods (:func:`rerun_row`). The command is
``placement-gym validate`` (:mod:`experiments.cli.validate`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from agents.specs import module_within, outside_modules, spec_modules  # noqa: F401 (re-exported)
from experiments.records.provenance import method_name, row_problems, set_problems
from placement_gym.errors import ConfigError, PlacementGymError, RecordError
from placement_gym.problem import PlacementProblem
from placement_gym.results import ResultRow, parse_row, row_line

#: Relative tolerance of a replayed latency (the simulator is deterministic; this absorbs JSON rounding).
REL_TOL = 1e-9
#: Registered methods that give the same row for the same seed and take well under a second at the
#: protocol's tiers: every row of theirs is rerun by validation.
RERUN_METHODS = frozenset(
    {"single_device", "heft", "m_topo", "m_etf", "m_sct", "metis", "local_search", "random_search",
     "simulated_annealing"}
)  # fmt: skip
#: Spec arguments that stop a method on the wall clock: such a row is not expected to repeat.
WALL_CLOCK_ARGUMENTS = ("time_limit", "segment_time_limit")


@dataclass(frozen=True)
class Verdict:
    """The validation of one row.

    Attributes:
        where: ``"<file> line <n>"``.
        row: The row (``None`` if the line is not a valid row).
        problems: Why it was rejected (empty: it is accepted).
        replayed_latency: The latency of its placement now (``nan`` if not replayed).
    """

    where: str
    row: ResultRow | None
    problems: tuple[str, ...]
    replayed_latency: float = math.nan

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """One line for the terminal: ``OK`` or ``REJECTED`` with the row's cell and the reasons."""
        if self.row is None:
            return f"REJECTED {self.where}: {'; '.join(self.problems)}"
        r = self.row
        cell = f"{r.model}/{r.platform} {r.method} seed {r.seed}"
        if self.ok:
            return f"OK       {self.where}: {cell}, {r.latency * 1e3:.4f} ms"
        return f"REJECTED {self.where}: {cell}: {'; '.join(self.problems)}"


class Replayer:
    """Rebuilds each task once and replays rows on it."""

    def __init__(self) -> None:
        self._problems: dict[tuple[str, str, str], PlacementProblem | str] = {}

    def _problem(self, row: ResultRow) -> PlacementProblem | str:
        key = (row.model, row.platform, row.coarsening)
        if key not in self._problems:
            try:
                self._problems[key] = PlacementProblem.make(
                    row.model, row.platform, "simulated", coarsening=row.coarsening
                )
            except PlacementGymError as exc:
                self._problems[key] = (
                    f"task {row.model}/{row.platform} ({row.coarsening}) cannot be built: {exc}"
                )
        return self._problems[key]

    def replay(self, row: ResultRow, where: str) -> Verdict:
        """Replay one row on its task."""
        problems = _static_problems(row)
        if problems:
            return Verdict(where, row, tuple(problems))
        problem = self._problem(row)
        if isinstance(problem, str):
            return Verdict(where, row, (problem,))
        if row.graph_version != problem.benchmark.version:
            problems.append(
                f"graph version {row.graph_version} is not {row.model}'s current version {problem.benchmark.version}"
            )
        if row.groups != problem.num_groups:
            problems.append(f"{row.groups} groups stored, the task's graph has {problem.num_groups}")
        if row.task_sha256 is not None and row.task_sha256 != problem.task_sha256:
            problems.append(
                f"task hash {row.task_sha256[:12]}... is not the task's {problem.task_sha256[:12]}... "
                "(another graph or other platform figures under the same names)"
            )
        if len(row.placement) != problem.num_groups:
            problems.append(
                f"placement has {len(row.placement)} entries, the task has {problem.num_groups} groups"
            )
        if problems:
            return Verdict(where, row, tuple(problems))
        try:
            result = problem.backend.evaluate(problem.validate(row.placement))
        except PlacementGymError as exc:
            return Verdict(where, row, (f"placement rejected: {exc}",))
        latency = result.latency if result.feasible else math.inf
        if not _same(latency, row.latency):
            problems.append(
                f"stored latency {_ms(row.latency)} but its placement replays at {_ms(latency)}"
                + ("" if result.feasible else f" (infeasible: {result.reason})")
            )
        else:
            score = problem.score(latency)
            if math.isnan(score) != math.isnan(row.score) or not (
                math.isnan(score) or math.isclose(score, row.score, rel_tol=1e-6, abs_tol=1e-9)
            ):
                problems.append(f"stored score {row.score:.6f} but the replayed latency scores {score:.6f}")
        return Verdict(where, row, tuple(problems), latency)


def _static_problems(row: ResultRow) -> list[str]:
    """What is wrong with a row before replaying it."""
    from placement_gym.protocol import BACKEND, COARSENING
    from placement_gym.transfer import protocol_tasks

    problems = []
    if row.backend != BACKEND:
        problems.append(
            f"backend {row.backend!r} cannot be replayed (only {BACKEND!r} rows are deterministic)"
        )
    if row.protocol is not None:
        tasks = {(t.model, t.platform) for t in protocol_tasks(row.protocol)}
        if (row.model, row.platform) not in tasks or row.coarsening != COARSENING:
            problems.append(
                f"task {row.model}/{row.platform} ({row.coarsening}) is not a task of protocol {row.protocol}"
            )
    if row.budget is not None and row.evaluations > row.budget:
        problems.append(f"{row.evaluations} evaluations spent, over the budget of {row.budget}")
    return problems + row_problems(row)


def _same(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL)


def _ms(latency: float) -> str:
    return "infeasible" if math.isinf(latency) else f"{latency * 1e3:.6f} ms"


# ---------------------------------------------------------------------- the modules a rerun may import
def untrusted_modules(spec: str, trusted: Iterable[str] = ()) -> list[str]:
    """The modules of ``spec`` (:func:`~agents.specs.spec_modules`) that are neither the project's
    (:data:`~agents.specs.PROJECT_PACKAGES`) nor one of ``trusted`` or inside one: a rerun of the row would
    import code nobody vouched for."""
    trusted = tuple(trusted)
    return [m for m in outside_modules(spec) if not module_within(m, trusted)]


def trust_modules(names: Iterable[str]) -> dict[str, str]:
    """Import the modules the user trusts (``validate --trust-modules``), as a spec does (installed modules
    first, then the current folder); returns each name with the file it was imported from.

    Raises:
        RecordError: Naming a module that is not a module path or cannot be imported, and why.
    """
    from agents.specs import import_agent_module

    out = {}
    for name in names:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise RecordError(f"--trust-modules {name!r}: not a module name (pkg.module)")
        try:
            module = import_agent_module(name, f"--trust-modules {name}")
        except ConfigError as exc:
            raise RecordError(str(exc)) from exc
        except Exception as exc:  # the module's own code failed while importing
            raise RecordError(f"--trust-modules {name}: importing {name!r} failed ({type(exc).__name__}: {exc})") from exc
        out[name] = getattr(module, "__file__", None) or "(built in)"
    return out


# ---------------------------------------------------------------------- reruns
def rerun_row(row: ResultRow, where: str = "rerun", trusted: Iterable[str] = ()) -> Verdict:
    """Run ``row``'s method again on its task with its seed and budget, end to end, through the leaderboard's
    own path (:func:`experiments.grid.run_cell`), and compare: the verdict's problems say how the rerun's
    placement or evaluation count differ (empty: identical). A rerun that differs also says what differs
    in how it was made, where the row records it: torch's CPU kernels, and the identity of each module
    outside the project that the spec names (:func:`module_changes`).

    A results file never makes validation import code: a row whose spec names a module outside the project
    (:func:`untrusted_modules`) is rerun only if that module is in ``trusted`` (the modules the user named).
    """
    from experiments.grid import run_cell

    untrusted = untrusted_modules(row.method, trusted)
    if untrusted:
        return Verdict(where, row, (
            f"cannot be rerun: {row.method!r} is not a registered method of the project and names module "
            f"{', '.join(map(repr, untrusted))}, not trusted (validate --trust-modules)",
        ))  # fmt: skip
    try:
        again = run_cell(
            row.model, row.method, row.seed, row.budget, row.platform, row.backend, row.coarsening,
            protocol_version=row.protocol, tier=row.tier,
        )  # fmt: skip
    except (PlacementGymError, ValueError, TypeError) as exc:
        return Verdict(where, row, (f"cannot be rerun: {' '.join(str(exc).split())[:200]}",))
    problems = []
    if list(again.placement) != list(row.placement):
        moved = sum(a != b for a, b in zip(again.placement, row.placement, strict=True))
        problems.append(
            f"rerun places {moved} of {len(row.placement)} groups elsewhere ({_ms(again.latency)}, stored "
            f"{_ms(row.latency)})"
        )
    if again.evaluations != row.evaluations:
        problems.append(f"rerun spends {again.evaluations} evaluations, stored {row.evaluations}")
    made, now = row.versions.get("torch_cpu_kernels"), again.versions.get("torch_cpu_kernels")
    if problems and made is not None and now is not None and made != now:
        problems.append(f"the row was made with torch's {made} CPU kernels, the rerun ran {now} (see protocol.md)")
    if problems:
        problems += module_changes(row.versions, again.versions)
    return Verdict(where, row, tuple(problems), again.latency)


def module_changes(made: dict[str, str], now: dict[str, str]) -> list[str]:
    """One line for each outside module whose identity (``versions["module:<name>"]``,
    :func:`placement_gym.results.module_versions`) differs between a row (``made``) and its rerun (``now``),
    ``"the row was made with ppo_torch sha256 5bc33405a5b5..., the module imported now is sha256
    0a1b2c3d4e5f..."`` (an installed module: ``"... stable_baselines3 from stable_baselines3==2.3.2 ..."``).
    A row that records no module (made before rows recorded them) gives none."""
    from placement_gym.results import MODULE_KEY

    out = []
    for key, was in made.items():
        if not key.startswith(MODULE_KEY) or now.get(key) in (None, was):
            continue
        out.append(
            f"the row was made with {key.removeprefix(MODULE_KEY)} {_module_text(was)}, the module imported now "
            f"is {_module_text(now[key])}"
        )
    return out


def _module_text(identity: str) -> str:
    """A module's identity in a few words: ``sha256 <12 hex digits>...`` or ``from <dist>==<version>``."""
    return f"sha256 {identity[7:19]}..." if identity.startswith("sha256:") else f"from {identity}"


def wall_clock_bound(row: ResultRow) -> bool:
    """Whether the row's method spec stops on the wall clock (a solver's time limit)."""
    arguments = row.method.partition(":")[2]
    return any(f"{name}=" in arguments for name in WALL_CLOCK_ARGUMENTS)


def sample_rows(verdicts: Sequence[Verdict], n: int, seed: int = 0, trusted: Iterable[str] = ()) -> list[Verdict]:
    """``n`` accepted rows drawn without replacement with ``seed``, in file order; rows of methods stopped
    by the wall clock (:func:`wall_clock_bound`), which are not expected to repeat, and rows whose spec names
    a module that is neither the project's nor in ``trusted`` (:func:`untrusted_modules`; validation never
    imports a module only because a results file names it) are not drawn."""
    trusted = tuple(trusted)
    pool = [v for v in _rerunnable(verdicts) if not untrusted_modules(v.row.method, trusted)]
    picks = np.random.default_rng(seed).choice(len(pool), size=min(n, len(pool)), replace=False)
    return [pool[i] for i in sorted(picks)]


def _rerunnable(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The accepted rows that are expected to repeat (not stopped by the wall clock)."""
    return [v for v in verdicts if v.ok and v.row is not None and not wall_clock_bound(v.row)]


def left_out(verdicts: Sequence[Verdict], trusted: Iterable[str] = ()) -> dict[str, int]:
    """How many accepted rows :func:`sample_rows` leaves out because their spec names a module that is not
    trusted, by the first such module (``{"ppo_torch": 60}``)."""
    trusted = tuple(trusted)
    out: dict[str, int] = {}
    for v in _rerunnable(verdicts):
        untrusted = untrusted_modules(v.row.method, trusted)
        if untrusted:
            out[untrusted[0]] = out.get(untrusted[0], 0) + 1
    return out


# ---------------------------------------------------------------------- the verdict cache
@cache
def code_fingerprint() -> str:
    """SHA-256 of every file of the packages a verdict depends on (their code and data)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in ("placement_gym", "agents", "experiments"):
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class VerdictCache:
    """Problems found for each row text, on one version of the code (:func:`code_fingerprint`): a JSON file
    under the cache root (``$PLACEMENT_GYM_CACHE`` or ``~/.cache/placement_gym``), ``validate/``.

    Args:
        path: The cache file (default: the one of the current code); ``None`` with ``enabled=False``.
        enabled: Whether to read and write it at all.
    """

    def __init__(self, path: Path | None = None, enabled: bool = True) -> None:
        from placement_gym.cache import cache_root

        self.enabled = enabled
        self.path = path or cache_root() / "validate" / f"{code_fingerprint()[:32]}.json"
        self._entries: dict[str, dict] = {}
        self._dirty = False
        if enabled:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self._entries = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._entries = {}

    @staticmethod
    def key(row: ResultRow) -> str:
        return hashlib.sha256(row_line(row).encode()).hexdigest()

    def get(self, row: ResultRow, where: str) -> Verdict | None:
        entry = self._entries.get(self.key(row)) if self.enabled else None
        if not isinstance(entry, dict) or not isinstance(entry.get("problems"), list):
            return None
        latency = entry.get("latency")
        latency = math.inf if latency is None else float(latency)
        return Verdict(where, row, tuple(str(p) for p in entry["problems"]), latency)

    def put(self, verdict: Verdict) -> None:
        if self.enabled and verdict.row is not None:
            latency = verdict.replayed_latency
            self._entries[self.key(verdict.row)] = {
                "problems": list(verdict.problems),
                "latency": None if math.isinf(latency) else latency,
            }
            self._dirty = True

    def save(self) -> None:
        """Write the entries (atomically); an unwritable cache is skipped: it only saves time."""
        if not (self.enabled and self._dirty):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._entries, f)
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError:
            pass


# ---------------------------------------------------------------------- validation
def read_lines(paths: Iterable[Path]) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every non-blank line of the files."""
    for path in paths:
        if not Path(path).is_file():
            raise RecordError(f"{path}: no such results file")
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, 1):
                if text.strip():
                    yield f"{path} line {number}", text


def check_row(row: ResultRow, where: str, replayer: Replayer, rerun: bool = True) -> Verdict:
    """One row's verdict on its own: provenance, replay, and a rerun of a :data:`RERUN_METHODS` row."""
    verdict = replayer.replay(row, where)
    if verdict.ok and rerun and method_name(row.method) in RERUN_METHODS and not wall_clock_bound(row):
        again = rerun_row(row, where)
        if not again.ok:
            verdict = dataclasses.replace(verdict, problems=again.problems)
    return verdict


def validate(
    paths: Iterable[Path], rerun: bool = True, cache: VerdictCache | None = None
) -> list[Verdict]:
    """Validate every row of the files (see the module docstring).

    Args:
        paths: Results files.
        rerun: Rerun the rows of :data:`RERUN_METHODS`.
        cache: Verdicts of single rows already found (default: the current code's :class:`VerdictCache`).
    """
    cache = cache if cache is not None else VerdictCache()
    replayer = Replayer()
    verdicts = []
    for where, text in read_lines(paths):
        try:
            row = parse_row(text, where)
        except RecordError as exc:
            verdicts.append(Verdict(where, None, (str(exc).removeprefix(f"{where}: "),)))
            continue
        verdict = cache.get(row, where) if rerun else None
        if verdict is None:
            verdict = check_row(row, where, replayer, rerun)
            if rerun:
                cache.put(verdict)
        verdicts.append(verdict)
    cache.save()
    together = set_problems([v.row for v in verdicts])
    return [
        dataclasses.replace(v, problems=v.problems + tuple(extra)) if extra else v
        for v, extra in zip(verdicts, together, strict=True)
    ]


#: Where a rerun row was made, against the CPU validating it (:func:`made_on`).
THIS_CPU, OTHER_CPU, UNKNOWN_CPU = "this CPU", "another CPU", "an unrecorded CPU"


def made_on(row: ResultRow, here: str | None = None) -> str:
    """:data:`THIS_CPU` if ``row`` records the fingerprint of this CPU (``here``, default: this process's
    :func:`~placement_gym.results.cpu_identity`), :data:`OTHER_CPU` if it records another,
    :data:`UNKNOWN_CPU` if it records none (rows made before rows recorded their CPU)."""
    made = row.versions.get("cpu_fingerprint")
    if made is None:
        return UNKNOWN_CPU
    if here is None:
        from placement_gym.results import library_versions

        here = library_versions()["cpu_fingerprint"]
    return THIS_CPU if made == here else OTHER_CPU


def _cpu_text(versions: dict[str, str]) -> str:
    """A row's CPU in a few words: model, family/model/stepping, torch's kernels and fingerprint."""
    parts = [versions.get("cpu_model", "unknown"), versions.get("cpu_id", "unknown")]
    parts.append(f"torch {versions.get('torch_cpu_kernels', 'unknown')} kernels")
    if versions.get("cpu_kernel_env"):
        parts.append(versions["cpu_kernel_env"])
    return ", ".join(parts) + f"; fingerprint {versions.get('cpu_fingerprint', 'none')}"


@dataclass(frozen=True)
class RerunSummary:
    """What ``validate --rerun`` found (:func:`rerun_sample`).

    Attributes:
        sampled: Rows rerun.
        identical: Reruns that gave the stored placement and evaluation count.
        failed: Reruns that differ from a row made on this CPU, or could not run: a row that does not
            repeat where it should.
        other_cpu: Reruns that differ from a row made on another CPU (not checkable here).
        unknown_cpu: Reruns that differ from a row that records no CPU (not checkable here).
        made: Sampled rows per :func:`made_on` answer.
        untrusted: Accepted rows left out of the sample because their spec names a module that is not
            trusted, by that module (:func:`left_out`).
    """

    sampled: int
    identical: int
    failed: int
    other_cpu: int
    unknown_cpu: int
    made: dict[str, int]
    untrusted: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def unverified(self) -> int:
        """Reruns that differ from rows made elsewhere or on an unrecorded CPU."""
        return self.other_cpu + self.unknown_cpu

    def line(self, seed: int) -> str:
        text = f"rerun: {self.identical} of {self.sampled} sampled rows identical (sample seed {seed})"
        if self.failed:
            text += f"; {self.failed} differ on the CPU that made them or could not run (DIFFERS)"
        if self.other_cpu:
            text += f"; {self.other_cpu} differ but were made on another CPU (OTHER-CPU, not checkable here)"
        if self.unknown_cpu:
            text += f"; {self.unknown_cpu} differ but record no CPU (UNKNOWN-CPU, not checkable here)"
        made = ", ".join(f"{self.made.get(k, 0)} on {k}" for k in (THIS_CPU, OTHER_CPU, UNKNOWN_CPU))
        text += f"; rows made: {made}"
        if self.untrusted:
            modules = sorted(self.untrusted)
            counts = ", ".join(f"{self.untrusted[m]} of {m}" for m in modules)
            text += (
                f"; {sum(self.untrusted.values())} accepted rows left out of the sample because their method's "
                f"module is not trusted ({counts}; rerun them with --trust-modules {','.join(modules)})"
            )
        return text


def rerun_sample(verdicts: Sequence[Verdict], n: int, seed: int, trusted: Iterable[str] = ()) -> RerunSummary:
    """Rerun ``n`` sampled accepted rows, print one line each and a summary (:class:`RerunSummary`).

    ``trusted``: modules the user named (:func:`trust_modules`, already imported): rows whose spec names them
    are drawn and rerun too; the summary counts the accepted rows left out for a module not trusted. A rerun
    is never cached (the :class:`VerdictCache` holds single-row verdicts, which import no outside module), so
    an edited module is always the one rerun.

    Each line starts with ``IDENTICAL``, ``DIFFERS`` (the rerun differs from a row made on this CPU, or
    could not run), ``OTHER-CPU`` (it differs from a row made on another CPU) or ``UNKNOWN-CPU`` (it differs
    from a row that records no CPU), and says which of the three CPUs made the row: a seeded learner's
    row repeats only on the kind of CPU that made it (docs/protocol.md)."""
    from placement_gym.results import library_versions

    here_versions = library_versions()
    here = here_versions["cpu_fingerprint"]
    trusted = tuple(trusted)
    sample = sample_rows(verdicts, n, seed, trusted)
    counts = {"identical": 0, "failed": 0, "other_cpu": 0, "unknown_cpu": 0}
    made_counts: dict[str, int] = {}
    for v in sample:
        again = rerun_row(v.row, v.where, trusted)
        r = v.row
        made = made_on(r, here)
        made_counts[made] = made_counts.get(made, 0) + 1
        cell = f"{r.model}/{r.platform} {r.method} seed {r.seed}"
        if again.ok:
            counts["identical"] += 1
            print(
                f"IDENTICAL   {v.where}: {cell}, {r.evaluations} evaluations, {_ms(r.latency)} (made on {made})"
            )
            continue
        why = "; ".join(again.problems)
        if made == THIS_CPU or any(p.startswith("cannot be rerun") for p in again.problems):
            counts["failed"] += 1
            print(f"DIFFERS     {v.where}: {cell}: {why} (made on {made})")
        elif made == OTHER_CPU:
            counts["other_cpu"] += 1
            print(
                f"OTHER-CPU   {v.where}: {cell}: {why} (made on another CPU: {_cpu_text(r.versions)}; "
                f"this one: {_cpu_text(here_versions)})"
            )
        else:
            counts["unknown_cpu"] += 1
            print(
                f"UNKNOWN-CPU {v.where}: {cell}: {why} (the row records no CPU; "
                f"this one: {_cpu_text(here_versions)})"
            )
    summary = RerunSummary(len(sample), made=made_counts, untrusted=left_out(verdicts, trusted), **counts)
    print(summary.line(seed))
    return summary
