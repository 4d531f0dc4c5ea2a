"""One data-parallel (DDP) training step on N GPUs: per-GPU compute plus the gradient all-reduces
that backward does not hide.

Why: a job on N GPUs synchronises its gradients every step; how much of that shows in the step
depends on the gradients' sizes, on how PyTorch's DDP packs them into buckets and on where the GPUs
sit (:mod:`predictor.emulator.devices.collectives` prices one all-reduce on a placement). This module is the
composition, method-agnostic: it takes a per-GPU compute time from whichever method (emulator,
ETS, a baseline) and adds communication from the config's own gradients.

* :func:`gradient_buckets` — the config's gradients (its captured ``AccumulateGrad`` ops, in the
  order backward produces them) packed as DDP packs them once it has rebuilt its buckets after
  the first iteration (``Reducer::rebuild_buckets``: gradients in the order they became ready;
  ``torch/nn/parallel/distributed.py``: ``_DEFAULT_BUCKET_CAP_MB = 25``, ``_MB_TO_BYTES = 1024 *
  1024``, and the first bucket capped at ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB when the cap
  is the default). A bucket takes gradients until its size reaches its cap (the gradient that
  crosses the cap stays in it: ``_compute_bucket_assignment_by_size``); gradients of different
  element types go to separate buckets, as DDP keys buckets by dtype.
  Element size: the ``AccumulateGrad`` op's recorded dtype, i.e. the parameter's. Under AMP the
  master weights, hence their gradients and what DDP all-reduces, are float32 (fp16 would need a
  compression hook, which DDP does not register by default); float16 / bfloat16 configs: 2 bytes.
* :func:`data_parallel_step` — forward + max(backward end, last all-reduce end) + update. Bucket
  i is ready when backward has produced its last gradient, taken **in proportion to the
  cumulative gradient bytes** (backward produces the gradients evenly over its time by bytes; the
  last bucket, the first layers', is ready exactly when backward ends). All-reduces run one after
  another on one stream: start_i = max(ready_i, end_{i−1}). N = 1: no communication.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.gpus import GpuEntry
from predictor.common.op_trace import ELEMENT_BYTES, first_input_elements
from predictor.emulator.devices.collectives import (
    CollectiveError,
    CommParams,
    Placement,
    allreduce,
    shipped_params,
)

BUCKET_CAP_BYTES = 25 * 1024 * 1024  # DDP's _DEFAULT_BUCKET_CAP_MB × _MB_TO_BYTES
FIRST_BUCKET_CAP_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (1 MiB)


@dataclass(frozen=True)
class Gradient:
    """One parameter's gradient: bytes and element type, in the order backward produces it."""

    nbytes: int
    dtype: str


def gradients(rows: pd.DataFrame) -> list[Gradient]:
    """The gradients of one config's op sequence, in the order of its ``AccumulateGrad`` ops (the
    order backward produces them); a gradient whose shape the capture did not record is left out."""
    if rows["config_id"].nunique() > 1:
        raise CollectiveError(f"gradient_buckets takes one config's rows, got {rows['config_id'].nunique()} configs")
    grads = rows[rows["op"] == "AccumulateGrad"].sort_values("idx")
    out = []
    for shapes, dtype in zip(grads["input_shapes"], grads["dtype"].astype(str)):
        elements = first_input_elements(shapes if isinstance(shapes, str) else str(shapes))
        if elements > 0:
            out.append(Gradient(int(elements) * ELEMENT_BYTES.get(dtype, 4), dtype))
    return out


def pack_buckets(grads: list[Gradient], cap: int = BUCKET_CAP_BYTES,
                 first_cap: int = FIRST_BUCKET_CAP_BYTES) -> list[int]:
    """Bucket sizes (bytes) in the order their all-reduces start: DDP's assignment by size over
    ``grads`` in order. Each element type has its own open bucket; the first bucket closed of a
    type takes ``first_cap``, later ones ``cap``; a bucket closes once its size reaches its cap.
    Buckets come in the order they close, then the still-open ones by their first gradient, as
    the rebuild's ``_compute_bucket_assignment_by_size`` (given the tensors' indices) returns them."""
    open_: dict[str, tuple[int, int]] = {}  # dtype -> (first gradient's position, bytes)
    closed_count: dict[str, int] = {}
    done: list[tuple[int, int]] = []
    for position, grad in enumerate(grads):
        start, size = open_.get(grad.dtype, (position, 0))
        size += grad.nbytes
        limit = first_cap if closed_count.get(grad.dtype, 0) == 0 else cap
        if size >= limit:
            done.append((start, size))
            closed_count[grad.dtype] = closed_count.get(grad.dtype, 0) + 1
            open_.pop(grad.dtype, None)
        else:
            open_[grad.dtype] = (start, size)
    return [size for _, size in done] + [size for _, size in sorted(open_.values())]


def gradient_buckets(rows: pd.DataFrame) -> list[int]:
    """DDP's buckets (bytes, in the order their all-reduces start) of one config's op sequence."""
    return pack_buckets(gradients(rows))


def overlapped_step(backward_s: float, other_s: float, bucket_bytes, bucket_seconds) -> float:
    """Seconds of one step whose buckets (bytes, in the order their all-reduces start) take
    ``bucket_seconds`` each: bucket i is ready when backward has produced that share of the
    gradient bytes, all-reduces run one after another, and the step ends with the update after
    both backward and the last all-reduce: other + max(backward, last all-reduce's end)."""
    total = float(sum(bucket_bytes))
    cumulative = end = 0.0
    for size, seconds in zip(bucket_bytes, bucket_seconds):
        cumulative += size
        ready = backward_s * (cumulative / total if total > 0 else 1.0)
        end = max(ready, end) + seconds
    return other_s + max(backward_s, end)


def data_parallel_step(compute_backward_s: float, compute_other_s: float, buckets: list[int] | list[float],
                       gpus: int, per_node: int, device: GpuEntry | str,
                       params: CommParams | None = None) -> dict:
    """One DDP step at a per-GPU batch: ``compute_backward_s`` (backward) and ``compute_other_s``
    (forward + optimizer update) from any method, ``buckets`` from :func:`gradient_buckets`.

    Returns ms: ``compute_ms`` (backward + other), ``allreduce_ms`` (Σ all-reduce times),
    ``communication_ms`` (the exposed part: total − compute), ``total_ms``, and
    ``scaling_efficiency`` (the single-GPU step ÷ this step), ``gpus``, ``per_node``, ``nodes``,
    ``link`` (the placement's bottleneck), ``buckets``, ``label`` (spec-derived communication)."""
    for name, value in (("compute_backward_s", compute_backward_s), ("compute_other_s", compute_other_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not np.isfinite(value) or value < 0:
            raise CollectiveError(f"{name} must be a finite number ≥ 0, got {value!r}")
    placement = Placement(gpus, per_node)
    if isinstance(device, str):
        from predictor.common.gpus import entry
        from predictor.emulator.devices.specs import device_key

        device = entry(device_key(device))
    sizes = [float(b) for b in buckets]
    if any(not np.isfinite(b) or b < 0 for b in sizes):
        raise CollectiveError(f"bucket sizes must be finite numbers ≥ 0, got {buckets!r}")
    compute_s = float(compute_backward_s) + float(compute_other_s)
    allreduce_s, total_s, link = 0.0, compute_s, "none"
    if placement.gpus > 1 and sizes:
        params = params or shipped_params()
        seconds = [allreduce(size, placement, device, params)["seconds"] for size in sizes]
        link = allreduce(sizes[-1], placement, device, params)["link"]
        total_s = overlapped_step(float(compute_backward_s), float(compute_other_s), sizes, seconds)
        allreduce_s = float(sum(seconds))
    return {"compute_ms": compute_s * 1e3, "allreduce_ms": allreduce_s * 1e3,
            "communication_ms": (total_s - compute_s) * 1e3, "total_ms": total_s * 1e3,
            "scaling_efficiency": compute_s / total_s if total_s > 0 else 1.0,
            "gpus": placement.gpus, "per_node": placement.per_node, "nodes": placement.nodes, "link": link,
            "buckets": len(sizes), "label": "spec-derived"}
