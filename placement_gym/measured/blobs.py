"""Weightless blobs of compiled segments, so that a segment compiled once is imported, not compiled, later.

OpenVINO exports a compiled model without its weights when it was compiled with :data:`WEIGHTLESS`: the
blob holds the compiled graph, after every compile-time transformation, and refers to each weight by its
place in the model's IR weights file (``.bin``), from which ``import_model`` reads it back
(``WEIGHTS_PATH``). This is OpenVINO's model caching, kept in memory per segment. Importing skips the
transformations, which are most of the cost of compiling a short segment (a random BERT placement's
segments took 20.5 ms each to compile and 6.9 ms to import on the reference machine, docs/measured.md),
and gives back the compiled model that was exported: the same outputs, bit for bit, and the same run
times (``experiments.fidelity.imported_segments`` measures both).

A blob is a few KB, so blobs are kept for far more segments than the compiled segments themselves, whose
weights bound their cache: random placements of one model keep producing the same short segments, and a
segment evicted from the compiled-segment cache comes back by import. Only models read from an IR file have
a weights file to refer to; for others the executor compiles every time.

The measured backend keeps no blobs unless asked (``max_blob_bytes``): each imported segment maps the
weights file afresh, and the pages of every mapping count in the process's resident set, so its peak RSS
grows with the imported segments kept (1.82-1.86 GB after 50 random BERT steps against 1.40 GB without
blobs, docs/measured.md), although the pages are the same clean, shared pages of one file (the
proportional set size stayed at most 1.27 GB).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import openvino as ov

#: Compile properties that make an exported blob refer to the IR's weights instead of copying them
#: (``ENABLE_WEIGHTLESS`` alone still copies them on this OpenVINO version).
WEIGHTLESS: dict[str, Any] = {"ENABLE_WEIGHTLESS": True, "CACHE_MODE": "OPTIMIZE_SIZE"}
#: Default bound on the bytes of kept blobs (BERT's segments take about 8 KB each).
MAX_BLOB_BYTES = 64 << 20


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class SegmentBlobs:
    """Exported weightless blobs of compiled segments, by segment key, least recently used dropped first.

    Args:
        weights: The IR weights file (``.bin``) the model's constants were read from.
        max_bytes: Bound on the kept blobs' bytes (0 keeps none).

    Attributes:
        bytes: Bytes of the kept blobs.
    """

    def __init__(self, weights: str | os.PathLike, max_bytes: int = MAX_BLOB_BYTES) -> None:
        self.weights = Path(weights)
        self.max_bytes = max_bytes
        self.bytes = 0
        self._identity = _identity(self.weights)
        self._blobs: OrderedDict[Any, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blobs)

    def compile_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with :data:`WEIGHTLESS`: what a segment is compiled with so that its blob refers to the
        weights file."""
        return {**config, **WEIGHTLESS}

    def get(self, key: Any) -> bytes | None:
        """The blob of ``key``, or None; None for every key once the weights file has changed (then every
        blob is dropped: they refer to the old file's content)."""
        if not self._blobs:
            return None
        try:
            same = _identity(self.weights) == self._identity
        except OSError:
            same = False
        if not same:
            self.clear()
            self.max_bytes = 0  # the model's weights file is gone or replaced: import nothing from it
            return None
        blob = self._blobs.get(key)
        if blob is not None:
            self._blobs.move_to_end(key)
        return blob

    def put(self, key: Any, compiled: ov.CompiledModel) -> None:
        """Export ``compiled`` (compiled with :meth:`compile_config`) as the blob of ``key``."""
        if self.max_bytes <= 0:
            return
        stream = compiled.export_model()
        blob = stream.getvalue() if hasattr(stream, "getvalue") else bytes(stream)
        self.drop(key)
        self._blobs[key] = blob
        self.bytes += len(blob)
        while self.bytes > self.max_bytes and self._blobs:
            _, old = self._blobs.popitem(last=False)
            self.bytes -= len(old)

    def load(self, core: ov.Core, blob: bytes, device: str, config: dict[str, Any]) -> ov.CompiledModel:
        """Import ``blob`` on ``device`` with ``config`` (the device's compile properties), its weights read
        from the weights file. Safe to call from several threads.

        Raises:
            Exception: Whatever OpenVINO raises for a blob it cannot import.
        """
        properties = {**self.compile_config(config), "WEIGHTS_PATH": str(self.weights)}
        return core.import_model(blob, device, properties)

    def drop(self, key: Any) -> None:
        """Forget the blob of ``key`` (one that could not be imported)."""
        blob = self._blobs.pop(key, None)
        if blob is not None:
            self.bytes -= len(blob)

    def clear(self) -> None:
        self._blobs.clear()
        self.bytes = 0
