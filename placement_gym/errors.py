"""The exception hierarchy of placement-gym.

Every error the package raises on bad input derives from :class:`PlacementGymError`, so callers can catch
one type. Messages name the bad value and say how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PlacementGymError(Exception):
    """Base class of all placement-gym errors."""


class UnknownNameError(PlacementGymError, KeyError):
    """A name (model, platform, device, backend, coarsening level...) that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        self.kind, self.name, self.known = kind, name, known
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(known)}.{hint}")

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


class BackendError(PlacementGymError):
    """A latency backend failed for a reason that is not a property of the placement."""


class ConfigError(PlacementGymError, ValueError):
    """An argument or a configuration file has an invalid value (wrong type, out of range, unknown key)."""


class CacheError(PlacementGymError):
    """The on-disk cache cannot be used (a file where a directory belongs, a lock path that is a folder)."""


class RecordError(PlacementGymError, ValueError):
    """A results or placement file is damaged or does not have the expected fields."""


class UntrustedFileError(PlacementGymError):
    """A file could run code when loaded (a pickle) and was not marked as trusted."""


class ProfileWarning(UserWarning):
    """A stored per-layer profile disagrees with a fresh measurement of the same model (rerun
    ``placement-gym calibrate``)."""
