"""Every lock file the project takes: opened without following links, in folders that are safe to use.

A lock is an exclusive ``flock`` on a file, released by the kernel when its descriptor is closed or the
process dies, however it dies. Lock files are opened with ``O_NOFOLLOW`` and never truncated, so a
symbolic link planted where a lock file belongs is refused instead of creating or truncating the file it
points to, and a lock path that is not a regular file (a folder, a FIFO) is refused too.

Locks that are not inside a folder the user chose (the cache's locks live in the cache) go in a private
folder of the user's (:func:`private_dir`): ``$XDG_RUNTIME_DIR/placement-gym/`` when the session has one,
else ``<tmp>/placement-gym-<uid>/``, created with mode 0700 and checked before every use: it must be a real
folder (not a link), owned by this user, and neither group- nor world-accessible. Another user can
therefore neither hold nor redirect them; the flip side is that claims (for example the cores pinned Ray
workers hold, :func:`placement_gym.backends.ray_pool.claim_cores`) are per user.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from placement_gym.errors import LockError


def _runtime_base() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            st = os.stat(runtime)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
                return Path(runtime) / "placement-gym"
        except OSError:
            pass
    return Path(tempfile.gettempdir()) / f"placement-gym-{os.getuid()}"


def check_private(folder: Path) -> Path:
    """Refuse ``folder`` unless it is a real folder owned by this user with no group or other access.

    Raises:
        LockError: Saying what is wrong with it.
    """
    try:
        st = os.lstat(folder)
    except OSError as exc:
        raise LockError(f"lock folder {folder} cannot be used: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise LockError(f"lock folder {folder} is not a folder (a link or a file is in its place); remove it")
    if st.st_uid != os.getuid():
        raise LockError(f"lock folder {folder} belongs to user id {st.st_uid}, not to you ({os.getuid()})")
    if st.st_mode & 0o077:
        raise LockError(
            f"lock folder {folder} is accessible to other users (mode {stat.S_IMODE(st.st_mode):o}); "
            f"run chmod 700 {folder}"
        )
    return folder


def private_dir(name: str) -> Path:
    """The private lock folder ``name`` of this user (created 0700 if missing; see the module docstring).

    Raises:
        LockError: If it, or its parent, cannot be created or is not private.
    """
    base = _runtime_base()
    for folder in (base, base / name):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise LockError(f"cannot create the lock folder {folder}: {exc.strerror or exc}") from None
        check_private(folder)
    return base / name


def open_lock_file(path: Path) -> int:
    """A descriptor of the lock file ``path`` (created 0600 if missing), never through a link.

    Raises:
        LockError: If ``path`` is a symbolic link, not a regular file, or cannot be opened.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockError(f"lock file {path} is a symbolic link; remove it") from None
        if exc.errno == errno.EISDIR:
            raise LockError(f"lock file {path} is a folder, not a lock file; remove it") from None
        raise LockError(f"cannot open lock file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockError(f"lock file {path} is not a regular file; remove it")
    return fd


def try_lock(path: Path) -> int | None:
    """Take the lock ``path`` if no one holds it: its descriptor (close it to release), else ``None``.

    Raises:
        LockError: See :func:`open_lock_file`.
    """
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class FileLock:
    """A blocking exclusive lock on ``path``, as a context manager (one holder per open; not re-entrant).

    Example:
        >>> with FileLock(folder / ".entry.lock"):  # doctest: +SKIP
        ...     build()
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Wait for the lock and take it.

        Raises:
            LockError: See :func:`open_lock_file`.
        """
        fd = open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Release the lock (no-op if not held)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


__all__ = ["FileLock", "check_private", "open_lock_file", "private_dir", "try_lock"]
