"""The one reader of user files (platform YAML, policy ``meta.json``, records): bounded in size and in work.

A file is read only up to :data:`MAX_FILE_BYTES` (1 MiB: the largest file the project writes for a user
is a few KB); a larger one is refused with its size before it is parsed. YAML is composed into its node
graph first, where an alias is a shared node, and the number of nodes the document would have once every
alias is expanded is counted on that graph (each node once, memoised); above :data:`MAX_YAML_NODES` the
document is refused before any Python object is built, so a "billion laughs" file of 1 KB costs
microseconds instead of gigabytes. Recursive aliases and nesting too deep for the parser are refused too.
Only YAML's safe types are built (``yaml.SafeLoader``). JSON is parsed with the standard library, which
has no aliases; the size limit bounds its work.

Every refusal is a :class:`~placement_gym.errors.ConfigError` that names the file and the figure.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from placement_gym.errors import ConfigError

#: Largest user file read, bytes.
MAX_FILE_BYTES = 1 << 20
#: Most YAML nodes a document may have once its aliases are expanded.
MAX_YAML_NODES = 100_000


def read_text(path: str | os.PathLike, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """The text of ``path``, refused above ``limit`` bytes.

    Args:
        path: The file.
        what: What the file is, for messages (``"platform file"``).
        limit: Largest size accepted, bytes.

    Raises:
        ConfigError: If it is missing, not a regular file, larger than ``limit``, unreadable or not UTF-8.
    """
    path = Path(path)
    try:  # non-blocking: a FIFO in a file's place must not hang the reader
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{what} {path} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ConfigError(
            f"{what} {path} is larger than the {limit} bytes a {what} may have ({os.path.getsize(path)} bytes)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None


def _expanded_size(root: yaml.Node, source: str, limit: int) -> int:
    """Nodes of the document under ``root`` with every alias expanded (a shared node counts each time it
    is reached), computed once per node; raises as soon as it passes ``limit``."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    active: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        items = [x for pair in node.value for x in pair] if isinstance(node, yaml.MappingNode) else node.value
        if children_done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in items)
            if sizes[key] > limit:
                raise ConfigError(
                    f"{source}: its aliases expand to more than {limit} YAML nodes; write the values out "
                    "(a platform file has a few hundred)"
                )
            continue
        if key in active:
            raise ConfigError(f"{source}: a YAML alias refers to a node that contains it (a recursive file)")
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in items if id(child) not in sizes)
    return sizes[id(root)]


def parse_yaml(text: str, source: str = "YAML", max_nodes: int = MAX_YAML_NODES) -> Any:
    """Safe-load one YAML document after checking its expanded size (see the module docstring).

    Raises:
        ConfigError: For invalid YAML, more than one document, or more than ``max_nodes`` expanded nodes.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source, max_nodes)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"cannot read {source}: not valid YAML: {' '.join(str(exc).split())[:300]}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{source} nests deeper than the YAML reader allows") from None
    finally:
        loader.dispose()


def parse_json(text: str, source: str = "JSON") -> Any:
    """Parse JSON text; ``NaN``/``Infinity`` literals are refused (the project never writes them).

    Raises:
        ConfigError: For invalid JSON.
    """

    def refuse(literal: str) -> Any:
        raise ValueError(f"{literal} is not a number JSON allows")

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError:
        raise ConfigError(f"{source} nests deeper than the JSON reader allows") from None
    except ValueError as exc:
        raise ConfigError(
            f"cannot read {source}: not valid JSON: {' '.join(str(exc).split())[:300]}"
        ) from None


def load_yaml(path: str | os.PathLike, what: str = "YAML file", **kwargs: Any) -> Any:
    """:func:`read_text` then :func:`parse_yaml`."""
    return parse_yaml(read_text(path, what), f"{what} {path}", **kwargs)


def load_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """:func:`read_text` then :func:`parse_json`."""
    return parse_json(read_text(path, what), f"{what} {path}")


def load_refusal(exc: BaseException) -> str:
    """Why a library refused to load a file, in a few words of our own: never its advice to load the file
    unsafely (torch's ``weights_only=False``, NumPy's ``allow_pickle=True``), its colour codes or its
    several lines. A pickle the reader refused is named as such; otherwise the first sentence of the
    library's message, at most 200 characters."""
    import pickle
    import re
    import zipfile

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if isinstance(exc, pickle.UnpicklingError) or "pickle" in text.lower() or "weights only load" in text.lower():
        return "it holds pickled Python objects, which are never loaded (loading them could run code)"
    if isinstance(exc, zipfile.BadZipFile) or "zip" in text.lower():
        return "it is not a valid archive (damaged, or another format)"
    first = " ".join(text.split()).split(". ")[0]
    return (first[:200] + ("..." if len(first) > 200 else "")) or type(exc).__name__


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_YAML_NODES",
    "load_json",
    "load_refusal",
    "load_yaml",
    "parse_json",
    "parse_yaml",
    "read_text",
]
