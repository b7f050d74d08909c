"""Whether the machine was quiet while a calibration ran: recorded with the stored figures, and checked
before they are stored.

A calibration (the ``local`` platform's figures, the segment-boundary costs, a per-layer profile) is
measured once and then read from the cache for as long as its key holds. Figures measured while other
programs ran stay wrong that long (a copy bandwidth measured at load average 10 was 1.15 GB/s, against
14.3 GB/s on the same machine when quiet). So every calibration is bracketed by two readings of the
kernel's CPU accounts, and what it saw is stored with the figures (``host_activity`` in the entry's
metadata, :func:`measure_quietly`).

**What is measured.** ``/proc/stat`` counts, for each core, the time it spent busy (user, nice, system,
irq, softirq, and steal: time a virtual machine's hypervisor gave the core to another guest) and idle
(idle, iowait). Over the calibration, the busy time of the cores this process may run on (its affinity
set: the cores the figures are calibrated on and stored for) minus this process's own CPU time (all its
threads, :func:`os.times`; they can only run on those cores) is the time other processes, and other
guests, took from them. Divided by those cores' total time it is ``others_share``: about 0 on a quiet
machine, 0.5 when another program kept one of two cores busy throughout. It is used rather than the load
average (recorded beside it) because it covers exactly the calibration's time span and cores (the load
average is machine-wide and a one-minute moving average that lags), and it counts steal time, which the
load average does not see.

Its limits: the kernel accounts CPU time in ticks (usually 1/100 s), so a calibration shorter than
:data:`MIN_SECONDS` is not judged (status ``unknown``); it does not see programs on other cores that
compete for memory bandwidth or a shared cache; this process's own time cannot be split by core, so the
per-core figure ``core_busy`` includes this process's work. Where ``/proc/stat`` does not exist (not
Linux) the status is ``unknown``.

**What is done with it.** A calibration whose ``others_share`` exceeds :data:`BUSY_THRESHOLD` is *busy*.
It is not stored: it is measured again, up to :data:`CALIBRATION_ATTEMPTS` attempts in all with
:data:`RETRY_PAUSE` seconds between them, and if every attempt was busy, :class:`BusyHostError` says so in
one line and nothing is stored. Accepting busy figures is explicit: ``allow_busy=True``
(``placement-gym calibrate --allow-busy``, or ``PLACEMENT_GYM_ALLOW_BUSY=1`` for figures measured on first
use, e.g. by ``gym.make``) stores the last attempt's figures with ``accepted_busy`` in their record, and
every later process that uses them logs a note saying so. Entries stored before this record existed are
read as they are; their status is ``unknown``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from placement_gym.errors import BusyHostError
from placement_gym.platforms.machine import core_span, process_cores

#: Share of the calibrated cores' time other processes may take before a calibration counts as busy.
BUSY_THRESHOLD = 0.25
#: Attempts at a calibration (the first and the retries) before a busy host is an error.
CALIBRATION_ATTEMPTS = 3
#: Seconds to wait before measuring again after a busy attempt.
RETRY_PAUSE = 5.0
#: Calibrations shorter than this (seconds of each core's time) are not judged: too few kernel ticks.
MIN_SECONDS = 0.2
#: Environment variable that accepts busy calibrations where no argument can (figures measured on first use).
ALLOW_BUSY_ENV_VAR = "PLACEMENT_GYM_ALLOW_BUSY"
#: The metadata field of a cache entry that holds the record.
FIELD = "host_activity"
STATUSES = ("quiet", "busy", "unknown")

T = TypeVar("T")
_log = logging.getLogger(__name__)
_override: list[bool] = []  # innermost accept_busy() setting
_noted: set[str] = set()  # busy entries this process has already logged a note about


@dataclass(frozen=True)
class CpuSample:
    """One reading of the CPU accounts of some cores.

    Attributes:
        ticks: Per core, ``(busy, total)`` kernel ticks since boot.
        own: CPU seconds this process has used (all threads), from :func:`os.times`.
        load: The 1-minute load average.
        wall: :func:`time.monotonic` at the reading.
    """

    ticks: dict[int, tuple[int, int]]
    own: float
    load: float
    wall: float


Reader = Callable[[tuple[int, ...]], "CpuSample | None"]


def read_cpu_sample(cores: tuple[int, ...], stat: Path = Path("/proc/stat")) -> CpuSample | None:
    """The CPU accounts of ``cores`` now, or ``None`` where ``stat`` is missing or lacks one of them."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    wanted, ticks = set(cores), {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()) or int(name[3:]) not in wanted:
            continue
        values = [int(v) for v in rest.split()[:8]]
        user, nice, system, idle, iowait, irq, softirq, steal = values + [0] * (8 - len(values))
        busy = user + nice + system + irq + softirq + steal  # guest time is already inside user and nice
        ticks[int(name[3:])] = (busy, busy + idle + iowait)
    if set(ticks) != wanted:
        return None
    own = os.times()
    return CpuSample(ticks, own.user + own.system, os.getloadavg()[0], time.monotonic())


def cores_phrase(cores: tuple[int, ...] | list[int]) -> str:
    """``core 1`` or ``cores 0,1``."""
    return f"core {cores[0]}" if len(cores) == 1 else f"cores {core_span(cores)}"


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


def assess(
    before: CpuSample | None,
    after: CpuSample | None,
    cores: tuple[int, ...],
    threshold: float | None = None,
    hz: int | None = None,
) -> dict[str, Any]:
    """The record of one calibration between readings ``before`` and ``after`` of ``cores`` (see the
    module docstring): ``status`` (``quiet``, ``busy`` or ``unknown``), ``others_share`` (0..1, ``None``
    when unknown), ``core_busy`` (per core, busy share including this process), ``cores``, ``seconds``,
    ``load_before``, ``load_after``, ``threshold`` (default :data:`BUSY_THRESHOLD`), ``measured_at`` (UTC)
    and, when unknown, ``reason``. ``hz``: kernel ticks per second (default the system's)."""
    threshold = BUSY_THRESHOLD if threshold is None else threshold
    record: dict[str, Any] = {
        "status": "unknown",
        "others_share": None,
        "core_busy": {},
        "cores": list(cores),
        "seconds": None,
        "load_before": before.load if before else None,
        "load_after": after.load if after else None,
        "threshold": threshold,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if before is None or after is None:
        return {**record, "reason": "this system has no per-core CPU accounts (/proc/stat)"}
    hz = hz or _clock_ticks()
    record["seconds"] = round(after.wall - before.wall, 3)
    busy = {c: after.ticks[c][0] - before.ticks[c][0] for c in cores}
    total = {c: after.ticks[c][1] - before.ticks[c][1] for c in cores}
    record["core_busy"] = {str(c): round(busy[c] / total[c], 3) if total[c] > 0 else None for c in cores}
    all_ticks = sum(total.values())
    if all_ticks / hz / max(len(cores), 1) < MIN_SECONDS:
        return {**record, "reason": f"too short to judge (under {MIN_SECONDS} s of each core's time)"}
    others = (sum(busy.values()) - (after.own - before.own) * hz) / all_ticks
    share = round(min(max(others, 0.0), 1.0), 3)
    return {**record, "status": "busy" if share > threshold else "quiet", "others_share": share}


def allow_busy_default() -> bool:
    """Whether busy calibrations are accepted when the caller does not say: the innermost
    :func:`accept_busy`, else ``$PLACEMENT_GYM_ALLOW_BUSY`` (``1``, ``true`` or ``yes``)."""
    if _override:
        return _override[-1]
    return os.environ.get(ALLOW_BUSY_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def accept_busy(allow: bool = True) -> Iterator[None]:
    """Within the block, calibrations made on first use accept (or refuse) a busy host, whatever
    ``$PLACEMENT_GYM_ALLOW_BUSY`` says (``placement-gym calibrate --allow-busy`` uses it)."""
    _override.append(allow)
    try:
        yield
    finally:
        _override.pop()


def measure_quietly(
    measure: Callable[[], T],
    what: str,
    *,
    allow_busy: bool | None = None,
    cores: tuple[int, ...] | None = None,
    reader: Reader | None = None,
    attempts: int | None = None,
    pause: float | None = None,
    sleep: Callable[[float], None] | None = None,
) -> tuple[T, dict[str, Any]]:
    """Run the calibration ``measure`` until the host was not busy during it (see the module docstring).

    Args:
        measure: Makes the figures; called once per attempt.
        what: What it measures, for messages (``"the local platform's figures"``).
        allow_busy: Keep the last attempt's figures if every attempt was busy; ``None``:
            :func:`allow_busy_default`.
        cores: The cores it runs on; default this process's (:func:`process_cores`).
        reader: Reads the CPU accounts of ``cores``; default :func:`read_cpu_sample` (tests pass their own).
        attempts: Attempts in all (at least 1); default :data:`CALIBRATION_ATTEMPTS`.
        pause: Seconds before each retry, passed to ``sleep`` (default :func:`time.sleep`); default
            :data:`RETRY_PAUSE`.

    Returns:
        ``(figures, record)``: ``measure``'s result and the :func:`assess` record of its attempt, plus
        ``attempts`` (made) and ``accepted_busy``.

    Raises:
        BusyHostError: If every attempt was busy and busy figures are not accepted.
    """
    cores = tuple(cores) if cores is not None else process_cores()
    allow = allow_busy_default() if allow_busy is None else allow_busy
    reader = reader or read_cpu_sample
    attempts = max(CALIBRATION_ATTEMPTS if attempts is None else attempts, 1)
    pause = RETRY_PAUSE if pause is None else pause
    sleep = sleep or time.sleep
    shares = []
    for attempt in range(1, attempts + 1):
        before = reader(cores)
        figures = measure()
        record = assess(before, reader(cores), cores)
        record.update(attempts=attempt, accepted_busy=False)
        if record["status"] != "busy":
            return figures, record
        shares.append(record["others_share"])
        if attempt < attempts:
            _log.info(
                "the host was busy while measuring %s: other processes used %.0f%% of %s; measuring again "
                "in %.0f s (attempt %d of %d)",
                what, 100 * record["others_share"], cores_phrase(cores), pause, attempt + 1, attempts,
            )  # fmt: skip
            sleep(pause)
    if allow:
        record["accepted_busy"] = True
        return figures, record
    raise BusyHostError(
        f"the host was busy while measuring {what}: other processes used at least {100 * min(shares):.0f}% "
        f"of {cores_phrase(cores)} in each of {len(shares)} attempts (load average "
        f"{record['load_after']:.2f}), so nothing was stored; rerun on a quiet machine (or on idle cores "
        f"with taskset), or pass --allow-busy (${ALLOW_BUSY_ENV_VAR}=1 outside the command line) to keep "
        "figures measured under load"
    )


def host_activity(meta: dict[str, Any], directory: Path | None = None) -> dict[str, Any]:
    """The host-activity record of a cache entry's metadata. An entry stored before it was recorded (or
    with a damaged one) gives status ``unknown``, with ``stored_at``, the time its ``meta.json`` was
    written, when ``directory`` (the entry) is given."""
    record = meta.get(FIELD)
    if isinstance(record, dict) and record.get("status") in STATUSES:
        return record
    record = {"status": "unknown", "reason": "stored before placement-gym recorded how busy the host was"}
    try:
        written = (directory / "meta.json").stat().st_mtime if directory is not None else None
    except OSError:
        written = None
    if written is not None:
        record["stored_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written))
    return record


def _utc(stamp: str) -> str:
    return f"{stamp.replace('T', ' ').rstrip('Z')} UTC"


def describe(record: dict[str, Any]) -> str:
    """One phrase saying when and how busy the host was, for a record of :func:`host_activity`."""
    if record.get("measured_at"):
        when = f"measured {_utc(record['measured_at'])}"
    elif record.get("stored_at"):
        when = f"stored {_utc(record['stored_at'])}"
    else:
        when = "measured at an unknown time"
    cores = record.get("cores")
    on = f" on {cores_phrase(cores)}" if cores else ""
    loads = (record.get("load_before"), record.get("load_after"))
    load = f"; load average {loads[0]:.2f} -> {loads[1]:.2f}" if None not in loads else ""
    if record["status"] == "unknown":
        return f"{when}{on}; how busy the host was is unknown ({record.get('reason', 'not recorded')}{load})"
    them = "it" if cores and len(cores) == 1 else "them"
    share = f"other processes used {100 * record['others_share']:.0f}% of {them}"
    if record["status"] == "quiet":
        return f"{when}{on}, quiet: {share}{load}"
    accepted = ", accepted with --allow-busy" if record.get("accepted_busy") else ""
    return f"{when}{on} while the host was BUSY: {share}{accepted}{load}"


def short(record: dict[str, Any]) -> str:
    """A few words for a table cell: ``quiet (others 3%)``, ``BUSY, accepted (others 52%)``, ``unknown``."""
    if record["status"] == "unknown":
        return "unknown"
    share = f"others {100 * record['others_share']:.0f}%"
    if record["status"] == "quiet":
        return f"quiet ({share})"
    return f"BUSY{', accepted' if record.get('accepted_busy') else ''} ({share})"


def note_if_busy(key: str, record: dict[str, Any], what: str, fix: str, made: bool = False) -> None:
    """Log a note, once per process and entry ``key``, when stored figures in use (their
    :func:`host_activity` ``record``) were accepted from a busy host (not when this process just ``made``
    them: it accepted them itself)."""
    if made:
        _noted.add(key)
    if record["status"] == "busy" and key not in _noted:
        _noted.add(key)
        _log.info("%s in use were %s; run %s on a quiet machine to replace them", what, describe(record), fix)


def cached_calibration(
    key: str,
    filename: str,
    measure: Callable[[], Any],
    what: str,
    fix: str,
    meta: dict[str, Any],
    allow_busy: bool | None,
    cores: tuple[int, ...],
    force: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """A ``platform`` cache entry holding one JSON figure file: ``measure()`` run under
    :func:`measure_quietly` when the entry is missing (or ``force``), stored as ``filename`` with ``meta``
    and its host-activity record, and a note logged if the figures in use were measured on a busy host.

    Returns:
        ``(figures, record)``: the stored figures and their record (:func:`host_activity`).
    """
    from placement_gym.cache import cached_entry

    made = []

    def write(directory: Path) -> dict[str, Any]:
        made.append(True)
        figures, activity = measure_quietly(measure, what, allow_busy=allow_busy, cores=cores)
        (directory / filename).write_text(json.dumps(figures, indent=1))
        return {**meta, FIELD: activity}

    directory, stored = cached_entry("platform", key, write, force=force)
    record = host_activity(stored, directory)
    note_if_busy(key, record, what, fix, bool(made))
    return json.loads((directory / filename).read_text()), record
