"""The operator-based baseline: per-op duration MLP, zero gaps, early stopping, checkpoints."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.emulator import peaks
from predictor.features import fit_features
from predictor.methods import opbased
from predictor.methods.training import iteration_mre
from tests.predictor.ets_data import tiny_traces

FAST = dict(hidden=32, layers=2, lr=1e-2, batch_size=64, max_minutes=2.0)


@pytest.fixture(scope="module")
def traces():
    return tiny_traces()


@pytest.fixture(scope="module")
def overfit(traces):
    alexnet = traces[traces["family"] == "alexnet"]
    entries = []
    config = opbased.OpBasedConfig(max_epochs=80, patience=80, seed=0, **FAST)
    return opbased.train(alexnet, alexnet, config, progress=False, log=entries.append), alexnet, entries


def test_a_tiny_model_overfits_the_op_durations(overfit):
    model, data, entries = overfit
    losses = [h["train_loss"] for h in model.history]
    assert losses[-1] < 0.1 < losses[0]
    assert entries == model.history and len(entries) == 80
    assert set(entries[0]) == {"epoch", "wall_s", "train_loss", "val_mre", "lr"}
    # the best epoch's weights are kept: the final model scores the best validation MRE
    best = min(h["val_mre"] for h in model.history)
    assert iteration_mre(model.iteration_times(data)) == pytest.approx(best, abs=1e-4)
    ops = model.predict_ops(data)
    busy = ops[ops["duration_us"] > 20]  # the real kernels, not the bookkeeping ops
    error = np.abs(busy["pred_duration_us"] - busy["duration_us"]) / busy["duration_us"]
    assert float(np.median(error)) < 0.3


def test_gaps_are_predicted_as_zero_and_ops_sum_to_the_iteration(overfit):
    model, data, _ = overfit
    ops = model.predict_ops(data)
    assert (ops["pred_gap_us"] == 0).all() and (ops["pred_duration_us"] >= 0).all()
    summary = model.iteration_times(data)
    per_trace = ops.groupby("config_id")["pred_duration_us"].sum()
    assert np.allclose(summary.set_index("config_id")["pred_us"], per_trace)
    assert (summary["pred_gap_us"] == 0).all()
    truth = (data["duration_us"] + data["gap_us"]).groupby(data["config_id"]).sum()
    assert np.allclose(summary.set_index("config_id")["true_us"], truth)


def test_features_are_fitted_on_the_training_split_only(traces):
    train, val = traces[traces["family"] == "resnet"], traces[traces["family"] == "vgg"]
    config = opbased.OpBasedConfig(max_epochs=1, patience=1, top_k=5, **FAST)
    model = opbased.train(train, val, config, progress=False)
    reference = fit_features(train, top_k=5, target_transform="anchored", peaks=peaks.for_device("emulated:T4"))
    assert model.spec.ops == reference.ops and np.allclose(model.spec.mean, reference.mean)


def test_checkpoint_round_trip_gives_identical_predictions(overfit, tmp_path):
    model, data, _ = overfit
    path = model.save(tmp_path / "op.pt")
    again = opbased.load(path)
    assert again.method == "opbased" and again.device == "emulated:T4"
    assert again.fingerprint == model.fingerprint and again.history == model.history
    pd.testing.assert_frame_equal(again.iteration_times(data), model.iteration_times(data))


def test_mismatched_and_foreign_checkpoints_are_refused(overfit, tmp_path):
    model, _, _ = overfit
    path = model.save(tmp_path / "op.pt")
    body = checkpoint_file.read(path)
    body["spec"]["ops"] = body["spec"]["ops"][:-1]
    checkpoint_file.write(tmp_path / "spec.pt", body)
    with pytest.raises(CheckpointError, match="spec.pt.*incompatible"):
        opbased.load(tmp_path / "spec.pt")
    body = checkpoint_file.read(path)
    body["config"]["hidden"] = 8
    checkpoint_file.write(tmp_path / "arch.pt", body)
    with pytest.raises(CheckpointError, match="arch.pt.*weights do not match"):
        opbased.load(tmp_path / "arch.pt")
    body["method"] = "ets"
    checkpoint_file.write(tmp_path / "ets.pt", body)
    with pytest.raises(CheckpointError, match="ets.pt: a 'ets' checkpoint, not a 'opbased' one"):
        opbased.load(tmp_path / "ets.pt")
    body["format"] = 0
    checkpoint_file.write(tmp_path / "old.pt", body)
    with pytest.raises(CheckpointError, match="old.pt.*format 0"):
        opbased.load(tmp_path / "old.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not a checkpoint of this tool"):
        opbased.load(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="absent.pt: no such checkpoint"):
        opbased.load(tmp_path / "absent.pt")


def test_training_is_seeded(traces):
    data = traces[traces["family"] == "squeezenet"]
    config = opbased.OpBasedConfig(max_epochs=2, patience=2, seed=3, **FAST)
    a = opbased.train(data, data, config, progress=False).predict_ops(data)
    b = opbased.train(data, data, config, progress=False).predict_ops(data)
    pd.testing.assert_frame_equal(a, b)
    config.seed = 4
    c = opbased.train(data, data, config, progress=False).predict_ops(data)
    assert not np.allclose(a["pred_duration_us"], c["pred_duration_us"])


def test_user_errors_are_named(traces):
    data = traces[traces["family"] == "alexnet"]
    config = opbased.OpBasedConfig(max_epochs=1, **FAST)
    with pytest.raises(ValueError, match="must both hold traces"):
        opbased.train(data, data.iloc[:0], config, progress=False)
    two = pd.concat([data, data.assign(device="emulated:V100")])
    with pytest.raises(ValueError, match="several devices .*emulated:T4, emulated:V100"):
        opbased.train(two, two, config, progress=False)
    model = opbased.train(two, two, config, device="emulated:V100", progress=False)
    assert model.device == "emulated:V100"
    with pytest.raises(ValueError, match="no traces of device 'P100'; present: emulated:T4, emulated:V100"):
        opbased.train(two, two, config, device="P100", progress=False)
    with pytest.raises(ValueError, match="at least one hidden layer"):
        opbased.train(data, data, opbased.OpBasedConfig(layers=0), progress=False)
