"""The leaderboard: every stored row replays (an entry that no longer reproduces fails CI), the run is
resumable, and the page is generated from the stored rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.records.leaderboard import PAGE, RESULTS, render, run_tier, stored_rows
from experiments.records.validation import validate

ROOT = Path(__file__).resolve().parents[2]
STORED = sorted((ROOT / RESULTS).glob("*/*.jsonl"))


def test_the_leaderboard_has_stored_rows_small_enough_for_git():
    assert STORED, f"no stored rows under {RESULTS}"
    sizes = [p.stat().st_size for p in STORED]
    # the per-task tiers (a large row is ~1.6 KB) and the transfer track
    assert max(sizes) < 1_000_000 and sum(sizes) < 5_000_000


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_stored_row_replays(path):
    rejected = [v.line() for v in validate([path]) if not v.ok]
    assert not rejected, "\n".join(rejected)


def test_the_committed_page_is_generated_from_the_stored_rows():
    expected = render(stored_rows(ROOT / RESULTS))
    assert (ROOT / PAGE).read_text() == expected, "regenerate it: placement-gym leaderboard"


def test_run_is_resumable_and_seedless_methods_run_once(tmp_path, monkeypatch):
    task = ["resnet50/cpu-igpu"]
    assert run_tier("tiny", ["heft", "random_search"], tmp_path, tasks=task, log=lambda *_: None) == 1 + 5
    rows = stored_rows(tmp_path)["tiny"]
    assert sorted((r.method, r.seed) for r in rows) == [("heft", 0)] + [
        ("random_search", s) for s in range(5)
    ]
    for r in rows:
        assert r.protocol and r.tier == "tiny" and r.budget == 100 and r.evaluations <= 100
        assert r.extra["code"] and math.isfinite(r.score) and r.score <= 1 + 1e-9
        assert r.extra["cpu_seconds"] >= 0
        assert len(r.history) <= 12  # thinned at fixed checkpoints
    import experiments.grid as bench

    monkeypatch.setattr(bench, "run_cell", lambda *a, **k: pytest.fail("a stored cell ran again"))
    assert run_tier("tiny", ["heft", "random_search"], tmp_path, tasks=task, log=lambda *_: None) == 0


def test_a_cell_another_live_process_runs_is_skipped(tmp_path):
    """Two `leaderboard --run` processes on one store share the cells instead of running each twice."""
    import subprocess
    import sys

    from experiments.records.leaderboard import store_path
    from placement_gym.protocol import VERSION
    from placement_gym.results import ResultStore, _process_start, cell_key
    from placement_gym.zoo import MODELS

    version = MODELS["resnet50"].version
    key = cell_key("resnet50", version, "cpu-igpu", "simulated", "fused", "random_search", 1, 100, VERSION)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claimer = ResultStore(store_path(tmp_path, "tiny", "random_search"))
        claimer._me = {"pid": other.pid, "host": claimer._me["host"], "started": _process_start(other.pid)}
        assert claimer.claim(key)  # the other process's claim, as its own `--run` would write it
        ran = run_tier("tiny", ["random_search"], tmp_path, tasks=["resnet50/cpu-igpu"], log=lambda *_: None)
        assert ran == 4
        seeds = sorted(r.seed for r in stored_rows(tmp_path, validated=False)["tiny"])
        assert seeds == [0, 2, 3, 4]
    finally:
        other.kill()
        other.wait()
    # its owner gone, the cell is taken over by the next run
    assert run_tier("tiny", ["random_search"], tmp_path, tasks=["resnet50/cpu-igpu"], log=lambda *_: None) == 1


def test_the_page_shows_only_rows_that_validate_each_tier_apart_and_escapes_names(tmp_path):
    """A row scored 5.0 is not ranked, a tiny row in the standard folder is not in the standard table,
    and a method name cannot add table rows or HTML."""
    import dataclasses

    from experiments.records.leaderboard import md_name
    from placement_gym.results import ResultStore, row_line

    run_tier("tiny", ["heft"], tmp_path, tasks=["resnet50/cpu-igpu"], log=lambda *_: None)
    (row,) = ResultStore(tmp_path / "tiny" / "heft.jsonl").rows()
    forged = dataclasses.replace(row, method="m_topo", score=5.0)
    (tmp_path / "tiny" / "m_topo.jsonl").write_text(row_line(forged))
    (tmp_path / "standard").mkdir()
    (tmp_path / "standard" / "heft.jsonl").write_text(row_line(row))  # a tiny row filed as standard
    rejected: list[str] = []
    rows = stored_rows(tmp_path, rejected=rejected)
    assert [r.method for r in rows["tiny"]] == ["heft"] and "standard" not in rows
    assert len(rejected) == 2 and any("filed under standard/" in r for r in rejected)
    page = render(rows, rejected)
    assert "## Tier `standard`" not in page and "2 stored rows did not pass" in page

    evil = "x` | 9 |\n| 1 | <script>alert(1)</script> [a](b)"
    cell = md_name(evil)
    assert "|" not in cell and "<" not in cell and "\n" not in cell and "`" not in cell and "[" not in cell
    assert md_name("milp:time_limit=30") == "`milp:time_limit=30`"
    table = render({"tiny": [dataclasses.replace(row, method=evil)]})
    body = [line for line in table.splitlines() if "9" in line and "script" in line]
    rows_of_tables = [line for line in body if line.startswith("|")]  # the ranked row and the per-task row
    assert len(rows_of_tables) == 2 and all(line.count("|") in (9, 3) for line in rows_of_tables)
    assert all("|" not in line for line in body if not line.startswith("|"))  # the runs note: prose


def test_the_mask_binding_tasks_are_ranked_apart_from_the_train_tasks(tmp_path):
    """Rows of the masked split get a section of their own, with the groups their placements put on a
    blocked device; the train tables (and their task columns) stay the train tasks'."""
    tasks = ["resnet50/cpu-igpu", "masked"]
    run_tier("tiny", ["heft", "single_device"], tmp_path, tasks=tasks, log=lambda *_: None)
    rows = stored_rows(tmp_path)
    assert {r.platform for r in rows["tiny"]} == {"cpu-igpu", "cpu-igpu-lowmem", "cpu-igpu-carveout"}
    page = render(rows)
    train, masked = page.split("## Mask-binding tasks")
    assert "carveout" not in train and "lowmem" not in train and "resnet50 / cpu-igpu" in train
    assert "### `whisper_tiny/cpu-igpu-carveout` (4 blocked (group, device) pairs)" in masked
    assert "| `heft` | `tiny` | 1 |" in masked and "| `single_device` | `tiny` | 1 |" in masked


def test_validate_rerun_finds_a_sample_of_cheap_stored_rows_identical(capsys):
    """CI runs ``placement-gym validate --rerun`` on stored standard rows of cheap methods, end to end: the
    files of two list schedulers and of a seeded torch learner (the pretrained PPO policy, about a second a
    row); the sample holds rows of both kinds."""
    from experiments.cli import validate

    names = ("heft", "m_etf", "pretrained_ppo")
    files = [str(ROOT / RESULTS / "standard" / f"{name}.jsonl") for name in names]
    status = validate.main(["--rerun", "4", "--sample-seed", "0", "--no-cache", "--quiet", *files])
    out = capsys.readouterr().out
    identical = [line for line in out.splitlines() if line.startswith("IDENTICAL")]
    assert status == 0 and "rerun: 4 of 4 sampled rows identical" in out, out
    learner = [line for line in identical if "pretrained_ppo" in line]
    assert 0 < len(learner) < len(identical)


def test_seeds_restrict_a_run_which_a_later_run_completes_and_the_page_states_what_is_short(tmp_path):
    from experiments.records.leaderboard import coverage
    from placement_gym.errors import ConfigError

    task = ["resnet50/cpu-igpu"]
    quiet = {"log": lambda *_: None}
    assert run_tier("tiny", ["heft", "random_search"], tmp_path, tasks=task, seeds=[0, 1], **quiet) == 1 + 2
    rows = stored_rows(tmp_path)["tiny"]
    ran = sorted((r.method, r.seed) for r in rows)
    assert ran == [("heft", 0), ("random_search", 0), ("random_search", 1)]
    assert coverage([r for r in rows if r.method == "random_search"]) == "1 of 12 tasks x seeds 0-1"
    page = render({"tiny": rows})
    assert "Runs short of the protocol's 12 tasks x seeds 0-4: `heft`: 1 of 12 tasks x seed 0 only" in page
    assert run_tier("tiny", ["random_search"], tmp_path, tasks=task, **quiet) == 3  # seeds 2-4 added
    with pytest.raises(ConfigError, match="not seeds of protocol"):
        run_tier("tiny", ["random_search"], tmp_path, tasks=task, seeds=[5], **quiet)


def test_the_large_tier_names_its_methods_without_rows(tmp_path):
    from experiments.records.leaderboard import LARGE_METHODS

    run_tier("tiny", ["random_search"], tmp_path, tasks=["resnet50/cpu-igpu"], seeds=[0], log=lambda *_: None)
    (row,) = stored_rows(tmp_path)["tiny"]
    import dataclasses

    large = dataclasses.replace(row, tier="large", budget=5000)
    page = render({"large": [large]})
    assert "seed 0 only" in page and "No rows at this tier yet: `local_search`" in page
    assert all(f"`{m}`" in page for m in LARGE_METHODS)


def test_a_method_without_rows_on_some_of_the_tiers_tasks_is_not_ranked_even_alone_in_its_track(tmp_path):
    import dataclasses

    tasks = ["resnet50/cpu-igpu", "resnet50/cpu-dgpu"]
    run_tier("tiny", ["random_search"], tmp_path, tasks=tasks, seeds=[0], log=lambda *_: None)
    run_tier("tiny", ["local_search"], tmp_path, tasks=tasks[:1], seeds=[0], log=lambda *_: None)
    rows = [dataclasses.replace(r, tier="large", budget=5000) for r in stored_rows(tmp_path)["tiny"]]
    page = render({"large": rows})
    white = page.split("White-box track", 1)[1].split("### ", 1)[0]
    assert "| 1 | `local_search`" not in white
    assert "Not ranked: `local_search`: rows on 1 of 2 tasks so far" in white
    assert "`local_search`: 1 of 12 tasks x seed 0 only" in white
    other = [r for r in rows if r.method == "random_search" and r.platform == "cpu-dgpu"]
    alone = render({"large": [r for r in rows if r.method == "local_search"] + other})
    assert "No method of this track has rows on every task of the tier yet." in alone
