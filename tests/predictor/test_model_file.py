"""--model-file: a user's KernelBench-style file captured like a zoo config, and `ets devices
time | predict | collect` with it; every failure one line naming the file."""

from __future__ import annotations

import json
import os
import textwrap

import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.op_trace import validate
from predictor.emulator.capture.model_file import ModelFileError, capture_model_file, config_id_of, expand

TINY = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.fc = nn.Linear(d_in, d_out)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))

    def get_inputs():
        return [torch.randn(8, 16)]

    def get_init_inputs():
        return [16, 4]
    """

RAISES_IN_INIT = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            raise RuntimeError("no model today")

    def get_inputs():
        return [torch.randn(2, 2)]
    """


def _write(folder, name: str, text: str):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("files"), "tiny.py", TINY)


@pytest.fixture(scope="module")
def trace(tiny):
    return capture_model_file(tiny)


def _devices_time(*args: str):
    return CliRunner().invoke(ets, ["devices", "time", *args])


def test_a_training_capture_has_the_three_phases(trace):
    assert set(trace["phase"]) == {"forward", "backward", "update"}
    assert 8 <= len(trace) <= 40  # linear, relu, the loss, their backward, SGD on weight and bias
    forward = trace.loc[trace["phase"] == "forward", "op"].tolist()
    assert forward[:2] == ["linear", "relu"]
    assert "AddmmBackward0" in set(trace["op"])
    assert trace["config_id"].unique().tolist() == ["file:tiny"]
    assert set(trace["family"]) == set(trace["model"]) == {"tiny"}
    assert set(trace["device"]) == {"meta"} and set(trace["batch"]) == {8} and set(trace["dtype"]) == {"float32"}
    validate(trace, "again")  # a normal trace table


def test_inference_captures_the_forward_alone(tiny):
    trace = capture_model_file(tiny, inference=True)
    assert trace["op"].tolist() == ["linear", "relu"] and set(trace["phase"]) == {"forward"}
    assert trace["config_id"].iloc[0] == "file:tiny:inference" == config_id_of(tiny, inference=True)


def test_dtype_reaches_the_rows_and_the_id(tiny):
    trace = capture_model_file(tiny, dtype="bfloat16", inference=True)
    assert set(trace["dtype"]) == {"bfloat16"} and trace["config_id"].iloc[0] == "file:tiny:bfloat16:inference"


def test_a_model_without_parameters_has_no_update_phase(tmp_path):
    path = _write(tmp_path, "matmul.py", """\
        import torch

        class Model(torch.nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)

        def get_inputs():
            return [torch.rand(64, 32), torch.rand(32, 16)]
        """)
    trace = capture_model_file(path)
    assert set(trace["phase"]) == {"forward", "backward"}
    assert "MmBackward0" in set(trace["op"])


def test_json_has_the_file_and_the_kernel_time_per_phase(tiny):
    result = _devices_time("--model-file", str(tiny), "--device", "emulated:T4", "--json")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    body = json.loads(lines[0])
    assert body["model_file"] == str(tiny) and body["config_id"] == "file:tiny"
    assert body["total_ms"] > 0 and body["ops"] > 0
    parts = [body[f"{p}_kernel_ms"] for p in ("forward", "backward", "update")]
    assert all(p > 0 for p in parts)
    assert sum(parts) == pytest.approx(body["kernel_ms"], rel=1e-9)
    text = _devices_time("--model-file", str(tiny), "--device", "emulated:T4", "--inference")
    assert text.exit_code == 0, text.output
    assert "model file" in text.stdout and "kernels" in text.stdout
    inference = json.loads(_devices_time("--model-file", str(tiny), "--device", "emulated:T4", "--inference",
                                         "--json").stdout)
    assert inference["backward_kernel_ms"] == 0.0 == inference["update_kernel_ms"] == inference["backward_ms"]
    # an inference call pays the fitted per-kernel host cost, a training step the training host table
    assert inference["host"].startswith("inference: ") and body["host"].startswith("training")


def test_a_directory_times_the_good_file_and_names_the_bad_one(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    _write(folder, "a_good.py", TINY)
    _write(folder, "b_bad.py", RAISES_IN_INIT)
    result = _devices_time("--model-file", str(folder), "--device", "emulated:T4", "--json")
    assert result.exit_code == 1
    good = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [g["model_file"] for g in good] == [os.path.join(str(folder), "a_good.py")]
    bad = os.path.join(str(folder), "b_bad.py")
    line = next(x for x in result.stderr.splitlines() if x.startswith(bad))
    assert line == f"{bad}: RuntimeError: no model today (at {bad}:7 in __init__)"
    assert "Traceback" not in result.output and "1 of 2 model file(s) failed" in result.stderr


@pytest.mark.parametrize(("text", "expected"), [
    ("import torch\ndef get_inputs():\n    return [torch.rand(2)]\n", "defines no Model ("),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "defines no get_inputs ("),
    ("import torch\nclass Model(torch.nn.Module)\n    pass\n", "SyntaxError: expected ':' (at {path}:2)"),
    ("x = 1\n", "defines no Model and no get_inputs"),
])
def test_files_that_are_not_model_files_are_named(tmp_path, text, expected):
    path = _write(tmp_path, "broken.py", text)
    with pytest.raises(ModelFileError) as info:
        capture_model_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected.format(path=path) in message
    assert "\n" not in message and len(message) <= 1000


def test_an_error_in_forward_names_the_line_in_the_file(tmp_path):
    path = _write(tmp_path, "shapes.py", """\
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                y = x * 2
                return y @ torch.ones(3, 3)

        def get_inputs():
            return [torch.rand(4, 5)]
        """)
    with pytest.raises(ModelFileError, match=rf"^{path}: RuntimeError: .* \(at {path}:6 in forward\)$"):
        capture_model_file(path)


def test_an_output_without_a_floating_tensor_is_named(tmp_path):
    path = _write(tmp_path, "argmax.py", """\
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.argmax(x, dim=1)

        def get_inputs():
            return [torch.rand(4, 5)]
        """)
    with pytest.raises(ModelFileError, match="no floating-point tensor to take a loss of .*dtype int64 and shape"):
        capture_model_file(path)
    assert set(capture_model_file(path, inference=True)["phase"]) == {"forward"}


def test_missing_files_and_folders(tmp_path):
    with pytest.raises(ModelFileError, match="nowhere.py: no such file$"):
        capture_model_file(tmp_path / "nowhere.py")
    with pytest.raises(ModelFileError, match="is a directory"):
        capture_model_file(tmp_path)
    assert expand([str(tmp_path)]) == [str(tmp_path)]  # no *.py in it: kept, so its capture names it


def test_model_and_model_file_together_or_neither_are_usage_errors(tiny):
    both = _devices_time("resnet18", "--model-file", str(tiny), "--device", "emulated:T4")
    assert both.exit_code == 2 and "either MODEL or --model-file, not both" in both.output
    neither = _devices_time("--device", "emulated:T4")
    assert neither.exit_code == 2 and "missing MODEL (or --model-file FILE|DIR)" in neither.output
    sizes = _devices_time("--model-file", str(tiny), "--batch", "4", "--device", "emulated:T4")
    assert sizes.exit_code == 2 and "--batch and --size apply to a zoo MODEL" in sizes.output
    zoo = _devices_time("resnet18", "--inference", "--device", "emulated:T4")
    assert zoo.exit_code == 2 and "--inference applies to --model-file" in zoo.output


def test_collect_writes_the_file_into_the_dataset(tiny, tmp_path):
    args = ["collect", "--model-file", str(tiny), "--device", "emulated:T4", "--out", str(tmp_path)]
    result = CliRunner().invoke(ets, args)
    assert result.exit_code == 0, result.output
    traces = pd.read_parquet(tmp_path / "emulated_T4.parquet")
    assert set(traces["config_id"]) == {"file:tiny"} and set(traces["device"]) == {"emulated:T4"}
    again = CliRunner().invoke(ets, args + ["--model-file", str(tmp_path / "missing.py")])
    assert again.exit_code == 1 and "0 model file(s) captured, 1 already there, 1 failed" in again.stdout
    assert f"{tmp_path / 'missing.py'}: no such file" in again.stderr
    failure = json.loads((tmp_path / "failures.jsonl").read_text().splitlines()[-1])
    assert failure["model_file"] == str(tmp_path / "missing.py")
    zoo = CliRunner().invoke(ets, args + ["--zoo", "hpo"])
    assert zoo.exit_code == 2 and "--zoo: zoo options; they do not apply to --model-file" in zoo.output
    # an inference capture's host time per kernel is the inference host's (± the 5 % host jitter),
    # not the training table's
    from predictor.emulator.devices.inference_host import shipped

    assert CliRunner().invoke(ets, args + ["--inference"]).exit_code == 0
    traces = pd.read_parquet(tmp_path / "emulated_T4.parquet")
    forward = traces[traces["config_id"] == "file:tiny:inference"]
    launched = forward.loc[forward["kernels"] > 0, "cpu_us"]
    assert len(launched) and launched.between(0.8 * shipped().per_op_us("T4"), 1.25 * shipped().per_op_us("T4")).all()


def test_predict_gives_one_json_line_per_file(tiny, tmp_path):
    from predictor.common.op_trace import write_traces
    from tests.predictor.ets_data import tiny_traces

    write_traces(tmp_path / "data", tiny_traces())
    ckpt = tmp_path / "t4.pt"
    trained = CliRunner().invoke(ets, ["train", "--data", str(tmp_path / "data"), "--out", str(ckpt),
                                       "--test-families", "vgg", "--hidden", "8", "--layers", "1", "--epochs", "1"])
    assert trained.exit_code == 0, trained.output
    result = CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), "--model-file", str(tiny),
                                      "--model-file", str(tmp_path / "missing.py"), "--inference", "--json"])
    assert result.exit_code == 1
    (line,) = result.stdout.strip().splitlines()
    body = json.loads(line)
    assert body["model_file"] == str(tiny) and body["predictions"][0]["config_id"] == "file:tiny:inference"
    assert body["predictions"][0]["iteration_ms"] > 0
    assert f"{tmp_path / 'missing.py'}: no such file" in result.stderr
    both = CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), "alexnet", "--model-file", str(tiny)])
    assert both.exit_code == 2 and "either TARGET or --model-file, not both" in both.output


def test_a_gru_file_is_priced_by_its_gates_not_as_an_element_wise_op(tmp_path):
    path = _write(tmp_path, "gru.py", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.gru = nn.GRU(16, 32, num_layers=2)

            def forward(self, x):
                return self.gru(x)[0]

        def get_inputs():
            return [torch.randn(7, 4, 16)]
        """)
    trace = capture_model_file(path, inference=True)
    gru = trace[trace["op"] == "gru"]
    assert len(gru) == 1
    # 2 layers, T=7, B=4: per step 2*3*H*(I_l+H) gate FLOPs + 9*H element-wise, H=32
    per_step = (2 * 3 * 32 * (16 + 32) + 9 * 32) + (2 * 3 * 32 * (32 + 32) + 9 * 32)
    assert gru["flops"].item() == per_step * 7 * 4
