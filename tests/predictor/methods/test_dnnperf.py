"""DNNPerf baseline: a tiny graph model overfits tiny data, the predictor contract, checkpoints, seeding."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.methods import dnnperf
from tests.predictor.ets_data import tiny_traces

FAST = dict(hidden=32, layers=2, heads=2, lr=5e-3, batch_size=4, max_minutes=2.0)
COLUMNS = ["config_id", "device", "family", "model", "ops", "pred_us", "pred_duration_us", "pred_gap_us",
           "pred_forward_us", "pred_backward_us", "pred_update_us", "true_us"]


@pytest.fixture(scope="module")
def traces():
    return tiny_traces()


@pytest.fixture(scope="module")
def overfit(traces):
    data = traces[traces["family"].isin(["alexnet", "resnet", "squeezenet"])]
    entries = []
    # 120 epochs whatever the machine's load: the time budget must not be what stops it
    config = dnnperf.DnnPerfConfig(max_epochs=120, patience=120, seed=0, **dict(FAST, max_minutes=60.0))
    model = dnnperf.train(data, data, config, progress=False, split={"train": 8}, log=entries.append)
    return model, data, entries


def test_a_tiny_model_overfits_a_tiny_dataset(overfit):
    model, data, entries = overfit
    losses = [h["train_loss"] for h in model.history]
    assert losses[-1] < 0.1 < losses[0]
    summary = model.iteration_times(data)
    mre = float(np.mean(np.abs(summary["pred_us"] - summary["true_us"]) / summary["true_us"]))
    assert mre < 0.05 and mre == pytest.approx(min(h["val_mre"] for h in model.history), abs=1e-4)
    assert entries == model.history and len(entries) == 120
    assert list(entries[0]) == ["epoch", "wall_s", "train_loss", "val_mre", "lr"]


def test_iteration_times_follow_the_contract(overfit):
    model, data, _ = overfit
    summary = model.iteration_times(data)
    assert list(summary.columns) == COLUMNS
    assert list(summary["config_id"]) == sorted(data["config_id"].unique())
    assert (summary["device"] == "emulated:T4").all() and model.device == "emulated:T4"
    sizes = data.groupby("config_id").size()
    assert list(summary["ops"]) == list(sizes[summary["config_id"]])
    truth = (data["duration_us"] + data["gap_us"]).groupby(data["config_id"]).sum()
    assert np.allclose(summary["true_us"], truth[summary["config_id"]])
    assert summary[["pred_duration_us", "pred_gap_us", "pred_forward_us", "pred_backward_us",
                    "pred_update_us"]].isna().all().all()
    assert (summary["pred_us"] > 0).all() and model.method == "dnnperf" and model.split == {"train": 8}
    assert not hasattr(model, "predict_ops")
    unknown = model.iteration_times(data.assign(duration_us=np.nan))  # a trace to predict, no truth
    assert "true_us" not in unknown and np.allclose(unknown["pred_us"], summary["pred_us"])


def test_batched_inference_equals_one_trace_at_a_time(overfit):
    model, data, _ = overfit
    together = model.iteration_times(data).set_index("config_id")["pred_us"]
    for config, rows in data.groupby("config_id"):
        alone = model.iteration_times(rows)["pred_us"].iloc[0]
        assert alone == pytest.approx(together[config], rel=1e-5)


def test_scalers_come_from_the_training_split(overfit, traces):
    model, data, _ = overfit
    parts = data.groupby("config_id")
    assert model.scalers.node_scale == pytest.approx(parts.size().mean())
    # anchored (the default): log of each iteration time over 1 µs plus its ops' analytical times
    times = (data["duration_us"] + data["gap_us"]).groupby(data["config_id"]).sum()
    anchor = 1 + pd.Series(model.spec.anchor_us(data), index=data.index).groupby(data["config_id"]).sum()
    assert model.spec.anchored and (anchor > 1).all()
    log_times = np.log(times / anchor)
    assert model.scalers.target_mean == pytest.approx(log_times.mean())
    assert model.scalers.target_std == pytest.approx(log_times.std(ddof=0))


def test_checkpoint_round_trip_gives_identical_predictions(overfit, tmp_path, traces):
    model, data, _ = overfit
    again = dnnperf.load(model.save(tmp_path / "m.pt"))
    assert again.device == model.device and again.fingerprint == model.fingerprint and again.fingerprint
    assert again.history == model.history and again.split == model.split and again.config == model.config
    pd.testing.assert_frame_equal(again.iteration_times(traces), model.iteration_times(traces))


def test_mismatched_and_foreign_checkpoints_are_refused_with_a_reason(overfit, tmp_path):
    model, _, _ = overfit
    path = model.save(tmp_path / "m.pt")
    body = checkpoint_file.read(path)
    body["spec"]["ops"] = body["spec"]["ops"][:-1]  # one op type fewer: the weights no longer fit
    checkpoint_file.write(tmp_path / "spec.pt", body)
    with pytest.raises(CheckpointError, match="spec.pt.*incompatible"):
        dnnperf.load(tmp_path / "spec.pt")
    body = checkpoint_file.read(path)
    body["config"]["hidden"] = 16
    checkpoint_file.write(tmp_path / "arch.pt", body)
    with pytest.raises(CheckpointError, match="arch.pt.*weights do not match"):
        dnnperf.load(tmp_path / "arch.pt")
    body = checkpoint_file.read(path)
    body["method"] = "ets"
    checkpoint_file.write(tmp_path / "ets.pt", body)
    with pytest.raises(CheckpointError, match="ets.pt: a 'ets' checkpoint, not a 'dnnperf' one"):
        dnnperf.load(tmp_path / "ets.pt")
    body["method"], body["format"] = "dnnperf", 0
    checkpoint_file.write(tmp_path / "old.pt", body)
    with pytest.raises(CheckpointError, match="old.pt.*format 0"):
        dnnperf.load(tmp_path / "old.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not a checkpoint of this tool"):
        dnnperf.load(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="nothing.pt: no such checkpoint"):
        dnnperf.load(tmp_path / "nothing.pt")


def test_training_is_seeded_and_the_gatv2_encoder_trains(traces):
    data = traces[traces["family"] == "mobilenet_v2"]
    config = dnnperf.DnnPerfConfig(max_epochs=3, patience=3, seed=3, conv="gatv2", **FAST)
    a = dnnperf.train(data, data, config, progress=False)
    b = dnnperf.train(data, data, config, progress=False)
    pd.testing.assert_frame_equal(a.iteration_times(data), b.iteration_times(data))
    assert len(a.history) == 3 and np.isfinite(a.history[-1]["val_mre"])
    other = dnnperf.train(data, data, dnnperf.DnnPerfConfig(max_epochs=3, patience=3, seed=4, conv="gatv2", **FAST),
                          progress=False)
    assert not np.allclose(other.iteration_times(data)["pred_us"], a.iteration_times(data)["pred_us"])


def test_bad_input_is_refused_with_a_clear_message(traces):
    data = traces[traces["family"] == "vgg"]
    config = dnnperf.DnnPerfConfig(max_epochs=1, **FAST)
    with pytest.raises(ValueError, match="must both hold traces"):
        dnnperf.train(data, data.iloc[:0], config, progress=False)
    with pytest.raises(ValueError, match="several devices"):
        dnnperf.train(data, data.assign(device="emulated:V100"), config, progress=False)
    with pytest.raises(ValueError, match="holds no traces of device 'T4'"):
        dnnperf.train(data, data, config, device="T4", progress=False)
    with pytest.raises(ValueError, match="iteration time 0.0 µs is not positive"):
        dnnperf.train(data.assign(duration_us=0.0, gap_us=0.0), data, config, progress=False)
    with pytest.raises(ValueError, match="conv must be one of"):
        dnnperf.train(data, data, dnnperf.DnnPerfConfig(conv="gcn"), progress=False)
    with pytest.raises(ValueError, match="multiple of heads"):
        dnnperf.train(data, data, dnnperf.DnnPerfConfig(hidden=30, heads=4), progress=False)
