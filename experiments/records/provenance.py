"""Provenance checks of result rows: what a row claims about how it was made, checked before and besides its
replay (``placement-gym validate``).

One row (:func:`row_problems`):

* its protocol is the current one or the transfer track's (or none: an off-protocol row has no tier either);
* a protocol row's tier is a protocol tier, its budget is that tier's, its seed one of the protocol's seeds;
  a transfer-v1 row's tier is ``transfer``, its budget 100, and it carries a pretraining record within the
  track's rules (:func:`placement_gym.transfer.check_pretraining`);
* its ``track`` is the one its registered method declares;
* the code commit it records (``extra["code"]``, written by the leaderboard runner) is a commit of this
  repository's history;
* each outside module it records (``versions["module:<name>"]``,
  :func:`placement_gym.results.module_versions`) is a module its method spec names, recorded as
  ``sha256:<64 hex digits>`` or ``<distribution>==<version>``;
* its score is present where the task has a reference optimum, not NaN, and not above the score of the
  task's proven lower bound; its latency is not below that bound.

A set of rows (:func:`set_problems`):

* no cell (task, method, seed, budget, protocol) is stored twice;
* each method of a tier ran the same seeds on every task, and those seeds are the protocol's first ones (a
  partial run stops after seed k; a subset picked per task or a lucky seed alone is not a run of the
  protocol).
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from placement_gym import transfer
from placement_gym.protocol import SEEDS, TIERS, VERSION
from placement_gym.results import ResultRow

#: A commit as the leaderboard runner records it (:func:`experiments.records.leaderboard.code_version`).
CODE_PATTERN = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")
#: Tolerance of the score ceiling and latency floor (the bound is a float written to JSON).
BOUND_TOL = 1e-9
_ROOT = Path(__file__).resolve().parents[2]


def method_name(spec: str) -> str:
    """The registry name of a method spec (``milp:time_limit=30`` -> ``milp``; a ``module:attr`` agent
    keeps its module path, which is no registry name)."""
    return spec.partition(":")[0]


def row_problems(row: ResultRow) -> list[str]:
    """What is wrong with the provenance of one row (empty: nothing)."""
    problems = _protocol_problems(row)
    declared = declared_track(row.method)
    if row.track is not None and declared is not None and row.track != declared:
        problems.append(f"track {row.track!r} but method {method_name(row.method)!r} is {declared!r}")
    code = row.extra.get("code")
    if code is not None:
        problems += _code_problems(code)
    problems += _module_problems(row)
    problems += _score_problems(row)
    return problems


def _protocol_problems(row: ResultRow) -> list[str]:
    if row.protocol is None:
        return [f"tier {row.tier!r} without a protocol version"] if row.tier is not None else []
    if row.protocol == transfer.VERSION:
        return _transfer_problems(row)
    if row.protocol != VERSION:
        return [f"protocol {row.protocol!r} is unknown (protocols: {VERSION!r}, {transfer.VERSION!r})"]
    problems = []
    if row.tier not in TIERS:
        known = ", ".join(TIERS)
        problems.append(f"tier {row.tier!r} is not a tier of protocol {VERSION} ({known})")
    elif row.budget != TIERS[row.tier]:
        problems.append(f"budget {row.budget} is not tier {row.tier}'s {TIERS[row.tier]}")
    if row.seed not in SEEDS:
        problems.append(f"seed {row.seed} is not a seed of protocol {VERSION} ({', '.join(map(str, SEEDS))})")
    return problems


def _transfer_problems(row: ResultRow) -> list[str]:
    """A transfer-v1 row: its tier, budget and seed, and a pretraining record within the track's rules."""
    from placement_gym.errors import ConfigError

    problems = []
    if row.tier != transfer.TIER:
        problems.append(f"tier {row.tier!r} is not {transfer.VERSION}'s {transfer.TIER!r}")
    if row.budget != transfer.BUDGET:
        problems.append(f"budget {row.budget} is not {transfer.VERSION}'s {transfer.BUDGET}")
    if row.seed not in transfer.TRANSFER_SEEDS:
        problems.append(f"seed {row.seed} is not a seed of protocol {transfer.VERSION}")
    record = row.extra.get("pretraining")
    if not isinstance(record, dict):
        return [*problems, "no pretraining record (extra['pretraining']), which every transfer-v1 row carries"]
    try:
        transfer.check_pretraining(transfer.Pretraining.from_dict(record))
    except (ConfigError, TypeError, ValueError) as exc:
        problems.append(f"pretraining record: {exc}")
    return problems


def declared_track(spec: str) -> str | None:
    """The track a registered method's spec declares (``None``: not a registered method). The whole spec
    counts: ``ppo_gnn`` reads the device-aware costs (white-box), ``ppo_gnn:observation=graph`` does not."""
    import agents
    from agents.specs import method_track

    if method_name(spec) not in agents.METHODS:
        return None
    return method_track(spec)


def _code_problems(code: object) -> list[str]:
    if not isinstance(code, str) or not (code == "unknown" or CODE_PATTERN.match(code)):
        return [f"code {code!r} is not a commit (hex digits, optionally +dirty)"]
    if code == "unknown":
        return []
    commit = code.removesuffix("+dirty")
    known = known_commit(commit)
    if known is False:
        return [f"code {code!r} is not a commit in this repository's history"]
    return []


def _module_problems(row: ResultRow) -> list[str]:
    """The outside modules a row records: each one its spec names, each identity in the recorded format.
    A row that records none (a registered method, or a row made before rows recorded modules) has none."""
    from agents.specs import outside_modules
    from placement_gym.results import MODULE_KEY, MODULE_RECORD

    keys = [k for k in row.versions if k.startswith(MODULE_KEY)]
    if not keys:
        return []
    named = outside_modules(row.method)
    problems = []
    for key in keys:
        name, identity = key.removeprefix(MODULE_KEY), row.versions[key]
        if name not in named:
            problems.append(f"versions record module {name!r}, which its method {row.method!r} does not name")
        elif not MODULE_RECORD.match(identity):
            problems.append(
                f"module {name} recorded as {identity[:80]!r}: not sha256:<64 hex digits> or "
                "<distribution>==<version>"
            )
    return problems


@functools.cache
def known_commit(commit: str) -> bool | None:
    """Whether ``commit`` is a commit that the checked-out ``HEAD`` descends from (``None``: no git
    repository to ask, e.g. an installed package)."""
    try:
        found = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=_ROOT, capture_output=True, check=False
        )
        if found.returncode != 0:
            inside = subprocess.run(
                ["git", "rev-parse", "--git-dir"], cwd=_ROOT, capture_output=True, check=False
            )
            return None if inside.returncode != 0 else False
        ancestor = subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=_ROOT, capture_output=True, check=False
        )
    except OSError:
        return None
    return ancestor.returncode == 0


def _score_problems(row: ResultRow) -> list[str]:
    from placement_gym.tasks import reference_for

    if row.backend != "simulated":
        return []
    ref = reference_for(row.model, row.graph_version, row.platform, row.coarsening, row.groups, row.task_sha256)
    if ref is None:
        if row.protocol is not None:
            named = f" (task hash {row.task_sha256[:12]}...)" if row.task_sha256 else ""
            return [f"task {row.model}/{row.platform}{named} has no reference optimum to score a protocol row"]
        if not math.isnan(row.score):
            return [f"score {row.score!r} but the task has no reference optimum"]
        return []
    problems = []
    if not row.latency > 0:  # NaN, zero or negative: nothing to score
        return [f"latency {row.latency!r} is not a positive number of seconds"]
    if math.isnan(row.score):
        problems.append("score missing (null or NaN) on a task with a reference optimum")
    ceiling = ref.score(ref.lower_bound)
    if row.score > ceiling + BOUND_TOL:
        problems.append(f"score {row.score:.6f} is above the task's ceiling {ceiling:.6f} (its proven lower bound)")
    if row.latency < ref.lower_bound * (1 - BOUND_TOL):
        problems.append(
            f"latency {row.latency * 1e3:.6f} ms is below the task's proven lower bound {ref.lower_bound * 1e3:.6f} ms"
        )
    elif math.isfinite(row.score) and not math.isclose(
        row.score, ref.score(row.latency), rel_tol=1e-6, abs_tol=1e-9
    ):
        problems.append(f"score {row.score:.6f} is not the score of its latency ({ref.score(row.latency):.6f})")
    return problems


def set_problems(rows: Sequence[ResultRow | None]) -> list[list[str]]:
    """Problems of each row as a member of ``rows`` (``None`` entries: unreadable lines, skipped): repeated
    cells and seed sets that differ between tasks or do not start at the protocol's first seed."""
    out: list[list[str]] = [[] for _ in rows]
    first: dict[tuple, int] = {}
    seeds: dict[tuple, dict[tuple, set[int]]] = defaultdict(lambda: defaultdict(set))
    for i, row in enumerate(rows):
        if row is None:
            continue
        if row.key in first:
            out[i].append(f"a second row of its cell (the first is row {first[row.key] + 1} of those given)")
            continue
        first[row.key] = i
        if row.protocol is not None:
            seeds[(row.protocol, row.tier, row.budget, row.method)][(row.model, row.platform)].add(row.seed)
    for i, row in enumerate(rows):
        if row is None or row.protocol is None or out[i]:
            continue
        by_task = seeds[(row.protocol, row.tier, row.budget, row.method)]
        mine = by_task[(row.model, row.platform)]
        union = set().union(*by_task.values())
        if mine != union:
            out[i].append(
                f"seeds {_seeds(mine)} of {row.method} on {row.model}/{row.platform} but {_seeds(union)} on its "
                "other tasks (a partial or cherry-picked seed set)"
            )
        elif sorted(union) != list(SEEDS[: len(union)]):
            out[i].append(
                f"seeds {_seeds(union)} of {row.method}: a run of the protocol's seeds starts at "
                f"{SEEDS[0]} and goes in order ({_seeds(set(SEEDS))})"
            )
    return out


def _seeds(seeds: set[int]) -> str:
    return "{" + ", ".join(map(str, sorted(seeds))) + "}"
