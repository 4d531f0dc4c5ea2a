"""`ets devices time` / predictor.emulator.devices.step_time: the numbers are the emulated trace's sums,
the output is machine-readable, and user errors are one-line usage errors."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.inputs import InputError
from predictor.emulator.capture.opseq import capture
from predictor.emulator.capture.quiet import quiet_profiler
from predictor.emulator.devices import kernels
from predictor.emulator.devices.specs import load_params
from predictor.emulator.devices.step_time import resolve_config, step_time, summarize
from predictor.emulator.devices.timing import emulate
from predictor.emulator.zoo.config import ModelBuildError

TINY = ["resnet18", "--batch", "2", "--size", "32"]
KEYS = {"forward_ms", "backward_ms", "update_ms", "total_ms", "overhead_share", "device", "source"}


@pytest.fixture(scope="module")
def config():
    return resolve_config("resnet18", 2, 32)


@pytest.fixture(scope="module")
def trace(config):
    return capture(config, "meta")


def _expected_source(key: str) -> str:
    model = kernels.load()
    return "measured-kernels" if model is not None and key in model.devices else "spec-derived"


def test_step_time_is_the_sum_of_the_emulated_trace(config, trace):
    params = load_params()
    result = step_time(config, "emulated:T4", params)
    rows = emulate(trace, "emulated:T4", params, noise=False)  # the same op sequence, timed independently
    step = rows["duration_us"] + rows["gap_us"]
    for phase in ("forward", "backward", "update"):
        assert result[f"{phase}_ms"] == pytest.approx(step[rows["phase"] == phase].sum() / 1e3, rel=1e-9)
    assert result["forward_ms"] + result["backward_ms"] + result["update_ms"] == result["total_ms"]
    assert result["total_ms"] == pytest.approx(step.sum() / 1e3, rel=1e-9)
    assert result["kernel_ms"] == pytest.approx(rows["duration_us"].sum() / 1e3, rel=1e-9)
    assert result["overhead_share"] == pytest.approx(rows["gap_us"].sum() / step.sum(), rel=1e-9)
    assert result["ops"] == len(rows) == len(trace)
    assert result["device"] == "emulated:T4" and result["config_id"] == config.config_id
    assert result["source"] == _expected_source("T4") and result["params_version"] == params.version


def test_summarize_rejects_unknown_phases(trace):
    rows = emulate(trace, "T4", load_params(), noise=False)
    rows.loc[0, "phase"] = "warmup"
    with pytest.raises(ValueError, match="warmup"):
        summarize(rows, "spec-derived", "v")


def test_json_output_is_one_object_with_the_keys():
    result = CliRunner().invoke(ets, ["devices", "time", *TINY, "--device", "emulated:T4", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert KEYS <= set(body) and body["device"] == "emulated:T4"
    assert body["forward_ms"] > 0 and body["backward_ms"] > 0 and body["update_ms"] > 0
    assert 0 <= body["overhead_share"] < 1


def test_spec_only_gpu_is_labelled_spec_derived():
    result = CliRunner().invoke(ets, ["devices", "time", "squeezenet1_1", "--batch", "2", "--size", "32",
                                      "--device", "emulated:H100"])
    assert result.exit_code == 0, result.output
    source = _expected_source("H100")
    assert source == "spec-derived" or "H100" in kernels.load().devices
    assert "emulated:H100" in result.output and "emulated GPU" in result.output and source in result.output
    assert "total" in result.output and "forward" in result.output


def test_unknown_gpu_lists_the_known_ones():
    result = CliRunner().invoke(ets, ["devices", "time", *TINY, "--device", "emulated:GTX480"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "unknown GPU type 'emulated:GTX480'" in result.output and "emulated:<name>" in result.output
    for gpu in ("K80", "T4", "V100", "A100", "H100", "B200"):  # the catalogue's names
        assert f" {gpu}," in result.output


def test_unknown_model_is_a_usage_error_with_close_names():
    result = CliRunner().invoke(ets, ["devices", "time", "resnt18", "--device", "emulated:T4"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "unknown model 'resnt18'" in result.output and "resnet18" in result.output
    assert "known families" in result.output and "transformer" in result.output


def test_unbuildable_size_names_the_size():
    result = CliRunner().invoke(ets, ["devices", "time", "alexnet", "--size", "8", "--device", "emulated:T4"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "8 px" in result.output and "alexnet" in result.output


def test_name_resolution_covers_sequence_models_and_ids():
    c = resolve_config("transformer_encoder_tiny", batch=4, size=64)  # --seq is --size
    assert (c.kind, c.model, c.batch, c.input_size, c.get("size")) == ("nlp", "transformer_encoder", 4, 64, "tiny")
    assert resolve_config("lstm_lm").get("size") == "medium"
    llm = resolve_config("gpt3_27", batch=1, size=128)  # NeuSight name
    assert (llm.kind, llm.model, llm.optimizer) == ("llm", "gpt3_2.7b", "adam")
    vid = resolve_config("resnet50:b16:s128:float16:adam:c10")
    assert (vid.batch, vid.input_size, vid.dtype, vid.optimizer, vid.num_classes) == (16, 128, "float16", "adam", 10)
    assert resolve_config("resnet50:b16:s128:float16:adam:c10", batch=8).batch == 8
    with pytest.raises(InputError, match="did you mean"):
        resolve_config("mobilenet_v9")
    with pytest.raises(ModelBuildError, match="4096"):
        resolve_config("transformer_encoder", size=9000)


def test_seq_option_reaches_the_config():
    result = CliRunner().invoke(ets, ["devices", "time", "transformer_encoder_tiny", "--batch", "2", "--seq", "32",
                                      "--device", "V100", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config_id"].startswith("transformer_encoder:b2:s32:")


def test_quiet_profiler_drops_only_the_known_noise(capfd, monkeypatch):
    monkeypatch.delenv("ETS_PROFILER_LOGS", raising=False)
    with quiet_profiler():
        os.write(2, b"USDT:2026-12-01 13:50:45 1:1 SyncActivityProfilerHandler.cpp:39] profiler_start\n")
        os.write(2, b"ERROR:2026-12-01 13:50:45 1:1 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n")
        os.write(2, b"ERROR:2026-12-01 13:50:45 1:1 Other.cpp:1] a real error\n")
    err = capfd.readouterr().err
    assert err == "ERROR:2026-12-01 13:50:45 1:1 Other.cpp:1] a real error\n"


def test_devices_list_shows_the_silicon_and_the_kernel_source():
    result = CliRunner().invoke(ets, ["devices", "list"])
    assert result.exit_code == 0, result.output
    t4 = next(line for line in result.output.splitlines() if line.startswith("emulated:T4:"))
    assert "40 SMs" in t4 and "1590 MHz" in t4 and "L2" in t4 and "16 GB" in t4
    assert f"kernels: {_expected_source('T4')}" in t4
    h100 = next(line for line in result.output.splitlines() if line.startswith("emulated:H100:"))
    assert f"kernels: {_expected_source('H100')}" in h100 and "FP8 1978.9" in h100
    assert "relative time 1.589 (V100 = 1; sia)" in result.output and "Tesla T4" not in result.output
    named = CliRunner().invoke(ets, ["devices", "list", "--aliases"])
    assert "also: " in named.output and "Tesla T4" in named.output


def test_precision_choices_are_visible_and_amp_runs_on_tensor_cores():
    def timed(*extra):
        result = CliRunner().invoke(ets, ["devices", "time", "resnet18", "--batch", "16", "--size", "64",
                                          "--device", "emulated:A100", "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    fp32, tf32, amp = timed(), timed("--allow-tf32"), timed("--dtype", "amp")
    # cuDNN's TF32 convolutions by default, matmuls in TF32 only when allowed; AMP: float16 GEMMs
    assert fp32["kernel_math"] == {"conv": "tf32", "matmul": "fp32"} and fp32["allow_tf32"] is False
    assert tf32["kernel_math"] == {"conv": "tf32", "matmul": "tf32"} and tf32["allow_tf32"] is True
    assert amp["kernel_math"] == {"conv": "fp16", "matmul": "fp16"} and amp["config_id"].split(":")[3] == "amp"
    assert amp["forward_kernel_ms"] < fp32["forward_kernel_ms"]


DP_KEYS = {"total_ms", "compute_ms", "allreduce_ms", "communication_ms", "gpus", "nodes", "scaling_efficiency"}


def _time(*args):
    result = CliRunner().invoke(ets, ["devices", "time", *TINY, "--device", "emulated:A100-SXM4", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_one_gpu_output_is_unchanged_by_gpus_1():
    assert _time("--gpus", "1") == _time()
    assert _time("--gpus", "1", "--json") == _time("--json")
    assert not (DP_KEYS - {"total_ms"}) & set(json.loads(_time("--json")))


def test_gpus_adds_the_data_parallel_step():
    one = json.loads(_time("--json"))
    packed = json.loads(_time("--gpus", "8", "--json"))
    spread = json.loads(_time("--gpus", "8", "--per-node", "1", "--json"))
    assert DP_KEYS <= set(packed) and DP_KEYS <= set(spread)
    assert (packed["gpus"], packed["nodes"], spread["nodes"]) == (8, 1, 8)
    assert packed["compute_ms"] == spread["compute_ms"] == one["total_ms"]
    for r in (packed, spread):
        assert r["total_ms"] >= r["compute_ms"] and 0 < r["scaling_efficiency"] <= 1
        assert r["allreduce_ms"] > 0 and r["communication_label"] == "spec-derived"
        assert r["total_ms"] == pytest.approx(r["compute_ms"] + r["communication_ms"], rel=1e-9)
    # resnet18: 11.7 M float32 parameters, 47 MB of gradients a step; 8 nodes × 1 is network-bound
    assert spread["total_ms"] > packed["total_ms"] and spread["link"] == "network"
    text = _time("--gpus", "8")
    assert "on 8 GPUs (1 node(s) × 8 GPU(s)" in text and "scaling efficiency" in text
    assert "exposed communication" in text and "spec-derived" in text


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus: 0 must be ≥ 1"),
    (["--gpus", "4", "--per-node", "8"], "--per-node: 8 must divide --gpus 4"),
    (["--gpus", "4", "--per-node", "3"], "--per-node: 3 must divide --gpus 4"),
    (["--gpus", "12"], "--gpus: 12 GPUs do not fill 8-GPU nodes"),
])
def test_bad_placements_are_one_line_naming_the_value(args, message):
    result = CliRunner().invoke(ets, ["devices", "time", *TINY, "--device", "emulated:A100-SXM4", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_gpus_with_a_model_file_is_refused_in_one_line(tmp_path):
    result = CliRunner().invoke(ets, ["devices", "time", "--model-file", str(tmp_path / "m.py"),
                                      "--device", "emulated:T4", "--gpus", "2"])
    assert result.exit_code == 2 and "--gpus applies to a zoo MODEL" in result.output
