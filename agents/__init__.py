"""Everything that chooses a placement: SB3 learners with GNN policies, reimplemented published systems,
and classical baselines, all behind :class:`agents.base.PlacementMethod`.

Use :func:`make_method` with a name from :data:`METHODS`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from placement_gym.errors import UnknownNameError

if TYPE_CHECKING:
    from agents.base import BudgetTracker, PlacementMethod, PlacementResult

#: Method name -> "module:class", imported on first use.
METHODS: dict[str, str] = {
    # classical baselines
    "single_device": "agents.baselines.single_device:SingleDevice",
    "random_search": "agents.baselines.random_search:RandomSearch",
    "heft": "agents.baselines.heft:HEFT",
    "m_topo": "agents.baselines.baechi:MTopo",
    "m_etf": "agents.baselines.baechi:METF",
    "m_sct": "agents.baselines.baechi:MSCT",
    "metis": "agents.baselines.metis:MetisPlacement",
    "milp": "agents.baselines.milp:MILPPlacement",
    "local_search": "agents.baselines.local_search:LocalSearch",
    "simulated_annealing": "agents.baselines.local_search:SimulatedAnnealing",
    "exact": "agents.baselines.exact:ExactPlacement",
    # published systems
    "moirai": "agents.systems.moirai:Moirai",
    "hsdag": "agents.systems.hsdag:HSDAG",
    "rl_placement": "agents.systems.rl_placement:RLPlacement",
    "grouper_placer": "agents.systems.grouper_placer:GrouperPlacer",
    "placeto": "agents.systems.placeto:Placeto",
    # Stable-Baselines3 learners
    "ppo_gnn": "agents.sb3.methods:PPOGNN",
    "a2c_gnn": "agents.sb3.methods:A2CGNN",
    "maskable_ppo_gnn": "agents.sb3.methods:MaskablePPOGNN",
    "ppo_mlp": "agents.sb3.methods:PPOMLP",
    "maskable_ppo_improve": "agents.sb3.improve:MaskablePPOImprove",
    "pretrained_ppo": "agents.sb3.pretrained_ppo:PretrainedPPO",
    # learned move scorer steering an improvement search (issue #11)
    "guided_improvement": "agents.learned.guided:GuidedImprovement",
    # that search ranked by a MaskablePPO GNN policy over the same move features (issue #22)
    "guided_ppo": "agents.sb3.guided_ppo:GuidedPPO",
}


def method_class(name: str) -> type[PlacementMethod]:
    """The class registered as ``name``.

    Raises:
        UnknownNameError: If ``name`` is not in :data:`METHODS`.
    """
    if name not in METHODS:
        raise UnknownNameError("method", name, METHODS)
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_method(name: str, **kwargs: Any) -> PlacementMethod:
    """Instantiate method ``name`` with its keyword arguments."""
    return method_class(name)(**kwargs)


def __getattr__(name: str) -> Any:
    """``BudgetTracker``, ``PlacementMethod`` and ``PlacementResult`` from :mod:`agents.base`, imported on first
    use: the registry (:data:`METHODS`) stays cheap to import (the CLI's ``--help`` reads it)."""
    if name in ("BudgetTracker", "PlacementMethod", "PlacementResult"):
        from agents import base

        return getattr(base, name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")


__all__ = ["METHODS", "BudgetTracker", "PlacementMethod", "PlacementResult", "make_method", "method_class"]
