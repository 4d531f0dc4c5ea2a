"""Physics-anchored targets: the bound on the roofline, the round trip, extrapolation to ops ten
times larger than any in training (with the anchor and, failing, without), re-anchoring on
another device, and old checkpoints and CPU datasets without peaks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.common.op_trace import COLUMNS
from predictor.emulator import peaks
from predictor.features import decode_targets, encode, encode_targets, fit_features, raw_targets
from predictor.methods import ets

T4 = peaks.for_device("T4")  # 8.14 TFLOP/s float32, 320 GB/s (spec-derived)
LINEAR_EFFICIENCY, RELU_EFFICIENCY, LAUNCH_US, GAP_US = 0.6, 0.8, 5.0, 2.0
FAST = dict(hidden=16, layers=2, lr=1e-2, batch_size=64, max_minutes=10.0, max_epochs=60, patience=60)


def roofline_trace(config_id: str, family: str, batch: int, widths: list[int]) -> pd.DataFrame:
    """One iteration on a synthetic device that runs every op at a fixed share of the T4's
    roofline plus a launch cost: linear layers of ``widths`` (batch × w → w) with ReLUs."""
    rows = []
    for width in widths:
        flops = 2.0 * batch * width * width
        nbytes = 4.0 * (2 * batch * width + width * width)
        linear = T4.estimate_us(["linear"], [flops], [nbytes], ["float32"])[0] / LINEAR_EFFICIENCY + LAUNCH_US
        relu_bytes = 8.0 * batch * width
        relu = T4.estimate_us(["relu"], [batch * width], [relu_bytes], ["float32"])[0] / RELU_EFFICIENCY + LAUNCH_US
        rows += [("linear", [batch, width, width], flops, nbytes, linear),
                 ("relu", [batch, width], float(batch * width), relu_bytes, relu)]
    table = pd.DataFrame({
        "config_id": config_id, "device": "T4", "family": family, "model": family, "idx": np.arange(len(rows)),
        "op": [r[0] for r in rows], "phase": "forward", "input_shapes": "[]", "params": [r[1] for r in rows],
        "flops": [r[2] for r in rows], "bytes": [r[3] for r in rows], "dtype": "float32", "batch": batch,
        "input_size": 0, "cpu_us": np.nan, "duration_us": [r[4] for r in rows], "gap_us": GAP_US, "kernels": 1,
        "source": "synthetic"})
    return table.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def synthetic_sets() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training: batch 4–64, widths 256–2048; the test: batch 640 at width 2048, 10× the FLOPs
    of the largest training op."""
    rng = np.random.default_rng(0)
    train = [roofline_trace(f"small:{i}", "small", int(rng.integers(4, 65)),
                            [int(w) for w in rng.choice([256, 512, 1024, 1536, 2048], 8)]) for i in range(60)]
    train.append(roofline_trace("small:edge", "small", 64, [2048] * 8))
    return pd.concat(train, ignore_index=True), roofline_trace("large:0", "large", 640, [2048] * 8)


@pytest.fixture(scope="module")
def sets():
    return synthetic_sets()


def _largest_op_error(transform: str, sets) -> float:
    train, test = sets
    val = train[train["config_id"].isin({f"small:{i}" for i in range(50, 60)})]
    fit = train[~train["config_id"].isin(set(val["config_id"]))]
    model = ets.train(fit, val, ets.EtsConfig(target_transform=transform, seed=0, **FAST), progress=False)
    ops = model.predict_ops(test)
    linear = ops[ops["op"] == "linear"]
    return float((linear["pred_duration_us"] / linear["duration_us"]).median() - 1)


def test_a_model_trained_on_small_ops_predicts_a_ten_times_larger_op_only_with_the_anchor(sets):
    train, test = sets
    largest = train.loc[train["op"] == "linear", "flops"].max()
    assert test.loc[test["op"] == "linear", "flops"].min() == pytest.approx(10 * largest)
    anchored, plain = _largest_op_error("anchored", sets), _largest_op_error("log", sets)
    assert abs(anchored) <= 0.25, f"anchored: {anchored:+.1%}"
    assert abs(plain) > 0.25, f"log targets extrapolated within 25 % ({plain:+.1%}): the test shows nothing"


def test_the_anchored_head_cannot_predict_an_op_faster_than_its_roofline(sets):
    train, test = sets
    spec = fit_features(train, target_transform="anchored", peaks=T4)
    # every normalised output, however negative, decodes to at least the op's analytical time
    for value in (-1e3, -5.0, 0.0):
        out = decode_targets(spec, test, np.full((len(test), 2), value, dtype=np.float32))
        assert (out[:, 0] >= spec.anchor_us(test) * (1 - 1e-6)).all()
    # and the targets round-trip (every synthetic op is slower than its roofline)
    back = decode_targets(spec, train, encode_targets(spec, train))
    assert np.allclose(back, raw_targets(train), rtol=1e-4, atol=1e-3)


def test_a_class_whose_training_ops_beat_the_roofline_is_bounded_by_the_fastest_of_them(sets):
    train, test = sets
    fast = train.copy()
    conv = (fast["op"] == "linear") & (fast["config_id"] == "small:edge")
    anchor = fit_features(train, target_transform="anchored", peaks=T4).anchor_us(fast)
    fast.loc[conv, "duration_us"] = 0.5 * anchor[conv.to_numpy()]  # e.g. Winograd: fewer FLOPs than counted
    spec = fit_features(fast, target_transform="anchored", peaks=T4)
    assert set(spec.floor) == {"matmul"}
    expected = np.log1p(0.5 * anchor[conv.to_numpy()]) - np.log1p(anchor[conv.to_numpy()])
    assert spec.floor["matmul"] == pytest.approx(expected.min())
    out = decode_targets(spec, test, np.full((len(test), 2), -1e3, dtype=np.float32))[:, 0]
    bound = spec.anchor_us(test)
    linear = (test["op"] == "linear").to_numpy()
    assert (out[~linear] >= bound[~linear] * (1 - 1e-6)).all()  # relu: still the roofline
    assert (out[linear] < bound[linear]).all() and (out[linear] >= 0.5 * bound[linear] * 0.99).all()


def test_an_op_that_launches_no_kernel_has_no_analytical_time():
    """A view's shapes would copy 2 × 4 MB; it moves nothing, and a GPU records no time for it."""
    nbytes, flops = 8.0 * 2 ** 20, 2.0 ** 20
    est = T4.estimate_us(["permute", "PermuteBackward0", "view", "AccumulateGrad", "add"], [flops] * 5,
                         [nbytes] * 5, ["float32"] * 5)
    assert est[:4].tolist() == [0.0] * 4
    assert est[4] == pytest.approx(nbytes / 320e9 * 1e6)  # 26.2 µs: memory-bound at 320 GB/s


def _ceiling_trace(family: str, ratios_by_width: dict[int, float]) -> pd.DataFrame:
    """Linear ops (batch 64 × w → w) running at exp(ratio) × their roofline on the T4."""
    base = roofline_trace(f"{family}:0", family, 64, list(ratios_by_width))
    linear = (base["op"] == "linear").to_numpy()
    anchor = T4.estimate_us(base["op"], base["flops"], base["bytes"], base["dtype"])
    ratio = base["params"].map(lambda p: ratios_by_width[p[1]]).to_numpy()
    duration = np.where(linear, np.expm1(np.log1p(anchor) + ratio), base["duration_us"])
    return base.assign(duration_us=duration)


def _ceiling_spec(ratios_a: dict[int, float], ratios_b: dict[int, float]):
    train = pd.concat([_ceiling_trace("a", ratios_a), _ceiling_trace("b", ratios_b)], ignore_index=True)
    return train, fit_features(train, target_transform="anchored", peaks=T4)


def test_an_op_is_no_slower_than_the_slowest_training_op_of_its_class_at_least_its_size():
    # T4 analytical times of a batch-64 linear: width 256 ≈ 0.28 µs, 1024 ≈ 13.9 µs, 4096 ≈ 222 µs
    ratios = {256: 2.0, 1024: 1.0, 4096: 0.5}
    train, spec = _ceiling_spec(ratios, ratios)  # each family fits under the other's envelope: margin 1
    from predictor.features import size_bins

    linear = (train["op"] == "linear").to_numpy()
    bins = size_bins(spec.anchor_us(train)[linear][:3]).tolist()
    assert spec.ceiling["matmul"] == [[bins[0], 2.0], [bins[1], 1.0], [bins[2], 0.5]]  # running max, large down
    test = _ceiling_trace("t", {64: 0.0, 2048: 0.0, 16384: 0.0})
    out = decode_targets(spec, test, np.full((len(test), 2), 1e3, dtype=np.float32))[:, 0]
    a = spec.anchor_us(test)
    mask = (test["op"] == "linear").to_numpy()
    # smaller than any seen: the class's highest; between 1024 and 4096: 1024's; larger than any: 4096's
    assert out[mask] == pytest.approx(np.expm1(np.log1p(a[mask]) + np.array([2.0, 1.0, 0.5])), rel=1e-9)
    # the relus' launch cost makes small ones the least efficient: their ceiling falls with size
    values = [v for _, v in spec.ceiling["elementwise"]]
    assert len(values) > 1 and values == sorted(values, reverse=True)
    assert (out[~mask] <= np.expm1(np.log1p(a[~mask]) + values[0]) * (1 + 1e-9)).all()


def test_the_ceiling_widens_until_every_training_family_fits_under_the_others_and_else_is_off():
    flat = {256: 0.2, 1024: 0.2, 4096: 0.2}
    # family b's largest linear is 1.4x less efficient than a's: it fits under a's envelope x 1.5,
    # not x 1.25 (it is most of b's time), so the margin is 1.5 for every bin
    _, spec = _ceiling_spec(flat, {**flat, 4096: 0.2 + np.log(1.4)})
    envelope = [0.2 + np.log(1.4)] * 3
    assert [v for _, v in spec.ceiling["matmul"]] == pytest.approx([e + np.log(1.5) for e in envelope])
    # 12x less efficient: no margin up to 5x fits it, so the envelope does not hold on this device
    _, off = _ceiling_spec(flat, {**flat, 4096: 2.5})
    assert off.ceiling == {}
    # one family: nothing to check the envelope on
    single = fit_features(_ceiling_trace("a", flat), target_transform="anchored", peaks=T4)
    assert single.ceiling == {}


def test_anchored_features_carry_the_analytical_time_clipped_to_the_training_range(sets):
    train, test = sets
    spec = fit_features(train, target_transform="anchored", peaks=T4)
    assert spec.dim == fit_features(train).dim + 1
    x = encode(spec, test)
    ceiling = (np.asarray(spec.high) - spec.mean) / spec.std
    assert (x[:, -spec.n_continuous:] <= ceiling + 1e-4).all()
    assert np.isclose(x[:, -1], ceiling[-1], atol=1e-4).any()  # the big ops sit at the edge
    with pytest.raises(ValueError, match="peaks"):
        fit_features(train, target_transform="anchored")


def test_a_spec_round_trips_with_its_peaks_and_an_old_spec_still_loads(sets):
    train, _ = sets
    from predictor.features import FeatureSpec

    spec = fit_features(train, target_transform="anchored", peaks=T4)
    again = FeatureSpec.from_dict(spec.to_dict())
    assert again == spec and again.anchor_us(train) == pytest.approx(spec.anchor_us(train))
    old = fit_features(train).to_dict()
    assert "peaks" not in old and FeatureSpec.from_dict(old).anchored is False
    with pytest.raises(ValueError, match="peaks"):
        FeatureSpec.from_dict({**spec.to_dict(), "peaks": {}})
    with pytest.raises(ValueError, match="'low'/'high'"):  # a stranger's spec: refused on load, not on use
        FeatureSpec.from_dict({**spec.to_dict(), "low": spec.low[:-1]})
    for bad in ([[3, 1.0], [2, 0.5]], [[2, float("nan")]], [["2", 1.0]], "high", []):
        with pytest.raises(ValueError, match="'ceiling.matmul'"):
            FeatureSpec.from_dict({**spec.to_dict(), "ceiling": {"matmul": bad}})
    with pytest.raises(ValueError, match="'ceiling' must be an object"):
        FeatureSpec.from_dict({**spec.to_dict(), "ceiling": [1]})


def test_fine_tuning_on_another_gpu_re_anchors_on_it(sets):
    train, _ = sets
    val = train[train["config_id"].isin({f"small:{i}" for i in range(50, 60)})]
    config = ets.EtsConfig(target_transform="anchored", seed=0, **{**FAST, "max_epochs": 1})
    parent = ets.train(train, val, config, progress=False)
    moved = train.assign(device="A100")
    child = ets.train(moved, moved[moved["config_id"].isin(set(val["config_id"]))], config, progress=False,
                      parent=parent)
    assert parent.spec.peaks["device"] == "T4" and child.spec.peaks["device"] == "A100"


def test_anchored_training_on_a_cpu_without_recorded_peaks_is_refused_with_the_command(sets):
    train, _ = sets
    cpu = train.assign(device="cpu")
    config = ets.EtsConfig(target_transform="anchored", **FAST)
    with pytest.raises(InputError, match="ets dataset peaks"):
        ets.train(cpu, cpu, config, progress=False)
    recorded = peaks.Peaks("cpu", {"float32": 1e11}, {"float32": 1e11}, 2e10, "measured: by hand")
    model = ets.train(cpu, cpu, ets.EtsConfig(target_transform="anchored", **{**FAST, "max_epochs": 1}),
                      progress=False, peaks=recorded)
    assert model.spec.peaks["origin"] == "measured: by hand"


def test_ets_train_on_a_cpu_dataset_names_the_peaks_command_then_uses_the_recorded_peaks(sets, tmp_path):
    from click.testing import CliRunner

    from predictor.cli import main as ets_cli
    from predictor.common.op_trace import write_traces

    train, _ = sets
    data = tmp_path / "cpu-data"
    family = np.where(train["config_id"].str[-1].isin(list("0369")), "a", "b")  # two families to split
    write_traces(data, train.assign(device="cpu", family=family))
    args = ["train", "--method", "opbased", "--data", str(data), "--epochs", "1",  # anchored: the default
            "--test-fraction", "0", "--out", str(tmp_path / "m.pt")]
    refused = CliRunner().invoke(ets_cli, args)
    assert refused.exit_code == 1 and "ets dataset peaks" in refused.output and "Traceback" not in refused.output
    peaks.record(data, peaks.Peaks("cpu", {"float32": 1e11}, {"float32": 1e11}, 2e10, "measured: by hand"))
    done = CliRunner().invoke(ets_cli, args)
    assert done.exit_code == 0, done.output
    from predictor import methods

    assert methods.load(tmp_path / "m.pt").spec.peaks["origin"] == "measured: by hand"


def test_a_shipped_checkpoint_of_the_log_design_still_loads_and_predicts():
    from pathlib import Path

    from predictor import methods
    from tests.predictor.ets_data import tiny_traces

    # the emulated-T4 ETS checkpoint shipped before anchored targets became the default (see its README)
    model = methods.load(Path(__file__).parents[1] / "data" / "ets-T4-log-design.pt")
    assert model.spec.target_transform == "log" and not model.spec.anchored and not model.spec.peaks
    times = model.iteration_times(tiny_traces())
    assert (times["pred_us"] > 0).all() and np.isfinite(times["pred_us"]).all()


def test_a_checkpoint_whose_config_predates_the_target_option_keeps_its_spec_targets(tmp_path):
    """The default became anchored; a config saved without the field must not claim it."""
    from pathlib import Path

    from predictor import checkpoint_file, methods

    body = checkpoint_file.read(Path(__file__).parents[1] / "data" / "ets-T4-log-design.pt")
    del body["config"]["target_transform"]
    checkpoint_file.write(tmp_path / "old.pt", body)
    model = methods.load(tmp_path / "old.pt")
    assert model.config.target_transform == model.spec.target_transform == "log"
