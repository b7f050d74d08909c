"""The training recipe: hyperparameters that work for the GNN policy, per MDP and algorithm.

One place for the settings the SB3 methods (:mod:`agents.sb3.methods`), the example script
(``examples/train_ppo_gnn.py``) and the rl-zoo3 YAML files (``experiments/hyperparams/``) use; docs/rl.md
describes them and docs/research-notes.md has the measurements behind them and their commands.

* ``"oneshot"`` (``DevicePlacement*`` IDs, one step per episode, ``MultiDiscrete([D] * N)``): an episode is
  one placement, so ``gamma`` and GAE do not matter. The joint ratio of ``N`` per-group probabilities
  leaves PPO's clip range within a few gradient steps, so short rollouts and few epochs learn fastest.
  The per-(group, device) logit bias, scaled, lets each group's preference move on its own. PPO's
  learning rate falls with the evaluation budget (:func:`budget_learning_rate`): the rate that learns
  fastest in 500 evaluations freezes the policy on one placement long before 5,000.
* ``"sequential"`` (``mode="sequential"``, ``Discrete(D)``, ``G`` steps per placement, final reward):
  ``gamma = 1`` carries the single final reward back to every step.
* ``"improve"`` (``DevicePlacementImprove-*`` IDs, ``Discrete(N * D)`` moves with ``action_masks()``):
  short episodes, discount over the moves of one episode.

Example::

    from stable_baselines3 import PPO
    from agents.sb3.recipe import recipe

    r = recipe("oneshot", "ppo")
    model = PPO(r.policy, env, policy_kwargs=r.policy_kwargs, **r.hyperparams)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from placement_gym.errors import UnknownNameError

MODES = ("oneshot", "sequential", "improve")
ALGOS = ("ppo", "a2c", "maskable_ppo")

#: The GNN policy's architecture (the same in every recipe): GraphSAGE, 3 layers of 64, one hidden
#: layer of 64 in the heads, device-aware features, 16 positional features.
POLICY_KWARGS: dict[str, Any] = {
    "gnn": "sage",
    "features_extractor_kwargs": {"hidden": 64, "layers": 3, "positional": 16},
    "net_arch": {"pi": [64], "vf": [64]},
}

_ONESHOT_PPO = {
    "learning_rate": 1e-3,
    "n_steps": 16,
    "batch_size": 16,
    "n_epochs": 2,
    "gamma": 1.0,
    "gae_lambda": 1.0,
    "ent_coef": 0.0,
}
_ONESHOT_A2C = {
    "learning_rate": 1e-3,
    "n_steps": 16,
    "gamma": 1.0,
    "gae_lambda": 1.0,
    "ent_coef": 0.0,
    "normalize_advantage": True,
}
_SEQUENTIAL_PPO = {**_ONESHOT_PPO, "n_steps": 256, "batch_size": 64, "n_epochs": 4}
_IMPROVE_PPO = {
    "learning_rate": 1e-3,
    "n_steps": 16,
    "batch_size": 16,
    "n_epochs": 2,
    "gamma": 0.9,
    "gae_lambda": 0.9,
    "ent_coef": 0.0,
}

#: The one-shot PPO learning rate at or below :data:`LR_REFERENCE_BUDGET` evaluations, and how it falls
#: past it (:func:`budget_learning_rate`; docs/research-notes.md has the measurements).
LR_REFERENCE_BUDGET = 500
LR_BUDGET_EXPONENT = 0.6


def budget_learning_rate(budget: int, base: float = _ONESHOT_PPO["learning_rate"]) -> float:
    """One-shot PPO's learning rate for a run of ``budget`` evaluations:
    ``base * min(1, LR_REFERENCE_BUDGET / budget) ** LR_BUDGET_EXPONENT`` (1e-3 up to 500 evaluations,
    2.5e-4 at 5,000, 1.1e-4 at 20,000). A one-shot episode is one placement, so the policy's logits move
    by about the learning rate times the pair-bias scale per gradient step: at 1e-3 the policy settles on
    one placement within about 500 evaluations and then only repeats it, while a smaller rate keeps
    sampling new placements for longer and ends better at larger budgets.
    """
    if budget < 1:
        raise ValueError(f"budget={budget} must be >= 1")
    return base * min(1.0, LR_REFERENCE_BUDGET / budget) ** LR_BUDGET_EXPONENT


#: ``(mode, algo)`` -> (PPO/A2C hyperparameters, pair-bias scale).
_TABLE: dict[tuple[str, str], tuple[dict[str, Any], float]] = {
    ("oneshot", "ppo"): (_ONESHOT_PPO, 128.0),
    ("oneshot", "maskable_ppo"): (_ONESHOT_PPO, 128.0),
    ("oneshot", "a2c"): (_ONESHOT_A2C, 128.0),
    ("sequential", "ppo"): (_SEQUENTIAL_PPO, 0.0),
    ("sequential", "maskable_ppo"): (_SEQUENTIAL_PPO, 0.0),
    ("sequential", "a2c"): ({**_ONESHOT_A2C, "n_steps": 64}, 0.0),
    ("improve", "ppo"): (_IMPROVE_PPO, 32.0),
    ("improve", "maskable_ppo"): (_IMPROVE_PPO, 32.0),
    ("improve", "a2c"): ({**_ONESHOT_A2C, "gamma": 0.9, "gae_lambda": 0.9}, 32.0),
}


@dataclass(frozen=True)
class Recipe:
    """What to pass to an SB3 algorithm for the GNN policy on one MDP.

    Attributes:
        mode: ``"oneshot"``, ``"sequential"`` or ``"improve"``.
        algo: ``"ppo"``, ``"a2c"`` or ``"maskable_ppo"``.
        hyperparams: The algorithm's keyword arguments (learning rate, rollout and batch sizes...).
        policy_kwargs: The policy's keyword arguments (``gnn``, extractor widths, head, pair-bias scale).
    """

    mode: str
    algo: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def policy(self) -> type:
        """The policy class: :class:`~agents.sb3.policy.MaskableGNNActorCriticPolicy` for MaskablePPO,
        else :class:`~agents.sb3.policy.GNNActorCriticPolicy`."""
        from agents.sb3.policy import GNNActorCriticPolicy, MaskableGNNActorCriticPolicy

        return MaskableGNNActorCriticPolicy if self.algo == "maskable_ppo" else GNNActorCriticPolicy


def recipe(mode: str, algo: str) -> Recipe:
    """The recipe for ``algo`` on the ``mode`` MDP (fresh dicts: safe to modify).

    Raises:
        UnknownNameError: If ``mode`` or ``algo`` is unknown.
    """
    if mode not in MODES:
        raise UnknownNameError("MDP mode", mode, MODES)
    if algo not in ALGOS:
        raise UnknownNameError("algorithm", algo, ALGOS)
    hyperparams, scale = _TABLE[(mode, algo)]
    policy_kwargs = {
        **POLICY_KWARGS,
        "features_extractor_kwargs": dict(POLICY_KWARGS["features_extractor_kwargs"]),
        "net_arch": {k: list(v) for k, v in POLICY_KWARGS["net_arch"].items()},
        "pair_bias_scale": scale,
    }
    return Recipe(mode, algo, dict(hyperparams), policy_kwargs)
