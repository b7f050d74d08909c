"""Turning a placement's new segments into compiled models for the partitioned executor.

Each segment is one compiled model of its own ``ov.Model``, compiled with its device's configuration
(``Device.compile_config``). Two things make that cheaper without changing what is compiled:

* a segment compiled before is imported from its weightless blob (:mod:`~placement_gym.measured.blobs`)
  instead of compiled again, when the model was read from an IR file;
* several segments are compiled (or imported) at once on :attr:`SegmentCompiler.threads` threads:
  ``compile_model`` and ``import_model`` release Python's GIL, so on a process with several CPUs they run
  in parallel. By default there is one thread per CPU the process may run on.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openvino as ov

from placement_gym.measured.blobs import SegmentBlobs
from placement_gym.measured.segments import ModelIndex, Segment
from placement_gym.platforms.devices import Platform

SegmentKey = tuple[int, bytes]


def default_compile_threads() -> int:
    """Threads that compile a placement's new segments by default: the CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


class SegmentCompiler:
    """Compiles segments of one model, or imports them from their blobs.

    Args:
        core: The OpenVINO core.
        platform: The devices; a segment is compiled for ``platform.devices[segment.device]``.
        index: Builds a segment's ``ov.Model``.
        threads: Segments compiled at once (at least 1).
        blobs: Where compiled segments' weightless blobs are kept, or None to compile every time.

    Attributes:
        stats: Segments ``compiled`` and ``imported`` so far.
    """

    def __init__(
        self,
        core: ov.Core,
        platform: Platform,
        index: ModelIndex,
        *,
        threads: int,
        blobs: SegmentBlobs | None,
    ) -> None:
        self.core = core
        self.platform = platform
        self.index = index
        self.threads = threads
        self.blobs = blobs
        self.stats = {"compiled": 0, "imported": 0}

    def compile(self, segments: list[Segment]) -> dict[SegmentKey, ov.CompiledModel | Exception]:
        """The compiled model of each of ``segments`` (distinct, with disjoint op sets: one placement's),
        by cache key, or the exception that compiling it raised."""
        blobs = {}
        if self.blobs is not None:
            for s in segments:
                blob = self.blobs.get(s.cache_key)
                if blob is not None:
                    blobs[s.cache_key] = blob
        todo = [s for s in segments if s.cache_key not in blobs]
        models = dict(zip((s.cache_key for s in todo), self.index.build_many(todo)))

        def one(segment: Segment) -> ov.CompiledModel | Exception | None:
            blob = blobs.get(segment.cache_key)
            if blob is not None:
                try:
                    return self.blobs.load(self.core, blob, *self._target(segment))  # type: ignore[union-attr]
                except Exception:  # a blob that cannot be imported: compiled below instead
                    return None
            return self._compile(segment, models[segment.cache_key])

        if self.threads > 1 and len(segments) > 1:
            with ThreadPoolExecutor(min(self.threads, len(segments)), thread_name_prefix="compile") as pool:
                results = list(pool.map(one, segments))
        else:
            results = [one(s) for s in segments]
        done: dict[SegmentKey, ov.CompiledModel | Exception] = {}
        for segment, result in zip(segments, results):
            key = segment.cache_key
            if result is None:  # its blob failed to import
                self.blobs.drop(key)  # type: ignore[union-attr]
                del blobs[key]
                result = self._compile(segment, self.index.build(segment))
            if key in blobs:
                self.stats["imported"] += 1
            elif not isinstance(result, Exception):
                self.stats["compiled"] += 1
                if self.blobs is not None:
                    self.blobs.put(key, result)
            done[key] = result
        return done

    def _compile(self, segment: Segment, model: ov.Model) -> ov.CompiledModel | Exception:
        try:
            return self.core.compile_model(model, *self._target(segment, compiling=True))
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses with long messages
            return exc

    def _target(self, segment: Segment, compiling: bool = False) -> tuple[str, dict[str, Any]]:
        """The OpenVINO device and properties ``segment`` is compiled (or imported) with."""
        device = self.platform.devices[segment.device]
        config = device.compile_config()
        if compiling and self.blobs is not None:
            config = self.blobs.compile_config(config)
        return device.ov_device, config
