"""Op-sequence capture on the meta device, real CPU profiling, and resumable collection."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.capture.opseq import capture
from predictor.cli import main as ets
from predictor.collect import collect
from predictor.trace_table import read_dataset
from predictor.zoo.config import ModelBuildError, ModelConfig
from predictor.zoo.registry import zoo_configs

SMALL = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=2, input_size=32, num_classes=10)


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
    lstm = min((c for c in zoo_configs("nlp") if c.model == "lstm_lm"), key=lambda c: (c.batch * c.input_size, c.config_id))
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

    from predictor.capture import opseq, profile
    from predictor.zoo.registry import build, make_optimizer

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
    for k, ops in enumerate(measured):
        durations, gaps, kernels = opseq._kernel_timings(chrome, k, ops, SMALL.config_id)
        host_durations, host_gaps = profile.host_timings(ops)
        assert durations == pytest.approx(host_durations, abs=0.5)
        assert gaps == pytest.approx(host_gaps, abs=0.5) and kernels == [0] * len(ops)
    with pytest.raises(RuntimeError, match="first difference at op 0"):
        opseq._kernel_timings(chrome, 0, measured[0][1:], SMALL.config_id)


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
