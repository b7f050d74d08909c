"""Simulation: predict a placement's latency from a calibrated cost model.

* :mod:`.cost_model`: :class:`CostModel`, per-(group, device) compute times, memory and link costs;
* :mod:`.schedule`: the event-driven list schedule of groups (numba) that turns a placement into a latency;
* :mod:`.segment_schedule`: the schedule of the partitioned executor's segments (numba), the ``local``
  platform's default;
* :mod:`.partition_costs`: the segment-boundary figures, to fit and apply;
* :mod:`.backend`: :class:`SimulatedBackend`, the latency backend built on them.
"""
