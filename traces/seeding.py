"""Per-key random numbers that are pure functions of a string key, the same on every machine.

Why: injected prediction errors and synthetic deadlines must not change for one job when other
jobs are added to or removed from a run, so they are drawn from a hash of (seed, job id, ...)
rather than from a shared generator stream. pandas' hash_array is a fixed-key SipHash, stable
across runs, processes and platforms. Seeded numbers must also not depend on the CPU: numpy's
SIMD ``exp``/``log`` round some results differently with and without AVX-512, which changed
synthetic durations and noisy predictions in the last bit, and with them whole schedules, from
one machine to the next; the seeded paths use :func:`scalar_exp` and :func:`scalar_log` (the C
library's scalar functions) instead.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def hashed_uniform(keys) -> np.ndarray:
    """One U(0, 1) number per key (never exactly 0 or 1)."""
    h = pd.util.hash_array(np.asarray(keys, dtype=object)).astype(np.uint64)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _scalar(fn, x) -> np.ndarray:
    values = np.asarray(x, dtype=np.float64)
    return np.fromiter(map(fn, values.ravel().tolist()), np.float64, values.size).reshape(values.shape)


def scalar_exp(x) -> np.ndarray:
    """``np.exp`` without SIMD: the same bits on CPUs with and without AVX-512."""
    return _scalar(math.exp, x)


def scalar_log(x) -> np.ndarray:
    """``np.log`` without SIMD (see :func:`scalar_exp`); x > 0."""
    return _scalar(math.log, x)
