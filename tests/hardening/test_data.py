"""Data kept safe (issue #12, 4-6): bench resume, ``show`` on torn or hostile records, the disk cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.cli.show import load_record, show
from experiments.grid import run_grid
from experiments.runs import ResultStore
from placement_gym.errors import PlacementError, RecordError

GRID = dict(models=["tiny_cnn"], platform="cpu-dgpu", backend="simulated", progress=False)


@pytest.fixture()
def store_with_row(tmp_path: Path) -> tuple[Path, dict]:
    run_grid(tmp_path, methods=["heft"], seeds=[0], budget=5, **GRID)
    path = tmp_path / "results.jsonl"
    return path, json.loads(path.read_text().splitlines()[0])


# ---------------------------------------------------------------------- 4. bench resume
def test_a_row_appended_after_a_torn_line_stays_readable(store_with_row) -> None:
    path, _ = store_with_row
    with open(path, "a") as f:
        f.write('{"model": "tiny_cnn", "trunc')  # killed mid-write
    rows = run_grid(path.parent, methods=["heft", "m_sct"], seeds=[0], budget=5, **GRID)
    assert sorted(r.method for r in rows) == ["heft", "m_sct"]
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    rejected = [
        json.loads(line) for line in (path.parent / "results.rejected.jsonl").read_text().splitlines()
    ]
    assert (
        rejected[0]["line"] == 2
        and rejected[0]["text"].endswith("trunc")
        and "not valid JSON" in rejected[0]["reason"]
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"history": 5}, "history"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({"placement": None}, "placement"),
        ({"seed": [0]}, "seed"),
        ({"seed": True}, "seed: Value error, a boolean is not a number"),
        ({"latency": "fast"}, "latency"),
        ("drop:method", "method: Field required"),
        ("null", "JSON object, got NoneType"),
        ("array", "JSON object, got list"),
        ("deep", "nested too deeply"),
    ],
)
def test_a_malformed_row_is_set_aside_with_its_line_number(store_with_row, capsys, change, message) -> None:
    path, row = store_with_row
    if change == "null":
        text = "null"
    elif change == "array":
        text = "[1, 2]"
    elif change == "deep":
        text = "[" * 100_000
    elif isinstance(change, str):
        text = json.dumps({k: v for k, v in row.items() if k != change.split(":")[1]})
    else:
        text = json.dumps({**row, "method": "m_sct", **change})
    with open(path, "a") as f:
        f.write(text + "\n")
    with pytest.warns(RuntimeWarning, match=f"line 2: .*{message}"):
        assert len(ResultStore(path).rows()) == 1
    rows = run_grid(path.parent, methods=["heft"], seeds=[0], budget=5, **GRID)
    assert len(rows) == 1 and "line 2: " in capsys.readouterr().out
    assert len(path.read_text().splitlines()) == 1
    assert message.split(":")[0] in (path.parent / "results.rejected.jsonl").read_text()


def test_seed_written_as_text_is_the_same_cell(store_with_row, monkeypatch) -> None:
    path, row = store_with_row
    path.write_text(json.dumps({**row, "seed": "0", "budget": "5"}) + "\n")
    import experiments.grid as bench

    monkeypatch.setattr(bench, "run_cell", lambda *a, **k: pytest.fail("finished cell was rerun"))
    rows = run_grid(path.parent, methods=["heft"], seeds=[0], budget=5, **GRID)
    assert len(rows) == 1 and rows[0].seed == 0 and rows[0].budget == 5


# ---------------------------------------------------------------------- 5. show
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"model": "tiny_cnn", "plat', "not valid JSON"),
        ("[" * 100_000, "nested too deeply"),
        ("[1, 2]", "JSON object"),
        ('{"model": "tiny_cnn"}', "platform: Field required"),
        (
            '{"model": "tiny_cnn", "platform": "cpu-dgpu", "coarsening": "fused+kx", "placement": [0]}',
            "coarsening",
        ),
        (
            '{"model": "tiny_cnn", "platform": "cpu-dgpu", "coarsening": "fused", "placement": [1e999]}',
            "placement",
        ),
        (
            '{"model": "tiny_cnn", "platform": "cpu-dgpu", "coarsening": "fused", "placement": [99999999999999999999]}',
            "placement",
        ),
        (
            '{"model": "tiny_cnn", "platform": "cpu-dgpu", "coarsening": "fused", "placement": [0], "latency": "x"}',
            "latency",
        ),
    ],
)
def test_show_names_the_problem_of_a_bad_record(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "best_placement.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=message):
        load_record(path)


def test_show_rows_of_a_results_file(store_with_row) -> None:
    path, row = store_with_row
    with open(path, "a") as f:
        f.write('{"torn\n')
    assert load_record(path).model == "tiny_cnn"  # the bad line is skipped
    with pytest.raises(RecordError, match="row 5 is out of range: .* 1 valid rows"):
        load_record(path, row=5)
    with pytest.raises(RecordError, match="no valid rows for model 'bert'"):
        load_record(path, model="bert")
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="cannot read"):
        load_record(path)
    with pytest.raises(RecordError, match="cannot read"):
        load_record(path.parent)  # a folder


def test_show_checks_placement_against_the_platform(store_with_row) -> None:
    _, row = store_with_row
    with pytest.raises(PlacementError, match="uses device 7"):
        show({**row, "placement": [7] * len(row["placement"])}, None)
    with pytest.raises(PlacementError, match="entries"):
        show({**row, "placement": [0]}, None)


def test_a_record_of_a_model_file_keeps_its_path_and_hash(tmp_path: Path) -> None:
    from placement_gym.zoo import ir_path

    xml = tmp_path / "net.xml"
    source = ir_path("tiny_cnn")
    xml.write_bytes(source.read_bytes())
    xml.with_suffix(".bin").write_bytes(source.with_suffix(".bin").read_bytes())
    rows = run_grid(tmp_path / "out", methods=["heft"], seeds=[0], budget=5, **{**GRID, "models": [str(xml)]})
    record = load_record(tmp_path / "out" / "results.jsonl")
    assert record.model_path == str(xml.resolve()) and record.model_sha256 == rows[0].model_sha256
    assert "heft" in show(record, tmp_path / "p.png")
    weights = xml.with_suffix(".bin")
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\1")  # same size, other content
    with pytest.raises(RecordError, match="has changed since the record was made"):
        show(record, None)
    xml.unlink()
    with pytest.raises(RecordError, match="does not exist"):
        show(record, None)


# ---------------------------------------------------------------------- 6. the disk cache
def _writer(calls: list, size: int = 64):
    def write(directory: Path) -> dict:
        calls.append(directory)
        (directory / "data.bin").write_bytes(bytes(range(256)) * (size // 256 + 1))
        return {"what": "test"}

    return write


def test_same_size_corruption_of_a_large_file_is_detected(tmp_path: Path, monkeypatch) -> None:
    from placement_gym import cache
    from placement_gym.errors import CorruptModelError

    calls: list = []
    directory, meta = cache.cached_entry("t", "big", _writer(calls, 17 * 2**20), root=tmp_path)
    assert meta["files"]["data.bin"]["sha256"] and meta["files"]["data.bin"]["bytes"] > 16 * 2**20
    path = directory / "data.bin"
    with open(path, "r+b") as f:  # one byte in the middle, same size
        f.seek(9 * 2**20)
        byte = f.read(1)
        f.seek(9 * 2**20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptModelError, match="SHA-256"):
        cache.verify_entry(directory)
    cache.cached_entry("t", "big", _writer(calls, 17 * 2**20), root=tmp_path)
    assert len(calls) == 2  # rebuilt
    cache.verify_entry(directory)


def test_an_entry_without_hashes_for_large_files_is_rebuilt(tmp_path: Path) -> None:
    from placement_gym import cache

    calls: list = []
    directory, _ = cache.cached_entry("t", "old", _writer(calls), root=tmp_path)
    meta = json.loads((directory / "meta.json").read_text())
    meta["files"]["data.bin"]["sha256"] = None  # how the 16 MiB shortcut recorded large files
    (directory / "meta.json").write_text(json.dumps(meta))
    cache.cached_entry("t", "old", _writer(calls), root=tmp_path)
    assert len(calls) == 2


def test_stale_temporary_folders_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    from placement_gym import cache

    base = tmp_path / "t"
    base.mkdir()
    stale = [base / ".k.tmp.abc123", base / ".k.corrupt.def456"]
    for folder in stale:
        folder.mkdir()
        (folder / "model.bin").write_bytes(b"half")
    other = base / ".other.tmp.xyz"
    other.mkdir()  # another key's writer may still be running: left alone
    cache.cached_entry("t", "k", _writer([]), root=tmp_path)
    assert not any(folder.exists() for folder in stale) and other.exists()


@pytest.mark.parametrize("where", ["root", "kind", "entry", "lock"])
def test_a_path_in_the_way_is_a_cache_error_before_any_work(tmp_path: Path, where: str) -> None:
    from placement_gym import cache
    from placement_gym.errors import CacheError

    root = tmp_path / "cache"
    if where == "root":
        root.write_text("")
    else:
        root.mkdir()
        if where == "kind":
            (root / "t").write_text("")
        elif where == "entry":
            (root / "t").mkdir()
            (root / "t" / "k").write_text("")
        else:
            (root / "t" / ".k.lock").mkdir(parents=True)
    calls: list = []
    with pytest.raises(CacheError, match="remove it"):
        cache.cached_entry("t", "k", _writer(calls), root=root)
    assert calls == []  # nothing was built


def test_a_verified_file_is_hashed_once_per_process(tmp_path: Path, monkeypatch) -> None:
    from placement_gym import cache

    directory, _ = cache.cached_entry("t", "k", _writer([]), root=tmp_path)
    hashed: list = []
    real = cache._sha256
    monkeypatch.setattr(cache, "_sha256", lambda p: hashed.append(p) or real(p))
    cache.verify_entry(directory)
    assert hashed == []  # hashed when written, remembered
    (directory / "data.bin").write_bytes((directory / "data.bin").read_bytes())  # rewritten: new mtime
    cache.verify_entry(directory)
    assert hashed == [directory / "data.bin"]


def test_a_rebuilt_ir_never_pairs_with_the_old_op_graph(tmp_path: Path, monkeypatch) -> None:
    """Op names differ between two conversions of a model, so a graph cached from one IR must not be
    used with another (the IR of a damaged cache entry is rebuilt)."""
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.errors import CorruptModelError
    from placement_gym.zoo.loading import ir_entry

    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    first = load_benchmark("tiny_cnn")
    weights = ir_entry("tiny_cnn")[0].with_suffix(".bin")
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    weights.write_bytes(bytes(data))
    try:
        model = first.model  # verifies the weights, rebuilds the IR
    except CorruptModelError as exc:
        assert "call load_benchmark again" in str(exc)
    else:  # the rebuilt IR happened to be identical: then it still fits
        assert set(first.ops.names) <= {op.get_friendly_name() for op in model.get_ordered_ops()}
    second = load_benchmark("tiny_cnn")
    names = {op.get_friendly_name() for op in second.model.get_ordered_ops()}
    assert set(second.ops.names) <= names
