"""One row format for every result, and the store that holds the rows (JSON lines, safe with two writers).

A :class:`ResultRow` records everything needed to replay and compare a result: the task (model and graph
version, platform, backend, coarsening), the method spec, the seed, the tier and budget, the protocol
version, the placement, its latency and normalised score, the evaluations spent, the wall time, the
history thinned at fixed checkpoints (:data:`CHECKPOINTS`) and the library versions. ``bench`` and every
experiment script that writes rows write this format; ``experiments.records.report`` and the aggregates read it.

A row's cell key (:attr:`ResultRow.key`) is its task, method, seed, budget and protocol version. The
:class:`ResultStore` keeps one row per cell, also with several processes writing one folder (two
``bench`` runs started on one ``--out``):

* every append holds an exclusive lock on ``<store>.lock`` and is skipped if the cell is already stored;
* a writer claims a cell before running it (:meth:`ResultStore.claim`: a file under ``.claims/``); a
  claim held by a live process makes other writers skip the cell, a dead writer's claim is taken over;
* reading keeps the first row of each cell key (older files may hold repeats).

Every line read back is checked against :class:`RowSchema` (numbers written as strings are converted;
unknown keys are errors); a line that is not valid JSON or does not follow the schema (a torn last line
after a crash, a hand edit) is reported with its line number and never crashes a resume:
:meth:`ResultStore.set_aside` moves it into ``<name>.rejected.jsonl`` and its cell runs again.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import platform as pyplatform
import re
import socket
import sys
import tempfile
import warnings
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from placement_gym.errors import RecordError

#: Evaluation counts at which a row keeps its history (best latency so far): 1, 2, 5, 10, 20, 50, ...
CHECKPOINTS: tuple[int, ...] = tuple(m * 10**e for e in range(8) for m in (1, 2, 5))
#: Libraries whose versions a row records.
LIBRARIES = (
    "placement-gym", "openvino", "torch", "gymnasium", "stable-baselines3", "numpy",
    "torch-geometric", "sb3-contrib", "scipy", "numba",
)  # fmt: skip


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a result depends on (and Python's), the CPU kernels torch
    runs here (:func:`torch_cpu_kernels`) and the CPU itself (:func:`cpu_identity`)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name.replace("-", "_")] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name.replace("-", "_")] = "not installed"
    out["python"] = pyplatform.python_version()
    kernels = torch_cpu_kernels()
    if kernels is not None:
        out["torch_cpu_kernels"] = kernels
    out.update(cpu_identity(kernels or "none"))
    return out


#: The prefix of a ``versions`` key that records a module outside placement-gym which a row's method spec
#: names (``module:ppo_torch``): :func:`module_versions`.
MODULE_KEY = "module:"
#: What such a key holds: ``sha256:<hex>`` of the module's file, or ``<distribution>==<version>`` for a
#: module of an installed distribution.
MODULE_RECORD = re.compile(
    r"(sha256:[0-9a-f]{64}|[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*)\Z"
)
#: Identities of the module objects recorded so far (:func:`module_identity`).
_MODULE_IDENTITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def module_versions(names: Iterable[str]) -> dict[str, str]:
    """``{"module:<name>": identity}`` of each module of ``names`` that is imported (:func:`module_identity`):
    what a row records of the code of an agent of your own, which the commit of placement-gym does not
    identify. A name that is not an imported module, or a module without a file, is left out."""
    out = {}
    for name in names:
        identity = module_identity(name)
        if identity is not None:
            out[MODULE_KEY + name] = identity
    return out


def module_identity(name: str) -> str | None:
    """The identity of the imported module ``name`` (``None``: not imported, or no file): for a module of an
    installed distribution (a file under site-packages), ``<distribution>==<version>``
    (``stable_baselines3==2.3.2``); otherwise ``sha256:<hex>`` of the file it was imported from (a
    package's ``__init__.py``). Found once per module object, when a row first records it: an edit of the
    file after that is not the code the process runs, and a module imported again (a new process) is
    hashed again."""
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if module is None or not file:
        return None
    try:
        return _MODULE_IDENTITIES[module]
    except (KeyError, TypeError):
        pass
    path = Path(file).resolve()
    identity = None
    if any(path.is_relative_to(folder) for folder in _installed_folders()):
        dists = _distributions().get(name.partition(".")[0], [])
        if dists:
            with contextlib.suppress(metadata.PackageNotFoundError):
                identity = f"{dists[0]}=={metadata.version(dists[0])}"
    if identity is None:
        try:
            identity = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return None
    with contextlib.suppress(TypeError):
        _MODULE_IDENTITIES[module] = identity
    return identity


@functools.cache
def _installed_folders() -> tuple[Path, ...]:
    """The folders installed distributions live in (site-packages, the user's too)."""
    import site
    import sysconfig

    folders = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    with contextlib.suppress(AttributeError):  # some virtualenvs' site module lacks these
        folders.update(site.getsitepackages())
        folders.add(site.getusersitepackages())
    return tuple(Path(f).resolve() for f in sorted(folders))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that provide it."""
    return metadata.packages_distributions()


#: Environment variables that narrow the kernels torch, MKL and oneDNN choose (recorded when set).
KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"
)  # fmt: skip


def _dispatch_flag(flag: str) -> bool:
    """Whether a CPU flag is one the kernel libraries choose their code by (x86 vector and matrix
    extensions, Arm's vector extensions)."""
    return flag in ("avx2", "fma", "asimd") or flag.startswith(("avx512", "amx", "sve"))


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


def _cpu_caches() -> str:
    """The first CPU's cache sizes (``L1d 32K L1i 32K L2 1024K L3 32768K``; ``unknown`` where the system does
    not say): MKL sizes its blocks by them, outside its reproducible mode."""
    parts = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix} {size}")
    if not parts and _cpuinfo().get("cache size"):
        parts.append(_cpuinfo()["cache size"].replace(" ", ""))
    return " ".join(parts) or "unknown"


def cpu_identity(torch_kernels: str | None = None) -> dict[str, str]:
    """The CPU a result was computed on, as far as its kernels can tell: ``cpu_vendor``, ``cpu_model`` (the
    model name), ``cpu_id`` (family, model and stepping), ``cpu_isa`` (the sorted flags kernels dispatch
    on: ``avx2``, ``fma``, ``avx512*``, ``amx*``), ``cpu_caches`` (:func:`_cpu_caches`), ``cpu_kernel_env`` (the :data:`KERNEL_VARIABLES` set,
    only if any is) and ``cpu_fingerprint``: 12 hex digits of a hash of all of them and of torch's CPU
    kernels (``torch_kernels``, default: :func:`torch_cpu_kernels`). A seeded learner's row reruns exactly
    where the fingerprint is the same (docs/protocol.md). Fields a system does not report are ``unknown``."""
    info = _cpuinfo()
    vendor = info.get("vendor_id") or info.get("CPU implementer") or pyplatform.processor() or "unknown"
    model = info.get("model name") or info.get("Hardware") or pyplatform.processor() or "unknown"
    if "cpu family" in info:
        cpu_id = (
            f"family {info['cpu family']} model {info.get('model', '?')} stepping {info.get('stepping', '?')}"
        )
    elif "CPU part" in info:  # Arm
        cpu_id = (
            f"architecture {info.get('CPU architecture', '?')} part {info['CPU part']} "
            f"revision {info.get('CPU revision', '?')}"
        )
    else:
        cpu_id = "unknown"
    flags = (info.get("flags") or info.get("Features") or "").split()
    isa = " ".join(sorted({f for f in flags if _dispatch_flag(f)})) if flags else "unknown"
    out = {"cpu_vendor": vendor, "cpu_model": model, "cpu_id": cpu_id, "cpu_isa": isa, "cpu_caches": _cpu_caches()}
    settings = " ".join(f"{name}={os.environ[name]}" for name in KERNEL_VARIABLES if os.environ.get(name))
    if settings:
        out["cpu_kernel_env"] = settings
    if torch_kernels is None:
        torch_kernels = torch_cpu_kernels() or "none"
    identity = {**out, "machine": pyplatform.machine(), "torch_cpu_kernels": torch_kernels}
    out["cpu_fingerprint"] = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return out


def torch_cpu_kernels() -> str | None:
    """The vector instruction set of torch's CPU kernels (``AVX512``, ``AVX2``, ``DEFAULT``), or ``None`` if
    torch is not installed. A seeded torch method repeats its row only with the same kernels, which sum in
    another order at another width (docs/protocol.md). Recorded whether or not the run used torch (torch is
    imported here if it is not yet), so a row does not depend on what its process imported before it:
    a cell run in a fresh Ray worker and the same cell run after a model conversion give the same row."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return None
    return str(torch.backends.cpu.get_cpu_capability())


def thin_history(
    history: list[tuple[int, float]], checkpoints: tuple[int, ...] = CHECKPOINTS
) -> list[tuple[int, float]]:
    """The best latency so far at each checkpoint the run reached, and at its last evaluation.

    Args:
        history: ``(evaluations so far, best latency so far)``, increasing in evaluations.
        checkpoints: Evaluation counts to keep.

    Returns:
        ``(checkpoint, best latency after that many evaluations)`` for every checkpoint up to the last
        evaluation, then the last entry of ``history`` (if not a checkpoint itself).
    """
    if not history:
        return []
    out: list[tuple[int, float]] = []
    i = 0
    last = history[-1][0]
    for c in checkpoints:
        if c > last:
            break
        while i + 1 < len(history) and history[i + 1][0] <= c:
            i += 1
        if history[i][0] <= c:
            out.append((c, history[i][1]))
    if not out or out[-1][0] != last:
        out.append((last, history[-1][1]))
    return out


@dataclass
class ResultRow:
    """One run of one method with one seed on one task.

    Attributes:
        model: Zoo name or model path.
        graph_version: The benchmark graph's version (:attr:`~placement_gym.benchmarks.Benchmark.version`).
        platform: Platform name.
        backend: ``simulated`` or ``measured``.
        coarsening: Coarsening level of the placed graph (``fused``, ``fused+k64``...).
        groups: Groups placed.
        method: The method spec as given (``heft``, ``milp:time_limit=60``, ``my_pkg.mod:MyAgent``).
        seed: The method's seed.
        budget: Evaluation budget (distinct placements; ``None``: the method's own rule).
        latency: Latency of the placement, seconds (``inf`` if infeasible; ``null`` in the file).
        cpu_only_latency: Latency with every group on the CPU.
        speedup_vs_cpu: The speedup over :attr:`speedup_reference` (0 if infeasible, NaN if there is no
            reference).
        evaluations: Distinct placements the method evaluated.
        wall_time: Seconds the method ran.
        placement: Device index of each group.
        history: ``(evaluations, best latency so far)`` at :data:`CHECKPOINTS` (see :func:`thin_history`).
        extra: Method-specific facts.
        versions: :func:`library_versions`, and for an agent of your own the modules its spec names
            (:func:`module_versions`).
        model_path, model_sha256, input_shapes: For a model loaded from a file.
        task_sha256: The task's content hash (:func:`placement_gym.tasks.task_sha256`): what the row is
            scored against.
        protocol: Protocol version the row was run under (``"v1"``; ``None``: no protocol, a custom grid).
        tier: The protocol tier (``"standard"``...) or ``None``.
        score: Normalised score against the task's reference optimum (``nan``: the task has none).
        speedup_reference: What ``speedup_vs_cpu`` is against: ``"cpu_only"``; where CPU-only does not fit
            in memory, the fastest single device that does (``"<device>_only"``); ``"none"`` where no
            single device fits (the speedup is then NaN). Rows written before this field: CPU-only.
        track: What the method read: ``"black-box"`` (it only evaluated placements) or ``"white-box"`` (it
            could read the cost model); ``None`` in rows written before tracks existed (the method's
            declared track applies).
    """

    model: str
    graph_version: int
    platform: str
    backend: str
    coarsening: str
    groups: int
    method: str
    seed: int
    budget: int | None
    latency: float
    cpu_only_latency: float
    speedup_vs_cpu: float
    evaluations: int
    wall_time: float
    placement: list[int]
    history: list[tuple[int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    model_path: str | None = None
    model_sha256: str | None = None
    input_shapes: dict[str, list[int]] | None = None
    task_sha256: str | None = None
    protocol: str | None = None
    tier: str | None = None
    score: float = math.nan
    speedup_reference: str = "cpu_only"
    track: str | None = None

    @property
    def key(self) -> tuple:
        """The cell: task, method, seed, budget and protocol version (one row per key in a store)."""
        return cell_key(
            self.model, self.graph_version, self.platform, self.backend, self.coarsening, self.method,
            self.seed, self.budget, self.protocol,
        )  # fmt: skip


def cell_key(
    model: str,
    graph_version: int,
    platform: str,
    backend: str,
    coarsening: str,
    method: str,
    seed: int,
    budget: int | None,
    protocol: str | None,
) -> tuple:
    """The key of a cell (see :attr:`ResultRow.key`), to test for a stored row before running it."""
    return (model, int(graph_version), platform, backend, coarsening, method, int(seed), budget, protocol)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):  # inf latency of an infeasible result, NaN
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        return _jsonable(value.item())
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def reject_bool(value: Any) -> Any:
    """A pydantic before-validator: JSON booleans are not accepted where a number belongs."""
    if isinstance(value, bool):  # JSON true is not the number 1 here
        raise ValueError("a boolean is not a number")
    return value


_Int = Annotated[int, BeforeValidator(reject_bool)]
_Count = Annotated[int, Field(ge=0), BeforeValidator(reject_bool)]
_Float = Annotated[float, BeforeValidator(reject_bool)]
_Name = Annotated[str, Field(min_length=1, max_length=4096)]
_Tag = Annotated[str, Field(min_length=1, max_length=64)]


class RowSchema(BaseModel):
    """What one line of a results file must hold (a :class:`ResultRow`; ``null`` for a non-finite number).
    Numbers written as strings are converted (``"seed": "0"`` is seed 0); unknown keys, missing keys and
    values of the wrong kind are errors. Rows written before the protocol fields existed read with
    ``protocol = tier = None`` and no score."""

    model_config = ConfigDict(extra="forbid")

    model: _Name
    graph_version: _Count
    platform: _Name
    backend: _Name
    coarsening: _Name
    groups: _Count
    method: _Name
    seed: _Int
    budget: _Count | None
    latency: _Float | None
    cpu_only_latency: _Float | None
    speedup_vs_cpu: _Float | None
    evaluations: _Count
    wall_time: _Float
    placement: list[_Count]
    history: list[tuple[_Count, _Float | None]] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    model_path: str | None = None
    model_sha256: str | None = None
    input_shapes: dict[str, list[_Count]] | None = None
    task_sha256: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")
    protocol: _Tag | None = None
    tier: _Tag | None = None
    score: _Float | None = None
    speedup_reference: _Name = "cpu_only"
    track: Annotated[str, Field(pattern="^(black-box|white-box)$")] | None = None

    def to_row(self) -> ResultRow:
        data = self.model_dump()
        data["history"] = [(e, math.inf if v is None else v) for e, v in self.history]
        for key in ("latency", "cpu_only_latency"):
            data[key] = math.inf if data[key] is None else data[key]
        if data["speedup_vs_cpu"] is None:  # no single device fits (written as null)
            data["speedup_vs_cpu"] = math.nan
        data["score"] = math.nan if data["score"] is None else data["score"]
        return ResultRow(**data)


def json_object(text: str, where: str, what: str) -> dict[str, Any]:
    """The JSON object of one line of a records file (``what`` names the record in errors).

    Raises:
        RecordError: If the line is not JSON or not an object, naming ``where``.
    """
    try:
        data = json.loads(text)
    except RecursionError:
        raise RecordError(f"{where}: nested too deeply to be {what}") from None
    except ValueError as exc:
        raise RecordError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{where}: {what} is a JSON object, got {type(data).__name__}")
    return data


def parse_row(text: str, where: str) -> ResultRow:
    """One JSON line as a row.

    Args:
        text: The line.
        where: ``"<file> line <n>"``, for the message.

    Raises:
        RecordError: If the line is not JSON, or does not follow :class:`RowSchema` (names the field).
    """
    data = json_object(text, where, "a result row")
    try:
        return RowSchema.model_validate(data).to_row()
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'row'}: {e['msg']}"
            + ("" if e["type"] in ("missing", "extra_forbidden") else f" (got {_short(e['input'])})")
            for e in exc.errors()[:5]
        ]
        raise RecordError(f"{where}: " + "; ".join(problems)) from None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def row_line(row: ResultRow) -> str:
    """``row`` as one JSON line (non-finite numbers as ``null``)."""
    return json.dumps(_jsonable(asdict(row)), allow_nan=False) + "\n"


def first_per_cell(rows: list[ResultRow]) -> list[ResultRow]:
    """``rows`` with only the first row of each cell key, in order."""
    seen: set[tuple] = set()
    out = []
    for row in rows:
        if row.key not in seen:
            seen.add(row.key)
            out.append(row)
    return out


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc``), to tell a reused pid from the original."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(owner: dict[str, Any]) -> bool:
    """True unless the claim's owner is known to be gone (same host, and no such process any more)."""
    if owner.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, assume it runs
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    started = owner.get("started")
    return started is None or started == _process_start(pid)


class ResultStore:
    """A JSON-lines file of :class:`ResultRow` s, one per cell, safe with several writing processes.

    Args:
        path: The ``.jsonl`` file (created with its folder if missing).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _process_start(os.getpid())}

    @property
    def rejected_path(self) -> Path:
        """Where :meth:`set_aside` puts bad lines: ``results.jsonl`` -> ``results.rejected.jsonl``."""
        return self.path.with_name(f"{self.path.stem}.rejected{self.path.suffix}")

    @property
    def claims_dir(self) -> Path:
        """Folder of the cell claims (``.claims/`` next to the store, one small file per running cell)."""
        return self.path.with_name(f".{self.path.stem}.claims")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock (``<store>.lock``, never followed if it is a link)."""
        lock_path = self.path.with_name(f".{self.path.name}.lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise RecordError(f"cannot lock {self.path} through {lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def read(self) -> tuple[list[ResultRow], list[tuple[int, str, str]]]:
        """Every valid row (repeats of a cell included), and every bad line as ``(line number, text,
        reason)``; the file is unchanged.

        Raises:
            RecordError: If the file exists but cannot be read (a folder, no permission).
        """
        rows: list[ResultRow] = []
        bad: list[tuple[int, str, str]] = []
        if not self.path.exists():
            return rows, bad
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise RecordError(f"cannot read {self.path}: {exc}") from exc
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append(parse_row(line, f"{self.path} line {number}"))
            except RecordError as exc:
                bad.append((number, line, str(exc)))
        return rows, bad

    def rows(self) -> list[ResultRow]:
        """The first valid row of each cell; bad lines (a torn last line, say) are skipped with a warning
        naming them."""
        rows, bad = self.read()
        for _, _, reason in bad:
            warnings.warn(f"skipped {reason}", RuntimeWarning, stacklevel=2)
        return first_per_cell(rows)

    def keys(self) -> set[tuple]:
        """The cell keys stored."""
        return {row.key for row in self.read()[0]}

    def set_aside(self) -> list[str]:
        """Move bad lines into :attr:`rejected_path` (appended, with line number and reason) and rewrite
        the store with the valid lines only (atomically, under the lock). Returns the reasons, one per
        moved line."""
        with self.lock():
            rows, bad = self.read()
            if not bad:
                return []
            with open(self.rejected_path, "a", encoding="utf-8") as f:
                for number, text, reason in bad:
                    f.write(json.dumps({"line": number, "reason": reason, "text": text}) + "\n")
                f.flush()
                os.fsync(f.fileno())
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as f:
                f.writelines(row_line(row) for row in rows)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        return [reason for _, _, reason in bad]

    def append(self, row: ResultRow) -> bool:
        """Append one row durably (flushed and fsynced, under the lock) unless its cell is stored already;
        a torn last line is first ended, so the new row never joins it. Releases this process's claim on
        the cell.

        Returns:
            True if the row was written, False if the cell already had a row.
        """
        line = row_line(row)
        with self.lock():
            if row.key in self.keys():
                written = False
            else:
                with open(self.path, "ab") as f:
                    if f.tell() and not _ends_with_newline(self.path):
                        line = "\n" + line
                    f.write(line.encode())
                    f.flush()
                    os.fsync(f.fileno())
                written = True
            self._release(row.key)
        return written

    # ------------------------------------------------------------------ claims
    def _claim_path(self, key: tuple) -> Path:
        digest = hashlib.sha256(json.dumps(_jsonable(list(key))).encode()).hexdigest()[:32]
        return self.claims_dir / f"{digest}.json"

    def claim(self, key: tuple) -> bool:
        """Claim cell ``key`` for this process before running it.

        Returns:
            False if the cell is stored or claimed by a live process (skip it); True if it is now this
            process's (free, claimed before by this process, or by a process that died).
        """
        with self.lock():
            if key in self.keys():
                return False
            self.claims_dir.mkdir(exist_ok=True)
            path = self._claim_path(key)
            owner = self._owner(path)
            if owner and owner != self._me and _alive(owner):
                return False
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({**self._me, "key": _jsonable(list(key))}))
            os.replace(tmp, path)
            return True

    def release(self, key: tuple) -> None:
        """Give up this process's claim on ``key`` (after a failed cell: another writer may take it)."""
        with self.lock():
            self._release(key)

    def _release(self, key: tuple) -> None:
        path = self._claim_path(key)
        owner = self._owner(path)
        if owner == self._me:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def claimed_elsewhere(self, keys: list[tuple]) -> list[tuple]:
        """The cells of ``keys`` not stored and claimed by another live process (running elsewhere)."""
        stored = self.keys()
        out = []
        for key in keys:
            owner = self._owner(self._claim_path(key))
            if key not in stored and owner and owner != self._me and _alive(owner):
                out.append(key)
        return out

    @staticmethod
    def _owner(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # unreadable or torn claim: no live owner, taken over
        if not isinstance(data, dict):
            return {}
        return {k: data.get(k) for k in ("pid", "host", "started")}


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
