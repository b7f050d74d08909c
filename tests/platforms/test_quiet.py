"""How busy the host was while a calibration ran (placement_gym.platforms.quiet): read, judged, recorded
with the stored figures, and refused when busy unless accepted. The CPU accounts are simulated: no test
here times anything."""

from __future__ import annotations

import json
import logging

import pytest

from placement_gym import cache
from placement_gym.errors import BusyHostError
from placement_gym.platforms import quiet
from placement_gym.platforms.quiet import CpuSample, assess, measure_quietly, read_cpu_sample

CORES = (0, 1)


class FakeAccounts:
    """A reader of simulated CPU accounts: every reading is 2 s after the previous one, in which other
    processes kept ``share`` of each core busy and this process used ``own`` seconds of CPU on top."""

    def __init__(self, share: float, own: float = 0.0, hz: int = 100):
        self.share, self.own, self.hz, self.readings = share, own, hz, 0
        self._busy = {c: 0.0 for c in CORES}
        self._own = 0.0

    def __call__(self, cores: tuple[int, ...]) -> CpuSample:
        assert tuple(cores) == CORES
        self.readings += 1
        k = self.readings
        for c in cores:  # this process's own time goes to core 0
            self._busy[c] += 2 * self.hz * self.share + (self.own * self.hz if c == 0 else 0)
        self._own += self.own
        ticks = {c: (round(self._busy[c]), 2 * self.hz * k) for c in cores}
        return CpuSample(ticks=ticks, own=self._own, load=4.0 * self.share, wall=2.0 * k)


@pytest.fixture
def accounts(monkeypatch):
    """The simulated accounts every calibration reads (quiet to begin with), the guard on, no pauses."""
    fake = FakeAccounts(share=0.02)
    monkeypatch.setattr(quiet, "read_cpu_sample", fake)
    monkeypatch.setattr(quiet, "RETRY_PAUSE", 0.0)
    monkeypatch.setattr(quiet, "_noted", set())
    monkeypatch.delenv(quiet.ALLOW_BUSY_ENV_VAR, raising=False)
    return fake


# ---------------------------------------------------------------- reading and judging


def test_proc_stat_counts_steal_as_busy_and_iowait_as_idle(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  300 10 40 1600 20 2 4 60 14 0\n"
        "cpu0 100 5 20 800 10 1 2 30 7 0\n"  # guest (7) is inside user already
        "cpu1 200 5 20 800 10 1 2 30 7 0\n"
        "intr 12345\n"
    )
    sample = read_cpu_sample((0, 1), stat)
    assert sample.ticks == {0: (158, 968), 1: (258, 1068)}
    assert sample.own >= 0 and sample.wall > 0
    assert read_cpu_sample((0, 2), stat) is None  # a core it does not list
    assert read_cpu_sample((0,), tmp_path / "missing") is None  # no /proc/stat: not Linux


def test_others_share_is_busy_time_minus_this_process_own():
    before = CpuSample({0: (0, 0), 1: (0, 0)}, own=0.0, load=0.5, wall=0.0)
    # 2 s on two cores at 100 ticks/s: core 0 busy 190 ticks of which 180 are this process's, core 1 10
    quiet_after = CpuSample({0: (190, 200), 1: (10, 200)}, own=1.8, load=0.6, wall=2.0)
    record = assess(before, quiet_after, CORES, hz=100)
    assert record["status"] == "quiet" and record["others_share"] == pytest.approx(0.05)
    assert record["core_busy"] == {"0": 0.95, "1": 0.05} and record["seconds"] == 2.0
    assert (record["load_before"], record["load_after"]) == (0.5, 0.6)
    # another program kept core 1 busy throughout: half of the two cores' time
    busy_after = CpuSample({0: (190, 200), 1: (200, 200)}, own=1.8, load=1.6, wall=2.0)
    record = assess(before, busy_after, CORES, hz=100)
    assert record["status"] == "busy" and record["others_share"] == pytest.approx(0.525)
    # own time accounted a little above the cores' busy time: never a negative share
    assert assess(before, CpuSample({0: (170, 200), 1: (0, 200)}, 1.8, 0.5, 2.0), CORES, hz=100)[
        "others_share"
    ] == 0.0


def test_what_cannot_be_judged_is_unknown():
    before = CpuSample({0: (0, 0), 1: (0, 0)}, own=0.0, load=0.5, wall=0.0)
    short = CpuSample({0: (10, 10), 1: (10, 10)}, own=0.0, load=0.5, wall=0.1)  # 0.1 s: too few ticks
    record = assess(before, short, CORES, hz=100)
    assert record["status"] == "unknown" and record["others_share"] is None and "too short" in record["reason"]
    record = assess(None, None, CORES)
    assert record["status"] == "unknown" and "/proc/stat" in record["reason"]


# ---------------------------------------------------------------- retrying, refusing, accepting


def test_a_busy_calibration_is_retried_then_refused_in_one_line():
    calls, pauses = [], []
    with pytest.raises(BusyHostError) as info:
        measure_quietly(
            lambda: calls.append(1) or {"copy_bandwidth": 1.15e9},
            "the copies",
            allow_busy=False,
            cores=CORES,
            reader=FakeAccounts(share=0.85),
            pause=7.0,
            sleep=pauses.append,
        )
    assert len(calls) == quiet.CALIBRATION_ATTEMPTS == 3 and pauses == [7.0, 7.0]
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "the host was busy while measuring the copies: other processes used at least 85% of cores 0,1 "
        "in each of 3 attempts (load average 3.40), so nothing was stored"
    )
    assert "rerun on a quiet machine" in message and "--allow-busy" in message
    assert "PLACEMENT_GYM_ALLOW_BUSY=1" in message


def test_a_quiet_retry_is_kept():
    busy, calm = FakeAccounts(0.9), FakeAccounts(0.02)
    samples = [busy(CORES), busy(CORES), calm(CORES), calm(CORES)]  # the first attempt busy, the second quiet
    results = iter(["busy figures", "quiet figures"])
    figures, record = measure_quietly(
        lambda: next(results), "x", cores=CORES, reader=lambda cores: samples.pop(0), sleep=lambda s: None
    )
    assert figures == "quiet figures" and samples == []
    assert record["status"] == "quiet" and record["attempts"] == 2 and not record["accepted_busy"]


def test_accepting_a_busy_host_is_explicit_and_recorded(monkeypatch):
    def run(**kwargs):
        return measure_quietly(
            lambda: "figures", "x", cores=CORES, reader=FakeAccounts(0.6), sleep=lambda s: None, **kwargs
        )

    figures, record = run(allow_busy=True)
    assert figures == "figures"
    assert record["status"] == "busy" and record["accepted_busy"] and record["attempts"] == 3
    assert record["others_share"] == pytest.approx(0.6)
    monkeypatch.setenv(quiet.ALLOW_BUSY_ENV_VAR, "1")  # where no argument reaches (gym.make)
    assert run()[1]["accepted_busy"]
    with quiet.accept_busy(False), pytest.raises(BusyHostError):  # the command line's choice wins
        run()
    monkeypatch.setenv(quiet.ALLOW_BUSY_ENV_VAR, "0")
    with pytest.raises(BusyHostError):
        run()
    with quiet.accept_busy():
        assert run()[1]["accepted_busy"]


# ---------------------------------------------------------------- stored with the local platform's figures

FIGURES = {
    "copy_bandwidth": 14.3e9,
    "copy_latency": 1e-6,
    "boundary_bandwidth": 2e9,
    "blocked_boundary_bandwidth": 1e9,
    "invoke_overhead": 4e-5,
    "parallel_speedup": 1.7,
}
BOUNDARIES = {
    "chains": {"tiny": {"ks": [1, 2], "times": [1e-3, 1.1e-3], "slope": 1e-4, "tensor_bytes": 64}},
    "fixed": 8e-5,
    "bandwidth": 2e9,
    "blocked_bandwidth": 1e9,
    "load_before": 0.1,
    "load_after": 0.1,
}


@pytest.fixture
def fake_local(monkeypatch, tmp_path, accounts):
    """The local platform of cores 0,1 with simulated figures, stored in an empty cache; returns the list
    of what was measured."""
    from placement_gym.measured import boundary_costs
    from placement_gym.platforms import local

    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    measured = []
    for module in (local, boundary_costs):
        monkeypatch.setattr(module, "process_cores", lambda: CORES)
    monkeypatch.setattr(local, "measure_local_figures", lambda: measured.append("figures") or dict(FIGURES))
    monkeypatch.setattr(
        boundary_costs, "measure_boundary_costs", lambda platform: measured.append("boundaries") or BOUNDARIES
    )
    monkeypatch.setattr(local, "local_accelerators", lambda: [])
    local._local_platform.cache_clear()
    yield measured
    local._local_platform.cache_clear()


def _entries(root) -> list[str]:
    base = root / "platform"
    return sorted(p.name for p in base.iterdir() if not p.name.startswith(".")) if base.exists() else []


def test_busy_figures_are_not_stored(fake_local, accounts, tmp_path):
    from placement_gym.platforms import local

    accounts.share = 0.85
    with pytest.raises(BusyHostError, match="the host was busy while measuring the local platform's figures"):
        local.local_figures_entry()
    assert fake_local == ["figures"] * 3 and _entries(tmp_path) == []  # measured 3 times, stored nothing
    accounts.share = 0.02  # the machine went quiet: measured once more, stored, and used from then on
    figures, record = local.local_figures_entry()
    assert figures == FIGURES and record["status"] == "quiet" and record["others_share"] == pytest.approx(0.02)
    assert record["cores"] == [0, 1] and record["measured_at"].endswith("Z")
    readings = accounts.readings
    assert local.local_figures_entry()[0] == FIGURES
    assert fake_local == ["figures"] * 4 and accounts.readings == readings  # a warm read measures nothing


def test_accepted_busy_figures_are_recorded_and_noted(fake_local, accounts, tmp_path, caplog, monkeypatch):
    from placement_gym.platforms import local

    accounts.share = 0.6
    figures, record = local.local_figures_entry(allow_busy=True)
    assert figures == FIGURES and record["status"] == "busy" and record["accepted_busy"]
    (entry,) = _entries(tmp_path)
    stored = json.loads((tmp_path / "platform" / entry / "meta.json").read_text())[quiet.FIELD]
    assert stored["accepted_busy"] and stored["others_share"] == pytest.approx(0.6)
    monkeypatch.setattr(quiet, "_noted", set())  # a later process: uses them, and says what they are, once
    with caplog.at_level(logging.INFO, logger="placement_gym"):
        local.local_figures_entry()
        local.local_figures_entry()
    notes = [r.getMessage() for r in caplog.records if "BUSY" in r.getMessage()]
    assert len(notes) == 1 and "other processes used 60% of them" in notes[0]
    assert "accepted with --allow-busy" in notes[0] and "placement-gym calibrate --boundaries-only" in notes[0]
    assert fake_local == ["figures"] * 3  # three busy attempts, the last kept; later uses measure nothing


def test_entries_stored_before_the_record_still_load(fake_local, accounts, tmp_path):
    from placement_gym.platforms import local

    local.local_figures_entry()
    (entry,) = _entries(tmp_path)
    path = tmp_path / "platform" / entry / "meta.json"
    meta = json.loads(path.read_text())
    del meta[quiet.FIELD], meta["meta_sha256"]
    path.write_text(json.dumps({**meta, "meta_sha256": cache.meta_checksum(meta)}))  # as an older version wrote it
    accounts.share = 0.9  # would be refused if it were measured
    figures, record = local.local_figures_entry()
    assert figures == FIGURES and fake_local == ["figures"]  # used as it is, not measured again
    assert record["status"] == "unknown" and record["stored_at"].endswith("Z")
    assert "how busy the host was is unknown" in quiet.describe(record)
    assert quiet.short(record) == "unknown"


def test_a_warm_platform_measures_nothing(fake_local, accounts):
    from placement_gym.platforms import local

    local.local_platform()
    assert fake_local == ["figures", "boundaries"]
    local._local_platform.cache_clear()  # a new process with a warm cache
    readings = accounts.readings
    accounts.share = 0.9
    local.local_platform()
    assert fake_local == ["figures", "boundaries"] and accounts.readings == readings


# ---------------------------------------------------------------- placement-gym calibrate


def test_calibrate_refuses_a_busy_host_and_reports_the_figures_in_use(fake_local, accounts, capsys):
    from experiments import cli

    accounts.share = 0.85
    assert cli.main(["calibrate", "--boundaries-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("placement-gym: error: the host was busy while measuring the local platform's")
    assert "other processes used at least 85% of cores 0,1 in each of 3 attempts" in err[-1]
    assert "--allow-busy" in err[-1]

    assert cli.main(["calibrate", "--boundaries-only", "--allow-busy"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("figures in use:") :].splitlines()
    assert len(lines) == 3 and all("while the host was BUSY" in line for line in lines[1:])
    assert "other processes used 85% of them, accepted with --allow-busy" in lines[1]

    accounts.share = 0.02
    assert cli.main(["calibrate", "--boundaries-only"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("figures in use:") :].splitlines()
    assert lines[1].startswith("  the local platform's figures (copies, segment starts, overlap of its virtual")
    assert all(", quiet: other processes used 2% of them" in line for line in lines[1:])
    assert "on cores 0,1" in lines[1] and "load average 0.08 -> 0.08" in lines[1]
