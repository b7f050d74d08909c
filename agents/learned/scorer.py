"""The learned move scorer: a small MLP from :data:`~agents.learned.moves.MOVE_FEATURES` to the relative
latency change a move will cause, and its safe file format.

Training (:mod:`experiments.pretraining.guided_improvement`) is supervised on moves the simulator evaluated during improvement
episodes: :func:`fit_scorer` classifies "does the move improve?" (or regresses the clipped change), and
:func:`agents.learned.listwise.fit_listwise` ranks every move of a placement. Lower scores are tried first.
Inference
runs in numpy (no torch import), so scoring a few thousand moves takes well under a millisecond per move.
The file format is the one of :class:`agents.sb3.methods.SB3Method`: a folder with ``weights.pt`` (tensors
only, loaded with ``torch.load(weights_only=True)``) and ``meta.json`` (features, sizes, training facts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agents.learned.moves import MOVE_FEATURES, Moves
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.files import load_json

CLIP = 0.1
#: The pretrained scorer shipped with the repository (``python -m experiments.pretraining.guided_improvement`` remakes it).
PRETRAINED = Path(__file__).with_name("pretrained")
#: The pretrained scorer for platforms where memory binds (trained listwise, also on ``model-parallel``:
#: ``python -m experiments.pretraining.guided_improvement --objective listwise --platforms cpu-dgpu cpu-igpu multi-accel
#: model-parallel --out agents/learned/pretrained-memory``).
PRETRAINED_MEMORY = Path(__file__).with_name("pretrained-memory")


class MoveScorer:
    """A ReLU MLP ``F -> H -> H -> 1`` predicting a move's scaled relative latency change.

    Args:
        layers: ``[(W1, b1), (W2, b2), (W3, b3)]`` numpy weights, ``W`` of shape ``(in, out)``.
        mean, std: Feature normalisation, shape ``(F,)``.
    """

    def __init__(
        self, layers: list[tuple[np.ndarray, np.ndarray]], mean: np.ndarray, std: np.ndarray
    ) -> None:
        if layers[0][0].shape[0] != len(MOVE_FEATURES) or len(mean) != len(MOVE_FEATURES):
            raise PlacementGymError(
                f"scorer expects {layers[0][0].shape[0]} features, the move featurizer makes {len(MOVE_FEATURES)}"
            )
        self.layers, self.mean, self.std = layers, mean, std

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted scaled change of each move, shape ``(M,)`` (negative: faster)."""
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.std
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x[:, 0]

    # MoveRanker protocol
    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        return self.predict(features)

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        return None

    def save(self, path: str | Path, meta: dict[str, Any]) -> None:
        """Write ``weights.pt`` and ``meta.json`` into folder ``path``."""
        import torch

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {"mean": torch.tensor(self.mean), "std": torch.tensor(self.std)}
        for i, (w, b) in enumerate(self.layers):
            tensors[f"w{i}"], tensors[f"b{i}"] = torch.tensor(w), torch.tensor(b)
        torch.save(tensors, path / "weights.pt")
        (path / "meta.json").write_text(
            json.dumps(
                {"features": list(MOVE_FEATURES), "layers": len(self.layers), "clip": CLIP, **meta}, indent=1
            )
        )

    @classmethod
    def load(cls, path: str | Path = PRETRAINED) -> MoveScorer:
        """Read a scorer saved by :meth:`save`.

        Raises:
            PlacementGymError: If the folder is missing or was made for other features.
        """
        import torch

        path = Path(path)
        if not (path / "weights.pt").is_file() or not (path / "meta.json").is_file():
            raise PlacementGymError(
                f"no move scorer in {str(path)!r} (expected weights.pt and meta.json); "
                "make one with `python -m experiments.pretraining.guided_improvement`"
            )
        meta = load_json(path / "meta.json", "move scorer file")  # bounded size, no NaN literals
        if not isinstance(meta, dict) or meta.get("features") != list(MOVE_FEATURES):
            raise PlacementGymError(
                f"the scorer in {str(path)!r} was trained on other move features: retrain it"
            )
        t = _load_weights(path / "weights.pt")
        n = meta.get("layers")
        names = [f"{p}{i}" for i in range(n) for p in "wb"] if isinstance(n, int) and 0 < n <= 64 else None
        if not isinstance(t, dict) or names is None or not set(names + ["mean", "std"]) <= set(t):
            raise PlacementGymError(
                f"the scorer in {str(path)!r} is damaged: its layers and weights do not match"
            )
        if not all(isinstance(v, torch.Tensor) and bool(torch.isfinite(v).all()) for v in t.values()):
            raise PlacementGymError(f"the scorer in {str(path)!r} has NaN or infinite weights: retrain it")
        layers = [(t[f"w{i}"].double().numpy(), t[f"b{i}"].double().numpy()) for i in range(n)]
        return cls(layers, t["mean"].double().numpy(), t["std"].double().numpy())


OBJECTIVES = ("improve", "mse")
#: A move "improves" when it cuts the latency by more than this fraction.
IMPROVES = 1e-4


def fit_scorer(
    features: np.ndarray,
    change: np.ndarray,
    objective: str = "improve",
    hidden: int = 32,
    epochs: int = 60,
    seed: int = 0,
    init: MoveScorer | None = None,
    lr: float = 3e-3,
) -> tuple[MoveScorer, float]:
    """Fit a :class:`MoveScorer` to evaluated moves (Adam, minibatches of 256).

    Objectives: ``"improve"`` (logistic regression of "the move improves", the output is minus the logit,
    so that likely improvements rank first) or ``"mse"`` (regression of the clipped, scaled change).

    Args:
        features: ``(N, F)`` move features.
        change: ``(N,)`` relative latency changes ``new / old - 1`` (infeasible: any value >= ``CLIP``).
        init: Start from this scorer's weights and normalisation (fine-tuning) instead of from scratch.

    Returns:
        ``(scorer, final training loss)``.
    """
    import torch

    if len(features) != len(change) or len(features) < 2:
        raise PlacementGymError(
            f"need matching features and changes (at least 2), got {len(features)}, {len(change)}"
        )
    if objective not in OBJECTIVES:
        raise UnknownNameError("scorer objective", objective, OBJECTIVES)
    torch.manual_seed(seed)
    x = np.asarray(features, dtype=np.float64)
    mean, std = (init.mean, init.std) if init is not None else (x.mean(axis=0), x.std(axis=0) + 1e-6)
    xt = torch.tensor((x - mean) / std, dtype=torch.float32)
    if objective == "mse":
        yt = torch.tensor(np.clip(change, -CLIP, CLIP) / CLIP, dtype=torch.float32)[:, None]
        loss_fn = torch.nn.functional.mse_loss
    else:
        yt = torch.tensor(change >= -IMPROVES, dtype=torch.float32)[:, None]  # 1: no improvement
        loss_fn = torch.nn.functional.binary_cross_entropy_with_logits
    net = torch_mlp(x.shape[1], hidden, init)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(256):
            loss = loss_fn(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        final = float(loss_fn(net(xt), yt))
    return from_torch(net, mean, std), final


def torch_mlp(inputs: int, hidden: int, init: MoveScorer | None = None):
    """The torch module of a :class:`MoveScorer` (``inputs -> hidden -> hidden -> 1``), from ``init``'s
    weights if given."""
    import torch

    net = torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    )  # fmt: skip
    if init is not None:
        if len(init.layers) != 3 or init.layers[0][0].shape[1] != hidden:
            raise PlacementGymError(f"can only start from a 3-layer scorer of width {hidden}")
        with torch.no_grad():
            for m, (w, b) in zip([m for m in net if isinstance(m, torch.nn.Linear)], init.layers):
                m.weight.copy_(torch.tensor(w.T))
                m.bias.copy_(torch.tensor(b))
    return net


def from_torch(net, mean: np.ndarray, std: np.ndarray) -> MoveScorer:
    """The numpy :class:`MoveScorer` of a module made by :func:`torch_mlp`."""
    import torch

    layers = [
        (m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy().copy())
        for m in net
        if isinstance(m, torch.nn.Linear)
    ]
    return MoveScorer(layers, mean, std)


def _load_weights(file: Path) -> Any:
    """``torch.load(weights_only=True)`` of a scorer's weights, with torch's warnings and its advice to
    load the file unsafely kept out of the one-line error.

    Raises:
        PlacementGymError: If torch refuses the file.
    """
    import warnings

    import torch

    from placement_gym.files import load_refusal

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise PlacementGymError(f"the scorer file {str(file)!r} cannot be read: {load_refusal(exc)}") from exc
