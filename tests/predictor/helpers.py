"""Assertions shared by the predictor tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from predictor.common.op_trace import OpTraceFormatError


def expect_error(call: Callable[[], object], path: Path | str, row: int | None,
                 field: str | None) -> OpTraceFormatError:
    """The call raises OpTraceFormatError naming the file, the row (line or event index) and field."""
    with pytest.raises(OpTraceFormatError) as info:
        call()
    err = info.value
    msg = str(err)
    assert err.path == str(path) and str(path) in msg, msg
    assert err.row == row, msg
    if row is not None:
        assert f"{path}:{row}:" in msg, msg
    assert err.field == field, msg
    if field is not None:
        assert repr(field) in msg, msg
    return err


def iteration_times_us(df: pd.DataFrame) -> pd.Series:
    """Iteration time per (device, config_id): sum of duration + gap."""
    return (df["duration_us"] + df["gap_us"]).groupby([df["device"], df["config_id"]]).sum()
