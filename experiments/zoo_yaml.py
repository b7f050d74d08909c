"""Write the rl-zoo3 hyperparameter files (``experiments/hyperparams/{ppo,a2c}.yml``) from the recipe.

rl-zoo3 reads one YAML per algorithm, keyed by env ID, one entry per simulated ID; ``policy_kwargs`` is
a Python expression it evaluates. The entries come from :func:`agents.sb3.recipe.recipe` (one-shot for
the ``DevicePlacement-*`` IDs, with the device-aware observation; ``sequential`` for the
``DevicePlacementSequential-*`` IDs; ``improve`` for the ``DevicePlacementImprove-*`` IDs: rl-zoo3 has no
MaskablePPO, so moves the env would mask are tried and change nothing). A test checks that the files are
what this script writes.

    python -m experiments.zoo_yaml            # rewrite the files
    python -m rl_zoo3.train --algo ppo --env DevicePlacement-bert-cpu_igpu-sim-v0 \
        --gym-packages placement_gym --conf-file experiments/hyperparams/ppo.yml
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

import placement_gym
from agents.sb3.recipe import budget_learning_rate, recipe

HYPERPARAMS = Path(__file__).resolve().parent / "hyperparams"
#: Steps rl-zoo3 trains for (= evaluations).
N_TIMESTEPS = 20000


def _policy_kwargs(kwargs: dict[str, Any]) -> str:
    ext = kwargs["features_extractor_kwargs"]
    arch = kwargs["net_arch"]
    return (
        f"dict(gnn={kwargs['gnn']!r}, features_extractor_kwargs=dict(hidden={ext['hidden']}, "
        f"layers={ext['layers']}, positional={ext['positional']}), net_arch=dict(pi={arch['pi']}, "
        f"vf={arch['vf']}), pair_bias_scale={kwargs['pair_bias_scale']})"
    )


def entry(mode: str, algo: str) -> dict[str, Any]:
    """One rl-zoo3 entry: the recipe's hyperparameters, policy and policy arguments."""
    r = recipe(mode, algo)
    out: dict[str, Any] = {
        "policy": f"{r.policy.__module__}.{r.policy.__name__}",
        "policy_kwargs": _policy_kwargs(r.policy_kwargs),
        "n_envs": 1,
        "n_timesteps": N_TIMESTEPS,
        **r.hyperparams,
    }
    if mode == "oneshot":
        out["env_kwargs"] = {"observation": "device"}
        if algo != "a2c":  # PPO's one-shot learning rate falls with the steps it trains for
            out["learning_rate"] = float(f"{budget_learning_rate(N_TIMESTEPS, r.hyperparams['learning_rate']):.3g}")
    return out


def config(algo: str) -> dict[str, dict[str, Any]]:
    """Every simulated ID's entry for ``algo`` (``"ppo"`` or ``"a2c"``)."""
    conf = {}
    for mode, ids in [
        ("oneshot", placement_gym.ENV_IDS),
        ("sequential", placement_gym.SEQUENTIAL_IDS),
        ("improve", placement_gym.IMPROVE_IDS),
    ]:
        for env_id in ids:
            if gym.spec(env_id).kwargs.get("backend") == "simulated":  # the old IDs too: they are aliases
                conf[env_id] = entry(mode, algo)
    return conf


def text(algo: str) -> str:
    """The YAML file's text."""
    head = (
        f"# rl-zoo3 {algo.upper()} hyperparameters for the simulated placement-gym IDs, written by\n"
        "# `python -m experiments.zoo_yaml` from agents/sb3/recipe.py (do not edit by hand).\n"
        f"#   python -m rl_zoo3.train --algo {algo} --env DevicePlacement-bert-cpu_igpu-sim-v0 \\\n"
        f"#       --gym-packages placement_gym --conf-file experiments/hyperparams/{algo}.yml\n"
    )
    return head + yaml.safe_dump(config(algo), sort_keys=True, width=200)


def main() -> None:
    for algo in ("ppo", "a2c"):
        (HYPERPARAMS / f"{algo}.yml").write_text(text(algo))


if __name__ == "__main__":
    main()
