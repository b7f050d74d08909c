"""A pretrained agent for the transfer track, written outside the package: pretrain once, place unseen graphs.

The policy is a softmax over devices of a linear function of each group's graph features (the env's
``node_features``: scaled log FLOPs and bytes, op-type fractions), one weight matrix per device count, so it
applies to a graph of any size. Pretraining plays one-shot placements on the train tasks' envs (sampled
from the current policy, partly at random), keeps each task's best placements and fits the policy to them
(cross-entropy, plain numpy). Placing a new task samples placements from the policy, then mutates the best
one, within the budget. It reads only the graph and the latencies of the placements it evaluates: a
black-box method.

    placement-gym transfer pretrain --method transfer_agent:pretrain --out runs/share-policy --steps 2000
    placement-gym transfer run --methods transfer_agent:FeaturePolicy:policy=runs/share-policy \\
        --pretraining runs/share-policy/pretraining.json --results results/my-transfer
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

KEEP = 8  # best placements kept per task as the fitting targets


def _features(problem) -> np.ndarray:
    x = np.asarray(problem.features.node_features, dtype=np.float64)  # (G, F)
    return np.hstack([x, np.ones((len(x), 1))])  # (G, F + 1): a bias column


def _probabilities(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    logits = x @ w  # (G, D)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def _fit(w: np.ndarray, data: list[tuple[np.ndarray, np.ndarray]], epochs: int = 200, lr: float = 0.5) -> np.ndarray:
    """Softmax regression of the kept placements' devices on the group features (gradient descent)."""
    for _ in range(epochs):
        grad = np.zeros_like(w)
        for x, y in data:  # x (G, F + 1), y (G,) device of each group
            p = _probabilities(w, x)
            p[np.arange(len(y)), y] -= 1.0
            grad += x.T @ p / len(y)
        w -= lr * grad / max(len(data), 1)
    return w


def pretrain(envs, steps: int, seed: int, out: Path) -> None:
    """Play ``steps`` one-shot placements over the train tasks' envs and save the fitted weights in ``out``."""
    rng = np.random.default_rng(seed)
    weights: dict[int, np.ndarray] = {}
    best: dict[int, list[tuple[float, np.ndarray]]] = {i: [] for i in range(len(envs))}
    while True:  # rounds of 25 placements per task, until the protocol's step budget is spent
        for i, env in enumerate(envs):
            problem = env.unwrapped.problem
            x, d = _features(problem), problem.num_devices
            w = weights.setdefault(d, np.zeros((x.shape[1], d)))
            env.reset(seed=int(rng.integers(1 << 31)))
            for _ in range(25):
                p = 0.7 * _probabilities(w, x) + 0.3 / d  # explore around the policy
                placement = np.array([rng.choice(d, p=row) for row in p], dtype=np.int64)
                action = np.zeros(env.action_space.shape, dtype=np.int64)
                action[: len(placement)] = placement
                _, reward, _, truncated, info = env.step(action)
                best[i] = sorted([*best[i], (float(reward), placement)], key=lambda t: -t[0])[:KEEP]
                if info.get("budget_exhausted"):
                    break
                env.reset()
            if info.get("budget_exhausted"):
                break
        for d in weights:
            data = [(_features(envs[i].unwrapped.problem), p) for i, kept in best.items() for _, p in kept
                    if envs[i].unwrapped.problem.num_devices == d]  # fmt: skip
            weights[d] = _fit(weights[d], data)
        if info.get("budget_exhausted") or steps == 0:
            break
    out.mkdir(parents=True, exist_ok=True)
    (out / "weights.json").write_text(json.dumps({str(d): w.tolist() for d, w in weights.items()}))


class FeaturePolicy:
    """Place with the pretrained weights: sample placements from the policy, then mutate the best one.

    Args:
        policy: The folder ``pretrain`` wrote.
        mutation: Share of groups re-drawn from the policy in each mutation of the best placement.
    """

    def __init__(self, policy: str = "runs/share-policy", mutation: float = 0.05) -> None:
        path = Path(policy) / "weights.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no pretrained weights (run `placement-gym transfer pretrain` first)")
        self.weights = {int(d): np.asarray(w) for d, w in json.loads(path.read_text()).items()}
        self.mutation = mutation

    def place(self, target, budget: int, seed: int) -> np.ndarray:
        from placement_gym import problem_of

        problem = problem_of(target)  # the protocol hands a class agent the env; problem_of finds its problem
        d = problem.num_devices
        if d not in self.weights:
            raise ValueError(f"no pretrained weights for {d} devices (have {sorted(self.weights)})")
        rng = np.random.default_rng(seed)
        p = _probabilities(self.weights[d], _features(problem))  # (G, D)
        first = p.argmax(axis=1)
        best, best_latency = first, problem.evaluate(first).latency
        for step in range(budget - 1):
            if step < budget // 4:  # fresh samples from the policy
                candidate = np.array([rng.choice(d, p=row) for row in p], dtype=np.int64)
            else:  # mutations of the best
                candidate = best.copy()
                flip = rng.random(len(best)) < self.mutation
                candidate[flip] = [rng.choice(d, p=row) for row in p[flip]]
            latency = problem.evaluate(candidate).latency
            if latency < best_latency:
                best, best_latency = candidate, latency
        return best
