"""Cache entries belong to the key they are read for (no copied or linked entries), and a full disk is one
clear CacheError that leaves nothing behind."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from placement_gym import cache
from placement_gym.errors import CacheError, CorruptModelError

Usage = namedtuple("Usage", "total used free")


def _writer(calls: list, payload: bytes):
    def write(directory: Path) -> dict:
        calls.append(directory)
        (directory / "data.bin").write_bytes(payload)
        return {"what": payload[:8].decode()}

    return write


def _leftovers(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir() if ".tmp." in p.name or ".corrupt." in p.name)


@pytest.mark.parametrize("how", ["copied", "linked", "moved"])
def test_another_keys_entry_in_its_place_is_rebuilt(tmp_path: Path, how: str) -> None:
    calls: list = []
    a, _ = cache.cached_entry("graph", "alpha", _writer(calls, b"alpha-data"), root=tmp_path)
    b, _ = cache.cached_entry("graph", "beta", _writer(calls, b"beta-data!"), root=tmp_path)
    shutil.rmtree(b)
    if how == "copied":
        shutil.copytree(a, b)
    elif how == "linked":
        b.symlink_to(a, target_is_directory=True)
    else:
        os.rename(a, b)
    with pytest.raises(CorruptModelError, match="records key 'alpha', not 'beta'|is a link"):
        cache.verify_entry(b, kind="graph", key="beta")
    directory, meta = cache.cached_entry("graph", "beta", _writer(calls, b"beta-data!"), root=tmp_path)
    assert (directory / "data.bin").read_bytes() == b"beta-data!" and meta["entry"]["key"] == "beta"
    assert not directory.is_symlink() and len(calls) == 3
    if how != "moved":  # the entry linked to is left alone
        assert (a / "data.bin").read_bytes() == b"alpha-data"
    assert _leftovers(tmp_path / "graph") == []


def test_an_entry_read_as_another_kind_is_rebuilt(tmp_path: Path) -> None:
    calls: list = []
    a, _ = cache.cached_entry("ir", "same", _writer(calls, b"ir-bytes"), root=tmp_path)
    (tmp_path / "graph").mkdir()
    shutil.copytree(a, tmp_path / "graph" / "same")
    cache.cached_entry("graph", "same", _writer(calls, b"graphbyt"), root=tmp_path)
    assert len(calls) == 2


def test_a_file_of_an_entry_linked_elsewhere_is_rebuilt(tmp_path: Path) -> None:
    calls: list = []
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"0123456789")
    directory, _ = cache.cached_entry("t", "k", _writer(calls, b"0123456789"), root=tmp_path)
    (directory / "data.bin").unlink()
    (directory / "data.bin").symlink_to(outside)  # same size and hash: only the link gives it away
    with pytest.raises(CorruptModelError, match="link"):
        cache.verify_entry(directory)
    cache.cached_entry("t", "k", _writer(calls, b"0123456789"), root=tmp_path)
    assert len(calls) == 2 and not (directory / "data.bin").is_symlink()
    assert outside.read_bytes() == b"0123456789"


def test_a_writer_that_leaves_a_link_is_refused(tmp_path: Path) -> None:
    def write(directory: Path) -> dict:
        (directory / "model.bin").symlink_to("/etc/passwd")
        return {}

    with pytest.raises(CacheError, match="link"):
        cache.cached_entry("t", "k", write, root=tmp_path)
    assert not (tmp_path / "t" / "k").exists() and _leftovers(tmp_path / "t") == []


def test_entries_of_the_older_format_are_kept_only_for_their_own_model(tmp_path: Path) -> None:
    calls: list = []
    for key in ("tiny_cnn-v1-ov1-irab", "tiny_bert-v1-ov1-ircd"):
        directory, meta = cache.cached_entry("graph", key, _writer(calls, b"x" * 8), root=tmp_path)
        name = key.split("-")[0]
        meta = {k: v for k, v in meta.items() if k != "entry"} | {"name": name, "version": 1}
        (directory / "meta.json").write_text(json.dumps(meta))  # as written before entries recorded keys
    cache.cached_entry("graph", "tiny_cnn-v1-ov1-irab", _writer(calls, b"x" * 8), root=tmp_path)
    assert len(calls) == 2  # its own: kept
    base = tmp_path / "graph"
    shutil.rmtree(base / "tiny_bert-v1-ov1-ircd")
    shutil.copytree(base / "tiny_cnn-v1-ov1-irab", base / "tiny_bert-v1-ov1-ircd")
    cache.cached_entry("graph", "tiny_bert-v1-ov1-ircd", _writer(calls, b"x" * 8), root=tmp_path)
    assert len(calls) == 3  # tiny_cnn's in tiny_bert's place: rebuilt


def test_a_swapped_zoo_graph_entry_gives_the_right_model(tmp_path: Path, monkeypatch) -> None:
    """The issue's case: a model's graph entry replaced by tiny_cnn's came back with tiny_cnn's groups."""
    from placement_gym.benchmarks import load_benchmark

    want = {name: load_benchmark(name).coarsen("fused").num_groups for name in ("tiny_cnn", "tiny_bert")}
    assert want["tiny_cnn"] != want["tiny_bert"]
    root = cache.cache_root()
    for kind in ("ir", "graph"):  # a private copy of the session cache's entries of the two models
        for entry in (root / kind).iterdir():
            if entry.name.startswith(("tiny_cnn-", "tiny_bert-")) and entry.is_dir():
                shutil.copytree(entry, tmp_path / kind / entry.name)
    monkeypatch.setenv(cache.CACHE_ENV_VAR, str(tmp_path))
    graphs = {p.name.split("-")[0]: p for p in (tmp_path / "graph").iterdir()}
    bert_entry = max((p for p in (tmp_path / "graph").iterdir() if p.name.startswith("tiny_bert-")),
                     key=lambda p: p.stat().st_mtime)  # fmt: skip
    shutil.rmtree(bert_entry)
    shutil.copytree(graphs["tiny_cnn"], bert_entry)
    assert load_benchmark("tiny_bert").coarsen("fused").num_groups == want["tiny_bert"]


# ---------------------------------------------------------------------------------------- a full disk
def _full_disk_writer(error: Exception):
    def write(directory: Path) -> dict:
        (directory / "model.xml").write_bytes(b"<net/>" * 100)
        raise error

    return write


@pytest.mark.parametrize(
    "error, free",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 10**9),
        (
            RuntimeError("Exception from src/core/src/pass/serialize.cpp: basic_ios::clear: iostream error"),
            4096,
        ),
    ],
)
def test_a_full_disk_is_a_cache_error_with_the_free_space_and_leaves_nothing(
    tmp_path: Path, monkeypatch, error: Exception, free: int
) -> None:
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda path: Usage(10**10, 10**10 - free, free))
    with pytest.raises(CacheError, match=rf"the disk holding {tmp_path / 'ir'} is full \(.* MiB free"):
        cache.cached_entry("ir", "bert", _full_disk_writer(error), root=tmp_path)
    assert not (tmp_path / "ir" / "bert").exists() and _leftovers(tmp_path / "ir") == []
    monkeypatch.undo()
    calls: list = []  # space freed: the next writer builds the entry
    directory, _ = cache.cached_entry("ir", "bert", _writer(calls, b"ok"), root=tmp_path)
    assert (directory / "data.bin").read_bytes() == b"ok"


def test_a_failure_with_room_on_the_disk_keeps_its_own_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda path: Usage(10**12, 0, 10**12))
    with pytest.raises(RuntimeError, match="conversion failed"):
        cache.cached_entry("ir", "m", _full_disk_writer(RuntimeError("conversion failed")), root=tmp_path)
    assert _leftovers(tmp_path / "ir") == []


def test_a_full_disk_at_fsync_is_caught_before_the_entry_is_renamed_into_place(tmp_path, monkeypatch) -> None:
    real = cache._fsync

    def fsync(path: Path) -> None:
        if path.name == "meta.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path)

    monkeypatch.setattr(cache, "_fsync", fsync)
    with pytest.raises(CacheError, match="is full"):
        cache.cached_entry("ir", "m", _writer([], b"data"), root=tmp_path)
    assert not (tmp_path / "ir" / "m").exists() and _leftovers(tmp_path / "ir") == []


def test_a_linked_cache_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / ".k.lock").symlink_to(target)
    with pytest.raises(CacheError, match="link"):
        cache.cached_entry("t", "k", _writer([], b"d"), root=tmp_path)
    assert target.read_text() == "keep me"


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 1 MiB tmpfs (needs mount rights: skipped without them)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_openvino_writing_ir_onto_a_really_full_disk_is_a_cache_error(tiny_disk: Path) -> None:
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    def write(directory: Path) -> dict:
        x = ops.parameter([1, 1024], ov.Type.f32, name="x")
        w = ops.constant(np.ones((1024, 1024), dtype=np.float32))  # 4 MiB of weights on a 1 MiB disk
        ov.save_model(ov.Model([ops.matmul(x, w, False, False)], [x], "big"), directory / "model.xml")
        return {}

    with pytest.raises(CacheError, match=r"is full \(.* MiB free"):
        cache.cached_entry("ir", "big", write, root=tiny_disk)
    assert not (tiny_disk / "ir" / "big").exists() and _leftovers(tiny_disk / "ir") == []
    assert shutil.disk_usage(tiny_disk).used < 64 * 2**10  # the partial files were removed


def test_a_huge_or_damaged_meta_json_is_a_corrupt_entry_and_rebuilt(tmp_path: Path) -> None:
    calls: list = []
    directory, _ = cache.cached_entry("t", "k", _writer(calls, b"data"), root=tmp_path)
    texts = (
        "x" * (2 * 2**20),
        '{"files": [1, 2]}',
        '{"files": {"../../x": {"bytes": 1}}}',
        "[]",
        '{"files": {"a": 5}}',
    )
    for text in texts:
        (directory / "meta.json").write_text(text)
        with pytest.raises(CorruptModelError, match="meta.json|missing"):
            cache.verify_entry(directory)
        cache.cached_entry("t", "k", _writer(calls, b"data"), root=tmp_path)
    assert len(calls) == 1 + len(texts)


def test_no_room_for_the_temporary_folder_is_a_cache_error(tmp_path: Path, monkeypatch) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.tempfile, "mkdtemp", full)
    with pytest.raises(CacheError, match="is full"):
        cache.cached_entry("t", "k", _writer([], b"d"), root=tmp_path)
