"""``experiments/`` shows its parts: a few shared modules at the top, the rest in subpackages that each say
what they hold (a module docstring, and a line of the README's layout list)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
#: At most this many modules sit at the top of experiments/ beside its subpackages.
MAX_TOP_LEVEL = 12


def subpackages() -> list[Path]:
    return sorted(p for p in EXPERIMENTS.iterdir() if (p / "__init__.py").is_file())


def test_few_modules_at_the_top() -> None:
    top = sorted(p.name for p in EXPERIMENTS.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules in experiments/ (a subpackage for some?): {top}"


def test_each_subpackage_says_what_it_holds() -> None:
    readme = (ROOT / "README.md").read_text()
    names = [p.name for p in subpackages()]
    assert {"cli", "records", "studies"} <= set(names)
    for package in subpackages():
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc, f"experiments/{package.name}/__init__.py has no docstring"
        assert f"- `experiments/{package.name}/`:" in readme, f"the README's layout list misses {package.name}/"
