"""The ``placement-gym`` command: one module per subcommand (each with ``run_from_args``), their light
parsers (:mod:`experiments.cli.parsers`, all ``--help`` needs) and the argument checks and error contract
(:mod:`experiments.cli.arguments`). The CLI depends on the rest of ``experiments``; nothing outside this
package imports it (``tests/test_import_cycles.py``).
"""

from experiments.cli.entry import build_parser, main

__all__ = ["build_parser", "main"]
