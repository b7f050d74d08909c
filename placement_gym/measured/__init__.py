"""Measured execution: run a placement on OpenVINO devices for real and time it.

* :mod:`.backend`: :class:`MeasuredBackend`, the latency backend built on the modules below;
* :mod:`.executor`: the contract of the things that run a placement;
* :mod:`.dataflow`: the project's executor (one compiled model per same-device segment, run as a dataflow graph);
* :mod:`.segments`: split an op placement into same-device segments and build each as an ``ov.Model``;
* :mod:`.compiling`: compile (or import) a placement's new segments, several at once on several CPUs;
  :mod:`.blobs`: the weightless blobs segments compiled once are imported from;
* :mod:`.hetero`: OpenVINO's HETERO plugin with per-op ``affinity``;
* :mod:`.timing`: the timing protocol (adaptive, drift-corrected), :mod:`.stats`: the median and its
  confidence interval; :mod:`.profiling`: validated per-op times from the runtime's per-layer profile;
* :mod:`.workers`: several measuring processes at once, each pinned to cores of its own.
* :mod:`.allocator`: the cap on glibc's malloc arenas this package sets when it is imported.
"""

from placement_gym.measured.allocator import limit_malloc_arenas

#: The malloc arenas this process is capped at (:mod:`.allocator`), or None where none was set.
MALLOC_ARENAS = limit_malloc_arenas()
