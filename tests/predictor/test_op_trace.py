"""The execution-trace table: validation, iteration time, datasets on disk, dataset summary."""

from __future__ import annotations

import errno
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.families import TORCHVISION_FAMILIES, family_of
from predictor.common.op_trace import OpTraceFormatError, dataset_info, read_dataset, validate, write_traces
from predictor.common.outputs import OutputError
from tests.predictor.helpers import iteration_times_us


def trace(config: str, device: str, durations, gaps, family="resnet", phases=None) -> pd.DataFrame:
    n = len(durations)
    return validate(pd.DataFrame({
        "config_id": config, "device": device, "family": family, "model": family + "18", "idx": range(n),
        "op": "conv2d", "phase": phases or ["forward"] * n, "input_shapes": "[]", "params": [[1, 2]] * n,
        "flops": 1.0, "bytes": 2.0, "dtype": "float32", "batch": 8, "input_size": 32, "cpu_us": np.nan,
        "duration_us": durations, "gap_us": gaps, "kernels": 1, "source": "test"}), "test")


def test_iteration_time_is_duration_plus_gap_including_negative_gaps():
    df = pd.concat([trace("a", "T4", [10.0, 20.0, 5.0], [2.0, -1.0, 0.0]),
                    trace("b", "T4", [1.0], [0.0])])
    times = iteration_times_us(df)
    assert times[("T4", "a")] == 36.0 and times[("T4", "b")] == 1.0


@pytest.mark.parametrize("column, value, message", [
    ("phase", "sideways", "phase 'sideways' is not one of"),
    ("dtype", "int8", "dtype 'int8' is not one of"),
    ("duration_us", -1.0, "must be a finite number >= 0"),
    ("gap_us", np.inf, "must be a finite number"),
])
def test_validation_names_row_and_field(column, value, message):
    df = trace("a", "T4", [1.0, 2.0], [0.0, 0.0])
    df.loc[1, column] = value
    with pytest.raises(OpTraceFormatError, match=message) as info:
        validate(df, "x.parquet")
    assert "x.parquet:1" in str(info.value) and repr(column) in str(info.value)


def test_validation_rejects_missing_columns_and_empty_tables():
    with pytest.raises(OpTraceFormatError, match="lacks column"):
        validate(pd.DataFrame({"op": ["relu"]}), "f")
    with pytest.raises(OpTraceFormatError, match="no rows"):
        validate(trace("a", "T4", [1.0], [0.0]).iloc[:0], "f")


def test_dataset_round_trip_replaces_configs_and_summarises(tmp_path):
    write_traces(tmp_path, pd.concat([trace("a", "T4", [10.0] * 300, [1.0] * 300),
                                      trace("b", "T4", [5.0] * 10, [5.0] * 10, family="vgg"),
                                      trace("c", "emulated:V100", [1.0] * 900, [0.0] * 900)]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["T4.parquet", "emulated_V100.parquet"]
    write_traces(tmp_path, trace("b", "T4", [5.0] * 20, [15.0] * 20, family="vgg"))  # re-import replaces
    df = read_dataset(tmp_path)
    assert df.groupby(["device", "config_id"]).size().to_dict() == {("T4", "a"): 300, ("T4", "b"): 20,
                                                                     ("emulated:V100", "c"): 900}
    info = dataset_info(df)
    assert info["iterations"] == 3 and info["per_family"] == {"resnet": 2, "vgg": 1}
    assert info["op_count_histogram"] == {"0-250": 1, "250-550": 1, "550-800": 0, "800+": 1}
    # overhead shares: a 1/11, b 15/20, c 0
    assert info["overhead_share"]["p0"] == 0.0 and info["overhead_share"]["p100"] == pytest.approx(0.75)
    out = CliRunner().invoke(ets, ["dataset", "info", str(tmp_path), "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["iterations"] == 3
    bad = CliRunner().invoke(ets, ["dataset", "info", str(tmp_path / "nothing")])
    assert bad.exit_code == 1 and "no execution-trace Parquet files" in bad.output


def test_families_cover_the_18_torchvision_families():
    assert len(TORCHVISION_FAMILIES) == 18
    names = {"resnet50": "resnet", "wide_resnet101_2": "wide_resnet", "efficientnet_b7": "efficientnet",
             "efficientnet_v2_m": "efficientnet_v2", "mobilenet_v3_large": "mobilenet_v3",
             "vgg16_bn": "vgg", "vit_l_32": "vit", "swin_v2_b": "swin", "regnet_y_16gf": "regnet",
             "densenet201": "densenet", "convnext_base": "convnext", "googlenet": "googlenet",
             "inception_v3": "inception_v3", "shufflenet_v2_x2_0": "shufflenet", "squeezenet1_0": "squeezenet",
             "mnasnet1_3": "mnasnet", "alexnet": "alexnet", "mobilenet_v2": "mobilenet_v2"}
    assert {m: family_of(m) for m in names} == names
    assert set(names.values()) == set(TORCHVISION_FAMILIES)


def test_a_failed_dataset_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    write_traces(tmp_path, trace("a", "cpu", [10.0, 20.0], [1.0, 2.0]))
    before = (tmp_path / "cpu.parquet").read_bytes()

    def full_disk(self, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PAR1 half")  # a truncated file where the write stopped
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    with pytest.raises(OutputError, match=r"cpu\.parquet: No space left on device"):
        write_traces(tmp_path, trace("b", "cpu", [5.0], [0.0]))
    assert (tmp_path / "cpu.parquet").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.parquet"]  # no temporary file left
