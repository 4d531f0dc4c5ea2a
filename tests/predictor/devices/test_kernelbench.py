"""KernelBench rows: the timings file read and checked, problem files captured once (cached), a
single-kernel level-1 problem turned into a kernel row with the arithmetic PyTorch runs; the
end-to-end summary by set and GPU computed by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.emulator.capture import cache as capture_cache
from predictor.emulator.devices import endtoend, kernelbench

HEADER = "problem_set,source_dir,source_commit,config,level,problem,hardware,mean_ms,std_ms,min_ms,max_ms,num_trials\n"
MATMUL = '''import torch
import torch.nn as nn

N = 256


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]
'''
CONV = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(4, 8, 32, 32)]
'''


def _root(tmp_path, rows: list[str]):
    folder = tmp_path / "problems_v0.0" / "level1"
    folder.mkdir(parents=True)
    (folder / "1_matmul.py").write_text(MATMUL)
    (folder / "2_conv.py").write_text(CONV)
    (tmp_path / kernelbench.TIMINGS).write_text(HEADER + "\n".join(rows) + "\n")
    return tmp_path


def test_timings_keep_eager_nvidia_rows_and_count_the_rest(tmp_path):
    root = _root(tmp_path, [
        "v0.0,T4_modal,c,torch,level1,1_matmul.py,Tesla T4,0.5,0.01,0.49,0.6,100",
        "v0.0,T4_modal,c,torch_compile_default,level1,1_matmul.py,Tesla T4,0.4,0.01,0.39,0.5,100",
        "v0.0,MI250,c,torch,level1,1_matmul.py,AMD Instinct MI250X/MI250,0.3,0.01,0.29,0.4,100",
        "v0.0,A100_modal,c,torch,level1,2_conv.py,NVIDIA A100-SXM4-40GB,0.2,0.01,0.19,0.3,100"])
    rows = kernelbench.load_timings(root, ("level1",))
    assert rows["device"].tolist() == ["T4", "A100-SXM4"] and rows["measured_us"].tolist() == [500.0, 200.0]
    assert rows.attrs["excluded"] == {"AMD Instinct MI250X/MI250 (not NVIDIA)": 1}
    assert rows["origin"].iloc[1].endswith("kernelbench_timings.csv:5")


def test_a_bad_time_names_file_line_and_column(tmp_path):
    root = _root(tmp_path, ["v0.0,T4_modal,c,torch,level1,1_matmul.py,Tesla T4,fast,0.01,0.49,0.6,100"])
    with pytest.raises(InputError, match=r"kernelbench_timings.csv: line 2: column 'mean_ms'.*'fast'"):
        kernelbench.load_timings(root, ("level1",))
    (tmp_path / kernelbench.TIMINGS).write_text("problem_set,level\nv0.0,level1\n")
    with pytest.raises(InputError, match="header lacks column"):
        kernelbench.load_timings(root, ("level1",))


def test_single_kernel_problems_become_kernel_rows_with_their_arithmetic(tmp_path):
    root = _root(tmp_path, [
        "v0.0,T4_modal,c,torch,level1,1_matmul.py,Tesla T4,0.5,0.01,0.49,0.6,100",
        "v0.0,T4_modal,c,torch,level1,2_conv.py,Tesla T4,0.3,0.01,0.29,0.4,100",
        "v0.0,A100_modal,c,torch,level1,2_conv.py,NVIDIA A100-SXM4-40GB,0.2,0.01,0.19,0.3,100"])
    timings = kernelbench.load_timings(root, ("level1",))
    cache = tmp_path / "cache.parquet"
    seqs, failed = kernelbench.sequences(root, timings, cache, progress=False)
    assert failed == {} and len(seqs) == 2 and cache.exists()
    again, _ = kernelbench.sequences(root, timings, cache, progress=False)  # from the cache, same ops
    assert all(again[k]["op"].tolist() == seqs[k]["op"].tolist() for k in seqs)
    rows = kernelbench.kernel_rows(timings, seqs).set_index(["device", "op"])
    assert rows.loc[("T4", "1_matmul"), "flops"] == 2 * 256 ** 3 and rows.loc[("T4", "1_matmul"), "math"] == "fp32"
    # 4 x 16 x 30 x 30 outputs, 8 x 3 x 3 reduction; TF32 on the A100 (cuDNN's default), FP32 on the T4
    assert rows.loc[("T4", "2_conv"), "flops"] == 2 * (4 * 16 * 30 * 30) * (8 * 3 * 3)
    assert rows.loc[("A100-SXM4", "2_conv"), "math"] == "tf32" and rows.loc[("T4", "2_conv"), "math"] == "fp32"
    assert set(rows["dataset"]) == {"kernelbench"} and not rows["training"].any()


def test_a_cache_from_other_capture_code_is_captured_again(tmp_path, capsys):
    root = _root(tmp_path, ["v0.0,T4_modal,c,torch,level1,1_matmul.py,Tesla T4,0.5,0.01,0.49,0.6,100"])
    timings = kernelbench.load_timings(root, ("level1",))
    cache = tmp_path / "cache.parquet"
    seqs, _ = kernelbench.sequences(root, timings, cache, progress=False)
    (key, first), = seqs.items()
    edited = pd.read_parquet(cache).assign(flops=lambda t: 3 * t["flops"])
    capture_cache.write(edited, cache)  # this code's fingerprint: the cache is trusted as it stands
    trusted, _ = kernelbench.sequences(root, timings, cache, progress=False)
    assert trusted[key]["flops"].sum() == 3 * first["flops"].sum() > 0
    assert capsys.readouterr().err == ""
    edited.to_parquet(cache, index=False)  # as an older version wrote it: no fingerprint
    redone, _ = kernelbench.sequences(root, timings, cache, progress=False)
    assert redone[key]["flops"].sum() == first["flops"].sum()
    assert f"warning: {cache}: captured by another version of the capture code" in capsys.readouterr().err
    kernelbench.sequences(root, timings, cache, progress=False)  # rewritten with the fingerprint: silent
    assert capsys.readouterr().err == ""


def test_a_problem_that_cannot_be_captured_is_listed_and_cached(tmp_path):
    root = _root(tmp_path, ["v0.0,T4_modal,c,torch,level1,3_broken.py,Tesla T4,0.5,0.01,0.49,0.6,100"])
    (tmp_path / "problems_v0.0" / "level1" / "3_broken.py").write_text("raise RuntimeError('no')\n")
    timings = kernelbench.load_timings(root, ("level1",))
    seqs, failed = kernelbench.sequences(root, timings, tmp_path / "c.parquet", progress=False)
    assert seqs == {} and "RuntimeError: no" in failed["v0.0/level1/3_broken.py"]
    _, again = kernelbench.sequences(root, timings, tmp_path / "c.parquet", progress=False)
    assert "RuntimeError: no" in again["v0.0/level1/3_broken.py"]


def test_summary_by_set_and_gpu_by_hand():
    rows = endtoend.with_errors(pd.DataFrame({
        "set": ["Lambda"] * 3 + ["KernelBench L3"], "device": ["A10", "A10", "A40", "T4"], "kernels": "spec-derived",
        "measured_s": [1.0, 2.0, 1.0, 4.0], "predicted_s": [1.1, 1.0, 1.3, 4.0]}))
    table = endtoend.by_set_and_gpu(rows).set_index(["set", "device"])
    # A10: errors +10 % and -50 % -> median |error| 30 %, signed median -20 %, one of two within 20 %
    assert table.loc[("Lambda", "A10"), "median"] == pytest.approx(0.3)
    assert table.loc[("Lambda", "A10"), "signed_median"] == pytest.approx(-0.2)
    assert table.loc[("Lambda", "A10"), "within_20"] == 0.5
    assert table.loc[("Lambda", "all"), "n"] == 3 and table.loc[("Lambda", "all"), "median"] == pytest.approx(0.3)
    assert table.loc[("KernelBench L3", "T4"), "median"] == 0.0


def test_host_agreement_by_hand(tmp_path):
    root = _root(tmp_path, [
        "v0.0,L40S_a,c,torch,level1,1_matmul.py,NVIDIA L40S,0.1,0.01,0.1,0.1,100",
        "v0.0,L40S_b,c,torch,level1,1_matmul.py,NVIDIA L40S,0.2,0.01,0.2,0.2,100",
        "v0.0,L40S_a,c,torch,level1,2_conv.py,NVIDIA L40S,0.3,0.01,0.3,0.3,100",
        "v0.0,L40S_b,c,torch,level1,2_conv.py,NVIDIA L40S,0.3,0.01,0.3,0.3,100",
        "v0.0,T4_modal,c,torch,level1,2_conv.py,Tesla T4,0.3,0.01,0.3,0.3,100"])
    (row,) = kernelbench.host_agreement(kernelbench.load_timings(root, ("level1",))).itertuples()
    # ratios a/b: 0.5 and 1.0 -> median ratio 0.75, median |ratio - 1| 0.25; the T4 has one host
    assert (row.device, row.host_a, row.host_b, row.n) == ("L40S", "L40S_a", "L40S_b", 2)
    assert row.median_ratio == pytest.approx(0.75) and row.median_abs == pytest.approx(0.25)
