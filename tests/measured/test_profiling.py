"""Profiles: splitting layer times over ops (the same op -> layer rule as the ``fused`` coarsening level),
validation against the whole-model time, stale/corrupt profiles redone, the drift warning."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.errors import ProfileWarning
from placement_gym.fusion import op_layer_index
from placement_gym.measured import profiling
from placement_gym.measured.profiling import (
    LayerProfile,
    check_profile,
    layer_owners,
    measure_layer_times,
    profile_op_times,
    profile_record,
    split_layer_times,
    validated_op_times,
)
from placement_gym.platforms import load_platform
from tests.strategies import make_graph
from tests.test_fusion import same_partition


def test_added_nodes_and_unnamed_ops_follow_the_rule():
    # ops: n0 -> n1 -> n2, n1 -> n3; n1 is named by no runtime node (renamed by the runtime)
    ops = make_graph(4, [(0, 1, 1), (1, 2, 1), (1, 3, 1)])
    layers = [
        ("L0", ["n0"], []),
        ("reorder_a", [], ["L0"]),  # feeds L2 only: its time goes to L2
        ("L2", ["n2"], ["reorder_a"]),
        ("L3", ["n3"], ["L0"]),
        ("reorder_b", [], ["L2"]),  # feeds only outputs, which own no op: its producer L2
        ("out2", [], ["reorder_b"]),
        ("out3", [], ["reorder_b", "L3"]),
    ]
    op_node, owner = layer_owners(ops, layers)
    assert op_node.tolist() == [0, 0, 2, 3]  # n1's consumers disagree (L2, L3): its producer's node
    assert owner.tolist()[:5] == [0, 2, 2, 3, 2]
    times = {"L0": 1.0, "reorder_a": 0.5, "L2": 2.0, "L3": 4.0, "reorder_b": 0.25, "ghost": 9.0}
    op_times = split_layer_times(ops, times, layers)
    assert op_times[0] + op_times[1] == pytest.approx(1.0)
    assert op_times[2] == pytest.approx(2.0 + 0.5 + 0.25) and op_times[3] == pytest.approx(4.0)


def test_profiled_times_split_over_exactly_the_fused_groups(tiny_bert):
    """On the CPU, every runtime layer's time goes to the ops of one ``fused`` group, and every op of the
    group takes its time from that layer only."""
    device = load_platform("local").devices[0]
    layers = measure_layer_times(tiny_bert.model, device, warmup=0, runs=1).layers
    names = set(tiny_bert.ops.names)
    assert [[n for n in o if n in names] for _, o, _ in layers] == [
        [n for n in layer if n in names] for layer in tiny_bert.fused_layers
    ]  # the profile's layers are the fusions the coarsening reads
    op_node, owner = layer_owners(tiny_bert.ops, layers)
    coarse = tiny_bert.coarsen("fused")
    assert same_partition(op_node, coarse.assignment)
    assert same_partition(op_node, op_layer_index(tiny_bert.ops, tiny_bert.fused_layers))
    for k, (name, _, _) in enumerate(layers):
        if owner[k] < 0:
            continue
        op_times = split_layer_times(tiny_bert.ops, {name: 1.0}, layers)
        groups = set(coarse.assignment[op_times > 0].tolist())
        assert len(groups) == 1 and op_times.sum() == pytest.approx(1.0)
        assert np.all(op_times[coarse.assignment != groups.pop()] == 0)


# ---------------------------------------------------------------- validation, storage, drift check


def _fake_profiles(monkeypatch, tiny_cnn, wholes: list[float]):
    """Make every profiling pass give the first op a layer time of 1 ms and the next whole-model time."""
    ops = tiny_cnn.ops
    layers = [(f"L{i}", [name], []) for i, name in enumerate(ops.names)]
    times = {f"L{i}": (1e-3 if i == 0 else 0.0) for i in range(ops.num_nodes)}
    calls = iter(wholes)
    passes = []

    def fake(model, device, warmup=3, runs=15):
        passes.append(1)
        return LayerProfile(times, layers, next(calls))

    monkeypatch.setattr(profiling, "measure_layer_times", fake)
    return passes


@pytest.mark.parametrize(
    "wholes, action, passes, factor",
    [
        ([1.05e-3], "ok", 1, 1.0),  # within 10% at once
        ([2e-3, 1.08e-3], "reprofiled", 2, 1.0),  # the second pass agrees
        ([2e-3, 4e-3], "rescaled", 2, 2.0),  # neither does: the better one is rescaled to its whole time
    ],
)
def test_profiles_are_checked_against_the_whole_model_time(
    monkeypatch, tiny_cnn, wholes, action, passes, factor
):
    calls = _fake_profiles(monkeypatch, tiny_cnn, wholes)
    device = load_platform("local").devices[0]
    op_times, record = validated_op_times(tiny_cnn, device)
    assert record["action"] == action and len(calls) == passes == record["attempts"]
    assert record["factor"] == pytest.approx(factor)
    assert op_times.sum() == pytest.approx(1e-3 * factor)
    assert record["ratio"] == pytest.approx(1e-3 / min(wholes, key=lambda w: abs(1e-3 / w - 1)))
    assert record["load_before"] >= 0


def test_stale_and_corrupt_profiles_are_redone(monkeypatch, tmp_path, tiny_cnn):
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    calls = _fake_profiles(monkeypatch, tiny_cnn, [1e-3] * 10)
    device = load_platform("local").devices[0]
    _, meta, made = profile_record(tiny_cnn, device)
    assert made and meta["action"] == "ok" and meta["machine"]["cores"] >= 1 and meta["precision"] == "f32"
    assert not profile_record(tiny_cnn, device)[2] and len(calls) == 1  # used as it is
    # another machine's profile is redone, never used
    from placement_gym.platforms import machine

    real = machine.machine_fingerprint()
    monkeypatch.setattr(machine, "machine_fingerprint", lambda: {**real, "cpu": "another CPU"})
    assert profile_record(tiny_cnn, device)[2] and len(calls) == 2
    monkeypatch.setattr(machine, "machine_fingerprint", lambda: real)
    assert profile_record(tiny_cnn, device)[2] and len(calls) == 3  # and back
    # a damaged file is found by its hash and rebuilt
    (entry,) = [p for p in (tmp_path / "profile").iterdir() if not p.name.startswith(".")]
    data = bytearray((entry / "op_times.npy").read_bytes())
    data[-1] ^= 0xFF
    (entry / "op_times.npy").write_bytes(bytes(data))
    assert profile_record(tiny_cnn, device)[2] and len(calls) == 4
    # calibrate's force redoes an intact one
    assert profile_record(tiny_cnn, device, force=True)[2] and len(calls) == 5


def test_a_profile_far_from_a_fresh_measurement_warns(monkeypatch, tiny_cnn):
    device = load_platform("local").devices[0]
    monkeypatch.setattr(profiling, "whole_model_time", lambda model, device, runs=10: 1e-3)
    with pytest.warns(ProfileWarning, match="calibrate"):
        assert check_profile(tiny_cnn, device, np.full(4, 0.5e-3)) == pytest.approx(1.0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ProfileWarning)
        assert check_profile(tiny_cnn, device, np.full(4, 0.28e-3)) == pytest.approx(0.12)


def test_real_profile_is_validated_and_summed(tmp_path, monkeypatch, tiny_bert):
    """A real profile of tiny_bert: its per-op sum matches its recorded whole-model time (after rescaling
    if validation needed it)."""
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    device = load_platform("local").devices[0]
    op_times, meta, _ = profile_record(tiny_bert, device)
    assert meta["action"] in profiling.ACTIONS and op_times.shape == (tiny_bert.ops.num_nodes,)
    if meta["action"] == "rescaled":
        assert op_times.sum() == pytest.approx(meta["whole"])
    else:
        assert abs(op_times.sum() / meta["whole"] - 1) <= profiling.TOLERANCE
    assert profile_op_times(tiny_bert, device, check=False) == pytest.approx(op_times)


def test_a_profile_made_on_a_busy_host_is_not_stored(monkeypatch, tmp_path, tiny_cnn):
    """Profiles are calibrations too: one made while other processes took the cores is measured again,
    then refused and not stored, unless accepted, which its record and calibrate's table say."""
    from experiments.cli.calibrate import table
    from placement_gym.errors import BusyHostError
    from placement_gym.platforms import Device, quiet
    from tests.platforms.test_quiet import CORES, FakeAccounts

    assert tiny_cnn.model is not None and tiny_cnn.content_sha256  # read from the session's cache first
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    monkeypatch.delenv(quiet.ALLOW_BUSY_ENV_VAR, raising=False)
    monkeypatch.setattr(quiet, "read_cpu_sample", FakeAccounts(share=0.7))
    monkeypatch.setattr(quiet, "RETRY_PAUSE", 0.0)
    monkeypatch.setattr(quiet, "process_cores", lambda: CORES)
    calls = _fake_profiles(monkeypatch, tiny_cnn, [1e-3] * 10)
    device = Device("cpu0", "virtual", "CPU", "f32", 2**30, {"f32": 1e11}, 1e10, 0.0)
    with pytest.raises(BusyHostError, match="measuring the profile of tiny_cnn on cpu0: other processes"):
        profile_record(tiny_cnn, device)
    stored = tmp_path / "profile"
    assert len(calls) == 3  # three attempts
    assert not stored.exists() or not [p for p in stored.iterdir() if not p.name.startswith(".")]
    _, meta, made = profile_record(tiny_cnn, device, allow_busy=True)
    assert made and len(calls) == 6
    assert meta[quiet.FIELD]["status"] == "busy" and meta[quiet.FIELD]["accepted_busy"]
    _, again, made = profile_record(tiny_cnn, device)  # stored: used without measuring
    assert not made and len(calls) == 6 and again[quiet.FIELD] == meta[quiet.FIELD]
    assert "| BUSY, accepted (others 70%) |" in table([{**again, "model": "tiny_cnn", "device": "cpu0"}])
