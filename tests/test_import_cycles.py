"""No import cycles in the project's packages, and no upward imports.

The import graph is read with `ast`, so every import counts: module level, inside a
function, and under `if TYPE_CHECKING:`. A cycle through any of them is a design
problem (two modules that each need the other are one concept, or share a third).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placement_gym", "agents", "experiments")


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted module name of a source file under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """Project modules that ``path`` imports, anywhere in the file."""
    current = module_name(path, root)
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(name: str) -> None:
        # `from pkg import sub` may name a submodule; otherwise the longest known prefix.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != current:
            found.add(name)

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, current, is_package)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                add(full if full in known else target)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> nx.DiGraph:
    """Directed graph module -> modules it imports, over ``packages`` under ``root``."""
    files = [f for pkg in packages for f in sorted((root / pkg).rglob("*.py"))]
    known = {module_name(f, root) for f in files}
    graph = nx.DiGraph()
    for f in files:
        src = module_name(f, root)
        graph.add_node(src)
        for dst in imported_modules(f, known, root):
            graph.add_edge(src, dst)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Every strongly connected component with more than one module, sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("upper", ["agents", "experiments"])
def test_placement_gym_does_not_import_upward(upper: str) -> None:
    graph = import_graph()
    bad = sorted(
        (src, dst)
        for src, dst in graph.edges
        if src.split(".")[0] == "placement_gym" and dst.split(".")[0] == upper
    )
    assert not bad, f"placement_gym imports {upper}: {bad}"


def test_agents_do_not_import_experiments() -> None:
    graph = import_graph()
    bad = sorted(
        (s, d) for s, d in graph.edges if s.startswith("agents") and d.startswith("experiments")
    )
    assert not bad, f"agents imports experiments: {bad}"


def test_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("def g():\n    import pkg.a\n")
    found = cycles(import_graph(tmp_path, ("pkg",)))
    assert found == [["pkg.a", "pkg.b", "pkg.c"]]


def test_nothing_but_studies_imports_the_studies() -> None:
    """The CLI and the scripts behind the tables of record never need a research study."""
    graph = import_graph()
    bad = sorted(
        (s, d)
        for s, d in graph.edges
        if d.startswith("experiments.studies") and not s.startswith("experiments.studies")
    )
    assert not bad, f"imports of experiments.studies from outside it: {bad}"


def importers_from_outside(graph: nx.DiGraph, package: str) -> list[tuple[str, str]]:
    """Imports ``(importer, imported)`` of ``package`` or its modules by modules outside it."""

    def inside(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    return sorted((s, d) for s, d in graph.edges if inside(d) and not inside(s))


def test_nothing_outside_the_cli_imports_it() -> None:
    """The CLI depends on the rest; nothing depends on the CLI (its parsers and argument checks included)."""
    bad = importers_from_outside(import_graph(), "experiments.cli")
    assert not bad, f"imports of experiments.cli from outside it: {bad}"


def test_an_import_of_the_cli_from_outside_is_found() -> None:
    graph = nx.DiGraph(
        [
            ("experiments.grid", "experiments.cli.arguments"),  # outside -> CLI: found
            ("experiments.cli.bench", "experiments.grid"),  # CLI -> outside: fine
            ("experiments.cli_notes", "experiments.runs"),  # a name that only starts like the package
            ("experiments.records.tables", "experiments.cli"),  # the package itself: found
        ]
    )
    assert importers_from_outside(graph, "experiments.cli") == [
        ("experiments.grid", "experiments.cli.arguments"),
        ("experiments.records.tables", "experiments.cli"),
    ]
