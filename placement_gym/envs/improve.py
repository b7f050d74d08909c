"""The improvement environment: start from a placement and improve it one move at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from placement_gym.backends import LatencyBackend
from placement_gym.benchmarks import Benchmark
from placement_gym.envs.observation import check_padding, one_hot, static_arrays, static_spaces
from placement_gym.envs.render import render_placement
from placement_gym.errors import ConfigError, PlacementError, PlacementGymError, UnknownNameError
from placement_gym.heuristics.common import allowed_devices
from placement_gym.heuristics.heft import heft_placement
from placement_gym.moves import SET_KINDS, move_sets
from placement_gym.platforms import Platform
from placement_gym.problem import PlacementProblem

STARTS = ("heft", "best_single", "random")
#: Draws of a random start before giving up (each is one counted evaluation).
RANDOM_START_TRIES = 100
_EPISODE_BOUND = np.float32(10.0)
_NO_GROUPS = np.zeros(0, dtype=np.int64)


def _parse_moves(moves: str | Sequence[str]) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in moves.split(",")) if isinstance(moves, str) else tuple(moves)
    for kind in kinds:
        if kind not in SET_KINDS:
            raise UnknownNameError("move kind", str(kind), SET_KINDS)
    if "single" not in kinds:
        raise ConfigError(f"moves must include 'single' (every group can move alone), got {list(kinds)}")
    return tuple(k for k in SET_KINDS if k in kinds)


class DevicePlacementImproveEnv(gym.Env):
    """Improve a placement one move at a time; the reward is the relative latency change of each move.

    ## Description

    The improvement MDP of GiPH (Hu et al., "GiPH: Generalizable Placement Learning for Adaptive
    Heterogeneous Computing", MLSys 2023) over one :class:`~placement_gym.problem.PlacementProblem` (the
    same models, platforms, coarsening and backends as :class:`~placement_gym.envs.DevicePlacementEnv`).
    An episode starts from a complete placement (HEFT's, the best single device, a random one, or one
    passed to ``reset``); each step sends one set of groups to one device, evaluates the new placement
    through the problem (one evaluation, counted by the problem's counting) and keeps it if it is
    feasible. The best placement of the episode is in ``info``.

    Move sets (``moves``, the placement-independent kinds of :mod:`placement_gym.moves`): ``"single"``
    (each group alone; always on), and optionally ``"class"`` (a whole twin class: groups with equal
    costs, e.g. BERT's 12 identical layers), ``"segment"`` (2, 4 or 8 consecutive groups in topological
    order), ``"branch"`` (a fork-join branch, alone or with its fork and / or join). Set ``s < G`` is group
    ``s`` alone; the other kinds follow, each set listed once.

    Registered IDs (``import placement_gym``; ``placement_gym.IMPROVE_IDS`` lists them), all simulated,
    single-group moves, starting from HEFT:

    * ``DevicePlacementImprove-<model>-<platform>-sim-v0`` for ``<model>`` in ``inception_v3``, ``resnet50``,
      ``bert`` and ``<platform>`` in ``cpu_dgpu``, ``cpu_igpu``, ``multi_accel``, ``model_parallel`` (the
      12 suite tasks; ``cpu_dgpu`` is the platform of ``DevicePlacement-<model>-cpu_dgpu-sim-v0``),
      ``resnet50`` on ``cpu_igpu_lowmem`` (the mask-binding task), and for the held-out families on
      ``cpu_igpu`` and ``multi_accel`` (``placement_gym.env_id(model, platform, mdp="improve")``);
    * ``DevicePlacementImprove-v0``: any arguments below (``nondeterministic=True``).

    ## Action Space

    ``Discrete(M * D)``: action ``a`` sends move set ``a // D`` to device ``a % D``. ``M`` is ``N`` (the
    groups, padded to ``max_nodes``) with single moves only, else ``max_moves`` (default: ``N`` plus the
    other sets). Actions past the real sets (padding), and moves that change nothing (every member is
    already on the device), leave the placement as it is (reward 0; the unchanged placement is still
    evaluated). Out-of-range or non-integer actions raise :class:`~placement_gym.errors.PlacementError`.

    ``action_masks()`` (sb3-contrib MaskablePPO) is a flat bool vector of length ``M * D``: a move is
    allowed when every member may use the device (it fits in the device's memory and has a finite cost:
    :func:`~placement_gym.heuristics.common.allowed_devices`) and at least one member is elsewhere; padding
    is masked. Every state has at least one allowed move (checked when the env is built).

    ## Observation Space

    A ``Dict`` of ``Box`` es with fixed shapes (``N = max_nodes or G``, ``E = max_edges or edges``), padded
    with zeros inside the bounds. The graph and device keys are those of
    :class:`~placement_gym.envs.DevicePlacementEnv` with ``observation="device"``:

    | key | shape | dtype | bounds | meaning |
    |---|---|---|---|---|
    | ``node_features`` | ``(N, 28)`` | float32 | ``[0, 3e38]`` | static per-group features (:data:`placement_gym.features.NODE_FEATURES`) |
    | ``node_mask`` | ``(N,)`` | float32 | ``[0, 1]`` | 1 for real groups |
    | ``edge_index`` | ``(2, E)`` | int64 | ``[0, N - 1]`` | source and target group of each edge (padding ``0 -> 0``) |
    | ``edge_features`` | ``(E, 1)`` | float32 | ``[0, 3e38]`` | scaled log bytes of each edge |
    | ``edge_mask`` | ``(E,)`` | float32 | ``[0, 1]`` | 1 for real edges |
    | ``node_device_features`` | ``(N, D, 3)`` | float32 | ``[0, 1]`` | per group and device: scaled log compute time, relative speed, fits in memory |
    | ``edge_link_features`` | ``(E, D * D)`` | float32 | ``[0, 1]`` | per edge and link ``i -> j``: scaled log transfer time |
    | ``device_features`` | ``(D, 5)`` | float32 | ``[0, 1]`` | per device: relative speed, memory, invoke overhead, is host, bandwidth |
    | ``placement`` | ``(N, D)`` | float32 | ``[0, 1]`` | one-hot device of each group in the current placement |
    | ``episode`` | ``(3,)`` | float32 | ``[-10, 10]`` | ``log(start / current latency)``, ``log(start / best latency)``, steps taken / ``max_steps`` (clipped to the bounds) |

    With move kinds besides ``"single"`` two more keys describe the sets (fixed per env):

    | key | shape | dtype | bounds | meaning |
    |---|---|---|---|---|
    | ``move_members`` | ``(M, S)`` | int64 | ``[-1, N - 1]`` | the groups of each set, padded with -1 (``S = max_move_size`` or the largest set) |
    | ``move_kind`` | ``(M, 4)`` | float32 | ``[0, 1]`` | one-hot kind of each set (``single``, ``class``, ``segment``, ``branch``; zeros for padding) |

    ## Rewards

    ``log(previous latency / new latency)`` for a feasible move (positive when it is faster; the rewards
    of an episode sum to ``log(start / final latency)`` plus the penalties). A move to an infeasible
    placement (out of memory, a device that cannot run a group) earns ``infeasible_reward`` (default -1)
    and is undone: the placement stays as it was. A move that changes nothing earns 0.

    ``info`` (after ``reset`` and every step; a function of the seed, the options and the actions only,
    never of earlier episodes or of caches): ``latency`` (of the placement evaluated: ``inf`` if the move
    was infeasible), ``feasible``, ``reason``, ``current_latency`` and ``placement`` (after the step),
    ``start_latency``, ``best_latency`` and ``best_placement`` (the fastest placement of this episode,
    the start included), ``steps``, ``moved`` (groups sent by the step; 0 after ``reset``), and where the
    task has a baseline ``baseline_latency`` and, with a stored reference optimum (never while an agent runs
    under the benchmark protocol), ``score`` and
    ``best_score`` (the normalised scores of ``current_latency`` and ``best_latency``: 0 = the best single
    device, 1 = the optimum).

    ## Starting State

    ``start`` (or ``reset(options={"start": ...})``): ``"heft"`` (default; HEFT's placement,
    :func:`~placement_gym.heuristics.heft.heft_placement`, computed once), ``"best_single"`` (the baseline:
    the best single device, or the stored feasible split where no device holds the model), ``"random"``
    (each group on a uniformly drawn allowed device, from ``self.np_random``; redrawn while infeasible, at
    most 100 draws, each one evaluation). ``reset(options={"placement": p})`` starts from ``p`` (shape
    ``(G,)``, device indices); a malformed or infeasible ``p`` raises
    :class:`~placement_gym.errors.PlacementError` naming the problem. Every start is evaluated once.

    ## Episode End

    Never terminated (every placement can still move); truncated after ``max_steps`` steps (default
    ``G``). ``step()`` before ``reset()`` or after truncation raises
    :class:`~placement_gym.errors.PlacementError`.

    ## Arguments

    ```python
    import gymnasium as gym
    import placement_gym  # registers the IDs

    env = gym.make("DevicePlacementImprove-bert-multi_accel-sim-v0")  # from HEFT, single moves
    env = gym.make("DevicePlacementImprove-v0", model="tiny_bert", platform="multi-accel",
                   backend="simulated", start="random", moves="single,class,segment,branch", max_steps=32)
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
    ```

    ``model``, ``platform``, ``backend``, ``backend_kwargs``, ``coarsening``, ``k`` build the problem as in
    :class:`~placement_gym.envs.DevicePlacementEnv` (or pass a ready ``problem=``); ``start``, ``moves``
    (a comma-separated string or a sequence of kinds), ``max_steps``, ``infeasible_reward``, ``max_nodes``
    / ``max_edges`` / ``max_moves`` / ``max_move_size`` (pad to share spaces across graphs), ``render_mode``
    (``"ansi"``, ``"rgb_array"``).

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}

    def __init__(
        self,
        model: str | Benchmark = "tiny_cnn",
        platform: str | Platform = "local",
        backend: str | LatencyBackend = "measured",
        *,
        coarsening: str = "fused",
        k: int | None = None,
        backend_kwargs: dict[str, Any] | None = None,
        problem: PlacementProblem | None = None,
        start: str = "heft",
        moves: str | Sequence[str] = "single",
        max_steps: int | None = None,
        infeasible_reward: float = -1.0,
        max_nodes: int | None = None,
        max_edges: int | None = None,
        max_moves: int | None = None,
        max_move_size: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        for name, value, valid in (
            ("start", start, STARTS),
            ("render mode", render_mode, (None, *self.metadata["render_modes"])),
        ):
            if value not in valid:
                raise UnknownNameError(name, str(value), [str(v) for v in valid])
        kinds = _parse_moves(moves)
        if (
            isinstance(infeasible_reward, bool)
            or not isinstance(infeasible_reward, (int, float))
            or not (math.isfinite(infeasible_reward))
        ):
            raise ConfigError(f"infeasible_reward must be a finite number, got {infeasible_reward!r}")
        if problem is None and isinstance(backend, LatencyBackend):
            # the env's reward is its own: the problem's needs no baseline
            problem = PlacementProblem(
                backend.benchmark, backend.graph, backend.platform, backend, "neg_latency_ms"
            )
        elif problem is None:
            problem = PlacementProblem.make(
                model, platform, backend, coarsening=coarsening, k=k, reward="neg_latency_ms",
                backend_kwargs=backend_kwargs,
            )  # fmt: skip
        #: The placement problem this env adapts (see :func:`placement_gym.problem_of`).
        self.problem: PlacementProblem = problem
        self.num_groups = g = problem.num_groups
        self.num_devices = d = problem.num_devices
        if max_steps is None:
            max_steps = g
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ConfigError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        self.max_steps = int(max_steps)
        self.start, self.moves, self.render_mode = start, kinds, render_mode
        self.infeasible_reward = float(infeasible_reward)
        n, e = check_padding(problem, max_nodes, max_edges, device=True, improve=True)
        self.max_nodes, self.max_edges = n, e
        self._allowed = allowed_devices(problem)  # (G, D)
        if not (self._allowed.sum(axis=1) >= 2).any():
            raise ConfigError(
                f"no group of {problem.benchmark.name!r} may use two devices of platform "
                f"{problem.platform.name!r}: there is nothing to improve"
            )

        # move sets: (S, G) members, padded to M sets of at most `size` groups
        members, kind = move_sets(problem.cost_model(), kinds)
        singles_only = kinds == ("single",)
        real = np.zeros((0, g), dtype=bool) if singles_only else members[g:]
        m = n + len(real) if max_moves is None else max_moves
        if singles_only and max_moves is not None and max_moves != n:
            raise ConfigError(
                f"max_moves={max_moves} needs move kinds besides 'single' (it is N={n} without)"
            )
        if m < n + len(real):
            raise ConfigError(
                f"max_moves={max_moves} is smaller than the {n + len(real)} move sets (N={n} singles)"
            )
        self.num_moves = m
        rows = [np.flatnonzero(r) for r in members[:g]] + [[] for _ in range(n - g)]
        rows += [np.flatnonzero(r) for r in real]
        self._members = [np.asarray(r, dtype=np.int64) for r in rows]  # M' <= M index arrays
        # every (set, member) pair, for the masks: (P,) set index and (P,) group
        sizes = np.array([len(r) for r in self._members], dtype=np.int64)  # (M',)
        self._set_sizes = sizes
        self._pair_set = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
        self._pair_group = np.concatenate(self._members) if len(rows) else _NO_GROUPS
        forbidden = np.zeros((len(rows), d))  # (M', D) members that may not use each device
        for dev in range(d):
            forbidden[:, dev] = np.bincount(self._pair_set, ~self._allowed[self._pair_group, dev], len(rows))
        self._set_allowed = (forbidden == 0) & (sizes[:, None] > 0)  # (M', D)
        obs_arrays = static_arrays(problem, n, e, device=True)
        if not singles_only:
            size = int(sizes.max()) if max_move_size is None else max_move_size
            if size < int(sizes.max()):
                raise ConfigError(
                    f"max_move_size={max_move_size} is smaller than the largest set ({int(sizes.max())})"
                )
            table = np.full((m, size), -1, dtype=np.int64)  # (M, S)
            for i, r in enumerate(rows):
                table[i, : len(r)] = r
            kinds_onehot = np.zeros((m, len(SET_KINDS)), dtype=np.float32)  # (M, 4)
            kinds_onehot[:g] = np.eye(len(SET_KINDS), dtype=np.float32)[0]
            kinds_onehot[n : n + len(real)] = np.eye(len(SET_KINDS), dtype=np.float32)[kind[g:]]
            obs_arrays.update(move_members=table, move_kind=kinds_onehot)
            for arr in obs_arrays.values():
                arr.flags.writeable = False
        self._static = obs_arrays
        obs_spaces = static_spaces({k: v for k, v in obs_arrays.items() if not k.startswith("move_")}, n)
        if not singles_only:
            obs_spaces["move_members"] = spaces.Box(-1, n - 1, obs_arrays["move_members"].shape, np.int64)
            obs_spaces["move_kind"] = spaces.Box(0.0, 1.0, obs_arrays["move_kind"].shape, np.float32)
        obs_spaces["placement"] = spaces.Box(0.0, 1.0, (n, d), np.float32)
        obs_spaces["episode"] = spaces.Box(-_EPISODE_BOUND, _EPISODE_BOUND, (3,), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Discrete(m * d)
        self._init_kwargs = dict(
            start=start, moves=kinds, max_steps=max_steps, infeasible_reward=infeasible_reward,
            max_nodes=max_nodes, max_edges=max_edges, max_moves=max_moves, max_move_size=max_move_size,
            render_mode=render_mode,
        )  # fmt: skip
        self._heft: np.ndarray | None = None
        self._constants: tuple[float | None, tuple[float, float] | None] | None = None
        self.placement = np.full(g, -1, dtype=np.int64)
        self._done = True  # step() needs a reset() first
        self._steps = 0
        self._latency = self._start_latency = self._best_latency = math.inf
        self._best_placement = self.placement.copy()

    # ------------------------------------------------------------------ starting placements
    def heft_placement(self) -> np.ndarray:
        """HEFT's placement of the problem (computed once), shape ``(G,)``."""
        if self._heft is None:
            self._heft, _ = heft_placement(self.problem.cost_model(), self._allowed)
            self._heft.flags.writeable = False
        return self._heft.copy()

    def _start_placement(self, options: dict[str, Any]) -> tuple[np.ndarray, Any]:
        """The episode's first placement and its evaluation."""
        unknown = sorted(set(options) - {"placement", "start"})
        if unknown:
            raise ConfigError(f"unknown reset option(s) {unknown}; known: placement, start")
        if "placement" in options and "start" in options:
            raise ConfigError("pass either options['placement'] or options['start'], not both")
        problem = self.problem
        if "placement" in options:
            placement = problem.validate(options["placement"]).copy()
            evaluation = problem.evaluate(placement)
            if not evaluation.feasible:
                raise PlacementError(
                    f"the start placement is infeasible ({evaluation.result.reason}); pass a feasible placement"
                )
            return placement, evaluation
        start = options.get("start", self.start)
        if start not in STARTS:
            raise UnknownNameError("start", str(start), STARTS)
        if start == "random":
            for _ in range(RANDOM_START_TRIES):
                # each group on a uniformly drawn allowed device
                u = self.np_random.random(self.num_groups)
                counts = self._allowed.sum(axis=1)
                pick = np.minimum((u * counts).astype(np.int64), counts - 1)
                placement = np.argmax(np.cumsum(self._allowed, axis=1) > pick[:, None], axis=1).astype(
                    np.int64
                )
                evaluation = problem.evaluate(placement)
                if evaluation.feasible:
                    return placement, evaluation
            raise PlacementGymError(
                f"{RANDOM_START_TRIES} random placements in a row were infeasible on platform "
                f"{problem.platform.name!r} ({evaluation.result.reason}); start from 'heft' or 'best_single'"
            )
        placement = self.heft_placement() if start == "heft" else problem.baseline_placement.copy()
        evaluation = problem.evaluate(placement)
        if not evaluation.feasible:
            raise PlacementError(
                f"the {start!r} start placement is infeasible on platform {problem.platform.name!r} "
                f"({evaluation.result.reason}); pass another start or reset(options={{'placement': ...}})"
            )
        return placement, evaluation

    # ------------------------------------------------------------------ masks and observations
    def action_masks(self) -> np.ndarray:
        """Allowed actions for sb3-contrib MaskablePPO: flat bool of length ``M * D`` (see Action Space)."""
        d, rows = self.num_devices, len(self._members)
        mask = np.zeros((self.num_moves, d), dtype=bool)  # (M, D)
        keys = self._pair_set * d + self.placement[self._pair_group]
        on_device = np.bincount(keys, minlength=rows * d).reshape(rows, d)  # (M', D) members already there
        mask[:rows] = self._set_allowed & (on_device < self._set_sizes[:, None])
        return mask.reshape(-1)

    def _observation(self) -> dict[str, np.ndarray]:
        bound = float(_EPISODE_BOUND)
        values = (
            math.log(self._start_latency / self._latency),
            math.log(self._start_latency / self._best_latency),
            self._steps / self.max_steps,
        )
        obs = {key: arr.copy() for key, arr in self._static.items()}  # callers own what they receive
        obs["placement"] = one_hot(self.placement, self.max_nodes, self.num_devices)  # (N, D)
        obs["episode"] = np.array([min(max(v, -bound), bound) for v in values], dtype=np.float32)  # (3,)
        return obs

    def _latency_constants(self) -> tuple[float | None, tuple[float, float] | None]:
        """The baseline latency (``None`` without one) and the stored reference's baseline and optimum
        latencies for the score (``None`` without a stored optimum or headroom), looked up once."""
        if self._constants is None:
            problem = self.problem
            base = problem.baseline.latency if problem.has_baseline else None
            ref = problem._stored_reference()  # the score is left out of info in a sealed run
            headroom = ref is not None and ref.latency < ref.baseline_latency
            self._constants = (base, (ref.baseline_latency, ref.latency) if headroom else None)
        return self._constants

    def _info(self, latency: float, feasible: bool, reason: str, moved: int) -> dict[str, Any]:
        info: dict[str, Any] = dict(
            latency=latency,
            feasible=feasible,
            reason=reason,
            current_latency=self._latency,
            placement=self.placement.copy(),
            start_latency=self._start_latency,
            best_latency=self._best_latency,
            best_placement=self._best_placement.copy(),
            steps=self._steps,
            moved=moved,
        )
        base, score = self._latency_constants()
        if base is not None:
            info["baseline_latency"] = base
        if score is not None and self.problem.sealed is None:  # a stored optimum; never in a protocol run
            ref_base, optimum = score
            info["score"] = (ref_base / self._latency - 1.0) / (ref_base / optimum - 1.0)
            info["best_score"] = (ref_base / self._best_latency - 1.0) / (ref_base / optimum - 1.0)
        return info

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        placement, evaluation = self._start_placement(options or {})
        self.placement = placement
        self._latency = self._start_latency = self._best_latency = float(evaluation.latency)
        self._best_placement = placement.copy()
        self._steps = 0
        self._done = False
        return self._observation(), self._info(self._latency, True, "", 0)

    def step(self, action: Any):
        if self._done:
            raise PlacementError("the episode is over (or was never started): call reset() before step()")
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            a = int(action)  # the common case, checked without building an array
        else:
            arr = np.asarray(action)
            if arr.size != 1 or arr.ndim > 1 or not np.issubdtype(arr.dtype, np.integer):
                raise PlacementError(
                    f"an improvement step takes one integer action in [0, {self.action_space.n}), got {action!r}"
                )
            a = int(arr.reshape(-1)[0])
        if not 0 <= a < self.action_space.n:
            raise PlacementError(f"action {a} is out of range [0, {self.action_space.n})")
        s, device = divmod(a, self.num_devices)
        members = self._members[s] if s < len(self._members) else _NO_GROUPS  # padding: no move
        new = self.placement.copy()
        new[members] = device
        evaluation = self.problem.evaluate_valid(new)  # a valid placement with one move in range
        if evaluation.feasible:
            latency = float(evaluation.latency)
            reward = math.log(self._latency / latency)
            self.placement, self._latency = new, latency
            if latency < self._best_latency:
                self._best_latency, self._best_placement = latency, new.copy()
        else:
            reward = self.infeasible_reward
        self._steps += 1
        truncated = self._steps >= self.max_steps
        self._done = truncated
        info = self._info(
            float(evaluation.latency), evaluation.feasible, evaluation.result.reason, len(members)
        )
        return self._observation(), float(reward), False, truncated, info

    def render(self):
        return render_placement(self.render_mode, self.problem, self.placement, self._latency)

    def close(self) -> None:
        self.problem.close()

    # ------------------------------------------------------------------ pickling (SubprocVecEnv, copies)
    def __getstate__(self) -> dict[str, Any]:
        return {
            "problem": self.problem,  # raises a clear TypeError if the problem cannot be rebuilt elsewhere
            "kwargs": self._init_kwargs,
            "np_random": self._np_random,
            "episode": (
                self.placement, self._done, self._steps, self._latency, self._start_latency,
                self._best_latency, self._best_placement,
            ),
        }  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(problem=state["problem"], **state["kwargs"])
        self._np_random = state["np_random"]
        (
            self.placement, self._done, self._steps, self._latency, self._start_latency,
            self._best_latency, self._best_placement,
        ) = state["episode"]  # fmt: skip
