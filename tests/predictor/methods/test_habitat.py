"""Habitat-style cross-device prediction: device table, op groups, wave scaling, the
kernel-varying MLP, the carried-over gap, source/target alignment, training and checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.common import gpus
from predictor.methods import habitat
from predictor.methods.base import summarize
from predictor.methods.training import iteration_mre, run_mlp, sorted_traces
from tests.predictor.methods.multi_device_data import multi_device_traces

FAST = dict(hidden=32, layers=2, lr=1e-2, batch_size=64, max_minutes=2.0)
SOURCE, TARGET = "emulated:T4", "emulated:V100"


@pytest.fixture(scope="module")
def traces():
    return multi_device_traces()


@pytest.fixture(scope="module")
def model(traces):
    # the epoch cap, not the clock, ends it: the test counts its 40 epochs on any machine and load
    config = habitat.HabitatConfig(source_device=SOURCE, max_epochs=40, patience=40, seed=0,
                                   **dict(FAST, max_minutes=60.0))
    return habitat.train(traces, traces, config, device=TARGET, progress=False)


def pair(traces: pd.DataFrame) -> pd.DataFrame:
    return traces[traces["device"].isin([SOURCE, TARGET])]


# --- device table and op groups ------------------------------------------------------------------

def test_device_names_resolve_and_unknown_ones_are_named():
    assert habitat.gpu("emulated:T4") == habitat.gpu("T4") == habitat.gpu("Tesla T4") == habitat.gpu("NVIDIA T4")
    assert habitat.gpu("2080Ti").name == "RTX2080Ti"  # the ETS CSV import's device name
    assert habitat.gpu("Tesla V100-SXM2-16GB").name == "V100-SXM2"  # its own catalogue entry
    assert habitat.gpu("NVIDIA A100-SXM4-40GB").name == "A100-SXM4"
    t4 = habitat.gpu("T4")
    assert t4 is gpus.entry("T4")  # the catalogue's record, not a copy
    assert (t4.sms, t4.boost_clock_mhz, t4.memory_gb, t4.memory_gbs, t4.fp32_tflops) == (40, 1590.0, 16.0, 320.0, 8.14)
    assert habitat.features(t4) == [16.0, 320.0, 40.0, 8.14]
    with pytest.raises(ValueError, match="unknown GPU 'GTX9999' for Habitat; known: A10, .*K80.*V100"):
        habitat.gpu("GTX9999")


@pytest.mark.parametrize("op, group", [
    ("conv2d", "conv2d"), ("ConvolutionBackward0", "conv2d"), ("linear", "linear"), ("AddmmBackward0", "linear"),
    ("MmBackward0", "linear"), ("matmul", "bmm"), ("BmmBackward0", "bmm"), ("bmm", "bmm"), ("lstm", "lstm"),
    ("MkldnnRnnLayerBackward0", "lstm"), ("relu_", None), ("batch_norm", None), ("add_", None),
    ("scaled_dot_product_attention", "bmm"), ("max_pool2d", None)])
def test_kernel_varying_groups(op, group):
    assert habitat.kernel_group(op) == group


# --- wave scaling --------------------------------------------------------------------------------

def test_roofline_gamma_follows_habitats_piecewise_rule():
    flops = np.array([0.0, 50.0, 100.0, 200.0, 100.0, 0.0])
    nbytes = np.array([10.0, 10.0, 10.0, 10.0, 0.0, 0.0])
    # ridge 10 FLOP/byte: I = 0, 5, 10, 20; then FLOPs without bytes; then neither
    assert habitat.roofline_gamma(flops, nbytes, 10.0).tolist() == [1.0, 0.75, 0.5, 0.25, 0.0, 1.0]


def test_wave_scaling_by_hand():
    t4, v100 = habitat.gpu("T4"), habitat.gpu("V100")
    memory_bound = habitat.wave_scale(np.array([100.0]), np.array([0.0]), np.array([1e6]), t4, v100)
    assert memory_bound[0] == pytest.approx(100.0 * 320 / 900)
    compute_bound = habitat.wave_scale(np.array([100.0]), np.array([1e9]), np.array([0.0]), t4, v100)
    assert compute_bound[0] == pytest.approx(100.0 * (1590 / v100.boost_clock_mhz) * (40 / 80))
    ridge = habitat.ridge(v100)  # I = R: gamma 0.5
    mixed = habitat.wave_scale(np.array([100.0]), np.array([ridge * 1e6]), np.array([1e6]), t4, v100)
    assert mixed[0] == pytest.approx(100.0 * math.sqrt(320 / 900) * math.sqrt(1590 / v100.boost_clock_mhz * 40 / 80))
    kept = habitat.wave_scale(np.array([5.0, 50.0]), np.zeros(2), np.ones(2), t4, v100, small_kernel_us=8.0)
    assert kept.tolist() == [5.0, pytest.approx(50.0 * 320 / 900)]


# --- prediction ----------------------------------------------------------------------------------

def test_a_tiny_model_learns_the_kernel_varying_ops(model, traces):
    losses = [h["train_loss"] for h in model.history]
    assert losses[-1] < 0.1 < losses[0] and len(model.history) == 40
    ops = model.predict_ops(pair(traces))
    varying = ops[ops["op"].map(habitat.kernel_group).notna()]
    error = np.abs(varying["pred_duration_us"] - varying["duration_us"]) / varying["duration_us"]
    assert float(np.median(error)) < 0.2
    # the carried-over gap bounds the accuracy: true kernel times + source gaps miss by this much
    truth = (ops["duration_us"] + ops["gap_us"]).groupby(ops["config_id"]).sum()
    oracle = (ops["duration_us"] + ops["source_gap_us"]).groupby(ops["config_id"]).sum()
    floor = float((np.abs(oracle - truth) / truth).mean())
    assert iteration_mre(model.iteration_times(pair(traces))) < floor + 0.03


def test_the_learning_rate_halves_on_plateaus_as_for_every_method(model):
    # the rule of predictor.methods.training.EarlyStopping (halve after 2 epochs without improvement, down
    # to 1/16); Habitat-style training used to run without it
    rates = [h["lr"] for h in model.history]
    assert rates[0] == FAST["lr"] and min(rates) == FAST["lr"] / 16
    assert all(b in (a, a / 2) for a, b in zip(rates, rates[1:]))


def test_gap_is_carried_over_exactly_and_kernel_varying_ops_use_the_mlp_ratio(model, traces):
    ops = model.predict_ops(pair(traces))
    source = pd.concat(sorted_traces(traces[traces["device"] == SOURCE]), ignore_index=True)
    assert np.array_equal(ops["pred_gap_us"].to_numpy(), source["gap_us"].to_numpy())
    assert (ops["device"] == TARGET).all()
    row = ops[ops["op"] == "conv2d"].iloc[[0]]
    group = row["op"].map(habitat.kernel_group)
    f_target = run_mlp(model.model, model.scaler(habitat.raw_features(row, group, habitat.gpu(TARGET))))
    f_source = run_mlp(model.model, model.scaler(habitat.raw_features(row, group, habitat.gpu(SOURCE))))
    expected = row["source_duration_us"].iloc[0] * math.exp(f_target[0] - f_source[0])
    assert row["pred_duration_us"].iloc[0] == pytest.approx(expected, rel=1e-5)  # float32 batching
    alike = ops[ops["op"] == "relu_"].iloc[0]
    scaled = habitat.wave_scale(np.array([alike["source_duration_us"]]), np.array([alike["flops"]]),
                                np.array([alike["bytes"]]), habitat.gpu(SOURCE), habitat.gpu(TARGET))
    assert alike["pred_duration_us"] == pytest.approx(scaled[0])


def test_truth_only_where_the_target_trace_aligns(model, traces):
    data = pair(traces)
    shorter = "vgg11:b2:s32:float32:sgd:c10"
    cut = data[~((data["device"] == TARGET) & (data["config_id"] == shorter) & (data["idx"] == 3))]
    ops = model.predict_ops(cut)
    assert ops.loc[ops["config_id"] == shorter, "duration_us"].isna().all()
    target = traces[(traces["device"] == TARGET) & (traces["config_id"] != shorter)]
    truth = pd.concat(sorted_traces(target), ignore_index=True)
    rest = ops[ops["config_id"] != shorter]
    assert np.array_equal(rest["duration_us"].to_numpy(), truth["duration_us"].to_numpy())
    assert np.array_equal(rest["gap_us"].to_numpy(), truth["gap_us"].to_numpy())
    assert "true_us" not in model.iteration_times(cut)  # some config lacks a per-op truth


def test_prediction_from_the_source_trace_alone(model, traces):
    source = traces[traces["device"] == SOURCE]
    summary = model.iteration_times(source)
    assert len(summary) == 12 and "true_us" not in summary and (summary["device"] == TARGET).all()
    pd.testing.assert_frame_equal(summary, summarize(model.predict_ops(source)))
    with_truth = model.iteration_times(pair(traces))
    assert np.allclose(with_truth["pred_us"], summary["pred_us"])
    # the source GPU under another name (a real T4 trace) predicts the same
    renamed = model.iteration_times(source.assign(device="Tesla T4"))
    assert np.allclose(renamed["pred_us"], summary["pred_us"])


def test_missing_or_ambiguous_source_traces_are_named(model, traces):
    data = pair(traces)
    lonely = "alexnet:b2:s64:float32:sgd:c10"
    no_source = data[~((data["device"] == SOURCE) & (data["config_id"] == lonely))]
    with pytest.raises(ValueError, match=f"have 'emulated:V100' rows but no source .'emulated:T4'. trace: {lonely}"):
        model.predict_ops(no_source)
    with pytest.raises(ValueError, match="no traces of the source device 'emulated:T4'.*present: emulated:V100"
                                         ".*ets collect --device emulated:T4"):
        model.predict_ops(data[data["device"] == TARGET])
    both = pd.concat([data, data[data["device"] == SOURCE].assign(device="T4")])
    with pytest.raises(ValueError, match="several devices that are the source GPU T4 .T4, emulated:T4."):
        model.predict_ops(both)


# --- training and checkpoints --------------------------------------------------------------------

def test_training_errors_are_named(traces):
    config = habitat.HabitatConfig(source_device=SOURCE, max_epochs=1, **FAST)
    with pytest.raises(ValueError, match="source_device must name"):
        habitat.train(traces, traces, habitat.HabitatConfig(), device=TARGET, progress=False)
    with pytest.raises(ValueError, match="pass device=<target GPU>"):
        habitat.train(traces, traces, config, progress=False)
    with pytest.raises(ValueError, match="unknown GPU 'GTX9999'"):
        habitat.train(traces, traces, config, device="GTX9999", progress=False)
    with pytest.raises(ValueError, match="must both hold traces"):
        habitat.train(traces, traces.iloc[:0], config, device=TARGET, progress=False)
    no_target = traces[traces["device"] != TARGET]
    with pytest.raises(ValueError, match="no rows of the target device 'emulated:V100'"):
        habitat.train(no_target, traces, config, device=TARGET, progress=False)
    with pytest.raises(ValueError, match="validation split needs configs measured on both"):
        habitat.train(traces, no_target, config, device=TARGET, progress=False)
    with pytest.raises(ValueError, match="unknown GPU 'cpu'"):
        habitat.train(pd.concat([traces, traces.head(5).assign(device="cpu")]), traces, config, device=TARGET,
                      progress=False)


def test_training_is_seeded(traces):
    data = traces[traces["family"].isin(["resnet", "vgg"])]
    config = habitat.HabitatConfig(source_device=SOURCE, max_epochs=2, patience=2, seed=3, **FAST)
    a = habitat.train(data, data, config, device=TARGET, progress=False).predict_ops(pair(data))
    b = habitat.train(data, data, config, device=TARGET, progress=False).predict_ops(pair(data))
    pd.testing.assert_frame_equal(a, b)


def test_checkpoint_round_trip_gives_identical_predictions(model, traces, tmp_path):
    path = model.save(tmp_path / "habitat.pt")
    again = habitat.load(path)
    assert again.method == "habitat" and again.device == TARGET and again.config == model.config
    assert again.history == model.history and again.fingerprint == model.fingerprint
    pd.testing.assert_frame_equal(again.predict_ops(pair(traces)), model.predict_ops(pair(traces)))


def test_mismatched_and_foreign_checkpoints_are_refused(model, tmp_path):
    path = model.save(tmp_path / "habitat.pt")
    body = checkpoint_file.read(path)
    body["config"]["layers"] = 3
    checkpoint_file.write(tmp_path / "arch.pt", body)
    with pytest.raises(CheckpointError, match="arch.pt.*weights do not match"):
        habitat.load(tmp_path / "arch.pt")
    body["n_features"] = 7
    checkpoint_file.write(tmp_path / "layout.pt", body)
    with pytest.raises(CheckpointError, match="layout.pt.*reads 7 features.*incompatible"):
        habitat.load(tmp_path / "layout.pt")
    body["method"] = "opbased"
    checkpoint_file.write(tmp_path / "other.pt", body)
    with pytest.raises(CheckpointError, match="other.pt: a 'opbased' checkpoint, not a 'habitat' one"):
        habitat.load(tmp_path / "other.pt")
    body["format"] = 2
    checkpoint_file.write(tmp_path / "new.pt", body)
    with pytest.raises(CheckpointError, match="new.pt.*format 2"):
        habitat.load(tmp_path / "new.pt")
    (tmp_path / "junk.pt").write_bytes(b"\x00junk")
    with pytest.raises(CheckpointError, match="junk.pt: not a checkpoint of this tool"):
        habitat.load(tmp_path / "junk.pt")
