"""Automatic mixed precision (``torch.autocast`` + ``GradScaler``) applied to a float32 op sequence.

Why: the meta device has no autocast (autocast keys on CUDA and CPU tensors), yet AMP is how most
GPU training runs, and it is not "the model in float16": autocast runs matmuls and convolutions
in float16, keeps norms, softmax, reductions and losses in float32, casts the float32 weights to
float16 on every forward, and the optimizer updates float32 master weights after an unscale pass.
This module rewrites the float32 capture of a config into that op sequence, following PyTorch's
CUDA autocast op lists (https://pytorch.org/docs/stable/amp.html#autocast-op-reference):

* **float16 ops** (GEMM-like: convolutions, linear, matmul/mm/bmm/addmm/baddbmm, attention, RNNs,
  prelu): the row becomes float16 (bytes halved). Every float32 operand is cast first: a
  ``_to_copy`` row per weight (read 4 + write 2 bytes per element), and one for the activation
  when the running activation is float32 (after a norm, softmax or embedding).
* **float32 ops** (softmax, log_softmax, layer/group norm, losses, exp/log/pow, sum, cumsum, ...):
  stay float32; a float16 activation is cast up first (a ``_to_copy`` row).
* **everything else** (element-wise, activations, batch norm, pooling, dropout, views, cat) runs
  in the dtype of its input: the running activation's.
* backward: GEMM-like backward nodes run in float16, the backward of float32-list ops in float32,
  the others in the running gradient's dtype; each weight cast's backward (``ToCopyBackward0``,
  the float16 weight gradient back to float32) follows the GEMM backward that produced it.
* update: float32 master weights, as before, preceded by GradScaler's unscale-and-check pass over
  every gradient (``_amp_foreach_non_finite_check_and_unscale_``) and its scale update.

Each rewritten row keeps its FLOPs; bytes scale with the element size.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from predictor.emulator.capture.costs import op_class

FP16_CLASSES = ("conv", "matmul", "lstm")
FP16_OPS = re.compile(r"^(prelu|rnn_tanh|rnn_relu|gru|lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell)$")
FP32_OPS = re.compile(
    r"^(softmax|_softmax|log_softmax|_log_softmax|layer_norm|native_layer_norm|group_norm|native_group_norm|"
    r"rms_norm|norm|cross_entropy_loss|nll_loss|nll_loss2d|nll_loss_nd|mse_loss|l1_loss|smooth_l1_loss|huber_loss|"
    r"binary_cross_entropy_with_logits|kl_div|exp|expm1|log|log2|log10|log1p|pow|reciprocal|rsqrt|sum|prod|"
    r"cumsum|cumprod|logsumexp|softplus|cosine_similarity|dist|cdist|renorm|acos|asin|cosh|sinh|tan|erfinv)$")
FP32_BACKWARD = re.compile(
    r"^(Softmax|LogSoftmax|NativeLayerNorm|NativeGroupNorm|NllLoss|NllLoss2D|MseLoss|L1Loss|SmoothL1Loss|HuberLoss|"
    r"BinaryCrossEntropyWithLogits|KlDiv|Exp|Log|Pow|Reciprocal|Rsqrt|Sum|Prod|Cumsum|Cumprod|Logsumexp|Softplus|"
    r"Norm)Backward\d*$")
EMBEDDING = re.compile(r"^embedding$")
CAST = "_to_copy"
CAST_BACKWARD = "ToCopyBackward0"
UNSCALE = "_amp_foreach_non_finite_check_and_unscale_"
UPDATE_SCALE = "_amp_update_scale_"


def _shapes(text: str) -> list[list[int]]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return [s for s in value if isinstance(s, list)] if isinstance(value, list) else []


def _numel(shape: list[int]) -> float:
    return float(math.prod(shape)) if shape else 1.0


def _is_fp16_op(op: str) -> bool:
    return op_class(op) in FP16_CLASSES or bool(FP16_OPS.match(op))


def _weights(op: str, shapes: list[list[int]]) -> list[list[int]]:
    """The float32 parameters a GEMM-like op reads (cast to float16 by autocast)."""
    if op_class(op) == "conv" or op.startswith(("linear", "prelu", "lstm", "gru", "rnn")):
        return [s for s in shapes[1:] if s]
    if op.startswith(("addmm", "addmv", "baddbmm")):  # bias first, then the two operands
        return [shapes[0]] if shapes and shapes[0] else []
    return []


def _cast(template: dict, shape: list[int], src: int, dst: int, name: str = CAST, phase: str | None = None) -> dict:
    elems = _numel(shape)
    return template | {"op": name, "phase": phase or template["phase"], "input_shapes": json.dumps([shape]),
                       "params": [], "flops": 0.0, "bytes": elems * (src + dst),
                       "dtype": "float16" if dst == 2 else "float32"}


def autocast_trace(trace: pd.DataFrame) -> pd.DataFrame:
    """The AMP iteration of a float32 op sequence (one config); see the module docstring."""
    if set(trace["dtype"].unique()) != {"float32"}:
        raise ValueError("AMP rewrites a float32 op sequence; got dtypes "
                         + ", ".join(map(str, trace["dtype"].unique())))
    rows = trace.sort_values("idx").to_dict("records")
    out: list[dict] = []
    activation = "float32"
    weight_casts: list[list[list[int]]] = []  # per float16 forward op, the weights it cast (a stack)
    grad = "float32"
    params = 0.0
    unscaled = False
    for row in rows:
        op, phase = str(row["op"]), str(row["phase"])
        shapes = _shapes(str(row["input_shapes"]))
        if phase == "forward":
            if _is_fp16_op(op):
                weights = _weights(op, shapes)
                for w in weights:
                    out.append(_cast(row, w, 4, 2))
                weight_casts.append(weights)
                if activation == "float32" and shapes and shapes[0]:
                    out.append(_cast(row, shapes[0], 4, 2))
                out.append(row | {"dtype": "float16", "bytes": float(row["bytes"]) / 2})
                activation = "float16"
            elif FP32_OPS.match(op):
                if activation == "float16" and shapes and shapes[0]:
                    out.append(_cast(row, shapes[0], 2, 4))
                out.append(dict(row))
                activation = "float32"
            elif EMBEDDING.match(op):
                out.append(dict(row))
                activation = "float32"
            else:
                out.append(row | {"dtype": activation,
                                  "bytes": float(row["bytes"]) / (2 if activation == "float16" else 1)})
        elif phase == "backward":
            if op == "AccumulateGrad" and shapes:
                params += _numel(shapes[0])
            if _is_fp16_op(op):
                out.append(row | {"dtype": "float16", "bytes": float(row["bytes"]) / 2})
                grad = "float16"
                # backward visits the GEMM-like ops in reverse: this node's weight gradients back to float32
                for w in weight_casts.pop() if weight_casts else []:
                    out.append(_cast(row, w, 2, 4, CAST_BACKWARD))
            elif FP32_BACKWARD.match(op):
                out.append(dict(row))
                grad = "float32"
            else:
                half = grad == "float16" and op != "AccumulateGrad"
                out.append(row | {"dtype": "float16" if half else "float32",
                                  "bytes": float(row["bytes"]) / (2 if half else 1)})
        else:
            if not unscaled:
                first = dict(row)
                out.append(first | {"op": UNSCALE, "input_shapes": json.dumps([[int(params)]]), "params": [],
                                    "flops": params, "bytes": 8.0 * params, "dtype": "float32"})
                out.append(first | {"op": UPDATE_SCALE, "input_shapes": "[[1]]", "params": [], "flops": 1.0,
                                    "bytes": 16.0, "dtype": "float32"})
                unscaled = True
            out.append(dict(row))
    result = pd.DataFrame(out, columns=trace.columns)
    result["idx"] = np.arange(len(result))
    return result
