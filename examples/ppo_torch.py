"""PPO in one file, torch only (CleanRL style), with a small GNN policy, benchmarked by the protocol.

The protocol calls ``train(envs, budget, seed)`` with a ``gymnasium.vector`` env of ``num_envs`` one-shot
placement envs (``DevicePlacementEnv``: one step places every group, ``MultiDiscrete([D] * N)``, reward
``baseline / latency - 1``) and stops the run when ``budget`` distinct placements are spent: the envs then
return ``truncated`` with ``info["budget_exhausted"]``. The row scores the best placement the run evaluated.

Benchmark it on the protocol (from this folder; 12 tasks x 5 seeds x 500 placements):

    placement-gym bench --tier standard --methods ppo_torch:train

a short try: ``placement-gym bench --tier tiny --tasks resnet50/cpu-dgpu --seeds 0 --methods ppo_torch:train``
(arguments go in the spec: ``ppo_torch:train:learning_rate=0.001,num_envs=8``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


class GNNPolicy(nn.Module):
    """Mean-aggregation message passing over the group graph; per-group device logits and a value.

    Args:
        node_dim: Features per group (node features and the placement's one-hot).
        num_devices: Devices ``D``.
        hidden: Width of the embeddings.
        rounds: Message-passing rounds.
    """

    def __init__(self, node_dim: int, num_devices: int, hidden: int = 64, rounds: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(node_dim, hidden)
        self.layers = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(rounds))
        self.actor = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_devices))
        self.critic = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.orthogonal_(self.actor[-1].weight, 0.01)  # near-uniform first policy (CleanRL's init)
        nn.init.zeros_(self.actor[-1].bias)

    def forward(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, N, F), ``adj`` (N, N) row-normalised, ``mask`` (B, N) -> logits (B, N, D), value (B,)."""
        h = torch.relu(self.embed(x))  # (B, N, H)
        for layer in self.layers:
            h = torch.relu(layer(torch.cat([h, adj @ h], dim=-1)))  # own state and neighbours' mean
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)  # (B, H)
        context = pooled[:, None, :].expand_as(h)  # every group sees the whole graph's summary
        return self.actor(torch.cat([h, context], dim=-1)), self.critic(pooled).squeeze(-1)


def adjacency(obs: dict[str, np.ndarray]) -> torch.Tensor:
    """The ``(N, N)`` row-normalised undirected adjacency (self loops included) of one observation."""
    n = obs["node_mask"].shape[-1]
    edges = obs["edge_index"][0][:, obs["edge_mask"][0] > 0]  # (2, E) real edges of the first copy
    adj = torch.eye(n)
    adj[edges[0], edges[1]] = 1.0
    adj[edges[1], edges[0]] = 1.0
    return adj / adj.sum(1, keepdim=True)


def features(obs: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group inputs ``(B, N, F)`` (node features and current placement) and the node mask ``(B, N)``."""
    x = np.concatenate([obs["node_features"], obs["placement"]], axis=-1)
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(obs["node_mask"], dtype=torch.float32)


def train(
    envs,
    budget: int | None,
    seed: int,
    num_envs: int = 16,
    num_steps: int = 1,
    learning_rate: float = 3e-3,
    update_epochs: int = 4,
    num_minibatches: int = 2,
    clip_coef: float = 0.2,
    ent_coef: float = 0.0,
    vf_coef: float = 0.5,
    max_grad_norm: float = 0.5,
    hidden: int = 64,
    steps_per_placement: int = 4,
) -> None:
    """Train PPO on ``envs`` until the budget is spent (or ``steps_per_placement * budget`` env steps).

    One-shot episodes last one step, so each sample's return is its reward and its advantage
    ``reward - value``; ``num_steps`` vector steps (``num_envs * num_steps`` placements) make a batch.
    """
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: one thread is fastest on a shared machine
    try:
        obs, _ = envs.reset(seed=seed)
        adj = adjacency(obs)
        num_devices = int(envs.single_action_space.nvec[0])
        policy = GNNPolicy(obs["node_features"].shape[-1] + num_devices, num_devices, hidden)
        optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5)
        max_steps = steps_per_placement * (budget or 1000)
        batch = num_envs * num_steps
        for _ in range(max(max_steps // batch, 1)):
            xs, masks, legal, actions, logprobs, rewards, values = [], [], [], [], [], [], []
            for _ in range(num_steps):  # ---- rollout
                x, mask = features(obs)
                allowed = torch.as_tensor(np.stack(envs.call("action_masks"))).view(num_envs, -1, num_devices)
                with torch.no_grad():
                    logits, value = policy(x, adj, mask)
                    dist = Categorical(logits=logits.masked_fill(~allowed, -1e9))
                    action = dist.sample()  # (B, N)
                obs, reward, _, _, infos = envs.step(action.numpy())
                if infos.get("budget_exhausted", np.zeros(1, bool)).any():
                    return None  # the budget is spent: the protocol scores the best placement seen
                xs.append(x), masks.append(mask), legal.append(allowed), actions.append(action)
                logprobs.append((dist.log_prob(action) * mask).sum(1)), values.append(value)
                rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            x, mask, allowed, action = torch.cat(xs), torch.cat(masks), torch.cat(legal), torch.cat(actions)
            old_logprob, value, returns = torch.cat(logprobs), torch.cat(values), torch.cat(rewards)
            advantages = returns - value
            size = max(batch // num_minibatches, 1)
            for _ in range(update_epochs):  # ---- PPO update
                for idx in torch.randperm(batch).split(size):
                    logits, new_value = policy(x[idx], adj, mask[idx])
                    dist = Categorical(logits=logits.masked_fill(~allowed[idx], -1e9))
                    logprob = (dist.log_prob(action[idx]) * mask[idx]).sum(1)
                    entropy = (dist.entropy() * mask[idx]).sum(1) / mask[idx].sum(1)
                    adv = advantages[idx]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(idx) > 1 else adv
                    ratio = (logprob - old_logprob[idx]).exp()
                    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
                    v_loss = 0.5 * ((new_value - returns[idx]) ** 2).mean()
                    loss = pg_loss - ent_coef * entropy.mean() + vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
                    optimizer.step()
        return None
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    from placement_gym.benchmark import evaluate

    (row,) = evaluate(train, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0])
    print(f"score {row.score:.3f} (0: best single device, 1: optimum) after {row.evaluations} placements")
