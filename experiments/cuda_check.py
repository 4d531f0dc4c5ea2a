"""The prepared real-GPU check: real CUDA traces of the zoo and KernelBench timings, in one script.

Why: the CUDA capture path (``ets collect --device cuda``) has never run on a GPU, and no emulated
number has been checked against a GPU we profiled ourselves. A GPU is lent rarely and briefly (one
H100 or H200, about 15 minutes in all, no network), so everything is prepared here and checked on
the CPU (``--device cpu --quick``, ``tests/experiments/test_cuda_check.py``) before GPU time is spent.
``docs/cuda_check.md`` has the command to run on the device and the expected time per part.

Parts, in this order, each written to disk as it goes (a stopped run keeps what it measured):

* **zoo** — 40 zoo configs (:data:`FULL_PLAN`) across families, batches and precision modes:
  ``fp32`` (PyTorch's default: cuDNN convolutions in TF32, matmuls in FP32), ``tf32`` (matmuls in
  TF32 too), ``amp`` (autocast float16, no GradScaler) and the LLM grid's ``bfloat16``; two LLMs
  (GPT-2 medium, OPT-1.3B). Per config (b) the plain iteration time: CUDA events around whole
  training iterations (zero_grad, forward, loss, backward, optimizer step), no profiler; and (c)
  the real side of the gradient bytes: Σ numel × element size of the real model's parameters and
  of its gradients after a real backward.
* **traces** — (a) the project's own collection, :func:`predictor.emulator.collect.collect` — what
  ``ets collect --device cuda`` runs: 2 warm-ups, 5 profiled iterations, the Chrome trace read back
  per op — per config into ``traces/`` (``traces_tf32/`` for the TF32 mode: the same config ids),
  in :func:`trace_order` (the costliest, the LLMs, last): the first run of that path on a GPU.
* **kernelbench** — every level-1 and level-3 problem of ``problems_v0.1`` timed as KernelBench
  times it: ``Model(*get_init_inputs())`` and ``get_inputs()`` (seed 42), under ``torch.no_grad()``,
  3 warm-up calls, then 100 calls each bracketed by CUDA events and a synchronize; mean / std /
  min / max ms.
* **meta** (CPU work, in what the budget leaves; the report does the rest) — each config's meta
  capture into ``meta/`` (what the emulator times) and its gradient bytes as the meta capture
  records them (its ``AccumulateGrad`` ops, :func:`predictor.emulator.devices.data_parallel.gradients`:
  what the multi-GPU model's all-reduce sizes rest on), in ``gradient_bytes_meta.csv``.

Outputs under ``--out`` (default ``$OUT``, else ``./cuda_check_out``): ``manifest.json`` (GPU name,
driver, CUDA, cuDNN and PyTorch versions, the plan, each part's status and what was skipped and
why; rewritten after every item), ``traces*/`` and ``meta/`` (the dataset format ``ets collect``
writes: one Parquet per device, ``failures.jsonl``), ``zoo.csv``, ``zoo_traces.csv``,
``gradient_bytes.csv``, ``gradient_bytes_meta.csv`` and ``kernelbench.csv`` (one row per item,
appended as measured; ``provenance`` = ``real (<device>)``, or ``skipped`` with the reason).
``--budget-s`` stops cleanly: an item is started only before its part's deadline (zoo:
``--zoo-share`` of the budget; traces: ``--traces-share`` more; KernelBench: the whole budget; a
part finished early leaves its time to the next); what was not started is listed as skipped.
The comparison with the emulated GPU of the same name is :mod:`experiments.cuda_report`.

Bad input never loses the rest: a missing KernelBench folder, a problem or a config that fails to
build or run (out of memory included) is a skipped row with its one-line reason.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gc
import importlib.util
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
PROBLEM_SET = "v0.1"
LEVELS = ("level1", "level3")
KB_WARMUP, KB_TRIALS, KB_SEED = 3, 100, 42  # KernelBench's timing (its README: 3 warm-ups, 100 timed calls)
ZOO_WARMUP, ZOO_ITERATIONS = 2, 10  # plain iteration timing (the capture takes its own 2 + 5 profiled)
MANIFEST = "manifest.json"
ZOO_CSV, TRACE_CSV, GRAD_CSV, KB_CSV = "zoo.csv", "zoo_traces.csv", "gradient_bytes.csv", "kernelbench.csv"
META_GRAD_CSV = "gradient_bytes_meta.csv"
PARTS = ("zoo", "traces", "kernelbench", "meta")
MODES = ("fp32", "tf32", "amp", "bf16", "fp16")
ZOO_COLUMNS = ("provenance", "device", "config_id", "model", "family", "batch", "input_size", "dtype", "mode",
               "iteration_us", "iteration_p10_us", "iteration_p90_us", "iterations", "seconds", "reason")
TRACE_COLUMNS = ("provenance", "device", "config_id", "model", "family", "batch", "input_size", "dtype", "mode",
                 "trace", "trace_dir", "ops", "kernels", "kernel_us", "gap_us", "trace_grad_bytes",
                 "trace_grad_tensors", "seconds", "reason")
GRAD_COLUMNS = ("provenance", "device", "config_id", "mode", "param_bytes", "param_tensors", "real_grad_bytes",
                "real_grad_tensors", "reason")
META_GRAD_COLUMNS = ("provenance", "device", "config_id", "meta_grad_bytes", "meta_grad_tensors", "ops", "reason")
KB_COLUMNS = ("provenance", "device", "hardware", "problem_set", "level", "problem", "mean_ms", "std_ms", "min_ms",
              "max_ms", "num_trials", "warmup", "seconds", "reason")


@dataclass(frozen=True)
class Item:
    """One zoo config of the plan: the grid's config (model, batch, input size, dtype) and a mode."""

    model: str
    batch: int
    input_size: int
    mode: str = "fp32"  # fp32 | tf32 | amp | bf16 | fp16
    shrink: tuple[tuple[str, object], ...] = ()  # --quick only: fields replaced (num_classes, extra) to be tiny

    @property
    def key(self) -> str:
        return f"{self.model}:b{self.batch}:s{self.input_size}:{self.mode}" + (":tiny" if self.shrink else "")


# ~40 configs: every torchvision family of the zoo once in fp32 at batch 32 (or its grid's nearest),
# a batch sweep on ResNet-50, the transformer and LSTM models, TF32 and AMP on CNNs, ViT and the
# transformer, and two LLM configs (GPT-2 medium fp32 + TF32, OPT-1.3B bfloat16).
FULL_PLAN: tuple[Item, ...] = (
    Item("resnet18", 32, 128), Item("resnet50", 32, 128), Item("vgg16", 32, 128), Item("densenet121", 32, 128),
    Item("mobilenet_v2", 32, 128), Item("mobilenet_v3_large", 32, 128), Item("efficientnet_b0", 32, 128),
    Item("shufflenet_v2_x1_0", 32, 128), Item("squeezenet1_0", 32, 128), Item("inception_v3", 16, 256),
    Item("googlenet", 32, 128), Item("convnext_tiny", 32, 128), Item("regnet_x_400mf", 32, 128),
    Item("mnasnet1_0", 32, 128), Item("alexnet", 32, 128), Item("swin_t", 16, 128), Item("vit_b_16", 32, 128),
    Item("wide_resnet50_2", 16, 128), Item("efficientnet_v2_s", 16, 128),
    Item("resnet50", 2, 128), Item("resnet50", 8, 128), Item("resnet50", 128, 128), Item("resnet50", 32, 256),
    Item("transformer_encoder", 16, 128), Item("transformer_seq2seq", 16, 128), Item("lstm_lm", 32, 128),
    Item("lstm_speech", 16, 400),
    Item("resnet50", 32, 128, "tf32"), Item("vit_b_16", 32, 128, "tf32"), Item("transformer_encoder", 16, 128, "tf32"),
    Item("convnext_tiny", 32, 128, "tf32"),
    Item("resnet50", 32, 128, "amp"), Item("vit_b_16", 32, 128, "amp"), Item("transformer_encoder", 16, 128, "amp"),
    Item("efficientnet_b0", 32, 128, "amp"), Item("convnext_tiny", 32, 128, "amp"),
    Item("gpt2_medium", 4, 512), Item("gpt2_medium", 4, 512, "tf32"), Item("opt_1.3b", 2, 512, "bf16"),
    Item("gpt2_medium", 4, 512, "amp"),
)
# The traces part's order: the CUDA capture path checked first on the cheap and varied (CNNs, a
# transformer, an LSTM, each precision mode), then the rest of the plan; the budget decides how far.
TRACE_FIRST = ("resnet50:b32:s128:fp32", "transformer_encoder:b16:s128:fp32", "vgg16:b32:s128:fp32",
               "resnet50:b32:s128:tf32", "lstm_lm:b32:s128:fp32", "mobilenet_v2:b32:s128:fp32",
               "vit_b_16:b32:s128:fp32", "transformer_encoder:b16:s128:tf32", "alexnet:b32:s128:fp32",
               "squeezenet1_0:b32:s128:fp32", "convnext_tiny:b32:s128:fp32", "resnet50:b2:s128:fp32",
               "resnet50:b128:s128:fp32", "opt_1.3b:b2:s512:bf16")
# --quick (the CPU test): tiny configs (a grid config made smaller: fewer classes, one narrow layer), each
# precision mode once.
_TINY_NLP = (("num_classes", 64), ("extra", (("d_model", 32), ("ff", 64), ("heads", 2), ("layers", 1),
                                             ("size", "tiny"))))
QUICK_PLAN: tuple[Item, ...] = (Item("transformer_encoder", 2, 32, "fp32", _TINY_NLP),
                                Item("transformer_encoder", 2, 32, "amp", _TINY_NLP),
                                Item("transformer_encoder", 2, 32, "tf32", _TINY_NLP))
QUICK_KB = ("level1/19_ReLU.py", "level3/1_MLP.py")


def default_out() -> Path:
    return Path(os.environ.get("OUT") or "cuda_check_out")


def kernelbench_candidates() -> list[Path]:
    """Where the KernelBench problems may be: $ETS_SHARED (or <repo>/../shared), <repo>/shared, or a
    copy carried to the device machine under reports/cuda_check_inputs (docs/cuda_check.md)."""
    tail = Path("calibration") / "kernelbench" / f"problems_{PROBLEM_SET}"
    roots = [Path(os.environ["ETS_SHARED"])] if os.environ.get("ETS_SHARED") else []
    roots += [REPO.parent / "shared", REPO / "shared"]
    return [r / tail for r in roots] + [REPO / "reports" / "cuda_check_inputs" / f"problems_{PROBLEM_SET}"]


# ------------------------------------------------------------------------------------------------ environment

REQUIRED = ("torch", "pandas", "pyarrow", "tqdm", "torchvision")


def preflight(device: str) -> tuple[dict, list[str]]:
    """What this machine has (module versions, GPU, driver, CUDA) and the problems that stop a run,
    each said in one clear line. Imports nothing that may be missing before checking it."""
    env: dict = {"python": sys.version.split()[0], "platform": platform.platform(), "host": platform.node(),
                 "argv": sys.argv, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    problems = []
    for name in REQUIRED:
        if importlib.util.find_spec(name) is None:
            problems.append(f"python module {name!r} is not installed (nothing can be installed on the device "
                            "machine: use a Python environment that has it)")
            env[name] = None
        else:
            try:
                env[name] = getattr(__import__(name), "__version__", "?")
            except Exception as exc:  # a broken installation (e.g. a CUDA library missing)
                problems.append(f"python module {name!r} fails to import: {type(exc).__name__}: {exc}")
                env[name] = None
    env["git_commit"] = _git_commit()
    if env.get("torch") is None:
        return env, problems
    import torch

    env["torch_cuda"] = torch.version.cuda
    env["cuda_available"] = bool(torch.cuda.is_available())
    env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    env["driver"] = _driver_version()
    if env["cuda_available"]:
        env["gpu_name"] = torch.cuda.get_device_name()
        env["gpu_count"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(0)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["gpu_capability"] = f"{props.major}.{props.minor}"
        env["gpu_sm_count"] = props.multi_processor_count
    if device == "cuda" and not env["cuda_available"]:
        why = ("this PyTorch build has no CUDA (torch.version.cuda is None)" if torch.version.cuda is None
               else f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: no driver or no device "
                    f"(driver: {env['driver'] or 'not found'})")
        problems.append(f"--device cuda: {why}; nothing was measured (use --device cpu to try the script)")
    return env, problems


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    version = Path("/proc/driver/nvidia/version")
    if version.exists():
        return version.read_text().splitlines()[0].strip()
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# ------------------------------------------------------------------------------------------------ outputs

class Outputs:
    """The output folder: the manifest (rewritten atomically after every item) and the CSVs
    (appended row by row, so a stopped run keeps every finished item)."""

    def __init__(self, out: Path, manifest: dict):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.manifest = manifest
        self.save()

    def save(self) -> None:
        tmp = self.out / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=1, default=str) + "\n")
        tmp.replace(self.out / MANIFEST)

    def append(self, name: str, columns: tuple[str, ...], row: dict) -> None:
        path = self.out / name
        new = not path.exists() or path.stat().st_size == 0
        with path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow({c: row.get(c, "") for c in columns})

    def part(self, name: str) -> dict:
        return self.manifest["parts"][name]


def one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:limit]


# ------------------------------------------------------------------------------------------------ the zoo

@functools.lru_cache(maxsize=1)
def _grid() -> dict:
    from predictor.emulator.zoo import llm, nlp, vision

    out: dict = {}
    for module in (vision, nlp, llm):
        for config in module.grid():
            out.setdefault((config.model, config.batch, config.input_size, config.dtype), config)
    return out


def resolve(item: Item):
    """The zoo's config for ``item``: the grid's config of that model, batch and input size (its
    class count and extras as the grid draws them), in the mode's dtype."""
    dtype = {"fp32": "float32", "tf32": "float32", "amp": "amp", "bf16": "bfloat16", "fp16": "float16"}[item.mode]
    grid_dtype = dtype if item.mode in ("bf16", "fp16") else "float32"
    config = _grid().get((item.model, item.batch, item.input_size, grid_dtype))
    if config is not None:
        changes = {"dtype": dtype} | {k: dict(v) if k == "extra" else v for k, v in item.shrink}
        return config.replace(**changes)
    raise ValueError(f"{item.key}: no zoo config of model {item.model!r}, batch {item.batch}, input size "
                     f"{item.input_size} ({grid_dtype}) in the vision, nlp or llm grids")


@contextlib.contextmanager
def precision(mode: str):
    """``tf32``: float32 matmuls in TF32 too (cuDNN convolutions already are, PyTorch's default);
    every other mode keeps PyTorch's defaults. Restored afterwards."""
    import torch

    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def trace_dir(out: Path, mode: str) -> Path:
    return out / ("traces_tf32" if mode == "tf32" else "traces")


def _failure(folder: Path, config_id: str) -> str:
    """The last recorded failure of ``config_id`` in a dataset's failures.jsonl."""
    path = folder / "failures.jsonl"
    if not path.exists():
        return ""
    found = ""
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("config_id") == config_id:
                found = str(record.get("error", ""))
    return " ".join(found.split())[:400]


def time_iterations(config, device: str, mode: str, warmup: int, iterations: int) -> dict:
    """Whole training iterations (zero_grad, forward, loss, backward, optimizer step — the capture's
    step) without the profiler, each bracketed by CUDA events (wall clock on the CPU); with the
    parameter and real gradient bytes after a backward."""
    import torch

    from predictor.emulator.zoo.config import AMP
    from predictor.emulator.zoo.registry import build, make_optimizer

    workload = build(config, device)
    model = workload.model
    optimizer = make_optimizer(config, model.parameters())
    inputs, targets = workload.inputs(torch.device(device))
    half = torch.float16 if device == "cuda" else torch.bfloat16  # CPU autocast: bfloat16 (a dry run)

    def autocast():
        return torch.autocast(device_type=device, dtype=half) if config.dtype == AMP else contextlib.nullcontext()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = workload.loss(model(*inputs), targets)
        loss.backward()
        optimizer.step()

    cuda = device == "cuda"
    times = []
    for k in range(warmup + iterations):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            elapsed_us = start.elapsed_time(end) * 1e3
        else:
            t0 = time.perf_counter()
            step()
            elapsed_us = (time.perf_counter() - t0) * 1e6
        if k >= warmup:
            times.append(elapsed_us)
    params = list(model.parameters())
    out = {"param_bytes": sum(p.numel() * p.element_size() for p in params), "param_tensors": len(params),
           "real_grad_bytes": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
           "real_grad_tensors": sum(p.grad is not None for p in params)}
    times.sort()
    out |= {"iteration_us": statistics.median(times), "iterations": len(times),
            "iteration_p10_us": times[int(0.1 * (len(times) - 1))],
            "iteration_p90_us": times[int(0.9 * (len(times) - 1))]}
    return out


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _zoo_row(item: Item, device: str) -> tuple[dict, object]:
    from predictor.emulator.collect import dataset_device

    row: dict = {"provenance": f"real ({dataset_device(device)})", "device": dataset_device(device), "mode": item.mode}
    try:
        config = resolve(item)
    except Exception as exc:
        return row | {"provenance": "skipped", "config_id": item.key, "reason": one_line(exc)}, None
    return row | {"config_id": config.config_id, "model": config.model, "family": config.family,
                  "batch": config.batch, "input_size": config.input_size, "dtype": config.dtype}, config


def timing_item(item: Item, device: str, outputs: Outputs, *, warmup: int, iterations: int) -> dict:
    """One config's plain iteration time (no profiler) and the real side of its gradient bytes (the
    parameters' and the gradients' after a real backward); a failure is the row's reason."""
    t0 = time.perf_counter()
    row, config = _zoo_row(item, device)
    if config is not None:
        try:
            with precision(item.mode):
                measured = time_iterations(config, device, item.mode, warmup, iterations)
            row |= measured
        except Exception as exc:  # out of memory included: recorded, the next config goes on
            row |= {"provenance": "skipped", "reason": f"iteration timing: {one_line(exc)}"}
        _free(device)
    row["seconds"] = round(time.perf_counter() - t0, 3)
    outputs.append(ZOO_CSV, ZOO_COLUMNS, row)
    outputs.append(GRAD_CSV, GRAD_COLUMNS, row)
    return row


def trace_item(item: Item, device: str, outputs: Outputs) -> dict:
    """One config through the project's own collection, :func:`predictor.emulator.collect.collect` —
    what ``ets collect --device <device>`` runs — into ``traces/`` (``traces_tf32/``), written at once;
    with the real trace's op and kernel counts and its AccumulateGrad bytes."""
    from predictor.common.op_trace import device_file, read_trace_file
    from predictor.emulator.collect import collect
    from predictor.emulator.devices.data_parallel import gradients

    t0 = time.perf_counter()
    row, config = _zoo_row(item, device)
    folder = trace_dir(outputs.out, item.mode)
    row["trace_dir"] = folder.name
    if config is not None:
        try:
            with precision(item.mode):
                counts = collect([config], device, folder, flush_every=1, progress=False)
            row["trace"] = "captured" if counts["captured"] else "already there" if counts["skipped"] else "failed"
            if counts["failed"]:
                row |= {"provenance": "skipped", "reason": _failure(folder, config.config_id)}
            else:
                rows = read_trace_file(device_file(folder, row["device"]))
                rows = rows[rows["config_id"] == config.config_id]
                grads = gradients(rows)
                row |= {"ops": len(rows), "kernels": int(rows["kernels"].sum()),
                        "kernel_us": float(rows["duration_us"].sum()), "gap_us": float(rows["gap_us"].sum()),
                        "trace_grad_bytes": sum(g.nbytes for g in grads), "trace_grad_tensors": len(grads)}
                if device == "cuda" and row["kernels"] == 0:  # the importer then times ops on the host
                    row["reason"] = ("no kernel in the CUDA trace (CUPTI unavailable?): its durations are host "
                                     "times, not kernel times")
        except Exception as exc:
            row |= {"provenance": "skipped", "trace": "failed", "reason": one_line(exc)}
        _free(device)
    row["seconds"] = round(time.perf_counter() - t0, 3)
    outputs.append(TRACE_CSV, TRACE_COLUMNS, row)
    return row


# ------------------------------------------------------------------------------------------------ KernelBench

def kernelbench_problems(root: Path | None, quick: bool, limit: int | None) -> tuple[list[Path], str | None]:
    """The problem files to time, level 1 then level 3, sorted by problem number; or why none."""
    roots = [root] if root is not None else kernelbench_candidates()
    found = next((r for r in roots if r.is_dir()), None)
    if found is None:
        return [], "KernelBench problems not found: looked in " + ", ".join(str(r) for r in roots)
    if quick:
        files = [found / q for q in QUICK_KB]
    else:
        def number(p: Path) -> tuple[int, str]:
            head = p.name.split("_")[0]
            return (int(head) if head.isdigit() else 10**6, p.name)

        files = [f for level in LEVELS for f in sorted((found / level).glob("*.py"), key=number)]
    if limit is not None:
        files = files[:limit]
    if not files:
        return [], f"{found}: no problem files in {', '.join(LEVELS)}"
    return files, None


_modules = itertools.count()


def _load_problem(path: Path):
    spec = importlib.util.spec_from_file_location(f"_cuda_check_problem_{next(_modules)}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("Model", "get_inputs"):
        if not hasattr(module, name):
            raise AttributeError(f"{path.name} defines no {name}")
    return module


def time_problem(path: Path, device: str, *, warmup: int, trials: int, seconds_left: float) -> dict:
    """KernelBench's timing of one problem: seed 42, Model(*get_init_inputs()) and get_inputs() built
    on the device (KernelBench builds them on the host and moves them: the same tensors' shapes, other
    random values, minutes less), under no_grad; ``warmup`` calls, then up to ``trials`` calls each bracketed by
    CUDA events and a synchronize (fewer, never under 5, when the warm-ups show they would not fit
    in ``seconds_left``; ``num_trials`` says how many)."""
    import torch

    module = _load_problem(path)
    torch.manual_seed(KB_SEED)
    if device == "cuda":
        torch.cuda.manual_seed(KB_SEED)
    with torch.device(device):  # built where it runs: v0.1's inputs reach GiBs, slow to fill on the host
        init = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
        model = module.Model(*init).to(device)
        torch.manual_seed(KB_SEED)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    cuda = device == "cuda"
    times = []
    try:
        with torch.no_grad():
            w0 = time.perf_counter()
            for _ in range(warmup):
                model(*inputs)
                if cuda:
                    torch.cuda.synchronize()
            per_call = (time.perf_counter() - w0) / max(warmup, 1)
            if per_call * trials > seconds_left:
                trials = max(5, int(seconds_left / max(per_call, 1e-6)))
            for _ in range(trials):
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    model(*inputs)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    model(*inputs)
                    times.append((time.perf_counter() - t0) * 1e3)
    finally:
        del model, inputs
    return {"mean_ms": statistics.fmean(times), "std_ms": statistics.pstdev(times) if len(times) > 1 else 0.0,
            "min_ms": min(times), "max_ms": max(times), "num_trials": len(times), "warmup": warmup}


# ------------------------------------------------------------------------------------------------ estimate

# Assumptions of the GPU-time estimate (docs/cuda_check.md): a profiled iteration costs this many
# plain ones; a Chrome-trace event costs this much to read back (kineto.load: 105 µs measured on
# this project's 2-core CI box with a CPU trace, halved for the GPU host), and a profiled iteration
# exports this many events per top-level op (4.5 measured on a CPU trace: nested aten ops; a CUDA
# trace adds the runtime launch, the kernel and their flow); opseq.capture reads the whole trace
# once per profiled iteration (kineto.load(step=k) for each k). Building a model on the GPU and the
# first CUDA/cuDNN calls: BUILD_S per build.
PROFILED_SLOWDOWN, KINETO_US_PER_EVENT, EVENTS_PER_OP, BUILD_S = 1.5, 50.0, 8, 1.0
CAPTURE_WARMUP, CAPTURE_ITERATIONS = 2, 5  # opseq.capture's defaults on a real device


def estimate(plan: tuple[Item, ...], gpu: str = "H100", progress: bool = True) -> list[dict]:
    """Per config of ``plan``: its meta op count, the emulated iteration on ``gpu``, the estimated
    seconds of its plain timing (zoo part) and of its capture (traces part) on that GPU, and its
    meta capture's seconds as measured on this machine (the meta part: CPU work)."""
    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.devices.specs import load_params
    from predictor.emulator.devices.timing import emulate

    params = load_params()
    rows = []
    bar = _progress(len(plan), "estimating", "config", progress)
    for item in plan:
        try:
            config = resolve(item)
            t0 = time.perf_counter()
            meta = capture(config, "meta")
            meta_s = time.perf_counter() - t0
            emulated = emulate(meta, f"emulated:{gpu}", params, noise=False, allow_tf32=item.mode == "tf32")
            iteration_s = float((emulated["duration_us"] + emulated["gap_us"]).sum()) / 1e6
            ops = len(meta)
            events = CAPTURE_ITERATIONS * ops * EVENTS_PER_OP  # one exported trace
            capture_s = ((CAPTURE_WARMUP + CAPTURE_ITERATIONS * PROFILED_SLOWDOWN) * iteration_s + BUILD_S
                         + CAPTURE_ITERATIONS * events * KINETO_US_PER_EVENT / 1e6)
            plain_s = (ZOO_WARMUP + ZOO_ITERATIONS) * iteration_s + BUILD_S
            if config.dtype == "amp":
                capture_s = 0.0  # refused at once: AMP is captured on the meta device only
            rows.append({"item": item.key, "config_id": config.config_id, "ops": ops,
                         "emulated_iteration_ms": round(iteration_s * 1e3, 2), "zoo_s": round(plain_s, 2),
                         "traces_s": round(capture_s, 2), "meta_part_s_here": round(meta_s, 2)})
        except Exception as exc:
            rows.append({"item": item.key, "error": one_line(exc)})
        bar.update(1)
    bar.close()
    return rows


# ------------------------------------------------------------------------------------------------ the run

def _clock() -> float:
    """Seconds on the budget's clock (one place, so a test can run the budget on a clock of its own)."""
    return time.monotonic()


@contextlib.contextmanager
def busy_cpu_allowed(enabled: bool):
    """CPU profiles kept however busy the machine (a dry run's timings do not matter); restored after."""
    from predictor.emulator.capture import disturbance

    old = disturbance.DISTURBANCE_LIMIT
    if enabled:
        disturbance.DISTURBANCE_LIMIT = float("inf")
    try:
        yield
    finally:
        disturbance.DISTURBANCE_LIMIT = old


def _progress(total: int, desc: str, unit: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, dynamic_ncols=True)


BUDGET = "budget: not started before the part's deadline"


def run_part(name: str, items: list[tuple[str, object]], one, outputs: Outputs, deadline: float, args,
             desc: str, unit: str, budget_reason: str = BUDGET) -> None:
    """Part ``name``: ``one(item)`` for each ``(key, item)`` while its deadline allows; the rest is
    listed as skipped. ``one`` writes its own rows and returns None when it measured the item, else
    the skip record's fields (its ``reason`` at least)."""
    part = outputs.part(name)
    part |= {"status": "running", "planned": [key for key, _ in items], "done": 0, "skipped": []}
    outputs.save()
    bar = _progress(len(items), desc, unit, args.progress)
    try:
        for n, (key, item) in enumerate(items):
            if _clock() >= deadline:
                part["skipped"] += [{"item": k, "reason": budget_reason} for k, _ in items[n:]]
                part["status"] = "partial (budget)"
                break
            bar.set_postfix_str(key[:40])
            skipped = one(item)
            if skipped is None:
                part["done"] += 1
            else:
                part["skipped"].append({"item": key, **skipped})
            outputs.save()
            bar.update(1)
        else:
            part["status"] = "done"
    finally:
        bar.close()
        outputs.save()


def run_items(name: str, items: tuple[Item, ...], one, outputs: Outputs, deadline: float, args) -> None:
    """Part ``name`` over zoo configs: ``one(item)`` returns the config's row."""
    def measure(item: Item) -> dict | None:
        row = one(item)
        if row.get("provenance") != "skipped":
            return None
        return {"config_id": row.get("config_id"), "reason": row.get("reason", "")}

    run_part(name, [(i.key, i) for i in items], measure, outputs, deadline, args, f"{name} (zoo configs)", "config")


def trace_order(plan: tuple[Item, ...]) -> tuple[Item, ...]:
    """The plan's configs in the order the traces part takes them: :data:`TRACE_FIRST`, then the rest
    (LLMs last: their traces cost the most)."""
    first = [i for key in TRACE_FIRST for i in plan if i.key == key]
    rest = [i for i in plan if i not in first]
    return tuple(first + sorted(rest, key=lambda i: i.model.startswith(("gpt", "opt"))))


def run_kernelbench(device: str, outputs: Outputs, deadline: float, args, hardware: str) -> None:
    files, missing = kernelbench_problems(args.kernelbench, args.quick, args.kb_limit)
    if missing:
        outputs.part("kernelbench").update(status="skipped", reason=missing, planned=[], done=0, skipped=[])
        outputs.append(KB_CSV, KB_COLUMNS, {"provenance": "skipped", "device": device, "problem_set": PROBLEM_SET,
                                            "reason": missing})
        outputs.save()
        return
    outputs.part("kernelbench")["root"] = str(files[0].parent.parent)

    def measure(path: Path) -> dict | None:
        base = {"device": device, "hardware": hardware, "problem_set": PROBLEM_SET, "level": path.parent.name,
                "problem": path.name}
        t0 = time.perf_counter()
        skipped = None
        try:
            result = time_problem(path, device, warmup=args.kb_warmup, trials=args.kb_trials,
                                  seconds_left=deadline - _clock())
            row = base | result | {"provenance": f"real ({device})"}
        except Exception as exc:  # a problem that fails to build or run: recorded, the others go on
            frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
            row = base | {"provenance": "skipped", "reason": one_line(exc) + where}
            skipped = {"reason": row["reason"]}
        row["seconds"] = round(time.perf_counter() - t0, 3)
        outputs.append(KB_CSV, KB_COLUMNS, row)
        _free(device)
        return skipped

    run_part("kernelbench", [(f"{p.parent.name}/{p.name}", p) for p in files], measure, outputs, deadline, args,
             "KernelBench problems", "problem")


def run_meta(plan: tuple[Item, ...], outputs: Outputs, deadline: float, args) -> None:
    """The meta capture of every planned config (CPU work, last: what the budget leaves; the report
    captures the rest), and its gradient bytes: the sizes the multi-GPU model all-reduces."""
    from predictor.common.op_trace import device_file, read_trace_file
    from predictor.emulator.collect import collect
    from predictor.emulator.devices.data_parallel import gradients

    configs: dict[str, object] = {}
    for item in plan:
        with contextlib.suppress(Exception):
            config = resolve(item)
            configs.setdefault(config.config_id, config)
    folder = outputs.out / "meta"

    def measure(config) -> dict | None:
        cid = config.config_id
        row = {"provenance": "meta capture (no GPU: the op sequence the emulator times)", "device": "meta",
               "config_id": cid}
        skipped = None
        try:
            counts = collect([config], "meta", folder, flush_every=1, progress=False)
            if counts["failed"]:
                raise RuntimeError(_failure(folder, cid) or "meta capture failed")
            rows = read_trace_file(device_file(folder, "meta"))
            rows = rows[rows["config_id"] == cid]
            grads = gradients(rows)
            row |= {"meta_grad_bytes": sum(g.nbytes for g in grads), "meta_grad_tensors": len(grads),
                    "ops": len(rows)}
        except Exception as exc:
            row["reason"] = one_line(exc)
            skipped = {"reason": row["reason"]}
        outputs.append(META_GRAD_CSV, META_GRAD_COLUMNS, row)
        return skipped

    run_part("meta", list(configs.items()), measure, outputs, deadline, args, "meta captures", "config",
             budget_reason="budget: left to the report (it captures on the meta device)")


def _settings(kw: dict) -> types.SimpleNamespace:
    """The options with the --quick defaults filled in."""
    args = types.SimpleNamespace(**kw)
    quick = args.quick
    args.kb_warmup = args.kb_warmup if args.kb_warmup is not None else (1 if quick else KB_WARMUP)
    args.kb_trials = args.kb_trials if args.kb_trials is not None else (3 if quick else KB_TRIALS)
    args.zoo_warmup = args.zoo_warmup if args.zoo_warmup is not None else (1 if quick else ZOO_WARMUP)
    args.zoo_iterations = args.zoo_iterations if args.zoo_iterations is not None else (2 if quick else ZOO_ITERATIONS)
    args.out = args.out or default_out()
    args.parts = tuple(s.strip() for s in args.parts.split(",") if s.strip())
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        raise click.BadParameter(f"unknown part(s) {', '.join(sorted(unknown))}; use {', '.join(PARTS)}",
                                 param_hint="--parts")
    return args


@click.command(help=__doc__.split("\n\n")[0] + " See docs/cuda_check.md.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cuda: the real check; cpu: the same code on this CPU (a dry run of the script).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder [default: $OUT, else ./cuda_check_out].")
@click.option("--budget-s", type=float, default=420.0, show_default=True,
              help="Start no item after this many seconds; what was measured is kept.")
@click.option("--zoo-share", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="The zoo part (plain iteration times) ends by this share of the budget.")
@click.option("--traces-share", type=click.FloatRange(0, 1), default=0.3, show_default=True,
              help="The traces part (ets collect --device cuda) ends by the zoo's share plus this one; "
                   "KernelBench then has the rest, the meta part what is left after it.")
@click.option("--quick", is_flag=True, help="Tiny configs, 2 KernelBench problems, few repeats (the CPU test).")
@click.option("--parts", default=",".join(PARTS), show_default=True,
              help="Comma-separated parts to run, in this order: zoo, kernelbench, meta.")
@click.option("--kernelbench", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The problems folder (problems_v0.1) [default: $ETS_SHARED/calibration/kernelbench/"
                   "problems_v0.1, or a copy under reports/cuda_check_inputs].")
@click.option("--zoo-limit", type=click.IntRange(0), default=None, help="Only the first N zoo configs of the plan.")
@click.option("--kb-limit", type=click.IntRange(0), default=None, help="Only the first N KernelBench problems.")
@click.option("--kb-warmup", type=click.IntRange(0), default=None, help=f"Warm-up calls per problem [{KB_WARMUP}].")
@click.option("--kb-trials", type=click.IntRange(1), default=None, help=f"Timed calls per problem [{KB_TRIALS}].")
@click.option("--zoo-warmup", type=click.IntRange(0), default=None,
              help=f"Untimed iterations per config [{ZOO_WARMUP}].")
@click.option("--zoo-iterations", type=click.IntRange(1), default=None,
              help=f"Timed iterations per config [{ZOO_ITERATIONS}].")
@click.option("--allow-busy-cpu", is_flag=True,
              help="--device cpu: keep CPU profiles taken while other processes kept the machine busy (the capture "
                   "otherwise retries, then fails them); implied by --quick.")
@click.option("--preflight", is_flag=True, help="Only check the machine and print what it has.")
@click.option("--estimate", metavar="GPU", default=None,
              help="Only estimate the zoo part's seconds on GPU (e.g. H100) from meta captures and the emulator "
                   "(runs on the CPU) and print them as CSV.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bars with ETA.")
@click.pass_context
def main(ctx: click.Context, **kw) -> int:
    """Run the check; exit status 0 when it ran (even partly, within the budget), 2 when this machine
    cannot run it (said on stderr and in the manifest)."""
    code = check(_settings(kw))
    if code:
        ctx.exit(code)
    return code


def check(args: types.SimpleNamespace) -> int:
    """The check with its settings (:func:`main`'s options)."""
    if args.estimate:
        plan = QUICK_PLAN if args.quick else FULL_PLAN
        rows = estimate(plan[:args.zoo_limit] if args.zoo_limit is not None else plan, args.estimate, args.progress)
        columns = list(dict.fromkeys(k for r in rows for k in r))
        writer = csv.DictWriter(sys.stdout, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        zoo, traces = (sum(r.get(k, 0.0) for r in rows) for k in ("zoo_s", "traces_s"))
        meta = sum(r.get("meta_part_s_here", 0.0) for r in rows)
        print(f"# on {args.estimate}, {len(rows)} configs: zoo part about {zoo:.0f} s, traces part {traces:.0f} s "
              f"(all of them); meta part {meta:.0f} s on this machine's CPU", file=sys.stderr)
        return 0
    t_start = _clock()
    env, problems = preflight(args.device)
    if args.preflight or problems:
        print(json.dumps(env, indent=1, default=str))
        for line in problems:
            print(f"cuda_check: {line}", file=sys.stderr)
        if problems:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / MANIFEST).write_text(json.dumps({"status": "not run", "problems": problems, "environment": env},
                                                        indent=1, default=str) + "\n")
            return 2
        return 0
    from predictor.emulator.collect import dataset_device

    plan = QUICK_PLAN if args.quick else FULL_PLAN
    plan = plan[:args.zoo_limit] if args.zoo_limit is not None else plan
    hardware = env.get("gpu_name") if args.device == "cuda" else "cpu"
    manifest = {
        "format": "ets-cuda-check/1", "status": "running", "device": args.device,
        "dataset_device": dataset_device(args.device), "hardware": hardware, "quick": args.quick,
        "budget_s": args.budget_s, "environment": env,
        "settings": {"zoo_warmup": args.zoo_warmup, "zoo_iterations": args.zoo_iterations,
                     "capture": "predictor.emulator.collect.collect (ets collect): 2 warm-ups + 5 profiled iterations",
                     "kb_warmup": args.kb_warmup, "kb_trials": args.kb_trials, "kb_seed": KB_SEED,
                     "fp32": "PyTorch defaults: cuDNN TF32 convolutions, FP32 matmuls",
                     "tf32": "torch.backends.cuda.matmul.allow_tf32 = True as well",
                     "amp": "torch.autocast float16 (no GradScaler), as the emulator's AMP rewrite"},
        "provenance": "every CSV row: 'real (<device>)' = measured here, 'skipped' = not measured (reason given)",
        "parts": {name: {"status": "not started" if name in args.parts else "not requested"} for name in PARTS},
    }
    outputs = Outputs(args.out, manifest)
    budget_end = t_start + args.budget_s
    zoo_end = t_start + args.budget_s * args.zoo_share
    traces_end = zoo_end + args.budget_s * args.traces_share
    timing = functools.partial(timing_item, device=args.device, outputs=outputs, warmup=args.zoo_warmup,
                               iterations=args.zoo_iterations)
    trace = functools.partial(trace_item, device=args.device, outputs=outputs)
    runs = {"zoo": lambda: run_items("zoo", plan, timing, outputs, zoo_end, args),
            "traces": lambda: run_items("traces", trace_order(plan), trace, outputs, traces_end, args),
            "kernelbench": lambda: run_kernelbench(args.device, outputs, budget_end, args, hardware or ""),
            "meta": lambda: run_meta(plan, outputs, budget_end, args)}
    try:
        with busy_cpu_allowed(args.device == "cpu" and (args.allow_busy_cpu or args.quick)):
            for name in PARTS:
                if name not in args.parts:
                    continue
                t0 = _clock()
                try:
                    runs[name]()
                except Exception as exc:  # a bug of this script in one part: recorded, the other parts still run
                    outputs.part(name)["status"] = f"failed: {one_line(exc)}"
                    traceback.print_exc()
                outputs.part(name)["seconds"] = round(_clock() - t0, 1)
                outputs.save()
        manifest["status"] = ("done" if all(manifest["parts"][p]["status"] == "done" for p in args.parts)
                              else "partial")
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM inside a collection: what was measured is on disk
        manifest["status"] = "interrupted"
        raise
    finally:
        manifest["seconds"] = round(_clock() - t_start, 1)
        manifest["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        outputs.save()
    print(f"cuda_check: {manifest['status']} in {manifest['seconds']} s; results in {args.out} "
          f"(report: python -m experiments.cuda_report {args.out})")
    return 0


if __name__ == "__main__":
    main()
