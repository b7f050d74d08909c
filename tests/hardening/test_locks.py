"""Lock files: in a private folder of the user's, never through a planted link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from placement_gym import locks
from placement_gym.backends.ray_pool import claim_cores
from placement_gym.errors import LockError


@pytest.fixture
def private(tmp_path: Path) -> Path:
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    return folder


def test_the_default_core_lock_folder_is_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(locks.tempfile, "gettempdir", lambda: str(tmp_path))
    cores, fds = claim_cores(1)
    try:
        folder = tmp_path / f"placement-gym-{os.getuid()}" / "cores"
        st = os.lstat(folder)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        assert (folder / f"cpu{cores[0]}.lock").is_file()
        assert not (tmp_path / "placement-gym-cores").exists()
    finally:
        for fd in fds:
            os.close(fd)


def test_a_planted_link_is_refused_and_its_target_untouched(private: Path) -> None:
    target = private.parent / "victim.txt"
    target.write_text("data")
    core = sorted(os.sched_getaffinity(0))[0]
    (private / f"cpu{core}.lock").symlink_to(target)
    with pytest.raises(LockError, match="symbolic link"):
        claim_cores(1, private)
    assert target.read_text() == "data"
    dangling = private / "dangling.lock"
    dangling.symlink_to(private.parent / "created-through-link")
    with pytest.raises(LockError, match="symbolic link"):
        locks.try_lock(dangling)
    assert not (private.parent / "created-through-link").exists()


@pytest.mark.parametrize("problem", ["world-writable", "a link", "a file"])
def test_a_lock_folder_that_is_not_private_is_refused(tmp_path: Path, problem: str) -> None:
    folder = tmp_path / "cores"
    if problem == "world-writable":
        folder.mkdir()
        folder.chmod(0o777)
    elif problem == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    else:
        folder.write_text("")
    with pytest.raises(LockError, match="accessible to other users|not a folder"):
        claim_cores(1, folder)


def test_a_private_folder_taken_by_another_user_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(locks.tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / f"placement-gym-{os.getuid()}").mkdir(mode=0o700)
    monkeypatch.setattr(locks.os, "getuid", lambda: os.geteuid() + 4242)  # as if it were someone else's
    monkeypatch.setattr(locks, "_runtime_base", lambda: tmp_path / f"placement-gym-{os.geteuid()}")
    with pytest.raises(LockError, match="belongs to user id"):
        locks.private_dir("cores")


def test_a_lock_is_exclusive_until_released(private: Path) -> None:
    path = private / "x.lock"
    fd = locks.try_lock(path)
    assert fd is not None and locks.try_lock(path) is None
    os.close(fd)
    with locks.FileLock(path):
        assert locks.try_lock(path) is None
    again = locks.try_lock(path)
    assert again is not None
    os.close(again)


def test_a_lock_path_that_is_a_folder_or_fifo_is_refused(private: Path) -> None:
    (private / "d.lock").mkdir()
    os.mkfifo(private / "f.lock")
    for name in ("d.lock", "f.lock"):
        with pytest.raises(LockError, match="folder|not a regular file"):
            locks.FileLock(private / name).acquire()
