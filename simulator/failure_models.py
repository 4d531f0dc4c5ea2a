"""What fails in a run (``--failures SPEC``): the models, their presets with sources, and each
job's *fates* — drawn (seeded) or replayed from the trace.

Why its own module: the engine (:mod:`simulator.failures`) only executes fates and node failures;
which jobs fail, how often, for how long and after which gaps is a claim about real clusters, and
every number here must say where it comes from (``describe()``, recorded in a run's manifest).

SPEC: ``none``, or models joined by ``+``:

* ``replay``: the trace's own recorded attempts (its ``attempts`` and ``outcome`` columns,
  :mod:`traces.schema`; ``philly-json`` traces have them).
* ``jobs:PRESET`` (:data:`JOB_PRESETS`: AcmeTrace's published shares of failed and cancelled GPU
  jobs, by count and by GPU time) or ``jobs:fail=F,cancel=C[,fail_gpu_time=G,cancel_gpu_time=H]``.
  Each job's final outcome is drawn, tilted by its GPU time so that both shares hold on the run's
  trace (:func:`tilt`); its failed retried attempts before the final one are drawn from the
  Philly subset's recorded attempts (:func:`philly_attempts`), by GPU class 1-4, 5-8, 9+ (jobs of
  1-3 GPUs take the subset's 4-GPU jobs: the subset holds jobs of >= 4 GPUs only).
* ``nodes:RATE|PRESET[,repair=SECONDS]``: node failures per GPU-day (:data:`NODE_PRESETS`), each
  node out of service for a drawn repair time (:class:`RepairTime`).

``replay`` and ``jobs:`` do not combine (one source of job failures); ``nodes:`` combines with
either. Bad text is a :class:`SpecError`, one line naming ``--failures`` and the value.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor.common.inputs import SpecError, short
from traces.schema import ATTEMPTS, OUTCOME, JobTrace, parse_attempts

OPTION = "--failures"
NONE = "none"
FAILURES_HELP = ("'none', or models joined by '+': replay (the trace's recorded attempts); jobs:PRESET "
                 "(philly, acme-seren, acme-kalos, helios) or jobs:fail=F,cancel=C[,fail_gpu_time=G,"
                 "cancel_gpu_time=H]; nodes:RATE|PRESET[,repair=SECONDS] (failures per GPU-day, or llama3, "
                 "rsc1, rsc2)")
SECONDS_PER_DAY = 86_400.0
SEED_STREAM = 54  # the fates' seed stream ([seed, 54]): distinct from every other seeded draw of a run

# -- presets and their sources ------------------------------------------------------------------

ACME_SOURCE = ("AcmeTrace cluster summary (Hu et al., \"Characterization of Large Language Model Development in "
               "the Datacenter\", NSDI'24), row {row}: fail_rate_gpu, fail_rate_gpu_time, cancel_rate_gpu, "
               "cancel_rate_gpu_time (GPU jobs){extra}")
# Preset -> (the summary's row, its published fail, fail GPU-time, cancel, cancel GPU-time shares).
# The test suite checks these against the summary file itself when it is at hand.
ACME_ROWS: dict[str, tuple[str, float, float, float, float]] = {
    "philly": ("Philly", 0.305, 0.386, 0.090, 0.294),
    "acme-seren": ("Seren", 0.429, 0.124, 0.075, 0.664),
    "acme-kalos": ("Kalos", 0.397, 0.080, 0.062, 0.607),
    "helios": ("Helios", 0.155, 0.093, 0.221, 0.394),
}
_ACME_EXTRA = {"philly": "; the Philly trace of Jeon et al., ATC'19",
               "helios": "; the Helios trace of Hu et al., SC'21"}

LLAMA3_SOURCE = ("Dubey et al., \"The Llama 3 Herd of Models\", arXiv:2407.21783, 2024, section 3.3.4: 419 "
                 "unexpected interruptions in 54 days of pre-training on 16,384 H100 GPUs; 419 / (54 x 16,384) "
                 "per GPU-day")
RSC_SOURCE = ("Kokolis et al., \"Revisiting Reliability in Large-Scale Machine Learning Research Clusters\", "
              "HPCA 2025 (arXiv:2410.21680): {name} node failure rate r_f = {rate} per 1,000 node-days, nodes of "
              "8 A100 GPUs (the paper's projected MTTF, 1.8 h at 16,384 GPUs, is 1 / (2,048 nodes x r_f) for "
              "RSC-1); r_f / 8 per GPU-day")
GPUS_PER_RSC_NODE = 8
# Preset -> (failures per GPU-day, source).
NODE_PRESETS: dict[str, tuple[float, str]] = {
    "llama3": (419 / (54 * 16_384), LLAMA3_SOURCE),
    "rsc1": (6.50 / 1000 / GPUS_PER_RSC_NODE, RSC_SOURCE.format(name="RSC-1 (16k GPUs)", rate="6.50")),
    "rsc2": (2.34 / 1000 / GPUS_PER_RSC_NODE, RSC_SOURCE.format(name="RSC-2 (8k GPUs)", rate="2.34")),
}
DEFAULT_REPAIR_S = 4 * 3600.0
REPAIR_ASSUMPTION = ("assumption, no source: exponential with mean 4 h (no published mean or median time to "
                     "repair a GPU node could be confirmed)")

# The Philly subset whose recorded attempts every jobs: preset draws retried attempts from.
PHILLY_ATTEMPTS_VARIABLE = "ETS_PHILLY_ATTEMPTS"
PHILLY_ATTEMPTS_FILE = Path("traces") / "philly" / "marwage_philly_jobs_subset.json"
GPU_CLASSES = ("1-4", "5-8", "9+")  # the subset's 4-GPU jobs stand for 1-4 GPUs (it has none smaller)
_CLASS_EDGES = np.array([4, 8])
TILT_B_LIMIT = 4.0  # |b| of the GPU-time tilt: g^4 already puts a job of 10x the GPU time 10,000x likelier


def _error(text: str, reason: str) -> SpecError:
    quoted = repr(text) if isinstance(text, str) and len(text) <= 200 else short(text)  # a spec is short
    return SpecError(f"{OPTION} {quoted}: {reason}")


# -- the models -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RepairTime:
    """How long a failed node is out of service: a distribution of seconds, and its source."""

    mean_s: float = DEFAULT_REPAIR_S
    kind: str = "exponential"  # or "fixed": always mean_s
    source: str = REPAIR_ASSUMPTION

    @classmethod
    def fixed(cls, seconds: float, source: str = "fixed (given in code)") -> RepairTime:
        """Always ``seconds``: for cases worked out by hand."""
        return cls(float(seconds), "fixed", source)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` repair times in seconds."""
        if self.kind == "fixed":
            return np.full(n, self.mean_s)
        return rng.exponential(self.mean_s, n)

    def describe(self) -> dict:
        return {"distribution": self.kind, "mean_s": self.mean_s, "source": self.source}


@dataclass(frozen=True)
class NodeFailures:
    """Node failures as a Poisson process: a node of G GPUs fails at G × ``rate_per_gpu_day`` a day."""

    rate_per_gpu_day: float
    repair: RepairTime
    source: str
    name: str = "explicit"  # the preset, or "explicit" for a rate given as a number

    def interval(self, rng: np.random.Generator, up_gpus: int) -> float:
        """Seconds to the next failure among the nodes that are up (inf when none is)."""
        if up_gpus <= 0:
            return math.inf
        return float(rng.exponential(SECONDS_PER_DAY / (self.rate_per_gpu_day * up_gpus)))

    def describe(self) -> dict:
        return {"model": "nodes", "preset": self.name, "rate_per_gpu_day": self.rate_per_gpu_day,
                "gpu_days_per_failure": 1 / self.rate_per_gpu_day, "source": self.source,
                "repair": self.repair.describe(),
                "drawn": "failure times (Poisson over the GPUs up), the failed node (in proportion to its GPUs), "
                         "repair times"}


@dataclass(frozen=True)
class JobFailures:
    """Shares of jobs whose final attempt fails or is cancelled, by count and by GPU time."""

    name: str
    fail_share: float
    fail_gpu_time_share: float | None
    cancel_share: float
    cancel_gpu_time_share: float | None
    source: str

    def describe(self) -> dict:
        return {"model": "jobs", "preset": self.name, "fail_share": self.fail_share,
                "fail_gpu_time_share": self.fail_gpu_time_share, "cancel_share": self.cancel_share,
                "cancel_gpu_time_share": self.cancel_gpu_time_share, "source": self.source,
                "outcome": "drawn per job: p(i) = min(1, a x g_i^b), g_i = num_gpus x duration_s, a and b solved "
                           "on the trace so that both shares hold in expectation",
                "retried_attempts": "drawn from the Philly subset's recorded attempts (marwage_philly_jobs_subset."
                                    "json, read at run time) by GPU class 1-4, 5-8, 9+: their number, each failed "
                                    "attempt's length (among those shorter than the job's duration) and the gap "
                                    "before the next"}


JOB_PRESETS: dict[str, JobFailures] = {
    name: JobFailures(name, fail, fail_time, cancel, cancel_time,
                      ACME_SOURCE.format(row=row, extra=_ACME_EXTRA.get(name, "")))
    for name, (row, fail, fail_time, cancel, cancel_time) in ACME_ROWS.items()
}


@dataclass
class JobFates:
    """Per job (index-aligned with ``trace.jobs``): its failed retried attempts and how it ends.

    ``failed_lengths``: seconds each failed attempt runs before failing, on the trace's own clock
    (the speed its ``duration_s`` was measured at; the engine scales them to the GPU type the job
    gets). ``gaps``: seconds from each failed attempt's end to the job's resubmission.
    ``outcome``: "completed", "failed" or "cancelled", how the final attempt ends once it has run
    the job's work (a real trace's duration of a failed or cancelled job is how long it ran).
    ``replayed``: the attempts are the trace's own. ``mtbf_by_class``: the mean seconds of running
    between retried failures per GPU class (:data:`GPU_CLASSES`) in the data the fates came from;
    ``info``: what was solved and read, for the manifest.
    """

    failed_lengths: list[tuple[float, ...]]
    gaps: list[tuple[float, ...]]
    outcome: np.ndarray
    replayed: bool
    mtbf_by_class: dict[str, float] = field(default_factory=dict)
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FailureModel:
    """A parsed ``--failures`` value: which models run, with their parameters."""

    spec: str
    replay: bool
    jobs: JobFailures | None
    nodes: NodeFailures | None

    def describe(self) -> dict:
        """Every model, its parameters and their sources; what is replayed and what is drawn."""
        models: list[dict] = []
        if self.replay:
            models.append({"model": "replay", "source": "the trace's attempts and outcome columns",
                           "replayed": "each job's failed attempts (length, gap) and final outcome"})
        if self.jobs is not None:
            models.append(self.jobs.describe())
        if self.nodes is not None:
            models.append(self.nodes.describe())
        return {"spec": self.spec, "models": models}

    def mtbf_s(self, num_gpus: np.ndarray, fates: JobFates) -> np.ndarray:
        """Per job, the mean seconds of running between failures (Young/Daly's MTBF): the models'
        rates add. Nodes: 86,400 / (rate × num_gpus). Jobs and replay: the data's mean failed
        attempt length / the share of its attempts that fail, in the job's GPU class (only retried
        failures count: a checkpoint saves work only for a job that runs again). inf: nothing fails.
        A node model without a rate (a test's stand-in) adds nothing."""
        gpus = np.asarray(num_gpus, dtype="float64")
        rate = np.zeros(len(gpus))  # failures per second
        node_rate = getattr(self.nodes, "rate_per_gpu_day", None)
        if node_rate is not None:
            rate += node_rate * gpus / SECONDS_PER_DAY
        if (self.replay or self.jobs is not None) and fates.mtbf_by_class:
            per_class = np.array([fates.mtbf_by_class[c] for c in GPU_CLASSES])
            rate += 1.0 / per_class[gpu_class(gpus)]
        with np.errstate(divide="ignore"):
            return 1.0 / rate


def gpu_class(num_gpus: np.ndarray) -> np.ndarray:
    """Index into :data:`GPU_CLASSES` per job: 1-4 GPUs -> 0, 5-8 -> 1, more -> 2."""
    return np.searchsorted(_CLASS_EDGES, np.asarray(num_gpus), side="left")


# -- parsing ------------------------------------------------------------------------------------

def _number(text: str, what: str, value: str) -> float:
    """``value`` as a finite float; SpecError naming ``what`` otherwise."""
    try:
        if "_" in value:
            raise ValueError(value)
        number = float(value)
    except ValueError:
        raise _error(text, f"{what} {short(value.strip())} is not a number") from None
    if not math.isfinite(number):
        raise _error(text, f"{what} {short(value.strip())} is not finite")
    return number


def _options(text: str, model: str, items: list[str], known: tuple[str, ...]) -> dict[str, str]:
    """``key=value`` items as a dict; unknown, repeated or malformed keys refused."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or not key:
            raise _error(text, f"{model}: {short(item.strip())} is not KEY=VALUE (keys: {', '.join(known)})")
        if key not in known:
            raise _error(text, f"{model}: unknown key {short(key)}; known: {', '.join(known)}")
        if key in out:
            raise _error(text, f"{model}: {key} given twice")
        out[key] = value
    return out


def _share(text: str, key: str, value: str, *, zero: bool) -> float:
    number = _number(text, f"jobs: {key}", value)
    if not ((0.0 <= number if zero else 0.0 < number) and number < 1.0):
        raise _error(text, f"jobs: {key} {number:g} is outside {'[0, 1)' if zero else '(0, 1)'}")
    return number


def _parse_jobs(text: str, arg: str) -> JobFailures:
    if "=" not in arg:
        name = arg.strip().lower()
        if name not in JOB_PRESETS:
            raise _error(text, f"jobs: unknown preset {short(arg.strip())}; known: {', '.join(JOB_PRESETS)} "
                         "(or fail=F,cancel=C[,fail_gpu_time=G,cancel_gpu_time=H])")
        return JOB_PRESETS[name]
    keys = ("fail", "cancel", "fail_gpu_time", "cancel_gpu_time")
    given = _options(text, "jobs", arg.split(","), keys)
    for key in ("fail", "cancel"):
        if key not in given:
            raise _error(text, f"jobs: {key}= is missing (jobs:fail=F,cancel=C[,fail_gpu_time=G,cancel_gpu_time=H])")
    fail, cancel = (_share(text, k, given[k], zero=True) for k in ("fail", "cancel"))
    if fail + cancel >= 1:
        raise _error(text, f"jobs: fail + cancel = {fail + cancel:g}, must be below 1 (the rest complete)")
    times = {k: _share(text, k, given[k], zero=False) if k in given else None for k in keys[2:]}
    for key, share in (("fail_gpu_time", fail), ("cancel_gpu_time", cancel)):
        if times[key] is not None and share == 0:
            raise _error(text, f"jobs: {key} needs a share of jobs above 0 ({key.split('_')[0]}=0)")
    if sum(v for v in times.values() if v is not None) >= 1:
        raise _error(text, "jobs: fail_gpu_time + cancel_gpu_time must be below 1 (completed jobs hold the rest)")
    return JobFailures("explicit", fail, times["fail_gpu_time"], cancel, times["cancel_gpu_time"],
                       f"given with {OPTION}")


def _parse_nodes(text: str, arg: str) -> NodeFailures:
    first, *rest = arg.split(",")
    first = first.strip()
    options = _options(text, "nodes", rest, ("repair",))
    if not first or "=" in first:
        raise _error(text, f"nodes: give a rate (failures per GPU-day) or a preset ({', '.join(NODE_PRESETS)}) first")
    if first.lower() in NODE_PRESETS:
        name = first.lower()
        rate, source = NODE_PRESETS[name]
    else:
        rate = _number(text, "nodes: rate", first)
        if rate <= 0:
            raise _error(text, f"nodes: rate {rate:g} must be above 0 (failures per GPU-day; presets: "
                         f"{', '.join(NODE_PRESETS)})")
        name, source = "explicit", f"given with {OPTION}"
    repair = RepairTime()
    if "repair" in options:
        seconds = _number(text, "nodes: repair", options["repair"])
        if seconds <= 0:
            raise _error(text, f"nodes: repair {seconds:g} must be above 0 seconds")
        repair = RepairTime(seconds, "exponential", f"mean given with {OPTION} (repair=)")
    return NodeFailures(rate, repair, source, name)


def parse_failures(text: str) -> FailureModel | None:
    """The model ``text`` names (module docstring), or None for ``none``."""
    spec = str(text).strip()
    if spec.lower() == NONE:
        return None
    if not spec:
        raise _error(text, f"empty; expected {FAILURES_HELP}")
    replay, jobs, nodes, seen = False, None, None, set()
    for part in spec.split("+"):
        kind, colon, arg = part.strip().partition(":")
        kind = kind.strip().lower()
        if kind not in ("replay", "jobs", "nodes"):
            what = "'none' stands alone" if kind == NONE else (
                f"unknown model {short(kind)}" if kind else "an empty model between '+' signs")
            raise _error(text, f"{what}; known: replay, jobs:, nodes: ({FAILURES_HELP})")
        if kind in seen:
            raise _error(text, f"{kind} given twice")
        seen.add(kind)
        if kind == "replay":
            if colon:
                raise _error(text, "replay takes no value (it replays the trace's own attempts)")
            replay = True
        elif kind == "jobs":
            jobs = _parse_jobs(text, arg)
        else:
            nodes = _parse_nodes(text, arg)
    if replay and jobs is not None:
        raise _error(text, "replay and jobs: do not combine (one source of job failures: the trace's recorded "
                     "attempts, or drawn ones)")
    return FailureModel(spec, replay, jobs, nodes)


# -- the data the fates come from ---------------------------------------------------------------

@dataclass(frozen=True)
class AttemptData:
    """Recorded attempts, as the fates draw on them: per GPU class each job's number of failed
    attempts, and the failed attempts' lengths (sorted) and gaps, all classes together."""

    source: str
    retries: tuple[np.ndarray, ...]  # per GPU class: each job's failed attempts before its last
    lengths: np.ndarray
    gaps: np.ndarray

    def mtbf_by_class(self) -> dict[str, float]:
        """Mean failed length / share of attempts that fail, per class (inf: none fails)."""
        mean = float(self.lengths.mean()) if len(self.lengths) else math.inf
        out = {}
        for name, retries in zip(GPU_CLASSES, self.retries):
            failed, attempts = int(retries.sum()), int(retries.sum()) + len(retries)
            out[name] = mean * attempts / failed if failed else math.inf
        return out

    def describe(self) -> dict:
        return {"source": self.source, "jobs_by_class": {c: len(r) for c, r in zip(GPU_CLASSES, self.retries)},
                "retried_share_by_class": {c: float((r > 0).mean()) if len(r) else None
                                           for c, r in zip(GPU_CLASSES, self.retries)},
                "failed_attempts": len(self.lengths),
                "failed_length_median_s": float(np.median(self.lengths)) if len(self.lengths) else None,
                "gap_median_s": float(np.median(self.gaps)) if len(self.gaps) else None,
                "mtbf_s_by_class": self.mtbf_by_class()}


def attempt_data(trace: JobTrace) -> AttemptData:
    """The recorded attempts of a trace with an ``attempts`` column."""
    pairs = [parse_attempts(text) for text in trace.jobs[ATTEMPTS].tolist()]
    counts = np.array([len(p) for p in pairs], dtype="int64")
    cls = gpu_class(trace.jobs["num_gpus"].to_numpy())
    flat = np.array([pair for p in pairs for pair in p], dtype="float64").reshape(-1, 2)
    return AttemptData(trace.source, tuple(counts[cls == c] for c in range(len(GPU_CLASSES))),
                       np.sort(flat[:, 0]), flat[:, 1].copy())


def default_attempts_file() -> Path:
    """``$ETS_PHILLY_ATTEMPTS``, else the Philly subset under ``$ETS_SHARED``, else under
    ``<repo>/../shared`` (read at run time, never copied into the repository)."""
    if os.environ.get(PHILLY_ATTEMPTS_VARIABLE):
        return Path(os.environ[PHILLY_ATTEMPTS_VARIABLE])
    if os.environ.get("ETS_SHARED"):
        return Path(os.environ["ETS_SHARED"]) / PHILLY_ATTEMPTS_FILE
    return Path(__file__).resolve().parents[1].parent / "shared" / PHILLY_ATTEMPTS_FILE


@functools.lru_cache(maxsize=4)
def _read_philly_attempts(path: str) -> AttemptData:
    from traces import philly  # loaded on first use: a run without jobs: failures never needs it

    return attempt_data(philly.load_json(path, epoch=None))


def philly_attempts(spec: str = "jobs:") -> AttemptData:
    """The Philly subset's attempts (read once per process); SpecError when it is absent."""
    path = default_attempts_file()
    if not path.is_file():
        raise _error(spec, f"the jobs: models draw retried attempts from the Philly subset, {path}, which is not "
                     f"there: set {PHILLY_ATTEMPTS_VARIABLE} to that file (marwage_philly_jobs_subset.json) or "
                     "ETS_SHARED to the shared/ folder holding it")
    return _read_philly_attempts(str(path.resolve()))


# -- drawing the fates --------------------------------------------------------------------------

def _a_for(w_desc: np.ndarray, target: float) -> float:
    """The a with Σ min(1, a × w) = ``target`` for weights sorted descending (all > 0): exact,
    from the piecewise-linear sum's value at each breakpoint a = 1 / w_k."""
    tail = np.append(np.cumsum(w_desc[::-1])[::-1], 0.0)  # tail[k] = Σ_{i >= k} w_i
    at_break = np.arange(1, len(w_desc) + 1) + tail[1:] / w_desc  # the sum at a = 1 / w_k
    k = min(int(np.searchsorted(at_break, target, side="left")), len(w_desc) - 1)
    return (target - k) / tail[k]


def _dot(p: np.ndarray, g: np.ndarray) -> float:
    """Σ p g. Why not ``p @ g``: BLAS's dot took 12 ms for 111k jobs on our 2-core machine (its
    threads), einsum 0.2 ms; the tilt's bisection takes ~70 of them."""
    return float(np.einsum("i,i->", p, g))


def tilt(g: np.ndarray, share: float, time_share: float | None) -> tuple[np.ndarray, dict]:
    """Per job p(i) = min(1, a × g_i^b) whose mean is ``share`` and whose GPU-time-weighted mean
    Σ p g / Σ g is ``time_share``: a solved exactly for each b, b by bisection in
    [-:data:`TILT_B_LIMIT`, +:data:`TILT_B_LIMIT`] (clipped there when the target is out of
    reach, and said so). b = 0 when ``time_share`` is None or the g are all equal. A job of no GPU
    time is weighted as the smallest job with some (g^b is 0 or infinite otherwise)."""
    g = np.asarray(g, dtype="float64")
    n, total = len(g), float(g.sum())
    info: dict = {"share": share, "gpu_time_share": time_share}
    if n == 0 or share == 0:
        return np.zeros(n), {**info, "a": 0.0, "b": 0.0}
    positive = g[g > 0]
    if time_share is None or total == 0 or positive.min() == positive.max() and len(positive) == n:
        p = np.full(n, share)
        return p, {**info, "a": share, "b": 0.0, "achieved_gpu_time_share": _dot(p, g) / total if total else None}
    log_g = np.log(np.maximum(g, positive.min()))
    order = np.argsort(-log_g, kind="stable")  # descending g: descending weight for b > 0

    def solve(b: float) -> tuple[np.ndarray, float]:
        lw = b * log_g[order] if b >= 0 else b * log_g[order][::-1]
        shift = lw.max()
        w = np.exp(lw - shift)
        a = _a_for(w, share * n)
        p = np.empty(n)
        idx = order if b >= 0 else order[::-1]
        p[idx] = np.minimum(1.0, a * w)
        return p, float(a) * math.exp(-shift)

    def achieved(b: float) -> float:
        return _dot(solve(b)[0], g) / total

    lo, hi = (0.0, TILT_B_LIMIT) if time_share > share else (-TILT_B_LIMIT, 0.0)
    clipped = None
    if not (achieved(lo) <= time_share <= achieved(hi)):
        clipped = hi if time_share > share else lo
        b = clipped
    else:
        while hi - lo > 1e-9:  # the bracket, 4 wide, to 1e-9 (32 halvings): shares to ~1e-9
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if achieved(mid) < time_share else (lo, mid)
        b = (lo + hi) / 2
    p, a = solve(b)
    info.update(a=a, b=b, achieved_share=float(p.mean()), achieved_gpu_time_share=_dot(p, g) / total)
    if clipped is not None:
        info["note"] = (f"the GPU-time share {time_share:g} is out of reach on this trace: b clipped at {b:g}, "
                        f"giving {info['achieved_gpu_time_share']:.4g}")
    return p, info


def draw_outcomes(jobs: JobFailures, num_gpus: np.ndarray, duration_s: np.ndarray,
                  rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """Each job's final outcome: one uniform u per job; failed if u < p_f, cancelled if
    p_f <= u < p_f + p_c (both scaled down where they add up past 1), else completed."""
    g = np.asarray(num_gpus, dtype="float64") * np.asarray(duration_s, dtype="float64")
    p_fail, fail_info = tilt(g, jobs.fail_share, jobs.fail_gpu_time_share)
    p_cancel, cancel_info = tilt(g, jobs.cancel_share, jobs.cancel_gpu_time_share)
    over = np.maximum(1.0, p_fail + p_cancel)
    p_fail, p_cancel = p_fail / over, p_cancel / over
    u = rng.random(len(g))
    outcome = np.full(len(g), "completed", dtype=object)
    outcome[u < p_fail + p_cancel] = "cancelled"
    outcome[u < p_fail] = "failed"
    info = {"failed": fail_info, "cancelled": cancel_info, "jobs_scaled_down": int((over > 1).sum())}
    return outcome, info


def draw_attempts(data: AttemptData, num_gpus: np.ndarray, duration_s: np.ndarray,
                  rng: np.random.Generator) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    """Each job's failed attempts: their number from its GPU class's recorded jobs, each length
    among the recorded lengths shorter than the job's duration (none when no recorded length
    is: a job of duration 0 is never retried), each gap from the recorded gaps."""
    cls = gpu_class(num_gpus)
    n = len(cls)
    count = np.zeros(n, dtype="int64")
    for c, retries in enumerate(data.retries):
        mine = cls == c
        if mine.any():
            count[mine] = rng.choice(retries, size=int(mine.sum())) if len(retries) else 0
    shorter = np.searchsorted(data.lengths, np.asarray(duration_s, dtype="float64"), side="left")
    count[shorter == 0] = 0
    u = rng.random(int(count.sum()))
    pick = np.minimum((u * np.repeat(shorter, count)).astype("int64"), np.repeat(shorter, count) - 1)
    lengths = data.lengths[pick]
    gaps = rng.choice(data.gaps, size=len(pick)) if len(pick) else np.zeros(0)
    out_lengths: list[tuple[float, ...]] = [()] * n
    out_gaps: list[tuple[float, ...]] = [()] * n
    ends = np.cumsum(count)
    for i in np.flatnonzero(count):
        lo, hi = int(ends[i] - count[i]), int(ends[i])
        out_lengths[i], out_gaps[i] = tuple(lengths[lo:hi].tolist()), tuple(gaps[lo:hi].tolist())
    return out_lengths, out_gaps


def _replayed(model: FailureModel, trace: JobTrace) -> JobFates:
    """The trace's own attempts and outcomes, exactly."""
    jobs = trace.jobs
    if ATTEMPTS not in jobs.columns or (jobs[ATTEMPTS].fillna("") == "").all():
        raise _error(model.spec, "replay needs a trace that records attempts (philly-json does; or a CSV with an "
                     f"`attempts` column); this {trace.kind} trace ({short(trace.source)}) records none")
    pairs = [parse_attempts(text) for text in jobs[ATTEMPTS].fillna("").tolist()]
    outcome = (jobs[OUTCOME].fillna("").to_numpy(dtype=object) if OUTCOME in jobs.columns
               else np.full(len(jobs), "", dtype=object))
    outcome = np.where(outcome == "", "completed", outcome).astype(object)
    data = attempt_data(trace)
    return JobFates([tuple(p[0] for p in job) for job in pairs], [tuple(p[1] for p in job) for job in pairs],
                    outcome, True, data.mtbf_by_class(), {"attempts": data.describe()})


def job_fates(model: FailureModel, trace: JobTrace, seed: int) -> JobFates:
    """Each job's fates under ``model``: replayed from the trace, drawn (seeded: the same seed
    and trace give the same fates), or, with node failures only, none."""
    if model.replay:
        return _replayed(model, trace)
    n = len(trace)
    if model.jobs is None:
        return JobFates([()] * n, [()] * n, np.full(n, "completed", dtype=object), False)
    data = philly_attempts(model.spec)
    gpus, duration = trace.jobs["num_gpus"].to_numpy(), trace.jobs["duration_s"].to_numpy(dtype="float64")
    outcome_seq, attempt_seq = np.random.SeedSequence([seed, SEED_STREAM]).spawn(2)
    outcome, info = draw_outcomes(model.jobs, gpus, duration, np.random.default_rng(outcome_seq))
    lengths, gaps = draw_attempts(data, gpus, duration, np.random.default_rng(attempt_seq))
    return JobFates(lengths, gaps, outcome, False, data.mtbf_by_class(), {"outcome": info, "attempts": data.describe()})
