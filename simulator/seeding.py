"""Per-key random numbers that are pure functions of a string key.

Why: injected prediction errors and synthetic deadlines must not change for one job when other
jobs are added to or removed from a run, so they are drawn from a hash of (seed, job id, ...)
rather than from a shared generator stream. pandas' hash_array is a fixed-key SipHash, stable
across runs, processes and platforms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def hashed_uniform(keys) -> np.ndarray:
    """One U(0, 1) number per key (never exactly 0 or 1)."""
    h = pd.util.hash_array(np.asarray(keys, dtype=object)).astype(np.uint64)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
