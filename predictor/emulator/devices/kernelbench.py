"""KernelBench: real forward times of single ops (level 1) and whole small models (level 3) on
nine GPU types, with the exact PyTorch code of each problem.

Why: it is the one source that times the same code on many modern GPUs (T4 to L40S), so it
both trains the kernel model on Ampere/Ada parts (level 1: one op = one kernel problem) and
checks whole forward passes leave-one-GPU-out (level 3), where nothing else does.

Data (``calibration/kernelbench``, see its README): ``kernelbench_timings.csv``, rows with
``config == "torch"`` (eager PyTorch); ``hardware`` (``torch.cuda.get_device_name()``) names the
GPU through the catalogue's aliases (AMD rows are skipped and counted: we emulate NVIDIA parts).
Time = ``mean_ms`` of 100 calls (CUDA events, 3 warm-ups, no L2 flush), a *call* time: launch
overhead included. Each problem file (``problems_<set>/<level>/<problem>``) is captured on the meta
device by :func:`predictor.emulator.capture.model_file.capture_model_file` in inference mode (forward under
``no_grad``, float32, what KernelBench timed) — **this runs the problem files' code** (KernelBench,
MIT licence), as ``--model-file`` does for a user's file: in a child process under the same time
and memory limits (:mod:`predictor.emulator.capture.model_process`). Captures are cached in one Parquet file.

Level-1 kernel rows: a problem whose forward is exactly one kernel problem of a class the kernel
model covers (the others: several kernels, e.g. a fused loss, or an uncovered op) becomes a row
of the kernel table (``dataset`` kernelbench, ``math``: TF32 for convolutions on GPUs with TF32 —
cuDNN's default — else FP32; float32 matmuls stay FP32, PyTorch's default). Rows below
``FLOOR_FACTOR`` × the GPU's 1st-percentile time sit on the call floor and are ``censored``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import InputError, short
from predictor.emulator.devices.kernel_data import COLUMNS, FLOOR_FACTOR, read_table

TIMINGS = "kernelbench_timings.csv"
TIMING_COLUMNS = ("problem_set", "source_dir", "config", "level", "problem", "hardware", "mean_ms", "std_ms", "min_ms")
LEVELS = ("level1", "level3")
SKIPPED_VENDORS = ("AMD",)


def load_timings(root: str | Path, levels: tuple[str, ...] = LEVELS) -> pd.DataFrame:
    """Eager-PyTorch rows of ``levels``: problem_set, level, problem, device (catalogue name),
    hardware, host (the result folder: one machine), measured_us, std_us, origin;
    ``attrs["excluded"]`` counts what was left out."""
    path = Path(root) / TIMINGS
    raw = read_table(path, TIMING_COLUMNS, "KernelBench timings file", dtype=str)
    raw["line"] = np.arange(len(raw)) + 2
    rows = raw[(raw["config"] == "torch") & raw["level"].isin(levels)]
    excluded: dict[str, int] = {}
    devices = []
    for hw in rows["hardware"]:
        if str(hw).split()[0] in SKIPPED_VENDORS:
            devices.append(None)
            excluded[f"{hw} (not NVIDIA)"] = excluded.get(f"{hw} (not NVIDIA)", 0) + 1
            continue
        try:
            devices.append(canonical_gpu_type(str(hw)))
        except UnknownGpuTypeError:
            devices.append(None)
            excluded[f"{hw} (not in the GPU catalogue)"] = excluded.get(f"{hw} (not in the GPU catalogue)", 0) + 1
    rows = rows.assign(device=devices)
    rows = rows[rows["device"].notna()]
    values = rows[["mean_ms", "std_ms"]].apply(pd.to_numeric, errors="coerce")
    bad = ~(values["mean_ms"] > 0) | ~np.isfinite(values["mean_ms"])
    if bad.any():
        r = rows[bad].iloc[0]
        raise InputError(f"{path}: line {r['line']}: column 'mean_ms': expected a positive number, "
                         f"got {short(r['mean_ms'])}")
    out = pd.DataFrame({"problem_set": rows["problem_set"], "level": rows["level"], "problem": rows["problem"],
                        "device": rows["device"], "hardware": rows["hardware"], "host": rows["source_dir"],
                        "measured_us": values["mean_ms"] * 1e3, "std_us": values["std_ms"] * 1e3,
                        "origin": [f"{path}:{n}" for n in rows["line"]]}).reset_index(drop=True)
    out.attrs["excluded"] = excluded
    return out


def host_agreement(timings: pd.DataFrame) -> pd.DataFrame:
    """How well one real measurement predicts another of the same problem on the same GPU type
    timed on another machine: per level, GPU and pair of hosts, the problems both timed (n), the
    median |t_a / t_b − 1| and the median t_a / t_b — the error floor of any emulator that knows the
    GPU but not the machine."""
    out = []
    for (level, device, problem_set), g in timings.groupby(["level", "device", "problem_set"], sort=True):
        table = g.pivot_table(index="problem", columns="host", values="measured_us", aggfunc="median")
        hosts = sorted(table.columns)
        for i, a in enumerate(hosts):
            for b in hosts[i + 1:]:
                ratio = (table[a] / table[b]).dropna()
                if len(ratio):
                    out.append({"level": level, "device": device, "problem_set": problem_set, "host_a": a,
                                "host_b": b, "n": len(ratio), "median_abs": float((ratio - 1).abs().median()),
                                "median_ratio": float(ratio.median())})
    return pd.DataFrame(out, columns=["level", "device", "problem_set", "host_a", "host_b", "n", "median_abs",
                                      "median_ratio"])


def problem_path(root: str | Path, problem_set: str, level: str, problem: str) -> Path:
    return Path(root) / f"problems_{problem_set}" / level / problem


def sequences(root: str | Path, timings: pd.DataFrame, cache: Path | None = None,
              progress: bool = True) -> tuple[dict[tuple[str, str, str], pd.DataFrame], dict[str, str]]:
    """The forward op sequence of every problem in ``timings`` (key: problem_set, level,
    problem), captured once and cached in ``cache`` (Parquet; a problem that cannot be captured is
    listed with its one-line reason, also cached, and left out)."""
    from tqdm import tqdm

    from predictor.emulator.capture import cache as capture_cache
    from predictor.emulator.capture.model_file import ModelFileError
    from predictor.emulator.capture.model_process import capture_files

    have: dict[tuple[str, str, str], pd.DataFrame] = {}
    failed: dict[str, str] = {}
    old = capture_cache.read(cache)  # None: absent, or captured by other code (then redone)
    if old is not None:
        for cid, t in old.groupby("config_id", sort=False):
            key = tuple(str(cid).split("|"))
            if t["op"].iloc[0] == "<failed>":
                failed["/".join(key)] = str(t["source"].iloc[0])
            else:
                have[key] = t.reset_index(drop=True)
    todo = sorted({(r.problem_set, r.level, r.problem) for r in timings.itertuples()} - set(have)
                  - {tuple(k.split("/")) for k in failed})
    new = []
    outcomes = capture_files([str(problem_path(root, *key)) for key in todo], inference=True)  # in a child
    for key, (_, outcome) in tqdm(zip(todo, outcomes), total=len(todo), desc="capturing KernelBench problems",
                                  unit="file", disable=not progress or not todo):
        cid = "|".join(key)
        if isinstance(outcome, ModelFileError):
            failed["/".join(key)] = str(outcome)
            trace = _failure_row(cid, str(outcome))
        else:
            trace = outcome.assign(config_id=cid)
        if trace["op"].iloc[0] != "<failed>":
            have[key] = trace
        new.append(trace)
    if new and cache is not None:
        capture_cache.write(pd.concat(([old] if old is not None else []) + new, ignore_index=True), cache)
    return have, failed


def _failure_row(config_id: str, reason: str) -> pd.DataFrame:
    from predictor.common.op_trace import validate

    return validate(pd.DataFrame({
        "config_id": [config_id], "device": ["meta"], "family": ["kernelbench"], "model": ["failed"], "idx": [0],
        "op": ["<failed>"], "phase": ["forward"], "input_shapes": ["[]"], "params": [[]], "flops": [0.0],
        "bytes": [0.0], "dtype": ["float32"], "batch": [1], "input_size": [0], "cpu_us": [0.0],
        "duration_us": [0.0], "gap_us": [0.0], "kernels": [0], "source": [reason[:900]]}), config_id)


def single_kernel(trace: pd.DataFrame) -> pd.DataFrame | None:
    """The one kernel problem of a level-1 forward, or None when it runs several (or none the
    kernel model covers)."""
    from predictor.emulator.devices.timing import OpArrays

    ops = OpArrays.from_trace(trace)
    problems = ops.problems
    running = int((ops.kernels > 0).sum())
    if len(problems) != 1 or running != 1:
        return None
    return problems


def kernel_rows(timings: pd.DataFrame, seqs: dict[tuple[str, str, str], pd.DataFrame]) -> pd.DataFrame:
    """Level-1 single-kernel problems as rows of the kernel table (module docstring)."""
    from predictor.emulator.devices.kernels import math_of
    from predictor.emulator.devices.specs import spec_sheets

    sheets = spec_sheets()
    single = {}
    for key, trace in seqs.items():
        if key[1] == "level1":
            p = single_kernel(trace)
            if p is not None:
                single[key] = p
    out = []
    for r in timings[timings["level"] == "level1"].itertuples():
        p = single.get((r.problem_set, r.level, r.problem))
        if p is None:
            continue
        row = p.iloc[0].to_dict()
        spec = sheets[r.device]
        math_ = str(math_of(p, spec)[0])
        out.append({"device": r.device, "dataset": "kernelbench", "op": r.problem.removesuffix(".py"),
                    "cls": row["cls"], "phase": "forward", "kernel": "forward", "math": math_,
                    "flops": float(row["flops"]), "bytes": float(row["bytes"]), "out": float(row["out"]),
                    "red": float(row["red"]), "batches": float(row["batches"]), "in_elems": float(row["in_elems"]),
                    "w_elems": float(row["w_elems"]), "half": False, "training": False,
                    "measured_us": float(r.measured_us), "censored": False, "origin": r.origin})
    rows = pd.DataFrame(out, columns=list(COLUMNS))
    if len(rows):
        floor = rows.groupby("device")["measured_us"].transform(lambda s: np.percentile(s, 1))
        rows["censored"] = rows["measured_us"] < FLOOR_FACTOR * floor
    return rows
