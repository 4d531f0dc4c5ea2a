"""Bad input refused in one line, and numbers labelled (issue 18, items 4, 6, 7, 9, 10): datasets
checked on read, checkpoints sealed with a hash, `ets predict` labels and warnings, hints that
say the fix."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from predictor import checkpoint_file, methods
from predictor.checkpoint_file import CheckpointError
from predictor.checkpoints import CHECKPOINT_DIR
from predictor.cli import main as ets
from predictor.common.op_trace import OpTraceFormatError, read_dataset, validate, write_traces
from predictor.memory import MemoryEstimate, activation_bytes, too_big_warning
from predictor.prediction import Subject, with_habitat_source
from tests.cli_checks import one_line_error

SHIPPED = CHECKPOINT_DIR / "ets-V100.pt"


def trace(config: str = "resnet18:b2:s32:float32:sgd:c10", device: str = "T4", n: int = 6) -> pd.DataFrame:
    """A small valid execution trace, with a slightly negative gap as real overlapping kernels give."""
    gaps = [5.0] * n
    gaps[1] = -6265.4  # the most negative gap of the real T4 traces: legitimate
    return validate(pd.DataFrame({
        "config_id": config, "device": device, "family": "resnet", "model": "resnet18", "idx": range(n),
        "op": ["conv2d", "batch_norm", "relu_", "linear", "sum", "add_"][:n] + ["relu"] * max(0, n - 6),
        "phase": "forward", "input_shapes": "[[2,3,32,32]]", "params": [[1, 2]] * n, "flops": 1e6,
        "bytes": 4e3, "dtype": "float32", "batch": 2, "input_size": 32, "cpu_us": np.nan,
        "duration_us": [10000.0] * n, "gap_us": gaps, "kernels": 1, "source": "test"}), "test")


def invoke(*args: str):
    return CliRunner().invoke(ets, [str(a) for a in args])


def assert_one_line_error(result, *fragments: str) -> str:
    """Exit code 1, one `Error:` line and nothing else, containing every fragment."""
    return one_line_error(result, *fragments, codes=(1,), alone=True)


def dataset_with(tmp_path: Path, change) -> Path:
    """A dataset directory whose T4 file is ``change`` applied to a good trace."""
    directory = tmp_path / "data"
    directory.mkdir()
    change(trace()).to_parquet(directory / "T4.parquet", index=False)
    return directory


# -- datasets ------------------------------------------------------------------------------------

def test_a_valid_dataset_with_slightly_negative_gaps_is_read(tmp_path):
    write_traces(tmp_path, trace())
    assert read_dataset(tmp_path)["gap_us"].min() == pytest.approx(-6265.4)
    assert invoke("dataset", "info", tmp_path).exit_code == 0


@pytest.mark.parametrize("command", ["info", "evaluate", "train"])
def test_a_file_that_is_not_parquet_is_one_line_naming_it(tmp_path, command):
    directory = tmp_path / "data"
    directory.mkdir()
    (directory / "T4.parquet").write_text("config_id,duration_us\nx,1\n")
    args = {"info": ["dataset", "info", directory],
            "evaluate": ["evaluate", "--ckpt", SHIPPED, "--data", directory],
            "train": ["train", "--data", directory, "--out", tmp_path / "m.pt"]}[command]
    assert_one_line_error(invoke(*args), f"{directory / 'T4.parquet'}: not a readable Parquet file", "ArrowInvalid")


def test_a_dataset_file_with_flipped_bytes_fails_its_page_checksums(tmp_path):
    durations = np.random.default_rng(0).uniform(1.0, 100.0, 3000)  # data pages fill the file's middle
    write_traces(tmp_path, trace(n=3000).assign(duration_us=durations))
    path = tmp_path / "T4.parquet"
    flip_middle(path, path)
    assert_one_line_error(invoke("dataset", "info", tmp_path), f"{path}: not a readable Parquet file: corrupted",
                          "CRC checksum verification failed")


def test_a_missing_column_is_named(tmp_path):
    directory = dataset_with(tmp_path, lambda t: t.drop(columns=["duration_us"]))
    out = assert_one_line_error(invoke("dataset", "info", directory), str(directory / "T4.parquet"),
                                "field 'duration_us'", "lacks column(s) ['duration_us']")
    assert "KeyError" not in out


@pytest.mark.parametrize("column, row, value, rule", [
    ("duration_us", 3, np.nan, "got nan"),
    ("gap_us", 4, np.nan, "got nan"),
    ("gap_us", 2, -1e9, ">= -1e6 µs (-1 s"),
    ("duration_us", 5, -1.0, ">= 0"),
    ("duration_us", 0, 1e15, "<= 3.6e+09 µs (an hour per op)"),
])
def test_nan_and_absurd_times_name_file_row_column_and_config(tmp_path, column, row, value, rule):
    def spoil(t: pd.DataFrame) -> pd.DataFrame:
        t.loc[row, column] = value
        return t

    directory = dataset_with(tmp_path, spoil)
    for args in (["dataset", "info", directory], ["evaluate", "--ckpt", SHIPPED, "--data", directory]):
        assert_one_line_error(invoke(*args), f"{directory / 'T4.parquet'}:{row}: field {column!r}", rule,
                              "config resnet18:b2:s32:float32:sgd:c10", "1 bad row(s)")


def test_predict_checks_a_parquet_trace_file_too(tmp_path):
    spoilt = trace().assign(gap_us=-1e9)
    spoilt.to_parquet(tmp_path / "t.parquet", index=False)
    assert_one_line_error(invoke("predict", "--ckpt", SHIPPED, tmp_path / "t.parquet"),
                          f"{tmp_path / 't.parquet'}:0: field 'gap_us'", "6 bad row(s)")


def test_collect_and_import_into_a_broken_dataset_file_are_one_line(tmp_path):
    (tmp_path / "meta.parquet").write_text("junk")
    assert_one_line_error(invoke("collect", "--limit", "1", "--out", tmp_path),
                          f"{tmp_path / 'meta.parquet'}: not a readable Parquet file")
    (tmp_path / "T4.parquet").write_text("junk")
    with pytest.raises(OpTraceFormatError, match="T4.parquet: not a readable Parquet file"):
        write_traces(tmp_path, trace())


def test_train_refuses_an_unwritable_out_before_training(tmp_path):
    write_traces(tmp_path / "data", trace(n=30))
    (tmp_path / "file").write_text("not a folder")
    assert_one_line_error(invoke("train", "--data", tmp_path / "data", "--out", tmp_path / "file" / "m.pt"),
                          f"--out {tmp_path / 'file' / 'm.pt'}: cannot write to {tmp_path / 'file'}")


def test_the_emulator_may_time_any_op_however_long():
    long = trace().assign(duration_us=1e12)
    with pytest.raises(ValueError, match="an hour per op"):
        validate(long, "x")
    assert validate(long, "x", ceiling_us=np.inf)["duration_us"].max() == 1e12


# -- checkpoints ---------------------------------------------------------------------------------

def flip_middle(source: Path, target: Path, count: int = 64) -> Path:
    data = bytearray(source.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    target.write_bytes(bytes(data))
    return target


def test_every_shipped_checkpoint_is_data_sealed_by_its_hash():
    for path in sorted(CHECKPOINT_DIR.glob("*.pt")):
        data = path.read_bytes()
        assert data.startswith(checkpoint_file.MAGIC), path
        stored = data[len(checkpoint_file.MAGIC):checkpoint_file.HEADER_BYTES - 1].decode()
        assert stored == hashlib.sha256(data[checkpoint_file.HEADER_BYTES:]).hexdigest(), path
        assert set(safetensors.torch.load(data[checkpoint_file.HEADER_BYTES:])) == {
            f"state_dict/{k}" for k in checkpoint_file.read(path)["state_dict"]}, path  # the weights, by name
        assert checkpoint_file.read(path)["format"] == 1


def test_a_checkpoint_with_flipped_bytes_is_refused_in_one_line(tmp_path):
    flipped = flip_middle(SHIPPED, tmp_path / "flipped.pt")
    with pytest.raises(CheckpointError, match="flipped.pt: corrupted checkpoint"):
        methods.load(flipped)
    assert_one_line_error(invoke("predict", "--ckpt", flipped, "alexnet"), f"{flipped}: corrupted checkpoint",
                          "restore the file")
    assert_one_line_error(invoke("evaluate", "--ckpt", flipped, "--data", tmp_path), str(flipped))


def test_a_consistent_file_whose_content_was_changed_fails_the_hash(tmp_path):
    body = checkpoint_file.read(SHIPPED)
    name = next(iter(body["state_dict"]))
    body["state_dict"][name] = body["state_dict"][name] + 1e-3  # a slightly different model
    data = checkpoint_file.encode(body)
    stale = SHIPPED.read_bytes()[:checkpoint_file.HEADER_BYTES] + data[checkpoint_file.HEADER_BYTES:]
    (tmp_path / "edited.pt").write_bytes(stale)  # valid safetensors content under the old hash
    with pytest.raises(CheckpointError,
                       match="edited.pt: corrupted checkpoint: its content does not match the SHA-256"):
        methods.load(tmp_path / "edited.pt")


def test_a_pickled_checkpoint_is_refused_until_converted_then_predicts_the_same(tmp_path):
    legacy = tmp_path / "legacy.pt"
    torch.save(checkpoint_file.read(SHIPPED), legacy)  # how checkpoints were written before the hash
    assert_one_line_error(invoke("predict", "--ckpt", legacy, "alexnet"), f"{legacy}: a pickled checkpoint",
                          "ets checkpoint convert --trust FILE")
    result = invoke("checkpoint", "convert", legacy)
    assert result.exit_code == 2 and "--trust" in result.output  # never without saying it is trusted
    result = invoke("checkpoint", "convert", "--trust", legacy)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "legacy.pt.pickled").is_file()  # the original kept
    data = trace(device="emulated:V100", n=30)
    pd.testing.assert_frame_equal(methods.load(legacy).iteration_times(data),
                                  methods.load(SHIPPED).iteration_times(data))
    assert_one_line_error(invoke("checkpoint", "convert", "--trust", legacy), "already in the current format")


def test_a_saved_checkpoint_round_trips(tmp_path):
    model = methods.load(SHIPPED)
    path = model.save(tmp_path / "sub" / "again.pt")
    assert path.read_bytes() == SHIPPED.read_bytes()  # the same body writes the same bytes
    assert not list(path.parent.glob(".*tmp*"))  # written atomically: no temporary left
    data = trace(device="emulated:V100", n=30)
    pd.testing.assert_frame_equal(methods.load(path).iteration_times(data), model.iteration_times(data))


# -- ets predict: labels, warnings, hints -------------------------------------------------------

def test_predict_labels_prediction_and_measurement(tmp_path):
    trace(config="a", device="T4", n=30).to_parquet(tmp_path / "real.parquet", index=False)
    trace(config="b", device="emulated:T4", n=30).to_parquet(tmp_path / "emu.parquet", index=False)
    real = invoke("predict", "--ckpt", SHIPPED, tmp_path / "real.parquet")
    assert real.exit_code == 0, real.output
    line = real.output.strip()
    assert line.startswith("a: emulated:V100 prediction by ets-V100.pt: ")
    assert f"30 ops from {tmp_path / 'real.parquet'}; real T4 measurement in {tmp_path / 'real.parquet'}: " in line
    record = json.loads(invoke("predict", "--ckpt", SHIPPED, tmp_path / "real.parquet", "--json").output)
    assert record["device"] == "emulated:V100" and record["predictions"][0]["trace_device"] == "T4"
    assert record["predictions"][0]["timings"][0]["what"] == f"real T4 measurement in {tmp_path / 'real.parquet'}"
    emulated = invoke("predict", "--ckpt", SHIPPED, tmp_path / "emu.parquet").output
    assert f"; emulated:T4 timing in {tmp_path / 'emu.parquet'}: " in emulated and "measured" not in emulated


def test_dnnperf_predicts_without_a_future_warning(tmp_path, recwarn):
    code = ("import warnings, predictor.methods.dnnperf\n"
            "try:\n    warnings.warn('`torch.jit.script` is deprecated. Please switch', FutureWarning)\n"
            "except FutureWarning:\n    pass\nelse:\n    raise SystemExit('the warning is silenced globally')")
    done = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr  # import-time warning silenced there, and only there
    trace(device="emulated:V100", n=30).to_parquet(tmp_path / "t.parquet", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = CliRunner().invoke(ets, ["predict", "--ckpt", str(CHECKPOINT_DIR / "dnnperf-V100.pt"),
                                          str(tmp_path / "t.parquet")])
    assert result.exit_code == 0, result.output
    assert "FutureWarning" not in result.output
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_habitat_predict_times_a_capture_on_its_emulated_source_gpu():
    result = invoke("predict", "--ckpt", CHECKPOINT_DIR / "habitat-V100.pt", "alexnet", "--batch", "2", "--size", "64")
    assert result.exit_code == 0, result.output
    assert "emulated:V100 prediction by habitat-V100.pt" in result.output
    assert "emulated:T4 timing of the capture (the source it scales): " in result.output


def test_habitat_without_its_source_says_how_to_supply_it(tmp_path):
    trace(device="cpu", n=30).to_parquet(tmp_path / "cpu.parquet", index=False)
    assert_one_line_error(invoke("predict", "--ckpt", CHECKPOINT_DIR / "habitat-V100.pt", tmp_path / "cpu.parquet"),
                          "scales traces measured on 'emulated:T4'", "devices: cpu",
                          "give TARGET as the model name or config id instead (its capture is then timed on "
                          "emulated:T4)", "`ets collect --device emulated:T4`")


def test_habitat_with_a_real_source_gpu_says_to_import_a_trace(tmp_path):
    model = methods.load(CHECKPOINT_DIR / "habitat-V100.pt")
    model.config = dataclasses.replace(model.config, source_device="T4")  # as a model trained on real T4 traces
    with pytest.raises(ValueError, match=r"measured on 'T4', and f.parquet has none \(devices: cpu\); give TARGET as "
                                         r"a trace file of this config measured on T4 \(`ets import KIND FILE --out "
                                         r"DIR`, then `ets predict --ckpt CKPT DIR/T4.parquet`\)"):
        with_habitat_source(model, Subject(trace(device="cpu"), "f.parquet"))


def test_evaluate_on_another_device_says_to_pass_device(tmp_path):
    write_traces(tmp_path, trace(n=30))
    assert_one_line_error(invoke("evaluate", "--ckpt", CHECKPOINT_DIR / "ets-T4.pt", "--data", tmp_path),
                          "no traces of the checkpoint's device 'emulated:T4'; it has: T4",
                          "pass --device T4 to score this emulated:T4 checkpoint on those rows")
    scored = invoke("evaluate", "--ckpt", CHECKPOINT_DIR / "ets-T4.pt", "--data", tmp_path, "--device", "T4",
                    "--split", "all")
    assert scored.exit_code == 0 and scored.output.startswith("1 traces: MRE"), scored.output


def test_activation_bytes_count_forward_inputs_not_in_place_ones():
    t = trace(n=6)  # conv2d, batch_norm, relu_, linear, sum, add_: 4 not in place, each [2,3,32,32] fp32
    assert activation_bytes(t) == 4 * 2 * 3 * 32 * 32 * 4
    assert activation_bytes(t.assign(phase="backward")) == 0


def test_a_shapes_field_nested_past_the_json_limit_is_a_clear_error_not_a_recursion_crash():
    from predictor.common.inputs import InputError

    t = trace(n=6)
    t.loc[0, "input_shapes"] = "[" * 200_000  # json.loads alone raises RecursionError on this
    with pytest.raises(InputError, match="input_shapes: JSON nested 200,000 levels deep"):
        activation_bytes(t)
    assert activation_bytes(t.assign(input_shapes="not json")) == 0  # unreadable: no input recorded


def test_too_big_warning_only_beyond_the_largest_gpu():
    assert too_big_warning(MemoryEstimate("small", 70e9, 9e9)) is None
    warning = too_big_warning(MemoryEstimate("huge", 2_000e9, 1e9))
    assert warning.startswith("warning: huge needs about 2,001 GB")
    assert "(B200: 180 GB)" in warning  # the catalogue's largest memory (predictor/common/gpu_catalog/B200.toml)


def test_predict_warns_when_a_batch_cannot_fit_any_gpu():
    result = invoke("predict", "--ckpt", SHIPPED, "alexnet", "--batch", "100000")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: alexnet:b100000:s224:float32:sgd:c1000 needs about ")
    assert "more than the largest known GPU" in result.stderr and "lower --batch or --size" in result.stderr
    assert result.stdout.startswith("alexnet:b100000:s224:float32:sgd:c1000: emulated:V100 prediction")
    small = invoke("predict", "--ckpt", SHIPPED, "alexnet", "--batch", "32")
    assert small.exit_code == 0 and small.stderr == "", small.stderr
