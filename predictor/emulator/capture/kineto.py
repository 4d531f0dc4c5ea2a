"""Import a PyTorch-profiler (Kineto) Chrome-trace JSON file as one execution trace (op_trace).

Why: torch.profiler is the tool users already run; its ``export_chrome_trace`` / TensorBoard files
(``*.pt.trace.json[.gz]``) hold every operator, its shapes and the GPU kernels it launched, which is
all ETS needs for one training iteration (predictors.md §1.2, §6.1).

Both schemas are read (2021 and 2023+ categories and flows); plain and gzip files are detected by
content, not by name. Design decisions where the format leaves a choice open: the iteration is the
last *complete* ``ProfilerStep`` (the profiler's trailing one is empty or partial); ops are the
top-level operators of the main and autograd threads, with annotation ranges transparent and data
loading dropped; phase comes from optimizer ranges, autograd nodes and autograd threads; device
activities join their op through the runtime call's correlation id (else the flow, else the
``External id``), and gaps follow ETS over the ops that have device activities. A CPU-only trace
takes host durations instead.

Every rule, column and default: docs/ets.md, 'Import rules: kineto and nsys'.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common import op_trace
from predictor.common.families import family_of
from predictor.common.inputs import InputError, inflate, load_json, names, read_bytes, short
from predictor.common.op_trace import OpTraceFormatError, refusing

# Kinds of complete ("X") events this importer reads, by category (both schemas).
OP, ANNOTATION, RUNTIME, DEVICE = "op", "annotation", "runtime", "device"
CATEGORIES: dict[str, str] = {
    "cpu_op": OP, "Operator": OP,
    "user_annotation": ANNOTATION,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME,
    "kernel": DEVICE, "Kernel": DEVICE, "gpu_memcpy": DEVICE, "Memcpy": DEVICE,
    "gpu_memset": DEVICE, "Memset": DEVICE,
}
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#")
_DATA = re.compile(r"^enumerate\(DataLoader\)#")
_EVALUATE = "autograd::engine::evaluate_function: "
_NODE = re.compile(r"(?:Backward\d*$)|(?:^torch::autograd::)|(?:^autograd::engine::evaluate_function: )")
_DTYPES = {
    "float": "float32", "float32": "float32", "c10::float": "float32",
    "double": "float64", "float64": "float64",
    "c10::Half": "float16", "Half": "float16", "half": "float16", "float16": "float16",
    "c10::BFloat16": "bfloat16", "BFloat16": "bfloat16", "bfloat16": "bfloat16",
}


def _is_annotation_name(name: str) -> bool:
    return bool(_STEP.match(name) or _OPTIMIZER.match(name) or _DATA.match(name))


def op_name(name: str) -> str:
    """Row name of a top-level operator: evaluate_function wrappers become their node's name."""
    if name.startswith(_EVALUATE):
        name = name[len(_EVALUATE):].strip()
    for prefix in ("aten::", "torch::autograd::"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def default_model(path: str | Path) -> str:
    name = Path(path).name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


# -- reading ---------------------------------------------------------------------------------------

def _read_json(path: Path) -> dict:
    """The trace document: a regular file within the size limit, inflated within the gzip limits
    and nested within the depth limit before it is parsed (:mod:`predictor.common.inputs`)."""
    try:
        with refusing(path):
            raw = inflate(read_bytes(path, "Kineto trace file"), path)
    except OSError as exc:
        raise OpTraceFormatError(path, f"cannot read the file: {exc.strerror or type(exc).__name__}") from exc
    try:
        with refusing(path):
            data = load_json(raw, path)
    except UnicodeDecodeError as exc:
        raise OpTraceFormatError(path, f"not UTF-8 JSON text: {exc}") from exc
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(raw.rstrip()) else "not valid JSON"
        raise OpTraceFormatError(path, f"{what}: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if not isinstance(data, dict) or "traceEvents" not in data:
        raise OpTraceFormatError(path, "not a Chrome trace: no 'traceEvents'", field="traceEvents")
    if not isinstance(data["traceEvents"], list):
        raise OpTraceFormatError(path, "'traceEvents' is not a list", field="traceEvents")
    return data


def _event_tables(path: Path, events: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The X events of known categories and the runtime->device flow endpoints, as DataFrames."""
    rows, flows = [], []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise OpTraceFormatError(path, "trace event is not a JSON object", row=i)
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            kind = CATEGORIES.get(cat) if isinstance(cat, str) else None
            if kind is not None:
                rows.append((i, kind, cat, e.get("name"), e.get("pid"), e.get("tid"), e.get("ts"),
                             e.get("dur"), e.get("args")))
        elif ph in ("s", "f") and (e.get("cat") == "ac2g" or (e.get("cat") == "async"
                                                              and e.get("name") == "launch")):
            flows.append((i, ph, e.get("id"), e.get("pid"), e.get("tid"), e.get("ts")))
    ev = pd.DataFrame(rows, columns=["event", "kind", "cat", "name", "pid", "tid", "ts", "dur", "args"])
    for col in ("ts", "dur"):
        values = pd.to_numeric(ev[col], errors="coerce")
        bad = values.isna().to_numpy() | ev[col].map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool)
        if bad.any():
            j = int(np.argmax(bad))
            raise OpTraceFormatError(path, f"must be a number, got {short(ev[col].iloc[j])}",
                                     row=int(ev["event"].iloc[j]), field=col)
        ev[col] = values.astype("float64")
    if (ev["dur"] < 0).any():
        j = int(np.argmax((ev["dur"] < 0).to_numpy()))
        raise OpTraceFormatError(path, f"must be >= 0, got {short(ev['dur'].iloc[j])}",
                                 row=int(ev["event"].iloc[j]), field="dur")
    bad_name = ~ev["name"].map(lambda v: isinstance(v, str)).astype(bool)
    if bad_name.any():
        j = int(np.argmax(bad_name.to_numpy()))
        raise OpTraceFormatError(path, f"must be a string, got {short(ev['name'].iloc[j])}",
                                 row=int(ev["event"].iloc[j]), field="name")
    ev["args"] = [a if isinstance(a, dict) else {} for a in ev["args"]]
    ev["pid"] = ev["pid"].astype(str)
    ev["tid"] = ev["tid"].astype(str)
    for key in ("correlation", "External id", "external id"):
        _check_ids(path, [a.get(key) for a in ev["args"]], ev["event"].tolist(), f"args.{key}")
    _check_ids(path, [f[2] for f in flows], [f[0] for f in flows], "id")
    fl = pd.DataFrame(flows, columns=["event", "ph", "id", "pid", "tid", "ts"])
    fl["pid"] = fl["pid"].astype(str)
    fl["tid"] = fl["tid"].astype(str)
    fl["ts"] = pd.to_numeric(fl["ts"], errors="coerce")
    return ev, fl


MAX_ID = 2**53  # the largest id float64 holds exactly: beyond it, distinct ids merge in pandas' columns


def _check_ids(path: Path, values: list, events: list[int], field: str) -> None:
    """Refuse a numeric id (correlation, External id, flow id; as parsed, before pandas turns it
    into a float) that is not a whole number in [0, 2**53]: matched as float64, two larger ids
    (or ids beyond int64) collide or miss, and the kernels they join silently go to the wrong op
    or to none. Absent or text ids are left alone, as before (they join nothing)."""
    for value, event in zip(values, events):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not (0 <= value <= MAX_ID and float(value).is_integer()):
            raise OpTraceFormatError(path, f"id {short(value, 40)} is not a whole number from 0 to 2**53 "
                                         f"({MAX_ID:,}): such ids cannot be matched exactly, so the kernels it "
                                         "joins would be lost or misattributed", row=int(event), field=field)


def _arg(args: pd.Series, key: str) -> pd.Series:
    return args.map(lambda a: a.get(key))


def _correlation(args: pd.Series) -> pd.Series:
    return pd.to_numeric(_arg(args, "correlation"), errors="coerce")


def _external_id(args: pd.Series) -> pd.Series:
    ext = args.map(lambda a: a.get("External id", a.get("external id")))
    return pd.to_numeric(ext, errors="coerce")


# -- nesting ---------------------------------------------------------------------------------------

def _nest(path: Path, cpu: pd.DataFrame) -> dict[str, np.ndarray | dict]:
    """Top-level op (root), optimizer / data-loader flags, flops and shapes per CPU event.

    One pass per thread over events sorted by (start, -duration), with a stack of open ranges.
    """
    n = len(cpu)
    ts = cpu["ts"].to_numpy()
    end = ts + cpu["dur"].to_numpy()
    kind = cpu["kind"].to_numpy()
    names = cpu["name"].to_numpy()
    args = cpu["args"].to_numpy()
    tid_codes = pd.factorize(cpu["tid"])[0]
    is_ann = (kind == ANNOTATION) | np.fromiter((_is_annotation_name(s) for s in names), bool, n)
    is_opt = np.fromiter((bool(_OPTIMIZER.match(s)) for s in names), bool, n)
    is_data = np.fromiter((bool(_DATA.match(s)) for s in names), bool, n)
    is_rt = kind == RUNTIME
    root = np.full(n, -1, dtype=np.int64)
    in_opt = np.zeros(n, dtype=bool)
    in_data = np.zeros(n, dtype=bool)
    flops = np.zeros(n, dtype=np.float64)
    shapes: dict[int, object] = {}
    types: dict[int, object] = {}
    stack: list[tuple] = []
    current_tid = -1
    for j in np.lexsort((-cpu["dur"].to_numpy(), ts, tid_codes)):
        if tid_codes[j] != current_tid:
            stack, current_tid = [], tid_codes[j]
        t = ts[j]
        while stack and stack[-1][0] <= t:
            stack.pop()
        r, opt, data, fl = stack[-1][1:] if stack else (-1, False, False, False)
        if is_rt[j]:
            root[j], in_opt[j], in_data[j] = r, opt, data
            continue
        if is_ann[j]:
            stack.append((end[j], r, opt or is_opt[j], data or is_data[j], fl))
            continue
        r = j if r < 0 else r
        root[j], in_opt[j], in_data[j] = r, opt, data
        a = args[j]
        own = a.get("flops")
        has_flops = isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0
        if has_flops and not fl:
            flops[j] = float(own)
        if r not in shapes and "Input Dims" in a:
            dims = a["Input Dims"]
            if isinstance(dims, str):
                try:
                    dims = load_json(dims, "the shapes")
                except json.JSONDecodeError as exc:
                    raise OpTraceFormatError(path, f"not a JSON list of shapes: {exc.msg}",
                                             row=int(cpu["event"].iloc[j]), field="Input Dims") from exc
                except InputError as exc:
                    raise OpTraceFormatError(path, str(exc), row=int(cpu["event"].iloc[j]),
                                             field="Input Dims") from None
            shapes[r] = dims
        if r not in types and "Input type" in a:
            types[r] = a["Input type"]
        stack.append((end[j], r, opt, data, fl or has_flops))
    return {"root": root, "in_opt": in_opt, "in_data": in_data, "flops": flops,
            "is_ann": is_ann, "shapes": shapes, "types": types}


def _flatten_ints(shapes, out: list[int]) -> list[int]:
    if isinstance(shapes, (list, tuple)):
        for s in shapes:
            _flatten_ints(s, out)
    elif isinstance(shapes, (int, np.integer)) and not isinstance(shapes, bool):
        out.append(int(shapes))
    return out


def _dtype(types) -> str:
    if isinstance(types, (list, tuple)):
        for t in types:
            if isinstance(t, str) and t in _DTYPES:
                return _DTYPES[t]
    return "float32"


def _first_shape(shapes) -> list | None:
    """The first input's shape when it is a non-empty list of ints."""
    if isinstance(shapes, list) and shapes:
        first = shapes[0]
        if isinstance(first, list) and first and all(isinstance(d, int) and not isinstance(d, bool)
                                                     for d in first):
            return first
    return None


# -- device activities -----------------------------------------------------------------------------

def _attach_device(path: Path, ev: pd.DataFrame, flows: pd.DataFrame, cpu: pd.DataFrame) -> pd.DataFrame:
    """Device activities with the CPU event index ('root') of the top-level op that launched them."""
    dev = ev[ev["kind"] == DEVICE].copy()
    dev["corr"] = _correlation(dev["args"])
    rt = cpu[cpu["kind"] == RUNTIME].copy()
    rt["corr"] = _correlation(rt["args"])
    rt["from_flow"] = rt["corr"].isna()
    if len(flows) and (dev["corr"].isna().any() or rt["corr"].isna().any()):
        # ac2g / launch flows: one endpoint at the runtime call, one at the device activity,
        # both at the event's (pid, tid, ts); the flow id is the correlation id.
        key = flows.dropna(subset=["ts"]).drop_duplicates(["pid", "tid", "ts"])[["pid", "tid", "ts", "id"]]
        for frame in (dev, rt):
            missing = frame["corr"].isna()
            if missing.any():
                found = frame.loc[missing, ["pid", "tid", "ts"]].merge(key, how="left", on=["pid", "tid", "ts"])
                frame.loc[missing, "corr"] = pd.to_numeric(found["id"], errors="coerce").to_numpy()
    _check_unique_launches(path, rt)
    rt = rt[rt["root"] >= 0].dropna(subset=["corr"])
    dev = dev.merge(rt[["corr", "root"]], how="left", on="corr")
    unmatched = dev["root"].isna()
    if unmatched.any():
        ops = cpu[(cpu["kind"] == OP) & (cpu["root"] >= 0)].copy()
        ops["ext"] = _external_id(ops["args"])
        ops = ops.dropna(subset=["ext"]).drop_duplicates("ext")
        ext = _external_id(dev.loc[unmatched, "args"]).to_frame("ext")
        dev.loc[unmatched, "root"] = ext.merge(ops[["ext", "root"]], how="left", on="ext")["root"].to_numpy()
    dev = dev.dropna(subset=["root"])
    dev["root"] = dev["root"].astype(np.int64)
    return dev


def _check_unique_launches(path: Path, rt: pd.DataFrame) -> None:
    """Refuse two runtime calls of one correlation id (from ``args.correlation``, or from the
    flow that starts at the call): each launch has its own id, and of two calls sharing one the
    kernels can go to only one (the old rule kept the first: a file whose flows all share one id
    imported with zero kernel time). Several kernels of one call (a CUDA graph) are fine."""
    ids = rt.dropna(subset=["corr"])
    again = ids["corr"].duplicated(keep="first").to_numpy()
    if not again.any():
        return
    j = int(np.argmax(again))
    corr = ids["corr"].iloc[j]
    first = int(ids.loc[ids["corr"] == corr, "event"].iloc[0])
    field = "id" if ids["from_flow"].iloc[j] else "args.correlation"
    raise OpTraceFormatError(path, f"correlation id {int(corr)} is shared by the runtime calls at events {first} and "
                                 f"{int(ids['event'].iloc[j])} ({int(again.sum()):,} repeated id(s) in all): each "
                                 "launch has its own id, so the kernels of these calls cannot be attributed",
                             row=int(ids["event"].iloc[j]), field=field)


# -- the importer ----------------------------------------------------------------------------------

def _main_process(path: Path, ev: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The process holding the ProfilerStep ranges (without steps: the one with the most
    operators) and its ProfilerStep events."""
    ops_all = ev[ev["kind"] == OP]
    if ops_all.empty:
        raise OpTraceFormatError(path, "no operator events (category 'cpu_op' or 'Operator')", field="cat")
    steps = ev[ev["kind"].isin([OP, ANNOTATION]) & ev["name"].str.match(_STEP.pattern)].copy()
    pids = (steps if len(steps) else ops_all)["pid"].dropna()
    if pids.empty:
        what = "ProfilerStep" if len(steps) else "operator"
        raise OpTraceFormatError(path, f"no {what} event carries a process id", field="pid")
    main_pid = pids.mode().iloc[0] if len(steps) else pids.value_counts().index[0]
    return main_pid, steps[steps["pid"] == main_pid]


def _cpu_events(path: Path, ev: pd.DataFrame, main_pid: str) -> tuple[pd.DataFrame, dict]:
    """The main process's op, annotation and runtime events, with their nesting (see _nest)."""
    cpu = ev[ev["kind"].isin([OP, ANNOTATION, RUNTIME]) & (ev["pid"] == main_pid)].reset_index(drop=True)
    nest = _nest(path, cpu)
    cpu["root"], cpu["in_opt"], cpu["in_data"] = nest["root"], nest["in_opt"], nest["in_data"]
    return cpu, nest


def _top_level_ops(path: Path, cpu: pd.DataFrame, nest: dict) -> pd.DataFrame:
    """Top-level ops outside data loading (``pos`` = their row in cpu), with the autograd-node
    flag and their flops."""
    pos = np.arange(len(cpu))
    roots = cpu[(cpu["kind"] == OP) & ~nest["is_ann"] & (nest["root"] == pos) & ~nest["in_data"]].copy()
    roots["pos"] = roots.index.to_numpy()
    if roots.empty:
        raise OpTraceFormatError(path, "no operator events outside annotation / data-loading ranges")
    roots["node"] = roots["name"].str.contains(_NODE.pattern, regex=True)
    roots["flops"] = pd.Series(nest["flops"]).groupby(nest["root"]).sum().reindex(roots["pos"]).fillna(0).to_numpy()
    return roots


def _training_ops(roots: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The ops of the main thread and of the autograd threads, with ``backward_root`` (an autograd
    node, or on an autograd thread). Main thread: the one holding the steps, else the earliest op's."""
    if len(steps):
        main_tid = steps["tid"].mode().iloc[0]
    else:
        main_tid = roots.sort_values(["ts", "event"])["tid"].iloc[0]
    autograd_tids = set(roots.loc[roots["node"] & (roots["tid"] != main_tid), "tid"])
    roots = roots[(roots["tid"] == main_tid) | roots["tid"].isin(autograd_tids)]
    roots["backward_root"] = roots["node"] | roots["tid"].isin(autograd_tids)
    return roots


def _phases(roots: pd.DataFrame) -> np.ndarray:
    """forward / backward / update per op (rules: "Phase" in the module docstring)."""
    ts = roots["ts"].to_numpy()
    bwd = roots["backward_root"].to_numpy()
    phase = np.where(bwd, "backward", "forward").astype(object)
    if bwd.any():
        first, last = ts[bwd].min(), ts[bwd].max()
        phase[~bwd & (ts > first) & (ts <= last)] = "backward"
        phase[~bwd & (ts > last)] = "update"
    phase[roots["in_opt"].to_numpy()] = "update"
    return phase


def _device_times(dev: pd.DataFrame, roots: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernels, duration_us and gap_us per op from the device activities it launched (GPU traces;
    ``dev``: :func:`_attach_device`'s)."""
    agg = dev.groupby("root").agg(kernels=("dur", "size"), duration=("dur", "sum"), start=("ts", "min"))
    agg = agg.reindex(roots["pos"])
    kernels = agg["kernels"].fillna(0).to_numpy(dtype=np.int64)
    duration = agg["duration"].fillna(0.0).to_numpy()
    start = agg["start"].to_numpy()
    gap = np.zeros(len(roots))
    busy = np.flatnonzero(kernels > 0)
    if len(busy) > 1:
        gap[busy[:-1]] = start[busy[1:]] - (start[busy[:-1]] + duration[busy[:-1]])
    return kernels, duration, gap


def _host_times(roots: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernels (0), duration_us (the op's dur) and gap_us per op (CPU traces)."""
    ts = roots["ts"].to_numpy()
    duration = roots["dur"].to_numpy()
    gap = np.zeros(len(roots))
    if len(roots) > 1:
        gap[:-1] = ts[1:] - (ts[:-1] + duration[:-1])
    return np.zeros(len(roots), dtype=np.int64), duration, gap


def _batch_and_input_size(shapes: list, phases: np.ndarray) -> tuple[int, int]:
    """From the first forward op whose first input has a shape: its first dim, and its last dim
    when it is 4-D (else 0); (0, 0) when no forward op has one."""
    for s, ph in zip(shapes, phases):
        first = _first_shape(s) if ph == "forward" else None
        if first is not None:
            return int(first[0]), int(first[-1] if len(first) == 4 else 0)
    return 0, 0


def _default_device(data: dict, ev: pd.DataFrame) -> str:
    """``deviceProperties[0].name``, else "cuda" when the file has kernels, else "cpu"."""
    props = data.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and props[0].get("name"):
        return str(props[0]["name"])
    return "cuda" if ev["cat"].isin(KERNEL_CATEGORIES).any() else "cpu"


def _table(path: Path, roots: pd.DataFrame, nest: dict, config_id: str, device: str,
           model: str) -> pd.DataFrame:
    """The execution-trace table of the iteration's ops (roots with phase and device times)."""
    shapes = [nest["shapes"].get(p) for p in roots["pos"]]
    types = [nest["types"].get(p) for p in roots["pos"]]
    batch, input_size = _batch_and_input_size(shapes, roots["phase"].to_numpy())
    return pd.DataFrame({
        "config_id": config_id,
        "device": device,
        "family": family_of(model),
        "model": model,
        "idx": np.arange(len(roots)),
        "op": roots["name"].map(op_name).to_numpy(),
        "phase": roots["phase"].to_numpy(),
        "input_shapes": [op_trace.shapes_json(s if isinstance(s, list) else []) for s in shapes],
        "params": [_flatten_ints(s, [])[: op_trace.MAX_PARAMS] for s in shapes],
        "flops": roots["flops"].to_numpy(),
        "bytes": 0.0,
        "dtype": [_dtype(t) for t in types],
        "batch": batch,
        "input_size": input_size,
        "cpu_us": roots["dur"].to_numpy(),
        "duration_us": roots["duration_us"].to_numpy(),
        "gap_us": roots["gap_us"].to_numpy(),
        "kernels": roots["kernels"].to_numpy(),
        "source": [f"{path}:{int(e)}" for e in roots["event"]],
    })


def load(path: str | Path, *, device: str | None = None, model: str | None = None,
         step: int | None = None) -> pd.DataFrame:
    """One training iteration of a Kineto trace file as a validated execution-trace table."""
    return load_steps(path, [step], device=device, model=model)[0]


def load_steps(path: str | Path, steps: list[int | None], *, device: str | None = None,
               model: str | None = None) -> list[pd.DataFrame]:
    """:func:`load` of each of ``steps``, the file read, parsed and its kernels attached once: a
    capture reads back each of its profiled iterations from one trace (parsing it per iteration
    cost ~10 ms an op)."""
    path = Path(path)
    data = _read_json(path)
    ev, flows = _event_tables(path, data["traceEvents"])
    main_pid, ranges = _main_process(path, ev)
    cpu, nest = _cpu_events(path, ev, main_pid)
    all_roots = _training_ops(_top_level_ops(path, cpu, nest), ranges)
    dev = _attach_device(path, ev, flows, cpu) if (ev["kind"] == DEVICE).any() else None
    model = model or default_model(path)
    device = _default_device(data, ev) if device is None else device
    tables = []
    for step in steps:
        label, roots = _select_step(path, ranges, all_roots, step)
        roots = roots.sort_values(["ts", "event"]).reset_index(drop=True)
        if roots.empty:
            raise OpTraceFormatError(path, f"{label} holds no operator events")
        roots["phase"] = _phases(roots)
        times = _device_times(dev, roots) if dev is not None else _host_times(roots)
        roots["kernels"], roots["duration_us"], roots["gap_us"] = times
        step_id = label.split("#", 1)[1] if label.startswith("ProfilerStep#") else "all"
        table = _table(path, roots, nest, f"kineto:{model}:{step_id}", device, model)
        tables.append(op_trace.validate(table, path))
    return tables


def _select_step(path: Path, steps: pd.DataFrame, roots: pd.DataFrame,
                 step: int | None) -> tuple[str, pd.DataFrame]:
    """The chosen iteration's label and its top-level ops (those starting inside its range)."""
    if steps.empty:
        if step is not None:
            raise OpTraceFormatError(path, f"step {step} requested but the trace has no ProfilerStep ranges",
                                     field="step")
        return "all", roots
    steps = steps.assign(n=steps["name"].str.extract(_STEP.pattern)[0].astype(int),
                         end=steps["ts"] + steps["dur"]).sort_values("ts")
    ts = roots["ts"].to_numpy()

    def inside(s) -> np.ndarray:
        return (ts >= s.ts) & (ts < s.end)

    if step is not None:
        chosen = steps[steps["n"] == int(step)]
        if chosen.empty:
            have = names([int(n) for n in steps["n"]])
            raise OpTraceFormatError(path, f"no ProfilerStep#{step} in the trace (steps: {have})", field="step")
        s = chosen.iloc[0]
        return s["name"], roots[inside(s)]
    bwd = roots["backward_root"].to_numpy()
    stats = [(s, inside(s)) for s in steps.itertuples()]
    training = any((m & bwd).any() for _, m in stats)
    for s, m in reversed(stats):
        if m.any() and (not training or (m & bwd).any()):
            return s.name, roots[m]
    raise OpTraceFormatError(path, "no ProfilerStep range holds operator events", field="step")
