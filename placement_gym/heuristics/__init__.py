"""Placement heuristics the env itself needs (HEFT, to start improvement episodes), with their helpers.

Placement methods live in ``agents``; these are here because ``placement_gym`` may not import ``agents``.
"""
