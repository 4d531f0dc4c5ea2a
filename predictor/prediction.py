"""What `ets predict` predicts and how it labels every number: the subject (a trace file, a zoo
config id or a model name captured on the meta device), the checkpoint's predictions of it with
their intervals, and each measured or emulated timing the subject holds, named as such.

Why in the library: the command line only parses options and prints; a script predicting a
model or a trace file wants the same records (and the same refusal of a Habitat-style
checkpoint without a trace of its source GPU) without going through click.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from predictor.common.op_trace import device_file, read_trace_file
from predictor.intervals import DEFAULT_LEVEL
from predictor.methods import info

if TYPE_CHECKING:
    from predictor.emulator.zoo.config import ModelConfig

TRACE_SUFFIXES = {".csv": "ets-csv", ".json": "kineto", ".gz": "kineto", ".sqlite": "nsys"}


@dataclass(frozen=True)
class Subject:
    """What `ets predict` predicts: the op sequences, where they come from, the config if captured."""

    traces: pd.DataFrame
    origin: str  # CAPTURE_ORIGIN or the trace file
    config: ModelConfig | None = None  # set for a capture
    captured: bool = False  # a capture without a config (a model file)


def subject_of(target: str, batch: int, size: int) -> Subject:
    from predictor.emulator.capture.importers import import_traces
    from predictor.emulator.capture.quiet import capture_quietly
    from predictor.emulator.zoo.config import ModelBuildError

    path = Path(target)
    if path.exists():
        if path.suffix == ".parquet":
            return Subject(read_trace_file(path), str(path))
        kind = TRACE_SUFFIXES.get(path.suffix)
        if kind is None:
            raise ValueError(f"{path}: unknown trace file type {path.suffix!r}; "
                             f"known: .parquet, {', '.join(TRACE_SUFFIXES)}")
        return Subject(import_traces(kind, path), str(path))
    config = config_of(target, batch, size)
    try:
        return Subject(capture_quietly(config), CAPTURE_ORIGIN, config)
    except ModelBuildError as exc:
        raise ValueError(str(exc)) from None


CAPTURE_ORIGIN = "a meta-device capture (op order and shapes; nothing timed)"


def predictions(model, ckpt: Path, subject: Subject, level: float = DEFAULT_LEVEL) -> list[dict]:
    """One record per predicted iteration: the summary's columns, ``iteration_ms`` with its
    ``level`` interval (``low_ms``, ``high_ms``; null for a checkpoint without intervals),
    ``prediction`` (what the number is) and ``timings`` (each measured or emulated time of it, labelled)."""
    if info(model.method).reads_source_device:  # one prediction per config, from its source GPU's rows
        parts = [with_habitat_source(model, subject)]
    else:  # a dataset file may hold several devices' iterations of one config: predict each
        parts = [rows for _, rows in subject.traces.groupby("device", sort=True)]
    records = []
    for traces in parts:
        sources = set(model.source_rows(traces)["device"]) if info(model.method).reads_source_device else set()
        labelled = timings(traces, subject, sources)
        for r in model.iteration_times(traces).to_dict("records"):
            check_prediction(r, ckpt)
            r.pop("true_us", None)  # the labelled timings below say whose time it is
            r["trace_device"] = r.pop("device", None)  # the rows' device ("meta" for a capture), not the prediction's
            low, high = (None, None) if model.intervals is None else (
                float(b[0]) / 1e3 if 0 < b[0] < math.inf else None  # unbounded: too few calibration traces
                for b in model.intervals.bounds([r["pred_us"]], level, [r["family"]]))
            records.append({**r, "iteration_ms": r["pred_us"] / 1e3, "low_ms": low, "high_ms": high, "level": level,
                            "prediction": f"{model.device} prediction by {ckpt.name}",
                            "ops_from": subject.origin, "timings": labelled.get(r["config_id"], [])})
    return records


def data_parallel_steps(records: list[dict], subject: Subject, device: str, gpus: int, per_node: int) -> list[dict]:
    """Per record of :func:`predictions`, its data-parallel (DDP) step on ``gpus`` GPUs of
    ``device`` (the checkpoint's), ``per_node`` per node:
    :func:`predictor.emulator.devices.data_parallel.data_parallel_step`'s result plus ``overlap``.

    Compute is the checkpoint's prediction at the same per-GPU batch (labelled as the record
    says): backward = its predicted backward phase, the rest = the prediction less that (forward
    + update); ``overlap`` is "backward". A method that predicts no phase breakdown
    (DNNPerf-style: one number per graph) gives no backward to hide the all-reduces behind: they
    are all exposed, an upper bound, and ``overlap`` is "none". Communication is spec-derived:
    ``device``'s catalogue links and the gradient buckets of the config's own op sequence in
    ``subject``. A config with no gradients recorded (no ``AccumulateGrad`` op with its shape)
    cannot be priced: CollectiveError, as for a placement or device the model cannot price."""
    from predictor.emulator.devices.collectives import CollectiveError
    from predictor.emulator.devices.data_parallel import data_parallel_step, gradient_buckets

    buckets: dict[str, list[int]] = {}
    out = []
    for r in records:
        config_id = r["config_id"]
        if config_id not in buckets:
            rows = subject.traces[subject.traces["config_id"] == config_id]
            if rows["device"].nunique() > 1:  # one config timed on several devices: the same gradients
                rows = rows[rows["device"] == (r["trace_device"] if r["trace_device"] in set(rows["device"])
                                               else rows["device"].iloc[0])]
            buckets[config_id] = gradient_buckets(rows)
            if not buckets[config_id]:
                raise CollectiveError(f"{config_id} in {subject.origin} records no gradients (AccumulateGrad ops "
                                      "with their shapes): its all-reduces cannot be priced")
        backward = r.get("pred_backward_us", math.nan)
        overlap = "none" if backward is None or math.isnan(backward) else "backward"
        backward = 0.0 if overlap == "none" else min(float(backward), float(r["pred_us"]))
        step = data_parallel_step(backward / 1e6, (float(r["pred_us"]) - backward) / 1e6, buckets[config_id], gpus,
                                  per_node, device)
        out.append(step | {"overlap": overlap})
    return out


class UnusablePrediction(ValueError):
    """A checkpoint predicted a number that is no iteration time (NaN, infinite, zero or negative):
    its weights or calibration are broken, whatever the subject; the message names it."""


def check_prediction(record: dict, ckpt: Path) -> None:
    """Refuse a predicted iteration time that is not a positive finite number, or a breakdown
    part that is negative or infinite (NaN: a method without a breakdown), naming the checkpoint."""
    value = record["pred_us"]
    bad = None if math.isfinite(value) and value > 0 else ("pred_us", value)
    for column in ("pred_duration_us", "pred_gap_us", "pred_forward_us", "pred_backward_us", "pred_update_us"):
        part = record.get(column, math.nan)
        if bad is None and not math.isnan(part) and not (math.isfinite(part) and part >= 0):
            bad = (column, part)
    if bad is not None:
        raise UnusablePrediction(f"{ckpt}: predicted {bad[0]} = {bad[1]} µs for {record['config_id']}, not a "
                                 "positive finite time: the checkpoint's weights or calibration are unusable")


def with_habitat_source(model, subject: Subject) -> pd.DataFrame:
    """The subject's traces plus, for a capture, its timing on the emulated source GPU; a
    ValueError that says how to supply a source trace when there is none."""
    from predictor.emulator.devices.inference_host import for_trace
    from predictor.emulator.devices.specs import EMULATED_PREFIX, load_params
    from predictor.emulator.devices.timing import emulate

    traces, source = subject.traces, model.config.source_device
    if not model.source_rows(traces).empty:
        return traces
    if source.startswith(EMULATED_PREFIX) and set(traces["device"]) == {"meta"}:
        params = load_params()  # seed 0, as the simulator's Habitat tables
        gpu = params.device(source).name
        return pd.concat([emulate(seq, source, params, seed=0, inference_host_us=for_trace(seq, gpu))
                          for _, seq in traces.groupby("config_id", sort=True)], ignore_index=True)
    present = ", ".join(sorted(map(str, traces["device"].unique())))
    if source.startswith(EMULATED_PREFIX):
        fix = (f"give TARGET as the model name or config id instead (its capture is then timed on {source}), or a "
               f"trace file holding this config's {source} rows (`ets collect --device {source}`)")
    else:
        fix = (f"give TARGET as a trace file of this config measured on {source} "
               f"(`ets import KIND FILE --out DIR`, then `ets predict --ckpt CKPT {device_file('DIR', source)}`)")
    raise ValueError(f"this Habitat-style checkpoint scales traces measured on {source!r}, and {subject.origin} has "
                     f"none (devices: {present}); {fix}")


def timings(traces: pd.DataFrame, subject: Subject, sources: set[str]) -> dict[str, list[dict]]:
    """Per config, the iteration time each timed device's rows give, labelled with what it is
    (``sources``: the devices a Habitat-style model scales from)."""
    timed = traces[traces["device"] != "meta"]
    where = "in " + subject.origin if subject.config is None and not subject.captured else "of the capture"
    out: dict[str, list[dict]] = {}
    totals = (timed["duration_us"] + timed["gap_us"]).groupby([timed["config_id"], timed["device"]]).sum()
    for (config_id, device), us in totals.items():
        label = measurement_label(str(device), where)
        if device in sources:
            label += " (the source it scales)"
        out.setdefault(str(config_id), []).append({"what": label, "ms": float(us) / 1e3})
    return out


def measurement_label(device: str, where: str) -> str:
    """'emulated:T4 timing in f.parquet', 'real T4 measurement in f.parquet', 'real CPU measurement ...'."""
    if device.startswith("emulated:"):
        return f"{device} timing {where}"
    return f"real {'CPU' if device == 'cpu' else device} measurement {where}"


def config_of(target: str, batch: int, size: int):
    from predictor.common.families import family_of
    from predictor.emulator.zoo.config import ModelConfig
    from predictor.emulator.zoo.registry import zoo_configs

    if ":" in target:
        for c in zoo_configs("all"):
            if c.config_id == target:
                return c
        parts = target.split(":")
        if len(parts) >= 6 and not parts[-1].startswith("x"):  # a vision id outside the sampled zoo
            model, b, s, dtype, opt, classes = parts[:6]
            return ModelConfig(kind="vision", family=family_of(model), model=model, batch=int(b[1:]),
                               input_size=int(s[1:]), dtype=dtype, optimizer=opt, num_classes=int(classes[1:]))
        raise ValueError(f"{target!r} is neither a file nor a zoo config id")
    return ModelConfig(kind="vision", family=family_of(target), model=target, batch=batch, input_size=size,
                       num_classes=1000)
