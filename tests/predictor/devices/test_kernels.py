"""The learned kernel model: round trip, spec-only GPUs, the backward mapping by hand, the
measurement loaders' refusals, and its use inside emulation."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor.devices import kernel_data, kernels
from predictor.devices.problems import backward_conv_problems, op_problems
from predictor.devices.specs import SPEC_SHEETS, DeviceParamsError, load_params, spec_from_file


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
        roof = kernels.roofline_us(part, SPEC_SHEETS[device])
        data.loc[data.index[idx], "measured_us"] = roof * (1 + 1e6 / (part["out"].to_numpy() + 1e4))
    return data


@pytest.fixture(scope="module")
def small_model():
    return kernels.fit(_synthetic(), SPEC_SHEETS, rounds=30)


def test_kernel_model_round_trips_its_saved_parameters(small_model, tmp_path):
    data = _synthetic(("T4",), n=50, seed=1)
    path = small_model.save(tmp_path / "model.json")
    again = kernels.load(path)
    assert again.devices == ("T4", "V100") and again.rows == small_model.rows
    for device in ("T4", "V100", "H100"):
        assert np.array_equal(again.predict_us(data, SPEC_SHEETS[device]), small_model.predict_us(data, SPEC_SHEETS[device]))


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
    pred = small_model.predict_us(data, SPEC_SHEETS["T4"])
    assert np.median(np.abs(pred / data["measured_us"] - 1)) < 0.1


def test_spec_only_gpu_gets_predictions_and_the_spec_derived_label(small_model):
    data = _synthetic(("H100",), n=50, seed=3)
    pred = small_model.predict_us(data, SPEC_SHEETS["H100"])
    assert np.isfinite(pred).all() and (pred > 0).all()
    # never faster than its own roofline: the model predicts log(t / roofline) >= 0
    assert (pred >= kernels.roofline_us(data, SPEC_SHEETS["H100"]) * (1 - 1e-9)).all()
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
    with pytest.raises(kernel_data.KernelDataError, match=r"add\.csv: line 3: column 'latency_ms'.*'fast'"):
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
    kept = kernel_data.drop_implausible(rows, SPEC_SHEETS)
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
    from predictor.devices.timing import MIN_KERNEL_US, OpArrays, learned_us
    from tests.predictor.devices.test_timing import _config
    from predictor.capture.opseq import capture

    model = kernels.shipped()
    if model is None:
        pytest.skip("no kernel model ships with this checkout (run experiments.kernel_model)")
    trace = capture(_config("resnet18", 2, 32), "meta")
    ops = OpArrays.from_trace(trace)
    spec = SPEC_SHEETS["T4"]
    learned = learned_us(ops, spec, model)
    conv = np.flatnonzero((ops.op_class == "conv") & (ops.phase == "forward"))
    assert np.isfinite(learned[conv]).all() and (learned[conv] >= MIN_KERNEL_US).all()
    first = ops.problems[ops.problems["row"] == conv[0]]
    assert learned[conv[0]] == pytest.approx(max(model.predict_us(first, spec)[0], MIN_KERNEL_US))
    backward = np.flatnonzero((ops.op_class == "conv") & (ops.phase == "backward") & (ops.kernels > 0))
    assert (ops.kernels[backward] == 2).all()
    # a spec-only GPU gets finite kernel times too
    assert np.isfinite(learned_us(ops, replace(SPEC_SHEETS["L4"]), model)[conv]).all()
