"""The data-parallel step against real multi-GPU measurements, out of sample.

Why: a job's run time on N GPUs depends on where its GPUs sit, and the simulator charges it the
composition of :mod:`predictor.emulator.devices.data_parallel` (per-GPU compute + the gradient all-reduces
backward does not hide) with :mod:`predictor.emulator.devices.collectives` (the ring over the
placement's slowest link). Its communication is **spec-derived**: link parameters fitted on
Vidur and DeepBench collectives (``collectives.json``), links from the GPU catalogue. This module
predicts every multi-GPU row of the sets of :mod:`predictor.emulator.devices.placement_sets` with it and
says how far it lands, beside perfect scaling (the N-GPU step = the 1-GPU step).

What each prediction is made of, and why it is out of sample:

* **compute per GPU**: the set's own 1-GPU measurement of the same model at the same per-GPU
  batch (Sia: placement ``1``; Lambda: the same GPU's 1-GPU run, same precision and config
  version; Gavel: the job's 1-GPU throughput). The row being predicted is never read. NeuSight has
  no 1-GPU label on its dp GPU: there compute is the emulated forward + backward (noise-free,
  shipped parameters; A100-SXM4's host parameters are the median of the calibrated GPUs).
* **backward share** of that compute: the **emulated phases** of the config's meta-device capture
  on the set's GPU (backward ÷ forward + backward + update), because backward is what the
  all-reduces overlap with.
* **gradient bytes**: the config's own ``AccumulateGrad`` ops (capture on the meta device, no
  download), packed into DDP's buckets (:func:`data_parallel.gradient_buckets`).
* **communication**: :func:`collectives.allreduce_on_nodes` with the shipped fit (none of these
  sets was fitted), the catalogue's links of the set's GPU and, where a Sia cluster's hardware
  documentation states it, the node's network line rate. Nothing is fitted here.

Each row is labelled ``spec-derived communication``. Models the zoo cannot rebuild (Sia's
deepspeech2, ncf, yolov3; gpt_pmp is synthetic) are counted, not predicted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.emulator.devices import placement_sets as sets
from predictor.emulator.devices.collectives import (
    CommParams,
    allreduce_on_nodes,
    gpu_interconnect,
    override_interconnect,
    shipped_params,
)
from predictor.emulator.devices.data_parallel import gradient_buckets, overlapped_step

LABEL = "spec-derived communication"
SIA_TARGET, SIA_SPREAD_TARGET, SPEARMAN_TARGET = 0.12, 0.20, 0.9
LAMBDA_TARGET, TWIN_TARGET, GAVEL_TARGET, NEUSIGHT_TARGET = 0.10, 0.10, 0.25, 0.10
LAMBDA_GPUS = (2, 4, 8)
ROW_COLUMNS = ("set", "group", "device", "workload", "batch", "placement", "gpus", "nodes", "measured_s",
               "predicted_s", "perfect_s", "compute_s", "allreduce_s", "measured_sync_s", "label", "origin")


def predict_step(compute_s: float, backward_share: float, buckets: list[int], counts: tuple[int, ...],
                 interconnect, params: CommParams, network_bps: float = np.inf) -> tuple[float, float]:
    """(step seconds, Σ all-reduce seconds) of a DDP step whose 1-GPU step takes ``compute_s``,
    ``backward_share`` of it in backward, on GPUs spread as ``counts`` per node."""
    seconds = allreduce_on_nodes(np.asarray(buckets, dtype=float), tuple(counts), interconnect, params, network_bps)
    backward = backward_share * compute_s
    return overlapped_step(backward, compute_s - backward, buckets, seconds), float(np.sum(seconds))


class Phases:
    """Op sequences (captured once on the meta device, cached in ``cache``), their DDP buckets and
    their emulated phases per (config, GPU)."""

    def __init__(self, cache: Path | None = None, progress: bool = False):
        from predictor.emulator.devices.specs import load_params

        self.cache, self.progress, self.params = cache, progress, load_params()
        self._seqs: dict = {}
        self._phases: dict = {}
        self._buckets: dict = {}

    def capture(self, configs) -> None:
        from predictor.emulator.capture.quiet import quiet_profiler
        from predictor.emulator.devices.calibrate import op_sequences

        todo = list({c.config_id: c for c in configs if c.config_id not in self._seqs}.values())
        if todo:
            with quiet_profiler():
                self._seqs.update(op_sequences(todo, self.cache, progress=False))

    def buckets(self, config) -> list[int]:
        if config.config_id not in self._buckets:
            self.capture([config])
            self._buckets[config.config_id] = gradient_buckets(self._seqs[config.config_id])
        return self._buckets[config.config_id]

    def phases(self, config, device: str, allow_tf32: bool = False) -> dict:
        """Emulated forward / backward / update seconds (Σ kernel + gap per phase, no noise, plain
        regime) of ``config`` on ``device``."""
        from predictor.emulator.devices.timing import emulate

        key = (config.config_id, device, allow_tf32)
        if key not in self._phases:
            self.capture([config])
            out = emulate(self._seqs[config.config_id], f"emulated:{device}", self.params, noise=False,
                          allow_tf32=allow_tf32)
            step = (out["duration_us"] + out["gap_us"]).groupby(out["phase"]).sum()
            self._phases[key] = {p: float(step.get(p, 0.0)) / 1e6 for p in ("forward", "backward", "update")}
        return self._phases[key]

    def backward_share(self, config, device: str, allow_tf32: bool = False) -> float:
        p = self.phases(config, device, allow_tf32)
        return p["backward"] / (p["forward"] + p["backward"] + p["update"])


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


def _progress(items, desc: str, progress: bool):
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="row", disable=not progress)


# --- Sia -----------------------------------------------------------------------------------------


def sia_predictions(rows: pd.DataFrame, phases: Phases, params: CommParams | None = None,
                    set_name: str = "Sia placements", progress: bool = False) -> pd.DataFrame:
    """Every multi-GPU row of a Sia table (:func:`placement_sets.load_sia_placements`) whose model
    and cluster have a 1-GPU row at its local batch; the others are counted in
    ``attrs["no_single"]``. The 1-GPU rows are only read, never predicted."""
    from predictor.common.gpus import entry
    from predictor.emulator.devices.measurements import workload_config

    params = params or shipped_params()
    rows = rows.copy()
    rows.attrs = {}  # pandas deep-copies attrs on every operation
    singles = rows[rows["gpus"] == 1].groupby(["model", "cluster", "local_bsz"])["step_time"].median().to_dict()
    multi = rows[rows["gpus"] > 1]
    configs = {key: workload_config(*key) for key in set(zip(multi["workload"], multi["local_bsz"].astype(int)))}
    phases.capture(list(configs.values()))  # one batch: the cache file is read and written once
    out, missing = [], 0
    for r in _progress(list(multi.itertuples()), set_name, progress):
        t1 = singles.get((r.model, r.cluster, r.local_bsz))
        if t1 is None:
            missing += 1
            continue
        cluster = sets.SIA_CLUSTERS[r.cluster]
        config = configs[(r.workload, int(r.local_bsz))]
        share = phases.backward_share(config, cluster.gpu)
        line_rate = cluster.network_gbps * 1e9 / 8 if cluster.network_gbps else np.inf
        total, allreduce = predict_step(float(t1), share, phases.buckets(config), r.counts,
                                        gpu_interconnect(entry(cluster.gpu)), params, line_rate)
        out.append({"set": set_name, "group": f"{r.cluster} ({cluster.gpu})", "device": cluster.gpu,
                    "workload": r.workload, "batch": int(r.local_bsz), "placement": r.placement, "gpus": r.gpus,
                    "nodes": r.nodes, "measured_s": r.step_time, "predicted_s": total, "perfect_s": float(t1),
                    "compute_s": float(t1), "allreduce_s": allreduce, "measured_sync_s": r.sync_time, "label": LABEL,
                    "origin": r.origin})
    df = _frame(out)
    df.attrs["no_single"] = missing
    return df


def spearman_by_count(rows: pd.DataFrame) -> pd.Series:
    """Spearman's rho between predicted and measured step time over the placements of one
    (cluster, model, batch, GPU count), for groups of ≥ 3 placements whose predictions are not
    all equal (the order is what a placement policy uses)."""
    from scipy.stats import spearmanr

    out = {}
    for key, g in rows.groupby(["group", "workload", "batch", "gpus"]):
        if len(g) >= 3 and g["predicted_s"].nunique() > 1 and g["measured_s"].nunique() > 1:
            out[key] = float(spearmanr(g["predicted_s"], g["measured_s"]).statistic)
    return pd.Series(out, dtype=float)


# --- Lambda --------------------------------------------------------------------------------------


REFERENCE_KEYS = ["device", "task", "precision", "batch", "config_version"]


def _lambda_reference(groups: dict, r) -> pd.DataFrame:
    """The 1-GPU runs a multi-GPU run is compared with: same GPU, task, precision, per-GPU batch
    and config version (``groups``: the 1-GPU runs grouped by ``REFERENCE_KEYS``); from the same
    provider's systems when it has one (LambdaCloud_, Linode_, AWS p3), else from any."""
    same = groups.get(tuple(getattr(r, k) for k in REFERENCE_KEYS))
    if same is None:
        return pd.DataFrame()
    prefix = {"aws": "p3.", "LambdaCloud": "LambdaCloud_", "Linode": "Linode_"}.get(r.provider)
    if prefix:
        own = same[same["system"].str.startswith(prefix)]
    else:
        own = same[~same["system"].str.startswith(("p3.", "LambdaCloud_", "Linode_"))]
    return own if len(own) else same


def lambda_predictions(multi: pd.DataFrame, single: pd.DataFrame, phases: Phases,
                       params: CommParams | None = None, progress: bool = False) -> pd.DataFrame:
    """Lambda multi-GPU runs (:func:`placement_sets.load_lambda_multi`, all GPUs on one server)
    against ``single`` (``throughput_sets.load_lambda``): compute = the median 1-GPU step of the
    reference runs; links: the catalogue's, the ``…_trt`` twin without bridges as ``pcie``.
    ``attrs["excluded_counts"]`` counts the runs left out and why."""
    from predictor.common.gpus import catalog
    from predictor.emulator.devices.throughput_sets import configs

    params = params or shipped_params()
    gpus = catalog()
    single = single[~single["duplicate"]].copy()
    single.attrs = {}
    groups = {key: g for key, g in single.groupby(REFERENCE_KEYS)}
    frame = multi.assign(source="lambda")[["source", "workload", "batch", "precision"]]
    row_configs = [c.replace(dtype="amp") if p == "amp" else c for c, p in zip(configs(frame), multi["precision"])]
    phases.capture(row_configs)
    out, counts = [], {}

    def skip(reason: str) -> None:
        counts[reason] = counts.get(reason, 0) + 1

    for r, config in zip(_progress(list(multi.itertuples()), "Lambda", progress), row_configs):
        if r.gpus > 8:
            skip(f"{r.gpus} GPUs: the servers' layout is not recorded")
            continue
        gpu = gpus.get(r.device)
        if gpu is None or gpu.interconnect is None:
            skip(f"{r.device}: no [interconnect] in the GPU catalogue")
            continue
        ref = _lambda_reference(groups, r)
        if ref.empty:
            skip("no 1-GPU run of the GPU at the same batch, precision and config version")
            continue
        tf32 = r.precision == "fp32" and gpu.cc_major >= 8
        link = override_interconnect(gpu, "pcie") if r.twin == "pcie" else gpu.interconnect
        t1 = float(ref["seconds"].median())
        total, allreduce = predict_step(t1, phases.backward_share(config, r.device, tf32), phases.buckets(config),
                                        (int(r.gpus),), link, params)
        out.append({"set": "Lambda", "group": r.system, "device": r.device, "workload": f"{r.workload} {r.precision}",
                    "batch": int(r.batch), "placement": str(r.gpus), "gpus": int(r.gpus), "nodes": 1,
                    "measured_s": float(r.seconds), "predicted_s": total, "perfect_s": t1, "compute_s": t1,
                    "allreduce_s": allreduce, "measured_sync_s": np.nan, "label": LABEL, "origin": r.origin,
                    "twin": r.twin, "twin_key": r.twin_key, "config_version": r.config_version})
    df = pd.DataFrame(out, columns=[*ROW_COLUMNS, "twin", "twin_key", "config_version"])
    df.attrs["excluded_counts"] = counts
    return df


def lambda_twins(rows: pd.DataFrame) -> pd.DataFrame:
    """NVLink ÷ no-NVLink speed of the twin servers (step without ÷ step with bridges), measured
    and predicted, per (twin, GPUs, task and precision, batch, config version)."""
    twins = rows.dropna(subset=["twin"])
    keys = ["twin_key", "gpus", "workload", "batch", "config_version"]
    out = []
    for key, g in twins.groupby(keys):
        nv, pc = g[g["twin"] == "nvlink"], g[g["twin"] == "pcie"]
        if len(nv) and len(pc):
            out.append(dict(zip(keys, key)) | {
                "measured": float(pc["measured_s"].median() / nv["measured_s"].median()),
                "predicted": float(pc["predicted_s"].median() / nv["predicted_s"].median())})
    return pd.DataFrame(out, columns=[*keys, "measured", "predicted"])


# --- Gavel ---------------------------------------------------------------------------------------


def gavel_predictions(rows: pd.DataFrame, phases: Phases, params: CommParams | None = None) -> pd.DataFrame:
    """Gavel's consolidated (all N GPUs on one server) and unconsolidated (one GPU on each of N
    servers: the placement is not recorded, this is the spread extreme) throughputs: one row per
    placement, step = 1 / steps per second, compute = the job's 1-GPU step; the network is the
    shipped fit's (Gavel's servers' network is not recorded)."""
    from predictor.common.gpus import entry
    from predictor.emulator.devices.measurements import workload_config

    params = params or shipped_params()
    row_configs = [workload_config(w, int(b)) for w, b in zip(rows["workload"], rows["batch"])]
    phases.capture(row_configs)
    out = []
    for r, config in zip(rows.itertuples(), row_configs):
        t1 = 1.0 / r.single_steps_s
        share, buckets = phases.backward_share(config, r.device), phases.buckets(config)
        link = gpu_interconnect(entry(r.device))
        for name, counts, steps in (("consolidated", (r.gpus,), r.consolidated_steps_s),
                                    ("unconsolidated", (1,) * r.gpus, r.unconsolidated_steps_s)):
            total, allreduce = predict_step(t1, share, buckets, counts, link, params)
            out.append({"set": "Gavel", "group": name, "device": r.device, "workload": r.workload,
                        "batch": int(r.batch), "placement": "+".join(map(str, counts)), "gpus": int(r.gpus),
                        "nodes": len(counts), "measured_s": 1.0 / steps, "predicted_s": total, "perfect_s": t1,
                        "compute_s": t1, "allreduce_s": allreduce, "measured_sync_s": np.nan, "label": LABEL,
                        "origin": r.origin})
    return _frame(out)


def gavel_ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Consolidated ÷ unconsolidated throughput (= unconsolidated ÷ consolidated step), measured
    and predicted, per (GPU, job, GPUs)."""
    keys = ["device", "workload", "batch", "gpus"]
    wide = rows.pivot_table(index=keys, columns="group", values=["measured_s", "predicted_s"], aggfunc="first")
    out = pd.DataFrame({
        "measured": wide[("measured_s", "unconsolidated")] / wide[("measured_s", "consolidated")],
        "predicted": wide[("predicted_s", "unconsolidated")] / wide[("predicted_s", "consolidated")]})
    return out.reset_index()


# --- NeuSight ------------------------------------------------------------------------------------


def neusight_predictions(rows: pd.DataFrame, phases: Phases, params: CommParams | None = None) -> pd.DataFrame:
    """NeuSight's dp labels: compute = the emulated forward + backward at the per-GPU batch on the
    label's GPU (the label has no optimizer step and the GPU no 1-GPU label), all GPUs on one
    NVSwitch board."""
    from predictor.common.gpus import entry
    from predictor.emulator.devices.measurements import workload_config

    params = params or shipped_params()
    out = []
    for r in rows.itertuples():
        config = workload_config(r.workload, int(r.per_gpu_batch), int(r.seq))
        p = phases.phases(config, r.device)
        buckets = phases.buckets(config)
        seconds = allreduce_on_nodes(np.asarray(buckets, dtype=float), (int(r.gpus),),
                                     gpu_interconnect(entry(r.device)), params)
        compute = p["forward"] + p["backward"]
        total = overlapped_step(p["backward"], p["forward"], buckets, seconds)
        out.append({"set": "NeuSight dp", "group": r.device, "device": r.device, "workload": r.workload,
                    "batch": int(r.per_gpu_batch), "placement": str(r.gpus), "gpus": int(r.gpus), "nodes": 1,
                    "measured_s": r.measured_s, "predicted_s": total, "perfect_s": compute, "compute_s": compute,
                    "allreduce_s": float(np.sum(seconds)), "measured_sync_s": np.nan,
                    "label": f"{LABEL}; compute emulated", "origin": r.origin})
    return _frame(out)


# --- all sets, summary, report -------------------------------------------------------------------


def run(calibration_dir: Path, cache: Path | None = None, progress: bool = True) -> dict:
    """Every set under ``calibration_dir``: {"rows": all predicted rows, "twins", "gavel_ratios",
    "notes"}. A set whose files are absent is skipped and named in the notes."""
    from predictor.emulator.devices.measurements import NEUSIGHT_DIR, MeasurementError
    from predictor.emulator.devices.throughput_sets import load_lambda

    calibration_dir = Path(calibration_dir)
    phases = Phases(cache, progress)
    parts, notes = [], []
    twins = ratios = pd.DataFrame()
    sia = calibration_dir / sets.SIA_DIR
    if sia.is_dir():
        placements = sets.load_sia_placements(sia)
        rows = sia_predictions(placements, phases, progress=progress)
        parts.append(rows)
        if any(sia.glob("*/scalability-*.csv")):
            scal = sets.load_sia_scalability(sia)
            scal = scal[[n <= HARDWARE_NODES[c] for n, c in zip(scal["nodes"], scal["cluster"])]]
            singles = placements[placements["gpus"] == 1]
            parts.append(sia_predictions(pd.concat([singles, scal[scal["gpus"] > 1]], ignore_index=True), phases,
                                         set_name="Sia scalability", progress=progress))
        unmodelled = placements.attrs["unmodelled"]
        notes.append(f"Sia placements: {sum(unmodelled.values()):,} rows without a model of ours "
                     f"({', '.join(f'{m} {n:,}' for m, n in sorted(unmodelled.items()))}: not in the zoo, nor in "
                     f"torchvision / timm / transformers; gpt_pmp is synthetic); {rows.attrs['no_single']:,} "
                     "multi-GPU rows without a 1-GPU row at their local batch.")
    else:
        notes.append(f"Sia placements: {sia} not found, set skipped.")
    lam = calibration_dir / "lambda"
    if (lam / "lambda_runs.csv").is_file():
        rows = lambda_predictions(sets.load_lambda_multi(lam), load_lambda(lam), phases, progress=progress)
        parts.append(rows)
        twins = lambda_twins(rows)
        left = rows.attrs["excluded_counts"]
        notes.append(f"Lambda: {len(rows):,} multi-GPU runs predicted; left out: "
                     + ("; ".join(f"{n} ({why})" for why, n in sorted(left.items())) or "none") + ".")
    else:
        notes.append(f"Lambda: {lam / 'lambda_runs.csv'} not found, set skipped.")
    gavel = calibration_dir / "gavel_physical_cluster_throughputs.json"
    if gavel.is_file():
        rows = gavel_predictions(sets.load_gavel_placements(gavel), phases)
        parts.append(rows)
        ratios = gavel_ratios(rows)
    else:
        notes.append(f"Gavel: {gavel} not found, set skipped.")
    labels = calibration_dir / NEUSIGHT_DIR / "labels"
    try:
        dp = sets.load_neusight_dp(labels)
    except MeasurementError:
        dp = pd.DataFrame()
        notes.append(f"NeuSight dp: {labels} not found, set skipped.")
    if len(dp):
        parts.append(neusight_predictions(dp, phases))
    elif labels.is_dir():
        notes.append(f"NeuSight dp: no *-dp<N>.json label in {labels}, set skipped.")
    rows = pd.concat([p for p in parts if len(p)], ignore_index=True) if parts else _frame([])
    return {"rows": rows, "twins": twins, "gavel_ratios": ratios, "notes": notes}


# Nodes each Sia cluster had (the data's README): scalability rows beyond are the authors' model
HARDWARE_NODES = {"aws": 16, "azure": 5, "dgx": 2, "dgx-ext": 2, "quad": 1, "rtx": 3}


def _abs_rel(pred, real) -> pd.Series:
    return (np.asarray(pred, dtype=float) / np.asarray(real, dtype=float) - 1).__abs__()


def summary(result: dict) -> pd.DataFrame:
    """One line per target: the set, rows, the metric, ours, perfect scaling's, the target and
    whether it is met."""
    rows, out = result["rows"], []

    def add(name, n, metric, ours, base, target, sense="≤", pct=True):
        if target is None:  # informational: no target of the issue's
            out.append({"set": name, "n": int(n), "metric": metric, "ours": ours, "perfect_scaling": base,
                        "target": "–", "met": None, "pct": pct})
            return
        met = (ours <= target) if sense == "≤" else (ours >= target)
        out.append({"set": name, "n": int(n), "metric": metric, "ours": ours, "perfect_scaling": base,
                    "target": f"{sense} {target:.0%}" if pct else f"{sense} {target:g}",
                    "met": bool(met) if np.isfinite(ours) else False, "pct": pct})

    for name in ("Sia placements", "Sia scalability"):
        g = rows[rows["set"] == name]
        if not len(g):
            continue
        targeted = name == "Sia placements"  # the scalability rows are shown, not targeted
        err, base = _abs_rel(g["predicted_s"], g["measured_s"]), _abs_rel(g["perfect_s"], g["measured_s"])
        add(f"{name}, all multi-GPU rows", len(g), "median abs. error of the step", float(np.median(err)),
            float(np.median(base)), SIA_TARGET if targeted else None)
        spread = (g["nodes"] > 2).to_numpy()
        if spread.any():
            add(f"{name}, > 2 nodes", spread.sum(), "median abs. error of the step", float(np.median(err[spread])),
                float(np.median(base[spread])), SIA_SPREAD_TARGET if targeted else None)
        rho = spearman_by_count(g)
        if len(rho):
            add(f"{name}, order at equal GPU count", len(rho), "median Spearman rho (groups of >= 3)",
                float(rho.median()), np.nan, SPEARMAN_TARGET if targeted else None, "≥", pct=False)
    lam = rows[(rows["set"] == "Lambda") & rows["gpus"].isin(LAMBDA_GPUS)]
    if len(lam):
        real = lam["perfect_s"] / lam["measured_s"]
        pred = lam["perfect_s"] / lam["predicted_s"]
        add("Lambda, 2/4/8 GPUs", len(lam), "median abs. Δ scaling efficiency", float((pred - real).abs().median()),
            float((1 - real).abs().median()), LAMBDA_TARGET, pct=False)
    twins = result.get("twins")
    if twins is not None and len(twins):
        add("Lambda, NVLink ÷ no-NVLink twins", len(twins), "median abs. Δ speed ratio",
            float((twins["predicted"] - twins["measured"]).abs().median()),
            float((1 - twins["measured"]).abs().median()), TWIN_TARGET, pct=False)
    ratios = result.get("gavel_ratios")
    if ratios is not None and len(ratios):
        add("Gavel, consolidated ÷ unconsolidated", len(ratios), "median abs. ratio error",
            float(np.median(_abs_rel(ratios["predicted"], ratios["measured"]))),
            float(np.median(_abs_rel(np.ones(len(ratios)), ratios["measured"]))), GAVEL_TARGET)
    dp = rows[rows["set"] == "NeuSight dp"]
    if len(dp):
        add("NeuSight GPT-2 large dp4 (A100-SXM4)", len(dp), "abs. error of the step",
            float(np.median(_abs_rel(dp["predicted_s"], dp["measured_s"]))),
            float(np.median(_abs_rel(dp["perfect_s"], dp["measured_s"]))), NEUSIGHT_TARGET)
    return pd.DataFrame(out, columns=["set", "n", "metric", "ours", "perfect_scaling", "target", "met", "pct"])


def sia_clusters(rows: pd.DataFrame) -> pd.DataFrame:
    """Per Sia cluster and node count: rows, median |error| (ours, perfect scaling, and with the
    measured ``sync_time`` as communication: the floor left by the compute part), and the median
    measured sync ÷ predicted exposed communication (how far the spec-derived links are)."""
    g = rows[rows["set"] == "Sia placements"].copy()
    if g.empty:
        return pd.DataFrame()
    g["err"] = _abs_rel(g["predicted_s"], g["measured_s"])
    g["base"] = _abs_rel(g["perfect_s"], g["measured_s"])
    g["floor"] = _abs_rel(g["compute_s"] + g["measured_sync_s"], g["measured_s"])
    exposed = (g["predicted_s"] - g["compute_s"]).clip(lower=1e-6)
    g["sync_ratio"] = g["measured_sync_s"] / exposed
    return (g.groupby(["group", "nodes"])
            .agg(n=("err", "size"), ours=("err", "median"), perfect=("base", "median"), floor=("floor", "median"),
                 sync_ratio=("sync_ratio", "median"))
            .reset_index())


def _fmt(v: float, pct: bool = True) -> str:
    if v is None or not np.isfinite(v):
        return "–"
    return f"{v:.1%}" if pct else f"{v:.2f}"


def markdown(result: dict, table: pd.DataFrame) -> str:
    """The report's section on the multi-GPU sets."""
    lines = ["## Multi-GPU data-parallel steps (spec-derived communication)", "",
             "Compute per GPU: the set's own 1-GPU measurement of the model at the same per-GPU batch (NeuSight: "
             "emulated); backward share: the emulated phases of the config's capture; gradients: the config's own, "
             "in DDP's buckets; communication: the shipped collectives fit (Vidur, DeepBench: none of these sets) "
             "over the catalogue's links. Nothing is fitted to these rows. Perfect scaling: the N-GPU step = the "
             "1-GPU step.", "",
             "| set | n | metric | ours | perfect scaling | target | met |", "|---|---:|---|---:|---:|:---:|:---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.set} | {r.n:,} | {r.metric} | {_fmt(r.ours, r.pct)} | {_fmt(r.perfect_scaling, r.pct)} | "
                     f"{r.target} | {'–' if r.met is None else 'yes' if r.met else 'no'} |")
    clusters = sia_clusters(result["rows"])
    if len(clusters):
        lines += ["", "### Sia placements per cluster and node count", "",
                  "floor: the 1-GPU step plus the measured `sync_time` (what an exact communication model would "
                  "leave); sync ratio: measured `sync_time` ÷ our exposed communication.", "",
                  "| cluster | nodes | n | ours | perfect scaling | floor | sync ratio |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.group} | {r.nodes} | {r.n:,} | {_fmt(r.ours)} | {_fmt(r.perfect)} | {_fmt(r.floor)} | "
                  f"{r.sync_ratio:.1f} |" for r in clusters.itertuples()]
    lines += ["", *[f"- {n}" for n in result["notes"]],
              "- Sia clusters: " + "; ".join(f"{k}: {c.source}" for k, c in sets.SIA_CLUSTERS.items()) + ".",
              "- Gavel: unconsolidated taken as one GPU per server, the servers' network as the shipped fit's "
              "(neither is recorded); Lambda: every run on one server, the `…_trt` twin without bridges over PCIe."]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Predicted vs measured step time by placement: one panel per Sia cluster (colour: nodes),
    then Lambda's scaling efficiency, Gavel's consolidated ÷ unconsolidated ratio and NeuSight."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = result["rows"]
    sia = rows[rows["set"] == "Sia placements"]
    panels = sorted(sia["group"].unique()) + ["Lambda", "Gavel", "NeuSight dp"]
    cols = 4
    fig, axes = plt.subplots(-(-len(panels) // cols), cols, figsize=(3.5 * cols, 3.3 * -(-len(panels) // cols)),
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")

    def identity(ax, lo, hi, log=True):
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.2, lw=0)
        ax.set(xlim=(lo, hi), ylim=(lo, hi))
        if log:
            ax.set(xscale="log", yscale="log")

    for ax, name in zip(axes.flat, panels):
        if name == "Lambda":
            g = rows[rows["set"] == "Lambda"]
            for n, d in g.groupby("gpus"):
                ax.scatter(d["perfect_s"] / d["measured_s"], d["perfect_s"] / d["predicted_s"], s=8, alpha=0.6,
                           label=f"{n} GPUs")
            identity(ax, 0.2, 1.1, log=False)
            ax.set(title=f"Lambda (n={len(g)})", xlabel="measured scaling efficiency", ylabel="predicted")
        elif name == "Gavel":
            r = result.get("gavel_ratios")
            if r is not None and len(r):
                for dev, d in r.groupby("device"):
                    ax.scatter(d["measured"], d["predicted"], s=10, alpha=0.7, label=dev)
                identity(ax, 0.5, 12)
            ax.set(title=f"Gavel (n={0 if r is None else len(r)})", xlabel="measured cons. ÷ uncons.",
                   ylabel="predicted")
        elif name == "NeuSight dp":
            g = rows[rows["set"] == "NeuSight dp"]
            ax.scatter(g["measured_s"] * 1e3, g["predicted_s"] * 1e3, s=20, label="dp step")
            ax.scatter(g["measured_s"] * 1e3, g["perfect_s"] * 1e3, s=20, marker="x", label="compute only")
            identity(ax, 300, 700)
            ax.set(title="NeuSight GPT-2 large dp4", xlabel="measured ms", ylabel="predicted ms")
        else:
            g = sia[sia["group"] == name]
            for n, d in g.groupby("nodes"):
                ax.scatter(d["measured_s"], d["predicted_s"], s=6, alpha=0.5, label=f"{n} node{'s' * (n > 1)}")
            lo = min(g["measured_s"].min(), g["predicted_s"].min()) * 0.8
            hi = max(g["measured_s"].max(), g["predicted_s"].max()) * 1.25
            identity(ax, lo, hi)
            ax.set(title=f"Sia {name} (n={len(g)})", xlabel="measured s per step", ylabel="predicted (spec comm.)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(path.with_suffix(f".{ext}"), dpi=110)
    plt.close(fig)


def write_report(report_dir: Path, result: dict) -> tuple[pd.DataFrame, str]:
    """``multi_gpu.md``, ``multi_gpu.csv`` (every predicted row), ``multi_gpu.png/pdf``; returns
    the target table and the Markdown section."""
    report_dir.mkdir(parents=True, exist_ok=True)
    table = summary(result)
    text = markdown(result, table)
    (report_dir / "multi_gpu.md").write_text("# Multi-GPU sets, out of sample\n\n" + text)
    result["rows"].to_csv(report_dir / "multi_gpu.csv", index=False)
    if len(result["rows"]):
        plot(result, report_dir / "multi_gpu")
    return table, text

