"""The host cost of an inference call: fitted by hand on a toy level-1 table, its file checked
field by field, and an eager no_grad forward laid on the timeline with it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.emulator.devices import endtoend, inference_host
from predictor.emulator.devices.specs import prior_params
from predictor.emulator.devices.timing import MIN_KERNEL_US, OpArrays, emulate, kernel_us
from predictor.emulator.zoo.config import ModelConfig


def _level1(device: str, times_us: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"device": device, "measured_us": times_us})


def test_fit_by_hand_floor_minus_shortest_kernel_implausible_hosts_named_median_for_the_rest():
    table = pd.concat([_level1("T4", [30.0] * 99 + [10_000.0]),  # 1st percentile: 30 µs
                       _level1("L40S", [12.0] * 100),
                       _level1("A100-SXM4", [20.0] * 100),
                       _level1("A800", [1_950.0] * 100)])  # a floor no single op call has
    host = inference_host.fit(table)
    assert host.per_gpu == {"A100-SXM4": 20.0 - MIN_KERNEL_US, "L40S": 12.0 - MIN_KERNEL_US,
                            "T4": 30.0 - MIN_KERNEL_US}
    assert "A800" in host.excluded and "1,950 µs" in host.excluded["A800"]
    assert host.default == 18.0 and host.per_op_us("H100") == 18.0 and host.origin("H100").startswith("median")
    assert host.per_op_us("T4") == 28.0 and host.origin("T4") == "measured"
    # leave-one-GPU-out: the T4 priced by the other two hosts' median (18 and 10 µs)
    assert host.per_op_us("T4", without=True) == 14.0
    with pytest.raises(InputError, match="plausible call floor"):
        inference_host.fit(_level1("A800", [1_950.0] * 10))


def test_the_file_round_trips_and_a_broken_one_names_the_field(tmp_path):
    host = inference_host.fit(pd.concat([_level1("T4", [30.0] * 10), _level1("L40S", [12.0] * 10)]), source="toy")
    path = inference_host.save(host, tmp_path / "ih.json")
    assert inference_host.load(path) == host
    body = json.loads(path.read_text())
    body["per_gpu_us"]["T4"] = "fast"
    path.write_text(json.dumps(body))
    with pytest.raises(InputError, match=r"ih.json: field 'per_gpu_us'"):
        inference_host.load(path)
    path.write_text(json.dumps({**body, "format": 99}))
    with pytest.raises(InputError, match="ets devices calibrate"):
        inference_host.load(path)
    path.write_text("{")
    with pytest.raises(InputError, match="ih.json: not JSON"):
        inference_host.load(path)
    assert inference_host.shipped().default > 0  # the package's own file loads


def test_an_inference_forward_pays_the_per_kernel_host_cost_and_nothing_for_views():
    from predictor.emulator.capture.quiet import capture_quietly

    config = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=2, input_size=32, num_classes=10)
    trace = capture_quietly(config)
    trace = trace[trace["phase"] == "forward"].reset_index(drop=True)
    params = prior_params()
    per_op = 1_000.0  # far above any kernel here: the forward is host-bound, kernel after kernel
    out = emulate(trace, "T4", params, noise=False, model=None, inference_host_us=per_op)
    ops = OpArrays.from_trace(trace)
    assert np.array_equal(out["cpu_us"].to_numpy(), np.where(ops.kernels > 0, per_op, 0.0))
    d = kernel_us(ops, params.device("T4"))
    busy = np.flatnonzero(d > 0)
    # host-bound: each kernel starts 1,000 µs after the previous one started, so gap = 1,000 − its kernel time
    assert out["gap_us"].to_numpy()[busy[:-1]] == pytest.approx(per_op - d[busy[:-1]])
    total = endtoend.predicted_seconds(trace, "T4", params, None, ("forward",), allow_tf32=False,
                                       inference_host_us=per_op)
    # the call: the host time before the first kernel, then one host slot per kernel but the last, then the last kernel
    assert total == pytest.approx((per_op * len(busy) + d[busy[-1]]) / 1e6)


def test_only_an_inference_capture_gets_the_inference_host():
    trace = pd.DataFrame({"config_id": ["file:m:inference"]})
    assert inference_host.for_trace(trace, "T4") == inference_host.shipped().per_op_us("T4")
    assert inference_host.for_trace(trace.assign(config_id="file:m:adam"), "T4") is None
