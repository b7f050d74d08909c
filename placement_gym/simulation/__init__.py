"""Simulation: predict a placement's latency from a calibrated cost model.

* :mod:`.cost_model`: :class:`CostModel`, per-(group, device) compute times, memory and link costs;
* :mod:`.schedule`: the event-driven list schedule (numba) that turns a placement into a latency;
* :mod:`.backend`: :class:`SimulatedBackend`, the latency backend built on them.
"""
