"""Replayable result rows and their on-disk store (JSON lines, append-only, resumable).

A row records everything needed to replay and compare a result: the graph (name and version), the
platform, backend and coarsening, the method with its arguments, the seed and budget, the placement
itself, its latency, and the versions of the libraries. Rows are appended one line at a time and
flushed to disk, so an interrupted benchmark loses at most the cell it was running; a rerun skips every
cell whose key is already stored.

Every line read back is checked against a schema (:class:`RowSchema`; key fields are normalised, so a
hand-edited ``"seed": "0"`` is seed 0). A line that is not valid JSON or does not follow the schema (a
torn last line after a crash, a hand edit, a hostile file) is reported with its line number and never
crashes a resume: :meth:`ResultStore.set_aside` moves such lines into ``<name>.rejected.jsonl``, with
the reason, and the cell they held runs again.
"""

from __future__ import annotations

import json
import math
import os
import platform as pyplatform
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from placement_gym.errors import RecordError, UnknownNameError


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name:key=value,key=value"`` into the method name and its keyword arguments.

    Values are parsed as JSON when possible (numbers, booleans), else kept as strings.
    """
    name, _, args = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, args.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise UnknownNameError("method argument (expected key=value)", item, [])
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return name, kwargs


def method_label(spec: str) -> str:
    """Short label of a method spec for tables (``single_device:device=cpu`` -> ``cpu_only``)."""
    name, kwargs = parse_method(spec)
    if name == "single_device" and "device" in kwargs:
        return f"{kwargs['device']}_only"
    return spec


def library_versions() -> dict[str, str]:
    """Versions of the libraries a result depends on."""
    import gymnasium
    import openvino
    import stable_baselines3
    import torch

    import placement_gym

    return {
        "placement_gym": placement_gym.__version__,
        "openvino": openvino.__version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "python": pyplatform.python_version(),
    }


@dataclass
class ResultRow:
    """One (model, method, seed) result of a benchmark grid."""

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
    #: For a model loaded from a file: its path, SHA-256 and the input shapes it was given.
    model_path: str | None = None
    model_sha256: str | None = None
    input_shapes: dict[str, list[int]] | None = None
    #: What ``speedup_vs_cpu`` is against: ``"cpu_only"``; where CPU-only does not fit in memory, the
    #: fastest single device that does (``"<device>_only"``); ``"none"`` where no single device fits (the
    #: speedup is then NaN). Rows written before this field: CPU-only.
    speedup_reference: str = "cpu_only"
    #: The task's content hash (:func:`placement_gym.tasks.task_sha256`): what the row is scored against.
    task_sha256: str | None = None

    @property
    def key(self) -> tuple:
        return (self.model, self.platform, self.backend, self.coarsening, self.method, self.seed, self.budget)


def speedup_text(row: ResultRow) -> str:
    """``x1.23 vs cpu_only`` (the reference the speedup is against), or why there is none."""
    if row.speedup_reference == "none" or not math.isfinite(row.speedup_vs_cpu):
        return "no single device fits: no speedup"
    return f"x{row.speedup_vs_cpu:.2f} vs {row.speedup_reference}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):  # inf latency of an infeasible result, NaN
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
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


class RowSchema(BaseModel):
    """What one line of ``results.jsonl`` must hold (a :class:`ResultRow`; ``null`` for a non-finite
    latency). Numbers written as strings are converted (``"seed": "0"`` is seed 0); unknown keys,
    missing keys and values of the wrong kind are errors."""

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
    speedup_reference: _Name = "cpu_only"
    task_sha256: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")

    def to_row(self) -> ResultRow:
        data = self.model_dump()
        data["history"] = [(e, math.inf if v is None else v) for e, v in self.history]
        for key in ("latency", "cpu_only_latency"):
            data[key] = math.inf if data[key] is None else data[key]
        if data["speedup_vs_cpu"] is None:  # no single device fits (written as null)
            data["speedup_vs_cpu"] = math.nan
        return ResultRow(**data)


def parse_row(text: str, where: str) -> ResultRow:
    """One JSON line as a row.

    Args:
        text: The line.
        where: ``"<file> line <n>"``, for the message.

    Raises:
        RecordError: If the line is not JSON, or does not follow :class:`RowSchema` (names the field).
    """
    try:
        data = json.loads(text)
    except RecursionError:
        raise RecordError(f"{where}: nested too deeply to be a result row") from None
    except ValueError as exc:
        raise RecordError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a result row is a JSON object, got {type(data).__name__}")
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


class ResultStore:
    """An append-only JSON-lines file of :class:`ResultRow` s.

    Args:
        path: The ``.jsonl`` file (created with its folder if missing).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def rejected_path(self) -> Path:
        """Where :meth:`set_aside` puts bad lines: ``results.jsonl`` -> ``results.rejected.jsonl``."""
        return self.path.with_name(f"{self.path.stem}.rejected{self.path.suffix}")

    def read(self) -> tuple[list[ResultRow], list[tuple[int, str, str]]]:
        """Every valid row, and every bad line as ``(line number, text, reason)`` (the file is unchanged).

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
        """All valid rows; bad lines (a torn last line, say) are skipped with a warning naming them."""
        rows, bad = self.read()
        for _, _, reason in bad:
            warnings.warn(f"skipped {reason}", RuntimeWarning, stacklevel=2)
        return rows

    def set_aside(self) -> list[str]:
        """Move bad lines into :attr:`rejected_path` (appended, with line number and reason) and rewrite
        the store with the valid lines only (atomically). Returns the reasons, one per moved line."""
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
            f.writelines(_line(row) for row in rows)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return [reason for _, _, reason in bad]

    def keys(self) -> set[tuple]:
        return {row.key for row in self.read()[0]}

    def append(self, row: ResultRow) -> None:
        """Append one row durably (flushed and fsynced); a torn last line is first ended, so the new row
        never joins it."""
        line = _line(row)
        with open(self.path, "ab") as f:
            if f.tell() and not _ends_with_newline(self.path):
                line = "\n" + line
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())


def _line(row: ResultRow) -> str:
    return json.dumps(_jsonable(asdict(row)), allow_nan=False) + "\n"


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
