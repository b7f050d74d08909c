"""The replay validator: it accepts rows that reproduce and rejects altered ones, one line per row."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from experiments import cli
from experiments.records.leaderboard import run_tier
from experiments.records.validation import VerdictCache, validate
from placement_gym.results import ResultRow, ResultStore, row_line

TASK = ("resnet50", "cpu-igpu")


@pytest.fixture(scope="module")
def row(tmp_path_factory) -> ResultRow:
    """HEFT's row on one small task, written by the leaderboard runner at the tiny tier."""
    out = tmp_path_factory.mktemp("rows")
    run_tier("tiny", ["heft"], out, tasks=["/".join(TASK)], log=lambda *_: None)
    (stored,) = ResultStore(out / "tiny" / "heft.jsonl").rows()
    return stored


def write(path, *rows: ResultRow) -> str:
    path.write_text("".join(row_line(r) for r in rows))
    return str(path)


def test_accepts_a_stored_row(row, tmp_path):
    (verdict,) = validate([write(tmp_path / "rows.jsonl", row)])
    assert verdict.ok and verdict.replayed_latency == pytest.approx(row.latency, rel=1e-12)
    assert verdict.line().startswith("OK")


def test_rejects_an_altered_placement_latency_version_task_or_score(row, tmp_path):
    from placement_gym.tasks import reference_optimum

    ref = reference_optimum(row.model, row.graph_version, row.platform)
    faster = row.latency * 0.99  # with its own score: only the replay tells
    moved = list(row.placement)
    moved[len(moved) // 2] = 1 - moved[len(moved) // 2]
    altered = [
        (dataclasses.replace(row, placement=moved), "replays at"),
        (dataclasses.replace(row, latency=row.latency * 0.99), "not the score of its latency"),
        (dataclasses.replace(row, graph_version=row.graph_version + 1), "graph version"),
        (dataclasses.replace(row, platform="cpu-dgpu-v0"), "not a task of protocol"),
        (dataclasses.replace(row, backend="measured"), "cannot be replayed"),
        (dataclasses.replace(row, score=row.score + 0.1), "is not the score of its latency"),
        (dataclasses.replace(row, latency=faster, score=ref.score(faster)), "replays at"),
        (dataclasses.replace(row, placement=row.placement[:-1]), "placement has"),
        (dataclasses.replace(row, placement=[5] * len(row.placement)), "placement rejected"),
        (dataclasses.replace(row, evaluations=row.budget + 1), "over the budget"),
        (dataclasses.replace(row, task_sha256="0" * 64), "task hash"),
    ]
    assert validate([write(tmp_path / "rows.jsonl", row)])[0].ok
    for altered_row, reason in altered:  # each alone: together they would also repeat one cell
        (verdict,) = validate([write(tmp_path / "rows.jsonl", altered_row)])
        assert not verdict.ok and reason in verdict.line(), verdict.line()
        assert verdict.line().startswith("REJECTED") and "line" in verdict.where


def test_cli_exit_status_and_messages(row, tmp_path, capsys):
    good = write(tmp_path / "good.jsonl", row)
    assert cli.main(["validate", good]) == 0
    assert "all 1 rows reproduce" in capsys.readouterr().out

    bad = tmp_path / "bad.jsonl"
    data = json.loads(row_line(row))
    data["latency"] = data["latency"] / 2
    bad.write_text(row_line(row) + json.dumps(data) + "\n" + '{"model": "resnet50", "torn\n')
    assert cli.main(["validate", good, str(bad)]) != 0
    captured = capsys.readouterr()
    assert captured.out.count("OK") == 1 and captured.out.count("REJECTED") == 3
    assert "bad.jsonl line 2" in captured.out and "bad.jsonl line 3" in captured.out
    assert "a second row of its cell" in captured.out  # the good row again, in the second file
    assert "3 of 4 rows rejected" in captured.err
    assert cli.main(["validate", str(tmp_path / "missing.jsonl")]) != 0
    assert "missing.jsonl does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------------- provenance
@pytest.fixture(scope="module")
def store(tmp_path_factory) -> list[ResultRow]:
    """HEFT (seedless) and local_search (seeds 0-4) on one task at the tiny tier."""
    out = tmp_path_factory.mktemp("store")
    run_tier("tiny", ["heft", "local_search"], out, tasks=["/".join(TASK)], log=lambda *_: None)
    return ResultStore(out / "tiny" / "heft.jsonl").rows() + ResultStore(out / "tiny" / "local_search.jsonl").rows()


def check(rows: list[ResultRow], tmp_path) -> list:
    return validate([write(tmp_path / "rows.jsonl", *rows)], cache=VerdictCache(enabled=False))


def test_a_clean_store_passes_with_reruns(store, tmp_path):
    assert all(v.ok for v in check(store, tmp_path))


def test_rejects_rows_whose_provenance_does_not_hold(row, tmp_path):
    """The named cases: another row's placement under a deterministic method, a tier and budget that
    disagree, an unknown protocol or tier, seeds outside the protocol's, a missing, NaN or impossible
    score, a latency under the proven bound, an invented code commit."""
    from placement_gym.tasks import reference_optimum

    ref = reference_optimum(row.model, row.graph_version, row.platform)
    optimum = dataclasses.replace(row, placement=list(ref.placement), latency=ref.latency, score=1.0)
    cases = [
        (optimum, "rerun places"),
        (dataclasses.replace(row, tier="standard"), "is not tier standard's 500"),
        (dataclasses.replace(row, tier="standard", budget=100_000), "budget 100000"),
        (dataclasses.replace(row, budget=None), "budget None"),
        (dataclasses.replace(row, protocol="v2"), "protocol 'v2' is unknown"),
        (dataclasses.replace(row, tier="bogus"), "tier 'bogus' is not a tier"),
        (dataclasses.replace(row, protocol=None), "without a protocol"),
        (dataclasses.replace(row, seed=7), "seed 7 is not a seed"),
        (dataclasses.replace(row, seed=-3), "seed -3 is not a seed"),
        (dataclasses.replace(row, score=math.nan), "score missing"),
        (dataclasses.replace(row, score=5.0), "above the task's ceiling"),
        (dataclasses.replace(row, latency=ref.lower_bound * 0.9), "below the task's proven lower bound"),
        (dataclasses.replace(row, extra={**row.extra, "code": "0123456789ab"}), "not a commit in this"),
        (dataclasses.replace(row, extra={**row.extra, "code": "HEAD; rm"}), "is not a commit"),
    ]
    for case, reason in cases:
        (verdict,) = check([case], tmp_path)
        assert not verdict.ok and reason in verdict.line(), (reason, verdict.line())
    data = json.loads(row_line(row))
    data["score"] = None  # null in the file
    (tmp_path / "null.jsonl").write_text(json.dumps(data) + "\n")
    (verdict,) = validate([tmp_path / "null.jsonl"], cache=VerdictCache(enabled=False))
    assert "score missing" in verdict.line()


def test_a_track_against_the_methods_declared_one_is_rejected(row, tmp_path):
    from agents.specs import method_track

    declared = method_track("heft")
    other = "black-box" if declared == "white-box" else "white-box"
    (verdict,) = check([dataclasses.replace(row, track=other)], tmp_path)
    assert "track" in verdict.line() and not verdict.ok
    (verdict,) = check([dataclasses.replace(row, track=declared)], tmp_path)
    assert verdict.ok


def test_rejects_cherry_picked_seed_sets_and_repeated_cells(store, tmp_path):
    heft = [r for r in store if r.method == "heft"]
    search = [r for r in store if r.method == "local_search"]
    other = [dataclasses.replace(r, platform="cpu-dgpu") for r in search]  # a second task, all seeds
    # the same replacement on the second task leaves rows that do not replay; the set check alone:
    from experiments.records.provenance import set_problems

    partial = set_problems(heft + search[:3] + other)
    assert all("partial or cherry-picked" in p[0] for p in partial[1:4])
    assert not any(partial[4:])
    lucky = set_problems([search[3]])  # one good seed alone
    assert "starts at 0" in lucky[0][0]
    (verdict,) = [v for v in check([search[3]], tmp_path)]
    assert not verdict.ok
    repeated = check([*heft, *heft], tmp_path)
    assert repeated[0].ok and "a second row of its cell" in repeated[1].line()


FIELDS = {
    "model": ["bert", "inception_v3", "tiny_cnn", "resnet50 "],
    "graph_version": [0, 2, 7],
    "platform": ["cpu-dgpu", "multi-accel", "model-parallel", "cpu-igpu-v0"],
    "backend": ["measured", "ray"],
    "coarsening": ["none", "fused+k64", "k"],
    "groups": [0, 1, 10_000],
    "method": ["heft", "m_topo", "m_etf", "m_sct", "single_device", "local_search", "random_search", "metis"],
    "seed": [-3, 1, 2, 7, 100],
    "budget": [None, 1, 99, 500, 5_000, 100_000],
    "latency": ["scale", "inf", "nan", "tiny"],
    "evaluations": ["more", "less"],
    "placement": ["flip", "shorter", "zeros", "ones"],
    "task_sha256": ["0" * 64, "f" * 64],
    "protocol": [None, "v0", "v2", "V1"],
    "tier": [None, "standard", "large", "bogus"],
    "score": [math.nan, 1.0, 5.0, -0.5, "nudge"],
    "track": ["black-box", "white-box"],
    "code": ["0123456789ab", "deadbeef", "unknownx", "HEAD"],
}


def corrupt(row: ResultRow, field: str, rng) -> ResultRow:
    """``row`` with ``field`` changed to another value (the same value is never drawn)."""
    value = FIELDS[field][int(rng.integers(len(FIELDS[field])))]
    if field == "code":
        return dataclasses.replace(row, extra={**row.extra, "code": value})
    if field == "latency":
        value = {"scale": row.latency * (1 + rng.uniform(1e-6, 0.5) * rng.choice([-1, 1])), "inf": math.inf,
                 "nan": math.nan, "tiny": 1e-9}[value]  # fmt: skip
    elif field == "evaluations":
        value = row.evaluations + 1 if value == "more" or row.evaluations == 0 else row.evaluations - 1
    elif field == "placement":
        p = list(row.placement)
        if value == "flip":
            i = int(rng.integers(len(p)))
            p[i] = (p[i] + 1) % 2
        value = {"flip": p, "shorter": p[:-1], "zeros": [0] * len(p), "ones": [1] * len(p)}[value]
    elif field == "score" and value == "nudge":
        value = row.score + rng.choice([-1, 1]) * 1e-4
    if getattr(row, field) == value or (field == "placement" and list(row.placement) == value):
        return corrupt(row, field, rng)
    if field == "track":
        from experiments.records.provenance import declared_track

        declared = declared_track(row.method)
        if declared is None or value == declared:
            return None  # a track the method declares (or none declared): not a corruption
    return dataclasses.replace(row, **{field: value})


def test_fuzz_every_corruption_of_provenance_or_score_is_rejected(store):
    """Random single-field corruptions of random rows of a clean store (a seeded generator): validation of
    the store with the corrupted row rejects it, whatever field and value."""
    import numpy as np

    from experiments.records.provenance import set_problems
    from experiments.records.validation import Replayer, check_row

    rng = np.random.default_rng(20240611)
    replayer = Replayer()
    missed = []
    for _ in range(120):
        i = int(rng.integers(len(store)))
        field = list(FIELDS)[int(rng.integers(len(FIELDS)))]
        bad = corrupt(store[i], field, rng)
        if bad is None:
            continue
        if field == "method" and bad.method == "heft" and list(bad.placement) == list(store[0].placement):
            continue  # heft's own placement filed under heft is heft's row
        rows = store[:i] + [bad] + store[i + 1 :]
        verdict = check_row(bad, "fuzz", replayer)
        problems = list(verdict.problems) + set_problems(rows)[i]
        if not problems:
            missed.append(f"{field}={getattr(bad, field, bad.extra.get('code'))!r} on {store[i].method} seed {store[i].seed}")
    assert not missed, "accepted corruptions:\n" + "\n".join(missed)


def test_a_rerun_that_differs_names_the_cpu_kernels_a_torch_row_was_made_with():
    """Rows of runs that imported torch record torch's CPU kernels; a rerun that differs and ran other kernels
    says so (a seeded torch method repeats only with the same kernels)."""
    import torch

    from experiments.records.validation import rerun_row
    from placement_gym.results import ResultStore, library_versions

    assert library_versions()["torch_cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
    path = Path(__file__).resolve().parents[2] / "results" / "leaderboard" / "standard" / "pretrained_ppo.jsonl"
    row = min(ResultStore(path).rows(), key=lambda r: r.wall_time)  # well under a second to rerun
    moved = [1 - row.placement[0], *row.placement[1:]]
    forged = dataclasses.replace(row, placement=moved, versions={**row.versions, "torch_cpu_kernels": "VSX"})
    problems = rerun_row(forged).problems
    assert any("rerun places 1 of" in p for p in problems)
    assert any("made with torch's VSX CPU kernels, the rerun ran" in p for p in problems)
    assert rerun_row(row).ok  # the stored row itself repeats


# ---------------------------------------------------------------------- the CPU a row was made on
def test_rows_record_the_cpu_and_a_fingerprint_of_it(monkeypatch):
    """Every row's versions name the CPU (vendor, model, family/model/stepping, the flags kernels dispatch
    on) and a short fingerprint of it and of torch's kernels; narrowing the kernels by environment variable
    is recorded and changes the fingerprint."""
    from placement_gym.results import KERNEL_VARIABLES, _dispatch_flag, library_versions

    for name in KERNEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    versions = library_versions()
    assert {"cpu_vendor", "cpu_model", "cpu_id", "cpu_isa", "cpu_caches", "cpu_fingerprint"} <= versions.keys()
    assert "cpu_kernel_env" not in versions
    fingerprint = versions["cpu_fingerprint"]
    assert len(fingerprint) == 12 and int(fingerprint, 16) >= 0
    assert library_versions()["cpu_fingerprint"] == fingerprint  # stable
    isa = versions["cpu_isa"].split()
    assert isa == sorted(isa) and all(_dispatch_flag(f) for f in isa)
    assert [f for f in ("sse2", "avx", "avx2", "avx512f", "avx512_bf16", "amx_tile", "fma") if _dispatch_flag(f)] == [
        "avx2", "avx512f", "avx512_bf16", "amx_tile", "fma"
    ]  # fmt: skip
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    narrowed = library_versions()
    assert narrowed["cpu_kernel_env"] == "MKL_CBWR=COMPATIBLE" and narrowed["cpu_fingerprint"] != fingerprint


def test_made_on_tells_this_cpu_another_and_an_unrecorded_one(row):
    from experiments.records.validation import OTHER_CPU, THIS_CPU, UNKNOWN_CPU, made_on

    assert made_on(row) == THIS_CPU  # made in this test session
    other = dataclasses.replace(row, versions={**row.versions, "cpu_fingerprint": "0" * 12})
    old = dataclasses.replace(row, versions={k: v for k, v in row.versions.items() if not k.startswith("cpu_")})
    assert made_on(other) == OTHER_CPU and made_on(old) == UNKNOWN_CPU


def _reruns_that_differ(monkeypatch, differ: set[int]):
    """Make ``validate --rerun`` find the rows of ``seed in differ`` differing (the validation pass itself
    reruns nothing)."""
    from experiments.records import validation
    from experiments.records.validation import Verdict

    check_row = validation.check_row
    monkeypatch.setattr(validation, "check_row", lambda row, where, replayer, rerun=True: check_row(row, where, replayer, False))

    def rerun_row(row, where="rerun", trusted=()):
        problems = ("rerun places 3 of 40 groups elsewhere",) if row.seed in differ else ()
        return Verdict(where, row, problems, row.latency)

    monkeypatch.setattr(validation, "rerun_row", rerun_row)


def _made(rows: list[ResultRow], cpus: list[str]) -> list[ResultRow]:
    """Rows with the CPU each says it was made on: ``here``, ``other`` or ``none``."""
    out = []
    for r, cpu in zip(rows, cpus, strict=True):
        versions = {k: v for k, v in r.versions.items() if not k.startswith("cpu_")}
        if cpu != "none":
            versions |= {"cpu_model": "Some CPU", "cpu_fingerprint": "0" * 12} if cpu == "other" else {
                k: v for k, v in r.versions.items() if k.startswith("cpu_")
            }
        out.append(dataclasses.replace(r, versions=versions))
    return out


def test_validate_rerun_judges_each_rerun_by_the_cpu_that_made_its_row(store, tmp_path, monkeypatch, capsys):
    """A rerun that differs from a row made on this CPU fails (status 2); one that differs from a row made on
    another CPU or recording none is reported as such (OTHER-CPU, UNKNOWN-CPU; status 3), never as a pass;
    every line says which CPU made the row."""
    local = [r for r in store if r.method == "local_search"]  # seeds 0-4
    rows = _made(local, ["here", "here", "other", "none", "other"])
    path = write(tmp_path / "rows.jsonl", *rows)
    args = ["validate", "--rerun", "5", "--no-cache", path]

    _reruns_that_differ(monkeypatch, set())
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("IDENTICAL") == 5 and "rerun: 5 of 5 sampled rows identical" in out
    assert out.count("(made on this CPU)") == 2 and out.count("(made on another CPU)") == 2
    assert out.count("(made on an unrecorded CPU)") == 1
    assert "rows made: 2 on this CPU, 2 on another CPU, 1 on an unrecorded CPU" in out

    _reruns_that_differ(monkeypatch, {2, 3, 4})  # the rows made elsewhere or on an unknown CPU
    assert cli.main(args) == 3
    captured = capsys.readouterr()
    assert captured.out.count("OTHER-CPU ") == 2 and captured.out.count("UNKNOWN-CPU ") == 1
    assert "DIFFERS " not in captured.out and "Some CPU" in captured.out and "the row records no CPU" in captured.out
    assert "rerun: 2 of 5 sampled rows identical" in captured.out
    assert "2 differ but were made on another CPU" in captured.out and "1 differ but record no CPU" in captured.out
    assert "3 of 5 reruns differ from rows made on another CPU or on an unrecorded one" in captured.err

    _reruns_that_differ(monkeypatch, {0, 2})  # one made here
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out.count("DIFFERS ") == 1 and captured.out.count("OTHER-CPU ") == 1
    assert "1 differ on the CPU that made them" in captured.out
    assert "1 of 5 reruns differ on the CPU that made them, 1 more differ from rows made elsewhere" in captured.err
