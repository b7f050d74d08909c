"""Sealed protocol runs: what an agent may read while it runs under the benchmark protocol.

While an agent runs under the protocol (:func:`placement_gym.benchmark.run_agent`) its problem is *sealed*
(:meth:`~placement_gym.problem.PlacementProblem.sealed`) and so is this process: the stored optima cannot be
read (:mod:`placement_gym.tasks` refuses), and in a ``black-box`` run no cost model can be read or built.
Every refusal is a :class:`~placement_gym.errors.ProtocolAccessError` with a one-line message.

Tracks:

* ``black-box``: the agent only evaluates placements (``evaluate``, ``evaluate_batch``, ``env.step``).
* ``white-box``: it may also read the analytic cost model (``problem.cost_model()``, the device-aware
  features), as HEFT, the MILP and the exact solver do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from placement_gym.errors import ConfigError, ProtocolAccessError

#: The tracks a method can run in.
TRACKS: tuple[str, ...] = ("black-box", "white-box")
#: The track of an agent that declares none.
DEFAULT_TRACK = "black-box"

_active: list[str] = []  # the tracks of the sealed runs active in this process, innermost last
_lock = threading.Lock()


def check_track(track: object) -> str:
    """``track`` if it is one of :data:`TRACKS`.

    Raises:
        ConfigError: Naming the value and the tracks.
    """
    if track not in TRACKS:
        raise ConfigError(f"track must be one of {', '.join(TRACKS)}, got {track!r}")
    return track  # type: ignore[return-value]


def active_track() -> str | None:
    """The strictest track of the sealed runs active in this process (``None``: no run is sealed)."""
    with _lock:
        if not _active:
            return None
        return "black-box" if "black-box" in _active else "white-box"


@contextmanager
def seal(track: str) -> Iterator[None]:
    """Seal this process for the duration of a protocol run in ``track``."""
    check_track(track)
    with _lock:
        _active.append(track)
    try:
        yield
    finally:
        with _lock:
            _active.reverse()
            _active.remove(track)  # the innermost run of this track
            _active.reverse()


def refuse_optima(what: str = "the stored optima") -> None:
    """Refuse reading the stored optima while a protocol run is sealed.

    Raises:
        ProtocolAccessError: If a run is sealed.
    """
    if active_track() is not None:
        raise ProtocolAccessError(f"{what} cannot be read while an agent runs under the protocol (any track)")


def require_white_box(what: str) -> None:
    """Refuse ``what`` (reading or building a cost model) in a black-box run.

    Raises:
        ProtocolAccessError: If a black-box run is sealed.
    """
    if active_track() == "black-box":
        raise ProtocolAccessError(
            f"{what} is white-box: a black-box run only evaluates placements (declare track = 'white-box' "
            "on the agent to read the cost model)"
        )
