"""The simulator against measurement: its acceptance test on the ``local`` platform
(:mod:`experiments.fidelity.sim_vs_measured`), the statistics and report of it, what the simulator gets wrong
(:mod:`experiments.fidelity.residuals`), whether the two measured executors agree, whether segments
imported from their blobs run like freshly compiled ones (:mod:`experiments.fidelity.imported_segments`),
and sim-to-real end to end (search in the simulator, fine-tune on the measured backend, pick among the
fine-tune's best on fresh measurements: :mod:`experiments.fidelity.sim_to_real`,
:mod:`~experiments.fidelity.remeasure`, :mod:`~experiments.fidelity.rounds`,
:mod:`~experiments.fidelity.sim_to_real_report`).
"""
