"""The device-placement environment: place the groups of a coarsened model graph on a platform's devices."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from placement_gym.backends import LatencyBackend, LatencyResult
from placement_gym.benchmarks import Benchmark
from placement_gym.envs.observation import check_padding, one_hot, static_arrays, static_spaces
from placement_gym.envs.render import render_placement
from placement_gym.errors import PlacementError, UnknownNameError
from placement_gym.platforms import Platform
from placement_gym.problem import Evaluation, PlacementProblem
from placement_gym.validation import as_index_array

MODES = ("oneshot", "sequential")
OBSERVATIONS = ("graph", "device")
INITIAL_PLACEMENTS = ("host", "random", "best_single")


class DevicePlacementEnv(gym.Env):
    """Place each group of a coarsened computation graph on a device; the reward comes from the latency.

    ## Description

    A thin Gymnasium adapter over one :class:`~placement_gym.problem.PlacementProblem`: a model (a zoo
    name such as ``"bert"``, an OpenVINO IR or ONNX path, or a :class:`~placement_gym.benchmarks.Benchmark`)
    turned into an op graph and coarsened into ``G`` groups (``coarsening="fused"``: the OpenVINO CPU
    runtime's fused layers), a platform of ``D`` devices, and a latency backend (``"measured"`` runs the
    partitioned model with OpenVINO, ``"simulated"`` predicts it with a calibrated event-driven simulator).
    The problem validates, evaluates and counts placements; the env adds spaces, observations and episodes.

    In ``mode="oneshot"`` (default) one action places every group and the episode ends. In
    ``mode="sequential"`` (Placeto-style) each step places the next group in topological order and the
    episode ends once all ``G`` groups are placed. Improving a complete placement one move at a time is
    :class:`~placement_gym.envs.DevicePlacementImproveEnv` (``DevicePlacementImprove-*`` IDs).

    Registered IDs (``import placement_gym``; ``placement_gym.ENV_IDS`` lists the one-shot ones,
    ``placement_gym.SEQUENTIAL_IDS`` the sequential ones, ``placement_gym.env_id(model, platform, mdp=,
    backend=)`` returns one), ``DevicePlacement<MDP>-<model>-<platform>-<backend>-v<N>`` with ``<MDP>``
    nothing (one-shot) or ``Sequential`` (``mode="sequential"``):

    * ``DevicePlacement{,Sequential}-<model>-<platform>-sim-v0``: the task suite, simulated, for
      ``<model>`` in ``inception_v3``, ``resnet50``, ``bert`` and ``<platform>`` in ``cpu_dgpu`` (GPU
      calibrated against HSDAG's published speedups), ``cpu_igpu``, ``multi_accel`` and ``model_parallel``
      (every device's memory a fraction of the model's weights, so no single device holds it; the baseline
      is the best of Baechi's memory-aware list schedulers); ``resnet50`` on ``cpu_igpu_lowmem`` (the
      mask-binding task); the held-out families on ``cpu_igpu`` and ``multi_accel`` (zero-shot transfer
      tests, not for training). Reference optima in ``placement_gym/tasks/optima.json``;
    * ``DevicePlacement-<model>-cpu_dgpu_v0-sim-v0``: simulated ``cpu-dgpu-v0`` (the first, datasheet
      calibration of ``cpu-dgpu``);
    * ``DevicePlacement-<model>-local-measured-v1``: measured on the ``local`` platform
      (``nondeterministic=True``; the adaptive repeats of the measured backend); ``-v0``: the same with the
      first protocol, a fixed 5 runs per placement;
    * the first scheme's IDs, aliases with the same spec: ``DevicePlacementSim-<model>-v1`` (of
      ``...-cpu_dgpu-sim-v0``), ``DevicePlacementSim-<model>-v0`` (of ``...-cpu_dgpu_v0-sim-v0``),
      ``DevicePlacement-<model>-v<N>`` (of ``...-local-measured-v<N>``);
    * ``DevicePlacement-v0``, ``DevicePlacementSequential-v0``: any arguments below (``nondeterministic=True``).

    ## Action Space

    * ``oneshot``: ``MultiDiscrete([D] * N)``; entry ``g`` is the device of group ``g``. ``N`` is ``G``
      unless ``max_nodes`` pads the graph; entries past ``G`` must still be valid device indices and are
      ignored.
    * ``sequential``: ``Discrete(D)``, the device of the group named by ``current_node``.

    Actions of the wrong shape, a non-integer dtype or out of range raise
    :class:`~placement_gym.errors.PlacementError` naming the problem; nothing is clipped.

    ## Observation Space

    A ``Dict`` of ``Box`` es with fixed shapes (``N = max_nodes or G``, ``E = max_edges or edges``),
    padded with zeros (inside the bounds) and described by masks:

    | key | shape | dtype | bounds | meaning |
    |---|---|---|---|---|
    | ``node_features`` | ``(N, 28)`` | float32 | ``[0, 3e38]`` (values in ``[0, ~1]``) | per-group features, ``features.NODE_FEATURES``: 9 scaled logs (FLOPs, output / weight / graph-input / graph-output bytes, member ops, topological position, in / out degree) and 19 op-type fractions |
    | ``node_mask`` | ``(N,)`` | float32 | ``[0, 1]`` | 1 for real groups, 0 for padding |
    | ``edge_index`` | ``(2, E)`` | int64 | ``[0, N - 1]`` | source and target group of each edge (padding: ``0 -> 0``) |
    | ``edge_features`` | ``(E, 1)`` | float32 | ``[0, 3e38]`` (values in ``[0, ~1]``) | scaled log bytes carried by the edge |
    | ``edge_mask`` | ``(E,)`` | float32 | ``[0, 1]`` | 1 for real edges |
    | ``placement`` | ``(N, D)`` | float32 | ``[0, 1]`` | one-hot device of each group in the current placement (all zero if unplaced) |
    | ``current_node`` | ``(N,)`` | float32 | ``[0, 1]`` | one-hot of the group to place next (sequential mode; zeros in one-shot) |

    With ``observation="device"`` three device-aware keys are added (the keys above are unchanged), from the
    problem's cost model (for measured envs: the profiled model of the same platform), with the same
    definitions on every graph and platform (:func:`placement_gym.features.device_features`):

    | key | shape | dtype | bounds | meaning |
    |---|---|---|---|---|
    | ``node_device_features`` | ``(N, D, 3)`` | float32 | ``[0, 1]`` | per group and device: scaled log compute time, fastest time / this device's, fits in memory |
    | ``edge_link_features`` | ``(E, D * D)`` | float32 | ``[0, 1]`` | per edge and link ``i -> j`` (entry ``i * D + j``): scaled log transfer time |
    | ``device_features`` | ``(D, 5)`` | float32 | ``[0, 1]`` | per device: relative whole-graph speed, scaled log memory, scaled log invoke overhead, is host, scaled log outgoing bandwidth |

    ## Rewards

    ``baseline`` is the latency of the best single-device placement (all groups on one device), found once
    per problem with ``D`` evaluations that are counted apart (``problem.baseline_evaluations``); where no
    single device can hold the model, the feasible split stored with the task (``problem.baseline``).

    | ``reward`` | value | infeasible placement (default ``infeasible_reward``) |
    |---|---|---|
    | ``"speedup"`` (default) | ``baseline / latency - 1`` (0: as fast as the best single device) | -1 (an infinitely slow placement) |
    | ``"log_speedup"`` | ``log(baseline / latency)`` | -5 |
    | ``"neg_latency_ms"`` | ``-latency`` in ms (needs no baseline: use it where no single device holds the model) | -10,000 |

    Infeasible placements (out of memory, compile or run failure) get the infeasible value, never an
    exception. In sequential mode the reward is 0 until the last step (``sequential_reward="final"``) or,
    with ``"incremental"``, the change of the reward of the current placement (unplaced groups on the host),
    which sums to the final reward minus the initial one.

    ``info`` is empty after ``reset()`` and after the non-final steps of sequential mode with
    ``sequential_reward="final"``. After an evaluated step (the one-shot step, the last sequential step, or
    every step with ``"incremental"``) it holds ``latency`` and ``baseline_latency`` (seconds), ``speedup``
    (``baseline / latency``, 0 if infeasible; these two only if the problem has a baseline), ``score`` (only for tasks with a stored reference optimum, i.e. simulated zoo tasks, and never
    while an agent runs under the benchmark protocol: the normalised score
    ``(baseline / latency - 1) / (baseline / optimum - 1)``, 0 = best single device, 1 = optimum), ``feasible``, ``reason`` ("" when feasible), ``spread`` and ``samples`` (measured: IQR in
    seconds and timed runs; 0 for the simulator), ``latency_ci_ms`` and ``latency_rel_ci`` (half-width of the
    95% confidence interval of ``latency``, in ms and relative to it; 0 for the simulator and for
    infeasible placements), ``placement`` (the ``(G,)`` placement evaluated, unplaced groups on the host)
    and, for nondeterministic (measured) backends only, ``cached`` (answered from the result cache),
    ``host_load`` (the 1-minute load average when it was measured, ``None`` if unknown) and
    ``evaluation_s`` (the wall seconds the step spent evaluating its placement in the backend: compiling or
    preparing the segments, warm-up and timed runs; near zero when the result cache answered, 0.0 for a
    placement the run evaluated before; what the step cost, not part of any result), so that a simulated
    env's info is a function of seed and actions alone (its evaluation time is
    ``problem.last_evaluation_s``).

    ## Starting State

    ``placement`` starts as all groups on the host device (``initial_placement="host"``), the best single
    device (``"best_single"``), or uniformly random devices (``"random"``, drawn from ``self.np_random``).
    In sequential mode nothing is placed at the start.

    ## Episode End

    One-shot: terminated after the one step. Sequential: terminated after ``G`` steps. Never truncated
    (add ``gymnasium.wrappers.TimeLimit`` for multi-step variants). ``step()`` before ``reset()`` or after
    the episode ended raises :class:`~placement_gym.errors.PlacementError`, in both modes.

    ## Arguments

    ```python
    import gymnasium as gym
    import placement_gym  # registers the IDs

    env = gym.make("DevicePlacement-bert-cpu_dgpu-sim-v0")  # simulated cpu-dgpu platform, fused groups
    env = gym.make("DevicePlacement-v0", model="tiny_cnn", platform="local", backend="measured",
                   coarsening="fused", k=None, mode="oneshot", reward="speedup")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    problem = placement_gym.problem_of(env)  # the PlacementProblem behind the env
    ```

    ``model``, ``platform`` (name or :class:`Platform`), ``backend`` (``"simulated"``/``"measured"``/
    ``"ray"`` or a ready :class:`LatencyBackend`), ``backend_kwargs``, ``coarsening`` (``"ops"``,
    ``"fused"``, ``"k"``), ``k`` (at most ``k`` groups), ``reward``, ``infeasible_reward`` (these build the
    problem; or pass a ready ``problem=``), ``mode``, ``sequential_reward``, ``initial_placement``,
    ``max_nodes``/``max_edges`` (pad to share spaces across graphs), ``observation`` (``"graph"``: the
    seven keys above; ``"device"``: plus the device-aware keys), ``render_mode`` (``"ansi"``: a table;
    ``"rgb_array"``: the graph coloured by device).

    ## Public accessors

    ``problem`` (the :class:`~placement_gym.problem.PlacementProblem`: ``evaluate``, ``evaluate_batch``,
    ``baseline``, ``cost_model()``, ``device_mask``, ``stats()``...; ``step()`` validates its action once
    and hands it to ``evaluate_valid``; also ``placement_gym.problem_of(env)`` through wrappers), ``action_masks()`` (sb3-contrib MaskablePPO), ``placement`` (the current ``(G,)``
    placement, -1 = unplaced), ``mode``, ``num_groups``, ``num_devices``, ``max_nodes``, ``max_edges``.
    The env pickles (``SubprocVecEnv``, ``copy.deepcopy``) when its problem was built from names.

    ## Version History

    * v0: initial version. Later additions that leave the default spaces and rewards unchanged:
      ``observation="device"`` (device-aware keys, opt-in); ``step()`` after the end of a one-shot episode
      raises instead of evaluating again. One fix changes a space: the ``fused`` level now follows one
      rule for the ops the runtime renames (:func:`placement_gym.fusion.resolve_owners`), so every group
      is one runtime layer; ``bert``'s fused graph has 206 groups instead of 267 (``inception_v3`` and
      ``resnet50`` are unchanged). Results recorded with 267 BERT groups were made with the old rule.
      ``DevicePlacementSim-<model>-v0`` now names its platform ``cpu-dgpu-v0`` (the same figures).
      Measured envs: info gained ``latency_ci_ms``, ``latency_rel_ci``, ``host_load`` and ``evaluation_s``.
      ``DevicePlacement-<model>-v0`` (now ``DevicePlacement-<model>-local-measured-v0``) keeps the first
      measurement protocol (a fixed 5 runs per placement, ``placement_gym.MEASURED_V0_PROTOCOL``);
      ``DevicePlacement-v0`` takes the backend's current defaults.
    * v1 (``DevicePlacement-<model>-local-measured-v1``, first ``DevicePlacement-<model>-v1``): each latency
      is the median of runs repeated until its 95% interval is within +-2% (6 to 30 runs, a 10 s budget),
      not of a fixed 5; spaces and reward definitions unchanged.
    * v1 of ``DevicePlacementSim-<model>`` (now ``DevicePlacement-<model>-cpu_dgpu-sim-v0``; its v0 is
      ``DevicePlacement-<model>-cpu_dgpu_v0-sim-v0``): platform ``cpu-dgpu`` recalibrated against HSDAG's
      published speedups (GPU batch-1 efficiencies x0.25, convolutions x0.22; GPU-only 1.30-1.49x faster
      than CPU-only instead of 4.3-4.6x); spaces and reward definitions unchanged, latencies and rewards
      differ.
    * ``DevicePlacement-<model>-<cpu_igpu|multi_accel|model_parallel>-sim-v0``: initial version.
    * One ID scheme: ``DevicePlacement-<model>-<cpu_dgpu|cpu_dgpu_v0>-sim-v0``,
      ``DevicePlacement-<model>-local-measured-v<N>`` and the ``DevicePlacementSequential-*`` IDs registered,
      each the env of an old ID or of ``mode="sequential"`` unchanged; the old IDs stay registered as aliases.
    * Unregistered ``platform="local", backend="simulated"``: simulates the partitioned executor's segments
      (:mod:`placement_gym.simulation.segment_schedule`) with the executor's boundary figures, no longer
      the list schedule of groups; ``backend_kwargs={"schedule": "groups"}`` gives the old one.
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
        mode: str = "oneshot",
        reward: str = "speedup",
        infeasible_reward: float | None = None,
        sequential_reward: str = "final",
        initial_placement: str = "host",
        max_nodes: int | None = None,
        max_edges: int | None = None,
        backend_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
        problem: PlacementProblem | None = None,
        observation: str = "graph",
    ) -> None:
        for name, value, valid in (
            ("mode", mode, MODES),
            ("initial placement", initial_placement, INITIAL_PLACEMENTS),
            ("sequential reward", sequential_reward, ("final", "incremental")),
            ("render mode", render_mode, (None, *self.metadata["render_modes"])),
            ("observation", observation, OBSERVATIONS),
        ):
            if not isinstance(value, (str, type(None))) or value not in valid:  # (an array has no "in")
                raise UnknownNameError(name, str(value), [str(v) for v in valid])
        if problem is None and isinstance(backend, LatencyBackend):
            problem = PlacementProblem(
                backend.benchmark, backend.graph, backend.platform, backend, reward, infeasible_reward
            )
        elif problem is None:
            problem = PlacementProblem.make(
                model,
                platform,
                backend,
                coarsening=coarsening,
                k=k,
                reward=reward,
                infeasible_reward=infeasible_reward,
                backend_kwargs=backend_kwargs,
            )
        #: The placement problem this env adapts (the one documented accessor; see :func:`problem_of`).
        self.problem: PlacementProblem = problem
        self.mode, self.sequential_reward, self.initial_placement = mode, sequential_reward, initial_placement
        self.render_mode = render_mode
        self.num_groups = g = problem.num_groups
        self.num_devices = d = problem.num_devices
        n, e = check_padding(problem, max_nodes, max_edges, device=observation == "device")
        self.max_nodes, self.max_edges = n, e
        self.observation = observation
        static = static_arrays(problem, n, e, device=observation == "device")
        obs_spaces = static_spaces(static, n)
        obs_spaces["placement"] = spaces.Box(0.0, 1.0, (n, d), np.float32)
        obs_spaces["current_node"] = spaces.Box(0.0, 1.0, (n,), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)
        self._static_items = tuple(static.items())  # copied into every observation
        self._host_placement = np.full(g, problem.host, dtype=np.int64)
        self._host_one_hot = one_hot(self._host_placement, n, d)  # the reset observation's, copied
        self._host_one_hot.flags.writeable = False
        self._info_constants: tuple[float | None, tuple[float, float] | None] | None = None
        self.action_space = spaces.MultiDiscrete([d] * n) if mode == "oneshot" else spaces.Discrete(d)
        self._init_kwargs = dict(
            observation=observation,
            mode=mode,
            sequential_reward=sequential_reward,
            initial_placement=initial_placement,
            max_nodes=max_nodes,
            max_edges=max_edges,
            render_mode=render_mode,
        )
        self.placement = np.full(g, -1, dtype=np.int64)
        self._cursor = 0
        self._done = True  # step() needs a reset() first, and again after the episode ends
        self._last: LatencyResult | None = None
        self._last_reward_value = 0.0

    # ------------------------------------------------------------------ masks and observations
    def action_masks(self) -> np.ndarray:
        """Valid actions for sb3-contrib MaskablePPO: flat bool of length ``sum(nvec)``.

        One-shot: ``N * D`` entries, group-major (padding groups allow every device). Sequential: ``D``
        entries for the current group. A device is masked when the group's weights and outputs do not fit
        in its memory (:attr:`PlacementProblem.device_mask`).
        """
        mask = self.problem.device_mask
        if self.mode == "sequential":
            return mask[min(self._cursor, self.num_groups - 1)].copy()
        full = np.ones((self.max_nodes, self.num_devices), dtype=bool)
        full[: self.num_groups] = mask
        return full.reshape(-1)

    def _observation(self, placement_one_hot: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The observation of the current state; ``placement_one_hot``: the ``(N, D)`` one-hot of
        :attr:`placement` when it is known already (copied)."""
        obs = {key: arr.copy() for key, arr in self._static_items}  # callers own what they receive
        obs["placement"] = (  # (N, D)
            one_hot(self.placement, self.max_nodes, self.num_devices)
            if placement_one_hot is None
            else placement_one_hot.copy()
        )
        current = np.zeros(self.max_nodes, dtype=np.float32)  # (N,)
        if self.mode == "sequential" and self._cursor < self.num_groups:
            current[self._cursor] = 1.0
        obs["current_node"] = current
        return obs

    def _latency_constants(self) -> tuple[float | None, tuple[float, float] | None]:
        """The baseline latency (``None`` without a baseline) and the stored reference's baseline and
        optimum latencies for the score (``None`` without a stored optimum or headroom, as
        :meth:`PlacementProblem.score`), looked up once (the baseline's ``D`` evaluations happen once per
        problem either way)."""
        if self._info_constants is None:
            problem = self.problem
            base = problem.baseline.latency if problem.has_baseline else None
            ref = problem._stored_reference()  # the score is left out of info in a sealed run
            score = (
                (ref.baseline_latency, ref.latency)
                if ref is not None and ref.latency < ref.baseline_latency
                else None
            )
            self._info_constants = (base, score)
        return self._info_constants

    def _info(self, evaluation: Evaluation | None) -> dict[str, Any]:
        if evaluation is None:
            return {}
        res = evaluation.result
        feasible, latency = res.feasible, res.latency
        base, score = self._latency_constants()
        info: dict[str, Any] = {"latency": latency}
        if base is not None:  # absent rather than nan (nan would break equality checks)
            info["baseline_latency"] = base
            info["speedup"] = base / latency if feasible else 0.0
        info["feasible"] = feasible
        info["reason"] = res.reason
        info["spread"] = res.spread
        info["samples"] = res.samples
        info["latency_ci_ms"] = 1e3 * res.ci if feasible else 0.0
        info["latency_rel_ci"] = res.ci / latency if feasible and latency > 0 else 0.0
        info["placement"] = self.placement.copy()
        if score is not None and self.problem.sealed is None:  # a stored optimum; never in a protocol run
            ref_base, optimum = score
            info["score"] = (ref_base / latency - 1.0) / (ref_base / optimum - 1.0)
        if not self.problem.deterministic:
            # A deterministic backend's info must depend on (seed, actions) only (Gymnasium's determinism
            # check); whether its answer came from a cache does not change it. See problem.stats().
            info["cached"] = res.cached
            info["host_load"] = res.host_load
            info["evaluation_s"] = self.problem.last_evaluation_s  # set by the evaluation just made
        return info

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._cursor = 0
        self._done = False
        self._last = None
        g = self.num_groups
        if self.mode == "sequential":
            self.placement = np.full(g, -1, dtype=np.int64)
        elif self.initial_placement == "random":
            self.placement = self.np_random.integers(0, self.num_devices, g).astype(np.int64)
        elif self.initial_placement == "best_single":
            self.placement = self.problem.baseline_placement.copy()
        else:
            self.placement = self._host_placement.copy()
        if self.mode == "sequential" and self.sequential_reward == "incremental":
            self._last_reward_value = self.problem.evaluate(self._partial_placement()).reward
        host = self.mode == "oneshot" and self.initial_placement == "host"
        return self._observation(self._host_one_hot if host else None), self._info(None)

    def _partial_placement(self) -> np.ndarray:
        p = self.placement.copy()
        p[p < 0] = self.problem.host
        return p

    def step(self, action: Any):
        if self._done:
            raise PlacementError("the episode is over (or was never started): call reset() before step()")
        if self.mode == "oneshot":
            act = self.problem.validate(action, length=self.max_nodes)
            self.placement = act[: self.num_groups].copy()
            evaluation = self.problem.evaluate_valid(self.placement)  # (validated above)
            self._last, self._done = evaluation.result, True
            return self._observation(), evaluation.reward, True, False, self._info(evaluation)
        arr = as_index_array(action, what="action")
        if arr.size != 1 or arr.ndim > 1:
            raise PlacementError(f"sequential mode takes one device index per step, got shape {arr.shape}")
        self.placement[self._cursor] = int(self.problem.validate(arr.reshape(1), length=1)[0])
        self._cursor += 1
        self._done = self._cursor == self.num_groups
        reward, evaluation = 0.0, None
        if self._done or self.sequential_reward == "incremental":
            evaluation = self.problem.evaluate(self._partial_placement())
            self._last = evaluation.result
            if self.sequential_reward == "incremental":
                reward, self._last_reward_value = (
                    evaluation.reward - self._last_reward_value,
                    evaluation.reward,
                )
            else:
                reward = evaluation.reward
        return self._observation(), float(reward), self._done, False, self._info(evaluation)

    def render(self):
        latency = self._last.latency if self._last is not None else None
        return render_placement(self.render_mode, self.problem, self.placement, latency)

    def close(self) -> None:
        self.problem.close()

    # ------------------------------------------------------------------ pickling (SubprocVecEnv, copies)
    def __getstate__(self) -> dict[str, Any]:
        return {
            "problem": self.problem,  # raises a clear TypeError if the problem cannot be rebuilt elsewhere
            "kwargs": self._init_kwargs,
            "np_random": self._np_random,
            "placement": self.placement,
            "cursor": self._cursor,
            "done": self._done,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(problem=state["problem"], **state["kwargs"])
        self._np_random = state["np_random"]
        self.placement, self._cursor, self._done = state["placement"], state["cursor"], state["done"]
