"""Seeded synthetic job traces ("philly-like", "pai-like") whose parameters are fitted to real traces.

Why: the simulator needs an embedded default workload, and the real trace files cannot ship with
the package. This module has a fast vectorised generator, the fitting functions, and reads the
small parameter sets fitted to the real files from data shipped with the package, so that
``python -m experiments.fit_synthetic`` and the tests can recompute every value from the data.

Data: ``traces/synthetic_fit.json`` (:data:`FIT_FILE`), read once at import into :data:`PARAMS`;
philly-like is fitted from RFold's per-job Philly CSV, pai-like from CedTrain's random 10,000-task
sample of PAI 2020. To refit, run ``python -m experiments.fit_synthetic [--shared DIR]``.

A job: Poisson arrivals with a fitted daily cycle, a categorical GPU count (and, pai-like, GPU
type), and a duration drawn from empirical quantiles per GPU-count bucket (log-linear between
knots :data:`KNOT_PROBS`, at least :data:`MIN_DURATION_S`). Everything is fitted on the
1st-99th percentile window of arrivals; pai-like keeps its sample's own rate, since the sampling
fraction is not published.

The job model, its judgement calls and the real statistics behind them: docs/data.md,
'Synthetic traces'.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from predictor.common.inputs import limit, over_limit, short
from traces.schema import JobTrace, finalize
from traces.seeding import scalar_exp, scalar_log

# Knot probabilities of every duration quantile table (30 knots, denser in the tails and near p90).
KNOT_PROBS: tuple[float, ...] = (
    0.0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55,
    0.6, 0.7, 0.75, 0.8, 0.85, 0.875, 0.9, 0.925, 0.95, 0.975, 0.99, 0.995, 0.998, 0.999, 1.0,
)
MIN_DURATION_S = 1.0
RATE_WINDOW_PCT = (1.0, 99.0)  # submit-time percentiles bounding the window the rate is fitted on

# Hour-of-day of a trace's own t = 0 (its clock). Philly: arrival 0 = 2017-08-14 23:27:00 local
# time. PAI: times keep the time of day in UTC+8, so t = 0 is midnight.
PHILLY_HOUR0 = 23.45
PAI_HOUR0 = 0.0

PHILLY_FILE = "traces/philly/rfold_philly_trace.csv"
PAI_SAMPLE_FILE = "traces/alibaba_pai_v2020/cedtrain_case_random_10000_tasks.csv"

FIT_FILE = Path(__file__).with_name("synthetic_fit.json")
ABOUT = (
    "Fitted parameters of the seeded synthetic job traces of traces/synthetic.py (the model and the "
    "judgement calls of the fit: its docstring); read once at import.",
    f"philly-like: fitted from ../shared/{PHILLY_FILE} (RFold's per-job Philly CSV); pai-like: from "
    f"../shared/{PAI_SAMPLE_FILE} (CedTrain's random 10k sample of PAI 2020 tasks).",
    "Written by `python -m experiments.fit_synthetic [--shared DIR]`, which refits both kinds from "
    "those files and rewrites this file: do not edit it by hand.",
    "Per kind: durations maps a cell to its duration knots (s) at traces.synthetic.KNOT_PROBS; "
    "gpu_counts is keyed by GPU count; reference holds statistics of the real file (not used to "
    "generate); _about states what the values imply.",
)


@dataclass(frozen=True)
class SyntheticParams:
    """The fitted parameters of one synthetic kind (see the module docstring for the model).

    ``buckets`` are the lower GPU-count bounds of the duration/type buckets, e.g. (1, 2) gives
    buckets "1" and "2+". ``gpu_types`` maps a bucket label to observed counts per GPU type ({}
    when the trace records no type). ``durations`` maps a cell ("1", or "1/P100" when durations
    depend on the type too) to its knots at ``KNOT_PROBS``. ``reference`` holds statistics of the
    real file, for comparison with generated samples (they are not used to generate).
    """

    kind: str
    source: str
    rows: int
    rate_per_hour: float
    hourly_shape: tuple[float, ...]
    gpu_counts: dict[int, int]
    buckets: tuple[int, ...]
    gpu_types: dict[str, dict[str, int]]
    durations: dict[str, tuple[float, ...]]
    reference: dict[str, float] = field(default_factory=dict)

    def bucket_labels(self) -> list[str]:
        labels = []
        for i, lo in enumerate(self.buckets):
            if i + 1 == len(self.buckets):
                labels.append(f"{lo}+")
            else:
                hi = self.buckets[i + 1] - 1
                labels.append(str(lo) if hi == lo else f"{lo}-{hi}")
        return labels

    def bucket_of(self, num_gpus: np.ndarray) -> np.ndarray:
        """Index into ``bucket_labels()`` for each GPU count."""
        return np.searchsorted(np.asarray(self.buckets), np.asarray(num_gpus), side="right") - 1

    def count_shares(self) -> dict[int, float]:
        total = sum(self.gpu_counts.values())
        return {g: c / total for g, c in self.gpu_counts.items()}

    def type_shares(self) -> dict[str, float]:
        """Marginal GPU-type shares (over all buckets); {"": 1.0} when the trace has no type."""
        if not self.gpu_types:
            return {"": 1.0}
        totals: dict[str, int] = {}
        for counts in self.gpu_types.values():
            for t, c in counts.items():
                totals[t] = totals.get(t, 0) + c
        n = sum(totals.values())
        return {t: c / n for t, c in totals.items()}


# ---------------------------------------------------------------------------------------------
# Fitting.

def _hour_exposure(a: float, b: float, hour0: float) -> np.ndarray:
    """Hours of clock time in [a, b] (seconds) falling in each hour of the day (clock offset hour0)."""
    lo, hi = a / 3600.0 + hour0, b / 3600.0 + hour0
    ks = np.arange(math.floor(lo), math.ceil(hi))
    overlap = np.minimum(ks + 1, hi) - np.maximum(ks, lo)
    return np.bincount(np.mod(ks, 24), weights=np.clip(overlap, 0, None), minlength=24)


def fit_arrivals(submit_s: np.ndarray, hour0: float) -> tuple[float, tuple[float, ...], dict[str, float]]:
    """Mean rate (jobs/h, 2 decimals) and 24 hourly multipliers (mean 1, 3 decimals).

    Both are fitted over the window between the RATE_WINDOW_PCT percentiles of the submit times;
    the shape is the per-hour-of-day arrival count divided by the time the window spends in that
    hour (so partial days at the window edges do not bias it). The info dict also carries the
    window bounds in seconds under the private keys "_window_start_s" and "_window_end_s".
    """
    t = np.sort(np.asarray(submit_s, dtype=float))
    a, b = np.percentile(t, RATE_WINDOW_PCT)
    inside = t[(t >= a) & (t <= b)]
    hours = (b - a) / 3600.0
    rate = len(inside) / hours
    hod = np.floor(np.mod(inside / 3600.0 + hour0, 24.0)).astype(int)
    per_hour = np.bincount(hod, minlength=24) / _hour_exposure(a, b, hour0)
    shape = per_hour / per_hour.mean()
    gaps = np.diff(inside)
    info = {
        "window_start_day": round(float(a) / 86400, 1),
        "window_end_day": round(float(b) / 86400, 1),
        "window_jobs": int(len(inside)),
        "span_days": round(float(t[-1] - t[0]) / 86400, 1),
        "whole_span_rate_per_hour": round(len(t) / (float(t[-1] - t[0]) / 3600.0), 2),
        "interarrival_cv": round(float(gaps.std() / gaps.mean()), 2),
        "_window_start_s": float(a),
        "_window_end_s": float(b),
    }
    return round(float(rate), 2), tuple(round(float(x), 3) for x in shape), info


def fit_knots(durations: np.ndarray) -> tuple[float, ...]:
    """Observed durations at KNOT_PROBS (after flooring at MIN_DURATION_S)."""
    d = np.maximum(np.asarray(durations, dtype=float), MIN_DURATION_S)
    return tuple(round(float(x), 3) for x in np.quantile(d, KNOT_PROBS, method="inverted_cdf"))


def _reference(num_gpus: np.ndarray, durations: np.ndarray, info: dict[str, float]) -> dict[str, float]:
    d = np.maximum(np.asarray(durations, dtype=float), MIN_DURATION_S)
    p50, p90, p99 = np.quantile(d, [0.5, 0.9, 0.99])
    return {
        "duration_p50_s": round(float(p50), 1),
        "duration_p90_s": round(float(p90), 1),
        "duration_p99_s": round(float(p99), 1),
        "mean_gpu_hours_per_job": round(float((num_gpus * d).mean() / 3600.0), 2),
        **info,
    }


def _fit(kind: str, source: str, submit_s, num_gpus, durations, hour0: float, buckets: tuple[int, ...],
         gpu_type=None) -> SyntheticParams:
    num_gpus = np.asarray(num_gpus, dtype=np.int64)
    durations = np.asarray(durations, dtype=float)
    submit_s = np.asarray(submit_s, dtype=float)
    rows = len(submit_s)
    rate, shape, info = fit_arrivals(submit_s, hour0)
    # The job mix is fitted on the same window as the rate, so that rate x work per job is the
    # load of that window (Philly's start-up weeks hold few but very long jobs: 216 GPU-hours per
    # job on average, against 28.7 inside the window).
    inside = (submit_s >= info.pop("_window_start_s")) & (submit_s <= info.pop("_window_end_s"))
    num_gpus, durations = num_gpus[inside], durations[inside]
    if gpu_type is not None:
        gpu_type = np.asarray(gpu_type)[inside]
    values, counts = np.unique(num_gpus, return_counts=True)
    proto = SyntheticParams(kind, source, rows, rate, shape,
                            {int(v): int(c) for v, c in zip(values, counts)}, tuple(buckets), {}, {})
    labels = proto.bucket_labels()
    bucket = proto.bucket_of(num_gpus)
    gpu_types: dict[str, dict[str, int]] = {}
    cells: dict[str, tuple[float, ...]] = {}
    for i, label in enumerate(labels):
        in_bucket = bucket == i
        if gpu_type is None:
            cells[label] = fit_knots(durations[in_bucket])
            continue
        types, tcounts = np.unique(gpu_type[in_bucket], return_counts=True)
        gpu_types[label] = {str(t): int(c) for t, c in zip(types, tcounts)}
        for t in gpu_types[label]:
            cells[f"{label}/{t}"] = fit_knots(durations[in_bucket & (gpu_type == t)])
    return SyntheticParams(kind, source, rows, rate, shape, proto.gpu_counts, tuple(buckets),
                           gpu_types, cells, _reference(num_gpus, durations, info))


def fit_philly(path: str | Path) -> SyntheticParams:
    """Fit the philly-like parameters from RFold's Philly CSV (``rfold_philly_trace.csv``)."""
    df = pd.read_csv(path)
    df.columns = [c.lstrip("#").strip() for c in df.columns]
    return _fit("philly-like", PHILLY_FILE, df["arrival time (sec)"], df["size"], df["duration (sec)"],
                PHILLY_HOUR0, buckets=(1, 2, 4))


def fit_pai_sample(path: str | Path) -> SyntheticParams:
    """Fit the pai-like parameters from the CedTrain 10k PAI task sample.

    The rate is the sample's own (see the module docstring for why); submit = task start_time,
    GPUs = inst_num (plan_gpu is 100 for every row), duration = runtime (= end - start).
    """
    df = pd.read_csv(path)
    gpu_type = df["gpu_type"].astype(str).str.strip().replace({"V100M32": "V100"}).to_numpy()
    return _fit("pai-like", PAI_SAMPLE_FILE, df["start_time"], df["inst_num"], df["runtime"],
                PAI_HOUR0, buckets=(1, 2), gpu_type=gpu_type)


# ---------------------------------------------------------------------------------------------
# Model summaries.

def _logmean(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """Mean of exp(linear) between x0 and x1 (logarithmic mean), = x0 where x0 == x1."""
    l0, l1 = np.log(x0), np.log(x1)
    same = np.isclose(l0, l1)
    return np.where(same, x0, (x1 - x0) / np.where(same, 1.0, l1 - l0))


def cell_mean_s(knots: tuple[float, ...]) -> float:
    """Expected duration (s) of one quantile table under log-linear interpolation."""
    x = np.asarray(knots, dtype=float)
    p = np.asarray(KNOT_PROBS)
    return float(np.sum(np.diff(p) * _logmean(x[:-1], x[1:])))


def expected_gpu_hours(params: SyntheticParams) -> float:
    """Expected GPU-hours of one generated job (mean of num_gpus x duration)."""
    labels = params.bucket_labels()
    total = 0.0
    for g, share in params.count_shares().items():
        label = labels[int(params.bucket_of(np.array([g]))[0])]
        if params.gpu_types:
            counts = params.gpu_types[label]
            n = sum(counts.values())
            mean = sum(c / n * cell_mean_s(params.durations[f"{label}/{t}"]) for t, c in counts.items())
        else:
            mean = cell_mean_s(params.durations[label])
        total += share * g * mean
    return total / 3600.0


def offered_load_gpus(params: SyntheticParams, rate_per_hour: float | None = None) -> float:
    """Average number of busy GPUs the workload asks for (rate x expected GPU-hours per job).

    A cluster of about ``offered_load_gpus / target_utilisation`` GPUs runs the workload at that
    utilisation (ignoring fragmentation and queueing).
    """
    return (rate_per_hour or params.rate_per_hour) * expected_gpu_hours(params)


# ---------------------------------------------------------------------------------------------
# Generation.

def _params(kind: str) -> SyntheticParams:
    if kind not in PARAMS:
        raise ValueError(f"unknown synthetic trace kind {short(kind)}; known kinds: {', '.join(KINDS)}")
    return PARAMS[kind]


def _arrivals(gaps: np.ndarray, rate: float, shape: tuple[float, ...]) -> np.ndarray:
    """Job 0 at t = 0, then the NHPP points (time-change of a unit-rate process) whose unit-rate
    gaps are ``gaps``: one per job after the first."""
    m = np.asarray(shape, dtype=float)
    hourly = rate * m / m.mean()                      # expected jobs in each hour of the day
    cum = np.concatenate([[0.0], np.cumsum(hourly)])  # cum[24] = expected jobs per day
    s = np.cumsum(gaps)
    days, rest = np.divmod(s, cum[-1])
    h = np.clip(np.searchsorted(cum, rest, side="right") - 1, 0, 23)
    within = np.where(hourly[h] > 0, (rest - cum[h]) / np.where(hourly[h] > 0, hourly[h], 1.0), 0.0)
    hours = days * 24.0 + h + np.clip(within, 0.0, 1.0)
    return np.concatenate([[0.0], hours * 3600.0])


# Workloads of up to this many jobs draw all their random numbers from one generator stream, in
# the order of every recorded result: the n - 1 arrival gaps, then n uniforms for the GPU counts,
# n for the types, n for the durations. Larger ones draw each of the four from a stream of its own
# (children of the seed's SeedSequence), so that their first K jobs cost K draws. The bound is a
# constant, not a limit a user may raise: a workload is the same on every machine.
ONE_STREAM_MAX_JOBS = 10_000_000
_SKIP_CHUNK = 2**20  # arrival gaps drawn at a time when skipping past them (8 MiB)


class _Draws(NamedTuple):
    """The random numbers of the first ``count`` jobs of an n-job workload."""

    gaps: np.ndarray  # count - 1 unit-rate exponential arrival gaps
    u_count: np.ndarray
    u_type: np.ndarray
    u_dur: np.ndarray


def _one_stream_draws(seed: int, n: int, count: int) -> _Draws:
    """The first ``count`` jobs' numbers of the one-stream layout, exactly as drawing all n and
    keeping the first ``count``: the gaps after them are drawn and dropped a chunk at a time
    (their ziggurat draws take a variable number of 64-bit words, so the only way past them),
    and the uniforms, one word each, are skipped by advancing the generator."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, count - 1)
    for done in range(0, n - count, _SKIP_CHUNK):
        rng.exponential(1.0, min(_SKIP_CHUNK, n - count - done))
    uniforms = []
    for k in range(3):
        uniforms.append(rng.random(count))
        if k < 2 and n > count:
            rng.bit_generator.advance(n - count)
    return _Draws(gaps, *uniforms)


def _stream_per_column_draws(seed: int, count: int) -> _Draws:
    """The first ``count`` jobs' numbers of the layout of workloads over :data:`ONE_STREAM_MAX_JOBS`."""
    gap_rng, *uniform_rngs = (np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(4))
    return _Draws(gap_rng.exponential(1.0, count - 1), *(rng.random(count) for rng in uniform_rngs))


def _check_size(n: int, count: int) -> None:
    """Refuse to build more jobs than the limit (before any is drawn)."""
    if count > limit("jobs"):
        what = "synthetic workload" + (f" (its first {count:,} jobs)" if count < n else "")
        raise over_limit("jobs", what, count)


def _categorical(u: np.ndarray, counts: dict) -> np.ndarray:
    keys = list(counts)
    cdf = np.cumsum(np.asarray([counts[k] for k in keys], dtype=float))
    idx = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(keys) - 1)
    return np.asarray(keys, dtype=object if isinstance(keys[0], str) else np.int64)[idx]


def generate(kind: str, num_jobs: int, seed: int = 0, *, rate_per_hour: float | None = None,
             first: int | None = None) -> JobTrace:
    """A seeded synthetic job trace of ``num_jobs`` jobs of the given kind (see KINDS).

    ``rate_per_hour`` overrides the fitted mean arrival rate (to scale the load); the daily shape
    and everything else stay as fitted. ``first``: only the first ``first`` jobs (in submit
    order), exactly the rows and source of the whole trace's ``head(first)`` but costing about
    ``first`` jobs' memory, so ``pai-like:100000000000 --limit 10`` is instant (up to
    :data:`ONE_STREAM_MAX_JOBS` jobs the generator still steps past the other jobs' arrival
    gaps, which are cheap: docs/benchmarks.md). More than ``limit("jobs")`` jobs to build are refused
    before any is drawn.
    Same arguments -> identical table.
    """
    params = _params(kind)
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, (int, np.integer)):
        raise ValueError(f"num_jobs must be an integer, got {short(num_jobs)}")
    if num_jobs < 1:
        raise ValueError(f"num_jobs must be >= 1, got {num_jobs}")
    if first is not None and (isinstance(first, bool) or not isinstance(first, (int, np.integer)) or first < 1):
        raise ValueError(f"first must be an integer >= 1, got {short(first)}")
    rate = params.rate_per_hour if rate_per_hour is None else float(rate_per_hour)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate_per_hour must be a positive number, got {short(rate_per_hour)}")
    total = int(num_jobs)
    n = total if first is None else min(total, int(first))
    _check_size(total, n)
    if total <= ONE_STREAM_MAX_JOBS:
        u = _one_stream_draws(seed, total, n)
    else:
        u = _stream_per_column_draws(seed, n)
    submit = _arrivals(u.gaps, rate, params.hourly_shape)
    u_count, u_type, u_dur = u.u_count, u.u_type, u.u_dur

    num_gpus = _categorical(u_count, params.gpu_counts)
    bucket = params.bucket_of(num_gpus)
    gpu_type = np.full(n, "", dtype=object)
    cell = np.empty(n, dtype=object)
    for i, label in enumerate(params.bucket_labels()):
        mask = bucket == i
        if params.gpu_types:
            types = _categorical(u_type[mask], params.gpu_types[label])
            gpu_type[mask] = types
            cell[mask] = label + "/" + types.astype(str)
        else:
            cell[mask] = label
    log_p = np.asarray(KNOT_PROBS)
    duration = np.empty(n)
    for name, knots in params.durations.items():
        mask = cell == name
        if mask.any():
            duration[mask] = scalar_exp(np.interp(u_dur[mask], log_p, scalar_log(knots)))
    duration = np.maximum(duration, MIN_DURATION_S)

    df = pd.DataFrame({
        "job_id": np.arange(n).astype(str),
        "submit_s": submit,
        "num_gpus": num_gpus,
        "duration_s": duration,
        "gpu_type": gpu_type,
        "deadline_s": np.full(n, np.nan),
        "user": "",
        "workload": "",
        "line": np.arange(1, n + 1),
    })
    source = f"synthetic:{kind}:{total}:seed={seed}"
    if rate_per_hour is not None:
        source += f":rate={rate:g}"
    return finalize(df, source, "synthetic")


# ---------------------------------------------------------------------------------------------
# The parameter file (experiments/fit_synthetic.py writes it from a refit).

def _cell_rows(params: SyntheticParams) -> dict[str, int]:
    if params.gpu_types:
        return {f"{b}/{t}": c for b, ts in params.gpu_types.items() for t, c in ts.items()}
    rows = dict.fromkeys(params.bucket_labels(), 0)
    labels = params.bucket_labels()
    for g, c in params.gpu_counts.items():
        rows[labels[int(params.bucket_of(np.array([g]))[0])]] += c
    return rows


def describe(params: SyntheticParams) -> list[str]:
    """Comment lines stating what the parameters were fitted from and the statistics they hold."""
    ref = params.reference
    shape = np.asarray(params.hourly_shape)
    shares = params.count_shares()
    top = sorted(shares, key=lambda g: -shares[g])[:5]
    rest = 1.0 - sum(shares[g] for g in top)
    out = [
        f"Fitted from ../shared/{params.source} ({params.rows:,} rows):",
        f"rate, shape and job mix all from the {ref['window_jobs']:,} jobs between the 1st and 99th "
        "percentile",
        f"of the submit times (day {ref['window_start_day']} to {ref['window_end_day']} on the trace's "
        "clock).",
        f"Arrivals: {params.rate_per_hour} jobs/h (the whole {ref['span_days']}-day span averages "
        f"{ref['whole_span_rate_per_hour']} jobs/h).",
        f"  Daily shape: peak {shape.max():.2f} at {int(shape.argmax()):02d}h, trough {shape.min():.2f} at "
        f"{int(shape.argmin()):02d}h. Real inter-arrival CV in the window {ref['interarrival_cv']}.",
        "GPU counts: " + ", ".join(f"{g}: {100 * shares[g]:.2f}%" for g in top)
        + f", other: {100 * rest:.2f}% ({len(shares) - len(top)} sizes).",
    ]
    if params.gpu_types:
        ts = params.type_shares()
        out.append("GPU types: " + ", ".join(f"{t} {100 * v:.2f}%" for t, v in ts.items()) + ".")
        for b, tc in params.gpu_types.items():
            n = sum(tc.values())
            out.append(f"  {b} GPU(s): " + ", ".join(f"{t} {c} ({100 * c / n:.1f}%)" for t, c in tc.items()))
    else:
        out.append("GPU types: none recorded (gpu_type \"\").")
    p = list(KNOT_PROBS)
    rows = _cell_rows(params)
    out.append("Duration (s) by cell:  rows       p10       p50       p90       p99        max      mean")
    for cell, knots in params.durations.items():
        q = {k: knots[p.index(k)] for k in (0.1, 0.5, 0.9, 0.99, 1.0)}
        out.append(f"  {cell:<12}{rows.get(cell, 0):>10,}{q[0.1]:>10,.0f}{q[0.5]:>10,.0f}{q[0.9]:>10,.0f}"
                   f"{q[0.99]:>10,.0f}{q[1.0]:>11,.0f}{cell_mean_s(knots):>10,.0f}")
    out.append(f"All jobs: duration p50 {ref['duration_p50_s']:,} s, p90 {ref['duration_p90_s']:,} s, "
               f"p99 {ref['duration_p99_s']:,} s.")
    out.append(f"GPU-hours per job: real {ref['mean_gpu_hours_per_job']}, "
               f"model {expected_gpu_hours(params):.2f} "
               "(log-linear interpolation of the tail).")
    out.append(f"Offered load at the fitted rate: {offered_load_gpus(params):,.0f} busy GPUs on average.")
    return out


def write_fit(fits: list[SyntheticParams], path: Path) -> None:
    """Write parameter sets as the JSON :func:`load_fit` reads: floats at full precision (repr),
    so that the file loads back to equal sets, and each set with its :func:`describe` lines."""
    data = {"_about": list(ABOUT), **{p.kind: {"_about": describe(p), **asdict(p)} for p in fits}}
    text = json.dumps(data, indent=2)
    # One line per list of numbers (a shape, the buckets, a cell's knots), not one per number.
    text = re.sub(r"\[[-+\d.eE,\s]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    path.write_text(text + "\n", encoding="utf-8")


def _from_json(d: dict) -> SyntheticParams:
    """JSON lists back to tuples, GPU-count keys (strings in JSON) back to ints."""
    return SyntheticParams(
        kind=d["kind"], source=d["source"], rows=d["rows"], rate_per_hour=d["rate_per_hour"],
        hourly_shape=tuple(d["hourly_shape"]),
        gpu_counts={int(g): c for g, c in d["gpu_counts"].items()},
        buckets=tuple(d["buckets"]),
        gpu_types=d["gpu_types"],
        durations={cell: tuple(knots) for cell, knots in d["durations"].items()},
        reference=d["reference"],
    )


def load_fit(path: Path) -> dict[str, SyntheticParams]:
    """The parameter sets of a file written by :func:`write_fit`, by kind, in file order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {kind: _from_json(d) for kind, d in data.items() if kind != "_about"}


PARAMS: dict[str, SyntheticParams] = load_fit(FIT_FILE)
KINDS: tuple[str, ...] = tuple(PARAMS)
