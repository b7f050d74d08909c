"""Reward functions: map a placement's latency (and the baseline's) to a scalar, larger is better.

Every reward is finite for infeasible placements: they get the reward's ``infeasible`` value, documented
per reward, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

from placement_gym.errors import ConfigError, UnknownNameError


@dataclass(frozen=True)
class Reward:
    """A reward shape.

    Attributes:
        name: Registry name.
        infeasible: Reward of an infeasible placement.
    """

    name: str
    infeasible: float

    @property
    def needs_baseline(self) -> bool:
        """True if the reward compares the latency with the best single-device baseline's."""
        return self.name != "neg_latency_ms"

    def __call__(self, latency: float, baseline: float, feasible: bool) -> float:
        if not feasible:
            return self.infeasible
        if self.name == "speedup":
            return baseline / latency - 1.0
        if self.name == "neg_latency_ms":
            return -latency * 1e3
        if self.name == "log_speedup":
            import math

            return math.log(baseline / latency)
        raise AssertionError(self.name)  # unreachable: REWARDS holds only the names above


REWARDS = {
    r.name: r
    for r in (
        Reward("speedup", -1.0),  # baseline / latency - 1: 0 is as fast as the best single device
        Reward("log_speedup", -5.0),  # log(baseline / latency)
        Reward("neg_latency_ms", -1e4),  # -latency in milliseconds
    )
}


def get_reward(name: str, infeasible: float | None = None) -> Reward:
    """The reward called ``name``, optionally with another infeasible penalty.

    Raises:
        UnknownNameError: For an unknown reward name (lists the known ones).
        ConfigError: If ``infeasible`` is not a finite number (a string, NaN, infinity, a bool).
    """
    if name not in REWARDS:
        raise UnknownNameError("reward", name, REWARDS)
    reward = REWARDS[name]
    if infeasible is None:
        return reward
    if isinstance(infeasible, bool) or not isinstance(infeasible, Real) or not math.isfinite(infeasible):
        raise ConfigError(f"infeasible_reward must be a finite number, got {infeasible!r}")
    return Reward(reward.name, float(infeasible))
