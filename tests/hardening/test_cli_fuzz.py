"""Fuzz tests of the CLI's error contract (issue #25): whatever command line or method spec hypothesis makes,
the command ends in a result (exit 0) or one line ``placement-gym: error: ...`` on stderr with exit 2; never a
traceback (an exception escaping ``cli.main`` fails the test with it).

The command lines come from a grammar that knows which values are valid, so the test also checks the
oracle: a line of valid values succeeds and a line with any invalid value is refused (a validation that
is removed makes the test fail). The CLI runs in-process; the expensive work of a valid command (running a
grid, training) is replaced by the cheap checks it starts with (the method specs and the method built from
them), except in :func:`test_real_bench_runs_end_in_a_row_or_one_line`, which runs a few tiny grids.
"""

from __future__ import annotations

import contextlib
import io
import json
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import METHODS
from agents.specs import parse_spec
from experiments import cli
from placement_gym.errors import PlacementGymError, RecordError

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIM = {"model": "tiny_cnn", "platform": "cpu-dgpu", "backend": "simulated"}

# ---------------------------------------------------------------------- values: (text, valid)
_BAD_INTS = ["0", "-1", "-4", "1.5", "abc", "", "1e3", "nan", "10**9", "0x10", " 1x"]
_BAD_SPECS = [
    "milp:time_limit=NaN", "milp:time_limit=abc", "milp:time_limit=inf", "milp:time_limit=-inf",
    "milp:time_limit=-1", "milp:time_limit=0", "milp:time_limt=3", "milp:time_limit", "milp:time_limit=",
    "milp:time_limit=1,time_limit=2", "hef", "HEFT", "heft:insertion=no", "heft:insertion=2", "m_etf:x=1",
    "hsdag:hidden=10**9", "hsdag:hidden=1000000000", "hsdag:hidden=0", "hsdag:lr=-0.1", "hsdag:dropout=1",
    "ppo_gnn:n_steps=1000000000", "ppo_gnn:n_steps=0", "ppo_gnn:batch_size=1", "ppo_gnn:n_step=8",
    "ppo_mlp:net_arch=[64,0]", "ppo_mlp:net_arch=[64,", "random_search:batch_size=0",
    "random_search:budget=1000000000000", "local_search:kick=-1", "rl_placement:temperature=0",
    "grouper_placer:num_groups=0", "simulated_annealing:t_start=nan", "exact:threads=0",
    "no_such_module_xyz:Agent", "collections:OrderedDict", "json:dumps", "heft:,", " heft", "",
]  # fmt: skip
_GOOD_SPECS = [
    "heft", "heft:insertion=false", "m_topo", "m_sct", "random_search:batch_size=4", "milp:time_limit=30",
    "single_device:device=cpu", "single_device:device=1", "hsdag:hidden=16,samples_per_update=2",
    "ppo_gnn:n_steps=8,batch_size=8", "ppo_mlp:net_arch=[16,16]", "local_search:kick=2,start=random",
    "guided_improvement:ranker=cost", "simulated_annealing:t_start=0.01",
]  # fmt: skip
#: Pairs of specs that normalise to one (a repeat).
_SAME = [("milp:time_limit=30", "milp:time_limit=30.0"), ("heft", "heft"), ("heft:insertion=true", "heft:insertion=True")]


def _either(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``good``: a line then often has exactly one invalid value, so no other check can hide a
    missing one (each strategy yields ``(value, valid)``)."""
    return st.integers(0, 4).flatmap(lambda i: bad if i == 0 else good)


def _int(low: int = 1, high: int = 10**6) -> st.SearchStrategy[tuple[str, bool]]:
    return _either(
        st.integers(low, high).map(lambda v: (str(v), True)),
        st.one_of(
            st.sampled_from(_BAD_INTS).map(lambda t: (t, t.lstrip("-").isdigit() and int(t) >= low)),
            st.integers(-(10**20), low - 1).map(lambda v: (str(v), False)),
        ),
    )


def _budget() -> st.SearchStrategy[tuple[str, bool]]:
    # a budget whose history needs more memory than any machine has is refused with the figure
    return _either(_int(1, 10**5), st.integers(10**15, 10**30).map(lambda v: (str(v), False)))


def _unique(item: st.SearchStrategy[tuple[str, bool]], repeat: st.SearchStrategy[list[str]]):
    """A list for a ``nargs="+"`` option: unique items (valid if all are), or a repeat (invalid)."""
    items = st.lists(item, min_size=1, max_size=3, unique_by=lambda p: p[0])
    return _either(items.map(lambda it: ([t for t, _ in it], all(v for _, v in it))), repeat.map(lambda r: (r, False)))


def _seeds():
    seed = _either(
        st.integers(0, 2**32 - 1).map(lambda v: (str(v), True)),
        st.one_of(
            st.integers(2**32, 2**80).map(lambda v: (str(v), False)),
            st.integers(-(2**40), -1).map(lambda v: (str(v), False)),
            st.sampled_from(["1.0", "x", ""]).map(lambda t: (t, False)),
        ),
    )
    return _unique(seed, st.integers(0, 9).map(lambda v: [str(v), str(v)]))


def _methods():
    spec = _either(
        st.sampled_from(_GOOD_SPECS).map(lambda t: (t, True)), st.sampled_from(_BAD_SPECS).map(lambda t: (t, False))
    )
    return _unique(spec, st.sampled_from(_SAME).map(list))


@st.composite
def bench_lines(draw) -> tuple[list[str], bool]:
    argv, valid = ["bench", "--models", "tiny_cnn", "--platform", "cpu-dgpu", "--no-progress"], True
    for option, strategy in (
        ("--budget", _budget()),
        ("--k", _int()),
        ("--backend", _either(st.just(("simulated", True)), st.just(("gpu", False)))),
    ):
        if draw(st.booleans()):
            text, ok = draw(strategy)
            argv += [f"{option}={text}"]  # "=": a value such as "-1" is not read as an option
            valid &= ok
    for option, strategy in (("--seeds", _seeds()), ("--methods", _methods())):
        if draw(st.booleans()):
            items, ok = draw(strategy)
            argv += [option, *items]  # argparse reads "-3" as a value here: no option looks like a number
            valid &= ok
    return argv, valid


_AGENT_KWARGS = [
    ("heft", {}, True), ("heft", {"insertion": False}, True), ("random_search", {"batch_size": 4}, True),
    ("single_device", {"device": "cpu"}, True), ("hsdag", {"hidden": 8}, True),
    ("heft", {"insertion": "no"}, False), ("heft", {"insertoin": True}, False),
    ("random_search", {"batch_size": 0}, False), ("random_search", {"batch_size": 1e9}, False),
    ("hsdag", {"hidden": 1000000000}, False), ("milp", {"time_limit": -1}, False),
    ("ppo_gnn", {"n_steps": 1000000000}, False), ("m_etf", {"x": 1}, False),
]  # fmt: skip


@st.composite
def train_lines(draw, out: Path) -> tuple[list[str], bool]:
    agent, kwargs, valid = draw(
        _either(st.sampled_from([c for c in _AGENT_KWARGS if c[2]]), st.sampled_from([c for c in _AGENT_KWARGS if not c[2]]))
    )
    argv = ["train", "--agent", agent, "--env", "DevicePlacement-v0", "--out", str(out), "--no-progress"]
    argv += ["--env-kwargs", json.dumps(SIM), "--agent-kwargs", json.dumps(kwargs)]
    for option, strategy in (
        ("--budget", _budget()),
        ("--seed", _either(st.integers(0, 2**32 - 1), st.integers(-5, 2**33)).map(lambda v: (str(v), 0 <= v < 2**32))),
        ("--checkpoint-every", _int(0)),
        ("--n-envs", _int(1, 4)),
        ("--max-nodes", _int(64, 512).map(lambda d: (d[0], False))),  # with one --env: refused
        ("--max-edges", _int(64, 512).map(lambda d: (d[0], False))),
        ("--env-kwargs", _either(st.none(), st.sampled_from(["{", "[]", '{"a": NaN}', '{"a": 1e999}']))),
        ("--agent-kwargs", _either(st.none(), st.sampled_from(['{"x": Infinity}', "1"]))),
    ):
        if draw(st.booleans()):
            drawn = draw(strategy)
            if drawn is None:  # (these two options only have invalid values to add)
                continue
            text, ok = drawn if isinstance(drawn, tuple) else (drawn, False)
            argv += [f"{option}={text}"]
            valid &= ok
    return argv, valid


# ---------------------------------------------------------------------- running
@contextlib.contextmanager
def cheap_commands() -> Iterator[None]:
    """Replace the expensive part of each command by the checks it starts with."""
    from experiments import grid
    from experiments.cli import bench, calibrate, place, train
    from experiments.records import graph_table

    def run_grid(out, models, methods, seeds, budget, *args, **kwargs):
        grid.unique_specs(methods)
        return []

    def run_train(agent, env_id, out, budget, seed, env_kwargs, agent_kwargs, n_envs=1, *args, **kwargs):
        train._method(agent, agent_kwargs, n_envs, out / "tb")
        return types.SimpleNamespace(latency=1e-3, evaluations=1, wall_time=0.0)

    def no_policy(policy, *args, **kwargs):
        raise RecordError(f"no saved policy at {policy} (a stub of the fuzz test)")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grid, "run_grid", run_grid)
        mp.setattr(bench, "write_report", lambda rows, out: "")
        mp.setattr(train, "train", run_train)
        mp.setattr(train, "train_tasks", lambda agent, *a, **k: [])
        mp.setattr(place, "place", no_policy)
        mp.setattr(calibrate, "run_from_args", lambda args: None)
        mp.setattr(graph_table, "graph_table", lambda models, k: "")
        yield


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def assert_contract(argv: list[str], code: int, err: str, valid: bool | None) -> None:
    """Exit 0, or 2 with exactly one error line; with an oracle, valid <=> 0."""
    assert "Traceback" not in err, argv
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note: ")]
    if code == 0:
        assert valid is not False, f"accepted an invalid command line: {argv}"
        return
    assert code == 2, (argv, code, err)
    assert valid is not True, f"refused a valid command line: {argv}: {err}"
    assert len(lines) == 1 and lines[0].startswith("placement-gym: error: "), (argv, err)


# ---------------------------------------------------------------------- the tests
@FAST
@given(line=bench_lines())
def test_bench_command_lines(line: tuple[list[str], bool], tmp_path_factory) -> None:
    argv, valid = line
    with cheap_commands():
        code, err = run_cli([*argv, "--out", str(tmp_path_factory.mktemp("bench"))])
    assert_contract(argv, code, err, valid)


@FAST
@given(data=st.data())
def test_train_command_lines(data, tmp_path_factory) -> None:
    argv, valid = data.draw(train_lines(tmp_path_factory.mktemp("train") / "run"))
    with cheap_commands():
        code, err = run_cli(argv)
    assert_contract(argv, code, err, valid)


_OTHER = st.one_of(
    st.tuples(st.just(["graphs", "--models", "tiny_cnn"]), st.sampled_from(["--k"]), _int()),
    st.tuples(st.just(["show", "missing.json"]), st.sampled_from(["--row"]), _int(0)),
    st.tuples(
        st.just(["place", "--policy", "p", "--model", "tiny_cnn", "--platform", "cpu-dgpu"]),
        st.sampled_from(["--fine-tune", "--seed"]),
        _int(0),
    ),
    st.tuples(st.just(["calibrate", "--model", "tiny_cnn"]), st.sampled_from(["--platform"]), st.just(("local", True))),
)


@FAST
@given(line=_OTHER)
def test_show_place_graphs_calibrate_command_lines(line) -> None:
    prefix, option, (text, ok) = line
    argv = [*prefix, f"{option}={text}"]
    with cheap_commands():
        code, err = run_cli(argv)
    # show and place name a missing file: a valid line still ends in the one-line error
    expect = ok and prefix[0] in ("graphs", "calibrate")
    assert_contract(argv, code, err, expect if expect or not ok else None)


_TOKENS = st.one_of(
    st.sampled_from(
        ["bench", "train", "show", "place", "graphs", "calibrate", "--budget", "--seeds", "--methods", "--k",
         "--agent", "--env", "--out", "--debugx", "--help", "-h", "--models", "--seed", "heft", "0", "-1", "x"]
    ),  # fmt: skip
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=st.lists(_TOKENS, max_size=6))
def test_any_command_line_ends_in_a_result_or_one_line(argv: list[str], tmp_path_factory) -> None:
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path_factory.mktemp("any"))] if argv[:1] in (["bench"], ["train"]) else argv
    with cheap_commands():
        code, err = run_cli(argv)
    assert code in (0, 2), (argv, code, err)
    assert_contract(argv, code, err, None)


# ---------------------------------------------------------------------- method-spec strings
_PIECES = st.sampled_from(
    [*METHODS, "hef", "milpp", "os.path", "no_such_module_xyz", ":", "=", ",", "[", "]", "time_limit", "hidden",
     "n_steps", "device", "batch_size", "insertion", "nan", "inf", "-1", "0", "1e999", "10**9", "1000000000",
     "true", "no", "null", "[1,2]", "1.5", "30", "30.0", "cpu", " "]
)  # fmt: skip


@contextlib.contextmanager
def no_imports_but(*allowed: str) -> Iterator[None]:
    """Only ``allowed`` modules may be imported for an outside agent (random text must not import anything)."""
    import importlib

    from agents import specs

    real = importlib.import_module

    def guarded(name: str, *args):
        if name not in allowed and not name.startswith("agents."):
            raise ModuleNotFoundError(f"No module named {name!r} (the fuzz test imports nothing else)")
        return real(name, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(specs.importlib, "import_module", guarded)
        yield


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.lists(_PIECES, max_size=8).map("".join), st.text(max_size=30)))
def test_any_spec_text_is_parsed_or_refused(text: str) -> None:
    with no_imports_but("os.path", "json", "collections"):
        try:
            spec = parse_spec(text)
        except PlacementGymError as exc:
            assert str(exc) and "\n" not in " ".join(str(exc).split())
            return
        assert parse_spec(spec.text) == spec  # the normalised text is a fixed point
        for value in spec.kwargs.values():
            assert not (isinstance(value, float) and value != value), "NaN accepted"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.tuples(
        st.sampled_from(["random_search:batch_size=", "heft:insertion=", "single_device:device=", "local_search:kick=",
                         "local_search:start=", "m_topo:balance=", "metis:parts_per_device="]),
        st.sampled_from(["0", "1", "2", "-1", "true", "cpu", "gpu", "gpuu", "random", "heft", "compute", "nan", "7"]),
    ).map("".join),
    budget=st.integers(-2, 30),
)  # fmt: skip
def test_real_bench_runs_end_in_a_row_or_one_line(spec: str, budget: int, tmp_path_factory) -> None:
    from experiments.cli import bench

    out = tmp_path_factory.mktemp("real")
    argv = ["bench", "--models", "tiny_cnn", "--platform", "cpu-dgpu", "--backend", "simulated", "--seeds", "0"]
    argv += [f"--budget={budget}", "--methods", spec, "--out", str(out), "--no-progress"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "write_report", lambda rows, out: "")  # the plots are not under test here
        code, err = run_cli(argv)
    assert_contract(argv, code, err, None)
    if code == 0:
        assert (out / "results.jsonl").read_text().count("\n") == 1
