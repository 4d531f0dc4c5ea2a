"""The learned kernel model: round trip, spec-only GPUs, the backward mapping by hand, the
measurement loaders' refusals, and its use inside emulation."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.emulator.devices import kernel_data, kernels
from predictor.emulator.devices.problems import backward_conv_problems, op_problems
from predictor.emulator.devices.specs import DeviceParamsError, load_params, spec_from_file, spec_sheets


def _synthetic(devices=("T4", "V100"), n=400, seed=0) -> pd.DataFrame:
    """GEMM and element-wise problems whose time is roofline × (1 + small-kernel penalty)."""
    rng = np.random.default_rng(seed)
    rows = []
    for device in devices:
        for cls in ("matmul", "elementwise"):
            out = 10 ** rng.uniform(3, 8, n)
            red = 10 ** rng.uniform(1, 4, n) if cls == "matmul" else np.ones(n)
            flops = 2 * out * red if cls == "matmul" else out
            nbytes = 4 * (out * 3 if cls == "elementwise" else out + 2 * np.sqrt(out) * red)
            rows.append(pd.DataFrame({"device": device, "dataset": "synthetic", "op": cls, "cls": cls,
                                      "phase": "forward", "flops": flops, "bytes": nbytes, "out": out, "red": red,
                                      "batches": 1.0, "in_elems": 0.0, "w_elems": 0.0, "half": False,
                                      "training": True, "censored": False, "origin": "synthetic"}))
    data = pd.concat(rows, ignore_index=True)
    data["measured_us"] = 0.0
    for device, idx in data.groupby("device").indices.items():
        part = data.iloc[idx]
        roof = kernels.roofline_us(part, spec_sheets()[device])
        data.loc[data.index[idx], "measured_us"] = roof * (1 + 1e6 / (part["out"].to_numpy() + 1e4))
    return data


@pytest.fixture(scope="module")
def small_model():
    return kernels.fit(_synthetic(), spec_sheets(), rounds=30)


def test_kernel_model_round_trips_its_saved_parameters(small_model, tmp_path):
    data = _synthetic(("T4",), n=50, seed=1)
    path = small_model.save(tmp_path / "model.json")
    again = kernels.load(path)
    assert again.devices == ("T4", "V100") and again.rows == small_model.rows
    for device in ("T4", "V100", "H100"):
        assert np.array_equal(again.predict_us(data, spec_sheets()[device]),
                              small_model.predict_us(data, spec_sheets()[device]))


def test_kernel_model_refuses_a_foreign_or_stale_file(small_model, tmp_path):
    body = json.loads(small_model.save(tmp_path / "m.json").read_text())
    body["features"] = body["features"][:-1]
    (tmp_path / "stale.json").write_text(json.dumps(body))
    with pytest.raises(kernels.KernelModelError, match="stale.json.*'features'"):
        kernels.load(tmp_path / "stale.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(kernels.KernelModelError, match="broken.json: not JSON"):
        kernels.load(tmp_path / "broken.json")


def test_learned_fraction_tracks_the_generating_formula(small_model):
    data = _synthetic(("T4",), n=300, seed=2)
    pred = small_model.predict_us(data, spec_sheets()["T4"])
    assert np.median(np.abs(pred / data["measured_us"] - 1)) < 0.1


def test_spec_only_gpu_gets_predictions_and_the_spec_derived_label(small_model):
    data = _synthetic(("H100",), n=50, seed=3)
    pred = small_model.predict_us(data, spec_sheets()["H100"])
    assert np.isfinite(pred).all() and (pred > 0).all()
    # never faster than its own roofline: the model predicts log(t / roofline) >= 0
    assert (pred >= kernels.roofline_us(data, spec_sheets()["H100"]) * (1 - 1e-9)).all()
    assert kernels.kernel_source("H100", small_model) == "spec-derived"
    assert kernels.kernel_source("T4", small_model) == "measured-kernels"
    assert kernels.kernel_source("T4", None) == "spec-derived"


def test_conv_backward_is_grad_input_plus_grad_weight_by_hand():
    # forward: x (2, 4, 8, 8), weight (8, 4, 3, 3), stride 2 -> grad_out (2, 8, 4, 4)
    # forward FLOPs = 2 · (2·8·4·4 = 256 outputs) · (4·3·3 = 36) = 18,432
    probs = op_problems(7, "ConvolutionBackward0", "backward", [[2, 8, 4, 4], [2, 4, 8, 8], [8, 4, 3, 3]],
                        flops=36864.0, nbytes=8000.0, element=4)
    assert len(probs) == 2 and {p["row"] for p in probs} == {7}
    dgrad, wgrad = probs
    assert dgrad["flops"] == wgrad["flops"] == 18432.0
    assert dgrad["out"] == 2 * 4 * 8 * 8 and dgrad["red"] == 18432 / (2 * 512)  # K·R·S / stride²: 18
    assert wgrad["out"] == 8 * 4 * 3 * 3 and wgrad["red"] == 2 * 4 * 4  # N·P·Q = 32


def test_linear_backward_prices_the_two_recorded_gemms_by_hand():
    # 8 × 512 -> 10 linear: grad-input (8, 10) @ (10, 512), grad-weight (10, 8) @ (8, 512)
    probs = op_problems(0, "AddmmBackward0", "backward", [[8, 10], [10, 512], [10, 8], [8, 512]],
                        flops=163840.0, nbytes=0.0, element=4)
    assert [(p["out"], p["red"], p["flops"]) for p in probs] == [(8 * 512, 10, 81920.0), (10 * 512, 8, 81920.0)]
    assert sum(p["flops"] for p in probs) == 2 * 2 * 8 * 512 * 10
    # without the operand pairs (older datasets): two GEMMs of half the FLOPs each
    probs = op_problems(0, "AddmmBackward0", "backward", [[512, 10]], flops=163840.0, nbytes=12000.0, element=4)
    assert len(probs) == 2 and all(p["flops"] == 81920.0 for p in probs)


def test_backward_conv_rows_of_the_kernel_data_map_the_same_way():
    rows = pd.DataFrame([{"cls": "conv", "flops": 18432.0, "bytes": 8000.0, "out": 256.0, "red": 36.0,
                          "in_elems": 512.0, "w_elems": 288.0, "half": False, "training": True}])
    parts = backward_conv_problems(rows)
    assert parts["out"].tolist() == [512.0, 288.0] and parts["red"].tolist() == [18.0, 32.0]
    assert parts["row"].tolist() == [0, 0]


def _neusight_dir(tmp_path, lines: list[str]):
    folder = tmp_path / "kernels" / "Tesla_T4"
    folder.mkdir(parents=True)
    (folder / "add.csv").write_text("latency_ms,kernel,B,H\n" + "\n".join(lines) + "\n")
    return tmp_path / "kernels"


def test_kernel_file_with_a_malformed_row_names_file_line_and_column(tmp_path):
    root = _neusight_dir(tmp_path, ["0.025,k,1,1", "fast,k,2,2"])
    with pytest.raises(InputError, match=r"add\.csv: line 3: column 'latency_ms'.*'fast'"):
        kernel_data.load_neusight(root)


def test_kernel_rows_on_the_call_floor_are_censored(tmp_path):
    # 1st percentile of (25, 26, 40, 100, 1000) µs ≈ 25.04: rows under 2 × that are censored
    root = _neusight_dir(tmp_path, ["0.025,k,1,1", "0.026,k,1,2", "0.040,k,1,3", "0.100,k,100,1000",
                                    "1.000,k,1000,1000"])
    rows = kernel_data.load_neusight(root)
    assert rows["censored"].tolist() == [True, True, True, False, False]
    assert rows["device"].eq("T4").all() and rows["origin"].iloc[3].endswith("add.csv:5")
    assert rows["bytes"].iloc[4] == 4 * 3 * 1000 * 1000  # two operands and the result, fp32


def test_implausibly_fast_ets_rows_are_dropped_and_counted():
    rows = pd.DataFrame([{"device": "T4", "cls": "matmul", "flops": 1e9, "bytes": 1e6, "half": False,
                          "measured_us": us} for us in (500.0, 20.0)])  # 1 GFLOP: roofline 123 µs on a T4
    kept = kernel_data.drop_implausible(rows, spec_sheets())
    assert kept["measured_us"].tolist() == [500.0] and kept.attrs["implausible"] == 1


def test_spec_file_gpu_is_emulated_and_a_missing_field_is_named(tmp_path):
    spec = {"Device": "My GPU", "Dev_Mem": 24, "Mem_Bw": 600, "Num_Sm": 50, "Freq": 1800, "SingleFLOPs": 20000,
            "L2Cache": 8}
    (tmp_path / "mygpu.json").write_text(json.dumps(spec))
    device = load_params().device(f"emulated:{tmp_path / 'mygpu.json'}")
    assert device.name == "mygpu" and device.fp32_tflops == 20.0 and device.sms == 50
    assert "median of" in device.fitted
    del spec["Num_Sm"]
    (tmp_path / "partial.json").write_text(json.dumps(spec))
    with pytest.raises(DeviceParamsError, match="partial.json: spec file lacks field 'Num_Sm'"):
        spec_from_file(tmp_path / "partial.json")


def test_emulation_prices_covered_ops_with_the_shipped_model():
    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.devices.timing import MIN_KERNEL_US, OpArrays, learned_us
    from tests.predictor.devices.test_timing import _config

    model = kernels.shipped()
    if model is None:
        pytest.skip("no kernel model ships with this checkout (run experiments.kernel_model)")
    trace = capture(_config("resnet18", 2, 32), "meta")
    ops = OpArrays.from_trace(trace)
    spec = spec_sheets()["T4"]
    learned = learned_us(ops, spec, model)
    conv = np.flatnonzero((ops.op_class == "conv") & (ops.phase == "forward"))
    assert np.isfinite(learned[conv]).all() and (learned[conv] >= MIN_KERNEL_US).all()
    first = ops.problems[ops.problems["row"] == conv[0]]
    assert learned[conv[0]] == pytest.approx(max(model.predict_us(first, spec)[0], MIN_KERNEL_US))
    backward = np.flatnonzero((ops.op_class == "conv") & (ops.phase == "backward") & (ops.kernels > 0))
    assert (ops.kernels[backward] == 2).all()
    # a spec-only GPU gets finite kernel times too
    assert np.isfinite(learned_us(ops, replace(spec_sheets()["L4"]), model)[conv]).all()


# --- precision and sources ----------------------------------------------------------------------

def _problem(cls: str, dtype: str) -> pd.DataFrame:
    return pd.DataFrame([{"cls": cls, "dtype": dtype, "flops": 2e9, "bytes": 1e7, "out": 1e6, "red": 1e3,
                          "batches": 1.0, "half": dtype != "float32"}])


def test_tf32_and_amp_choices_by_hand():
    a100, v100 = spec_sheets()["A100"], spec_sheets()["V100"]
    conv32, mm32, mm16 = _problem("conv", "float32"), _problem("matmul", "float32"), _problem("matmul", "float16")
    # cuDNN runs float32 convolutions in TF32 on Ampere; matmuls only with allow_tf32; V100 has no TF32
    assert kernels.math_of(conv32, a100)[0] == "tf32" and kernels.math_of(mm32, a100)[0] == "fp32"
    assert kernels.math_of(mm32, a100, allow_tf32=True)[0] == "tf32" and kernels.math_of(conv32, v100)[0] == "fp32"
    assert kernels.math_of(mm16, v100)[0] == "fp16"
    # rooflines: 2 GFLOP at 156 TFLOP/s (A100 TF32) = 12.8 µs; at 19.49 (FP32) = 102.6 µs; V100 FP16 112 -> 17.9 µs
    assert kernels.roofline_us(conv32, a100)[0] == pytest.approx(2e9 / 156e6)
    assert kernels.roofline_us(mm32, a100)[0] == pytest.approx(2e9 / 19.49e6)
    assert kernels.roofline_us(mm16, v100)[0] == pytest.approx(2e9 / 112e6)
    # an AMP op sequence: its matmuls float16, its softmax float32 (predictor.emulator.capture.amp)
    from predictor.emulator.capture.amp import autocast_trace

    trace = pd.DataFrame({"config_id": "c", "idx": range(3), "op": ["linear", "softmax", "AccumulateGrad"],
                          "phase": ["forward", "forward", "backward"],
                          "input_shapes": ["[[4,8],[16,8],[16]]", "[[4,16]]", "[[16,8]]"],
                          "params": [[], [], []], "flops": [1024.0, 320.0, 0.0], "bytes": [800.0, 512.0, 0.0],
                          "dtype": "float32"})
    amp = autocast_trace(trace)
    assert amp["op"].tolist() == ["_to_copy", "_to_copy", "_to_copy", "linear", "_to_copy", "softmax", "AccumulateGrad"]
    assert (amp.set_index("op").loc["linear", "dtype"] == "float16"
            and amp.set_index("op").loc["softmax", "dtype"] == "float32")
    assert amp.loc[amp["op"] == "linear", "bytes"].item() == 400.0  # half the bytes, the same FLOPs
    # weight (16·8) and bias (16) cast 4 -> 2 bytes, the input (4·8) too; softmax casts its float16 input up
    assert amp.loc[amp["op"] == "_to_copy", "bytes"].tolist() == [6 * 128, 6 * 16, 6 * 32, 6 * 64]


def _constant_fraction(devices, factor: dict[str, float]) -> pd.DataFrame:
    """Every kernel at ``factor[dataset]`` × its roofline: a model's prediction is known by hand."""
    rows = []
    for device in devices:
        for dataset, f in factor.items():
            for cls in ("matmul", "elementwise"):
                out = np.array([1e4, 1e5, 1e6, 1e7] * 10)
                red = np.full(len(out), 256.0) if cls == "matmul" else np.ones(len(out))
                rows.append(pd.DataFrame({"device": device, "dataset": dataset, "op": cls, "cls": cls,
                                          "phase": "forward", "kernel": "forward", "math": "fp32",
                                          "flops": 2 * out * red, "bytes": 12 * out, "out": out, "red": red,
                                          "batches": 1.0, "in_elems": 0.0, "w_elems": 0.0, "half": False,
                                          "training": True, "censored": False, "origin": "fixture", "f": f}))
    data = pd.concat(rows, ignore_index=True)
    data["measured_us"] = 0.0
    for device, idx in data.groupby("device").indices.items():
        part = data.iloc[idx]
        data.loc[data.index[idx], "measured_us"] = kernels.roofline_us(part, spec_sheets()[device]) * part["f"]
    return data.drop(columns="f")


def test_leave_one_gpu_out_and_source_offsets_on_a_fixture_computed_by_hand(monkeypatch):
    # reference harness "ets" at 2x roofline, "neusight" at 3x: the offset is log10(1.5); the held-out
    # GPU's kernels come out at 2x its own roofline in the reference harness, 3x in neusight's
    monkeypatch.setattr(kernels, "REFERENCE", {"gemm": "ets", "memory": "ets"})
    data = _constant_fraction(("T4", "V100", "A100"), {"ets": 2.0, "neusight": 3.0})
    rows = kernels.leave_one_gpu_out(data, spec_sheets(), rounds=5)
    assert rows["rel_error"].max() < 1e-4  # 2x / 3x of the held-out GPU's roofline (offsets kept to 4 decimals)
    model = kernels.fit(data[data["device"] != "A100"], spec_sheets(), rounds=5)
    assert model.offsets["gemm"] == {"ets": 0.0, "neusight": pytest.approx(np.log10(1.5), abs=1e-4)}
    probe = data[(data["device"] == "A100") & (data["dataset"] == "ets")]
    roof = kernels.roofline_us(probe, spec_sheets()["A100"])
    assert model.predict_us(probe, spec_sheets()["A100"]) == pytest.approx(2 * roof, rel=1e-4)
    assert model.predict_us(probe, spec_sheets()["A100"], dataset="neusight") == pytest.approx(3 * roof, rel=1e-3)
