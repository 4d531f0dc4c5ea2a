"""Device peaks and the analytical op time: by hand on a GPU of the catalogue and on a CPU with
recorded peaks, a lower bound of every emulated op, and peaks that are missing or malformed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.inputs import InputError
from predictor.emulator import peaks
from predictor.emulator.capture.opseq import capture
from predictor.emulator.devices.specs import load_params
from predictor.emulator.devices.timing import emulate
from predictor.emulator.zoo.config import ModelConfig

OPS = ["conv2d", "linear", "relu"]


def test_the_estimate_by_hand_on_a_t4():
    t4 = peaks.for_device("cuda:Tesla T4")  # a trace's name for it: the catalogue's alias
    assert t4.device == "T4" and t4.origin.startswith("spec-derived")
    # conv float32: 1.628 GFLOP at 8.14 TFLOP/s = 200 µs (its 1 MB is 3 µs at 320 GB/s);
    # matmul float16: 6.5 GFLOP on the 65 TFLOP/s tensor cores = 100 µs;
    # relu float32: 1 MFLOP, 320 MB at 320 GB/s = 1,000 µs (memory-bound)
    est = t4.estimate_us(OPS, [1.628e9, 6.5e9, 1e6], [1e6, 1e6, 3.2e8], ["float32", "float16", "float32"])
    assert est == pytest.approx([200.0, 100.0, 1000.0])


def test_float32_convolutions_may_use_tf32_on_an_a100():
    a100 = peaks.gpu_peaks("emulated:A100")  # 19.49 TFLOP/s FP32, 156 TFLOP/s TF32
    est = a100.estimate_us(["convolution", "add"], [1.56e9, 1.949e8], [0.0, 0.0], ["float32", "float32"])
    assert est == pytest.approx([10.0, 10.0])


def test_the_estimate_by_hand_on_a_cpu_with_recorded_peaks(tmp_path):
    cpu = peaks.Peaks("cpu", {"float32": 1e11}, {"float32": 1e11}, 2e10, "measured: by hand")
    peaks.record(tmp_path, cpu)
    peaks.record(tmp_path, peaks.gpu_peaks("T4"))  # a second device: both kept
    got = peaks.for_device("cpu", tmp_path)
    assert got == cpu
    # conv 1 GFLOP at 100 GFLOP/s = 10 ms; matmul in float16 has no entry: float32's rate;
    # add: 400 MB at 20 GB/s = 20 ms
    est = got.estimate_us(["conv2d", "mm", "add"], [1e9, 2e9, 1e8], [1e6, 1e6, 4e8], ["float32", "float16", "float32"])
    assert est == pytest.approx([1e4, 2e4, 2e4])
    assert set(json.loads((tmp_path / peaks.PEAKS_FILE).read_text())) == {"cpu", "T4"}


def test_a_measured_cpu_is_positive_and_says_it_was_measured():
    cpu = peaks.measure_cpu(repeats=1, gemm_size=128, copy_mb=4)
    assert cpu.device == "cpu" and cpu.origin.startswith("measured:")
    assert cpu.gemm_flops["float32"] > 1e6 and cpu.bytes_per_s > 1e6


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("gpu", ["T4", "A100", "H100"])
def test_no_emulated_op_runs_faster_than_its_estimate(gpu, dtype):
    config = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=16, input_size=32,
                         num_classes=10, dtype=dtype)
    trace = emulate(capture(config, "meta"), gpu, load_params(), noise=False)  # the shipped kernel model
    est = peaks.gpu_peaks(gpu).estimate_us(trace["op"], trace["flops"], trace["bytes"], trace["dtype"])
    busy = trace["duration_us"].to_numpy() > 0
    assert busy.sum() > 100 and np.all(est[busy] <= trace["duration_us"].to_numpy()[busy])


def test_a_cpu_without_recorded_peaks_is_refused_with_the_command_that_records_them(tmp_path):
    with pytest.raises(InputError, match=r"device 'cpu' has no recorded peaks.*ets dataset peaks DATASET_DIR"
                                               r".*--target-transform log"):
        peaks.for_device("cpu", tmp_path)
    with pytest.raises(InputError, match=r"unknown GPU type 'Voodoo5'.*gpu_catalog.*--target-transform log"):
        peaks.for_device("cuda:Voodoo5")


@pytest.mark.parametrize("body, field", [
    ({"cpu": {"device": "cpu", "origin": "x", "gemm_flops": {"float32": 1e9}, "other_flops": {"float32": 1e9},
              "bytes_per_s": "fast"}}, "bytes_per_s"),
    ({"cpu": {"device": "cpu", "origin": "x", "gemm_flops": {"float32": -1}, "other_flops": {"float32": 1e9},
              "bytes_per_s": 1e9}}, "gemm_flops.float32"),
    ({"cpu": {"device": "cpu", "origin": "x", "gemm_flops": {}, "other_flops": {"float32": 1e9},
              "bytes_per_s": 1e9}}, "gemm_flops"),
    ({"cpu": {"origin": "x"}}, "device"),
])
def test_a_malformed_peaks_file_names_file_device_and_field(tmp_path, body, field):
    (tmp_path / peaks.PEAKS_FILE).write_text(json.dumps(body))
    with pytest.raises(InputError, match=rf"peaks.json: device 'cpu'.*{field}"):
        peaks.for_device("cpu", tmp_path)
    (tmp_path / peaks.PEAKS_FILE).write_text("[" * 100_000)  # a stranger's file: one line, no crash
    with pytest.raises(InputError, match="peaks.json: JSON nested 100,000 levels deep"):
        peaks.for_device("cpu", tmp_path)


def test_recording_from_the_command_line_keeps_a_record_without_overwrite(tmp_path):
    first = CliRunner().invoke(ets, ["dataset", "peaks", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "GFLOP/s" in first.stdout and peaks.for_device("cpu", tmp_path).origin.startswith("measured:")
    kept = peaks.for_device("cpu", tmp_path)
    again = CliRunner().invoke(ets, ["dataset", "peaks", str(tmp_path)])
    assert again.exit_code == 1 and "already records this dataset's cpu peaks; --overwrite" in again.stderr
    assert peaks.for_device("cpu", tmp_path) == kept
    assert CliRunner().invoke(ets, ["dataset", "peaks", str(tmp_path), "--overwrite"]).exit_code == 0
