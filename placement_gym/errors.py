"""The exception hierarchy of placement-gym.

Every error the package raises on bad input derives from :class:`PlacementGymError`, so callers can catch
one type. Messages name the bad value and say how to fix it.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from typing import Any

#: Longest quotation of a bad value an error message carries, characters.
QUOTE_LIMIT = 120


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """A bounded ``repr`` of ``value`` for an error message: at most ``limit`` characters, whatever its
    size, with the length of a cut string said. Nested containers are walked only as far as shown
    (:mod:`reprlib`), so quoting a structure built from a billion aliases costs microseconds."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother = 3, limit, limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 8
    text = r.repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, (str, bytes)) and len(value) > limit:
        text += f" ({len(value)} characters)"
    return text


class PlacementGymError(Exception):
    """Base class of all placement-gym errors."""


class UnknownNameError(PlacementGymError, KeyError):
    """A name (model, platform, device, backend, coarsening level...) that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        self.kind, self.name, self.known = kind, name, known
        close = difflib.get_close_matches(str(name)[:QUOTE_LIMIT], known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown {kind} {quote(name)}; known: {', '.join(known)}.{hint}")

    def __str__(self) -> str:  # KeyError would otherwise quote the whole message
        return self.args[0]


class ModelError(PlacementGymError):
    """A model cannot be built, converted or read (missing or corrupt file, failed conversion)."""


class CorruptModelError(ModelError):
    """A model file exists but its content is damaged or incomplete."""


class GraphError(PlacementGymError, ValueError):
    """A computation graph is malformed."""


class CyclicGraphError(GraphError):
    """A graph that must be a DAG contains a cycle."""


class CoarseningError(PlacementGymError, ValueError):
    """A coarsening was asked for with invalid arguments (for example K < 1)."""


class PlacementError(PlacementGymError, ValueError):
    """A placement has the wrong shape, dtype or a device index out of range."""


class BudgetExhaustedError(PlacementGymError):
    """A new placement was to be evaluated after the run's evaluation budget was spent."""


class RunStalledError(BudgetExhaustedError):
    """A run stalled: too many evaluation requests in a row without a new placement, or more requests in
    all than the documented multiple of its budget (:mod:`placement_gym.budget`). It ends the run like a
    spent budget."""


class BackendError(PlacementGymError):
    """A latency backend failed for a reason that is not a property of the placement."""


class ConfigError(PlacementGymError, ValueError):
    """An argument or a configuration file has an invalid value (wrong type, out of range, unknown key)."""


class CacheError(PlacementGymError):
    """The on-disk cache cannot be used (a file where a directory belongs, a lock path that is a folder)."""


class BusyHostError(PlacementGymError):
    """Other processes took more than the allowed share of the cores a calibration ran on, in every attempt,
    so its figures were not stored (:mod:`placement_gym.platforms.quiet`; rerun on a quiet machine or
    accept them with ``--allow-busy``)."""


class LockError(CacheError):
    """A lock file or lock folder cannot be used safely (a link, not private, owned by another user)."""


class RecordError(PlacementGymError, ValueError):
    """A results or placement file is damaged or does not have the expected fields."""


class UntrustedFileError(PlacementGymError):
    """A file could run code when loaded (a pickle) and was not marked as trusted."""


class CacheWarning(UserWarning):
    """A cached entry or result did not prove what it holds (edited, damaged, another entry's) and is
    rebuilt or measured again instead of being used."""


class ProfileWarning(UserWarning):
    """A stored per-layer profile disagrees with a fresh measurement of the same model (rerun
    ``placement-gym calibrate``)."""


class ProtocolAccessError(PlacementGymError):
    """An agent read what its protocol run does not let it read: the stored optima, the backend, the run's
    counters, or (in a black-box run) the cost model."""


class AgentFailedError(PlacementGymError):
    """An agent raised (or called ``sys.exit``) in one or more cells of a benchmark; the other cells ran."""
