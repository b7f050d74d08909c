"""An on-disk cache of converted artefacts (OpenVINO IR, graphs, fusion groups), safe for concurrent use.

Layout: ``<cache root>/<kind>/<key>/`` holds the files of one entry plus ``meta.json``, which records
the file sizes and the SHA-256 of the small files. An entry is written into a temporary directory next to
its final place and renamed into place only when complete, under a file lock, so a reader never sees a
half-written entry and two writers never build the same entry twice. An entry whose files no longer
match ``meta.json`` is reported as corrupt (and, for entries the cache can rebuild, rebuilt).

The root is ``$PLACEMENT_GYM_CACHE`` if set, else ``~/.cache/placement_gym``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from placement_gym.errors import CorruptModelError

CACHE_ENV_VAR = "PLACEMENT_GYM_CACHE"
_HASH_LIMIT = 16 * 2**20  # files up to this size are hashed; larger ones are checked by size


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


def _fingerprint(directory: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for path in sorted(directory.iterdir()):
        if path.name == "meta.json" or not path.is_file():
            continue
        size = path.stat().st_size
        files[path.name] = {"bytes": size, "sha256": _sha256(path) if size <= _HASH_LIMIT else None}
    return files


def verify_entry(directory: Path) -> dict[str, Any]:
    """Check an entry's files against its ``meta.json`` and return the metadata.

    Raises:
        CorruptModelError: If ``meta.json`` is missing or unreadable, or a file is missing, has another
            size, or (for small files) another hash.
    """
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        recorded = meta["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise CorruptModelError(f"cache entry {directory} has no valid meta.json ({exc})") from exc
    for name, info in recorded.items():
        path = directory / name
        if not path.is_file():
            raise CorruptModelError(f"cache entry {directory} is missing {name}")
        if path.stat().st_size != info["bytes"]:
            raise CorruptModelError(
                f"{path} has {path.stat().st_size} bytes, expected {info['bytes']} (truncated or overwritten)"
            )
        if info.get("sha256") and _sha256(path) != info["sha256"]:
            raise CorruptModelError(f"{path} does not match its recorded SHA-256 (modified or damaged)")
    return meta


def cached_entry(
    kind: str,
    key: str,
    write: Callable[[Path], dict[str, Any]],
    *,
    root: Path | None = None,
    rebuild_corrupt: bool = True,
) -> tuple[Path, dict[str, Any]]:
    """Return the directory of entry ``kind/key``, creating it with ``write`` if needed.

    Args:
        kind: Entry family (``"ir"``, ``"graph"``...), a subdirectory of the root.
        key: Unique, filesystem-safe name of the entry (include every version that affects it).
        write: Fills an empty directory with the entry's files and returns metadata to record.
        root: Cache root; default :func:`cache_root`.
        rebuild_corrupt: Rebuild a corrupt entry instead of raising.

    Returns:
        ``(directory, metadata)``; the metadata has the ``write`` result plus ``files``.

    Raises:
        CorruptModelError: If the entry is corrupt and ``rebuild_corrupt`` is false.
    """
    base = (root or cache_root()) / kind
    final = base / key
    if final.is_dir():  # fast path without the lock: complete entries never change in place
        try:
            return final, verify_entry(final)
        except CorruptModelError:
            if not rebuild_corrupt:
                raise
    base.mkdir(parents=True, exist_ok=True)
    with FileLock(str(base / f".{key}.lock")):
        if final.is_dir():
            try:
                return final, verify_entry(final)
            except CorruptModelError:
                if not rebuild_corrupt:
                    raise
                trash = Path(tempfile.mkdtemp(dir=base, prefix=f".{key}.corrupt."))
                os.replace(final, trash / "entry")
                shutil.rmtree(trash, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{key}.tmp."))
        try:
            meta = dict(write(tmp))
            meta["files"] = _fingerprint(tmp)
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final, meta
