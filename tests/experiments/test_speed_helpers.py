"""The helpers the speed scripts share: never-seen random placements, and the throughput ratio of two
worker counts."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.speed.measured_env import unseen_actions
from experiments.speed.ray_backend import rate_ratio


def test_unseen_actions_are_all_different_and_repeat_with_the_seed() -> None:
    nvec = np.array([2, 2, 2])  # 8 placements: drawing 8 forces redraws of repeats
    drawn = [a.tolist() for a in unseen_actions(nvec, np.random.default_rng(0), 8)]
    assert len({tuple(a) for a in drawn}) == 8
    assert drawn == [a.tolist() for a in unseen_actions(nvec, np.random.default_rng(0), 8)]


def test_rate_ratio_pools_the_runs_of_each_worker_count() -> None:
    rows = [
        {"workers": 1, "cells": 10, "seconds": 10.0},
        {"workers": 2, "cells": 10, "seconds": 4.0},
        {"workers": 1, "cells": 10, "seconds": 30.0},  # pooled: 20 cells in 40 s, not a mean of rates
        {"workers": 2, "cells": 30, "seconds": 16.0},
        {"workers": None, "cells": 99, "seconds": 1.0},  # a run without Ray counts for neither
    ]
    assert rate_ratio(rows, "cells", 1, 2) == pytest.approx((40 / 20) / (20 / 40))
