"""The iteration-time table: lookups, round trip, refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from predictor.tables import IterationTimeTable


def test_iteration_time_table_round_trip_and_errors(tmp_path):
    table = IterationTimeTable(pd.DataFrame({"config_id": ["m1", "m1", "m2"], "device": ["V100", "T4", "V100"],
                                             "seconds": [0.1, 0.2, 0.05]}))
    path = tmp_path / "t.parquet"
    table.save(path)
    again = IterationTimeTable.load(path)
    assert again.seconds("m1", "T4") == 0.2 and len(again) == 3
    assert again.matrix(["m1", "m2"], ["V100"]).tolist() == [[0.1], [0.05]]
    with pytest.raises(KeyError, match="config 'm2' on device 'T4'"):
        again.seconds("m2", "T4")
    with pytest.raises(ValueError, match="non-positive"):
        IterationTimeTable(pd.DataFrame({"config_id": ["x"], "device": ["V100"], "seconds": [0.0]}))
    with pytest.raises(ValueError, match="lacks column"):
        IterationTimeTable(pd.DataFrame({"config_id": ["x"], "seconds": [1.0]}))
