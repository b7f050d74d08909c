"""Staleness checks of the documentation, pure text: each returns the problems it finds in one page.

* :func:`readme_figures`: a sentence that names the README and quotes a number must find that number in
  README.md (the convention: a doc that cites the README cites only figures the README has, in the same
  sentence; other numbers go in a sentence of their own).
* :func:`absolute_paths`: no absolute path outside the repository (``/home/...``, ``/tmp/x``); the
  kernel's interfaces (``/dev/``, ``/proc/``, ``/sys/``) are allowed. Placeholders are ``<dir>``.
* :func:`cli_problems`: every ``placement-gym <sub> ...`` command quoted in a code block or a code span
  names a subcommand (and stage) the parser has, and only options (and choices) that subcommand defines;
  given a :class:`Registry`, its ``--env`` IDs are registered and its ``--methods`` name registered
  methods (or ``module:attr``); every ``python -m experiments.<module>`` names a module that exists.
* :func:`issue_numbers`: no issue or pull-request number (``#12``, "issue 22", "item 7").
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md, CONTRIBUTING.md, docs/**/*.md, examples/**/*.md and experiments/**/README*."""
    pages = [root / "README.md", root / "CONTRIBUTING.md"]
    pages += sorted((root / "docs").rglob("*.md")) + sorted((root / "examples").rglob("*.md"))
    pages += sorted(p for p in (root / "experiments").rglob("README*") if p.is_file())
    return [p for p in pages if p.is_file()]


# --- text helpers -------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}```.*?^ {0,3}```[ \t]*$", re.M | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def _code_blocks(text: str) -> list[str]:
    """The fenced blocks and the indented blocks (4 spaces after a blank line) of a Markdown page."""
    blocks = [m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0] for m in _FENCE.finditer(text)]
    for para in re.split(r"\n[ \t]*\n", _FENCE.sub("", text)):
        lines = para.split("\n")
        if lines and all(line.startswith("    ") or not line.strip() for line in lines) and para.strip():
            if not re.match(r"\s*([-*+]|\d+\.)\s", lines[0]):  # not a list item's continuation
                blocks.append("\n".join(line[4:] for line in lines))
    return blocks


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and HTML comments."""
    return _COMMENT.sub("", _FENCE.sub("\n", text))


# --- 1. figures quoted from the README ----------------------------------------------------------------

_NUMBER = r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?"
_FIGURE = re.compile(rf"(?<![\w.])({_NUMBER})(?!\d|[.,]\d)")
_NAMES_README = re.compile(r"\bREADME\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[`*_])")


def _sentences(text: str) -> Iterator[str]:
    """Sentences of the prose of ``text``: each table row is one; list and heading numbers are dropped."""
    for para in re.split(r"\n[ \t]*\n", _prose(text)):
        lines = para.strip("\n").split("\n")
        if lines and lines[0].lstrip().startswith("|"):
            yield from lines
            continue
        items: list[list[str]] = []
        for line in lines:  # each list item is a unit of its own
            if not items or re.match(r"\s*([-*+]|\d+\.)\s", line):
                items.append([])
            items[-1].append(re.sub(r"^\s*(#+\s*)?([-*+]\s+|\d+\.\s+)?", "", line))
        for item in items:
            yield from _SENTENCE_END.split(" ".join(item))


def _figures(sentence: str) -> list[str]:
    """The numbers of a sentence outside code spans and link targets."""
    plain = _SPAN.sub(" ", re.sub(r"\]\([^)]*\)", "]", sentence))
    return _FIGURE.findall(plain)


def _has_figure(text: str, figure: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?!\d|[.,]\d)", text) is not None


def readme_figures(text: str, readme: str) -> list[str]:
    """Figures that a sentence of ``text`` naming the README quotes and ``readme`` lacks, each with its
    sentence."""
    problems = []
    for sentence in _sentences(text):
        if _NAMES_README.search(re.sub(r"\]\([^)]*\)", "]", sentence)):
            missing = [f for f in _figures(sentence) if not _has_figure(readme, f)]
            if missing:
                problems.append(f"{', '.join(missing)} not in README.md: {sentence.strip()[:160]!r}")
    return problems


# --- 2. absolute paths --------------------------------------------------------------------------------

_ALLOWED_ROOTS = ("dev", "proc", "sys")
_ABSOLUTE = re.compile(
    r"(?<![\w.~$}>/\\-])/([A-Za-z_][\w.-]*)/"  # /name/...: two components or more
    r"|(?<![\w.~$}>/\\-])/(home|work|tmp|root|Users|mnt|media|scratch|srv|data)\b(?!/)"  # a known root alone
)


def absolute_paths(text: str) -> list[str]:
    """Absolute paths in ``text`` (outside the kernel's interfaces), each as it starts."""
    found = []
    for m in _ABSOLUTE.finditer(text):
        root = m.group(1) or m.group(2)
        if root not in _ALLOWED_ROOTS:
            end = re.match(r"[^\s`'\")\]]*", text[m.start() :])
            found.append(end.group(0) if end else m.group(0))
    return found


# --- 3. quoted CLI commands ---------------------------------------------------------------------------

_STOP = {"&&", "||", "|", ";", ">", ">>", "2>&1", "&"}


def _commands(text: str) -> list[list[str]]:
    """The shell tokens of every command line quoted in ``text``'s code blocks and code spans, and of every
    command a shell variable holds (``B="placement-gym bench ..."``)."""
    chunks = [re.sub(r"\\\n", " ", block) for block in _code_blocks(text)]
    chunks += [m.group(2).replace("\n", " ") for m in _SPAN.finditer(_prose(text))]
    commands = [_tokens(line) for chunk in chunks for line in chunk.split("\n")]
    held = [_tokens(t.split("=", 1)[1]) for tokens in commands for t in tokens if re.match(r"\w+=\S*\s", t)]
    return commands + held


def _tokens(line: str) -> list[str]:
    """Shell tokens of ``line`` without its comment; ``[--x N]`` loses its brackets."""
    try:
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        raw = list(lexer)
    except ValueError:  # an unbalanced quote: the span is a fragment
        raw = line.split("#", 1)[0].split()
    return [token.strip("[]") for token in raw if token.strip("[]")]


def _command_end(tokens: list[str]) -> list[str]:
    """``tokens`` up to the first shell operator."""
    for i, token in enumerate(tokens):
        if token in _STOP:
            return tokens[:i]
    return tokens


def _placeholder(token: str) -> bool:
    """``<dir>``, ``FILE...``, ``NAME``, ``$B``: a token that stands for a value."""
    return "<" in token or "..." in token or "\u2026" in token or token.startswith("$") or token.isupper()


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    """The subcommands (or stages) of ``parser`` by name; None if it has none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _values(action: argparse.Action, token: str, rest: list[str]) -> list[str]:
    """An option's values: ``--x=v``, or the tokens after it, up to its ``nargs`` or the next option."""
    if "=" in token:
        return [token.split("=", 1)[1]]
    if action.nargs == 0:
        return []
    count = None if action.nargs in ("+", "*") else action.nargs if isinstance(action.nargs, int) else 1
    values = []
    for value in rest:
        if value.startswith("--") or (count is not None and len(values) == count):
            break
        values.append(value)
    return values


@dataclass(frozen=True)
class Registry:
    """What a quoted command's values must name: registered env IDs and method names."""

    env_ids: frozenset[str]
    methods: frozenset[str]


def _unknown_method(spec: str, methods: frozenset[str]) -> bool:
    """A spec naming neither a registered method (``heft``, ``milp:time_limit=60``) nor ``module:attr``."""
    parts = spec.split(":")
    return parts[0] not in methods and (len(parts) < 2 or "=" in parts[1] or not parts[1])


def _value_problems(
    name: str, action: argparse.Action, values: list[str], registry: Registry | None
) -> list[str]:
    """Values outside the option's choices; given ``registry``, ``--env`` values that are not registered IDs
    and ``--methods`` values that name no method."""
    values = [v for v in values if not _placeholder(v)]
    problems = []
    if action.choices is not None and any(v not in action.choices for v in values):
        bad = [v for v in values if v not in action.choices]
        problems.append(f"{name}: {bad} not among {sorted(action.choices)}")
    if registry is not None and name == "--env" and any(v not in registry.env_ids for v in values):
        problems.append(f"--env: {[v for v in values if v not in registry.env_ids]} not registered")
    if registry is not None and name == "--methods":
        unknown = [v for v in values if _unknown_method(v, registry.methods)]
        if unknown:
            problems.append(f"{name}: {unknown} name no registered method and no module:attr")
    return problems


def check_command(
    tokens: list[str], parser: argparse.ArgumentParser, registry: Registry | None = None
) -> list[str]:
    """Problems of one command's arguments (``tokens``, the program left out) against ``parser``: an
    unknown subcommand or stage, an option the subcommand lacks, a value outside an option's choices, and
    (given ``registry``) an env ID or a method that is not registered."""
    problems, path, i = [], ["placement-gym"], 0
    while i < len(tokens):
        token, i = tokens[i], i + 1
        stages = subparsers_of(parser)
        if _placeholder(token):
            if stages is not None:
                return problems  # a placeholder subcommand: nothing more to check
        elif token.startswith("-") and token not in ("-", "--"):
            name = token.split("=", 1)[0]
            action = _options(parser).get(name)
            if action is None:
                problems.append(f"{' '.join(path)}: no option {name}")
                continue
            values = _values(action, token, tokens[i:])
            i += 0 if "=" in token else len(values)
            problems += [f"{' '.join(path)} {p}" for p in _value_problems(name, action, values, registry)]
        elif stages is not None:
            if token not in stages:
                return [*problems, f"{' '.join(path)}: no subcommand {token!r}"]
            parser = stages[token]
            path.append(token)
    return problems


def _module_exists(module: str, root: Path) -> bool:
    relative = Path(*module.split("."))
    return (root / relative).with_suffix(".py").is_file() or (root / relative / "__main__.py").is_file()


def cli_problems(
    text: str, parser: argparse.ArgumentParser, registry: Registry | None = None, root: Path = ROOT
) -> list[str]:
    """Problems of every ``placement-gym`` and ``python -m experiments...`` command quoted in ``text``
    (see :func:`check_command`); a ``python -m experiments.<module>`` must name a module of ``root``."""
    problems = []
    for tokens in _commands(text):
        for i, token in enumerate(tokens):
            python_m = token in ("python", "python3") and tokens[i + 1 : i + 3][:1] == ["-m"]
            module = tokens[i + 2] if python_m and len(tokens) > i + 2 else ""
            if token == "placement-gym" or token.endswith("/placement-gym") or module == "experiments.cli":
                args = _command_end(tokens[i + (3 if module else 1) :])
                found = check_command(args, parser, registry)
                problems += [f"`placement-gym {' '.join(args)[:80]}`: {p}" for p in found]
            elif module.startswith("experiments.") and not _placeholder(module):
                if not _module_exists(module, root):
                    problems.append(f"`python -m {module}`: no such module")
    return problems


# --- 4. issue numbers ---------------------------------------------------------------------------------

_ISSUE = re.compile(
    r"(?<![&\w])#\d+\b"  # #12 (not an HTML entity such as &#95;)
    r"|\b(?:issues?|items?|pull requests?|PRs?)\s+#?\d+\b"  # issue 22, item 7, PR 3
    r"|/(?:issues|pull)/\d+",  # a link to one
    re.I,
)


def issue_numbers(text: str) -> list[str]:
    """Issue and pull-request references in ``text``."""
    return [m.group(0) for m in _ISSUE.finditer(text)]
