"""A bounded LRU cache of placement -> :class:`LatencyResult`, optionally persisted as JSON lines.

The file is append-only. Its first kind of line describes a measurement configuration::

    {"type": "config", "fingerprint": "3f9a...", "config": {"benchmark": "resnet50", ...}}

and every other line is one result of the configuration with that fingerprint::

    {"type": "result", "fingerprint": "3f9a...", "placement": [0, 1, ...], "latency": 0.071, ...,
     "checksum": "a41c..."}

The configuration includes the SHA-256 of the model's content (:attr:`Benchmark.content_sha256
<placement_gym.benchmarks.Benchmark.content_sha256>`), so a model file replaced at the same path, with the
same graph, never finds the old file's results. Every line carries a checksum of its other fields
(:func:`line_checksum`): a line edited by hand (a latency set to ``1e-9``) or damaged is not served; it is
counted in :attr:`ResultCache.tampered`, a warning says so, and the placement is measured again. The
checksum detects edits and damage, not a forger who recomputes it.

Each line is written with a single ``write`` on a file opened with ``O_APPEND``, so concurrent writers
never interleave lines and a crash can at worst leave a torn last line, which loading skips. Loading keeps
only results whose fingerprint is the current configuration's (same model, coarsening, devices with
their precision and compile properties, executor, protocol and OpenVINO version), and only result lines
whose fields have the right types (:class:`_ResultLine`: ``"feasible": "false"`` is refused, not read as
true), a placement of the right length and device range, and a latency that agrees with feasibility. A
file that cannot be written later (disk full, permissions) turns persistence off with a warning: the
measurement itself stays valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from placement_gym.backends.base import LatencyResult
from placement_gym.errors import BackendError, CacheWarning


class _ResultLine(BaseModel):
    """The fields of one result line, strictly typed (JSON numbers, booleans and strings only)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["result"]
    fingerprint: str
    placement: list[int]
    latency: float
    spread: float = Field(ge=0, allow_inf_nan=False)
    feasible: bool
    reason: str
    samples: int = Field(ge=0)
    ci: float = Field(0.0, ge=0, allow_inf_nan=False)
    host_load: float | None = Field(None, ge=0, allow_inf_nan=False)


def check_cache_path(path: str | os.PathLike | None) -> None:
    """Refuse a result-cache path that can never be an appendable file.

    Raises:
        BackendError: If ``path`` is a directory, or one of its parents exists but is not a directory.
    """
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise BackendError(
            f"cache_path {path} is a directory; give a file path (e.g. {path / 'results.jsonl'})"
        )
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise BackendError(f"cache_path {path}: {parent} is a file, not a directory")
            break


def line_checksum(line: dict[str, Any]) -> str:
    """A short hash of every field of a cache line except ``checksum`` itself."""
    fields = {k: v for k, v in line.items() if k != "checksum"}
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(config: dict[str, Any]) -> str:
    """A short stable hash of a JSON-serialisable configuration."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ResultCache:
    """LRU map from placements (int64 arrays of shape ``(G,)``) to results.

    Stored results carry ``cached=True``, so a hit returns the stored object without copying.

    Args:
        size: Maximum number of results kept in memory (oldest use evicted first); 0 disables caching.
        config: The measurement configuration the results belong to.
        path: JSON-lines file to load from and append to, or None for memory only.
        width: Placement length ``G``; loaded lines with another length are skipped (None: any).
        num_devices: Number of devices; loaded lines with a device index outside it are skipped.

    Attributes:
        rejected: Number of loaded lines of this configuration that were skipped as malformed.
        tampered: Number of loaded lines of this configuration whose checksum does not match (edited or
            damaged), skipped with a warning unless a later valid line measured the placement again.

    Raises:
        BackendError: If ``path`` is a directory or lies under a file (see :func:`check_cache_path`).
    """

    def __init__(
        self,
        size: int,
        config: dict[str, Any],
        path: str | os.PathLike | None = None,
        *,
        width: int | None = None,
        num_devices: int | None = None,
    ) -> None:
        check_cache_path(path)
        self.size = size
        self.width, self.num_devices = width, num_devices
        self.rejected = 0
        self.tampered = 0
        self.config = config
        self.fingerprint = fingerprint(config)
        self.path = Path(path) if path is not None else None
        self._items: OrderedDict[bytes, LatencyResult] = OrderedDict()
        self._config_written = False
        if self.path is not None and self.path.is_file():
            self._load()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> LatencyResult | None:
        """The cached result for ``key`` (``placement.astype(np.int64).tobytes()``), or None."""
        result = self._items.get(key)
        if result is not None:
            self._items.move_to_end(key)
        return result

    def put(self, placement: np.ndarray, result: LatencyResult, *, persist: bool = True) -> None:
        """Remember ``result`` for ``placement`` (int64, shape ``(G,)``); append it to the file if any."""
        if self.size <= 0:
            return
        self._insert(placement.tobytes(), dataclasses.replace(result, cached=True))
        if persist and self.path is not None:
            self._append(placement, result)

    def clear(self) -> None:
        """Forget every result in memory (the file is kept)."""
        self._items.clear()

    def _insert(self, key: bytes, result: LatencyResult) -> None:
        self._items[key] = result
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def _append(self, placement: np.ndarray, result: LatencyResult) -> None:
        lines = []
        if not self._config_written:
            lines.append({"type": "config", "fingerprint": self.fingerprint, "config": self.config})
        row = dataclasses.asdict(result)
        row.pop("cached")
        lines.append(
            {"type": "result", "fingerprint": self.fingerprint, "placement": placement.tolist(), **row}
        )
        text = "".join(json.dumps(_signed(line), default=str) + "\n" for line in lines)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size and not self._ends_with_newline():
                    text = "\n" + text  # a torn last line from a crash must not swallow this one
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as exc:  # the result is valid; only its persistence failed
            warnings.warn(
                f"result cache {self.path} cannot be written ({exc}); results are kept in memory only",
                RuntimeWarning,
                stacklevel=3,
            )
            self.path = None
            return
        self._config_written = True

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def _load(self) -> None:
        try:
            unserved = self._read()
        except OSError as exc:
            raise BackendError(f"cannot read the result cache {self.path}: {exc}") from exc
        if unserved:
            warnings.warn(
                f"result cache {self.path}: {unserved} result(s) of this configuration do not match their "
                "checksum (edited or damaged); they are not used, and those placements are measured again",
                CacheWarning,
                stacklevel=4,
            )

    def _read(self) -> int:
        """Load this configuration's valid lines; returns how many placements have only tampered lines."""
        tampered: set[bytes] = set()
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # a torn line, or one too deeply nested to be ours
                if not isinstance(row, dict) or row.get("fingerprint") != self.fingerprint:
                    continue
                if row.get("checksum") != line_checksum(row):
                    self.tampered += 1
                    tampered.add(_placement_key(row))
                    continue
                if row.get("type") == "config":
                    self._config_written = True
                    continue
                parsed = self._parse(row)
                if parsed is None:
                    self.rejected += 1
                    continue
                placement, result = parsed
                tampered.discard(placement.tobytes())  # measured again after the bad line: rebuilt
                self._insert(placement.tobytes(), result)
        tampered.discard(b"config")
        return len(tampered)

    def _parse(self, row: dict[str, Any]) -> tuple[np.ndarray, LatencyResult] | None:
        """A result line as ``(placement, result)``, or None if any field is malformed or inconsistent."""
        try:
            line = _ResultLine.model_validate(row)
        except ValidationError:
            return None
        placement = np.asarray(line.placement, dtype=np.int64)
        if self.width is not None and placement.shape != (self.width,):
            return None
        if placement.size and (
            placement.min() < 0 or (self.num_devices and placement.max() >= self.num_devices)
        ):
            return None
        if line.feasible != (math.isfinite(line.latency) and line.latency > 0) or math.isnan(line.latency):
            return None  # feasible results have a positive finite latency, infeasible ones inf
        result = LatencyResult(
            latency=line.latency,
            spread=line.spread,
            feasible=line.feasible,
            reason=line.reason,
            cached=True,
            samples=line.samples,
            ci=line.ci,
            host_load=line.host_load,
        )
        return placement, result


def _signed(line: dict[str, Any]) -> dict[str, Any]:
    return {**line, "checksum": line_checksum(line)}


def _placement_key(row: dict[str, Any]) -> bytes:
    """The memory key of a line's placement, or a key of its own if the placement is malformed."""
    if row.get("type") == "config":
        return b"config"
    try:
        return np.asarray(row.get("placement"), dtype=np.int64).tobytes()
    except (TypeError, ValueError, OverflowError):
        return repr(row.get("placement")).encode()
