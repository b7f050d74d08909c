"""Benchmarks of the project's own speed (``docs/performance.md``): env steps, the simulated,
measured and Ray backends, where a measured step's time goes, graph building, memory, and what the
hardening guards cost. Each runs as ``python -m experiments.speed.<module>``.
"""
