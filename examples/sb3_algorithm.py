"""A Stable-Baselines3 algorithm benchmarked by the protocol through its method spec: no code of your own.

Any ``BaseAlgorithm`` subclass is named by import path (``stable_baselines3:PPO``, ``sb3_contrib:MaskablePPO``,
``my_module:MyAlgo``); the spec carries the policy and the algorithm's keyword arguments. The protocol builds
the env, the algorithm learns on it until the budget of distinct placements is spent, and the best
placement it evaluated is scored. :data:`SPEC` is PPO with the project's GNN policy (GraphSAGE extractor,
per-(group, device) logits) on the one-shot env with its graph observation:

    placement-gym bench --tier standard --methods 'stable_baselines3:PPO:policy=agents.sb3.policy:GNNActorCriticPolicy,policy_kwargs={"gnn":"sage","pair_bias_scale":128},learning_rate=0.001,n_steps=16,batch_size=16,n_epochs=2,gamma=1'

``python sb3_algorithm.py`` runs it on one task of the ``tiny`` tier and prints the row's score. The spec's
syntax (``policy``, ``policy_kwargs``, ``observation``, ``mdp``, ``num_envs``, ``total_timesteps``):
``docs/protocol.md``.
"""

from __future__ import annotations

#: The spec of the command above (the same text ``bench --methods`` and ``evaluate`` take).
SPEC = (
    "stable_baselines3:PPO:policy=agents.sb3.policy:GNNActorCriticPolicy,"
    'policy_kwargs={"gnn":"sage","pair_bias_scale":128},'
    "learning_rate=0.001,n_steps=16,batch_size=16,n_epochs=2,gamma=1"
)

if __name__ == "__main__":
    from placement_gym.benchmark import evaluate

    (row,) = evaluate(SPEC, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0])
    print(f"{row.method}\nscore {row.score:.3f} (0: best single device, 1: optimum), {row.evaluations} placements")
