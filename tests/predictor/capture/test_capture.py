"""Op-sequence capture on the meta device, real CPU profiling, and resumable collection."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.op_trace import read_dataset
from predictor.emulator.capture.opseq import capture
from predictor.emulator.collect import _capture as REAL_CAPTURE
from predictor.emulator.collect import collect
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig
from predictor.emulator.zoo.registry import zoo_configs

SMALL = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=2, input_size=32, num_classes=10)
KILLS_ITS_WORKER = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=3, input_size=32, num_classes=10)


@pytest.fixture(scope="module")
def resnet_traces():
    return capture(SMALL, "meta"), capture(SMALL, "cpu", warmup=1, iterations=3)


def test_meta_sequence_equals_cpu_profiled_sequence(resnet_traces):
    meta, cpu = resnet_traces
    assert list(meta["op"]) == list(cpu["op"]) and list(meta["phase"]) == list(cpu["phase"])
    assert list(meta["input_shapes"]) == list(cpu["input_shapes"])
    assert (meta["flops"].to_numpy() == cpu["flops"].to_numpy()).all()
    counts = meta["phase"].value_counts().to_dict()
    # resnet18: 62 parameter tensors -> SGD with momentum updates each (mul_, add_, add_ per tensor)
    assert counts["update"] == 3 * 62 and counts["forward"] > 50 and counts["backward"] > 50
    phases = list(meta["phase"])
    assert phases == sorted(phases, key=["forward", "backward", "update"].index)  # contiguous phases


def test_conv_flops_and_shapes_in_the_sequence(resnet_traces):
    meta, _ = resnet_traces
    first = meta.iloc[0]
    assert first["op"] == "conv2d" and json.loads(first["input_shapes"])[:2] == [[2, 3, 32, 32], [64, 3, 7, 7]]
    # stride 2, padding 3: output 2x64x16x16; 2 * numel(out) * 3*7*7
    assert first["flops"] == 2 * (2 * 64 * 16 * 16) * (3 * 7 * 7)
    assert list(first["params"][:8]) == [2, 3, 32, 32, 64, 3, 7, 7]
    backward_convs = meta[meta["op"] == "ConvolutionBackward0"]
    assert len(backward_convs) == 20 and (backward_convs["flops"] > 0).all()
    # the first conv's backward comes last; its input needs no gradient, so only grad-weight: 1x forward
    assert backward_convs["flops"].iloc[-1] == first["flops"]
    # any other conv computes grad-input and grad-weight: 2x its forward
    second = meta[meta["op"] == "conv2d"]["flops"].iloc[1]
    assert backward_convs["flops"].iloc[-2] == 2 * second


def test_cpu_trace_measures_compute_and_overhead(resnet_traces):
    _, cpu = resnet_traces
    assert (cpu["duration_us"] > 0).all() and (cpu["gap_us"].iloc[:-1] >= 0).all() and cpu["gap_us"].iloc[-1] == 0
    share = cpu["gap_us"].sum() / (cpu["duration_us"].sum() + cpu["gap_us"].sum())
    assert 0.0 < share < 1.0
    assert set(cpu["device"]) == {"cpu"} and set(cpu["config_id"]) == {SMALL.config_id}


def test_sequence_model_captures():
    lstm = min((c for c in zoo_configs("nlp") if c.model == "lstm_lm"),
               key=lambda c: (c.batch * c.input_size, c.config_id))
    trace = capture(lstm, "meta")
    assert {"forward", "backward", "update"} == set(trace["phase"])
    assert (trace["op"] == "lstm").sum() == 1  # the fused op, not a per-time-step decomposition
    # closed form per layer: gate GEMMs 2 * 4H * (I + H) + 10H element-wise, per step and sample
    e = lstm.extra_dict
    h, layers, b, t = e["hidden"], e["layers"], lstm.batch, lstm.input_size
    per_layer = (2 * 4 * h * (h + h) + 10 * h) * b * t  # embedding width = hidden in lstm_lm
    assert trace.loc[trace["op"] == "lstm", "flops"].item() == layers * per_layer
    backward_layers = trace[trace["op"].str.contains("RnnLayerBackward")]
    assert len(backward_layers) == layers and (backward_layers["flops"] == 2 * per_layer).all()
    cpu = capture(lstm, "cpu", warmup=1, iterations=1)
    assert list(trace["op"]) == list(cpu["op"]) and list(trace["phase"]) == list(cpu["phase"])


def test_impossible_config_names_the_config():
    bad = ModelConfig(kind="vision", family="inception_v3", model="inception_v3", batch=2, input_size=16)
    with pytest.raises(ModelBuildError, match="inception_v3:b2:s16"):
        capture(bad, "meta")


def test_collect_is_resumable_and_records_failures(tmp_path):
    bad = ModelConfig(kind="vision", family="alexnet", model="alexnet", batch=2, input_size=16)
    first = collect([SMALL, bad], "meta", tmp_path, progress=False)
    assert first == {"requested": 2, "skipped": 0, "captured": 1, "failed": 1}
    failure = json.loads((tmp_path / "failures.jsonl").read_text().splitlines()[0])
    assert failure["config_id"] == bad.config_id and "alexnet" in failure["error"]
    again = collect([SMALL], "meta", tmp_path, progress=False)
    assert again == {"requested": 1, "skipped": 1, "captured": 0, "failed": 0}
    df = read_dataset(tmp_path)
    assert set(df["config_id"]) == {SMALL.config_id}
    info = CliRunner().invoke(ets, ["dataset", "info", str(tmp_path)])
    assert info.exit_code == 0 and "1 iterations" in info.output


def test_collect_cli_on_the_meta_device(tmp_path):
    result = CliRunner().invoke(ets, ["collect", "--zoo", "hpo", "--limit", "2", "--device", "meta",
                                      "--workers", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "2 captured" in result.output
    assert pd.read_parquet(tmp_path / "meta.parquet")["config_id"].nunique() == 2


def test_exported_profile_reads_back_op_for_op(tmp_path):
    """The CUDA path reads each iteration back from the exported Chrome trace with the Kineto
    importer and requires the same op list as the extraction; on CPU the same export must agree
    op for op, and its host timings must agree with the extraction's to well under a microsecond
    (the export re-bases and rounds timestamps)."""
    import torch

    from predictor.emulator.capture import kineto, opseq, profile
    from predictor.emulator.zoo.registry import build, make_optimizer

    workload = build(SMALL, "cpu")
    optimizer = make_optimizer(SMALL, workload.model.parameters())
    inputs, targets = workload.inputs(torch.device("cpu"))

    def step():
        optimizer.zero_grad(set_to_none=True)
        workload.loss(workload.model(*inputs), targets).backward()
        optimizer.step()

    opseq._create_optimizer_state(optimizer)
    chrome = str(tmp_path / "resnet18.json")
    tops = profile.run_profiled(step, 2, chrome_trace=chrome)
    measured = [profile.extract_ops(top, "float32") for top in tops]
    tables = kineto.load_steps(chrome, list(range(len(measured))))  # one parse, every iteration
    for k, (table, ops) in enumerate(zip(tables, measured)):
        durations, gaps, kernels = opseq._kernel_timings(table, k, ops, SMALL.config_id)
        host_durations, host_gaps = profile.host_timings(ops)
        assert durations == pytest.approx(host_durations, abs=0.5)
        assert gaps == pytest.approx(host_gaps, abs=0.5) and kernels == [0] * len(ops)
    with pytest.raises(RuntimeError, match="first difference at op 0"):
        opseq._kernel_timings(tables[0], 0, measured[0][1:], SMALL.config_id)


def test_cuda_capture_without_a_gpu_names_the_config():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(ModelBuildError, match="resnet18.*no CUDA GPU"):
        capture(SMALL, "cuda")


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU")
def test_cuda_capture_groups_kernels_per_op():
    trace = capture(SMALL, "cuda", warmup=2, iterations=3)
    meta = capture(SMALL, "meta")
    assert list(trace["op"]) == list(meta["op"]) and list(trace["phase"]) == list(meta["phase"])
    assert (trace["kernels"] >= 0).all() and trace["kernels"].sum() > len(trace) / 2
    assert (trace.loc[trace["kernels"] > 0, "duration_us"] > 0).all()


def _meta_iteration(model, x, targets=None):
    """One profiled training iteration of ``model`` on ``x`` (meta device) -> op records."""
    import torch

    from predictor.emulator.capture import profile

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        (out.sum() if targets is None else torch.nn.functional.cross_entropy(out, targets)).backward()
        optimizer.step()

    return profile.extract_ops(profile.run_profiled(step, 1)[0], "float32")


def _matmul_rows(records, phase):
    from predictor.emulator.capture.costs import op_class
    return [r for r in records if r.phase == phase and op_class(r.op) == "matmul"]


def test_matmul_backward_is_costed_from_its_gemms():
    """resnet18 b8 s64's classifier (8x512 -> 10): its AddmmBackward0 runs grad-input
    (8x10 @ 10x512) and grad-weight (10x8 @ 8x512); the row lists both operand pairs."""
    config = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=8, input_size=64, num_classes=10)
    trace = capture(config, "meta")
    row = trace[trace["op"] == "AddmmBackward0"]
    assert len(row) == 1
    row = row.iloc[0]
    assert json.loads(row["input_shapes"]) == [[8, 10], [10, 512], [10, 8], [8, 512]]
    assert row["flops"] == 2 * 8 * 512 * 10 + 2 * 10 * 512 * 8 == 163_840
    # compulsory traffic of each GEMM: both operands and the output
    assert row["bytes"] == 4 * ((8 * 10 + 10 * 512 + 8 * 512) + (10 * 8 + 8 * 512 + 10 * 512))
    assert list(row["params"]) == [8, 10, 10, 512, 10, 8, 8, 512]


def test_linear_stack_backward_is_twice_forward_but_the_first_grad_input():
    import torch

    widths, batch = [16, 32, 24, 8], 4
    model = torch.nn.Sequential(*(torch.nn.Linear(a, b, bias=False) for a, b in zip(widths, widths[1:]))).to("meta")
    records = _meta_iteration(model, torch.randn(batch, widths[0], device="meta"))  # x needs no grad
    gemm = [2 * batch * a * b for a, b in zip(widths, widths[1:])]  # 2*M*N*K per layer
    forward, backward = _matmul_rows(records, "forward"), _matmul_rows(records, "backward")
    assert [r.flops for r in forward] == gemm
    # by hand: layers 3 and 2 run grad-input and grad-weight (2 x 1536, 2 x 6144), layer 1 grad-weight only (4096)
    assert sum(r.flops for r in backward) == 2 * sum(gemm) - gemm[0] == 2 * 1536 + 2 * 6144 + 4096 == 19_456
    # backward runs the last layer first, MmBackward0 (bias-free linear) grad-weight then grad-input:
    # grad_out^T (8, B) @ x (B, 24), then grad_out (B, 8) @ W (8, 24)
    assert backward[0].shapes == [[8, batch], [batch, 24], [batch, 8], [8, 24]]
    # the first layer's node runs grad-weight only: (32, B) @ (B, 16)
    assert backward[-1].shapes == [[32, batch], [batch, 16]]


def test_attention_bmm_backward_flops():
    import torch

    b, s, d = 3, 16, 8

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(d, 3 * d)

        def forward(self, x):
            q, k, v = self.qkv(x).split(d, dim=-1)
            return torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v)

    records = _meta_iteration(Attention().to("meta"), torch.randn(b, s, d, device="meta"))
    bmm = [r for r in records if r.phase == "backward" and r.op.startswith("BmmBackward")]
    # each bmm's backward: two batched GEMMs of 2*b*s*s*d FLOPs (grads of both operands)
    assert [r.flops for r in bmm] == [2 * 2 * b * s * s * d] * 2
    assert all(len(r.shapes) == 4 and all(len(t) == 3 and t[0] == b for t in r.shapes) for r in bmm)
    forward = [r.flops for r in records if r.phase == "forward" and r.op == "bmm"]
    assert sum(r.flops for r in bmm) == 2 * sum(forward)


def test_a_mis_parented_local_scalar_dense_is_not_an_update_op():
    from types import SimpleNamespace

    from predictor.emulator.capture import profile

    def event(name, start, children=()):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=start + 1),
                               cpu_children=list(children), input_shapes=[[4]], concrete_inputs=[])

    # the profiler hung item's own _local_scalar_dense beside it (seen on Adam's step counter)
    step = event("Optimizer.step#Adam.step", 0, [event("aten::item", 1), event("aten::_local_scalar_dense", 2),
                                                 event("aten::add_", 3), event("aten::_local_scalar_dense", 4)])
    ops = [r.op for r in profile.extract_ops([step], "float32")]
    assert ops == ["item", "add_", "_local_scalar_dense"]  # only the one after item is dropped


def test_a_terminated_collect_keeps_what_it_captured(tmp_path, monkeypatch):
    import os
    import signal

    from predictor.emulator import collect as collect_module

    real = collect_module._capture
    calls = []

    def capture_then_terminate(config_dict, device, regime="plain"):
        calls.append(config_dict)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` would, mid-run
        return real(config_dict, device, regime)

    monkeypatch.setattr(collect_module, "_capture", capture_then_terminate)
    before = signal.getsignal(signal.SIGTERM)
    second = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=4, input_size=32, num_classes=10)
    with pytest.raises(KeyboardInterrupt):
        collect([SMALL, second], "meta", tmp_path, progress=False, flush_every=10)
    assert set(read_dataset(tmp_path)["config_id"]) == {SMALL.config_id}  # flushed, not lost
    assert signal.getsignal(signal.SIGTERM) is before


def _capture_or_die(config_dict, device, regime="plain"):
    """A capture whose worker dies on one config, as the out-of-memory killer would end it."""
    import os

    if config_dict == KILLS_ITS_WORKER.to_dict():
        os._exit(9)
    return REAL_CAPTURE(config_dict, device, regime)


@pytest.mark.skipif(__import__("multiprocessing").get_start_method() != "fork",
                    reason="the patched capture reaches the workers only when they are forked")
def test_a_worker_that_dies_fails_its_config_and_the_others_go_on(tmp_path, monkeypatch):
    from predictor.emulator import collect as collect_module

    monkeypatch.setattr(collect_module, "_capture", _capture_or_die)
    others = [SMALL, ModelConfig(kind="vision", family="resnet", model="resnet18", batch=4, input_size=32,
                                 num_classes=10)]
    counts = collect([others[0], KILLS_ITS_WORKER, others[1]], "meta", tmp_path, workers=2, progress=False)
    assert counts == {"requested": 3, "skipped": 0, "captured": 2, "failed": 1}
    assert set(read_dataset(tmp_path)["config_id"]) == {c.config_id for c in others}
    failure = json.loads((tmp_path / "failures.jsonl").read_text())
    assert failure["config_id"] == KILLS_ITS_WORKER.config_id and "worker process died" in failure["error"]


def test_a_worker_memory_limit_fails_the_config_not_the_run(tmp_path):
    counts = collect([SMALL], "meta", tmp_path, workers=2, worker_memory_gb=0.01, progress=False)
    assert counts == {"requested": 1, "skipped": 0, "captured": 0, "failed": 1}
    failure = json.loads((tmp_path / "failures.jsonl").read_text())
    assert failure["config_id"] == SMALL.config_id and failure["error"]
    assert collect([SMALL], "meta", tmp_path, workers=2, progress=False)["captured"] == 1  # no limit: it fits
