"""Sealed protocol runs: what an agent can reach, by track (placement_gym.sealing, view, benchmark)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np
import pytest

import agents
from agents.specs import method_track
from placement_gym import tasks
from placement_gym.backends import LatencyBackend
from placement_gym.benchmark import evaluate
from placement_gym.budget import Run
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import AgentFailedError, ProtocolAccessError
from placement_gym.problem import PlacementProblem, problem_of
from placement_gym.view import TaskView

TASK = ["resnet50/cpu-dgpu"]  # a protocol task with a stored optimum


def run(agent, budget: int = 20):
    return evaluate(agent, tasks=TASK, budget=budget, seeds=[0])[0]


def test_a_black_box_agent_that_reads_the_cost_model_is_refused_in_one_line() -> None:
    def peek(view, budget, seed):
        view.cost_model()

    with pytest.raises(AgentFailedError) as info:
        run(peek)
    assert "\n" not in str(info.value) and "black-box" in str(info.value)
    assert isinstance(info.value.__cause__, ProtocolAccessError)

    def build_one(view, budget, seed):  # building a cost model of its own is refused too
        from placement_gym.simulation.cost_model import CostModel

        p = problem_of(view)
        CostModel.from_benchmark(p.benchmark, p.coarse, p.platform)

    with pytest.raises(AgentFailedError, match="building a cost model is white-box"):
        run(build_one)


def test_a_white_box_agent_reads_the_cost_model_and_its_row_says_so() -> None:
    def heft_like(view, budget, seed):
        compute = view.cost_model().compute  # (G, D)
        return np.argmin(compute, axis=1)

    heft_like.track = "white-box"
    row = run(heft_like)
    assert row.track == "white-box" and row.evaluations == 0  # returned, not evaluated: scored after the run

    def plain(view, budget, seed):
        return view.baseline_placement

    assert run(plain).track == "black-box"


def test_an_unknown_track_is_refused() -> None:
    def agent(view, budget, seed):
        return view.baseline_placement

    agent.track = "grey-box"
    with pytest.raises(Exception, match="track must be one of"):
        run(agent)


#: Public attribute paths an agent might try, from what it is given, each of which must be refused.
REFUSED = [
    lambda v: problem_of(v).reference,
    lambda v: problem_of(v).score(1.0),
    lambda v: problem_of(v).backend,
    lambda v: problem_of(v).listeners,
    lambda v: problem_of(v).cost_model(),
    lambda v: problem_of(v).device_features,
    lambda v: tasks.reference_optima(),
    lambda v: tasks.reference_optimum("resnet50", 1, "cpu-dgpu"),
    lambda v: tasks.reference_for("resnet50", 1, "cpu-dgpu", "fused", 1, problem_of(v).task_sha256),
    lambda v: DevicePlacementEnv(problem=problem_of(v)).unwrapped.problem.reference,
]


def _forbidden(obj) -> bool:
    if isinstance(obj, (tasks.ReferenceOptimum, LatencyBackend, Run)):
        return True
    if isinstance(obj, Mapping):
        return any(isinstance(x, tasks.ReferenceOptimum) for x in list(obj.values())[:5])
    return False


def _crawl(root, depth: int = 3) -> list[str]:
    """Every public attribute path from ``root`` (``depth`` deep) that reaches an optimum, a backend or a run."""
    found, frontier, seen = [], [("root", root)], set()
    for _ in range(depth):
        nxt = []
        for path, obj in frontier:
            if id(obj) in seen or isinstance(obj, (int, float, str, bytes, np.ndarray, type(None))):
                continue
            seen.add(id(obj))
            for name in dir(obj):
                if name.startswith("_"):
                    continue
                try:
                    value = getattr(obj, name)
                except Exception:  # refused (ProtocolAccessError) or not readable
                    continue
                if _forbidden(value):
                    found.append(f"{path}.{name}")
                nxt.append((f"{path}.{name}", value))
        frontier = nxt
    return found


def test_no_public_path_from_the_view_or_its_env_reaches_the_optimum_a_backend_or_a_counter() -> None:
    outcomes: dict[str, object] = {}

    def snoop(view, budget, seed):
        for i, attempt in enumerate(REFUSED):
            try:
                attempt(view)
                outcomes[i] = "read"
            except ProtocolAccessError:
                outcomes[i] = "refused"
        assert not hasattr(view, "reference") and not hasattr(view, "backend")
        try:
            view.evaluations = 0  # the count is read-only
            outcomes["count"] = "written"
        except AttributeError:
            outcomes["count"] = "read-only"
        env = DevicePlacementEnv(problem=problem_of(view))
        env.reset(seed=0)
        _, _, _, _, info = env.step(np.zeros(env.unwrapped.num_groups, dtype=np.int64))
        outcomes["info"] = sorted(info)
        outcomes["crawl"] = _crawl(view) + _crawl(env)
        return view.baseline_placement

    run(snoop)
    assert [outcomes[i] for i in range(len(REFUSED))] == ["refused"] * len(REFUSED)
    assert "score" not in outcomes["info"] and "latency" in outcomes["info"]
    assert outcomes["crawl"] == [] and outcomes["count"] == "read-only"


def test_outside_a_run_the_problem_and_the_optima_read_as_before_but_read_only() -> None:
    problem = PlacementProblem.make("resnet50", "cpu-dgpu", "simulated")
    assert problem.reference is not None and problem.backend is not None and problem.listeners == ()
    assert {"root.backend", "root.reference"} <= set(_crawl(problem, depth=1))  # the crawler can find them
    optima = tasks.reference_optima()
    key = next(iter(optima))
    with pytest.raises(TypeError):
        optima[key] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        optima[key].latency = 0.0  # type: ignore[misc]


def test_a_nested_run_or_threads_cannot_spend_more_than_the_budget() -> None:
    def nested(view, budget, seed):
        Run(problem_of(view), None)  # an inner run without a limit cannot loosen the outer one
        rng = np.random.default_rng(seed)
        for _ in range(3 * budget):
            view.evaluate(rng.integers(0, view.num_devices, view.num_groups))

    row = run(nested, budget=25)
    assert row.evaluations == 25 and row.extra["stopped_by_budget"]

    def threaded(view, budget, seed):
        def work(k: int) -> None:
            rng = np.random.default_rng(k)
            try:
                for _ in range(budget):
                    view.evaluate(rng.integers(0, view.num_devices, view.num_groups))
            except Exception:
                pass

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    row = run(threaded, budget=30)
    assert row.evaluations == 30


def test_the_protocol_scores_against_its_own_copy_of_the_optima() -> None:
    def agent(view, budget, seed):
        return view.baseline_placement

    honest = run(agent).score
    ref = tasks.reference_optima()["resnet50/v1/cpu-dgpu/fused"]
    object.__setattr__(ref, "latency", ref.latency * 0.5)  # a tampered shared record
    try:
        assert run(agent).score == honest
    finally:
        object.__setattr__(ref, "latency", ref.latency * 2.0)


BLACK_BOX = ["single_device", "random_search", "hsdag", "rl_placement", "ppo_mlp", "ppo_gnn:observation=graph"]


@pytest.mark.parametrize("spec", BLACK_BOX)
def test_every_black_box_method_runs_sealed_without_reading_the_cost_model(spec: str) -> None:
    assert method_track(spec) == "black-box"
    from agents.specs import parse_spec

    row = evaluate(parse_spec(spec).build(), tasks=["tiny_cnn/cpu-dgpu"], budget=8, seeds=[0], name=spec)[0]
    assert row.track == "black-box" and 1 <= row.evaluations <= 8


def test_registered_methods_declare_a_track() -> None:
    tracks = {name: method_track(name) for name in agents.METHODS}
    assert set(tracks.values()) == {"black-box", "white-box"}
    assert tracks["heft"] == tracks["exact"] == tracks["ppo_gnn"] == "white-box"  # cost model, device features
    assert tracks["random_search"] == tracks["hsdag"] == "black-box"


def test_an_agent_that_exits_or_raises_fails_its_cell_and_the_others_still_run(tmp_path) -> None:
    def moody(view, budget, seed):
        if seed == 0:
            raise SystemExit(0)
        if seed == 1:
            raise RuntimeError("boom\nsecond line")
        return view.baseline_placement

    with pytest.raises(AgentFailedError) as info:
        evaluate(moody, tasks=TASK, budget=5, seeds=[0, 1, 2], out=tmp_path)
    text = str(info.value)
    assert "2 cell(s)" in text and "sys.exit(0)" in text and "RuntimeError: boom" in text and "\n" not in text
    from placement_gym.results import ResultStore

    assert [r.seed for r in ResultStore(tmp_path / "results.jsonl").rows()] == [2]
