"""Whole forward passes and training steps on real GPUs that no fit has seen, against the emulator.

Why: the kernel model is checked kernel by kernel (leave-one-GPU-out), the host side on the
calibration targets; what a user sees is the step time of a model on a GPU, so three more real
sets — none of them a calibration target — are predicted whole:

* **KernelBench level 3** (forward under ``no_grad``, float32, eager; mean of 100 calls): each
  problem file captured on the meta device (:mod:`predictor.emulator.devices.kernelbench`), emulated
  forward-only; convolutions in TF32 on GPUs with TF32 (cuDNN's default), matmuls in FP32; the
  host an inference call's (:mod:`predictor.emulator.devices.inference_host`, fitted on level 1), the
  median of the other GPUs' hosts where the GPU is checked leave-one-GPU-out.
* **Lambda** (training throughput of NVIDIA's recipes at the recorded per-GPU batch; seconds per
  step = batch / throughput): ResNet-50 and BERT-base/large SQuAD
  (:mod:`predictor.emulator.devices.throughput_sets`); FP32 on Ampere and later runs TF32 matmuls and
  convolutions (NGC's default), FP16 as the model in float16, AMP as autocast
  (:mod:`predictor.emulator.capture.amp`). Also the *saturated* subset (each GPU, task and precision at
  its largest batch), where the uncertain batch matters least.
* **pytorch-gpu-benchmark** (forward + backward, no optimizer, batch 12, 30 torchvision CNNs,
  fp32 and whole-model fp16; ``cudnn.benchmark``): host overhead at small batch.

Out of sample: on a GPU with measured kernels the kernel model is the one fitted without that GPU
(``models``, from :func:`predictor.emulator.devices.kernels.leave_one_gpu_out`); on any other GPU the
shipped model, which never saw it (spec-derived). The host side is the shipped calibration, which
never saw these sets (its targets are Gavel, Sia, SPREAD, NeuSight and the ETS traces).
Measured wall-clock times also hold what a trace does not (input copies, the loss read-out), which
is not added here: the signed errors show it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from predictor.emulator.devices import inference_host
from predictor.emulator.devices import kernels as kernel_model
from predictor.emulator.devices.specs import DeviceParams
from predictor.emulator.devices.timing import emulate

SETS = ("KernelBench L3", "Lambda", "Lambda (saturated)", "pytorch-gpu-benchmark")
ROW_COLUMNS = ("set", "device", "workload", "precision", "batch", "measured_s", "predicted_s", "kernels", "origin")


def predicted_seconds(trace: pd.DataFrame, device: str, params: DeviceParams, model: kernel_model.KernelModel | None,
                      phases: tuple[str, ...], allow_tf32: bool, inference_host_us: float | None = None) -> float:
    """Σ(kernel + gap) over ``phases`` of the emulated trace (no noise, plain regime). An inference
    call (``inference_host_us``, :mod:`predictor.emulator.devices.inference_host`) also pays the host time
    before its first kernel: KernelBench's CUDA events bracket the call."""
    out = emulate(trace, device, params, noise=False, model=model, allow_tf32=allow_tf32,
                  inference_host_us=inference_host_us)
    part = out[out["phase"].isin(phases)]
    lead_in = inference_host_us if inference_host_us is not None and (part["kernels"] > 0).any() else 0.0
    return float((part["duration_us"] + part["gap_us"]).sum() + lead_in) / 1e6


def _model_for(device: str, models: dict, shipped: kernel_model.KernelModel | None) -> tuple:
    if device in models:
        return models[device], "leave-one-GPU-out"
    return shipped, "spec-derived" if shipped is None or device not in shipped.devices else "in-sample"


def kernelbench_rows(root: Path, params: DeviceParams, models: dict, shipped, cache: Path | None,
                     progress: bool = True, host: inference_host.InferenceHost | None = None) -> pd.DataFrame:
    from predictor.emulator.devices import kernelbench

    host = host or inference_host.shipped()

    timings = kernelbench.load_timings(root, ("level3",))
    seqs, failed = kernelbench.sequences(root, timings, cache, progress)
    out = []
    for r in tqdm(list(timings.itertuples()), desc="KernelBench level 3", unit="run", disable=not progress):
        trace = seqs.get((r.problem_set, r.level, r.problem))
        if trace is None:
            continue
        model, how = _model_for(r.device, models, shipped)
        # the host, like the kernels, out of sample: a GPU checked leave-one-GPU-out gets the others' median
        per_op = host.per_op_us(r.device, without=how == "leave-one-GPU-out")
        seconds = predicted_seconds(trace, r.device, params, model, ("forward",), allow_tf32=False,
                                    inference_host_us=per_op)
        out.append({"set": "KernelBench L3", "device": r.device, "workload": r.problem.removesuffix(".py"),
                    "precision": "fp32", "batch": 0, "measured_s": r.measured_us / 1e6, "predicted_s": seconds,
                    "kernels": how, "origin": r.origin})
    rows = pd.DataFrame(out, columns=list(ROW_COLUMNS))
    rows.attrs["failed"] = failed
    return rows


def _throughput_rows(name: str, df: pd.DataFrame, params: DeviceParams, models: dict, shipped, cache: Path | None,
                     progress: bool) -> pd.DataFrame:
    from predictor.emulator.devices.calibrate import op_sequences
    from predictor.emulator.devices.throughput_sets import configs

    df = df[~df.get("duplicate", pd.Series(False, index=df.index)).astype(bool)]
    cfgs = configs(df)
    amp = (df["precision"] == "amp").to_numpy()
    cfgs = [c.replace(dtype="amp") if a else c for c, a in zip(cfgs, amp)]
    seqs = op_sequences(cfgs, cache, progress)
    out = []
    for r, config in tqdm(list(zip(df.itertuples(), cfgs)), desc=name, unit="run", disable=not progress):
        model, how = _model_for(r.device, models, shipped)
        tf32 = bool(getattr(r, "tf32", False))
        seconds = predicted_seconds(seqs[config.config_id], r.device, params, model, tuple(r.phases), allow_tf32=tf32)
        out.append({"set": name, "device": r.device, "workload": r.workload, "precision": r.precision,
                    "batch": int(r.batch), "measured_s": float(r.seconds), "predicted_s": seconds, "kernels": how,
                    "origin": r.origin})
    return pd.DataFrame(out, columns=list(ROW_COLUMNS))


def lambda_rows(root: Path, params: DeviceParams, models: dict, shipped, cache: Path | None,
                progress: bool = True) -> pd.DataFrame:
    from predictor.emulator.devices.throughput_sets import load_lambda, saturated

    df = load_lambda(root)
    rows = _throughput_rows("Lambda", df, params, models, shipped, cache, progress)
    keep = set(saturated(df)["origin"])
    sat = rows[rows["origin"].isin(keep)].assign(set="Lambda (saturated)")
    return pd.concat([rows, sat], ignore_index=True)


def pgb_rows(root: Path, params: DeviceParams, models: dict, shipped, cache: Path | None,
             progress: bool = True) -> pd.DataFrame:
    from predictor.emulator.devices.throughput_sets import load_pytorch_gpu_benchmark

    df = load_pytorch_gpu_benchmark(root)
    df = df[df["mode"] == "train"]
    return _throughput_rows("pytorch-gpu-benchmark", df, params, models, shipped, cache, progress)


def with_errors(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    rows["error"] = rows["predicted_s"] / rows["measured_s"] - 1
    rows["abs_error"] = rows["error"].abs()
    return rows


def by_set_and_gpu(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per set × GPU: n, median |error|, signed median, share within ±20 %."""
    out = []
    for (name, device), g in rows.groupby(["set", "device"], sort=True):
        out.append({"set": name, "device": device, "kernels": g["kernels"].iloc[0], "n": len(g),
                    "median": float(g["abs_error"].median()), "signed_median": float(g["error"].median()),
                    "within_20": float((g["abs_error"] <= 0.2).mean())})
    for name, g in rows.groupby("set", sort=True):
        out.append({"set": name, "device": "all", "kernels": "", "n": len(g), "median": float(g["abs_error"].median()),
                    "signed_median": float(g["error"].median()), "within_20": float((g["abs_error"] <= 0.2).mean())})
    return pd.DataFrame(out)


def all_rows(calibration_dir: Path, params: DeviceParams, models: dict, shipped, cache_dir: Path,
             progress: bool = True) -> pd.DataFrame:
    """Every end-to-end set's rows with errors (module docstring)."""
    frames = [kernelbench_rows(calibration_dir / "kernelbench", params, models, shipped,
                               cache_dir / "kernelbench_sequences.parquet", progress),
              lambda_rows(calibration_dir / "lambda", params, models, shipped,
                          cache_dir / "throughput_sequences.parquet", progress),
              pgb_rows(calibration_dir / "pytorch_gpu_benchmark", params, models, shipped,
                       cache_dir / "throughput_sequences.parquet", progress)]
    return with_errors(pd.concat([f for f in frames if len(f)], ignore_index=True))


def markdown(table: pd.DataFrame) -> str:
    lines = ["| set | GPU | kernels | n | median \\|error\\| | signed median | within ±20 % |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.set} | {r.device} | {r.kernels} | {r.n} | {r.median:.1%} | {r.signed_median:+.1%} | "
                     f"{r.within_20:.0%} |")
    return "\n".join(lines)


def plot(rows: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [s for s in SETS if s in set(rows["set"])]
    fig, axes = plt.subplots(1, len(sets), figsize=(4 * len(sets), 4), squeeze=False)
    for ax, name in zip(axes[0], sets):
        g = rows[rows["set"] == name]
        for device, d in g.groupby("device"):
            ax.scatter(d["measured_s"] * 1e3, d["predicted_s"] * 1e3, s=8, alpha=0.6, label=device)
        lo, hi = g["measured_s"].min() * 1e3, g["measured_s"].max() * 1e3
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.2)
        ax.set(xscale="log", yscale="log", title=name, xlabel="measured ms")
    axes[0][0].set_ylabel("emulated ms")
    axes[0][-1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=120)
    plt.close(fig)
