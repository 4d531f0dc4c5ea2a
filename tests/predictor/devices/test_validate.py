"""The validation report on a tiny fixture whose errors are computed by hand; the nsys regime."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.emulator.devices import validate
from predictor.emulator.devices.specs import DeviceParamsError, prior_params, regime_host_factor


def _lomo_errors() -> list[dict]:
    # (source, device, measured s, held-out predicted s)
    rows = [("ets", "T4", 0.100, 0.110), ("ets", "T4", 0.200, 0.170), ("ets", "T4", 0.050, 0.050),
            ("gavel", "K80", 1.000, 1.300), ("gavel", "V100", 0.400, 0.300),
            ("neusight", "V100", 2.000, 2.100)]
    return [{"source": s, "device": d, "model": "m", "measured_s": m, "predicted_s": p} for s, d, m, p in rows]


def test_set_summary_by_hand():
    rows = validate.iteration_rows(_lomo_errors())
    assert rows["set"].tolist() == ["ETS T4"] * 3 + ["Gavel"] * 2 + ["NeuSight V100"]
    sets = validate.set_summary(rows).set_index("set")
    # ETS T4: errors +10 %, -15 %, 0 % -> |.| median 10 %, mean 8.33 %, signed median 0 %
    assert sets.loc["ETS T4", "n"] == 3
    assert sets.loc["ETS T4", "median"] == pytest.approx(0.10)
    assert sets.loc["ETS T4", "mean"] == pytest.approx(0.25 / 3)
    assert sets.loc["ETS T4", "signed_median"] == pytest.approx(0.0)
    assert sets.loc["ETS T4", "within_20"] == 1.0 and sets.loc["ETS T4", "target"]
    # Gavel pools its GPUs: +30 %, -25 % -> median 27.5 %: above the 20 % limit
    assert sets.loc["Gavel", "median"] == pytest.approx(0.275) and not sets.loc["Gavel", "limit"]
    assert sets.loc["Gavel", "within_20"] == 0.0
    assert sets.loc["NeuSight V100", "median"] == pytest.approx(0.05)
    assert list(sets.index) == ["ETS T4", "NeuSight V100", "Gavel"]  # the report's fixed order


def test_kernel_summary_by_hand():
    rows = pd.DataFrame({"cls": ["conv", "conv", "conv", "norm"], "device": ["T4", "T4", "V100", "T4"],
                         "phase": ["forward"] * 3 + ["forward"], "rel_error": [0.1, 0.3, 0.05, 0.2]})
    table = validate.kernel_summary(rows)
    assert table.loc["conv", "T4"] == pytest.approx(0.2) and table.loc["conv", "V100"] == pytest.approx(0.05)
    assert table.loc["conv", "all"] == pytest.approx(0.1) and table.loc["conv", "target"] == 0.10
    assert table.loc["norm", "target"] == 0.15 and np.isnan(table.loc["norm", "V100"])


def test_report_files_and_markdown(tmp_path):
    rows = validate.iteration_rows(_lomo_errors())
    kernel_rows = pd.DataFrame({"cls": ["conv", "conv"], "device": ["T4", "T4"], "phase": ["forward", "backward"],
                                "dataset": "deepbench", "kernel": ["forward", "grad_input"], "math": "fp32",
                                "measured_us": [100.0, 100.0], "predicted_us": [110.0, 70.0], "rel_error": [0.1, 0.3]})
    whole = pd.DataFrame({"set": ["Lambda"], "device": ["A40"], "kernels": ["spec-derived"], "measured_s": [1.0],
                          "predicted_s": [1.25], "error": [0.25], "abs_error": [0.25]})
    validate.write_report(tmp_path, rows, kernel_rows, ["a note"], endtoend=whole)
    text = (tmp_path / "report.md").read_text()
    assert "| ETS T4 | 3 | 10.0% | 8.3% | +0.0% | 100% | yes | yes |" in text
    # one table of every set and GPU: kernels by source (two DeepBench rows: +10 %, -30 %), the sets
    assert "| DeepBench kernels | T4 | leave-one-GPU-out | 2 | 20.0% | -10.0% | 50% |" in text
    assert "| Lambda | A40 | spec-derived | 1 | 25.0% | +25.0% | 0% |" in text
    assert "| conv | grad_input | fp32 | 1 | 1 | 30.0% |" in text
    assert (tmp_path / "endtoend.csv").exists() and (tmp_path / "endtoend.png").stat().st_size > 0
    assert "| Gavel | 2 | 27.5% |" in text and "- a note" in text
    for name in ("iterations.png", "iterations.pdf", "iterations.csv", "kernels.csv"):
        assert (tmp_path / name).stat().st_size > 0


def test_phase_summary_by_hand(tmp_path):
    errors = _lomo_errors()
    # two NeuSight V100 runs measured per phase: forward 0.5 s -> 0.6 (+20 %), 1.0 -> 0.9 (-10 %);
    # backward 1.5 -> 1.5 (0 %), 3.0 -> 2.4 (-20 %)
    errors[5].update(measured_forward_s=0.5, predicted_forward_s=0.6, measured_backward_s=1.5, predicted_backward_s=1.5)
    errors.append({"source": "neusight", "device": "V100", "model": "n", "measured_s": 4.0, "predicted_s": 3.3,
                   "measured_forward_s": 1.0, "predicted_forward_s": 0.9,
                   "measured_backward_s": 3.0, "predicted_backward_s": 2.4})
    rows = validate.iteration_rows(errors)
    table = validate.phase_summary(rows).set_index(["set", "phase"])
    assert list(table.index) == [("NeuSight V100", "forward"), ("NeuSight V100", "backward")]
    assert table.loc[("NeuSight V100", "forward"), "n"] == 2
    assert table.loc[("NeuSight V100", "forward"), "median"] == pytest.approx(0.15)
    assert table.loc[("NeuSight V100", "forward"), "signed_median"] == pytest.approx(0.05)
    assert table.loc[("NeuSight V100", "backward"), "median"] == pytest.approx(0.10)
    assert table.loc[("NeuSight V100", "backward"), "signed_median"] == pytest.approx(-0.10)
    validate.write_report(tmp_path, rows, None, [])
    assert "| NeuSight V100 | forward | 2 | 15.0% | +5.0% |" in (tmp_path / "report.md").read_text()
    assert validate.phase_summary(validate.iteration_rows(_lomo_errors())).empty  # no per-phase rows


def test_regime_host_factor_and_unknown_regime():
    params = prior_params()
    assert regime_host_factor(params, "plain") == 1.0
    assert regime_host_factor(params, "nsys") == params.nsys_host_factor
    with pytest.raises(DeviceParamsError, match="unknown regime 'perf'; known: plain, nsys"):
        regime_host_factor(params, "perf")


def test_nsys_regime_multiplies_host_time_and_widens_the_gaps():
    from dataclasses import replace

    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.devices.timing import emulate
    from tests.predictor.devices.test_timing import _config

    params = replace(prior_params(), nsys_host_factor=3.0)
    trace = capture(_config("resnet18", 2, 32), "meta")
    plain = emulate(trace, "T4", params, noise=False)
    nsys = emulate(trace, "T4", params, noise=False, regime="nsys")
    assert np.allclose(nsys["cpu_us"], 3.0 * plain["cpu_us"])
    assert np.array_equal(nsys["duration_us"], plain["duration_us"])  # kernels are the GPU's
    assert nsys["gap_us"].sum() > plain["gap_us"].sum()
    assert "(nsys regime" in nsys["source"].iloc[0] and "(plain regime" in plain["source"].iloc[0]


def test_op_class_rows_and_summary_by_hand(tmp_path):
    key = {"device": "V100", "workload": "bert_large", "seq": 512}
    measured = pd.DataFrame([
        {**key, "batch": 2, "phase": "forward", "cls": "matmul", "measured_s": 0.30, "nodes": 4, "origin": "f"},
        {**key, "batch": 2, "phase": "forward", "cls": "norm", "measured_s": 0.10, "nodes": 4, "origin": "f"},
        {**key, "batch": 8, "phase": "forward", "cls": "matmul", "measured_s": 1.00, "nodes": 4, "origin": "g"},
        {**key, "batch": 8, "phase": "forward", "cls": "softmax", "measured_s": 0.05, "nodes": 4, "origin": "g"}])
    predicted = [{**key, "batch": 2, "phase": "forward", "cls": "matmul", "predicted_s": 0.36},
                 {**key, "batch": 2, "phase": "forward", "cls": "norm", "predicted_s": 0.05},
                 {**key, "batch": 8, "phase": "forward", "cls": "matmul", "predicted_s": 0.90},
                 {"device": "A100-80GB", "workload": "bert_large", "seq": 512, "batch": 2, "phase": "forward",
                  "cls": "matmul", "predicted_s": 1.0}]  # no label: kept with NaN measured
    rows = validate.class_rows(measured, predicted)
    assert len(rows) == 5 and set(rows["set"]) == {"NeuSight V100", "NeuSight A100-80GB"}
    table = validate.class_summary(rows).set_index(["set", "phase", "cls"])
    v100 = table.loc["NeuSight V100", "forward"]
    # matmul +20 % and -10 % -> median |.| 15 %, signed +5 %; share 1.3 / (1.3 + 0.1) of matched time
    assert (v100.loc["matmul", "median"] == pytest.approx(0.15)
            and v100.loc["matmul", "signed_median"] == pytest.approx(0.05))
    assert v100.loc["matmul", "share"] == pytest.approx(1.3 / 1.4) and v100.loc["norm", "median"] == pytest.approx(0.5)
    assert (v100.loc["softmax", "n"], v100.loc["softmax", "missing"]) == (0, 1)  # labelled, not predicted
    assert np.isnan(v100.loc["softmax", "median"])
    # summed per config: b2 0.41 / 0.40 -> +2.5 %; b8 has softmax unpredicted: 0.90 / 1.05 -> -14.3 %
    assert v100.loc["all", "n"] == 2
    assert v100.loc["all", "median"] == pytest.approx((0.025 + (1 - 0.9 / 1.05)) / 2)
    validate.write_report(tmp_path, validate.iteration_rows(_lomo_errors()), None, [], rows)
    text = (tmp_path / "report.md").read_text()
    assert "| NeuSight V100 | forward | matmul | 2 | 92.9% | 15.0% | +5.0% | 0 |" in text
    assert "| NeuSight V100 | forward | softmax | 0 | 0.0% | – | – | 1 |" in text
    for name in ("op_classes.png", "op_classes.pdf", "op_classes.csv"):
        assert (tmp_path / name).stat().st_size > 0
