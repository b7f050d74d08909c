"""``validate --rerun --trust-modules``: rows of agents from modules outside the project (``ppo_torch:train``,
``stable_baselines3:PPO:...``) are rerun only when the user names their module; otherwise the summary
counts them as left out. A results file alone never makes validate import code."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.records import validation
from experiments.records.validation import Verdict, left_out, sample_rows, spec_modules, untrusted_modules
from placement_gym.results import ResultRow, ResultStore, row_line

ROOT = Path(__file__).resolve().parents[2]
STANDARD = ROOT / "results" / "leaderboard" / "standard"
SB3 = (
    'stable_baselines3:PPO:policy=agents.sb3.policy:GNNActorCriticPolicy,policy_kwargs={"gnn":"sage",'
    '"pair_bias_scale":128},learning_rate=0.001,n_steps=16,batch_size=16,n_epochs=2,gamma=1'
)


@pytest.fixture
def isolated_imports(monkeypatch):
    """Imports of the test (the current folder put on ``sys.path``, the modules imported) are undone."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("ppo_torch", "tiny_agent", "broken_agent")):
            del sys.modules[name]


def stored(name: str) -> list[ResultRow]:
    return ResultStore(STANDARD / f"{name}.jsonl").rows()


def accepted(rows: list[ResultRow]) -> list[Verdict]:
    return [Verdict(f"rows line {i + 1}", r, ()) for i, r in enumerate(rows)]


def test_the_modules_a_spec_would_import_are_read_from_its_text():
    assert spec_modules("heft") == [] and spec_modules("milp:time_limit=30") == []
    assert spec_modules("ppo_torch:train:learning_rate=0.001") == ["ppo_torch"]
    assert spec_modules(SB3) == ["stable_baselines3", "agents.sb3.policy"]
    assert untrusted_modules(SB3, ["stable_baselines3"]) == []  # the policy class is the project's own
    assert untrusted_modules("my_pkg.agents:Agent", ["my_pkg"]) == []  # inside a trusted package
    assert untrusted_modules("my_pkgx:Agent", ["my_pkg"]) == ["my_pkgx"]
    # a module hidden in an argument keeps the row out, however it is written
    for spec in (
        "stable_baselines3:PPO:policy=evil:Policy",
        "stable_baselines3:PPO:policy=evil:",
        'stable_baselines3:PPO:policy_kwargs={"net_class":"evil.nets:Net"}',
        'stable_baselines3:PPO:policy_kwargs={"net_class":"\\u0065vil:Net"}',
        "ppo_gnn:policy=evil:Policy",  # a registered method's argument too
    ):
        assert "evil" in {m.split(".")[0] for m in untrusted_modules(spec, ["stable_baselines3"])}, spec


def test_rows_of_a_module_not_trusted_are_not_sampled_but_counted():
    rows = stored("heft") + stored("ppo_torch") + stored("stable_baselines3")
    verdicts = accepted(rows)
    default = sample_rows(verdicts, len(verdicts))
    assert {r.row.method for r in default} == {"heft"}  # as before: registered methods only
    assert left_out(verdicts) == {"ppo_torch": 60, "stable_baselines3": 60}

    trusted = sample_rows(verdicts, len(verdicts), trusted=["ppo_torch", "stable_baselines3"])
    assert len(trusted) == len(rows) and left_out(verdicts, ["ppo_torch", "stable_baselines3"]) == {}
    some = sample_rows(verdicts, len(verdicts), trusted=["ppo_torch"])
    assert {v.row.method for v in some} == {"heft", "ppo_torch:train"}
    assert left_out(verdicts, ["ppo_torch"]) == {"stable_baselines3": 60}

    forged = dataclasses.replace(rows[-1], method=SB3.replace("agents.sb3.policy", "evil"))
    assert sample_rows(accepted([forged]), 1, trusted=["stable_baselines3"]) == []
    problems = validation.rerun_row(forged, trusted=["stable_baselines3"]).problems  # nothing imported
    assert "cannot be rerun" in problems[0] and "'evil'" in problems[0] and "--trust-modules" in problems[0]


def _task_rows(tmp_path: Path) -> str:
    """One task's heft row and its five ppo_torch rows (a complete seed set: all accepted)."""
    task = ("inception_v3", "cpu-dgpu")
    rows = [r for r in stored("heft") + stored("ppo_torch") if (r.model, r.platform) == task]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(row_line(r) for r in rows))
    return str(path)


def test_cli_default_reruns_only_registered_rows_and_says_how_many_were_left_out(
    tmp_path, monkeypatch, capsys, isolated_imports
):
    rerun = []

    def fake_rerun(row, where="rerun", trusted=()):
        rerun.append(row.method)
        return Verdict(where, row, (), row.latency)

    monkeypatch.setattr(validation, "rerun_row", fake_rerun)
    path = _task_rows(tmp_path)
    assert cli.main(["validate", "--quiet", "--no-cache", "--rerun", "6", path]) == 0
    out = capsys.readouterr().out
    assert set(rerun) == {"heft"}  # the validation pass reruns heft's row, and so does the sample
    assert "rerun: 1 of 1 sampled rows identical" in out
    assert "5 accepted rows left out of the sample because their method's module is not trusted" in out
    assert "(5 of ppo_torch; rerun them with --trust-modules ppo_torch)" in out

    rerun.clear()
    monkeypatch.chdir(ROOT / "examples")  # ppo_torch is found in the current folder, as bench finds it
    assert cli.main(["validate", "--quiet", "--no-cache", "--rerun", "6", "--trust-modules", "ppo_torch", path]) == 0
    out = capsys.readouterr().out
    assert rerun.count("ppo_torch:train") == 5
    assert f"trusted module ppo_torch: {ROOT / 'examples' / 'ppo_torch.py'}" in out
    assert "rerun: 6 of 6 sampled rows identical" in out and "left out" not in out


def test_an_unknown_or_broken_module_is_a_clear_error(tmp_path, monkeypatch, capsys, isolated_imports):
    path = _task_rows(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_agent.py").write_text("raise RuntimeError('no GPU here')\n")
    cases = [
        (["--trust-modules", "no_such_agent_module"], "--trust-modules no_such_agent_module: cannot import 'no_such_agent_module'"),
        (["--trust-modules", "no_such_first_module,no_such_agent_module"], "cannot import 'no_such_first_module'"),
        (["--trust-modules", "broken_agent"], "importing 'broken_agent' failed (RuntimeError: no GPU here)"),
        (["--trust-modules", "a-b"], "--trust-modules 'a-b': not a module name"),
    ]
    for flags, message in cases:
        assert cli.main(["validate", "--no-cache", "--rerun", "1", *flags, path]) == 2, flags
        err = capsys.readouterr().err
        assert message in err, (flags, err)
    assert cli.main(["validate", "--no-cache", "--trust-modules", "heft", path]) == 2
    assert "give --rerun N too" in capsys.readouterr().err


AGENT = '''
import numpy as np


def place(problem, budget, seed):
    """Seeded random single moves from the best single device, keeping the faster."""
    rng = np.random.default_rng(seed + {offset})
    start = problem.evaluations
    best = problem.baseline_placement.copy()
    best_latency = problem.evaluate(best).latency
    for _ in range(20 * budget):
        if problem.evaluations - start >= budget:
            break
        trial = best.copy()
        group = rng.integers(problem.num_groups)
        trial[group] = rng.choice(np.flatnonzero(problem.device_mask[group]))
        latency = problem.evaluate(trial).latency
        if latency < best_latency:
            best, best_latency = trial, latency
    return best
'''


def test_a_user_module_row_reruns_end_to_end_and_an_edited_module_is_never_judged_from_a_cache(
    tmp_path, monkeypatch, capsys, isolated_imports
):
    """A row of an agent in a module of the current folder, made by the leaderboard runner at the tiny tier,
    reruns IDENTICAL when its module is trusted; after the module changes, the rerun (in a new process:
    here, the module imported again) DIFFERS, with the verdict cache on."""
    from experiments.records.leaderboard import run_tier

    verdicts = tmp_path / "verdicts.json"
    monkeypatch.setattr(validation, "VerdictCache", functools.partial(validation.VerdictCache, verdicts))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    agent = tmp_path / "tiny_agent.py"
    agent.write_text(AGENT.format(offset=0))
    monkeypatch.chdir(tmp_path)
    run_tier("tiny", ["tiny_agent:place"], tmp_path / "results", tasks=["resnet50/cpu-igpu"], seeds=[0], log=lambda *_: None)
    (path,) = (tmp_path / "results" / "tiny").glob("*.jsonl")
    (row,) = ResultStore(path).rows()
    assert row.method == "tiny_agent:place" and row.evaluations == row.budget == 100
    made = hashlib.sha256(agent.read_bytes()).hexdigest()
    assert row.versions["module:tiny_agent"] == f"sha256:{made}"  # the module's own code, by its file
    capsys.readouterr()

    args = ["validate", "--quiet", "--rerun", "1", str(path)]
    assert cli.main(args) == 0
    assert "1 accepted rows left out" in capsys.readouterr().out

    assert cli.main([*args, "--trust-modules", "tiny_agent"]) == 0
    out = capsys.readouterr().out
    assert "IDENTICAL" in out and "rerun: 1 of 1 sampled rows identical" in out

    agent.write_text(AGENT.format(offset=1))  # another agent under the same name
    del sys.modules["tiny_agent"]  # a new validate process imports the file again
    assert cli.main([*args, "--trust-modules", "tiny_agent"]) == 2
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "rerun places" in out and "(made on this CPU)" in out
    now = hashlib.sha256(agent.read_bytes()).hexdigest()
    assert (
        f"the row was made with tiny_agent sha256 {made[:12]}..., the module imported now is "
        f"sha256 {now[:12]}..."
    ) in out
    assert verdicts.is_file()  # the verdict cache was on throughout


def test_rows_record_the_identity_of_the_modules_their_spec_names(tmp_path, monkeypatch, isolated_imports):
    """An outside module's file hash (an installed one's distribution and version), none for the project's own
    modules or a registered method; how a changed identity is put in words."""
    from agents.specs import outside_modules
    from experiments.grid import run_cell
    from placement_gym.results import MODULE_RECORD, module_versions

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny_agent.py").write_text(AGENT.format(offset=0))
    row = run_cell(
        "resnet50", "tiny_agent:place", 0, 100, "cpu-igpu", "simulated", "fused",
        protocol_version="v1", tier="tiny",
    )  # fmt: skip
    modules = {k: v for k, v in row.versions.items() if k.startswith("module:")}
    digest = hashlib.sha256((tmp_path / "tiny_agent.py").read_bytes()).hexdigest()
    assert modules == {"module:tiny_agent": f"sha256:{digest}"}
    heft = run_cell("resnet50", "heft", 0, 100, "cpu-igpu", "simulated", "fused")
    assert not [k for k in heft.versions if k.startswith("module:")]
    assert outside_modules(SB3) == ["stable_baselines3"]  # the policy module is the project's (its commit)

    import stable_baselines3  # installed: its distribution's version, not a file hash

    installed = module_versions(["stable_baselines3", "no_such_module"])
    (record,) = installed.values()
    assert list(installed) == ["module:stable_baselines3"] and MODULE_RECORD.match(record)
    assert record.endswith(f"=={stable_baselines3.__version__}")

    same = validation.module_changes(row.versions, row.versions)
    edited = {**row.versions, "module:tiny_agent": "sha256:" + "0" * 64}
    other = validation.module_changes(row.versions, edited)
    assert same == [] and other == [
        f"the row was made with tiny_agent sha256 {digest[:12]}..., the module imported now is sha256 "
        "000000000000..."
    ]
    assert validation.module_changes({}, row.versions) == []  # a row that records no module


def test_module_records_are_checked_and_rows_without_them_still_validate(tmp_path, isolated_imports):
    """Rows that record no module (made before rows recorded them) pass as the stored rows do; a recorded
    module must be one the spec names, in one of the two formats."""
    from experiments.records.provenance import row_problems

    kept = stored("ppo_torch")[:5] + stored("stable_baselines3")[:5]
    old = [
        dataclasses.replace(r, versions={k: v for k, v in r.versions.items() if not k.startswith("module:")})
        for r in kept
    ]
    assert all(row_problems(r) == [] for r in kept + old)
    path = tmp_path / "old.jsonl"
    task = ("inception_v3", "cpu-dgpu")
    path.write_text("".join(row_line(r) for r in stored("ppo_torch") if (r.model, r.platform) == task))
    assert all(v.ok for v in validation.validate([path], cache=validation.VerdictCache(enabled=False)))

    row = old[0]
    good = [
        {"module:ppo_torch": "sha256:" + "a" * 64},
        {"module:ppo_torch": "ppo-torch==1.0.2+cpu"},
    ]
    for versions in good:
        assert row_problems(dataclasses.replace(row, versions={**row.versions, **versions})) == [], versions
    bad = [
        ({"module:ppo_torch": "sha256:abc"}, "not sha256:<64 hex digits> or <distribution>==<version>"),
        ({"module:ppo_torch": "1.0"}, "recorded as '1.0'"),
        ({"module:evil": "sha256:" + "a" * 64}, "which its method 'ppo_torch:train' does not name"),
        ({"module:agents.sb3.policy": "sha256:" + "a" * 64}, "does not name"),
    ]
    for versions, reason in bad:
        problems = row_problems(dataclasses.replace(row, versions={**row.versions, **versions}))
        assert any(reason in p for p in problems), (versions, problems)
    sb3 = stored("stable_baselines3")[0]
    recorded = {**sb3.versions, "module:stable_baselines3": "stable_baselines3==2.3.2"}
    assert row_problems(dataclasses.replace(sb3, versions=recorded)) == []
