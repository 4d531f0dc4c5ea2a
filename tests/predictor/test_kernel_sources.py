"""DeepBench and Vidur kernel times as problem rows: shapes by hand on tiny files in the real
formats, the backward-convolution rows against the emulator's own mapping, every refusal naming
file, line and column, and a sanity pass over the real data when it is present."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.emulator.devices import kernel_sources as ks
from predictor.emulator.devices.kernel_data import COLUMNS
from predictor.emulator.devices.problems import backward_pair

TRAIN_V100 = "xlsx/train/DeepBench_NV_V100.xlsx"
TRAIN_T4 = "xlsx/train/DeepBench_NV_T4.xlsx"
FP32 = "Float"
FP16 = "16 bit inputs, 16 bit multiplication, 32 bit addition"
GEMM_HEADER = ("file,device,sheet,precision,section,source,M,N,K,A Transpose,B Transpose,Time (msec),TERAFLOPS,"
               "Padded Kernels,GIGAFLOPS")
CONV_HEADER = ("file,device,sheet,precision,source,W,H,C,N,K,S_filter_w,R_filter_h,pad_w,pad_h,stride_w,stride_h,"
               "P_out_w,Q_out_h,fwd_ms,bwd_input_ms,bwd_param_ms,total_ms,fwd_algo,padded_kernels")
VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
VIDUR_SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
               "num_tensor_parallel_workers")


def _gemm_line(m=64, n=32, k=128, ms="0.050", device="NVIDIA V100", file=TRAIN_V100, precision=FP32,
               sheet="Results FP32") -> str:
    return f'{file},{device},"{sheet}","{precision}",Dense Matrix Multiplication,,{m},{n},{k},N,N,{ms},1.0,,'


def _conv_line(w=8, h=6, c=3, n=2, k=4, s=3, r=3, pad=(1, 1), stride=(2, 2), pq=(4, 3),
               times=("0.030", "0.040", "0.050"),
               device="NVIDIA V100", file=TRAIN_V100, precision=FP32) -> str:
    return (f'{file},{device},Results FP32,"{precision}",,{w},{h},{c},{n},{k},{s},{r},{pad[0]},{pad[1]},{stride[0]},'
            f'{stride[1]},{pq[0]},{pq[1]},{times[0]},{times[1]},{times[2]},,IMPLICIT_GEMM,')


def _deepbench(tmp_path, gemm=(), conv=(), rnn=True, gemm_header=GEMM_HEADER, conv_header=CONV_HEADER):
    root = tmp_path / "deepbench"
    root.mkdir()
    (root / "deepbench_gemm.csv").write_text("\n".join((gemm_header,) + tuple(gemm)) + "\n")
    (root / "deepbench_conv_normalized.csv").write_text("\n".join((conv_header,) + tuple(conv)) + "\n")
    if rnn:
        (root / "deepbench_rnn.csv").write_text("file,device,N\n" + f"{TRAIN_V100},NVIDIA V100,1\n"
                                                f"xlsx/train/DeepBench_AMD_MI25.xlsx,AMD MI25,1\n")
    return root


def _vidur_csv(path, rows: list[dict], ops=VIDUR_OPS):
    """An mlp.csv in Vidur's layout: five time_stats columns per op, then the shape columns."""
    header = [f"time_stats.{op}.{s}" for op in ops for s in ("min", "max", "mean", "median", "std")] + list(VIDUR_SHAPE)
    lines = [",".join(header)]
    for row in rows:
        cells = []
        for op in ops:
            t = row.get(op, "0.010")
            cells += [t, t, t, t, "0.0"]
        cells += [str(row[c]) for c in VIDUR_SHAPE]
        lines.append(",".join(cells))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _shape(t=16, p=2, e=64, f=128, heads=8, kv=2, gated=True) -> dict:
    return {"n_head": heads, "n_kv_head": kv, "n_embd": e, "n_expanded_embd": f, "vocab_size": 1000,
            "use_gated_mlp": "True" if gated else "False", "num_tokens": t, "num_tensor_parallel_workers": p}


def _one(rows: pd.DataFrame, **where) -> pd.Series:
    mask = np.ones(len(rows), dtype=bool)
    for k, v in where.items():
        mask &= (rows[k] == v).to_numpy()
    assert mask.sum() == 1, (where, int(mask.sum()))
    return rows[mask].iloc[0]


# --- DeepBench -----------------------------------------------------------------------------------

def test_gemm_rows_by_hand_and_sheets_left_out(tmp_path):
    root = _deepbench(tmp_path, gemm=[
        _gemm_line(),  # line 2: V100 fp32
        _gemm_line(ms="0.020", device="NVIDIA T4", file=TRAIN_T4, precision=FP16,
                   sheet="Results - FP16 ip, Mixed math"),
        _gemm_line(ms="0.008"),  # line 4: on the launch floor
        _gemm_line(file="xlsx/train/DeepBench_AMD_MI25.xlsx", device="AMD MI25"),
        _gemm_line(file="xlsx/inference/server/DeepBench_NV_1080Ti.xlsx", device="Nvidia 1080Ti",
                   precision="GEMM, Conv: Int8 multiplication, 32 bit accumulation"),
    ])
    rows = ks.load_deepbench(root)
    assert list(rows.columns) == list(ks.SOURCE_COLUMNS) and set(COLUMNS) <= set(rows.columns)
    assert len(rows) == 3
    v100 = rows.iloc[0]
    assert (v100["device"], v100["dataset"], v100["op"], v100["cls"], v100["phase"], v100["kernel"], v100["math"]) == (
        "V100-SXM2", "deepbench", "gemm", "matmul", "forward", "forward", "fp32")
    assert v100["flops"] == 2 * 64 * 32 * 128
    assert v100["bytes"] == 4 * (64 * 128 + 128 * 32 + 64 * 32)
    assert (v100["out"], v100["red"], v100["batches"]) == (64 * 32, 128, 1)
    assert (v100["in_elems"], v100["w_elems"]) == (64 * 128, 128 * 32)
    assert v100["measured_us"] == pytest.approx(50.0) and not v100["half"] and v100["training"] and not v100["censored"]
    assert v100["origin"].endswith("deepbench_gemm.csv:2")
    t4 = rows.iloc[1]
    assert (t4["device"], t4["math"], bool(t4["half"])) == ("T4", "fp16", True)
    assert t4["bytes"] == 2 * (64 * 128 + 128 * 32 + 64 * 32)  # A, B and C all FP16
    assert rows.iloc[2]["censored"] and rows.iloc[2]["origin"].endswith(":4")  # 8 µs <= FLOOR_US
    assert rows.attrs["left_out"]["deepbench gemm: AMD, Intel, phone and inference sheets"] == 2
    assert rows.attrs["left_out"]["deepbench rnn: NVIDIA training rows (no RNN kernel class)"] == 1


def test_conv_row_becomes_three_kernels_matching_the_emulators_backward_mapping(tmp_path):
    root = _deepbench(tmp_path, conv=[
        _conv_line(),  # W 8, H 6, C 3, N 2, K 4, 3x3, pad 1, stride 2: P = 4 (width), Q = 3 (height)
        _conv_line(times=("0.030", "N/A*", "0.050"), pq=(3, 4)),  # no grad-input time; P/Q given swapped
    ])
    rows = ks.load_deepbench(root)
    assert len(rows) == 5 and rows.attrs["skipped"] == 1 and rows.attrs["pq_mismatch"] == {"V100-SXM2": 1}
    n, c, h, w, k, r, s, p, q = 2, 3, 6, 8, 4, 3, 3, 4, 3
    out, red = n * k * p * q, c * r * s
    flops = 2 * out * red
    in_elems, w_elems = n * c * h * w, k * c * r * s
    nbytes = 4 * (in_elems + w_elems + out)
    first = rows[rows["origin"].str.endswith(":2")]
    fwd = _one(first, kernel="forward")
    assert (fwd["op"], fwd["phase"], fwd["out"], fwd["red"], fwd["flops"], fwd["bytes"]) == (
        "conv", "forward", out, red, flops, nbytes)
    assert (fwd["in_elems"], fwd["w_elems"], fwd["measured_us"]) == (in_elems, w_elems, pytest.approx(30.0))
    dgrad, wgrad = _one(first, kernel="grad_input"), _one(first, kernel="grad_weight")
    # by hand: grad-input out = input elements, red = K·R·S / stride² (9); grad-weight red = N·P·Q
    assert (dgrad["op"], dgrad["phase"], dgrad["out"], dgrad["red"], dgrad["flops"]) == (
        "conv_dgrad", "backward", in_elems, k * r * s / 4, flops)
    assert (wgrad["op"], wgrad["phase"], wgrad["out"], wgrad["red"], wgrad["flops"]) == (
        "conv_wgrad", "backward", w_elems, n * p * q, flops)
    expected = backward_pair(0, "conv", float(flops), float(nbytes), float(in_elems), float(w_elems))
    for got, want in zip((dgrad, wgrad), expected):
        for key in ("cls", "flops", "bytes", "out", "red", "batches", "in_elems", "w_elems"):
            assert got[key] == want[key], key
    assert (dgrad["measured_us"], wgrad["measured_us"]) == (pytest.approx(40.0), pytest.approx(50.0))
    second = rows[rows["origin"].str.endswith(":3")]
    assert sorted(second["kernel"]) == ["forward", "grad_weight"]


def test_deepbench_refusals_name_file_line_and_column(tmp_path):
    def refused(tmp, match, **files):
        folder = tmp_path / tmp
        folder.mkdir()
        with pytest.raises(InputError, match=match):
            ks.load_deepbench(_deepbench(folder, **files))

    refused("a", r"deepbench_gemm\.csv: line 1: header lacks column\(s\) 'Time \(msec\)'",
            gemm_header=GEMM_HEADER.replace("Time (msec)", "Time"))
    refused("b", r"deepbench_gemm\.csv: line 3: column 'M': expected a positive whole number, got 'abc'",
            gemm=[_gemm_line(), _gemm_line(m="abc")])
    refused("c", r"deepbench_gemm\.csv: line 2: column 'Time \(msec\)': expected a positive number, got '0'",
            gemm=[_gemm_line(ms="0")])
    refused("d", r"deepbench_gemm\.csv: line 2: column 'device': unknown DeepBench GPU 'NVIDIA Q9000'",
            gemm=[_gemm_line(device="NVIDIA Q9000")])
    refused("e", r"deepbench_conv_normalized\.csv: line 2: column 'bwd_param_ms': expected a positive number, got '-1'",
            conv=[_conv_line(times=("0.030", "0.040", "-1"))])
    refused("f", r"deepbench_conv_normalized\.csv: line 2: column 'pad_h': expected a non-negative whole number",
            conv=[_conv_line(pad=(1, -2))])
    refused("g", r"deepbench_conv_normalized\.csv: line 1: header lacks column\(s\) 'fwd_ms'",
            conv_header=CONV_HEADER.replace("fwd_ms", "forward"))
    with pytest.raises(InputError, match=r"nowhere: no such folder"):
        ks.load_deepbench(tmp_path / "nowhere")
    empty = tmp_path / "h"
    empty.mkdir()
    with pytest.raises(InputError, match=r"deepbench_gemm\.csv: no such file"):
        ks.load_deepbench(empty)


# --- Vidur ---------------------------------------------------------------------------------------

def test_vidur_gated_row_by_hand(tmp_path):
    _vidur_csv(tmp_path / "vidur" / "compute" / "a100" / "org" / "model" / "mlp.csv",
               [_shape(t=16, p=2, e=64, f=128, heads=8, kv=2, gated=True)])
    rows = ks.load_vidur(tmp_path / "vidur")
    assert len(rows) == 9 and rows.attrs["left_out"] == {"vidur emb (embedding gather: no kernel class)": 1}
    assert (rows["device"] == "A100-SXM4-80GB").all() and (rows["math"] == "fp16").all() and rows["half"].all()
    assert not rows["training"].any() and not rows["censored"].any() and (rows["kernel"] == "forward").all()
    t, d = 16, 64 // 8
    shapes = {"attn_pre_proj": (64, (8 + 2 * 2) * d // 2),  # QKV: (E + 2·E·kv/heads)/p = 48
              "attn_post_proj": (32, 64), "mlp_up_proj": (64, 2 * 128 // 2), "mlp_down_proj": (64, 64)}
    for op, (k, n) in shapes.items():
        g = _one(rows, op=op)
        assert (g["cls"], g["flops"], g["out"], g["red"], g["in_elems"], g["w_elems"]) == (
            "matmul", 2 * t * n * k, t * n, k, t * k, k * n), op
        assert g["bytes"] == 2 * (t * k + k * n + t * n), op
    assert _one(rows, op="attn_pre_proj")["out"] == 16 * 48
    act = _one(rows, op="mlp_act")  # SiLU(gate)·up over T·F/p outputs
    assert (act["cls"], act["out"]) == ("elementwise", 16 * 64)
    assert (act["flops"], act["bytes"]) == (6 * 16 * 64, 2 * 3 * 16 * 64)
    norm = _one(rows, op="post_attention_layernorm")
    assert (norm["cls"], norm["out"], norm["red"], norm["bytes"]) == ("norm", 16 * 64, 64, 2 * (2 * 16 * 64 + 64))
    assert _one(rows, op="add")["bytes"] == 2 * 3 * 16 * 64
    assert _one(rows, op="attn_rope")["out"] == 16 * (8 + 2) * d / 2
    assert _one(rows, op="mlp_up_proj")["measured_us"] == pytest.approx(10.0)
    assert _one(rows, op="attn_pre_proj")["origin"].endswith("mlp.csv:2")


def test_vidur_plain_mlp_and_parallel_block_by_hand(tmp_path):
    ops = tuple(op for op in VIDUR_OPS if op != "post_attention_layernorm")  # phi-2's file has no such columns
    _vidur_csv(tmp_path / "vidur" / "compute" / "a40" / "microsoft" / "phi-2" / "mlp.csv",
               [_shape(t=4, p=1, e=32, f=64, heads=4, kv=4, gated=False)], ops=ops)
    rows = ks.load_vidur(tmp_path / "vidur")
    assert len(rows) == 8 and (rows["device"] == "A40").all()
    assert (_one(rows, op="attn_pre_proj")["out"], _one(rows, op="attn_pre_proj")["red"]) == (4 * 96, 32)
    up = _one(rows, op="mlp_up_proj")
    assert (up["out"], up["red"], up["flops"]) == (4 * 64, 32, 2 * 4 * 64 * 32)  # no gate: F/p columns
    down = _one(rows, op="mlp_down_proj")
    assert (down["out"], down["red"]) == (4 * 32, 64)
    act = _one(rows, op="mlp_act")  # GELU
    assert (act["flops"], act["bytes"]) == (8 * 4 * 64, 2 * 2 * 4 * 64)
    add = _one(rows, op="add")  # attn + mlp + residual: two adds
    assert (add["flops"], add["bytes"]) == (2 * 4 * 32, 2 * 6 * 4 * 32)


def test_vidur_refusals_name_file_line_and_column(tmp_path):
    def refused(name, match, rows, ops=VIDUR_OPS, gpu="a100"):
        root = tmp_path / name
        _vidur_csv(root / "compute" / gpu / "org" / "model" / "mlp.csv", rows, ops=ops)
        with pytest.raises(InputError, match=match):
            ks.load_vidur(root)

    refused("a", r"mlp\.csv: line 3: column 'n_head': n_embd is not a multiple of n_head",
            [_shape(), _shape(e=60)])
    refused("b", r"mlp\.csv: line 2: column 'num_tensor_parallel_workers': n_kv_head is not a multiple",
            [_shape(p=4, kv=2)])
    refused("c", r"mlp\.csv: line 2: column 'use_gated_mlp': expected True or False, got 'maybe'",
            [_shape() | {"use_gated_mlp": "maybe"}])
    refused("d", r"mlp\.csv: line 2: column 'num_tokens': expected a positive whole number, got '-3'",
            [_shape(t=-3)])
    refused("e", r"mlp\.csv: line 2: column 'time_stats\.mlp_act\.median': expected a positive number, got 'x'",
            [_shape() | {"mlp_act": "x"}])
    refused("f", r"mlp\.csv: line 1: header lacks column\(s\) 'time_stats\.add\.median'",
            [_shape()], ops=tuple(op for op in VIDUR_OPS if op != "add"))
    refused("g", r"h100: unknown Vidur GPU folder", [_shape()], gpu="h100")
    with pytest.raises(InputError, match=r"compute: no such folder"):
        ks.load_vidur(tmp_path / "nothing")


def test_vidur_empty_time_is_skipped_and_sources_concatenate(tmp_path):
    _vidur_csv(tmp_path / "vidur" / "compute" / "a40" / "o" / "m" / "mlp.csv", [_shape() | {"add": ""}])
    _deepbench(tmp_path, gemm=[_gemm_line()], conv=[_conv_line(times=("0.030", "N/A*", "0.050"))])
    both = ks.load_sources(tmp_path)
    assert both["dataset"].value_counts().to_dict() == {"vidur": 8, "deepbench": 3}
    assert both.attrs["skipped"] == 2  # Vidur's empty add, DeepBench's N/A grad-input
    assert both.attrs["left_out"]["vidur emb (embedding gather: no kernel class)"] == 1
    assert len(ks.load_sources(tmp_path, which=("vidur",))) == 8
    with pytest.raises(InputError, match="unknown kernel source"):
        ks.load_sources(tmp_path, which=("kernelbench",))


# --- the real data -------------------------------------------------------------------------------

# Generous dense peaks (TFLOP/s) per GPU: FP32, and FP16 where the part has fast FP16
# (V100/T4/A100/A40 tensor cores with FP32 accumulate; P100's 2x FP16 vector rate).
PEAK_FP32 = {"V100-SXM2": 15.7, "T4": 8.1, "P100": 10.6, "GTX1080Ti": 11.3, "TitanXp": 12.1, "TitanXPascal": 11.0,
             "TitanXMaxwell": 6.6, "M40": 7.0, "A100-SXM4-80GB": 19.5, "A40": 37.4}
PEAK_FP16 = {"V100-SXM2": 125.0, "T4": 65.0, "P100": 21.2, "A100-SXM4-80GB": 312.0, "A40": 149.7}


def _calibration_dir() -> Path:
    """The rule of ``measurements.default_calibration_dir`` (that module is slow to import)."""
    if os.environ.get("ETS_CALIBRATION"):
        return Path(os.environ["ETS_CALIBRATION"])
    if os.environ.get("ETS_SHARED"):
        return Path(os.environ["ETS_SHARED"]) / "calibration"
    return Path(__file__).resolve().parents[2].parent / "shared" / "calibration"


def test_real_deepbench_and_vidur_rows_are_sane():
    root = _calibration_dir()
    if not ((root / "deepbench").is_dir() and (root / "vidur").is_dir()):
        pytest.skip(f"real kernel data not found under {root} (set ETS_CALIBRATION or ETS_SHARED)")
    rows = ks.load_sources(root)
    counts = rows.groupby(["dataset", "device"]).size().to_dict()
    # every NVIDIA training sheet: 160 GEMMs and 94 convolutions x 3 kernels, less the N/A grad-input
    # rows (first layers); V100, T4 and P100 have an FP16 sheet too
    for device, sheets, na in (("V100-SXM2", 2, 20), ("T4", 2, 20), ("P100", 2, 0), ("GTX1080Ti", 1, 0),
                               ("TitanXp", 1, 0), ("TitanXPascal", 1, 9), ("TitanXMaxwell", 1, 10), ("M40", 1, 10)):
        assert counts[("deepbench", device)] == sheets * (160 + 3 * 94) - na, device
    assert rows.attrs["skipped"] == 69
    assert counts[("vidur", "A100-SXM4-80GB")] == 81_900 and counts[("vidur", "A40")] == 49_068
    assert (rows["measured_us"] > 0).all() and np.isfinite(rows["measured_us"]).all()
    assert set(rows["kernel"]) == {"forward", "grad_input", "grad_weight"} and set(rows["math"]) == {"fp32", "fp16"}
    assert (rows["half"] == (rows["math"] == "fp16")).all()
    gemm = rows[rows["cls"] == "matmul"]
    peak = np.where(gemm["half"], gemm["device"].map(PEAK_FP16), gemm["device"].map(PEAK_FP32))
    achieved = gemm["flops"].to_numpy() / gemm["measured_us"].to_numpy() / 1e6
    worst = int(np.argmax(achieved / peak))
    assert achieved[worst] <= 1.2 * peak[worst], gemm.iloc[worst].to_dict()
    assert math.isclose(rows[rows["op"] == "gemm"]["red"].max(), 500_000)  # DeepBench's longest reduction


def test_every_device_is_a_gpu_catalogue_name():
    gpus = pytest.importorskip("predictor.common.gpus")
    if not hasattr(gpus, "catalog"):
        pytest.skip("this predictor.common.gpus has no GPU catalogue")
    names = set(gpus.catalog())
    missing = (set(ks.DEEPBENCH_DEVICES.values()) | set(ks.VIDUR_DEVICES.values())) - names
    assert not missing, f"not in predictor/common/gpu_catalog: {sorted(missing)}"
