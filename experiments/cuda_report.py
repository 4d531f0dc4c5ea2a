"""The real-GPU check (:mod:`experiments.cuda_check`) against the emulated GPU of the same name.

Why: the check measures; this says how far the emulator is from it, where, and beside what floor.
It runs anywhere (no GPU needed: the emulator and the meta captures are CPU work), on the folder
the check wrote, so the device's minutes go to measuring only.

* **Zoo iterations**: each config's meta capture (``meta/``, captured again here when absent)
  emulated on ``emulated:<GPU>`` (plain regime, no noise; TF32 matmuls for the ``tf32`` mode)
  against the real plain iteration time (CUDA events, no profiler); median |error| per mode.
* **Breakdown** of the real traces (``ets collect --device cuda``: under the profiler, so their
  gaps hold profiler overhead too) against the emulated ones: per config, per phase (forward,
  backward, update), kernel time (Σ duration) and overhead (Σ gap); per op class, kernel time.
* **KernelBench**: each timed problem captured on the meta device in inference mode and emulated
  as :mod:`predictor.emulator.devices.endtoend` does (forward, float32, the inference host cost
  before every kernel), against the measured mean; median |error| per level beside the
  cross-harness floor: two KernelBench machines with the same GPU type disagree by this much
  (:func:`predictor.emulator.devices.kernelbench.host_agreement`, from the shared data).
* **Gradient bytes**: the meta capture's against the real model's.

Every CSV row says its ``provenance``: ``real (<device>)`` (measured by the check) or
``emulated:<GPU>``. A CPU dry run (``--device cpu``) is compared with ``--gpu`` (default H100)
only to exercise the code: those errors mean nothing, and the report says so.

Usage: ``python -m experiments.cuda_report OUT [--gpu H100] [--report DIR]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
import pandas as pd

from experiments.cuda_check import GRAD_CSV, KB_CSV, MANIFEST, META_GRAD_CSV, TRACE_CSV, ZOO_CSV, trace_dir
from experiments.shared_data import shared_dir

PHASES = ("forward", "backward", "update")


class ReportError(ValueError):
    """A check folder that cannot be reported on; the message names it."""


def _csv(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def load(out: Path) -> dict:
    path = out / MANIFEST
    if not path.exists():
        raise ReportError(f"{out}: no {MANIFEST}; run python -m experiments.cuda_check --out {out} first")
    manifest = json.loads(path.read_text())
    if manifest.get("status") == "not run":
        raise ReportError(f"{out}: the check did not run: {'; '.join(manifest.get('problems', []))}")
    return {"manifest": manifest, "zoo": _csv(out / ZOO_CSV), "grad": _csv(out / GRAD_CSV), "kb": _csv(out / KB_CSV),
            "meta_grad": _csv(out / META_GRAD_CSV), "traces": _csv(out / TRACE_CSV)}


def emulated_gpu(manifest: dict, override: str | None) -> tuple[str, str]:
    """The emulated GPU's catalogue name and a note: the measured GPU's own name, unless overridden."""
    from predictor.emulator.devices.specs import DeviceParamsError, device_key

    try:
        if override:
            return device_key(override), f"--gpu {override}"
        if manifest.get("device") == "cuda" and manifest.get("hardware"):
            return device_key(manifest["hardware"]), f"the measured GPU ({manifest['hardware']})"
    except DeviceParamsError as exc:
        raise ReportError(f"{exc}; name the emulated GPU with --gpu") from None
    return "H100", ("a CPU dry run: compared with the emulated H100 only to exercise the report; "
                    "these errors mean nothing")


def _real_traces(out: Path, device: str) -> dict[tuple[str, str], pd.DataFrame]:
    """(config_id, mode) -> the real trace from the check's datasets."""
    from predictor.common.op_trace import device_file, read_trace_file

    found = {}
    for mode, folder in (("fp32", trace_dir(out, "fp32")), ("tf32", trace_dir(out, "tf32"))):
        path = device_file(folder, device)
        if path.exists():
            for cid, rows in read_trace_file(path).groupby("config_id", sort=False):
                found[(str(cid), mode)] = rows.sort_values("idx")
    return found


def _meta_traces(out: Path, config_ids: list[str], zoo: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The meta capture of each config: from the check's ``meta/`` dataset, else captured here."""
    from predictor.common.op_trace import device_file, read_trace_file
    from predictor.emulator.capture.opseq import capture

    path = device_file(out / "meta", "meta")
    have = {}
    if path.exists():
        have = {str(c): r for c, r in read_trace_file(path).groupby("config_id", sort=False)}
    for cid in config_ids:
        if cid in have:
            continue
        row = zoo[zoo["config_id"] == cid].iloc[0]
        config = _config_of(cid, row)
        if config is not None:
            try:
                have[cid] = capture(config, "meta")
            except Exception:  # not emulated: the report lists the configs with a real time only
                continue
    return have


def _config_of(cid: str, row):
    """The config of a check row: rebuilt from the plan (the check's configs are plan items)."""
    from experiments.cuda_check import FULL_PLAN, QUICK_PLAN, resolve

    for item in FULL_PLAN + QUICK_PLAN:
        try:
            config = resolve(item)
        except ValueError:
            continue
        if config.config_id == cid:
            return config
    return None


def _sums(trace: pd.DataFrame) -> dict[str, float]:
    out = {}
    for phase in (*PHASES, "all"):
        part = trace if phase == "all" else trace[trace["phase"] == phase]
        out[(phase, "kernel_us")] = float(part["duration_us"].sum())
        out[(phase, "gap_us")] = float(part["gap_us"].sum())
    return out


def zoo_tables(data: dict, out: Path, gpu: str, params, metas: dict) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                               pd.DataFrame]:
    """Iterations (one row per config, mode and provenance), the phase breakdown and the op
    classes (long: one row per quantity and provenance)."""
    from predictor.emulator.capture.costs import op_class
    from predictor.emulator.devices.timing import emulate

    zoo = data["zoo"]
    manifest = data["manifest"]
    real_name = f"real ({manifest.get('dataset_device', manifest.get('device'))})"
    emulated_name = f"emulated:{gpu}"
    iterations, breakdown, classes = [], [], []
    if zoo.empty or "config_id" not in zoo:
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    measured = zoo.dropna(subset=["model"]) if "model" in zoo else zoo.iloc[:0]
    real = _real_traces(out, str(manifest.get("dataset_device", "")))
    for r in measured.itertuples():
        key = {"config_id": r.config_id, "model": r.model, "mode": r.mode, "batch": r.batch}
        meta = metas.get(r.config_id)
        emulated = None
        if meta is not None:
            emulated = emulate(meta, emulated_name, params, noise=False, regime="plain", allow_tf32=r.mode == "tf32")
        if pd.notna(r.iteration_us):
            iterations.append(key | {"provenance": real_name, "iteration_us": float(r.iteration_us),
                                     "what": "CUDA events around whole iterations, no profiler"})
        if emulated is not None:
            iterations.append(key | {"provenance": emulated_name,
                                     "iteration_us": float((emulated["duration_us"] + emulated["gap_us"]).sum()),
                                     "what": "meta capture emulated (plain regime, no noise)"})
        trace = real.get((r.config_id, "tf32" if r.mode == "tf32" else "fp32"))
        for name, t in ((real_name + " profiled", trace), (emulated_name, emulated)):
            if t is None:
                continue
            for (phase, quantity), value in _sums(t).items():
                breakdown.append(key | {"provenance": name, "phase": phase, "quantity": quantity, "value_us": value})
            per_class = t.assign(op_class=[op_class(str(o)) for o in t["op"]]).groupby("op_class")
            for cls, g in per_class:
                classes.append(key | {"provenance": name, "op_class": cls, "ops": len(g),
                                      "kernel_us": float(g["duration_us"].sum())})
    return pd.DataFrame(iterations), pd.DataFrame(breakdown), pd.DataFrame(classes)


def kernelbench_table(data: dict, gpu: str, params, cache: Path, progress: bool) -> tuple[pd.DataFrame, dict]:
    """Measured and emulated KernelBench rows (long), and the problems the meta capture could not take."""
    from predictor.emulator.devices import inference_host, kernelbench
    from predictor.emulator.devices import kernels as kernel_model
    from predictor.emulator.devices.endtoend import predicted_seconds

    kb = data["kb"]
    if kb.empty or "problem" not in kb:
        return pd.DataFrame(), {}
    measured = kb[kb["provenance"].astype(str).str.startswith("real")].copy()
    root = data["manifest"].get("parts", {}).get("kernelbench", {}).get("root")
    if measured.empty or not root:
        return pd.DataFrame(), {}
    root = Path(root).parent  # the folder holding problems_<set>
    timings = measured[["problem_set", "level", "problem"]].drop_duplicates()
    seqs, failed = kernelbench.sequences(root, timings, cache, progress)
    model = kernel_model.shipped()
    host = inference_host.shipped().per_op_us(gpu)
    rows = []
    for r in measured.itertuples():
        key = {"level": r.level, "problem": r.problem}
        rows.append(key | {"provenance": str(r.provenance), "call_us": float(r.mean_ms) * 1e3,
                           "what": f"mean of {int(r.num_trials)} CUDA-event-timed calls"})
        trace = seqs.get((r.problem_set, r.level, r.problem))
        if trace is not None:
            seconds = predicted_seconds(trace, f"emulated:{gpu}", params, model, ("forward",), allow_tf32=False,
                                        inference_host_us=host)
            rows.append(key | {"provenance": f"emulated:{gpu}", "call_us": seconds * 1e6,
                               "what": "meta capture (inference) emulated, inference host cost"})
    return pd.DataFrame(rows), failed


def errors(long: pd.DataFrame, value: str, by: list[str]) -> pd.DataFrame:
    """emulated / real − 1 per item (``by``) from a long table with one real and one emulated row."""
    if long.empty:
        return pd.DataFrame()
    is_real = long["provenance"].astype(str).str.startswith("real")
    real = long[is_real].groupby(by)[value].first().rename("real")
    emulated = long[~is_real].groupby(by)[value].first().rename("emulated")
    both = pd.concat([real, emulated], axis=1).dropna().reset_index()
    both["error"] = both["emulated"] / both["real"] - 1
    return both


def gradient_table(data: dict, metas: dict) -> pd.DataFrame:
    """Per config and mode: the meta capture's gradient bytes (the check's meta part, else the meta
    trace here) beside the real model's parameter and gradient bytes and the real trace's."""
    from predictor.emulator.devices.data_parallel import gradients

    grad = data["grad"]
    if grad.empty or "config_id" not in grad:
        return pd.DataFrame()
    meta = {}
    mg = data["meta_grad"]
    if not mg.empty and "meta_grad_bytes" in mg:
        for r in mg.dropna(subset=["meta_grad_bytes"]).itertuples():
            meta[r.config_id] = (int(r.meta_grad_bytes), int(r.meta_grad_tensors))
    for cid, trace in metas.items():
        if cid not in meta:
            grads = gradients(trace)
            meta[cid] = (sum(g.nbytes for g in grads), len(grads))
    out = grad.copy()
    traces = data["traces"]
    if not traces.empty and "trace_grad_bytes" in traces:
        t = traces.dropna(subset=["trace_grad_bytes"]).drop_duplicates(["config_id", "mode"])
        out = out.merge(t[["config_id", "mode", "trace_grad_bytes", "trace_grad_tensors"]], how="left",
                        on=["config_id", "mode"])
    out["meta_grad_bytes"] = [meta.get(c, (np.nan, np.nan))[0] for c in out["config_id"]]
    out["meta_grad_tensors"] = [meta.get(c, (np.nan, np.nan))[1] for c in out["config_id"]]
    out["meta_over_params"] = out["meta_grad_bytes"] / pd.to_numeric(out["param_bytes"], errors="coerce")
    out["provenance"] = out["provenance"].astype(str) + "; meta_* from the meta capture"
    return out


def floor_table() -> pd.DataFrame:
    """KernelBench's cross-harness agreement (the same GPU type on two machines), from the shared data."""
    from predictor.emulator.devices import kernelbench

    root = shared_dir() / "calibration" / "kernelbench"
    if not (root / kernelbench.TIMINGS).exists():
        return pd.DataFrame()
    return kernelbench.host_agreement(kernelbench.load_timings(root))


def _pct(x: float) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.1%}"


def markdown(data: dict, gpu: str, note: str, iters: pd.DataFrame, breakdown: pd.DataFrame, classes: pd.DataFrame,
             kb: pd.DataFrame, kb_failed: dict, floor: pd.DataFrame, grad: pd.DataFrame) -> str:
    m = data["manifest"]
    env = m.get("environment", {})
    lines = [f"# Real-GPU check against emulated:{gpu}", "",
             f"Measured on **{m.get('hardware')}** ({m.get('dataset_device')}), driver {env.get('driver')}, "
             f"CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')}, PyTorch {env.get('torch')}; check status "
             f"**{m.get('status')}** in {m.get('seconds')} s (budget {m.get('budget_s')} s). Emulated GPU: {gpu}, "
             f"{note}.", ""]
    for name, part in m.get("parts", {}).items():
        skipped = part.get("skipped", [])
        lines.append(f"- {name}: {part.get('status')}, {part.get('done', 0)} measured, {len(skipped)} skipped"
                     + (f" ({part['reason']})" if part.get("reason") else ""))
        for s in skipped[:20]:
            lines.append(f"  - {s.get('item')}: {s.get('reason')}")
    lines.append("")
    traces = data["traces"]
    lines += ["## The CUDA capture path (`ets collect --device cuda`, the traces part)", ""]
    if traces.empty or "trace" not in traces:
        lines.append("No config was captured.")
    else:
        ok = traces[traces["provenance"].astype(str).str.startswith("real")]
        lines.append(f"{len(ok)} of {len(traces)} configs captured.")
        lines += ["", "| config | mode | ops | kernels | Σ kernel ms | Σ gap ms | seconds |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in ok.itertuples():
            lines.append(f"| {r.config_id} | {r.mode} | {r.ops:.0f} | {r.kernels:.0f} | {r.kernel_us / 1e3:.2f} | "
                         f"{r.gap_us / 1e3:.2f} | {r.seconds:.1f} |")
        for r in traces[~traces.index.isin(ok.index)].itertuples():
            lines.append(f"- not captured: {r.config_id} ({r.mode}): {r.reason}")
        for r in ok[ok["reason"].notna() & (ok["reason"].astype(str) != "")].itertuples():
            lines.append(f"- **warning** {r.config_id} ({r.mode}): {r.reason}")
    lines.append("")
    it_err = errors(iters, "iteration_us", ["config_id", "mode"]) if not iters.empty else pd.DataFrame()
    lines += ["## Zoo iterations (plain, CUDA events) against the emulator", ""]
    if it_err.empty:
        lines.append("No zoo iteration has both a real and an emulated time.")
    else:
        lines += ["| config | mode | real ms | emulated ms | error |", "|---|---|---:|---:|---:|"]
        for r in it_err.itertuples():
            lines.append(f"| {r.config_id} | {r.mode} | {r.real / 1e3:.2f} | {r.emulated / 1e3:.2f} | {r.error:+.1%} |")
        lines += ["", "| mode | n | median \\|error\\| | signed median |", "|---|---:|---:|---:|"]
        for mode, g in it_err.groupby("mode"):
            lines.append(f"| {mode} | {len(g)} | {_pct(g['error'].abs().median())} | {g['error'].median():+.1%} |")
        lines.append(f"| all | {len(it_err)} | {_pct(it_err['error'].abs().median())} | "
                     f"{it_err['error'].median():+.1%} |")
    lines.append("")
    if not breakdown.empty:
        lines += ["## Forward / backward / update: kernel time and overhead (real traces are profiled)", "",
                  "| phase | quantity | real ms (Σ configs) | emulated ms | emulated / real |",
                  "|---|---|---:|---:|---:|"]
        real = breakdown["provenance"].str.startswith("real")
        both = set(breakdown[real]["config_id"] + breakdown[real]["mode"]) & set(
            breakdown[~real]["config_id"] + breakdown[~real]["mode"])
        b = breakdown[(breakdown["config_id"] + breakdown["mode"]).isin(both)]
        for (phase, quantity), g in b.groupby(["phase", "quantity"], sort=False):
            r_sum = g[g["provenance"].str.startswith("real")]["value_us"].sum()
            e_sum = g[~g["provenance"].str.startswith("real")]["value_us"].sum()
            lines.append(f"| {phase} | {quantity} | {r_sum / 1e3:.2f} | {e_sum / 1e3:.2f} | "
                         f"{e_sum / r_sum if r_sum else float('nan'):.2f} |")
        lines.append("")
    if not classes.empty:
        lines += ["## Kernel time per op class (Σ over the configs with both)", "",
                  "| op class | real ops | real ms | emulated ms | emulated / real |", "|---|---:|---:|---:|---:|"]
        real = classes["provenance"].str.startswith("real")
        keys = set(classes[real]["config_id"] + classes[real]["mode"]) & set(
            classes[~real]["config_id"] + classes[~real]["mode"])
        c = classes[(classes["config_id"] + classes["mode"]).isin(keys)]
        table = c.assign(side=np.where(c["provenance"].str.startswith("real"), "real", "emulated")).pivot_table(
            index="op_class", columns="side", values=["kernel_us", "ops"], aggfunc="sum", fill_value=0)
        table = table.sort_values(("kernel_us", "real") if ("kernel_us", "real") in table else table.columns[0],
                                  ascending=False)
        for cls, r in table.iterrows():
            real_us, emu_us = r.get(("kernel_us", "real"), 0.0), r.get(("kernel_us", "emulated"), 0.0)
            lines.append(f"| {cls} | {int(r.get(('ops', 'real'), 0))} | {real_us / 1e3:.3f} | {emu_us / 1e3:.3f} | "
                         f"{emu_us / real_us if real_us else float('nan'):.2f} |")
        lines.append("")
    lines += ["## KernelBench (forward, mean call time) against the emulator", ""]
    kb_err = errors(kb, "call_us", ["level", "problem"]) if not kb.empty else pd.DataFrame()
    if kb_err.empty:
        lines.append("No KernelBench problem has both a real and an emulated time.")
    else:
        lines += ["| level | n | median \\|error\\| | signed median | within ±20 % |", "|---|---:|---:|---:|---:|"]
        for level, g in kb_err.groupby("level"):
            lines.append(f"| {level} | {len(g)} | {_pct(g['error'].abs().median())} | {g['error'].median():+.1%} | "
                         f"{(g['error'].abs() <= 0.2).mean():.0%} |")
    if kb_failed:
        lines.append("")
        lines.append(f"{len(kb_failed)} problem(s) the meta capture could not take (not emulated): "
                     + "; ".join(f"{k}: {v[:120]}" for k, v in list(kb_failed.items())[:10]))
    lines += ["", "**Cross-harness floor** (KernelBench: the same problems on the same GPU type, two machines — the "
              "error of an emulator that knows the GPU but not the machine):", ""]
    if floor.empty:
        lines.append("not available (no shared KernelBench timings: set ETS_SHARED).")
    else:
        lines += ["| level | GPU | set | hosts | n | median \\|ratio − 1\\| | median ratio |",
                  "|---|---|---|---|---:|---:|---:|"]
        for r in floor.itertuples():
            lines.append(f"| {r.level} | {r.device} | {r.problem_set} | {r.host_a} / {r.host_b} | {r.n} | "
                         f"{r.median_abs:.1%} | {r.median_ratio:.2f} |")
    lines += ["", "## Gradient bytes: meta capture against the real model", ""]
    if grad.empty or "meta_grad_bytes" not in grad:
        lines.append("none measured.")
    else:
        g = grad.dropna(subset=["meta_grad_bytes", "param_bytes"])
        trace = pd.to_numeric(g.get("trace_grad_bytes"), errors="coerce")
        off = g[(g["meta_grad_bytes"] != g["param_bytes"]) | (g["real_grad_bytes"] != g["param_bytes"])
                | (trace.notna() & (trace != g["param_bytes"]))]
        lines.append(f"{len(g)} configs; {len(g) - len(off)} agree exactly (the meta capture's AccumulateGrad bytes "
                     "= Σ numel × element size of the real parameters = the real gradients' bytes = the real "
                     "trace's AccumulateGrad bytes).")
        for r in off.itertuples():
            lines.append(f"- {r.config_id} ({r.mode}): meta {r.meta_grad_bytes:,.0f} B in {r.meta_grad_tensors:.0f} "
                         f"tensors; parameters {r.param_bytes:,.0f} B in {r.param_tensors} tensors; real gradients "
                         f"{r.real_grad_bytes} B in {r.real_grad_tensors} tensors; real trace "
                         f"{getattr(r, 'trace_grad_bytes', '')} B")
    return "\n".join(lines) + "\n"


def report(out: Path, report_dir: Path | None = None, gpu: str | None = None, progress: bool = True) -> Path:
    """Write the report (report.md and the long CSVs) for the check folder ``out``; returns report.md."""
    from predictor.emulator.devices.specs import load_params

    data = load(out)
    report_dir = report_dir or out / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    name, note = emulated_gpu(data["manifest"], gpu)
    params = load_params()
    zoo = data["zoo"]
    measured = zoo.dropna(subset=["model"]) if "model" in zoo else zoo.iloc[:0]
    metas = _meta_traces(out, sorted(set(measured["config_id"])) if len(measured) else [], zoo)
    iters, breakdown, classes = zoo_tables(data, out, name, params, metas)
    kb, kb_failed = kernelbench_table(data, name, params, report_dir / "kernelbench_sequences.parquet", progress)
    floor = floor_table()
    grad = gradient_table(data, metas)
    for file, table in (("zoo_iterations.csv", iters), ("zoo_breakdown.csv", breakdown),
                        ("zoo_op_classes.csv", classes), ("kernelbench.csv", kb), ("cross_harness_floor.csv", floor),
                        ("gradient_bytes.csv", grad)):
        table.to_csv(report_dir / file, index=False)
    path = report_dir / "report.md"
    path.write_text(markdown(data, name, note, iters, breakdown, classes, kb, kb_failed, floor, grad))
    return path


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("out", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--gpu", default=None, help="The emulated GPU [default: the measured GPU's catalogue name].")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the report goes [OUT/report].")
@click.option("--progress/--no-progress", default=True, show_default=True)
def main(out: Path, gpu: str | None, report_dir: Path | None, progress: bool) -> None:
    try:
        path = report(out, report_dir, gpu, progress)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(path.read_text())
    click.echo(f"report in {path.parent}")


if __name__ == "__main__":
    main()
