"""The torch side of the model zoo, imported only when a model is built (torch takes seconds to import).

:mod:`placement_gym.zoo.models` holds the recipes; the modules here wrap transformers models so that they
trace as the IR's inputs and outputs, and build a recipe seeded and in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def seeded(fn: Callable[[], nn.Module]) -> nn.Module:
    """``fn()`` built with torch's seed 0, in eval mode."""
    torch.manual_seed(0)
    return fn().eval()


class TokensToHidden(nn.Module):
    """A transformers text model traced as (input_ids, attention_mask, token_type_ids) -> hidden states."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state


class ImageInput(nn.Module):
    """An image model traced as pixel_values -> logits (unwraps transformers' output objects)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = self.model(pixel_values)
        return out if isinstance(out, torch.Tensor) else out.logits


class AudioEncoder(nn.Module):
    """A transformers audio encoder traced as input_features (log-mel frames) -> hidden states."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.model(input_features).last_hidden_state


class TinyBranchyCNN(nn.Module):
    """A tiny CNN with two parallel branches (for tests): 3x16x16 input, 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.left = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(),
        )
        self.right = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU(), nn.MaxPool2d(3, 1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(pixel_values))
        x = torch.cat([self.left(x), self.right(x)], 1).mean((2, 3))
        return self.fc(x)
