"""Runs that repeat exactly on CPU: the one context every seeded torch method runs in.

A torch method's result depends on more than its seed. Weight initialisation (SB3's orthogonal init is a QR
decomposition in MKL) and reductions split their work over torch's intra-op threads, so the same seed gives
different weights, and from there different placements, with one thread or two, and on a loaded machine
where the thread pool is not the same from one call to the next. :func:`deterministic_torch` therefore fixes
the thread count for the whole run (building the model included), seeds every library the method may draw
from (Python's ``random``, numpy's global generator, torch), and asks torch for deterministic kernels;
everything but the seeds is restored afterwards.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

#: Torch threads of a seeded run unless the method is given others (small networks: one thread is also
#: the fastest on a shared machine).
THREADS = 1


@contextmanager
def deterministic_torch(seed: int | None = None, threads: int | None = THREADS) -> Iterator[None]:
    """Run the body reproducibly on CPU.

    Args:
        seed: Seeds Python's ``random``, numpy's global generator and torch's (``None``: left as they are).
        threads: Torch intra-op threads for the body (``None``: torch's current setting, which makes the
            result depend on the machine).
    """
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    if seed is not None:
        random.seed(int(seed))
        np.random.seed(int(seed) % 2**32)
        torch.manual_seed(int(seed))
    if threads is not None:
        torch.set_num_threads(int(threads))
    # warn_only: an op without a deterministic kernel warns instead of failing the run (none on CPU here)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous_deterministic, warn_only=previous_warn)
        torch.set_num_threads(previous_threads)
