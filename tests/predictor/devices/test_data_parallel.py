"""The data-parallel step (predictor/emulator/devices/data_parallel.py): DDP's bucket packing against hand
cases and torch's own assignment, the overlap of all-reduces with backward by hand, N = 1, and a
spread placement against a packed one."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from predictor.common import gpus
from predictor.emulator.devices.collectives import CollectiveError, CommParams, Link, Network, Protocol
from predictor.emulator.devices.data_parallel import (
    BUCKET_CAP_BYTES,
    FIRST_BUCKET_CAP_BYTES,
    Gradient,
    data_parallel_step,
    gradient_buckets,
    pack_buckets,
)

MiB = 1024 * 1024


def test_the_caps_are_torchs():
    torch = pytest.importorskip("torch")
    from torch.nn.parallel import distributed

    assert BUCKET_CAP_BYTES == distributed._DEFAULT_BUCKET_CAP_MB * distributed._MB_TO_BYTES == 25 * MiB
    assert FIRST_BUCKET_CAP_BYTES == torch.distributed._DEFAULT_FIRST_BUCKET_BYTES == MiB


def test_bucket_packing_by_hand():
    # First bucket capped at 1 MiB: 0.6 MB + 0.6 MB crosses it and closes it (the crossing gradient
    # stays in). Then 25 MiB buckets: 10 MB + 20 MB crosses 26.2 MB; the last 1 MB stays open.
    grads = [Gradient(n, "float32") for n in (600_000, 600_000, 10_000_000, 20_000_000, 1_000_000)]
    assert pack_buckets(grads) == [1_200_000, 30_000_000, 1_000_000]
    # A gradient alone at the cap fills its bucket; one byte under does not.
    assert pack_buckets([Gradient(MiB, "float32"), Gradient(1, "float32")]) == [MiB, 1]
    assert pack_buckets([Gradient(MiB - 1, "float32"), Gradient(1, "float32")]) == [MiB]
    assert pack_buckets([]) == []


@pytest.mark.parametrize("sizes, dtypes", [
    ((600_000, 600_000, 10_000_000, 20_000_000, 1_000_000), ("float32",) * 5),
    ((600_000, 2_000_000, 600_000, 100, 600_000), ("float16", "float32", "float16", "float32", "float16")),
    ((30_000_000, 4, 26_214_396, 8, 50_000_000, 12), ("float32",) * 6),
])
def test_bucket_packing_matches_torch(sizes, dtypes):
    torch = pytest.importorskip("torch")
    types = {"float32": torch.float32, "float16": torch.float16}
    tensors = [torch.empty(n // (4 if d == "float32" else 2), dtype=types[d]) for n, d in zip(sizes, dtypes)]
    indices = list(range(len(sizes)))
    buckets, _ = torch.distributed._compute_bucket_assignment_by_size(
        tensors, [FIRST_BUCKET_CAP_BYTES, BUCKET_CAP_BYTES], [False] * len(sizes), indices)
    expected = [sum(sizes[i] for i in bucket) for bucket in buckets]
    assert pack_buckets([Gradient(n, d) for n, d in zip(sizes, dtypes)]) == expected


def test_gradient_buckets_read_the_accumulate_grad_ops_in_backward_order():
    rows = pd.DataFrame({
        "config_id": ["m:b1"] * 5, "idx": [4, 1, 3, 0, 2],
        "op": ["AccumulateGrad", "AccumulateGrad", "Mm", "Addmm", "AccumulateGrad"],
        "input_shapes": ["[[512,1024]]", "[[100]]", "[[9,9],[9,9]]", "[[1]]", "[[3]]"],
        "dtype": ["float32", "float32", "float32", "float32", "float16"],
    })
    # backward order: idx 1 (400 B, f32), idx 2 (6 B, f16), idx 4 (2 MiB, f32): the f32 bucket
    # closes at 2 MiB + 400 B (≥ 1 MiB); the f16 one stays open.
    assert gradient_buckets(rows) == [400 + 2 * MiB, 6]
    with pytest.raises(CollectiveError, match="one config"):
        gradient_buckets(pd.concat([rows, rows.assign(config_id="other")]))


def toy_params() -> CommParams:
    free = Protocol(0.0, 1.0)  # no fixed cost, full bandwidth: t = 2(N−1)/N · bytes / B
    links = {"nvlink": Link(0.0, 1.0), "pcie": Link(0.0, 1.0), "pcie_host": Link(0.0, 1.0)}
    return CommParams({"ll": free, "simple": free}, links, Network(0.0, 5e9, 2), {})


def toy_gpu() -> gpus.GpuEntry:
    link = gpus.Interconnect(4, 16, 100.0, "all", True, "test")  # 100 GB/s NVLink per direction
    return dataclasses.replace(gpus.entry("A100-SXM4"), interconnect=link)


def test_overlap_of_two_buckets_by_hand():
    # N = 2 on one board: t = 2·1/2 · bytes / 100 GB/s, so 1e8 B → 1 ms, 3e8 B → 3 ms.
    # Backward 8 ms produces the bytes evenly: bucket 1 (¼ of the bytes) ready at 2 ms, runs to
    # 3 ms; bucket 2 ready at 8 ms (backward's end), runs to 11 ms. Step = 2 ms (forward + update)
    # + max(8, 11) = 13 ms; compute 10 ms; exposed 3 ms; all-reduce 4 ms.
    r = data_parallel_step(8e-3, 2e-3, [1e8, 3e8], 2, 2, toy_gpu(), toy_params())
    assert r["total_ms"] == pytest.approx(13.0, abs=1e-9)
    assert r["compute_ms"] == pytest.approx(10.0, abs=1e-9)
    assert r["allreduce_ms"] == pytest.approx(4.0, abs=1e-9)
    assert r["communication_ms"] == pytest.approx(3.0, abs=1e-9)
    assert r["scaling_efficiency"] == pytest.approx(10 / 13)
    assert (r["gpus"], r["nodes"], r["link"], r["buckets"]) == (2, 1, "nvlink", 2)
    # Reversed: bucket 1 (3 ms) ready at 6 ms, ends at 9; bucket 2 ready at 8 ms waits for the
    # stream until 9, ends at 10: step 12 ms, 2 ms exposed.
    r = data_parallel_step(8e-3, 2e-3, [3e8, 1e8], 2, 2, toy_gpu(), toy_params())
    assert (r["total_ms"], r["communication_ms"]) == pytest.approx((12.0, 2.0), abs=1e-9)


def test_one_gpu_is_its_compute():
    r = data_parallel_step(8e-3, 2e-3, [1e8, 3e8], 1, 1, toy_gpu())
    assert r["total_ms"] == r["compute_ms"] == pytest.approx(10.0)
    assert (r["allreduce_ms"], r["communication_ms"], r["scaling_efficiency"], r["link"]) == (0.0, 0.0, 1.0, "none")


def test_two_nodes_are_slower_than_one_for_a_communication_heavy_config():
    # A 100 M-parameter float32 model (400 MB of gradients) with a short backward.
    rows = pd.DataFrame({"config_id": ["big"] * 100, "idx": range(100), "op": ["AccumulateGrad"] * 100,
                         "input_shapes": ["[[1000,1000]]"] * 100, "dtype": ["float32"] * 100})
    buckets = gradient_buckets(rows)
    # 4 MB alone passes the 1 MiB first cap; then 7 × 4 MB = 28 MB per 25 MiB bucket, 14 of them;
    # the last 4 MB stays open.
    assert buckets == [4_000_000] + [28_000_000] * 14 + [4_000_000]
    packed = data_parallel_step(0.04, 0.02, buckets, 8, 8, "emulated:A100-SXM4")
    spread = data_parallel_step(0.04, 0.02, buckets, 8, 4, "A100-SXM4")
    assert spread["nodes"] == 2 and packed["nodes"] == 1 and spread["link"] == "network"
    assert spread["total_ms"] > packed["total_ms"] > packed["compute_ms"] == spread["compute_ms"]
    assert spread["scaling_efficiency"] < packed["scaling_efficiency"] < 1.0
    one = [data_parallel_step(0.04, 0.02, buckets, 1, 1, g) for g in ("A100-SXM4", "T4")]
    assert one[0]["total_ms"] == one[1]["total_ms"] == pytest.approx(60.0)


@pytest.mark.parametrize("gpus_, per_node, match", [(0, 1, "gpus"), (4, 3, "per_node 3"), (2, 4, "per_node 4")])
def test_bad_placements_name_the_value(gpus_, per_node, match):
    with pytest.raises(CollectiveError, match=match):
        data_parallel_step(0.01, 0.01, [1e6], gpus_, per_node, toy_gpu())


def test_bad_times_name_the_value():
    with pytest.raises(CollectiveError, match="compute_backward_s"):
        data_parallel_step(-1.0, 0.01, [1e6], 2, 2, toy_gpu())
