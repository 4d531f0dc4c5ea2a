"""Training-iteration ops -> the kernel problems they run, for the learned kernel model.

Why: the real kernel data are forward ops timed alone, while an execution trace also holds
backward and optimizer ops; each is mapped to the forward-like kernels it launches, so one model
of forward kernels prices all three phases. The mapping (documented once, here):

* convolution forward: one implicit GEMM, out = N·K·P·Q, reduction C/g·R·S.
* convolution backward (``ConvolutionBackward``): two kernels of the forward's FLOPs each —
  grad-input (out = input elements, reduction K·R·S/g) and grad-weight (out = weight elements,
  reduction N·P·Q) — as cuDNN runs dgrad and wgrad.
* linear / matmul / bmm forward: one GEMM, out = output elements, reduction = contracted size.
* matmul backward (``AddmmBackward``, ``MmBackward``, ``BmmBackward``, ...): the GEMMs autograd ran
  (grad-input, grad-weight), whose operand pairs the capture records as the op's
  ``input_shapes`` (``[[M,K],[K,N],[M2,K2],[K2,N2]]``, see :mod:`predictor.emulator.capture.profile`); where
  the shapes do not form such pairs (older datasets, imports), two GEMMs of half the op's FLOPs,
  sized from its FLOPs and bytes.
* fused attention (``scaled_dot_product_attention``, q (B, H, S, d), k (B, H, S_k, d)): two batched
  GEMMs (q·kᵀ: out B·H·S·S_k, reduction d; p·v: out B·H·S·d, reduction S_k) and a softmax over the
  scores; its fused backward twice those GEMMs and one softmax.
* norm, softmax, pool, element-wise (forward, backward) and optimizer updates (element-wise over
  the parameters): one memory-bound kernel over the op's largest tensor, reduction = last
  dimension for norm and softmax.
* LSTM and embedding: no real kernel set covers them; they keep the roofline
  (:func:`predictor.emulator.devices.timing.kernel_us`) and are marked so in the validation report.

Output columns: ``row`` (index into the op sequence), ``dtype`` (the op's: an AMP sequence mixes
float16 and float32 ops; :func:`predictor.emulator.devices.kernels.math_of` turns it into the arithmetic
the kernel runs on a given GPU, TF32 included), the problem columns of
:mod:`predictor.emulator.devices.kernel_data` (``cls, flops, bytes, out, red, batches, in_elems, w_elems,
half, training``; ``training`` is always true here: emulation wants the kernels of a training
iteration).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, load_json
from predictor.emulator.capture.costs import op_class

COLUMNS = ("row", "cls", "dtype", "flops", "bytes", "out", "red", "batches", "in_elems", "w_elems", "half", "training")
COVERED = ("conv", "matmul", "elementwise", "norm", "softmax", "pool")
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _numel(shape) -> float:
    return float(math.prod(int(d) for d in shape)) if len(shape) else 1.0


def _gemm(row: int, cls: str, flops: float, nbytes: float, out: float, in_elems: float, w_elems: float,
          batches: float = 1.0) -> dict:
    out = max(out, 1.0)
    return {"row": row, "cls": cls, "flops": flops, "bytes": nbytes, "out": out, "red": max(flops / (2 * out), 1.0),
            "batches": batches, "in_elems": in_elems, "w_elems": w_elems}


def backward_pair(row: int, cls: str, fwd_flops: float, nbytes: float, in_elems: float, w_elems: float,
                  batches: float = 1.0) -> list[dict]:
    """The grad-input and grad-weight kernels of one GEMM-like op (see the module docstring)."""
    return [_gemm(row, cls, fwd_flops, nbytes, in_elems, in_elems, w_elems, batches),
            _gemm(row, cls, fwd_flops, nbytes, w_elems, in_elems, w_elems, batches)]


def backward_conv_problems(rows: pd.DataFrame) -> pd.DataFrame:
    """Backward-convolution rows given as their forward problems -> their two kernels."""
    out = []
    for i, r in enumerate(rows.itertuples()):
        out += backward_pair(i, r.cls, r.flops, r.bytes, r.in_elems, r.w_elems)
    half = np.repeat(rows["half"].to_numpy(bool), 2)
    return pd.DataFrame(out).assign(dtype=np.where(half, "float16", "float32"), half=half,
                                    training=np.repeat(rows["training"].to_numpy(bool), 2))


def _shapes(text: str) -> list[list[int]]:
    try:
        value = load_json(text, "input_shapes") if text else []
    except InputError:
        raise  # nested past the depth limit: refused, not read as "no shapes"
    except ValueError:
        return []
    return [s for s in value if isinstance(s, list)] if isinstance(value, list) else []


def op_problems(i: int, op: str, phase: str, shapes: list[list[int]], flops: float, nbytes: float,
                element: int) -> list[dict]:
    """The kernel problems of one op (empty for ops the model does not cover)."""
    cls = op_class(op)
    if cls not in COVERED or (flops <= 0 and nbytes <= 0):
        return []
    backward = phase == "backward"
    if cls == "conv":
        if backward and len(shapes) >= 3:  # (grad_out, input, weight)
            grad_out, x, w = shapes[0], shapes[1], shapes[2]
            red = _numel(w[1:])
            return backward_pair(i, cls, 2 * _numel(grad_out) * red, nbytes / 2, _numel(x), _numel(w))
        if not backward and len(shapes) >= 2:
            x, w = shapes[0], shapes[1]
            red = _numel(w[1:])
            return [_gemm(i, cls, flops, nbytes, flops / (2 * red), _numel(x), _numel(w))]
    if cls == "matmul" and "scaled_dot_product" in op.lower():
        return _attention(i, shapes, element, backward) if len(shapes) >= 2 and len(shapes[0]) >= 2 else []
    if cls == "matmul":
        batches = float(shapes[0][0]) if shapes and len(shapes[0]) == 3 and "bmm" in op.lower() else 1.0
        if not backward:
            red = _contracted(op, shapes)
            out = flops / (2 * red) if red else nbytes / element / 3
            x = _numel(shapes[0]) if shapes else out
            w = _numel(shapes[1]) if len(shapes) > 1 else out
            return [_gemm(i, cls, flops, nbytes, out, x, w, batches)]
        pairs = _gemm_pairs(shapes)
        if pairs:
            return [_gemm(i, cls, 2 * _numel(a[:-1]) * b[-1] * a[-1],
                          element * (_numel(a) + _numel(b) + _numel(a[:-1]) * b[-1]),
                          _numel(a[:-1]) * b[-1], _numel(a), _numel(b), float(a[0]) if len(a) == 3 else 1.0)
                    for a, b in pairs]
        side = max(nbytes / element / 3, 1.0)  # operands unknown: two GEMMs of equal-sized tensors
        return backward_pair(i, cls, flops / 2, nbytes / 2, side, side, batches)
    largest = max((_numel(s) for s in shapes), default=nbytes / element / 2)
    red = float(shapes[0][-1]) if cls in ("norm", "softmax") and shapes and shapes[0] else 1.0
    return [{"row": i, "cls": cls, "flops": flops, "bytes": nbytes, "out": max(largest, 1.0), "red": red,
             "batches": 1.0, "in_elems": 0.0, "w_elems": 0.0}]


def _attention(i: int, shapes: list[list[int]], element: int, backward: bool) -> list[dict]:
    q, k = shapes[0], shapes[1]
    heads, s, d, sk = _numel(q[:-2]), float(q[-2]), float(q[-1]), float(k[-2])
    scores = heads * s * sk
    qk = _gemm(i, "matmul", 2 * scores * d, element * (heads * (s + sk) * d + scores), scores, heads * s * d,
               heads * sk * d, heads)
    pv = _gemm(i, "matmul", 2 * heads * s * d * sk, element * (scores + heads * sk * d + heads * s * d), heads * s * d,
               scores, heads * sk * d, heads)
    soft = {"row": i, "cls": "softmax", "flops": 5 * scores, "bytes": element * 2 * scores, "out": scores, "red": sk,
            "batches": 1.0, "in_elems": 0.0, "w_elems": 0.0}
    return [qk, pv, dict(qk), dict(pv), soft] if backward else [qk, pv, soft]


def _gemm_pairs(shapes: list[list[int]]) -> list[tuple[list[int], list[int]]]:
    """Consecutive (A, B) operand pairs that contract (A[-1] == B[-2]); empty unless all do."""
    if not shapes or len(shapes) % 2:
        return []
    pairs = list(zip(shapes[::2], shapes[1::2]))
    ok = all(len(a) >= 2 and len(a) == len(b) and a[-1] == b[-2] and a[:-2] == b[:-2] for a, b in pairs)
    return pairs if ok else []


def _contracted(op: str, shapes: list[list[int]]) -> float:
    name = op.lower()
    if not shapes or not shapes[0]:
        return 0.0
    if name.startswith("linear") and len(shapes) > 1 and shapes[1]:
        return float(shapes[1][-1])
    if name.startswith(("addmm", "baddbmm", "addmv")) and len(shapes) > 1 and shapes[1]:
        return float(shapes[1][-1])
    return float(shapes[0][-1])


def trace_problems(trace: pd.DataFrame, kernel_free: np.ndarray) -> pd.DataFrame:
    """Every kernel problem of an op sequence; ops in ``kernel_free`` (bool per row) have none."""
    if "input_shapes" not in trace.columns:
        trace = trace.assign(input_shapes="[]")
    dtypes = trace["dtype"].astype(str).to_numpy(dtype=object)  # per op: AMP mixes float16 and float32
    rows: list[dict] = []
    parsed: dict[str, list[list[int]]] = {}  # a layer's shapes recur through a sequence: parse each text once
    for i, (op, phase, shapes, flops, nbytes) in enumerate(zip(
            trace["op"], trace["phase"], trace["input_shapes"], trace["flops"], trace["bytes"])):
        if not kernel_free[i]:
            text = str(shapes)
            if text not in parsed:
                parsed[text] = _shapes(text)
            rows += op_problems(i, str(op), str(phase), parsed[text], float(flops), float(nbytes),
                                ELEMENT_BYTES.get(dtypes[i], 4))
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.DataFrame(rows)
    dtype = dtypes[out["row"].to_numpy(int)]
    return out.assign(dtype=dtype, half=np.isin(dtype, ("float16", "bfloat16")), training=True)[list(COLUMNS)]
