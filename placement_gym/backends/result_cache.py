"""A bounded LRU cache of placement -> :class:`LatencyResult`, optionally persisted as JSON lines.

The file is append-only. Its first kind of line describes a measurement configuration::

    {"type": "config", "fingerprint": "3f9a...", "config": {"benchmark": "resnet50", ...}}

and every other line is one result of the configuration with that fingerprint::

    {"type": "result", "fingerprint": "3f9a...", "placement": [0, 1, ...], "latency": 0.071, ...}

Each line is written with a single ``write`` on a file opened with ``O_APPEND``, so concurrent writers
never interleave lines and a crash can at worst leave a torn last line, which loading skips. Loading keeps
only results whose fingerprint is the current configuration's (same model, coarsening, devices with
their precision and compile properties, executor, protocol and OpenVINO version).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym.backends.base import LatencyResult


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
    """

    def __init__(self, size: int, config: dict[str, Any], path: str | os.PathLike | None = None) -> None:
        self.size = size
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
        text = "".join(json.dumps(line, default=str) + "\n" for line in lines)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not self._ends_with_newline():
                text = "\n" + text  # a torn last line from a crash must not swallow this one
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        self._config_written = True

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def _load(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn line
                if not isinstance(row, dict) or row.get("fingerprint") != self.fingerprint:
                    continue
                if row.get("type") == "config":
                    self._config_written = True
                    continue
                try:
                    placement = np.asarray(row["placement"], dtype=np.int64)
                    result = LatencyResult(
                        latency=float(row["latency"]),
                        spread=float(row["spread"]),
                        feasible=bool(row["feasible"]),
                        reason=str(row["reason"]),
                        cached=True,
                        samples=int(row["samples"]),
                    )
                except (KeyError, TypeError, ValueError):
                    continue
                self._insert(placement.tobytes(), result)
