"""File names made from user input (a model path, a platform file, a method spec), sanitised in one place.

A name a user typed can hold folder separators (``path/to/net.xml``), ``..``, spaces or characters a file
system refuses; put into a file name as it is, it points into a folder that does not exist (or outside the
output folder). :func:`file_stem` turns any text into one safe path component.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath, PureWindowsPath

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\Z")
#: Longest stem kept as it is (file systems allow 255 bytes for a whole name: room for prefixes and suffixes).
MAX_STEM = 80


def file_stem(text: str) -> str:
    """One safe path component for ``text``: letters, digits, ``.``, ``_`` and ``-`` only, not starting
    with a dot, at most ``MAX_STEM + 9`` characters.

    A safe name stays as it is (``resnet50`` -> ``resnet50``). Anything else keeps a readable part (the
    last path component of a path) and gets the first 8 hex digits of the text's SHA-256, so two different
    inputs never share a file: ``path/to/net.xml`` -> ``net.xml-3f2a...``.
    """
    text = str(text)
    if _SAFE.match(text) and len(text) <= MAX_STEM:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    name = PureWindowsPath(PurePosixPath(text).name).name if ("/" in text or "\\" in text) else text
    readable = _UNSAFE.sub("_", name)[:MAX_STEM].strip("._") or "unnamed"
    return f"{readable}-{digest}"
