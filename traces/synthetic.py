"""Seeded synthetic job traces ("philly-like", "pai-like") whose parameters are fitted to real traces.

Why: the simulator needs an embedded default workload, and the real trace files cannot ship with
the package. This module holds small parameter sets fitted to the real files (below, with the
statistics they reproduce), a fast vectorised generator, and the fitting functions themselves, so
``python -m experiments.fit_synthetic`` and the tests can recompute every constant from the data.

The model of one job (all parts fitted per kind):

* **arrivals**: a non-homogeneous Poisson process whose rate is ``rate_per_hour × shape[hour]``,
  ``shape`` being 24 hourly multipliers with mean 1 (the daily cycle). The generated clock starts
  at midnight: hour-of-day = ``(submit_s / 3600) mod 24``. Job 0 arrives at t = 0 and jobs
  1..N-1 are the first N-1 points of the process after it (the Palm version of the process, so no
  shift distorts the daily phase). All parameters (rate, shape and the job mix below) are fitted
  on the jobs submitted between the 1st and 99th percentile of the real submit times, which drops
  the sparse start-up weeks of Philly (few jobs, but very long ones) and the partial edge days.
  Not modelled: day-of-week effects, the day-to-day swing of the load, and batch submissions, so
  the generated inter-arrival times are far less bursty than the real ones (the inter-arrival CV
  in the fitting window is 10.9 for Philly and 2.2 for the PAI sample; this model gives ~1.1).
* **GPU count**: categorical over the counts observed, with the observed frequencies.
* **GPU type** (pai-like only): categorical given the GPU-count bucket (1 GPU vs more), with the
  observed frequencies. Philly records no GPU type: gpu_type is "".
* **duration**: given the GPU-count bucket (and, for pai-like, the GPU type), the empirical
  quantile function of the duration at the knot probabilities ``KNOT_PROBS`` (the knots are
  observed durations, ``numpy.quantile(method="inverted_cdf")``), sampled by inverse CDF with
  interpolation that is linear in log-duration between knots. Support is [min, max] observed.
  Durations below ``MIN_DURATION_S`` (Philly has 10 jobs of 0 s) are raised to it before fitting
  and after sampling, so no job has zero duration.

deadline_s is NaN (deadlines are assigned elsewhere), user and workload are "".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

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
# Fitted constants: the output of experiments/fit_synthetic.py (tests refit and compare them).

# Judgement calls, philly-like:
# * Everything is fitted on the 1st-99th percentile window of arrivals: the file's first 40 days
#   hold only 1% of its jobs (logging start-up), so the whole-span rate would understate the load,
#   and those jobs are atypically long (216 GPU-hours per job on average against 28.7 inside the
#   window), so including them would overstate the work per job.
# * Duration buckets 1 / 2-3 / 4+ GPUs instead of 1 / >1: the 2-GPU jobs are mostly very short
#   (median 30 s) while 4+ GPU jobs are long (median 10,862 s); pooling them would misplace both.
# Fitted from ../shared/traces/philly/rfold_philly_trace.csv (111,549 rows):
# rate, shape and job mix all from the 109,317 jobs between the 1st and 99th percentile
# of the submit times (day 40.7 to 127.9 on the trace's clock).
# Arrivals: 52.23 jobs/h (the whole 129.4-day span averages 35.93 jobs/h).
#   Daily shape: peak 1.90 at 07h, trough 0.48 at 14h. Real inter-arrival CV in the window 10.9.
# GPU counts: 1: 86.64%, 8: 5.07%, 4: 4.97%, 2: 2.29%, 16: 0.75%, other: 0.28% (10 sizes).
# GPU types: none recorded (gpu_type "").
# Duration (s) by cell:  rows       p10       p50       p90       p99        max      mean
#   1               94,709        58     1,244    15,342   401,848  5,187,286    19,515
#   2-3              2,501        13        30   182,057   832,028  2,583,252    58,610
#   4+              12,107        82    11,042   263,262 1,478,695  4,585,968   108,384
# All jobs: duration p50 1,368.0 s, p90 32,733.4 s, p99 600,992.2 s.
# GPU-hours per job: real 28.72, model 30.33 (log-linear interpolation of the tail).
# Offered load at the fitted rate: 1,584 busy GPUs on average.
PHILLY_LIKE = SyntheticParams(
    kind='philly-like',
    source='traces/philly/rfold_philly_trace.csv',
    rows=111549,
    rate_per_hour=52.23,
    # hour-of-day multipliers 00h..23h (mean 1)
    hourly_shape=(1.274, 1.007, 1.241, 1.174, 0.899, 1.136, 1.563, 1.899, 1.156, 0.925, 0.895, 0.762,
                  0.675, 0.657, 0.476, 0.611, 0.977, 0.737, 0.845, 0.785, 0.967, 0.896, 1.235, 1.209),
    gpu_counts={1: 94709, 2: 2501, 4: 5437, 6: 1, 7: 2, 8: 5542, 12: 12, 16: 822, 20: 1, 24: 38,
                28: 1, 32: 210, 48: 2, 64: 28, 128: 11},
    buckets=(1, 2, 4),
    gpu_types={},
    # duration knots (s) at KNOT_PROBS
    durations={
        '1': (1, 10, 15, 25, 42, 58, 66, 74, 125, 245, 467, 660, 918, 1244, 1556, 1981, 2754, 3989,
            5694, 9007, 11219, 15342, 23564, 44565, 131896, 401848, 692630, 1395072, 1963819,
            5187286),
        '2-3': (2, 3, 5, 8, 10, 13, 15, 16, 17, 19, 20, 22, 25, 30, 43, 107, 983, 5556, 30979, 74940,
            113462, 182057, 267300, 399986, 584219, 832028, 1171105, 1521845, 1798344, 2583252),
        '4+': (1, 7, 14, 26, 40, 82, 190, 427, 754, 1019, 1555, 2875, 5643, 11042, 14865, 23931,
            62567, 88786, 128917, 185001, 219178, 263262, 353444, 498100, 842625, 1478695, 2050441,
            2643004, 3098095, 4585968),
    },
    reference={
        'duration_p50_s': 1368.0,
        'duration_p90_s': 32733.4,
        'duration_p99_s': 600992.2,
        'mean_gpu_hours_per_job': 28.72,
        'window_start_day': 40.7,
        'window_end_day': 127.9,
        'window_jobs': 109317,
        'span_days': 129.4,
        'whole_span_rate_per_hour': 35.93,
        'interarrival_cv': 10.9,
    },
)

# Judgement calls, pai-like:
# * Rate: the sample's own rate, 6.85 jobs/h. The file is a random 10k subsample of a filtered
#   PAI task table and the sampling fraction is not published, so no "real" rate can be derived;
#   any multiplier would be invented. At this rate the workload keeps about 41 GPUs busy on
#   average, i.e. it suits a cluster of ~50-70 GPUs; pass generate(..., rate_per_hour=R) (see
#   offered_load_gpus) to size the load for another cluster. The shape is fitted from the sample.
# * GPU type depends on the GPU-count bucket (chi-square p = 3e-4) and duration depends on both
#   the bucket (KS D = 0.11, p = 7e-8) and, among 1-GPU jobs, on the type (KS p < 1e-9 for each
#   pair), so durations are tabled per (bucket, type). The 2+ cells are thin (163-305 rows).
# * Durations are >= 1000 s by the sample's filter, so the generator has no short jobs.
# Fitted from ../shared/traces/alibaba_pai_v2020/cedtrain_case_random_10000_tasks.csv (10,000 rows):
# rate, shape and job mix all from the 9,814 jobs between the 1st and 99th percentile
# of the submit times (day 13.3 to 73.0 on the trace's clock).
# Arrivals: 6.85 jobs/h (the whole 63.1-day span averages 6.61 jobs/h).
#   Daily shape: peak 2.03 at 03h, trough 0.43 at 14h. Real inter-arrival CV in the window 2.17.
# GPU counts: 1: 92.73%, 8: 1.93%, 4: 1.83%, 2: 1.50%, 5: 1.29%, other: 0.71% (3 sizes).
# GPU types: P100 49.03%, T4 30.43%, V100 20.54%.
#   1 GPU(s): P100 4512 (49.6%), T4 2736 (30.1%), V100 1853 (20.4%)
#   2+ GPU(s): P100 300 (42.1%), T4 250 (35.1%), V100 163 (22.9%)
# Duration (s) by cell:  rows       p10       p50       p90       p99        max      mean
#   1/P100           4,512     1,462     4,182    22,731   136,099    532,657    12,426
#   1/T4             2,736     1,371     7,812    23,671   158,742    595,764    14,841
#   1/V100           1,853     1,582     7,085    38,027   215,007    535,585    18,525
#   2+/P100            300     1,230     5,706    73,250   341,068    600,961    26,826
#   2+/T4              250     1,389     6,777    33,384   106,134    209,074    14,090
#   2+/V100            163     1,559     9,286    83,956   212,634    256,093    29,185
# All jobs: duration p50 5,774.5 s, p90 26,507.8 s, p99 151,921.7 s.
# GPU-hours per job: real 6.34, model 5.97 (log-linear interpolation of the tail).
# Offered load at the fitted rate: 41 busy GPUs on average.
PAI_LIKE = SyntheticParams(
    kind='pai-like',
    source='traces/alibaba_pai_v2020/cedtrain_case_random_10000_tasks.csv',
    rows=10000,
    rate_per_hour=6.85,
    # hour-of-day multipliers 00h..23h (mean 1)
    hourly_shape=(0.667, 1.139, 1.531, 2.028, 1.566, 1.514, 0.852, 1.298, 1.093, 1.064, 0.702, 0.823,
                  0.906, 0.707, 0.430, 0.622, 1.622, 1.205, 0.639, 0.619, 0.748, 0.709, 0.850, 0.667),
    gpu_counts={1: 9101, 2: 147, 3: 29, 4: 180, 5: 127, 6: 38, 7: 3, 8: 189},
    buckets=(1, 2),
    gpu_types={'1': {'P100': 4512, 'T4': 2736, 'V100': 1853}, '2+': {'P100': 300, 'T4': 250, 'V100': 163}},
    # duration knots (s) at KNOT_PROBS
    durations={
        '1/P100': (1000, 1016, 1036, 1118, 1237, 1462, 1680, 1954, 2264, 2601, 2935, 3239, 3665, 4182,
            5434, 6524, 9287, 10941, 13957, 17669, 20348, 22731, 27780, 46602, 117164, 136099,
            140097, 164775, 188983, 532657),
        '1/T4': (1000, 1019, 1030, 1065, 1158, 1371, 1582, 1833, 2094, 2326, 3259, 4445, 5883, 7812,
            9857, 10743, 14577, 16708, 17871, 20220, 22430, 23671, 28094, 39045, 74874, 158742,
            234657, 425683, 547371, 595764),
        '1/V100': (1000, 1021, 1039, 1127, 1237, 1582, 1855, 2295, 2755, 3333, 4031, 5059, 6027, 7085,
            8467, 10406, 13678, 15824, 18839, 23635, 28297, 38027, 52863, 80397, 111722, 215007,
            272047, 440790, 473487, 535585),
        '2+/P100': (1002, 1005, 1010, 1043, 1118, 1230, 1460, 1742, 2112, 2649, 3286, 4050, 4805, 5706,
            7784, 8697, 13867, 17696, 25698, 40487, 50523, 73250, 99947, 130795, 177439, 341068,
            504933, 600961, 600961, 600961),
        '2+/T4': (1003, 1009, 1012, 1027, 1100, 1389, 1727, 2446, 2948, 3189, 3600, 4041, 4748, 6777,
            7942, 8062, 10463, 13659, 17547, 26143, 31363, 33384, 50144, 59943, 81302, 106134,
            110326, 209074, 209074, 209074),
        '2+/V100': (1077, 1077, 1082, 1114, 1250, 1559, 1920, 2185, 2682, 3464, 5512, 6210, 7682, 9286,
            12538, 14643, 22281, 35599, 43779, 60383, 70224, 83956, 94362, 159644, 169298, 212634,
            256093, 256093, 256093, 256093),
    },
    reference={
        'duration_p50_s': 5774.5,
        'duration_p90_s': 26507.8,
        'duration_p99_s': 151921.7,
        'mean_gpu_hours_per_job': 6.34,
        'window_start_day': 13.3,
        'window_end_day': 73.0,
        'window_jobs': 9814,
        'span_days': 63.1,
        'whole_span_rate_per_hour': 6.61,
        'interarrival_cv': 2.17,
    },
)


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

    The rate is the sample's own (see PAI_LIKE's comment for why); submit = task start_time,
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
        raise ValueError(f"unknown synthetic trace kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return PARAMS[kind]


def _arrivals(rng: np.random.Generator, n: int, rate: float, shape: tuple[float, ...]) -> np.ndarray:
    """Job 0 at t = 0, then the first n-1 points of the NHPP (time-change of a unit-rate process)."""
    m = np.asarray(shape, dtype=float)
    hourly = rate * m / m.mean()                      # expected jobs in each hour of the day
    cum = np.concatenate([[0.0], np.cumsum(hourly)])  # cum[24] = expected jobs per day
    s = np.cumsum(rng.exponential(1.0, n - 1))
    days, rest = np.divmod(s, cum[-1])
    h = np.clip(np.searchsorted(cum, rest, side="right") - 1, 0, 23)
    within = np.where(hourly[h] > 0, (rest - cum[h]) / np.where(hourly[h] > 0, hourly[h], 1.0), 0.0)
    hours = days * 24.0 + h + np.clip(within, 0.0, 1.0)
    return np.concatenate([[0.0], hours * 3600.0])


def _categorical(u: np.ndarray, counts: dict) -> np.ndarray:
    keys = list(counts)
    cdf = np.cumsum(np.asarray([counts[k] for k in keys], dtype=float))
    idx = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(keys) - 1)
    return np.asarray(keys, dtype=object if isinstance(keys[0], str) else np.int64)[idx]


def generate(kind: str, num_jobs: int, seed: int = 0, *, rate_per_hour: float | None = None) -> JobTrace:
    """A seeded synthetic job trace of ``num_jobs`` jobs of the given kind (see KINDS).

    ``rate_per_hour`` overrides the fitted mean arrival rate (to scale the load); the daily shape
    and everything else stay as fitted. Same arguments -> identical table.
    """
    params = _params(kind)
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, (int, np.integer)):
        raise ValueError(f"num_jobs must be an integer, got {num_jobs!r}")
    if num_jobs < 1:
        raise ValueError(f"num_jobs must be >= 1, got {num_jobs}")
    rate = params.rate_per_hour if rate_per_hour is None else float(rate_per_hour)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate_per_hour must be a positive number, got {rate_per_hour!r}")
    n = int(num_jobs)
    rng = np.random.default_rng(seed)
    submit = _arrivals(rng, n, rate, params.hourly_shape)
    u_count, u_type, u_dur = rng.random(n), rng.random(n), rng.random(n)

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
    source = f"synthetic:{kind}:{n}:seed={seed}"
    if rate_per_hour is not None:
        source += f":rate={rate:g}"
    return finalize(df, source, "synthetic")


# ---------------------------------------------------------------------------------------------
# Rendering (experiments/fit_synthetic.py prints this; the constants above were pasted from it).

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


def _wrap(items: list[str], indent: int, width: int = 100) -> str:
    """Join items with ", ", breaking lines (indented by ``indent``) before ``width`` columns."""
    out, line = [], ""
    for item in items:
        candidate = f"{line}, {item}" if line else item
        if line and indent + len(candidate) + 2 > width:
            out.append(line + ",")
            line = item
        else:
            line = candidate
    out.append(line)
    return ("\n" + " " * indent).join(out)


def format_params(name: str, params: SyntheticParams) -> str:
    """Python source of a ``NAME = SyntheticParams(...)`` constant, in the form used in this file."""
    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else repr(float(x))

    half = [", ".join(f"{x:.3f}" for x in params.hourly_shape[i:i + 12]) for i in (0, 12)]
    lines = ["# " + line for line in describe(params)]
    lines += [
        f"{name} = SyntheticParams(",
        f"    kind={params.kind!r},",
        f"    source={params.source!r},",
        f"    rows={params.rows},",
        f"    rate_per_hour={params.rate_per_hour!r},",
        "    # hour-of-day multipliers 00h..23h (mean 1)",
        f"    hourly_shape=({half[0]},",
        f"                  {half[1]}),",
        "    gpu_counts={" + _wrap([f"{g}: {c}" for g, c in params.gpu_counts.items()], 16) + "},",
        f"    buckets={params.buckets!r},",
        "    gpu_types={" + ", ".join(
            f"{b!r}: {{{', '.join(f'{t!r}: {c}' for t, c in ts.items())}}}"
            for b, ts in params.gpu_types.items()
        ) + "},",
        "    # duration knots (s) at KNOT_PROBS",
        "    durations={",
    ]
    for cell, knots in params.durations.items():
        lines.append(f"        {cell!r}: (" + _wrap([num(x) for x in knots], 12) + "),")
    lines.append("    },")
    lines.append("    reference={")
    for k, v in params.reference.items():
        lines.append(f"        {k!r}: {v!r},")
    lines.append("    },")
    lines.append(")")
    return "\n".join(lines)


PARAMS: dict[str, SyntheticParams] = {"philly-like": PHILLY_LIKE, "pai-like": PAI_LIKE}
KINDS: tuple[str, ...] = tuple(PARAMS)
