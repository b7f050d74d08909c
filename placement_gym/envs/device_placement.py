"""The device-placement environment: place the groups of a coarsened model graph on a platform's devices."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from placement_gym.backends import LatencyBackend, LatencyResult, make_backend
from placement_gym.benchmarks import Benchmark, load_benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym.envs.features import NUM_NODE_FEATURES, static_features
from placement_gym.envs.render import figure_to_rgb, placement_figure, placement_table
from placement_gym.envs.rewards import get_reward
from placement_gym.errors import PlacementError, UnknownNameError
from placement_gym.platforms import Platform, load_platform

MODES = ("oneshot", "sequential")
INITIAL_PLACEMENTS = ("host", "random", "best_single")
_BIG = np.float32(3.0e38)  # finite Box bound


class DevicePlacementEnv(gym.Env):
    """Place each group of a coarsened computation graph on a device; the reward comes from the latency.

    ## Description

    A model (a zoo name such as ``"bert"``, an OpenVINO IR or ONNX path, or a
    :class:`~placement_gym.benchmarks.Benchmark`) is turned into an op graph and coarsened into ``G``
    groups (``coarsening="fused"``: the OpenVINO CPU runtime's fused layers). A platform offers ``D``
    devices. The latency of a placement comes from a backend: ``"measured"`` runs the partitioned model
    with OpenVINO, ``"simulated"`` predicts it with a calibrated event-driven simulator.

    In ``mode="oneshot"`` (default) one action places every group and the episode ends. In
    ``mode="sequential"`` (Placeto-style) each step places the next group in topological order and the
    episode ends once all ``G`` groups are placed.

    ## Action Space

    * ``oneshot``: ``MultiDiscrete([D] * N)``; entry ``g`` is the device of group ``g``. ``N`` is ``G``
      unless ``max_nodes`` pads the graph; entries past ``G`` must still be valid device indices and are
      ignored.
    * ``sequential``: ``Discrete(D)``, the device of the group named by ``current_node``.

    Actions of the wrong shape, a non-integer dtype or out of range raise
    :class:`~placement_gym.errors.PlacementError`; nothing is clipped.

    ## Observation Space

    A ``Dict`` of ``Box`` es with fixed shapes (``N = max_nodes or G``, ``E = max_edges or edges``),
    padded with zeros (inside the bounds) and described by masks:

    | key | shape | dtype | meaning |
    |---|---|---|---|
    | ``node_features`` | ``(N, F)`` | float32 | per-group features, see ``features.NODE_FEATURES`` (log FLOPs, bytes, weights, degree, topological position, op-type mix) |
    | ``node_mask`` | ``(N,)`` | float32 | 1 for real groups, 0 for padding |
    | ``edge_index`` | ``(2, E)`` | int64 | source and target group of each edge (padding: ``0 -> 0``) |
    | ``edge_features`` | ``(E, 1)`` | float32 | log bytes carried by the edge |
    | ``edge_mask`` | ``(E,)`` | float32 | 1 for real edges |
    | ``placement`` | ``(N, D)`` | float32 | one-hot device of each group in the current placement (all zero if unplaced) |
    | ``current_node`` | ``(N,)`` | float32 | one-hot of the group to place next (sequential mode; zeros in one-shot) |

    ## Rewards

    ``reward="speedup"`` (default): ``baseline / latency - 1``, where ``baseline`` is the latency of the
    best single-device placement (all groups on one device), so 0 means "as good as the best single
    device" and positive is better. ``"log_speedup"``: ``log(baseline / latency)``. ``"neg_latency_ms"``:
    minus the latency in ms. An infeasible placement (does not fit in memory, fails to compile or run)
    gets ``infeasible_reward`` (default: -1 for speedup, the limit of an infinitely slow placement).
    In sequential mode the reward is 0 until the last step (``sequential_reward="final"``) or, with
    ``"incremental"``, the change of the reward of the current placement (unplaced groups on the host),
    which sums to the final reward minus the initial one.

    ``info`` holds ``latency`` and ``baseline_latency`` (seconds), ``speedup``, ``feasible``, ``reason``,
    ``spread`` and ``samples`` (measured backend), ``placement`` (the ``(G,)`` placement evaluated) and,
    for nondeterministic (measured) backends, ``cached`` (the backend answered from its cache). The
    simulator's info leaves ``cached`` out so that it is a function of seed and actions alone
    (Gymnasium's determinism check); :meth:`stats` gives evaluation and cache-hit counts and the best
    placement seen, for every backend.

    ## Starting State

    ``placement`` starts as all groups on the host device (``initial_placement="host"``), the best single
    device (``"best_single"``), or uniformly random devices (``"random"``, drawn from ``self.np_random``).
    In sequential mode nothing is placed at the start.

    ## Episode End

    One-shot: terminated after the one step. Sequential: terminated after ``G`` steps. Never truncated
    (add ``gymnasium.wrappers.TimeLimit`` for multi-step variants).

    ## Arguments

    ```python
    import gymnasium as gym
    import placement_gym  # registers the IDs

    env = gym.make("DevicePlacementSim-bert-v0")  # simulated cpu-dgpu platform, fused groups
    env = gym.make("DevicePlacement-v0", model="tiny_cnn", platform="local", backend="measured",
                   coarsening="fused", k=None, mode="oneshot", reward="speedup")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    ```

    ``model``, ``platform`` (name or :class:`Platform`), ``backend`` (``"simulated"``/``"measured"`` or a
    ready :class:`LatencyBackend`), ``backend_kwargs``, ``coarsening`` (``"ops"``, ``"fused"``, ``"k"``),
    ``k`` (at most ``k`` groups), ``mode``, ``reward``, ``infeasible_reward``, ``sequential_reward``,
    ``initial_placement``, ``max_nodes``/``max_edges`` (pad to share spaces across graphs),
    ``render_mode`` (``"ansi"``: a table; ``"rgb_array"``: the graph coloured by device).

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
        mode: str = "oneshot",
        reward: str = "speedup",
        infeasible_reward: float | None = None,
        sequential_reward: str = "final",
        initial_placement: str = "host",
        max_nodes: int | None = None,
        max_edges: int | None = None,
        backend_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        self._init_kwargs = dict(
            model=model,
            platform=platform,
            backend=backend,
            coarsening=coarsening,
            k=k,
            mode=mode,
            reward=reward,
            infeasible_reward=infeasible_reward,
            sequential_reward=sequential_reward,
            initial_placement=initial_placement,
            max_nodes=max_nodes,
            max_edges=max_edges,
            backend_kwargs=backend_kwargs,
            render_mode=render_mode,
        )
        for name, value, valid in (
            ("mode", mode, MODES),
            ("initial placement", initial_placement, INITIAL_PLACEMENTS),
            ("sequential reward", sequential_reward, ("final", "incremental")),
            ("render mode", render_mode, (None, *self.metadata["render_modes"])),
        ):
            if value not in valid:
                raise UnknownNameError(name, str(value), [str(v) for v in valid])
        self.reward_fn = get_reward(reward, infeasible_reward)
        if isinstance(backend, LatencyBackend):
            self.backend = backend
            self.benchmark, self.coarse, self.platform = backend.benchmark, backend.graph, backend.platform
        else:
            self.benchmark = model if isinstance(model, Benchmark) else load_benchmark(model)
            self.platform = platform if isinstance(platform, Platform) else load_platform(platform)
            self.coarse: CoarseGraph = self.benchmark.coarsen(coarsening, k=k)
            self.backend = make_backend(
                backend, self.benchmark, self.coarse, self.platform, **(backend_kwargs or {})
            )
        self.mode, self.sequential_reward, self.initial_placement = mode, sequential_reward, initial_placement
        self.render_mode = render_mode
        self.num_groups = g = self.coarse.num_groups
        self.num_devices = d = self.platform.num_devices
        n = max_nodes if max_nodes is not None else g
        e = max_edges if max_edges is not None else self.coarse.graph.num_edges
        if n < g or e < self.coarse.graph.num_edges:
            raise ValueError(
                f"max_nodes={max_nodes} / max_edges={max_edges} are smaller than the graph "
                f"({g} groups, {self.coarse.graph.num_edges} edges)"
            )
        self.max_nodes, self.max_edges = n, e
        self._static = static_features(self.coarse, n, e)
        self.observation_space = spaces.Dict(
            {
                "node_features": spaces.Box(0.0, _BIG, (n, NUM_NODE_FEATURES), np.float32),
                "node_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
                "edge_index": spaces.Box(0, max(n - 1, 0), (2, e), np.int64),
                "edge_features": spaces.Box(0.0, _BIG, (e, 1), np.float32),
                "edge_mask": spaces.Box(0.0, 1.0, (e,), np.float32),
                "placement": spaces.Box(0.0, 1.0, (n, d), np.float32),
                "current_node": spaces.Box(0.0, 1.0, (n,), np.float32),
            }
        )
        self.action_space = spaces.MultiDiscrete([d] * n) if mode == "oneshot" else spaces.Discrete(d)
        self._device_mask = self._compute_device_mask()
        self._baseline: LatencyResult | None = None
        self._baseline_device = self.platform.host
        self.placement = np.full(g, -1, dtype=np.int64)
        self._cursor = 0
        self._last: LatencyResult | None = None
        self._last_reward_value = 0.0
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.evaluations = 0
        self.cache_hits = 0
        self._cost_model = None

    # ------------------------------------------------------------------ baseline and evaluation
    @property
    def baseline(self) -> LatencyResult:
        """The best single-device placement's result (evaluated once, lazily)."""
        if self._baseline is None:
            best = None
            for dev in range(self.num_devices):
                res = self.backend.evaluate(np.full(self.num_groups, dev, dtype=np.int64))
                if res.feasible and (best is None or res.latency < best.latency):
                    best, self._baseline_device = res, dev
            if best is None:
                raise PlacementError(
                    f"no single device of platform {self.platform.name!r} can run the whole model; "
                    "the speedup reward needs a feasible single-device baseline (use reward='neg_latency_ms')"
                )
            self._baseline = best
        return self._baseline

    def evaluate(self, placement: np.ndarray) -> tuple[LatencyResult, float]:
        """Evaluate a ``(G,)`` placement: the backend's result and the reward it earns."""
        res = self.backend.evaluate(placement)
        self.evaluations += 1
        self.cache_hits += int(res.cached)
        if res.feasible and res.latency < self.best_latency:
            self.best_latency, self.best_placement = res.latency, np.array(placement, dtype=np.int64)
        baseline = self.baseline.latency if self.reward_fn.name != "neg_latency_ms" else float("nan")
        return res, float(self.reward_fn(res.latency, baseline, res.feasible))

    # ------------------------------------------------------------------ spaces helpers
    def _compute_device_mask(self) -> np.ndarray:
        """``(G, D)`` bool: device can hold the group's weights and outputs; rows never all False."""
        q = self.coarse.graph
        need = q.nodes["param_bytes"] + q.nodes["out_bytes"]
        cap = np.array([dev.memory_bytes for dev in self.platform.devices], dtype=np.float64)
        mask = need[:, None] <= cap[None, :]
        mask[~mask.any(axis=1)] = True  # fits nowhere: every device allowed, the backend reports infeasible
        return mask

    def action_masks(self) -> np.ndarray:
        """Valid actions for sb3-contrib MaskablePPO: flat bool of length ``sum(nvec)``.

        One-shot: ``N * D`` entries, group-major (padding groups allow every device). Sequential: ``D``
        entries for the current group.
        """
        if self.mode == "sequential":
            return self._device_mask[min(self._cursor, self.num_groups - 1)].copy()
        full = np.ones((self.max_nodes, self.num_devices), dtype=bool)
        full[: self.num_groups] = self._device_mask
        return full.reshape(-1)

    def _validate_action(self, action: Any) -> np.ndarray:
        arr = np.asarray(action)
        if self.mode == "sequential":
            if arr.size != 1 or arr.ndim > 1:
                raise PlacementError(
                    f"sequential mode takes one device index per step, got shape {arr.shape}"
                )
            arr = arr.reshape(())
        elif arr.shape != (self.max_nodes,):
            raise PlacementError(
                f"action must have shape ({self.max_nodes},) (one device per group), got {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            raise PlacementError(f"action must hold integer device indices, got dtype {arr.dtype}")
        if np.any(arr < 0) or np.any(arr >= self.num_devices):
            raise PlacementError(
                f"device index out of range [0, {self.num_devices}) in action "
                f"(devices: {', '.join(d.name for d in self.platform.devices)})"
            )
        return arr.astype(np.int64)

    def _observation(self) -> dict[str, np.ndarray]:
        placed = np.zeros((self.max_nodes, self.num_devices), dtype=np.float32)  # (N, D)
        idx = np.flatnonzero(self.placement >= 0)
        placed[idx, self.placement[idx]] = 1.0
        current = np.zeros(self.max_nodes, dtype=np.float32)  # (N,)
        if self.mode == "sequential" and self._cursor < self.num_groups:
            current[self._cursor] = 1.0
        s = self._static  # copied: callers (replay buffers, users) own what they receive
        return {
            "node_features": s.node_features.copy(),
            "node_mask": s.node_mask.copy(),
            "edge_index": s.edge_index.copy(),
            "edge_features": s.edge_features.copy(),
            "edge_mask": s.edge_mask.copy(),
            "placement": placed,
            "current_node": current,
        }

    def _info(self, res: LatencyResult | None) -> dict[str, Any]:
        if res is None:
            return {}
        base = self.baseline.latency
        info: dict[str, Any] = dict(
            latency=res.latency,
            baseline_latency=base,
            speedup=base / res.latency if res.feasible else 0.0,
            feasible=res.feasible,
            reason=res.reason,
            spread=res.spread,
            samples=res.samples,
            placement=self.placement.copy(),
        )
        if not self.backend.deterministic:
            # A deterministic backend's info must depend on (seed, actions) only (Gymnasium's determinism
            # check); whether its answer came from a cache does not change it. See stats() for counts.
            info["cached"] = res.cached
        return info

    def cost_model(self):
        """The :class:`~placement_gym.simulation.cost_model.CostModel` of this env's graph and platform.

        The documented accessor for classical baselines (HEFT, m-SCT, the MILP...). For the simulated
        backend it is exactly the model the rewards come from; for the measured backend it is the
        calibrated simulator's model of the same platform (profiled per-op times on local devices).
        """
        if getattr(self.backend, "cost_model", None) is not None:
            return self.backend.cost_model
        if self._cost_model is None:
            from placement_gym.simulation.cost_model import CostModel

            self._cost_model = CostModel.from_benchmark(self.benchmark, self.coarse, self.platform)
        return self._cost_model

    def stats(self) -> dict[str, Any]:
        """Evaluations and cache hits since construction, and the best placement found."""
        return {
            "evaluations": self.evaluations,
            "cache_hits": self.cache_hits,
            "best_latency": self.best_latency,
            "best_placement": None if self.best_placement is None else self.best_placement.copy(),
        }

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._cursor = 0
        self._last = None
        if self.mode == "sequential":
            self.placement = np.full(self.num_groups, -1, dtype=np.int64)
        elif self.initial_placement == "random":
            self.placement = self.np_random.integers(0, self.num_devices, self.num_groups).astype(np.int64)
        elif self.initial_placement == "best_single":
            _ = self.baseline
            self.placement = np.full(self.num_groups, self._baseline_device, dtype=np.int64)
        else:
            self.placement = np.full(self.num_groups, self.platform.host, dtype=np.int64)
        if self.mode == "sequential" and self.sequential_reward == "incremental":
            _, self._last_reward_value = self.evaluate(self._partial_placement())
        return self._observation(), self._info(None)

    def _partial_placement(self) -> np.ndarray:
        p = self.placement.copy()
        p[p < 0] = self.platform.host
        return p

    def step(self, action: Any):
        act = self._validate_action(action)
        if self.mode == "oneshot":
            self.placement = act[: self.num_groups].copy()
            res, reward = self.evaluate(self.placement)
            self._last = res
            return self._observation(), reward, True, False, self._info(res)
        if self._cursor >= self.num_groups:
            raise PlacementError("all groups are placed: call reset() before step()")
        self.placement[self._cursor] = int(act)
        self._cursor += 1
        done = self._cursor == self.num_groups
        reward, res = 0.0, None
        if done or self.sequential_reward == "incremental":
            res, value = self.evaluate(self._partial_placement())
            self._last = res
            if self.sequential_reward == "incremental":
                reward, self._last_reward_value = value - self._last_reward_value, value
            else:
                reward = value
        return self._observation(), float(reward), done, False, self._info(res)

    def render(self):
        latency = self._last.latency if self._last is not None else None
        if self.render_mode == "ansi":
            return placement_table(self.coarse, self.platform, self.placement, latency)
        if self.render_mode == "rgb_array":
            title = f"{self.benchmark.name} on {self.platform.name}"
            if latency is not None:
                title += f": {latency * 1e3:.2f} ms" if np.isfinite(latency) else ": infeasible"
            return figure_to_rgb(placement_figure(self.coarse, self.platform, self.placement, title))
        return None

    def close(self) -> None:
        self.backend.close()

    # ------------------------------------------------------------------ pickling (SubprocVecEnv, copies)
    def __getstate__(self) -> dict[str, Any]:
        if not isinstance(self._init_kwargs["backend"], str):
            raise TypeError("an env built around a backend instance cannot be pickled; pass the backend by name")
        return {
            "kwargs": self._init_kwargs,
            "np_random": self._np_random,
            "placement": self.placement,
            "cursor": self._cursor,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["kwargs"])
        self._np_random = state["np_random"]
        self.placement, self._cursor = state["placement"], state["cursor"]
