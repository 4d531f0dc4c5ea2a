"""FLOPs and bytes of an operator from its shapes, for forward and backward.

Why our own formulas: torch.profiler estimates FLOPs for a few forward ops only (conv2d, mm,
bmm, add, mul), while ETS features need FLOPs and bytes for every op in both passes.

Conventions (documented so that the numbers can be checked):
* A multiply-add counts 2 FLOPs.
* conv (any dimensionality): forward = 2 * numel(output) * prod(weight.shape[1:]) (+ numel(output)
  with a bias); backward computes grad-input and grad-weight, each as costly as the forward: 2x.
* matmul family (linear, addmm, mm, bmm, matmul, baddbmm): forward = 2 * numel(output) * K (K the
  contracted size; + numel(output) with a bias); backward = 2x forward (grad of both operands).
  ``scaled_dot_product_attention`` (fused attention) is in this family: its two GEMMs plus the
  softmax (:func:`attention_flops`); its fused backward 2x that.
  A captured matmul backward op (:mod:`predictor.emulator.capture.profile`) is instead costed from the
  GEMMs autograd ran for it: FLOPs = sum of 2*M*N*K over them (two, grad-input and grad-weight, so
  2x forward without the bias term; one when only one operand needs a gradient), bytes = the sum
  of their compulsory traffic, and its input_shapes list their operand pairs in execution order,
  ``[[M,K],[K,N],[M2,K2],[K2,N2]]`` (bmm: ``[B,M,K],[B,K,N]``).
* normalisation (batch/layer/group/instance norm): 5 FLOPs per input element forward (mean,
  variance, normalise, scale, shift), 8 backward.
* pooling: numel(output) * kernel elements forward (adaptive: numel(input)); backward numel(input).
* softmax / log_softmax / cross_entropy: 5 per element forward, 4 backward.
* recurrent (class ``lstm``: fused LSTM, GRU and Elman RNN ops): per layer and direction
  2 * G * H * (I_l + H) * B * T for the gate GEMMs (G gates: LSTM 4, GRU 3, RNN 1) + E * H * B * T
  element-wise (E: LSTM 10, GRU 9, RNN 2); backward 2x.
* embedding: 0 FLOPs (a gather).
* other element-wise ops: per output element 1 FLOP, or the op's constant below (gelu 8, ...);
  backward 2 per element.
* bytes = (sum of input numels + sum of output numels) * element size: the compulsory memory
  traffic, the same rule for every op and phase.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence

Shape = Sequence[int]

# Matched against the normalised name: lower case, no "aten::", no underscores, no "backwardN"
# suffix, so "aten::native_batch_norm" and autograd's "NativeBatchNormBackward0" meet.
_CLASSES: tuple[tuple[str, str], ...] = (
    ("lstm", r"lstm|gru|^rnn(tanh|relu)|rnnlayer"),  # every fused recurrent op
    ("conv", r"conv"),
    ("matmul", r"linear|addmm|^mm$|bmm|matmul|^addmv|^mv$|^dot$|scaleddotproduct"),
    ("norm", r"batchnorm|layernorm|groupnorm|instancenorm|nativenorm"),
    ("pool", r"pool"),
    ("softmax", r"softmax|crossentropy|nllloss"),
    ("embedding", r"embedding"),
)
OP_CLASSES: tuple[str, ...] = tuple(c for c, _ in _CLASSES) + ("elementwise",)
GEMM_CLASSES: tuple[str, ...] = ("conv", "matmul", "lstm")  # compute-bound, with a tensor-core path
# Ops that launch no kernel: views, and AccumulateGrad under ``set_to_none`` (it hands the gradient
# over). Their FLOPs and bytes above count the copy they would be; they move nothing.
KERNEL_FREE = re.compile(
    r"^(view|_unsafe_view|reshape|t|transpose|permute|expand|expand_as|slice|select|unsqueeze|squeeze|"
    r"flatten|unflatten|chunk|split|split_with_sizes|unbind|narrow|detach|alias|as_strided|view_as|"
    r"AccumulateGrad|(T|View|UnsafeView|Transpose|Permute|Unsqueeze|Squeeze|ReshapeAlias|Alias|Detach)"
    r"Backward\d*)$")
_ELEMENTWISE_COST = {"gelu": 8, "sigmoid": 4, "tanh": 4, "silu": 5, "hardswish": 4, "hardsigmoid": 3,
                     "elu": 4, "erf": 8, "exp": 4, "log": 4, "sqrt": 2, "rsqrt": 2, "pow": 2, "div": 1}


@functools.lru_cache(maxsize=8192)
def op_class(op: str) -> str:
    """The cost class of an op name ("aten::" prefix and "Backward0" suffix allowed); memoised: a
    catalog has a few hundred distinct names and millions of ops (bounded: names come from files)."""
    name = re.sub(r"backward\d*$", "", op.lower().removeprefix("aten::").replace("_", ""))
    for cls, pattern in _CLASSES:
        if re.search(pattern, name):
            return cls
    return "elementwise"


@functools.lru_cache(maxsize=8192)
def kernel_free(op: str) -> bool:
    """Whether ``op`` launches no kernel (a view; :data:`KERNEL_FREE`)."""
    return bool(KERNEL_FREE.match(op))


def numel(shape: Shape) -> int:
    return math.prod(int(d) for d in shape) if len(shape) else 1


def flops(op: str, inputs: Sequence[Shape], outputs: Sequence[Shape], backward: bool = False,
          **args) -> float:
    """FLOPs of one op. ``inputs``/``outputs`` are the forward op's tensor shapes (for a backward op,
    pass the shapes of the forward op it differentiates). ``args``: ``bias`` (bool), ``kernel_size``
    (pooling), ``hidden_size``, ``num_layers``, ``bidirectional``, ``batch_first`` (recurrent)."""
    cls = op_class(op)
    out = sum(numel(s) for s in outputs)
    inp = numel(inputs[0]) if inputs else 0
    if cls == "conv":
        weight = inputs[1]
        fwd = 2.0 * numel(outputs[0]) * numel(weight[1:]) + (numel(outputs[0]) if args.get("bias") else 0)
        return 2 * fwd if backward else fwd
    if cls == "matmul" and "scaled_dot_product" in op.lower():
        fwd = attention_flops(inputs)
        return 2 * fwd if backward else fwd
    if cls == "matmul":
        contracted = _contracted(op, inputs)
        fwd = 2.0 * numel(outputs[0]) * contracted + (numel(outputs[0]) if args.get("bias") else 0)
        return 2 * fwd if backward else fwd
    if cls == "norm":
        return (8.0 if backward else 5.0) * inp
    if cls == "pool":
        if backward:
            return float(inp)
        if "adaptive" in op.lower():
            return float(inp)
        kernel = args.get("kernel_size", 1)
        k = numel(kernel) if isinstance(kernel, (list, tuple)) else int(kernel) ** max(1, len(inputs[0]) - 2)
        return float(numel(outputs[0]) * k)
    if cls == "softmax":
        return (4.0 if backward else 5.0) * inp
    if cls == "lstm":
        return _recurrent(op, inputs[0], backward, **args)
    if cls == "embedding":
        return 0.0
    base = op.lower().removeprefix("aten::").strip("_").split("_")[0]
    return (2.0 if backward else float(_ELEMENTWISE_COST.get(base, 1))) * out


def attention_flops(inputs: Sequence[Shape]) -> float:
    """``scaled_dot_product_attention(q, k, v)``, q (..., S, d), k and v (..., S_k, d): the two
    GEMMs q·kᵀ and p·v (2 · numel(q) · S_k each) plus a softmax over the scores (5 per score)."""
    q, k = inputs[0], inputs[1]
    scores = numel(q[:-1]) * int(k[-2])
    return 2.0 * 2 * numel(q) * int(k[-2]) + 5.0 * scores


def bytes_moved(inputs: Sequence[Shape], outputs: Sequence[Shape], element_size: int) -> float:
    return float((sum(numel(s) for s in inputs) + sum(numel(s) for s in outputs)) * element_size)


def _contracted(op: str, inputs: Sequence[Shape]) -> int:
    name = op.lower().removeprefix("aten::")
    if name.startswith("linear"):
        return int(inputs[1][-1])  # weight (out_features, in_features)
    if name.startswith(("addmm", "baddbmm", "addmv")):
        return int(inputs[1][-1])  # (bias, a, b): a's last dim
    return int(inputs[0][-1])


# gates and element-wise FLOPs per hidden unit and step of each recurrent cell
_CELLS = {"lstm": (4, 10.0), "gru": (3, 9.0), "rnn": (1, 2.0)}


def _recurrent(op: str, x: Shape, backward: bool, hidden_size: int = 0, num_layers: int = 1,
               bidirectional: bool = False, batch_first: bool = False, **_) -> float:
    if len(x) != 3 or hidden_size <= 0:
        raise ValueError(f"{op} FLOPs need a (T, B, I) input and hidden_size > 0, got {list(x)} and {hidden_size}")
    name = op.lower().removeprefix("aten::").replace("_", "")
    gates, pointwise = _CELLS["gru" if "gru" in name else "rnn" if name.startswith("rnn") and "layer" not in name
                              else "lstm"]
    b, t, i = (x[0], x[1], x[2]) if batch_first else (x[1], x[0], x[2])
    dirs = 2 if bidirectional else 1
    total = 0.0
    for layer in range(num_layers):
        width = i if layer == 0 else hidden_size * dirs
        total += dirs * (2.0 * gates * hidden_size * (width + hidden_size) + pointwise * hidden_size) * b * t
    return 2 * total if backward else total
