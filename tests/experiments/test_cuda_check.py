"""experiments.cuda_check and cuda_report: the real-GPU check, run end to end on the CPU before GPU time is spent."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from experiments import cuda_check, cuda_report
from predictor.common.op_trace import device_file, read_trace_file

# Two problems in KernelBench's convention (its level-1 ReLU and level-3 MLP at sizes a CPU takes at once).
RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size, dim = 16, 256


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""
MLP = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers, current = [], input_size
        for size in layer_sizes:
            layers += [nn.Linear(current, size), nn.ReLU()]
            current = size
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def get_inputs():
    return [torch.rand(8, 32)]


def get_init_inputs():
    return [32, [32, 32], 16]
"""
BROKEN = """import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this problem fails to run")


def get_inputs():
    return [1]
"""


def problems(root: Path, extra: dict[str, str] | None = None) -> Path:
    folder = root / "problems_v0.1"
    for name, text in {"level1/19_ReLU.py": RELU, "level3/1_MLP.py": MLP, **(extra or {})}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def fast_capture(monkeypatch):
    """The CPU capture with 1 profiled iteration and no warm-up (the capture's code, fewer repeats)."""
    from predictor.emulator.capture import opseq

    original = opseq.capture

    def capture(config, device="meta", **kw):
        return original(config, device, **({"warmup": 0, "iterations": 1} if device != "meta" else {}) | kw)

    monkeypatch.setattr(opseq, "capture", capture)


def check(*args: str) -> int:
    """The command line, in this process; its exit status."""
    return cuda_check.main.main(list(args), standalone_mode=False)


def run(out: Path, *args: str) -> int:
    return check("--device", "cpu", "--quick", "--out", str(out), "--no-progress", *args)


def manifest(out: Path) -> dict:
    return json.loads((out / cuda_check.MANIFEST).read_text())


def test_quick_cpu_run_end_to_end_and_its_report(tmp_path, fast_capture):
    out = tmp_path / "out"
    assert run(out, "--kernelbench", str(problems(tmp_path))) == 0
    m = manifest(out)
    assert m["status"] == "done" and m["environment"]["torch"] == torch.__version__
    assert {"driver", "torch_cuda", "cudnn"} <= set(m["environment"])
    assert [m["parts"][p]["status"] for p in cuda_check.PARTS] == ["done"] * 4  # AMP trace: a skipped item
    zoo = pd.read_csv(out / cuda_check.ZOO_CSV)
    assert list(zoo["mode"]) == ["fp32", "amp", "tf32"] and (zoo["provenance"] == "real (cpu)").all()
    assert (zoo["iteration_us"] > 0).all()
    # the project's own collection wrote its dataset; AMP is refused on a real device, recorded with why
    captured = pd.read_csv(out / cuda_check.TRACE_CSV).set_index("mode")
    assert list(captured["trace"]) == ["captured", "failed", "captured"] and "AMP" in captured.loc["amp", "reason"]
    assert captured.loc["amp", "provenance"] == "skipped" and m["parts"]["traces"]["done"] == 2
    traces = read_trace_file(device_file(out / "traces", "cpu"))
    assert set(traces["config_id"]) == {zoo["config_id"][0]} and (traces["duration_us"] >= 0).all()
    assert read_trace_file(device_file(out / "traces_tf32", "cpu"))["config_id"].nunique() == 1
    # gradient bytes: the meta capture's AccumulateGrad ops = the real parameters' = the real gradients'
    grads = pd.read_csv(out / cuda_check.GRAD_CSV)
    meta = pd.read_csv(out / cuda_check.META_GRAD_CSV).set_index("config_id")
    assert (grads["param_bytes"] == grads["real_grad_bytes"]).all()
    assert (grads["param_bytes"] == meta.loc[grads["config_id"], "meta_grad_bytes"].to_numpy()).all()
    assert captured.loc["fp32", "trace_grad_bytes"] == grads["param_bytes"][0]  # the real trace's too
    kb = pd.read_csv(out / cuda_check.KB_CSV)
    assert list(kb["problem"]) == ["19_ReLU.py", "1_MLP.py"] and (kb["mean_ms"] > 0).all()
    assert (kb["num_trials"] == 3).all() and (kb["provenance"] == "real (cpu)").all()

    path = cuda_report.report(out, progress=False)
    text = path.read_text()
    assert "against emulated:H100" in text and "mean nothing" in text  # a dry run says so
    iters = pd.read_csv(path.parent / "zoo_iterations.csv")
    assert set(iters["provenance"]) == {"real (cpu)", "emulated:H100"}
    assert len(iters[iters["provenance"] == "emulated:H100"]) == 3
    breakdown = pd.read_csv(path.parent / "zoo_breakdown.csv")
    assert {"forward", "backward", "update", "all"} <= set(breakdown["phase"])
    assert set(breakdown["quantity"]) == {"kernel_us", "gap_us"}
    assert "matmul" in set(pd.read_csv(path.parent / "zoo_op_classes.csv")["op_class"])
    kb_report = pd.read_csv(path.parent / "kernelbench.csv")
    assert set(kb_report["provenance"]) == {"real (cpu)", "emulated:H100"} and len(kb_report) == 4
    assert "## KernelBench" in text and "Cross-harness floor" in text and "3 agree exactly" in text
    assert "2 of 3 configs captured" in text


def test_a_tiny_budget_stops_cleanly_keeping_what_was_measured(tmp_path, monkeypatch, fast_capture):
    """Each item takes 100 s on the budget's clock: with 400 s, the zoo (its deadline 100 s) times one
    config, the traces (200 s) capture one, KernelBench (400 s) times two problems, and the meta part
    finds its deadline passed; the rest is listed as skipped, and what was measured is on disk."""
    now = [0.0]
    monkeypatch.setattr(cuda_check, "_clock", lambda: now[0])
    for name in ("timing_item", "trace_item", "time_problem"):
        original = getattr(cuda_check, name)

        def slow(*args, _original=original, **kw):
            result = _original(*args, **kw)
            now[0] += 100.0
            return result

        monkeypatch.setattr(cuda_check, name, slow)
    out = tmp_path / "out"
    assert run(out, "--kernelbench", str(problems(tmp_path)), "--budget-s", "400", "--zoo-share", "0.25",
               "--traces-share", "0.25") == 0
    m = manifest(out)
    assert m["status"] == "partial"
    zoo, traces, kb, meta = (m["parts"][p] for p in cuda_check.PARTS)
    assert zoo["status"] == traces["status"] == meta["status"] == "partial (budget)" and kb["status"] == "done"
    assert zoo["done"] == 1 and [s["item"] for s in zoo["skipped"]] == [i.key for i in cuda_check.QUICK_PLAN[1:]]
    assert traces["done"] == 1 and len(traces["skipped"]) == 2 and kb["done"] == 2
    assert meta["done"] == 0 and len(meta["skipped"]) == 2  # two config ids: fp32 and tf32 share one
    assert all(s["reason"].startswith("budget") for s in zoo["skipped"] + traces["skipped"] + meta["skipped"])
    assert len(pd.read_csv(out / cuda_check.ZOO_CSV)) == 1 and len(pd.read_csv(out / cuda_check.KB_CSV)) == 2
    assert read_trace_file(device_file(out / "traces", "cpu"))["config_id"].nunique() == 1


def test_a_zero_budget_measures_nothing_and_says_so(tmp_path):
    out = tmp_path / "out"
    assert run(out, "--kernelbench", str(problems(tmp_path)), "--budget-s", "0") == 0
    m = manifest(out)
    assert m["status"] == "partial"
    assert len(m["parts"]["zoo"]["skipped"]) == len(cuda_check.QUICK_PLAN) and m["parts"]["zoo"]["done"] == 0
    assert len(m["parts"]["kernelbench"]["skipped"]) == 2
    with pytest.raises(cuda_report.ReportError, match="no"):
        cuda_report.load(tmp_path / "elsewhere")
    cuda_report.report(out, progress=False)  # nothing measured: a report that says so, no traceback


def test_missing_kernelbench_folder_and_a_failing_problem_are_skipped_rows(tmp_path):
    out = tmp_path / "missing"
    assert run(out, "--parts", "kernelbench", "--kernelbench", str(tmp_path / "nowhere")) == 0
    kb = pd.read_csv(out / cuda_check.KB_CSV)
    assert list(kb["provenance"]) == ["skipped"] and "not found" in kb["reason"][0]
    assert manifest(out)["parts"]["kernelbench"]["status"] == "skipped"

    folder = problems(tmp_path, {"level1/5_Broken.py": BROKEN})
    out = tmp_path / "broken"
    assert check("--device", "cpu", "--out", str(out), "--no-progress", "--parts", "kernelbench",
                 "--kernelbench", str(folder), "--kb-trials", "2", "--kb-warmup", "1") == 0
    kb = pd.read_csv(out / cuda_check.KB_CSV).set_index("problem")
    assert list(kb.index) == ["5_Broken.py", "19_ReLU.py", "1_MLP.py"]  # sorted by problem number per level
    assert kb.loc["5_Broken.py", "provenance"] == "skipped"
    assert "this problem fails to run" in kb.loc["5_Broken.py", "reason"]
    assert (kb.loc[["19_ReLU.py", "1_MLP.py"], "num_trials"] == 2).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_said_clearly(tmp_path, capsys):
    out = tmp_path / "out"
    assert check("--device", "cuda", "--out", str(out), "--no-progress") == 2
    assert "--device cuda:" in capsys.readouterr().err
    m = manifest(out)
    assert m["status"] == "not run" and m["environment"]["cuda_available"] is False
    with pytest.raises(cuda_report.ReportError, match="did not run"):
        cuda_report.load(out)


def test_the_full_plan_is_forty_zoo_configs_across_families_batches_and_precisions():
    configs = [cuda_check.resolve(item) for item in cuda_check.FULL_PLAN]
    assert len(configs) == 40 and len({(c.config_id, i.mode) for c, i in zip(configs, cuda_check.FULL_PLAN)}) == 40
    assert {i.mode for i in cuda_check.FULL_PLAN} == {"fp32", "tf32", "amp", "bf16"}
    assert len({c.family for c in configs}) >= 20 and len({c.batch for c in configs if c.model == "resnet50"}) >= 4
    assert {c.model for c in configs if c.kind == "llm"} == {"gpt2_medium", "opt_1.3b"}
