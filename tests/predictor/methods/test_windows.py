"""Sliding windows and overlap averaging against hand-computed examples, padding included."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.methods.windows import average_windows, first_window_only, gather, window_index, window_starts


def test_window_starts_cover_the_trace_and_pad_only_the_last():
    assert list(window_starts(20, 12, 4)) == [0, 4, 8]  # 8 + 12 = 20: exact, no padding
    assert list(window_starts(13, 12, 4)) == [0, 4]  # second window 4..15 pads 3 slots
    assert list(window_starts(5, 12, 4)) == [0]  # shorter than a window: one padded window
    assert list(window_starts(12, 12, 4)) == [0]
    index = window_index(13, 12, 4)
    assert index.shape == (2, 12)
    assert list(index[1]) == [4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -1, -1]


def test_stride_beyond_width_is_refused():
    with pytest.raises(ValueError, match="stride 6 > width 4"):
        window_starts(10, 4, 6)


def test_overlap_averaging_by_hand():
    # n = 6, width 4, stride 2: windows [0..3], [2..5]; ops 2 and 3 are in both
    index = window_index(6, 4, 2)
    assert index.tolist() == [[0, 1, 2, 3], [2, 3, 4, 5]]
    pred = np.array([[[1.0], [2.0], [3.0], [4.0]], [[5.0], [6.0], [7.0], [8.0]]])
    avg = average_windows(pred, index, 6)
    assert avg[:, 0].tolist() == [1.0, 2.0, (3 + 5) / 2, (4 + 6) / 2, 7.0, 8.0]
    assert first_window_only(pred, index, 6)[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 7.0, 8.0]


def test_padding_never_reaches_the_aggregate():
    # n = 5, width 4, stride 2: windows [0..3], [2..5 -> 2,3,4,pad]
    index = window_index(5, 4, 2)
    pred = np.ones((2, 4, 2))
    pred[1, 3] = 1e9  # whatever the model says for the padding slot
    out = average_windows(pred, index, 5)
    assert np.allclose(out, 1.0) and out.shape == (5, 2)
    values = np.arange(10.0).reshape(5, 2)
    laid = gather(values, index)
    assert laid[1, 3].tolist() == [0.0, 0.0] and laid[1, 2].tolist() == [8.0, 9.0]
