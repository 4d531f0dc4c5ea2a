"""Imported traces carried onto our captures (predictor.emulator.capture.align): hand-checkable matching,
timings kept whole, features taken from the capture; the real ETS files when ../shared is here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.emulator.capture import align, ets_csv
from predictor.emulator.capture.opseq import capture
from predictor.emulator.zoo.vision import config_for
from predictor.features import encode, fit_features

FIXTURES_ETS = Path(__file__).resolve().parents[2] / "fixtures" / "ets"
# What the ETS profiler calls our captured op names (one row per kernel-launching op).
ETS_NAME = {"relu_": "relu", "cross_entropy_loss": "cross_entropy", "ConvolutionBackward0": "conv2d",
            "ReluBackward0": "relu", "MaxPool2DWithIndicesBackward0": "max_pool2d", "AddmmBackward0": "linear",
            "NllLossBackward0": "cross_entropy", "MulBackward0": "dropout",
            "AdaptiveAvgPool2DBackward0": "adaptive_avg_pool2d"}
NOT_RECORDED = {"flatten", "ones_like", "AccumulateGrad", "TBackward0", "ViewBackward0", "LogSoftmaxBackward0"}


def test_canonical_names_meet():
    assert align.canonical("relu_") == align.canonical("relu") == "relu"
    assert align.canonical("__iadd__") == align.canonical("add_") == align.canonical("__add__") == "add"
    assert align.canonical("ConvolutionBackward0", "backward") == "conv2d"
    assert align.canonical("AddmmBackward0", "backward") == align.canonical("linear", "backward") == "linear"
    assert align.canonical("MulBackward0", "backward") == align.canonical("dropout", "backward") == "mul"
    assert align.canonical("dropout", "forward") == "dropout"  # only its backward is a multiply
    assert align.canonical("aten::clone") == align.canonical("contiguous") == "clone"


def test_match_prefers_agreeing_flops():
    # The residual add must pair with the add of the same FLOPs, not the num_batches_tracked one.
    real = ["conv2d", "batch_norm", "add", "relu"]
    real_flops = np.array([100.0, 10.0, 8.0, 8.0])
    captured = ["conv2d", "add", "batch_norm", "add", "relu"]
    captured_flops = np.array([100.0, 0.0, 10.0, 8.0, 8.0])
    assert align.match(real, real_flops, captured, captured_flops) == [(0, 0), (1, 2), (2, 3), (3, 4)]
    assert align.match(["x"], np.array([1.0]), ["y"], np.array([1.0])) == []


@pytest.fixture(scope="module")
def captured() -> pd.DataFrame:
    return capture(config_for("alexnet", 2, 64), "meta")


def _as_imported(captured: pd.DataFrame, seed: int = 0) -> tuple[pd.DataFrame, list[int]]:
    """``captured`` as the ETS profiler would record it: kernel ops only, its names, another
    params layout, the last linear logged twice, timings drawn at random. Returns it and, per
    row, the captured index it came from."""
    keep = [i for i, (op, f) in enumerate(zip(captured["op"], captured["flops"]))
            if op not in NOT_RECORDED and not (op == "add_" and f == 0)]
    last_linear = max(i for i in keep if captured["op"].iloc[i] == "linear")
    origin = sorted(keep + [last_linear])
    real = captured.iloc[origin].copy().reset_index(drop=True)
    real["op"] = [ETS_NAME.get(o, o) for o in real["op"]]
    real["params"] = [[4] + list(p) + [0] for p in real["params"]]
    real["input_shapes"] = "[]"
    rng = np.random.default_rng(seed)
    real["duration_us"] = rng.uniform(1, 100, len(real)).round(3)
    real["gap_us"] = rng.uniform(-1, 50, len(real)).round(3)
    real["cpu_us"] = rng.uniform(1, 20, len(real)).round(3)
    real["kernels"] = 1
    real["device"] = "GPUX"
    real["config_id"] = "ets:alexnet:b2:64x64:float32:1"
    real["idx"] = np.arange(len(real))
    real["source"] = [f"alexnet.1_7.csv:{i + 2}" for i in range(len(real))]
    return real, origin


def test_alignment_carries_timings_onto_captured_features(captured):
    real, origin = _as_imported(captured)
    result = align.align(real, captured)
    out = result.trace
    assert result.real_rows == len(real) and result.captured_rows == len(captured)
    assert result.matched == len(real) - 1  # all but the duplicate linear row
    # Features are the capture's, row for row.
    for col in ("op", "phase", "input_shapes", "flops", "bytes"):
        assert out[col].tolist() == captured[col].tolist()
    assert out["params"].tolist() == captured["params"].tolist()
    assert set(out["device"]) == {"GPUX"} and set(out["config_id"]) == {"ets:alexnet:b2:64x64:float32:1"}
    # Timings are kept whole.
    for col in ("duration_us", "gap_us", "cpu_us"):
        assert out[col].sum() == pytest.approx(real[col].sum(), abs=1e-9)
    # Each imported row lands on the captured op it came from; the duplicate folds into its twin.
    expected = np.zeros(len(captured))
    for r, c in enumerate(origin):
        expected[c] += real["duration_us"].iloc[r]
    np.testing.assert_allclose(out["duration_us"].to_numpy(), expected)
    assert (out.loc[[i for i in range(len(captured)) if i not in origin], "duration_us"] == 0).all()
    assert out["source"].iloc[origin[0]] == "alexnet.1_7.csv:2"
    assert out["source"].iloc[14].startswith("capture:meta (no row in")  # flatten
    # Same features as the capture: the encoder sees identical inputs.
    spec = fit_features(captured.assign(duration_us=1.0, gap_us=1.0, cpu_us=1.0), top_k=10)
    np.testing.assert_array_equal(encode(spec, out), encode(spec, captured.assign(device="GPUX")))


def test_zoo_config_reasons(captured):
    real, _ = _as_imported(captured)
    real["params"] = [[4, 2, 7] if o == "cross_entropy" else p for o, p in zip(real["op"], real["params"])]
    assert ets_csv.zoo_config(real) == replace(config_for("alexnet", 2, 64), num_classes=7)
    with pytest.raises(ValueError, match="dtype float64"):
        ets_csv.zoo_config(real.assign(dtype="float64"))
    with pytest.raises(ValueError, match="'tinynet' is not in the zoo"):
        ets_csv.zoo_config(real.assign(model="tinynet"))
    with pytest.raises(ValueError, match="no forward cross_entropy row"):
        ets_csv.zoo_config(real[real["op"] != "cross_entropy"])


def test_real_resnet18_aligns_whole(shared_dir):
    path = shared_dir / "ets_traces" / "T4" / "resnet18.144_7.csv"
    if not path.exists():
        pytest.skip(f"{path} not found")
    real = ets_csv.load(path)
    config = ets_csv.zoo_config(real)
    assert (config.model, config.batch, config.input_size, config.dtype) == ("resnet18", 64, 128, "float32")
    result = align.align(real, capture(config, "meta"))
    assert result.matched == result.real_rows == 315
    assert result.matched_time_share == pytest.approx(1.0)
    assert result.name_agreement < 1 and result.params_agreement == 0  # other names and layout
    assert 0.5 < result.flops_agreement < 1  # same conv FLOPs, other batch_norm counts
    assert result.trace["duration_us"].sum() == pytest.approx(real["duration_us"].sum())
    assert result.trace["gap_us"].sum() == pytest.approx(real["gap_us"].sum())


def test_cli_import_lists_what_cannot_be_aligned(tmp_path):
    from click.testing import CliRunner

    from predictor.cli import main as ets

    fixture = str(FIXTURES_ETS / "GPUX")
    result = CliRunner().invoke(ets, ["import", "ets-csv", fixture, "--out", str(tmp_path / "zoo")])
    assert result.exit_code != 0
    assert "model 'tinynet' is not in the zoo" in result.output
    assert "no iteration could be aligned" in result.output and "Traceback" not in result.output
    recorded = CliRunner().invoke(ets, ["import", "ets-csv", fixture, "--out", str(tmp_path / "rec"),
                                        "--features", "recorded"])
    assert recorded.exit_code == 0, recorded.output
    assert "imported 2 iteration(s)" in recorded.output
    wrong = CliRunner().invoke(ets, ["import", "kineto", fixture, "--out", str(tmp_path / "k"), "--features", "zoo"])
    assert wrong.exit_code == 2 and "aligns ets-csv imports only" in wrong.output


def test_an_iteration_that_matches_nothing_is_listed_not_raised(captured):
    real, _ = _as_imported(captured)
    real["op"] = "no_such_op"
    aligned, report, skipped = align.align_onto_zoo(real, lambda trace: config_for("alexnet", 2, 64))
    assert aligned.empty and report.empty
    assert [s.config_id for s in skipped] == ["ets:alexnet:b2:64x64:float32:1"]
    assert "no imported row matches" in skipped[0].reason and skipped[0].source == "alexnet.1_7.csv"
