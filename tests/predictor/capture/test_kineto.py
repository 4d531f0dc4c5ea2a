"""Kineto (PyTorch profiler) importer: exact rows on hand-written traces of both schemas
(tests/fixtures/kineto), the bad-input catalogue, and the real traces in ../shared/fixtures
(README there) checked against statistics computed here straight from the JSON."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.common.op_trace import COLUMNS, OpTraceFormatError
from predictor.emulator.capture import kineto
from tests.predictor.helpers import expect_error

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kineto"
NEW = FIXTURES / "new_schema.json"
OLD = FIXTURES / "old_schema.json"
CPU = FIXTURES / "cpu_only.json"
EXACT = ["op", "phase", "duration_us", "gap_us", "kernels", "cpu_us", "flops", "dtype", "input_shapes", "params"]


def rows(df: pd.DataFrame) -> list[tuple]:
    return [(r.op, r.phase, r.duration_us, r.gap_us, r.kernels, r.cpu_us, r.flops, r.dtype, r.input_shapes,
             list(r.params)) for r in df[EXACT].itertuples(index=False)]


def check_schema(df: pd.DataFrame) -> None:
    assert list(df.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in df.dtypes.items() if c != "params"} == \
        {c: t for c, t in COLUMNS.items() if c != "params"}
    assert list(df["idx"]) == list(range(len(df)))


# -- hand-written fixtures: exact rows ---------------------------------------------------------------

def test_new_schema_exact():
    df = kineto.load(NEW)
    check_schema(df)
    assert rows(df) == [
        # conv2d: own flops (the nested convolution's are not added); gap = 1080 - (1030 + 20)
        ("conv2d", "forward", 20.0, 30.0, 1, 40.0, 1000.0, "float32", "[[8,3,32,32],[16,3,3,3],[]]",
         [8, 3, 32, 32, 16, 3, 3, 3]),
        # linear: 2 kernels, the second linked only by its ac2g flow; flops of the nested addmm;
        # Input Dims given as a JSON string; gap = 1140 - (1080 + 15)
        ("linear", "forward", 15.0, 45.0, 2, 30.0, 2560.0, "float16", "[[8,16],[10,16],[10]]",
         [8, 16, 10, 16, 10]),
        ("ones_like", "forward", 0.0, 0.0, 0, 5.0, 0.0, "float32", "[[],[],[],[],[],[]]", []),
        # the evaluate_function wrapper on the autograd thread, named and shaped after its node
        ("AddmmBackward0", "backward", 30.0, 55.0, 1, 40.0, 0.0, "float32", "[[8,10]]", [8, 10]),
        ("_foreach_add_", "update", 8.0, 0.0, 1, 30.0, 0.0, "float32", "[[[10,16],[10]],[[10,16],[10]],[]]",
         [10, 16, 10, 10, 16, 10]),
    ]
    assert set(df["config_id"]) == {"kineto:new_schema:3"}  # step 4 is the empty trailing one
    assert set(df["device"]) == {"Test GPU"}
    assert set(df["model"]) == {"new_schema"} and set(df["family"]) == {"new_schema"}
    assert set(df["batch"]) == {8} and set(df["input_size"]) == {32}
    assert set(df["bytes"]) == {0.0}
    # Σ(duration + gap) = first kernel start (1030) .. last kernel end (1233)
    assert (df["duration_us"] + df["gap_us"]).sum() == 203.0
    # source: the op's (or wrapper's) index in traceEvents
    events = json.loads(NEW.read_text())["traceEvents"]
    names = [events[int(s.rsplit(":", 1)[1])]["name"] for s in df["source"]]
    assert names == ["aten::conv2d", "aten::linear", "aten::ones_like",
                     "autograd::engine::evaluate_function: AddmmBackward0", "aten::_foreach_add_"]
    assert all(s.startswith(f"{NEW}:") for s in df["source"])


def test_new_schema_other_step_and_overrides():
    df = kineto.load(NEW, step=2, device="A100", model="resnet18")
    assert rows(df) == [("relu", "forward", 4.0, 0.0, 1, 10.0, 0.0, "float32", "[[8,16]]", [8, 16])]
    assert set(df["config_id"]) == {"kineto:resnet18:2"}
    assert set(df["device"]) == {"A100"} and set(df["family"]) == {"resnet"}
    assert set(df["batch"]) == {8} and set(df["input_size"]) == {0}


def test_steps_read_from_one_parse_are_the_steps_read_one_by_one():
    """The capture reads every profiled iteration back from one parse of the trace (load_steps)."""
    steps = [None, 2, 3]
    for one, together in zip([kineto.load(NEW, step=k, device="A100") for k in steps],
                             kineto.load_steps(NEW, steps, device="A100")):
        pd.testing.assert_frame_equal(one, together)
    with pytest.raises(OpTraceFormatError, match="step"):  # a bad step among good ones still names itself
        kineto.load_steps(NEW, [2, 7])


def test_old_schema_exact():
    df = kineto.load(OLD)
    check_schema(df)
    assert rows(df) == [
        # the DataLoader range's aten::stack is dropped; the H2D memcpy counts as device work
        ("to", "forward", 25.0, 25.0, 1, 40.0, 0.0, "float32", "[[4,3,8,8],[],[],[],[]]", [4, 3, 8, 8]),
        ("relu", "forward", 10.0, 30.0, 1, 20.0, 0.0, "float32", "[[4,3,8,8]]", [4, 3, 8, 8]),
        ("zero_", "update", 2.0, 58.0, 1, 20.0, 0.0, "float32", "[[3]]", [3]),  # Optimizer.zero_grad, memset
        ("ReluBackward0", "backward", 12.0, 18.0, 1, 30.0, 0.0, "float32", "[[4,3,8,8]]", [4, 3, 8, 8]),
        ("AccumulateGrad", "backward", 3.0, 17.0, 1, 20.0, 0.0, "float32", "[[3]]", [3]),
        # a plain aten op on the autograd thread is backward
        ("add", "backward", 4.0, 56.0, 1, 10.0, 0.0, "float32", "[[4,3,8,8],[4,3,8,8],[]]",
         [4, 3, 8, 8, 4, 3, 8, 8]),
        # second kernel has no runtime call: attributed by its external id
        ("add_", "update", 8.0, 0.0, 2, 20.0, 0.0, "float32", "[[3],[3],[]]", [3, 3]),
        ("item", "update", 0.0, 0.0, 0, 10.0, 0.0, "float32", "[[]]", []),  # after the last backward op
    ]
    assert set(df["config_id"]) == {"kineto:old_schema:1"}
    assert set(df["device"]) == {"cuda"}  # no deviceProperties, has kernels
    assert set(df["batch"]) == {4} and set(df["input_size"]) == {8}
    assert (df["duration_us"] + df["gap_us"]).sum() == 338.0 - 70.0


def test_cpu_only_exact():
    df = kineto.load(CPU)
    check_schema(df)
    assert [(r.op, r.phase, r.duration_us, r.gap_us, r.kernels, r.cpu_us, r.dtype) for r in df.itertuples()] == [
        ("linear", "forward", 10.0, 2.0, 0, 10.0, "float64"),
        ("relu", "forward", 3.0, 2.0, 0, 3.0, "float64"),
        ("sum", "forward", 2.0, 1.0, 0, 2.0, "float64"),
        ("ones_like", "forward", 1.0, 4.0, 0, 1.0, "float64"),
        ("SumBackward0", "backward", 4.0, 1.0, 0, 4.0, "float64"),
        ("ReluBackward0", "backward", 5.0, 1.0, 0, 5.0, "float64"),
        ("AddmmBackward0", "backward", 8.0, 7.0, 0, 8.0, "float64"),
        ("add_", "update", 3.0, 1.0, 0, 3.0, "float64"),
        ("add_", "update", 3.0, 0.0, 0, 3.0, "float64"),
    ]
    assert set(df["config_id"]) == {"kineto:cpu_only:all"}  # no ProfilerStep: the whole trace
    assert set(df["device"]) == {"cpu"}
    assert set(df["batch"]) == {2} and set(df["input_size"]) == {0}
    assert (df["duration_us"] + df["gap_us"]).sum() == 58.0  # first op start .. last op end


def test_gzip_equals_plain(tmp_path):
    gz = tmp_path / "new_schema.json.gz"
    gz.write_bytes(gzip.compress(NEW.read_bytes()))
    a, b = kineto.load(NEW), kineto.load(gz)
    assert set(b["model"]) == {"new_schema"}
    pd.testing.assert_frame_equal(a.drop(columns="source"), b.drop(columns="source"))
    # detected by content: a gzip file without the .gz suffix loads too
    disguised = tmp_path / "plain_name.json"
    disguised.write_bytes(gz.read_bytes())
    assert len(kineto.load(disguised)) == len(a)


# -- bad input ---------------------------------------------------------------------------------------

def test_truncated_gzip(tmp_path):
    path = tmp_path / "cut.json.gz"
    data = gzip.compress(NEW.read_bytes())
    path.write_bytes(data[: len(data) // 2])
    err = expect_error(lambda: kineto.load(path), path, None, None)
    assert "gzip" in str(err)


def test_truncated_json(tmp_path):
    path = tmp_path / "cut.json"
    text = NEW.read_bytes()
    path.write_bytes(text[: len(text) // 2])
    err = expect_error(lambda: kineto.load(path), path, None, None)
    assert "truncated JSON" in str(err)
    path.write_text("not json at all")
    err = expect_error(lambda: kineto.load(path), path, None, None)
    assert "not valid JSON" in str(err)
    path.write_bytes(b"")
    expect_error(lambda: kineto.load(path), path, None, None)


def test_no_trace_events(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": []}))
    expect_error(lambda: kineto.load(path), path, None, "traceEvents")
    path.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 1}]))
    expect_error(lambda: kineto.load(path), path, None, "traceEvents")


def test_bad_step():
    err = expect_error(lambda: kineto.load(NEW, step=7), NEW, None, "step")
    assert "ProfilerStep#7" in str(err) and "2, 3, 4" in str(err)
    err = expect_error(lambda: kineto.load(NEW, step=4), NEW, None, None)  # exists but is empty
    assert "ProfilerStep#4" in str(err)
    expect_error(lambda: kineto.load(CPU, step=1), CPU, None, "step")  # trace without steps


def test_no_operator_events(tmp_path):
    path = tmp_path / "kernels_only.json"
    events = [e for e in json.loads(NEW.read_text())["traceEvents"] if e.get("cat") != "cpu_op"]
    path.write_text(json.dumps({"traceEvents": events}))
    err = expect_error(lambda: kineto.load(path), path, None, "cat")
    assert "no operator events" in str(err)


@pytest.mark.parametrize("which, what", [("ProfilerStep", "ProfilerStep"), ("", "ProfilerStep")])
def test_events_without_a_process_id_are_named(tmp_path, which, what):
    path = tmp_path / "no_pid.json"
    trace = json.loads(NEW.read_text())
    for event in trace["traceEvents"]:
        if str(event.get("name", "")).startswith(which):
            event.pop("pid", None)
    path.write_text(json.dumps(trace))
    err = expect_error(lambda: kineto.load(path), path, None, "pid")
    assert f"no {what} event carries a process id" in str(err)


@pytest.mark.parametrize("field, value", [("ts", None), ("ts", "soon"), ("dur", -3), ("name", 5)])
def test_bad_event_field(tmp_path, field, value):
    path = tmp_path / "bad.json"
    trace = json.loads(NEW.read_text())
    index = next(i for i, e in enumerate(trace["traceEvents"]) if e.get("name") == "aten::linear")
    if value is None:
        del trace["traceEvents"][index][field]
    else:
        trace["traceEvents"][index][field] = value
    path.write_text(json.dumps(trace))
    expect_error(lambda: kineto.load(path), path, index, field)


def test_bad_input_dims_and_event(tmp_path):
    path = tmp_path / "bad.json"
    trace = json.loads(NEW.read_text())
    index = next(i for i, e in enumerate(trace["traceEvents"]) if e.get("name") == "aten::linear")
    trace["traceEvents"][index]["args"]["Input Dims"] = "[[8, 16], "
    path.write_text(json.dumps(trace))
    expect_error(lambda: kineto.load(path), path, index, "Input Dims")
    trace = json.loads(NEW.read_text())
    trace["traceEvents"].insert(3, "oops")
    path.write_text(json.dumps(trace))
    expect_error(lambda: kineto.load(path), path, 3, None)


def test_helpers():
    assert kineto.op_name("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad") == "AccumulateGrad"
    assert kineto.op_name("autograd::engine::evaluate_function: AddmmBackward0") == "AddmmBackward0"
    assert kineto.op_name("aten::conv2d") == "conv2d" and kineto.op_name("CudnnConvolutionBackward") == \
        "CudnnConvolutionBackward"
    assert kineto.default_model("a/worker0.123.pt.trace.json.gz") == "worker0.123.pt.trace"
    assert kineto.default_model("resnet50.json") == "resnet50"


# -- real traces (../shared/fixtures) ------------------------------------------------------------------

def real(shared_dir: Path, pattern: str) -> Path:
    found = sorted((shared_dir / "fixtures").glob(pattern))
    if not found:
        pytest.skip(f"{shared_dir / 'fixtures' / pattern} not found (see ../shared/fixtures/README.md)")
    return found[0]


def step_device_span(path: Path, step: str) -> dict[str, float]:
    """GPU span of a ProfilerStep computed straight from the JSON: device activities whose launching
    runtime call (by correlation) lies in the step's CPU range, first start to last end."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    window = next(e for e in events if e.get("name") == step and e.get("ph") == "X")
    lo, hi = window["ts"], window["ts"] + window["dur"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") in ("Runtime", "cuda_runtime") and "correlation" in e.get("args", {})}
    out = {}
    for label, cats in (("kernels", {"Kernel", "kernel"}),
                        ("all", {"Kernel", "kernel", "Memcpy", "gpu_memcpy", "Memset", "gpu_memset"})):
        acts = [e for e in events if e.get("cat") in cats
                and lo <= launch.get(e["args"].get("correlation"), -np.inf) < hi]
        out[label] = max(e["ts"] + e["dur"] for e in acts) - min(e["ts"] for e in acts)
        out[f"n_{label}"] = len(acts)
    return out


def test_real_resnet50_old_schema(shared_dir):
    path = real(shared_dir, "kineto_tb_plugin_resnet50/*.json.gz")
    df = kineto.load(path)
    check_schema(df)
    assert set(df["config_id"]) == {"kineto:worker0.1623143089861.pt.trace:10"}  # last of #5..#10
    assert set(df["device"]) == {"Tesla V100-DGXS-32GB"}
    assert set(df["batch"]) == {32} and set(df["input_size"]) == {224}
    assert set(df["dtype"]) == {"float32"}
    by_phase = df.groupby("phase").agg(n=("op", "size"), kernels=("kernels", "sum"))
    assert set(by_phase.index) == {"forward", "backward", "update"}
    assert (by_phase["kernels"] > 0).all()
    assert (df.loc[df["op"] == "conv2d", "kernels"] > 0).all() and (df["op"] == "conv2d").sum() == 53
    assert (df["op"] == "CudnnConvolutionBackward").sum() == 53
    assert set(df.loc[df["op"] == "CudnnConvolutionBackward", "phase"]) == {"backward"}
    assert df["op"].str.contains("::").sum() == 0
    total = float((df["duration_us"] + df["gap_us"]).sum())
    span = step_device_span(path, "ProfilerStep#10")
    print(f"\nresnet50 step 10: {len(df)} ops {by_phase.to_dict()}; sum(duration+gap) {total:.0f} us; "
          f"device span {span}")
    assert int(df["kernels"].sum()) == span["n_all"]  # every device activity of the step is attributed
    assert abs(total - span["kernels"]) <= 0.15 * span["kernels"]
    assert abs(total - span["all"]) <= 0.15 * span["all"]


def test_real_resnet50_other_step(shared_dir):
    path = real(shared_dir, "kineto_tb_plugin_resnet50/*.json.gz")
    df = kineto.load(path, step=5, model="resnet50")
    assert set(df["config_id"]) == {"kineto:resnet50:5"} and set(df["family"]) == {"resnet"}
    assert set(df["phase"]) == {"forward", "backward", "update"}
    assert set(df["batch"]) == {32}


def test_real_amd_minitoy(shared_dir):
    path = real(shared_dir, "hta/amd_minitoy_train/*.json.gz")
    df = kineto.load(path)
    check_schema(df)
    assert set(df["config_id"]) == {"kineto:mi250_minitoy_train_ROCm6_2_kineto:1"}  # #2 is the empty tail
    assert set(df["device"]) == {"AMD Radeon Graphics"}
    assert list(df.groupby("phase", sort=False).size().items()) == [("forward", 9), ("backward", 6), ("update", 1)]
    assert list(df.loc[df["phase"] == "backward", "op"]) == [
        "MseLossBackward0", "ReluBackward0", "AddmmBackward0", "AccumulateGrad", "TBackward0", "AccumulateGrad"]
    assert list(df.loc[df["phase"] == "update", "op"]) == ["_foreach_add_"]
    assert set(df["batch"]) == {5}
    assert int(df["kernels"].sum()) == 16  # 14 kernels + 2 memcpys, all launched inside the step
    assert all(df.groupby("phase")["kernels"].sum() > 0)
    expect_error(lambda: kineto.load(path, step=2), path, None, None)


def test_real_hta_alexnet_forward_only(shared_dir):
    path = real(shared_dir, "hta/critical_path_alexnet/*.json.gz")
    df = kineto.load(path)
    check_schema(df)
    assert set(df["phase"]) == {"forward"}
    assert set(df["config_id"]) == {"kineto:benchmark_result_2869224_1695835535_trace:all"}
    assert set(df["device"]) == {"NVIDIA A100-PG509-200"}
    assert (df["kernels"] > 0).any()
    assert set(df.loc[df["kernels"] > 0, "op"]) >= {"conv2d", "linear", "relu_", "max_pool2d"}


def test_real_file_copied_elsewhere(shared_dir, tmp_path):
    """Loading does not depend on the file's location or suffix (copy under tmp, never into the repo)."""
    src = real(shared_dir, "hta/amd_minitoy_train/*.json.gz")
    dst = tmp_path / "minitoy.trace"
    shutil.copyfile(src, dst)
    df = kineto.load(dst)
    assert set(df["model"]) == {"minitoy.trace"} and len(df) == 16
