"""The computation graph of one training iteration, rebuilt from its execution trace.

Why: DNNPerf (predictors.md §3) reads a model as a DAG of ops joined by the tensors they
exchange. Our traces keep the op order and each op's input shapes but no tensor identities (the
ETS CSV import not even the shapes), so the data dependencies are reconstructed from shapes and
order with the rules below. They are heuristics — two tensors of one shape cannot be told
apart — but they are deterministic, cost O(ops) dictionary lookups, and every edge goes from an
earlier op to a later one, so the graph is a DAG in execution order.

Rules (a "shape" is a tuple of ints; empty shapes and missing shapes are ignored):

* **Forward ops** produce one output whose shape comes from :func:`forward_output_shape`: the
  profiler's :func:`predictor.emulator.capture.profile.output_shape` for convolutions, pooling and matrix
  products (their arguments are read back from ``params``, which holds the flattened input
  shapes followed by the integer arguments), shape algebra for views (view, reshape, flatten,
  transpose, permute, (un)squeeze, select, expand, unflatten, t), else the largest input (exact
  for element-wise and broadcasting ops). Each input shape ``s`` of a forward op is taken from
  the most recent earlier forward op with output ``s`` whose output no op has consumed yet, else
  from the most recent one (a tensor read twice, e.g. the source of a skip connection). Several
  inputs of one shape take distinct producers, so a residual ``add`` links to both branches.
  Kind ``data``.
* **Backward ops** consume the gradient of their first input shape ``s0`` and produce gradients
  shaped like their other inputs (the tensors the forward op saved; ``s0`` itself when there are
  none). ``s0`` is taken from earlier
  backward ops by the forward rule (kind ``data``). Because backward runs the forward in reverse,
  each non-``AccumulateGrad`` backward op also links to the most recent not yet matched forward
  op with output ``s0`` (a stack per shape; kind ``forward_backward``: the saved activations).
* **AccumulateGrad** takes its parameter's gradient from the latest backward producer of that
  shape and is pushed on a per-shape stack of finished gradients.
* **Update ops** come in runs per parameter (e.g. SGD's ``mul_, add_, add_``): a run starts at the
  first update op, when the first input shape changes, when the run's first op name repeats, or
  after an op without shapes.
  The first op of a run pops the gradient of its shape (the optimizer walks the parameters in
  forward order, autograd finished them in reverse: a stack matches them; kind ``grad_update``);
  the others follow the previous op of their run (kind ``data``).
* **Fallback**: an op (other than the first) that got no edge is linked to the op before it (kind
  ``sequential``), so every op is reachable from op 0 — on shape-less traces (ETS CSV) the graph is
  the op chain.

Each edge carries the bytes of the tensor on it (elements × the consumer's dtype size; for a
sequential edge the consumer's first input, 0 when unknown).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.emulator.capture.profile import output_shape

EDGE_KINDS = ("data", "sequential", "forward_backward", "grad_update")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
Shape = tuple[int, ...]

_CONVS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution"})
_POOLS = frozenset({"max_pool2d", "avg_pool2d", "max_pool2d_with_indices"})
_PRODUCTS = frozenset({"linear", "addmm", "mm", "matmul", "bmm", "baddbmm"})
_SIZED_VIEWS = frozenset({"view", "reshape", "_unsafe_view"})
_KIND = {name: i for i, name in enumerate(EDGE_KINDS)}


@dataclass
class TraceGraph:
    """Edges of one trace's computation graph; node i is the trace's i-th op in idx order."""

    num_nodes: int
    edge_index: np.ndarray  # [2, E] int64 (source, target), source < target
    edge_kind: np.ndarray  # [E] int64 index into EDGE_KINDS
    edge_bytes: np.ndarray  # [E] float64 bytes of the tensor on the edge (0: unknown)


def edge_features(graph: TraceGraph) -> np.ndarray:
    """[E, 1 + len(EDGE_KINDS)] float32: log1p(tensor bytes), then the edge-kind one-hot."""
    out = np.zeros((graph.edge_index.shape[1], 1 + len(EDGE_KINDS)), dtype=np.float32)
    out[:, 0] = np.log1p(graph.edge_bytes)
    out[np.arange(len(out)), 1 + graph.edge_kind] = 1
    return out


# -- shapes ---------------------------------------------------------------------------------------

def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _dim(d: int, ndim: int) -> int:
    if not -ndim <= d < ndim:
        raise IndexError(f"dimension {d} out of range for {ndim} dimensions")
    return d % ndim


def _resolve(sizes: list[int], numel: int) -> list[int]:
    """Sizes with one -1 filled in so that they hold ``numel`` elements; IndexError if they cannot."""
    known = math.prod(s for s in sizes if s != -1)
    out = [numel // known if s == -1 and known else s for s in sizes]
    if math.prod(out) != numel:
        raise IndexError(f"sizes {sizes} do not hold {numel} elements")
    return out


def _view_output(name: str, x: Shape, args: list[int]) -> list[int]:
    """Output shape of a view-like op from its input shape and integer arguments."""
    n = len(x)
    if name in _SIZED_VIEWS:
        return _resolve(list(args), _numel(x))
    if name == "flatten":
        start = _dim(args[0] if args else 0, n)
        end = _dim(args[1] if len(args) > 1 else -1, n)
        return [*x[:start], _numel(x[start:end + 1]), *x[end + 1:]]
    if name in ("transpose", "t"):
        a, b = (_dim(args[0], n), _dim(args[1], n)) if name == "transpose" else (0, n - 1)
        out = list(x)
        out[a], out[b] = out[b], out[a]
        return out
    if name == "permute":
        return [x[_dim(d, n)] for d in args[:n]]
    if name == "unsqueeze":
        d = _dim(args[0], n + 1)
        return [*x[:d], 1, *x[d:]]
    if name == "squeeze":
        if not args:
            return [s for s in x if s != 1]
        d = _dim(args[0], n)
        return [*x[:d], *x[d + 1:]] if x[d] == 1 else list(x)
    if name == "select":
        d = _dim(args[0], n)
        return [*x[:d], *x[d + 1:]]
    if name == "expand":
        lead = len(args) - n
        if lead < 0:
            raise IndexError(f"expand to {args} from {n} dimensions")
        return [x[i - lead] if s == -1 else s for i, s in enumerate(args)]
    if name == "unflatten":
        d = _dim(args[0], n)
        return [*x[:d], *_resolve(list(args[1:]), x[d]), *x[d + 1:]]
    raise KeyError(name)


_VIEWS = _SIZED_VIEWS | {"flatten", "transpose", "t", "permute", "unsqueeze", "squeeze", "select", "expand",
                         "unflatten"}


def forward_output_shape(op: str, shapes: list[Shape], params) -> Shape | None:
    """Best guess of a forward op's output shape (None when it has no input shapes).

    ``params`` is the trace's params column: the input shapes flattened, then the op's integer
    arguments. Arguments that cannot be read back (truncated params, defaults left out) fall back
    to the largest input."""
    tensors = [s for s in shapes if s]
    if not tensors:
        return None
    name = op.removeprefix("aten::")
    largest = max(tensors, key=_numel)
    if name not in _VIEWS and name not in _CONVS and name not in _POOLS and not name.startswith("adaptive_") \
            and name not in _PRODUCTS:
        return largest
    args = [int(v) for v in params][sum(len(s) for s in shapes):]
    try:
        if name in _VIEWS:
            out = _view_output(name, tensors[0], args)
        else:
            lists = [list(s) for s in shapes]
            if name in _CONVS:
                nd = len(tensors[0]) - 2
                call = [None] * 3 + [args[i * nd:(i + 1) * nd] for i in range(3)]
                if len(call[-1]) != nd:
                    return largest
            elif name in _POOLS:
                call = [None] + [args[i * 2:(i + 1) * 2] for i in range(3)]
            elif name.startswith("adaptive_"):
                call = [None, args[:len(tensors[0]) - 2]]
            else:
                call = []
            out = output_shape(name, lists, call)
    except (IndexError, KeyError, ValueError, ZeroDivisionError):
        return largest
    out = tuple(int(v) for v in out)
    return out if out and all(v > 0 for v in out) else largest


# -- the graph --------------------------------------------------------------------------------------

class _Producers:
    """Who produced each shape: all producers in order, and the ones nobody has consumed yet."""

    def __init__(self) -> None:
        self.all: dict[Shape, list[int]] = {}
        self.unconsumed: dict[Shape, list[int]] = {}

    def add(self, node: int, shape: Shape) -> None:
        self.all.setdefault(shape, []).append(node)
        self.unconsumed.setdefault(shape, []).append(node)

    def take(self, shape: Shape, taken: set[int]) -> int | None:
        """Producer of one input of ``shape`` not in ``taken`` (the consumer's producers so far)."""
        pending = self.unconsumed.get(shape)
        if pending:
            return pending.pop()
        for node in reversed(self.all.get(shape, ())):
            if node not in taken:
                return node
        return None


def _parse_shapes(text: str, cache: dict[str, list[Shape]]) -> list[Shape]:
    shapes = cache.get(text)
    if shapes is None:
        try:
            raw = json.loads(text) if text else []
        except (TypeError, ValueError):
            raw = []
        shapes = [tuple(int(d) for d in s) for s in raw if isinstance(s, list)
                  and all(isinstance(d, (int, float)) for d in s)]
        cache[text] = shapes
    return shapes


def build_graph(trace: pd.DataFrame) -> TraceGraph:
    """The computation graph of one trace (one config_id); nodes follow the trace's ``idx`` order."""
    if trace.empty:
        raise ValueError("cannot build the graph of an empty trace")
    if trace["config_id"].nunique() != 1:
        raise ValueError(f"build_graph takes one trace, got {trace['config_id'].nunique()} config_ids")
    if not trace["idx"].is_monotonic_increasing:
        trace = trace.sort_values("idx")
    ops, phases = trace["op"].tolist(), trace["phase"].tolist()
    texts, params, dtypes = trace["input_shapes"].tolist(), trace["params"].tolist(), trace["dtype"].tolist()
    cache: dict[str, list[Shape]] = {}
    src: list[int] = []
    dst: list[int] = []
    kind: list[int] = []
    nbytes: list[float] = []
    forward, backward = _Producers(), _Producers()
    unmatched: dict[Shape, list[int]] = {}  # forward outputs not yet paired with a backward op
    grads: dict[Shape, list[int]] = {}  # finished parameter gradients (AccumulateGrad nodes)
    run_shape: Shape | None = None  # current update run: its parameter shape, first op and last op
    run_op, run_last = "", -1

    for i, (op, phase) in enumerate(zip(ops, phases)):
        shapes = [s for s in _parse_shapes(texts[i], cache) if s]
        size = DTYPE_BYTES.get(dtypes[i], 4)
        start = len(src)

        def link(source: int | None, shape: Shape | None, edge: str, i: int = i, size: int = size) -> None:
            if source is not None:
                src.append(source)
                dst.append(i)
                kind.append(_KIND[edge])
                nbytes.append(float(_numel(shape) * size) if shape else 0.0)

        if phase == "forward":
            taken: set[int] = set()
            for s in shapes:
                producer = forward.take(s, taken)
                if producer is not None:
                    taken.add(producer)
                    link(producer, s, "data")
            out = forward_output_shape(op, shapes, params[i] if params[i] is not None else [])
            if out is not None:
                forward.add(i, out)
                unmatched.setdefault(out, []).append(i)
        elif phase == "backward" and shapes:
            s0 = shapes[0]
            link(backward.take(s0, set()), s0, "data")
            if op == "AccumulateGrad":
                grads.setdefault(s0, []).append(i)
            else:
                pending = unmatched.get(s0)
                link(pending.pop() if pending else None, s0, "forward_backward")
                for s in dict.fromkeys(shapes[1:] or shapes):
                    backward.add(i, s)
        elif phase == "update" and shapes:
            s0 = shapes[0]
            if s0 != run_shape or op == run_op or run_last != i - 1:
                run_shape, run_op = s0, op
                pending = grads.get(s0)
                link(pending.pop() if pending else None, s0, "grad_update")
            else:
                link(run_last, s0, "data")
            run_last = i
        if len(src) == start and i > 0:
            link(i - 1, shapes[0] if shapes else None, "sequential")

    edges = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    return TraceGraph(len(ops), edges, np.asarray(kind, dtype=np.int64), np.asarray(nbytes, dtype=np.float64))
