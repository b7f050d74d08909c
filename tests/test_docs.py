"""The docs stay true to the code and the README: figures they quote from the README, paths, quoted CLI
commands, issue numbers; and each checker fails on a small bad input. Pure text and the light CLI parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doc_checks import (
    ROOT,
    Registry,
    absolute_paths,
    check_command,
    cli_problems,
    doc_pages,
    issue_numbers,
    readme_figures,
    subparsers_of,
)

PAGES = doc_pages()
README = (ROOT / "README.md").read_text()


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture(scope="module")
def parser():
    from experiments.cli import build_parser

    return build_parser()


@pytest.fixture(scope="module")
def registry() -> Registry:
    import gymnasium as gym

    import agents  # the method names (no torch)
    import placement_gym  # noqa: F401  (registers the IDs)

    return Registry(env_ids=frozenset(gym.registry), methods=frozenset(agents.METHODS))


def _subcommands(parser) -> dict[str, list[str]]:
    """Each subcommand of the CLI and its stages (``transfer``'s ``pretrain`` and ``run``)."""
    return {name: sorted(subparsers_of(sub) or {}) for name, sub in (subparsers_of(parser) or {}).items()}


def test_the_checks_see_every_doc() -> None:
    names = {_id(p) for p in PAGES}
    assert {"README.md", "docs/cli.md", "docs/rl.md", "experiments/studies/README.md"} <= names


# --- 1. figures quoted from the README -----------------------------------------------------------------


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "README.md"], ids=_id)
def test_figures_quoted_from_the_readme_are_in_it(page: Path) -> None:
    problems = readme_figures(page.read_text(), README)
    assert not problems, f"{_id(page)} quotes README figures the README lacks: {problems}"


def test_readme_figure_check_catches_a_figure_the_readme_dropped() -> None:
    doc = (
        "The cell time of `ppo_gnn` in the README (22.1 s) came from torch's threads on a loaded machine.\n"
        "Per CPU second, it trains at about 200 evaluations/s.\n"
    )
    assert readme_figures(doc, "| ppo_gnn | 8.713 | 22.1 |") == []
    problems = readme_figures(doc, "| ppo_gnn | 8.713 | 9.7 |")
    assert len(problems) == 1 and problems[0].startswith("22.1 not in README.md")
    # the README named in a table row, a list item or a link counts; code spans and link targets do not
    assert readme_figures("| x | the [README](../README.md#x)'s 0.62 |\n", "0.6") != []
    assert readme_figures("- first\n- the README's 1,000 runs\n", "1,000 runs") == []
    assert readme_figures("The README runs `bench --budget 7` (see [it](../README.md#v2)).\n", "") == []
    assert readme_figures("Scores reach 0.62 here. The README has no figure.\n", "") == []


# --- 2. absolute paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_no_absolute_path_outside_the_repository(page: Path) -> None:
    found = absolute_paths(page.read_text())
    assert not found, f"{_id(page)} names absolute paths {found}: use relative paths or placeholders (<dir>)"


def test_absolute_path_check_catches_machine_paths() -> None:
    bad = "run `x --out /tmp/agreement`, see /home/me/data/x.json and\n    cd /work/main && ls\nor (/tmp)\n"
    assert absolute_paths(bad) == ["/tmp/agreement", "/home/me/data/x.json", "/work/main", "/tmp"]
    good = (
        "results/leaderboard/x.jsonl, ../README.md, <dir>/agreement, https://example.org/home/x/, "
        "$HOME/.cache/x, ~/.cache/x, /dev/zero and /proc/loadavg, a latency / optimum ratio\n"
    )
    assert absolute_paths(good) == []


# --- 3. quoted CLI commands ----------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_quoted_cli_commands_parse(page: Path, parser, registry) -> None:
    problems = cli_problems(page.read_text(), parser, registry)
    assert not problems, f"{_id(page)}: {problems}"


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("bench --preset small --budgets 5", "no option --budgets"),
        ("place --model m.xml --platform cpu-igpu --tier standard", "no option --tier"),
        ("fit --model bert", "no subcommand 'fit'"),
        ("transfer evaluate --methods heft", "no subcommand 'evaluate'"),
        ("transfer run --steps 10", "no option --steps"),
        ("transfer pretrain --method m:f --out o --steps 5 --debug", "no option --debug"),
        ("bench --tier huge", "not among"),
        ("datasets --modes oneshot offline", "not among"),
        ("train --agent heft --env DevicePlacementSim-nonet-v0", "not registered"),
        ("bench --methods heft guided_search:depth=4", "name no registered method"),
        ("train --agent ppo_gnnn --env DevicePlacementSim-bert-v1", "not among"),
    ],
)
def test_cli_check_catches_a_stale_command(command: str, problem: str, parser, registry) -> None:
    problems = check_command(command.split(), parser, registry)
    assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize(
    "command",
    [
        "--debug bench --tier tiny --tasks resnet50/cpu-dgpu --seeds 0 --methods my_agent:greedy heft",
        "transfer run --methods heft --seeds 0 1 --results <dir>",
        "transfer --debug pretrain --method m:f --out o --steps 5",
        "<command> --help",
        "train --agent ppo_gnn --env DevicePlacementSim-bert-v1 --budget=200",
        "calibrate --model M ...",
        "bench --methods milp:time_limit=60 my_pkg.my_module:MyAgent stable_baselines3:PPO:n_steps=64 $M",
    ],
)
def test_cli_check_accepts_valid_commands(command: str, parser, registry) -> None:
    assert check_command(command.split(), parser, registry) == []


def test_cli_check_reads_code_blocks_and_spans(parser) -> None:
    page = (
        "Run `placement-gym bench --tier standard --method heft` or\n\n"
        "```bash\ncd examples && placement-gym transfer fit \\\n    --out x   # placement-gym nothing\n"
        "```\n\n"
        "    python -m experiments.no_such_module --out x\n    python -m experiments.records.tables --check\n\n"
        "A `placement-gym\nleaderboard --runs tiny` span over two lines.\n\n"
        '    B="placement-gym bench --tiers tiny"\n    $B --seeds 0\n'
    )
    problems = cli_problems(page, parser)
    assert len(problems) == 5, problems
    found = "\n".join(problems)
    for expected in ("--method", "no subcommand 'fit'", "experiments.no_such_module", "--runs", "--tiers"):
        assert expected in found, expected


def test_cli_page_documents_every_subcommand(parser) -> None:
    """docs/cli.md has a section ``## `placement-gym <sub>` `` per subcommand, each with an example."""
    page = (ROOT / "docs" / "cli.md").read_text()
    sections = dict(re.findall(r"^## `placement-gym (\w+)`\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    for name, stages in _subcommands(parser).items():
        assert name in sections, f"docs/cli.md has no section `placement-gym {name}`"
        blocks = re.findall(r"```bash\n(.*?)```", sections[name], re.S)
        examples = "".join(b for b in blocks if f"placement-gym {name}" in b)
        assert examples, f"docs/cli.md's section of {name} has no example"
        for stage in stages:
            assert f"placement-gym {name} {stage}" in examples, f"docs/cli.md: no example of {name} {stage}"


def test_readme_doc_index_lists_every_subcommand(parser) -> None:
    row = next(line for line in README.splitlines() if line.startswith("| [docs/cli.md]"))
    missing = [name for name in _subcommands(parser) if f"`{name}`" not in row]
    assert not missing, f"the README's doc index row of docs/cli.md lacks {missing}"


# --- 4. issue numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_no_issue_numbers(page: Path) -> None:
    found = issue_numbers(page.read_text())
    assert not found, f"{_id(page)} names issues {found}: say what changed instead"


def test_issue_check_catches_issue_references() -> None:
    bad = "Fixed in #12; see issue 22, Issue #3, item 7 and https://github.com/o/r/pull/5.\n"
    assert issue_numbers(bad) == ["#12", "issue 22", "Issue #3", "item 7", "/pull/5"]
    assert issue_numbers("policy&#95;kwargs, ## 3. Heading, [x](#section-2), colour #1f77b4, 5 items\n") == []
