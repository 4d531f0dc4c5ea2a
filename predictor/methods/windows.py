"""Sliding windows over an op sequence, and the overlap averaging that maps window outputs back.

Why: ETS predicts each op's (duration, gap) from its neighbours: a window of ``width`` ops
starting every ``stride`` ops. The authors pad the last window with dummy ops and then *add* the
dummies' predictions into the iteration time (predictors.md §1.4); here padding is a mask that
both the loss and the aggregation honour.

Windows of a trace of n ops start at 0, stride, 2·stride, … up to and including the first start
whose window reaches the end (start + width ≥ n); that window is padded to ``width``. With
stride ≤ width every op lies in at least one window. A trace shorter than ``width`` is one padded
window.
"""

from __future__ import annotations

import numpy as np


def window_starts(n: int, width: int, stride: int) -> np.ndarray:
    if width < 1 or stride < 1:
        raise ValueError(f"window width and stride must be >= 1, got {width} and {stride}")
    if stride > width:
        raise ValueError(f"stride {stride} > width {width} would leave ops outside every window")
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    last = max(0, -(-(n - width) // stride) * stride)  # first multiple of stride with start + width >= n
    return np.arange(0, last + 1, stride, dtype=np.int64)


def window_index(n: int, width: int, stride: int) -> np.ndarray:
    """[windows, width] op indices of each window slot; -1 marks padding."""
    starts = window_starts(n, width, stride)
    index = starts[:, None] + np.arange(width)[None, :]
    return np.where(index < n, index, -1)


def gather(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values [n, k] laid into windows [w, width, k]; padding slots are zero."""
    out = values[np.maximum(index, 0)]
    out[index < 0] = 0
    return out


def average_windows(predictions: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """Per op, the mean of its predictions over the windows that contain it (padding ignored).

    predictions [w, width, k], index [w, width] from :func:`window_index` -> [n, k].
    """
    mask = index >= 0
    k = predictions.shape[-1]
    sums = np.zeros((n, k))
    np.add.at(sums, index[mask], predictions[mask])
    counts = np.bincount(index[mask], minlength=n)
    if (counts == 0).any():
        raise ValueError(f"{int((counts == 0).sum())} ops lie in no window")
    return sums / counts[:, None]


def first_window_only(predictions: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """The no-overlap ablation: each op takes the prediction of the first window containing it."""
    out = np.full((n, predictions.shape[-1]), np.nan)
    for w in range(index.shape[0] - 1, -1, -1):  # later windows first, earlier ones overwrite
        slots = index[w] >= 0
        out[index[w][slots]] = predictions[w][slots]
    return out
