"""The CLI answers at once: ``--help`` (top level and every subcommand) and a refused argument import no
heavy library (torch, OpenVINO, SB3, ...), checked in a fresh interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Libraries the parsers must not load (the first seven are the slow ones; SciPy, Numba and NetworkX come
#: with the backends and the graph code, which a parser does not need either).
HEAVY = (
    "torch", "transformers", "openvino", "stable_baselines3", "sb3_contrib", "ray", "minari",
    "scipy", "numba", "networkx",
)  # fmt: skip

#: Runs each argv given as JSON through ``experiments.cli.main`` in this interpreter and prints, per argv,
#: its exit status and the heavy modules loaded so far. With no argv, runs ``--help`` of the top level and
#: of every subcommand the parser knows.
SCRIPT = """
import contextlib, io, json, sys
from experiments import cli
heavy = json.loads(sys.argv[1])
argvs = json.loads(sys.argv[2])
if not argvs:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    argvs = [["--help"]] + [[name, "--help"] for name in sub.choices]
for argv in argvs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    loaded = sorted(m for m in heavy if m in sys.modules)
    print(json.dumps({"argv": argv, "code": code, "loaded": loaded, "stderr": err.getvalue()}))
"""


def run_cli(argvs: list[list[str]]) -> list[dict]:
    """Run the argvs in one fresh interpreter; one record per argv."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(HEAVY), json.dumps(argvs)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_help_of_every_command_imports_no_heavy_module():
    records = run_cli([])
    commands = {r["argv"][0] for r in records}
    assert {"--help", "bench", "train", "place", "validate", "leaderboard"} <= commands
    for record in records:
        assert record["code"] == 0, record
        assert record["loaded"] == [], f"{' '.join(record['argv'])} imported {record['loaded']}"


#: Refused arguments of every kind (a type, a choice, a method name, JSON, a missing or unknown option), each
#: with a piece of its one-line message.
BAD = [
    (["bench", "--seeds", "-1"], "must be >= 0"),
    (["bench", "--preset", "huge"], "invalid choice"),
    (["bench", "--budget", "0"], "must be >= 1"),
    (["bench", "--methods", "no_such_method"], "unknown method"),
    (["bench", "--input-shape", "x=1,a"], "NAME=D1,D2"),
    (["train", "--agent", "no_such_method", "--env", "DevicePlacement-bert-cpu_dgpu-sim-v0"], "invalid choice"),
    (["train", "--agent", "heft", "--env", "x", "--env-kwargs", "[1]"], "must be a JSON object"),
    (["place", "--model", "bert"], "required: --platform"),
    (["datasets", "--tasks", "bert"], "model/platform"),
    (["validate", "--no-such-option", "rows.jsonl"], "rows.jsonl does not exist"),
    (["validate", "--no-such-option"], "required: rows"),
    (["leaderboard", "--results"], "expected one argument"),
    (["no-such-command"], "invalid choice"),
]


def test_a_bad_argument_fails_before_any_heavy_import():
    """One interpreter runs them in turn, so the first record that lists a module names the culprit."""
    for (argv, message), record in zip(BAD, run_cli([argv for argv, _ in BAD]), strict=True):
        assert record["code"] == 2 and message in record["stderr"], record
        assert len(record["stderr"].strip().splitlines()) == 1, record["stderr"]
        assert record["loaded"] == [], f"{' '.join(argv)} imported {record['loaded']}"


def test_each_parser_module_summarises_its_command():
    """``--help`` shows a parser module's ``SUMMARY``: it is the first line of its command module's docstring."""
    import importlib
    import pkgutil

    import experiments.cli.parsers

    names = [m.name for m in pkgutil.iter_modules(experiments.cli.parsers.__path__)]
    assert {"bench", "train", "place", "validate"} <= set(names)
    for name in names:
        summary = importlib.import_module(f"experiments.cli.parsers.{name}").SUMMARY
        assert summary == importlib.import_module(f"experiments.cli.{name}").__doc__.splitlines()[0], name
