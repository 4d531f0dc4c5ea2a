"""ETS CSV importer: exact output on hand-written fixtures (tests/fixtures/ets: own rows in the
upstream layout, own 10-name op-code list), the bad-input catalogue, and the real files in
../shared/ets_traces checked against the statistics table of their README."""

from __future__ import annotations

import csv
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.common.op_trace import COLUMNS
from predictor.emulator.capture import ets_csv
from tests.predictor.helpers import expect_error, iteration_times_us

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ets"
TINY = FIXTURES / "GPUX" / "tinynet.3_7.csv"
FIXTURE_CODES = ["layer_norm", "conv2d", "relu", "linear", "cross_entropy", "__iadd__", "mul_", "add_",
                 "aten::clone", "cat"]


# -- fixtures: exact values ----------------------------------------------------------------------

def test_load_op_codes_fixture():
    assert ets_csv.load_op_codes(FIXTURES / "op_codes.txt") == FIXTURE_CODES


def test_tiny_exact():
    df = ets_csv.load(TINY)
    assert list(df.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in df.dtypes.items() if c != "params"} == \
        {c: t for c, t in COLUMNS.items() if c != "params"}
    assert len(df) == 11
    assert set(df["config_id"]) == {"ets:tinynet:b2:8x6:float32:3"}
    assert set(df["device"]) == {"GPUX"}  # the folder holding the file
    assert set(df["model"]) == {"tinynet"} and set(df["family"]) == {"tinynet"}
    assert set(df["dtype"]) == {"float32"} and set(df["input_shapes"]) == {"[]"}
    assert set(df["batch"]) == {2} and set(df["input_size"]) == {8}
    assert df["idx"].tolist() == list(range(11))
    assert df["op"].tolist() == ["conv2d", "relu", "cat", "clone", "linear", "cross_entropy",
                                 "linear", "conv2d", "mul_", "add_", "add_"]
    assert df["phase"].tolist() == ["forward"] * 6 + ["backward"] * 2 + ["update"] * 3
    assert df["duration_us"].tolist() == [5.0, 1.25, 0.7, 0.1, 2.0, 0.3, 4.0, 9.0, 1.5, 1.7, 1.6]
    assert df["gap_us"].tolist() == [1.5, 0.25, 0.3, 0.05, 0.4, 0.2, -0.75, 5.0, 80.0, 70.0, 0.0]
    assert df["cpu_us"].tolist() == [12.0, 8.0, 7.0, 1.0, 15.0, 10.0, 15.0, 20.0, 10.0, 9.5, 9.8]
    assert df["kernels"].tolist() == [2, 1, 1, 1, 1, 2, 3, 2, 1, 1, 1]
    assert df["flops"].tolist() == [10368.0, 384.0, 0.0, 0.0, 3840.0, 20.0, 7680.0, 20736.0,
                                    324.0, 324.0, 324.0]
    assert df["bytes"].tolist() == [2048.0, 3072.0, 1536.0, 0.0, 4640.0, 56.0, 9280.0, 4096.0,
                                    2592.0, 3888.0, 3888.0]
    conv = [2, 3, 8, 6, 4, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4] + [0] * 13
    assert df["params"].iloc[0] == conv and df["params"].iloc[7] == conv
    assert df["params"].iloc[2] == [4, 2, 4, 8, 6] * 6  # 32 values in the file: first 30 kept
    assert df["params"].iloc[3] == [0, 0]
    assert df["params"].iloc[8] == [4, 324] + [0] * 13 + [4] + [0] * 14
    assert df["source"].tolist() == [f"{TINY}:{line}" for line in range(2, 13)]
    times = iteration_times_us(df)
    assert times.to_dict() == pytest.approx({("GPUX", "ets:tinynet:b2:8x6:float32:3"): 184.1})


def test_float16_file_and_family():
    df = ets_csv.load(FIXTURES / "GPUX" / "resnet_mini.12_7.csv")
    assert set(df["config_id"]) == {"ets:resnet_mini:b4:16x16:float16:12"}
    assert set(df["family"]) == {"resnet"} and set(df["dtype"]) == {"float16"}
    assert df["op"].tolist() == ["conv2d", "__iadd__", "add_"]
    assert df["phase"].tolist() == ["forward", "forward", "update"]
    assert df["duration_us"].tolist() == [40.0, 3.5, 1.25]
    assert df["gap_us"].tolist() == [2.0, 1.5, 0.0]


def test_device_and_op_codes_arguments():
    df = ets_csv.load(TINY, device="emulated:T4", op_codes=FIXTURES / "op_codes.txt")
    assert set(df["device"]) == {"emulated:T4"}
    renamed = [f"op{i}" for i in range(10)]
    assert ets_csv.load(TINY, op_codes=renamed)["op"].tolist()[:3] == ["op1", "op2", "op9"]
    assert ets_csv.load(TINY, op_codes=str(FIXTURES / "op_codes.txt"))["op"].iloc[3] == "clone"


def test_load_many_directory_and_file():
    df = ets_csv.load_many(FIXTURES)
    assert len(df) == 17
    times = iteration_times_us(df)
    assert times.to_dict() == pytest.approx({
        ("GPUX", "ets:resnet_mini:b4:16x16:float16:12"): 48.25,
        ("GPUX", "ets:tinynet:b2:8x6:float32:3"): 184.1,
        ("GPUY", "ets:tinynet:b2:8x6:float32:3"): 8.75,
    })
    assert df["source"].iloc[0] == f"{FIXTURES / 'GPUX' / 'resnet_mini.12_7.csv'}:2"  # sorted by path
    pd.testing.assert_frame_equal(ets_csv.load_many(TINY), ets_csv.load(TINY))
    # forcing one device onto both tinynet files makes two iterations with the same id
    expect_error(lambda: ets_csv.load_many(FIXTURES, device="X"), FIXTURES / "GPUY" / "tinynet.3_7.csv",
                 None, None)


def test_load_many_bad_paths(tmp_path):
    expect_error(lambda: ets_csv.load_many(tmp_path), tmp_path, None, None)
    expect_error(lambda: ets_csv.load_many(tmp_path / "nope"), tmp_path / "nope", None, None)


def test_op_codes_lookup(tmp_path):
    (tmp_path / "D").mkdir()
    target = tmp_path / "D" / TINY.name
    shutil.copy(TINY, target)
    err = expect_error(lambda: ets_csv.load(target), target, None, None)
    assert "op_codes.txt" in str(err)
    (tmp_path / "op_codes.txt").write_text("\n".join(FIXTURE_CODES) + "\n")  # parent folder
    assert ets_csv.load(target)["op"].iloc[0] == "conv2d"
    (tmp_path / "D" / "op_codes.txt").write_text("\n".join(f"x{i}" for i in range(10)))  # beside wins
    assert ets_csv.load(target)["op"].iloc[0] == "x1"
    assert ets_csv.load_many(tmp_path)["op"].iloc[0] == "x1"


def test_load_op_codes_errors(tmp_path):
    p = tmp_path / "op_codes.txt"
    expect_error(lambda: ets_csv.load_op_codes(p), p, None, None)
    p.write_text("\n\n")
    expect_error(lambda: ets_csv.load_op_codes(p), p, None, None)
    p.write_text("conv2d\n\nrelu\n")
    expect_error(lambda: ets_csv.load_op_codes(p), p, 2, None)
    p.write_text("conv2d \nrelu\n\n")  # trailing blanks and spaces are fine
    assert ets_csv.load_op_codes(p) == ["conv2d", "relu"]


# -- bad input -----------------------------------------------------------------------------------

def _variant(tmp_path: Path, mutate: Callable[[list[str], list[list[str]]], None]) -> Path:
    """The tiny fixture, mutated, as tmp_path/DEV/tinynet.3_7.csv with the op codes one folder up."""
    with TINY.open(newline="") as fh:
        header, *rows = list(csv.reader(fh))
    mutate(header, rows)
    (tmp_path / "DEV").mkdir()
    shutil.copy(FIXTURES / "op_codes.txt", tmp_path / "op_codes.txt")
    out = tmp_path / "DEV" / TINY.name
    with out.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *rows])
    return out


def _set(line: int, field: str, value: str):
    def mutate(header, rows):
        rows[line - 2][header.index(field)] = value
    return mutate


def _set_all(field: str, value: str):
    def mutate(header, rows):
        for r in rows:
            r[header.index(field)] = value
    return mutate


def _drop_column(field: str):
    def mutate(header, rows):
        i = header.index(field)
        for r in [header, *rows]:
            del r[i]
    return mutate


def _truncate_row(line: int):
    def mutate(header, rows):
        rows[line - 2].pop()
    return mutate


BAD_ROWS = {
    "missing column": (_drop_column("kduration"), 1, "kduration"),
    "missing params column": (_drop_column("params"), 1, "params"),
    "params not json": (_set(3, "params", "[4, 2, x]"), 3, "params"),
    "params not a list": (_set(4, "params", '{"a": 1}'), 4, "params"),
    "params float": (_set(5, "params", "[4.5, 2]"), 5, "params"),
    "params empty": (_set(6, "params", ""), 6, "params"),
    "kduration text": (_set(5, "kduration", "abc"), 5, "kduration"),
    "flops empty": (_set(7, "flops", ""), 7, "flops"),
    "space nan": (_set(8, "space", "nan"), 8, "space"),
    "rduration inf": (_set(9, "rduration", "inf"), 9, "rduration"),
    "op not integer": (_set(2, "op", "1.5"), 2, "op"),
    "op unknown": (_set(9, "op", "10"), 9, "op"),
    "op negative": (_set(3, "op", "-1"), 3, "op"),
    "dir 4": (_set(10, "dir", "4"), 10, "dir"),
    "dir 0": (_set(2, "dir", "0"), 2, "dir"),
    "batch changes": (_set(6, "batch", "3"), 6, "batch"),
    "h changes": (_set(12, "h", "9"), 12, "h"),
    "w changes": (_set(4, "w", "7"), 4, "w"),
    "input_type changes": (_set(11, "input_type", "2"), 11, "input_type"),
    "input_type unknown": (_set_all("input_type", "5"), 2, "input_type"),
    "batch zero": (_set_all("batch", "0"), 2, "batch"),
    "kduration negative": (_set(7, "kduration", "-5"), 7, "kduration"),
    "kernels negative": (_set(8, "kernels", "-1"), 8, "kernels"),
    "short row": (_truncate_row(4), 4, "input_type"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_bad_rows(tmp_path, case):
    mutate, line, field = BAD_ROWS[case]
    path = _variant(tmp_path, mutate)
    expect_error(lambda: ets_csv.load(path), path, line, field)
    expect_error(lambda: ets_csv.load_many(tmp_path), path, line, field)


def _write_text(tmp_path: Path, text: str) -> Path:
    shutil.copy(FIXTURES / "op_codes.txt", tmp_path / "op_codes.txt")
    path = tmp_path / "m.1_7.csv"
    path.write_text(text)
    return path


def test_empty_and_header_only(tmp_path):
    path = _write_text(tmp_path, "")
    expect_error(lambda: ets_csv.load(path), path, None, None)
    header = TINY.read_text().splitlines()[0]
    path.write_text(header + "\n")
    expect_error(lambda: ets_csv.load(path), path, None, None)
    path.write_text(header + "\n\n\n")
    expect_error(lambda: ets_csv.load(path), path, None, None)


def test_layout_errors(tmp_path):
    lines = TINY.read_text().splitlines()
    path = _write_text(tmp_path, "\n".join(lines[:4] + [lines[4] + ",7"] + lines[5:]) + "\n")
    expect_error(lambda: ets_csv.load(path), path, 5, None)  # too many fields on line 5
    path.write_text("\n".join(lines[:1] + [lines[1] + ",7"] + lines[2:]) + "\n")
    expect_error(lambda: ets_csv.load(path), path, 2, None)  # ... on the first data line
    path.write_text("\n".join(lines[:1] + [x + ",7" for x in lines[1:]]) + "\n")
    expect_error(lambda: ets_csv.load(path), path, 2, None)  # ... on every line (no index column)
    path.write_text("\n".join(lines[:3] + [lines[3].replace(']"', "]")] + lines[4:]) + "\n")
    expect_error(lambda: ets_csv.load(path), path, 4, None)  # params quote not closed on line 4
    path.write_text("\n".join(lines[:6] + [""] + lines[6:]) + "\n")
    expect_error(lambda: ets_csv.load(path), path, 7, None)  # blank line 7 inside the data
    path.write_text("\n".join(lines) + "\n\n\n")  # trailing blank lines are tolerated
    assert len(ets_csv.load(path)) == 11


def test_float64(tmp_path):
    path = _variant(tmp_path, _set_all("input_type", "3"))
    assert set(ets_csv.load(path)["config_id"]) == {"ets:tinynet:b2:8x6:float64:3"}


# -- the real files ------------------------------------------------------------------------------

README_ROW = re.compile(
    r"^\|\s*(?P<gpu>T4|2080Ti)\s*\|\s*(?P<family>[\w]+)\s*\|\s*(?P<model>\w+)\s*\|\s*(?P<file>\S+\.csv)\s*\(\d+\)\s*"
    r"\|\s*(?P<batch>\d+)\s*\|\s*(?P<h>\d+)x(?P<w>\d+)\s*\|\s*fp(?P<bits>\d+)\s*"
    r"\|\s*(?P<rows>\d+)\s*\((?P<fwd>\d+)/(?P<bwd>\d+)/(?P<upd>\d+)\)\s*"
    r"\|\s*(?P<kd>-?[\d.]+)\s*\|\s*(?P<space>-?[\d.]+)\s*\|\s*(?P<iter>-?[\d.]+)\s*\|\s*(?P<neg>\d+)\s*\|\s*$")


@pytest.fixture(scope="module")
def ets_dir(shared_dir) -> Path:
    path = shared_dir / "ets_traces"
    if not path.is_dir():
        pytest.skip(f"ETS traces not found at {path}")
    return path


@pytest.fixture(scope="module")
def real(ets_dir) -> pd.DataFrame:
    return ets_csv.load_many(ets_dir)


def test_real_op_codes(ets_dir):
    codes = ets_csv.load_op_codes(ets_dir / "op_codes.txt")
    assert len(codes) == 245
    named = {203: "conv2d", 205: "batch_norm", 152: "relu", 183: "max_pool2d", 199: "adaptive_avg_pool2d",
             201: "linear", 212: "dropout", 213: "cat", 181: "cross_entropy", 0: "layer_norm", 166: "gelu",
             172: "multi_head_attention_forward", 243: "hardswish", 244: "hardsigmoid", 35: "__iadd__",
             23: "__mul__", 16: "mul_", 12: "add_", 239: "aten::clone"}
    assert {k: codes[k] for k in named} == named


def test_real_files_all_import(ets_dir, real):
    for device in ("T4", "2080Ti"):
        files = sorted((ets_dir / device).glob("*.csv"))
        assert files, device
        rows = real[real["device"] == device]
        assert rows["config_id"].nunique() == len(files)
        assert set(rows["source"].str.rsplit(":", n=1).str[0]) == {str(f) for f in files}
    assert not real["op"].str.startswith("aten::").any()
    assert (real["op"] != "").all()
    for _, it in real.groupby(["device", "config_id"]):
        order = it["phase"].map({"forward": 0, "backward": 1, "update": 2}).to_numpy()
        assert (np.diff(order) >= 0).all()  # forward, then backward, then update rows
        assert it["gap_us"].iloc[-1] == 0.0
        assert it["batch"].nunique() == it["input_size"].nunique() == it["dtype"].nunique() == 1


def test_real_files_match_readme_table(ets_dir, real):
    table = [m.groupdict() for line in (ets_dir / "README.md").read_text().splitlines()
             if (m := README_ROW.match(line))]
    assert len(table) >= 10, "README statistics table not found or changed format"
    assert len(table) == real.groupby(["device", "config_id"]).ngroups
    dtype_of_bits = {"16": "float16", "32": "float32", "64": "float64"}
    problems = []
    for t in table:
        source = str(ets_dir / t["gpu"] / t["file"])
        it = real[real["source"].str.rsplit(":", n=1).str[0] == source]
        total = (it["duration_us"] + it["gap_us"]).sum() / 1000.0
        got = {
            "family": it["family"].iloc[0], "model": it["model"].iloc[0], "batch": int(it["batch"].iloc[0]),
            "h": int(it["input_size"].iloc[0]), "dtype": it["dtype"].iloc[0],
            "w": int(it["config_id"].iloc[0].split(":")[3].split("x")[1]),
            "phases": tuple(int((it["phase"] == p).sum()) for p in ("forward", "backward", "update")),
            "rows": len(it), "neg": int((it["gap_us"] < 0).sum()),
        }
        want = {
            "family": t["family"], "model": t["model"], "batch": int(t["batch"]), "h": int(t["h"]),
            "dtype": dtype_of_bits[t["bits"]], "w": int(t["w"]),
            "phases": (int(t["fwd"]), int(t["bwd"]), int(t["upd"])), "rows": int(t["rows"]),
            "neg": int(t["neg"]),
        }
        if got != want:
            problems.append((source, got, want))
        for value, column in ((total, "iter"), (it["duration_us"].sum() / 1000.0, "kd"),
                              (it["gap_us"].sum() / 1000.0, "space")):
            if not math.isclose(value, float(t[column]), abs_tol=0.0005 + 1e-9):
                problems.append((source, column, value, t[column]))
    assert not problems, problems
