"""The README as an entry point: its links resolve, its env table is the registry, its snippets run."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import gymnasium as gym
import pytest

import placement_gym

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _links(page: Path) -> list[tuple[str, Path, str]]:
    """(link text, target file, anchor) of every relative link of ``page``."""
    out = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        out.append((target, (page.parent / path).resolve() if path else page, anchor))
    return out


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    broken = []
    for target, path, anchor in _links(page):
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def _expand(pattern: str) -> list[str]:
    """``a-{x,y}-{1,2}`` -> ``a-x-1``, ``a-x-2``, ``a-y-1``, ``a-y-2``."""
    parts = re.split(r"\{([^}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _table_ids(page: Path = README, marker: str = "<!-- env-table -->") -> list[str]:
    text = page.read_text()
    table = text.split(marker, 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return [i for row in rows for i in _expand(row.split("`")[1])]


def test_env_table_is_the_registry_both_ways() -> None:
    """The README lists every registered ID but the old ones, which docs/environments.md lists as aliases."""
    ids = _table_ids()
    registered = [k for k, spec in gym.registry.items() if str(spec.entry_point).startswith("placement_gym")]
    canonical = [k for k in registered if k not in placement_gym.ALIASES]
    assert len(ids) == len(set(ids)), "an ID appears twice in the README's env table"
    assert set(ids) == set(canonical), (
        f"in the README, not registered: {sorted(set(ids) - set(canonical))}; "
        f"registered, not in the README: {sorted(set(canonical) - set(ids))}"
    )
    assert not set(ids) & set(placement_gym.ALIASES), "an old ID in the README's env table"


def test_alias_table_is_the_aliases_both_ways() -> None:
    page = ROOT / "docs" / "environments.md"
    table = page.read_text().split("<!-- alias-table -->", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| `")]
    rows = [[c.strip().strip("`") for c in line.strip("|").split("|")] for line in lines]
    aliases = {old: new for row in rows for old, new in zip(_expand(row[0]), _expand(row[1]), strict=True)}
    assert aliases == placement_gym.ALIASES


_MDPS = {"one-shot": "oneshot", "sequential": "sequential", "improvement": "improve"}


def test_env_table_says_what_each_id_is() -> None:
    text = README.read_text().split("<!-- env-table -->", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    for row in rows:
        mdps = {_MDPS[m.strip()] for m in row[5].split(";")}
        for env_id in _expand(row[0].strip("`")):
            spec = gym.spec(env_id)
            mdp = "improve" if "Improve" in str(spec.entry_point) else spec.kwargs.get("mode", "oneshot")
            assert mdp in mdps, env_id
            if row[1] == "`backend=`":  # the generic IDs take everything as arguments
                continue
            assert row[1] == spec.kwargs["backend"], env_id
            assert spec.kwargs["platform"] in row[2].replace("`", "").split(", "), env_id
            assert (row[1] == "measured") == bool(spec.nondeterministic), env_id


def test_the_ci_commands_are_where_ci_reads_them() -> None:
    text = README.read_text()
    for marker, command in [
        ("<!-- main-command -->", "placement-gym bench --preset small"),
        ("<!-- test-command -->", "-m pytest"),
    ]:
        block = text.split(marker + "\n", 1)[1]
        assert block.startswith("```bash\n"), marker
        assert command in block.split("```")[1], marker


def _table_lines(text: str) -> list[str]:
    """The lines of the first Markdown table in ``text``."""
    lines = text.lstrip("\n").splitlines()
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines))


@pytest.mark.parametrize("track", ["black-box", "white-box"])
def test_readme_leaderboard_rows_are_the_pages_top_rows(track: str) -> None:
    quoted = _table_lines(README.read_text().split(f"<!-- leaderboard:standard:{track} -->", 1)[1])
    page = (ROOT / "docs" / "LEADERBOARD.md").read_text()
    title = track[0].upper() + track[1:]
    table = _table_lines(page.split(f"### Tier `standard`, {title} track", 1)[1].split("\n", 1)[1])
    assert len(quoted) > 2, "the README quotes no leaderboard rows"
    assert quoted == table[: len(quoted)], "README rows are not LEADERBOARD.md's top rows"


def test_readme_lists_every_method() -> None:
    import agents

    text = README.read_text().split("## Agents", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in agents.METHODS if f"`{name}`" not in text]
    assert not missing, f"methods missing from the README's agents table: {missing}"


def test_readme_is_an_entry_point() -> None:
    lines = README.read_text().splitlines()
    assert 150 <= len(lines) <= 250
    first_screen = "\n".join(lines[:120])
    for name in ("gym.make(", "GNNActorCriticPolicy", "SAGEExtractor", "PlacementMethod"):
        assert name in first_screen, name
    # the "first screen": how to benchmark one's own agent, right after the install commands
    top = "\n".join(lines[:60])
    assert "## Benchmark your own agent" in top and "placement-gym bench --tier standard --methods" in top


@pytest.fixture
def one_thread():
    """Small networks: one torch thread is faster on the shared cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(_SNIPPETS)))
def test_readme_python_snippets_run(index: int, one_thread) -> None:
    exec(compile(_SNIPPETS[index], f"README.md snippet {index}", "exec"), {"__name__": "__readme__"})
