"""Stable-Baselines3 integration: GNN feature extractors (:mod:`agents.sb3.extractors`), per-node
actor-critic policies (:mod:`agents.sb3.policy`) with vectorised multi-categorical distributions
(:mod:`agents.sb3.distributions`), and the SB3 learners as placement methods (:mod:`agents.sb3.methods`:
``PPOGNN``, ``A2CGNN``, ``MaskablePPOGNN``, ``PPOMLP``).

Nothing is imported here, so ``import agents`` stays free of torch; import the submodules.
"""
