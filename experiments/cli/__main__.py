"""``python -m experiments.cli``: the ``placement-gym`` command."""

import sys

from experiments.cli.entry import main

sys.exit(main())
