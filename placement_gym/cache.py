"""An on-disk cache of converted artefacts (OpenVINO IR, graphs, fusion groups), safe for concurrent use.

Layout: ``<cache root>/<kind>/<key>/`` holds the files of one entry plus ``meta.json``, which records the
size and the SHA-256 of every file (hashed once, when the entry is written) and a checksum of its own fields
(``meta_sha256``: an edited figure of a profile or a swapped file record makes the entry corrupt; entries
written before meta.json carried one are checked by their files' hashes alone). An entry is written into a
temporary directory next to its final place and renamed into place only when complete, under a file lock, so
a reader never sees a half-written entry and two writers never build the same entry twice. Temporary
directories left by a writer that was killed are removed by the next writer of that entry (under the same
lock). An entry whose files no longer match ``meta.json`` (a changed byte anywhere, of any file size) is
reported as corrupt and, for entries the cache can rebuild, rebuilt. A caller may also declare an intact
entry stale (``accept``: a profile taken on another machine) or ask for a new one (``force``); it is
replaced the same way.

Reading verifies every file's hash; a file already verified by this process and unchanged since
(same size, inode and modification time) is not hashed again, so a process pays for hashing BERT's
weights once. A path in the way (a file where a folder belongs, a lock path that is a folder) is a
:class:`~placement_gym.errors.CacheError`, raised before any entry is built.

The root is ``$PLACEMENT_GYM_CACHE`` if set, else ``~/.cache/placement_gym``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from placement_gym.errors import CacheError, CacheWarning, ConfigError, CorruptModelError, LockError
from placement_gym.files import read_text
from placement_gym.locks import FileLock

CACHE_ENV_VAR = "PLACEMENT_GYM_CACHE"
#: Free bytes below which a failed write is reported as a full disk (OpenVINO reports one as
#: ``basic_ios::clear``, not as an ``OSError``).
LOW_SPACE_BYTES = 64 * 2**20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: Files this process has hashed and found intact: path -> (size, inode, mtime_ns, ctime_ns, sha256).
_VERIFIED: dict[str, tuple[int, int, int, int, str]] = {}


def cache_root() -> Path:
    """The cache directory (``$PLACEMENT_GYM_CACHE`` or ``~/.cache/placement_gym``)."""
    root = os.environ.get(CACHE_ENV_VAR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "placement_gym"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def _digest_record_path(key: str) -> Path:
    return cache_root() / "file-hashes" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _digest_record(key: str, stamps: tuple, digest: str) -> dict[str, Any]:
    body = {"path": key, "stamps": [list(s) for s in stamps], "sha256": digest}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return {**body, "checksum": hashlib.sha256(text.encode()).hexdigest()}


def recall_digest(key: str, stamps: tuple) -> str | None:
    """The SHA-256 another process recorded for the files of ``key`` at exactly these ``stamps`` (size,
    inode, modification and change time of each file: a replaced or edited file has others), if the
    record under ``file-hashes/`` is intact; else ``None``."""
    try:
        record = json.loads(_digest_record_path(key).read_text())
        digest = record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(digest, str) or record != _digest_record(key, stamps, digest):
        return None  # another file state, another path, or an edited record
    return digest


def record_digest(key: str, stamps: tuple, digest: str) -> None:
    """Record the SHA-256 of ``key``'s files at ``stamps`` for other processes (best effort: a read-only
    cache only costs hashing again)."""
    target = _digest_record_path(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_digest_record(key, stamps, digest)))
        os.replace(tmp, target)
    except OSError:
        pass


def _fingerprint(directory: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for path in sorted(directory.iterdir()):
        if path.is_symlink():
            raise CacheError(
                f"the writer of {directory} made {path.name} a link; an entry holds its own files"
            )
        if path.name == "meta.json" or not path.is_file():
            continue
        files[path.name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    return files


def meta_checksum(meta: dict[str, Any]) -> str:
    """SHA-256 of an entry's metadata, every field but ``meta_sha256`` itself."""
    fields = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(directory: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` and flush every file of ``directory`` and the folder itself to the disk, so an
    entry renamed into place is complete even after a power cut, and a full disk shows up here."""
    signed = {**meta, "meta_sha256": meta_checksum(meta)}
    (directory / "meta.json").write_text(json.dumps(signed, indent=1, sort_keys=True))
    for path in directory.iterdir():
        _fsync(path)
    _fsync(directory)


def _file_stamp(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _matches(path: Path, size: int, digest: str) -> bool:
    """Whether ``path`` has ``size`` bytes and SHA-256 ``digest`` (memoised while the file is unchanged, in
    this process and, through :func:`record_digest`, across processes)."""
    st = path.stat()
    if st.st_size != size:
        return False
    stamp = (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, digest)
    key = str(path)
    if _VERIFIED.get(key) == stamp:
        return True
    stamps = (stamp[:4],)
    if recall_digest(key, stamps) != digest:  # not recorded by another process at this file state
        actual = _sha256(path)
        if _file_stamp(path) == stamp[:4]:  # unchanged while it was read
            record_digest(key, stamps, actual)
        if actual != digest:
            return False
    _VERIFIED[key] = stamp
    return True


def _remember(path: Path, digest: str) -> None:
    st = path.stat()
    _VERIFIED[str(path)] = (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, digest)


def verify_entry(
    directory: Path, defer: tuple[str, ...] = (), *, kind: str | None = None, key: str | None = None
) -> dict[str, Any]:
    """Check an entry's files against its ``meta.json`` and return the metadata.

    Args:
        directory: The entry.
        defer: Files whose content hash is not checked now (their size and recorded hash still are):
            the caller checks them with a full :func:`verify_entry` before it reads them.
        kind, key: The entry this must be (``meta.json`` records them): an entry copied or moved into
            another's place is another entry's, whatever its files' hashes say.

    Raises:
        CorruptModelError: If the entry or one of its files is a symbolic link, ``meta.json`` is missing,
            unreadable or does not match its checksum, records another kind or key (or none: an older
            format), or a file is missing, has another size or another hash (an entry written before
            hashes covered every file has none for its large files, and counts as corrupt so that it is
            rebuilt with them).
    """
    meta_path = directory / "meta.json"
    if directory.is_symlink() or meta_path.is_symlink():
        raise CorruptModelError(f"cache entry {directory} is a link; an entry must hold its own files")
    try:
        meta = json.loads(read_text(meta_path, "cache metadata"))  # bounded: a damaged meta.json may be huge
        recorded = meta["files"]
        if not isinstance(recorded, dict) or not all(
            isinstance(info, dict) and type(info.get("bytes")) is int for info in recorded.values()
        ):
            raise ValueError("'files' is not a mapping of file records with sizes")
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise CorruptModelError(f"cache entry {directory} has no valid meta.json ({exc})") from exc
    if "meta_sha256" in meta and meta["meta_sha256"] != meta_checksum(meta):
        raise CorruptModelError(
            f"cache entry {directory}: meta.json does not match its checksum (edited or damaged)"
        )
    meta.pop("meta_sha256", None)
    _check_identity(directory, meta, kind, key)
    for name, info in recorded.items():
        path = directory / name
        if "/" in name or name in ("", ".", "..") or path.is_symlink() or not path.is_file():
            raise CorruptModelError(f"cache entry {directory} is missing {name} (or has a link in its place)")
        if path.stat().st_size != info["bytes"]:
            raise CorruptModelError(
                f"{path} has {path.stat().st_size} bytes, expected {info['bytes']} (truncated or overwritten)"
            )
        if not isinstance(info.get("sha256"), str):
            raise CorruptModelError(
                f"cache entry {directory} records no SHA-256 for {name} (an older format)"
            )
        if name not in defer and not _matches(path, info["bytes"], info["sha256"]):
            raise CorruptModelError(f"{path} does not match its recorded SHA-256 (modified or damaged)")
    return meta


def _check_identity(directory: Path, meta: dict[str, Any], kind: str | None, key: str | None) -> None:
    """Refuse an entry that records another kind or key than the one it is read for.

    An entry written before entries recorded them passes if it names a model whose name and version
    begin ``key`` (the graph and IR entries of a model, ``<name>-v<version>-...``), so caches need not
    be rebuilt; any other such entry is refused (and rebuilt)."""
    record = meta.get("entry")
    if record is None and key is not None:
        name, version = meta.get("name"), meta.get("version")
        if not (isinstance(name, str) and key.startswith(f"{name}-v{version}-")):
            raise CorruptModelError(
                f"cache entry {directory} records no kind and key and names model {name!r} version "
                f"{version!r}, not the {key!r} it is read for (another entry's files, or an older format)"
            )
        return
    for field, expected in (("kind", kind), ("key", key)):
        found = record.get(field) if isinstance(record, dict) else None
        if expected is not None and found != expected:
            raise CorruptModelError(
                f"cache entry {directory} records {field} {found!r}, not {expected!r} (another entry's "
                "files were put in its place)"
            )


def _check_layout(root: Path, base: Path, final: Path, lock: Path) -> None:
    """Refuse paths that are in the way before anything is built (see the module docstring)."""
    for path, what in ((root, "the cache root"), (base, "a cache folder")):
        if path.exists() and not path.is_dir():
            raise CacheError(f"{what} {path} is a file, not a folder; remove it or set ${CACHE_ENV_VAR}")
    if final.exists() and not final.is_dir():
        raise CacheError(f"cache entry {final} is a file, not a folder; remove it")
    if lock.is_dir() or lock.is_symlink():
        raise CacheError(f"cache lock {lock} is a folder or a link, not a lock file; remove it")


def _free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _raise_if_disk_full(base: Path, kind: str, key: str, exc: Exception, free: int | None) -> None:
    """Turn a write that failed for want of space into a :class:`CacheError` naming the folder and the
    free space when it failed (OpenVINO's serializer reports a full disk as ``basic_ios::clear``: the free
    space tells)."""
    errno_full = isinstance(exc, OSError) and exc.errno in _DISK_FULL
    if errno_full or (free is not None and free < LOW_SPACE_BYTES and not isinstance(exc, CacheError)):
        room = "unknown" if free is None else f"{free / 2**20:.2f} MiB"
        raise CacheError(
            f"cannot write cache entry {kind}/{key}: the disk holding {base} is full ({room} free; "
            f"{' '.join(str(exc).split())[:200]}). Free space there or point ${CACHE_ENV_VAR} at another "
            "disk; nothing was left in the cache"
        ) from exc


def _remove_stale(base: Path, key: str) -> None:
    """Delete temporary and corrupt-entry folders of ``key`` left by killed writers (the key's lock is held)."""
    for pattern in (f".{key}.tmp.*", f".{key}.corrupt.*"):
        for stale in base.glob(pattern):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)


def cached_entry(
    kind: str,
    key: str,
    write: Callable[[Path], dict[str, Any]],
    *,
    root: Path | None = None,
    rebuild_corrupt: bool = True,
    defer: tuple[str, ...] = (),
    accept: Callable[[Path, dict[str, Any]], bool] | None = None,
    force: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Return the directory of entry ``kind/key``, creating it with ``write`` if needed.

    Args:
        kind: Entry family (``"ir"``, ``"graph"``...), a subdirectory of the root.
        key: Unique, filesystem-safe name of the entry (include every version that affects it).
        write: Fills an empty directory with the entry's files and returns metadata to record.
        root: Cache root; default :func:`cache_root`.
        rebuild_corrupt: Rebuild a corrupt entry instead of raising.
        defer: Files of an existing entry whose content hash is checked later (see :func:`verify_entry`).
        accept: Called with an intact existing entry's directory and metadata; False makes it stale, and it
            is replaced (atomically, under the lock) by a new one, as a corrupt entry is.
        force: Replace the entry even if it is intact and accepted.

    Returns:
        ``(directory, metadata)``; the metadata has the ``write`` result plus ``files``.

    Raises:
        CorruptModelError: If the entry is corrupt and ``rebuild_corrupt`` is false.
        CacheError: If a path of the cache is in the way or cannot be created (before ``write`` runs).
    """
    root = root or cache_root()
    base = root / kind
    final = base / key
    lock = base / f".{key}.lock"
    _check_layout(root, base, final, lock)
    if final.is_dir() and not force:  # fast path without the lock: complete entries never change in place
        try:
            meta = verify_entry(final, defer, kind=kind, key=key)
            if accept is None or accept(final, meta):
                return final, meta
        except CorruptModelError:
            if not rebuild_corrupt:
                raise
    file_lock = FileLock(lock)
    try:
        base.mkdir(parents=True, exist_ok=True)
        file_lock.acquire()
    except OSError as exc:  # a race made a path a file, or no permission: say so before any work
        raise CacheError(f"cannot use the cache at {base}: {exc}") from exc
    except LockError as exc:
        raise CacheError(str(exc)) from None
    try:
        return _build(base, final, kind, key, write, rebuild_corrupt, defer, accept, force)
    finally:
        file_lock.release()


def _build(
    base: Path,
    final: Path,
    kind: str,
    key: str,
    write: Callable[[Path], dict[str, Any]],
    rebuild_corrupt: bool,
    defer: tuple[str, ...],
    accept: Callable[[Path, dict[str, Any]], bool] | None = None,
    force: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """The locked part of :func:`cached_entry`: recheck, clean up, build and rename into place."""
    _remove_stale(base, key)
    if final.is_dir() or final.is_symlink():
        replace = force or final.is_symlink()
        if not replace:
            try:
                meta = verify_entry(final, defer, kind=kind, key=key)
                if accept is None or accept(final, meta):
                    return final, meta
                replace = True  # stale
            except CorruptModelError as exc:
                if not rebuild_corrupt:
                    raise
                warnings.warn(f"{exc}; rebuilding cache entry {kind}/{key}", CacheWarning, stacklevel=4)
                replace = True
        if replace:
            trash = Path(tempfile.mkdtemp(dir=base, prefix=f".{key}.corrupt."))
            os.replace(final, trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)
    try:
        tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{key}.tmp."))
    except OSError as exc:
        _raise_if_disk_full(base, kind, key, exc, _free_bytes(base))
        raise CacheError(f"cannot create a folder in the cache at {base}: {exc.strerror or exc}") from exc
    try:
        meta = dict(write(tmp))
        meta["files"] = _fingerprint(tmp)
        meta["entry"] = {"kind": kind, "key": key}
        _write_durably(tmp, meta)
        os.replace(tmp, final)
        _fsync(base)
    except BaseException as exc:
        free = _free_bytes(base)  # at the failure, before the partial entry is removed
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception):
            _raise_if_disk_full(base, kind, key, exc, free)
        raise
    for name, info in meta["files"].items():  # hashed just now: this process need not hash them again
        _remember(final / name, info["sha256"])
    return final, meta
