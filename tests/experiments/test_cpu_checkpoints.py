"""The shipped CPU checkpoints: trained on the real CPU set, intervals per family group from the
protocol's out-of-fold predictions, and usable as they ship."""

from __future__ import annotations

import pytest

from experiments.cpu_benchmark import REFERENCE_DATA
from predictor import methods
from predictor.checkpoints import CHECKPOINT_DIR
from predictor.common.families import group_of
from predictor.common.op_trace import read_dataset
from predictor.evaluate import evaluate


@pytest.mark.parametrize("method", ["ets", "opbased"])
def test_a_shipped_cpu_checkpoint_predicts_cpu_iterations_with_intervals_per_group(method):
    model = methods.load(CHECKPOINT_DIR / f"{method}-cpu.pt")
    assert model.device == "cpu"
    calibration = model.intervals
    assert calibration.family_groups and calibration.kind.endswith("mondrian-by-group")
    assert dict(zip(calibration.families, calibration.family_groups)) == {f: group_of(f) for f in calibration.families}
    traces = read_dataset(REFERENCE_DATA)
    some = sorted(traces["config_id"].unique())[:4]
    result = evaluate(model, traces[traces["config_id"].isin(some)]).per_trace
    assert len(result) == 4 and (result["pred_us"] > 0).all()
    assert (result["pred_us"] / result["true_us"]).between(1 / 3, 3).all()  # trained on them: close
    low, high = calibration.bounds(result["pred_us"], 0.9, result["family"])
    assert (low < result["pred_us"]).all() and (result["pred_us"] < high).all()
