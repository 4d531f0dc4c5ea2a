"""Profile one training iteration with torch.profiler and turn it into execution-trace rows.

Why: the op sequence (on the meta device: order, phases, shapes, host-side dispatch cost, no
compute) and real CPU traces (actual compute) come from the same profiler events, so both use
one extraction:

* Iteration k is wrapped in a ``record_function("ProfilerStep#k")`` range (the name
  torch.profiler's own step markers use, so an exported Chrome trace reads like any profiler
  file); its direct children are the top-level ops, in start order.
* Phase: children of ``Optimizer.step#...`` are update ops; ``autograd::engine::evaluate_function:
  X`` ranges are backward ops named X (e.g. ``ConvolutionBackward0``, ``AccumulateGrad``); other
  aten ops are forward. ``Optimizer.zero_grad#...`` is left out (with ``set_to_none`` it runs no op).
* duration = the op's wall time on the host thread (on CPU: its compute; on meta: dispatch only),
  gap = next op's start - this op's end (Python and framework overhead); 0 after the last op.
  On CUDA the device timeline replaces both (see :mod:`predictor.emulator.capture.opseq`).
  cpu_us = duration (the host-side cost of the op).
* FLOPs/bytes: :mod:`predictor.emulator.capture.costs` on the op's shapes — for backward ops, on the
  first descendant aten op that carries tensor shapes (e.g. ``aten::convolution_backward``,
  whose first input is the forward output's gradient; only the gradients its output mask asks
  for are counted, so a first layer, whose input needs no gradient, costs one forward).
* Matmul backward (``AddmmBackward0``, ``MmBackward0``, ``BmmBackward0``, ``BaddbmmBackward0``, ...:
  op class "matmul", phase backward): the first shaped descendant is a view (``aten::t``), so
  these are costed from the GEMMs autograd actually ran under the node — its ``aten::mm`` /
  ``bmm`` / ``addmm`` / ``baddbmm`` / ``matmul`` descendants that carry shapes (not looking
  inside a GEMM, so a ``matmul`` that calls ``mm`` counts once): normally two (grad-input and
  grad-weight), one when only one operand requires a gradient (a first layer's input).
  FLOPs = Σ 2·M·N·K over them, bytes = Σ of each GEMM's compulsory traffic (its inputs + its
  output), and ``input_shapes`` = their operand shapes concatenated in execution order, one pair
  per GEMM: ``[[M,K],[K,N],[M2,K2],[K2,N2]]`` (bmm: ``[B,M,K],[B,K,N]``; addmm/baddbmm: the two
  multiplied operands, without the added tensor), so a consumer can rebuild each GEMM. A matmul
  backward node with no shaped GEMM under it keeps the first-shaped-descendant costing.
* params: the op's tensor shapes flattened, then its integer arguments, truncated to 30 (matmul
  backward: the GEMM operand shapes flattened, no arguments).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from predictor.emulator.capture import costs

ITERATION = "ProfilerStep#"
# utility records torch.profiler itself leaves out of its event list (profiler_util._filter_name)
_UTILITY_EVENTS = frozenset({"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                             "profiler::_record_function_enter_new", "profiler::_record_function_exit",
                             "aten::is_leaf", "aten::output_nr", "aten::_version"})
_ELEMENT_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass
class OpRecord:
    op: str
    phase: str
    shapes: list[list[int]]
    args: list
    start_us: float
    end_us: float
    flops: float
    bytes: float


@dataclass
class _Span:
    start: float
    end: float


class RawEvent:
    """A profiler event rebuilt from Kineto's raw records, with its nesting (same thread, by time).

    Why: ``prof.events()`` builds a FunctionEvent tree for every event, which takes seconds on
    the tens of thousands of events a meta-device iteration emits (its Python decompositions);
    the raw records plus a stack pass give the same tree in a fraction of that.
    """

    __slots__ = ("raw", "name", "time_range", "cpu_children", "thread")

    def __init__(self, raw, name: str) -> None:
        self.raw = raw
        self.name = name
        self.time_range = _Span(raw.start_ns() / 1000.0, raw.end_ns() / 1000.0)
        self.thread = raw.start_thread_id()
        self.cpu_children: list[RawEvent] = []

    # shapes and arguments are read only for the few events that become ops (lazily: reading
    # them for every decomposition event costs more than the rest of the extraction)
    @property
    def input_shapes(self):
        return self.raw.shapes()

    @property
    def concrete_inputs(self):
        return self.raw.concrete_inputs()


def _inside(e: RawEvent, parent: RawEvent) -> bool:
    """torch's own rule (EventList._populate_cpu_children): a child lies inside [start, end) of the
    latest still-open event on its thread. Also inside: a zero-length event at the parent's very
    end. The clock gives a tiny last call no time (``aten::zeros`` calling ``zero_`` on a few
    hundred floats); as a root it became an extra op in some iterations only, so their op counts
    differed and the config could not be profiled (the zoo's LSTM language models on a CPU)."""
    if e.thread != parent.thread or e.time_range.end > parent.time_range.end:
        return False
    start, end = e.time_range.start, parent.time_range.end
    return start < end or (start == end == e.time_range.end and parent.time_range.start < end)


def _nest(raw_events) -> list[RawEvent]:
    """Build parent/child links per thread; returns the root events."""
    cpu = torch.autograd.DeviceType.CPU
    events = [RawEvent(r, name) for r in raw_events
              if (name := r.name()) not in _UTILITY_EVENTS and not r.is_async() and r.device_type() == cpu]
    events.sort(key=lambda e: (e.thread, e.time_range.start, -e.time_range.end))
    roots: list[RawEvent] = []
    stack: list[RawEvent] = []
    for e in events:
        while stack and not _inside(e, stack[-1]):
            stack.pop()
        (stack[-1].cpu_children if stack else roots).append(e)
        stack.append(e)
    return roots


def run_profiled(step, iterations: int, *, cuda: bool = False,
                 chrome_trace: str | None = None) -> list[list]:
    """Profile ``iterations`` calls of ``step``; returns each iteration's top-level events.

    Top level = children of the iteration range, plus autograd-engine roots of other threads
    (where backward runs for accelerators) inside the iteration's time span. ``cuda`` also
    records device activities (kernels, memcpys) and synchronises after each iteration, so its
    kernels finish inside the profiled window; ``chrome_trace`` exports the trace to that path.
    """
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for k in range(iterations):
            with record_function(f"{ITERATION}{k}"):
                step()
            if cuda:
                torch.cuda.synchronize()
    if chrome_trace is not None:
        prof.export_chrome_trace(chrome_trace)
    roots = _nest(prof.profiler.kineto_results.events())
    iterations_ = sorted((e for e in roots if e.name.startswith(ITERATION)), key=lambda e: e.time_range.start)
    out = []
    for it in iterations_:
        others = [e for e in roots if e.thread != it.thread and e.name.startswith("autograd::engine::")
                  and it.time_range.start <= e.time_range.start <= it.time_range.end]
        out.append(sorted(it.cpu_children + others, key=lambda e: e.time_range.start))
    return out


def extract_ops(top_level: list, dtype: str) -> list[OpRecord]:
    """Top-level events of one iteration -> op records in execution order."""
    records: list[OpRecord] = []
    for event in top_level:
        if event.name.startswith("Optimizer.zero_grad"):
            continue
        if event.name.startswith("Optimizer.step"):
            previous = ""
            for child in sorted(event.cpu_children, key=lambda e: e.time_range.start):
                # ``aten::item`` calls ``_local_scalar_dense``; the profiler sometimes hangs that call
                # beside its caller instead of under it (Adam's step counter), which made the op
                # count of one config differ between captures (459 vs 460)
                if not (child.name == "aten::_local_scalar_dense" and previous == "aten::item"):
                    records.append(_record(child, "update", child, dtype))
                previous = child.name
            continue
        if event.name.startswith("autograd::engine::evaluate_function:"):
            name = event.name.split(": ", 1)[-1].strip().removeprefix("torch::autograd::")
            gemms = _gemm_descendants(event) if costs.op_class(name) == "matmul" else []
            if gemms:
                records.append(_gemm_record(event, name, gemms, dtype))
            else:
                # not a matmul backward, or one with no shaped GEMM under it (e.g. MvBackward0,
                # DotBackward0): cost the first shaped descendant, as before
                records.append(_record(event, "backward", _shaped_descendant(event), dtype, name=name))
            continue
        records.append(_record(event, "forward", event, dtype))
    return records


def _shaped_descendant(event):
    """The first aten op under ``event`` (depth first) that has a tensor input shape."""
    stack = list(reversed(event.cpu_children))
    while stack:
        e = stack.pop()
        if e.name.startswith("aten::") and any(len(s) for s in (e.input_shapes or [])):
            return e
        stack.extend(reversed(e.cpu_children))
    return None


_GEMMS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul"})


def _gemm_descendants(event) -> list:
    """The GEMM ops under ``event`` that carry shapes, depth first in execution order; a GEMM's
    own children are not searched (``aten::matmul`` dispatches to ``aten::mm``/``bmm``)."""
    found = []
    stack = list(reversed(event.cpu_children))
    while stack:
        e = stack.pop()
        if e.name in _GEMMS and _gemm_operands(e) is not None:
            found.append(e)
            continue
        stack.extend(reversed(e.cpu_children))
    return found


def _gemm_operands(event) -> tuple[list[int], list[int]] | None:
    """The two multiplied operands of a GEMM event (addmm/baddbmm: after the added tensor)."""
    tensors = [list(s) for s in (event.input_shapes or []) if len(s)]
    start = 1 if event.name in ("aten::addmm", "aten::baddbmm") else 0
    if len(tensors) < start + 2:
        return None
    return tensors[start], tensors[start + 1]


def _product_shape(a: list[int], b: list[int]) -> list[int]:
    """Output shape of ``a @ b`` (torch.matmul rules: 1-D operands, broadcast batch dims)."""
    if len(a) < 2 or len(b) < 2:
        return [*a[:-1], *b[:-2], *b[-1:]] if len(b) >= 2 else list(a[:-1])
    batch = list(torch.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    return [*batch, a[-2], b[-1]]


def _gemm_record(event, name: str, gemms: list, dtype: str) -> OpRecord:
    """A matmul backward node costed from the GEMMs autograd ran under it (module docstring)."""
    elem = _ELEMENT_SIZE[dtype]
    shapes: list[list[int]] = []
    total_flops = total_bytes = 0.0
    for g in gemms:
        a, b = _gemm_operands(g)
        out = _product_shape(a, b)
        total_flops += 2.0 * costs.numel(out) * int(a[-1])
        total_bytes += costs.bytes_moved([list(s) for s in g.input_shapes if len(s)], [out], elem)
        shapes += [a, b]
    return OpRecord(name, "backward", shapes, [], event.time_range.start, event.time_range.end,
                    total_flops, total_bytes)


def _record(event, phase: str, shaped, dtype: str, name: str | None = None) -> OpRecord:
    shapes = [list(s) for s in (shaped.input_shapes or [])] if shaped is not None else []
    args = list(getattr(shaped, "concrete_inputs", None) or []) if shaped is not None else []
    tensors = [s for s in shapes if len(s)]
    op = (name or event.name).removeprefix("aten::")
    leaf = shaped.name if shaped is not None else event.name
    flops, nbytes = _cost(leaf, shapes, args, phase == "backward", _ELEMENT_SIZE[dtype])
    return OpRecord(op, phase, tensors, args, event.time_range.start, event.time_range.end, flops, nbytes)


def _cost(op: str, shapes: list[list[int]], args: list, backward: bool, elem: int) -> tuple[float, float]:
    """FLOPs and bytes of an op from its input shapes and concrete arguments."""
    tensors = [s for s in shapes if len(s)]
    if not tensors:
        return 0.0, 0.0
    name = op.removeprefix("aten::")
    try:
        if name == "convolution_backward":  # (grad_output, input, weight, ..., output_mask)
            mask = args[-1] if args and isinstance(args[-1], (list, tuple)) and len(args[-1]) == 3 else [True] * 3
            forward = costs.flops("conv", [tensors[1], tensors[2]], [tensors[0]])
            grads = [t for t, wanted in zip((tensors[1], tensors[2]), mask[:2]) if wanted]
            return forward * len(grads), costs.bytes_moved(tensors, grads, elem)
        out = output_shape(name, shapes, args)
        cls = costs.op_class(name)
        kwargs = {}
        if cls == "pool" and len(args) > 1 and args[1]:
            kwargs["kernel_size"] = args[1]
        if cls == "lstm":
            return _rnn_layer_flops(tensors, backward), costs.bytes_moved(tensors, [out], elem)
        grad_op = backward and cls not in ("conv", "matmul")
        return (costs.flops(name, tensors, [out], backward=grad_op, **kwargs),
                costs.bytes_moved(tensors, [out], elem))
    except (IndexError, TypeError, ValueError):
        return 0.0, costs.bytes_moved(tensors, [], elem)


def _rnn_layer_flops(tensors: list[list[int]], backward: bool) -> float:
    """An RNN layer record that lists its weights — (T, B, I) input, (4H, I) and (4H, H) — gets
    the closed form; the fused forward op lists only its input (its weights travel as a tensor
    list the profiler does not record), so its FLOPs come from the module (opseq.capture)."""
    weights = [t for t in tensors if len(t) == 2]
    if len(tensors[0]) != 3 or len(weights) < 2 or weights[1][0] != 4 * weights[1][1]:
        return 0.0
    return costs.flops("lstm", [tensors[0]], [], backward=backward, hidden_size=weights[1][1])


def output_shape(op: str, shapes: list[list[int]], args: list) -> list[int]:
    """Output shape of common forward ops from input shapes and concrete args (profiler order)."""
    tensors = [s for s in shapes if len(s)]
    name = op.removeprefix("aten::")
    if name in ("conv2d", "conv1d", "conv3d", "convolution", "_convolution"):
        x, w = shapes[0], shapes[1]
        nd = len(x) - 2
        # conv2d(input, weight, bias, stride, padding, dilation, groups) and
        # convolution(input, weight, bias, stride, padding, dilation, ...) agree on positions 3-5
        stride, padding, dilation = (_ints(args, i, nd, d) for i, d in ((3, 1), (4, 0), (5, 1)))
        spatial = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
        return [x[0], w[0], *spatial]
    if name in ("max_pool2d", "avg_pool2d", "max_pool2d_with_indices"):
        x = shapes[0]
        kernel = _ints(args, 1, 2, 1)
        stride = _ints(args, 2, 2, None) if len(args) > 2 and args[2] else kernel
        padding = _ints(args, 3, 2, 0)
        return [*x[:-2], *[(x[-2 + i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in range(2)]]
    if name.startswith("adaptive_"):
        size = _ints(args, 1, len(shapes[0]) - 2, 1)
        return [*shapes[0][:-len(size)], *size]
    if name == "linear":
        return [*shapes[0][:-1], shapes[1][0]]
    if name in ("addmm", "mm", "matmul", "bmm", "baddbmm"):
        a, b = (tensors[1], tensors[2]) if name in ("addmm", "baddbmm") else (tensors[0], tensors[1])
        return [*a[:-1], b[-1]]
    return max(tensors, key=costs.numel)


def _ints(args: list, index: int, n: int, default) -> list[int]:
    value = args[index] if index < len(args) else None
    if value is None or value == "" or value == []:
        return [default] * n
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value] * (n if len(value) == 1 else 1)
    return [int(value)] * n


def params_of(record: OpRecord) -> list[int]:
    flat = [int(d) for s in record.shapes for d in s]
    for a in record.args:
        if isinstance(a, bool) or a is None:
            continue
        if isinstance(a, int):
            flat.append(a)
        elif isinstance(a, (list, tuple)):
            flat.extend(int(v) for v in a if isinstance(v, (int, float)) and not isinstance(v, bool))
    return flat[:30]


def host_timings(iteration: list[OpRecord]) -> tuple[list[float], list[float]]:
    """Per op: host wall time, and the gap to the next op's start (0 after the last op)."""
    durations = [r.end_us - r.start_us for r in iteration]
    gaps = [b.start_us - a.end_us for a, b in zip(iteration, iteration[1:])] + [0.0] * bool(iteration)
    return durations, gaps


def median_timings(iterations: list[list[OpRecord]], source: str,
                   timings: list[tuple[list[float], list[float]]] | None = None,
                   ) -> list[tuple[OpRecord, float, float]]:
    """Per op: the record of the last iteration, median duration and median gap over iterations.

    ``timings`` gives each iteration's (durations, gaps) when they come from elsewhere than the
    host clock (the kernels of a CUDA trace); by default :func:`host_timings`.
    """
    lengths = {len(it) for it in iterations}
    if len(lengths) != 1:
        raise RuntimeError(f"{source}: measured iterations differ in op count {sorted(lengths)}")
    ops = [[it[i].op for it in iterations] for i in range(len(iterations[0]))]
    for i, names in enumerate(ops):
        if len(set(names)) != 1:
            raise RuntimeError(f"{source}: op {i} differs between iterations: {sorted(set(names))}")
    timings = timings if timings is not None else [host_timings(it) for it in iterations]
    return [(rec, statistics.median(t[0][i] for t in timings), statistics.median(t[1][i] for t in timings))
            for i, rec in enumerate(iterations[-1])]
