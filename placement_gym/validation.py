"""Checks of values a user gives: numbers within declared ranges, and integer index arrays.

Each check raises a :class:`~placement_gym.errors.PlacementGymError` subclass that names the bad value and
what is expected, never a raw numpy error or a silent clip.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from placement_gym.errors import ConfigError
from placement_gym.limits import require_memory


@dataclass(frozen=True)
class Range:
    """The values a numeric argument may take, and the memory a value needs (for size arguments).

    Args:
        low: Smallest allowed value (``None``: no lower bound).
        high: Largest allowed value (``None``: no upper bound).
        low_open: ``low`` itself is not allowed (``Range(0, low_open=True)``: strictly positive).
        high_open: ``high`` itself is not allowed.
        memory: Bytes a value needs at least (``hidden -> 4 * hidden**2`` for a square weight matrix);
            a value needing more than the machine has is refused with the figure.

    Example::

        Range(1)                                  # a count: >= 1
        Range(0.0, 1.0)                           # a probability
        Range(1, memory=lambda h: 4.0 * h * h)    # a layer width
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    memory: Callable[[float], float] | None = None

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return " and ".join(parts) or "any finite number"

    def check(self, value: float, what: str) -> None:
        """Raise :class:`ConfigError` naming ``what`` (``"milp argument time_limit"``) unless ``value`` fits."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ConfigError(f"{what} must be a finite number, got {value!r}")
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            raise ConfigError(f"{what} must be {self.describe()}, got {value!r}")
        if self.memory is not None:
            require_memory(self.memory(value), f"{what}={value!r}")
