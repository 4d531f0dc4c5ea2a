"""One simulation run from its description to files on disk: jobs.parquet, summary.json, manifest.json
(and a preemptive run's segments.parquet).

Why: ``simrun``, sweeps and the paper reproduction all run the same thing; a frozen
:class:`RunConfig` is the unit they pass around, cache by, and record in the manifest.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from policies.registry import make_policy
from predictor.common.gpus import canonical_gpu_type, speed
from predictor.common.inputs import LIMITS, InputError, SpecError, short
from predictor.common.outputs import atomic_file, inside
from predictor.tables import IterationTimeTable, stderr_warning
from simulator.cluster import Cluster, resolve
from simulator.communication import LABEL as COMMUNICATION_LABEL
from simulator.communication import PlacementTiming, check_placement
from simulator.failure_models import FailureModel, job_fates, parse_failures
from simulator.failures import (
    CHECKPOINT_OPTIMAL,
    NO_FAILURES,
    FailureSimulation,
    check_checkpoint_every,
    replay_work,
)
from simulator.metrics import summarize
from simulator.preemption import make_simulation
from simulator.timing import MODEL_PREDICTORS, ModelPredictor, make_predictor
from traces.deadlines import assign_deadlines, default_fraction
from traces.schema import JobTrace

DEFAULT_WORKLOAD = "pai-like:2000"
DEFAULT_CLUSTER = "default"


def needs_binding(predictor: str, observe_after: int | None) -> bool:
    """Whether a run of ``predictor`` (with online feedback after ``observe_after`` iterations)
    must bind its jobs to model configs: a model-based predictor predicts from the config, and
    online feedback counts iterations. The one rule of single runs and sweeps."""
    return predictor in MODEL_PREDICTORS or observe_after is not None


@dataclass(frozen=True)
class RunConfig:
    policy: str
    predictor: str
    trace: str | None = None          # KIND:PATH
    workload: str | None = None       # philly-like:N | pai-like:N
    limit: int | None = None
    cluster: str = DEFAULT_CLUSTER
    seed: int = 0
    # share of jobs given a synthesised deadline; None: 0.2 for traces that state nothing of
    # deadlines, 0 for those that state theirs (traces.deadlines.default_fraction)
    deadline_fraction: float | None = None
    reference_gpu: str | None = None
    load_scale: float = 1.0           # >1 compresses inter-arrival times (more load), <1 stretches them
    bind: bool = False                # bind jobs to model configs (automatic for model-based predictors)
    observe_after: int | None = None  # K: after K iterations on a type the policy sees the true time
    placement: str = "consolidate"    # where a multi-GPU job's GPUs go (simulator.communication.PLACEMENTS)
    communication: bool = True        # bound multi-GPU jobs pay for their gradient all-reduces where they run
    failures: str = NO_FAILURES       # attempts and nodes that fail (simulator.failure_models); "none": never
    checkpoint_every: str | None = None  # with failures: seconds of work between checkpoints, "optimal" (None), "none"

    @property
    def bound(self) -> bool:
        """Whether the run binds its jobs to model configs: asked for, or needed
        (:func:`needs_binding`)."""
        return self.bind or needs_binding(self.predictor, self.observe_after)


# The largest seed, limit or iteration count a run takes: sweeps store them in 64-bit integer
# columns, and numpy seeds only non-negative integers.
INT64_MAX = 2**63 - 1
# The latest simulated submit time --load-scale may stretch a trace to (about 31,700 years): the
# clock is a float of seconds, which keeps sub-millisecond steps up to here; past it (and at a
# --load-scale of 1e-308, infinity) arrival times stop meaning anything.
HORIZON_S = 1e12


def check_seed(seed: object, option: str = "--seed") -> int:
    """A seed as an int, or SpecError: a negative one would fail deep in numpy with a
    message naming another option, and one past int64 cannot be stored with a sweep's points."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= INT64_MAX:
        raise SpecError(f"{option} {short(seed)}: a seed must be an integer from 0 to {INT64_MAX:,}")
    return int(seed)


def check_limit(limit: object, option: str = "--limit") -> int | None:
    """--limit as an int (None: no limit), or SpecError."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise SpecError(f"{option} {short(limit)}: expected a whole number of jobs")
    if limit < 1:
        raise SpecError(f"{option} must be >= 1, got {limit}")
    if limit > INT64_MAX:
        raise SpecError(f"{option} {short(limit)}: at most {INT64_MAX:,} jobs")
    return int(limit)


def check_deadline_fraction(fraction: object, option: str = "--deadline-fraction") -> float | None:
    """The share of jobs given a deadline, a number in [0, 1] (not NaN, which click lets through);
    None (not given) stays None."""
    if fraction is None:
        return None
    try:
        value = float(fraction)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise SpecError(f"{option} {short(fraction)}: must be a number from 0 to 1")
    return value


def check_load_scale(scale: object, option: str = "--load-scale") -> float:
    """A finite load scale > 0 (the trace-dependent lower bound is :func:`load_scale_floor`)."""
    try:
        value = float(scale)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise SpecError(f"load scale must be > 0, got {short(scale)}")
    if not math.isfinite(value):
        raise SpecError(f"{option} {short(scale)}: must be a finite number > 0")
    return value


def check_observe_after(k: object, option: str = "--observe-after") -> int:
    """An iteration count K >= 1 that fits the int64 columns of a sweep's points."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SpecError(f"{option} must be >= 1 iteration, got {short(k)}")
    if k > INT64_MAX:
        raise SpecError(f"{option} {short(k)}: at most {INT64_MAX:,} iterations")
    return int(k)


def check_options(config: RunConfig) -> None:
    """Refuse option values outside the range where a run is defined, before any work."""
    check_seed(config.seed)
    check_limit(config.limit)
    check_deadline_fraction(config.deadline_fraction)
    check_load_scale(config.load_scale)
    if config.observe_after is not None:
        check_observe_after(config.observe_after)
    failure_options(config)


def failure_options(config: RunConfig) -> tuple[FailureModel | None, str]:
    """The run's failure model (None: nothing fails) and checkpoint interval, checked; a
    checkpoint interval without failures is refused (nothing would ever read a checkpoint back)."""
    model = parse_failures(config.failures)
    if model is None:
        if config.checkpoint_every is not None:
            raise SpecError(f"--checkpoint-every {short(config.checkpoint_every)}: checkpoints are modelled "
                            "only with --failures (a run without failures never reads one back)")
        return None, CHECKPOINT_OPTIMAL
    return model, check_checkpoint_every(config.checkpoint_every or CHECKPOINT_OPTIMAL)


def _horizon(jobs: pd.DataFrame) -> float:
    """The latest submit time or deadline a scaled trace may reach: :data:`HORIZON_S`, or the
    trace's own latest one when that is later (so a scale >= 1, which never stretches, is fine)."""
    latest = np.fmax(jobs["deadline_s"].to_numpy(float), jobs["submit_s"].to_numpy(float)).max()
    return max(HORIZON_S, float(latest))


def load_scale_floor(trace: JobTrace) -> float:
    """The smallest --load-scale that keeps every stretched submit time and deadline of ``trace``
    finite and within :func:`_horizon`. Submit times stretch around the first one; a deadline
    keeps its slack after its submit time (:meth:`JobTrace.scaled_load`)."""
    jobs = trace.jobs
    submit = jobs["submit_s"].to_numpy(float)
    slack = np.nan_to_num(jobs["deadline_s"].to_numpy(float) - submit, nan=0.0)
    start = float(submit.min())
    offset = submit - start
    moved = offset > 0
    if not moved.any():  # one batch of arrivals: no scale stretches it
        return 0.0
    return float((offset[moved] / (_horizon(jobs) - start - slack[moved])).max())


def scale_load(trace: JobTrace, scale: float) -> JobTrace:
    """``trace`` with arrivals ``scale`` times as dense, refused (one line naming the option, the
    value and the range for this trace) where a submit time or deadline would pass the horizon."""
    floor = load_scale_floor(trace)
    if scale < floor:
        horizon = _horizon(trace.jobs)
        raise SpecError(
            f"--load-scale {scale:g}: stretches this trace's arrivals past the simulated horizon of "
            f"{horizon:.3g} s (about {readable(horizon / YEAR_S)} years); for this trace use a finite value "
            f"of at least {_round_up(floor):.3g}")
    return trace.scaled_load(scale)


def _round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits (a bound quoted in a message must hold)."""
    if x <= 0:
        return x
    exponent = math.floor(math.log10(x)) - digits + 1
    return math.ceil(x / 10.0**exponent) * 10.0**exponent


def synthetic_workload(spec: str, seed: int, limit: int | None) -> JobTrace:
    """The synthetic workload ``KIND:N``, of which only the first ``limit`` jobs are generated."""
    from traces.synthetic import generate

    kind, _, count = spec.partition(":")
    try:
        n = int(count)
    except ValueError:
        raise SpecError(f"--workload {short(spec)}: expected KIND:N, e.g. pai-like:1000") from None
    try:
        return generate(kind, n, seed=seed, first=limit)
    except ValueError as exc:  # InputError (over the job limit) included
        over = isinstance(exc, InputError) and LIMITS["jobs"].variable in str(exc)  # not another input error
        hint = "" if limit is not None or not over else "; or keep the first K jobs with --limit K"
        raise SpecError(f"--workload {short(spec)}: {exc}{hint}") from None


def load_workload(config: RunConfig) -> JobTrace:
    """The job trace of a run: a real trace file, a synthetic workload, or the embedded default.
    Options are checked before anything is read; --limit is applied while a synthetic workload
    is generated (a real trace is read whole, then cut)."""
    check_options(config)
    if config.trace and config.workload:
        raise SpecError("give either --trace or --workload, not both")
    if config.trace:
        from traces.registry import load_trace

        trace = load_trace(config.trace)
    else:
        trace = synthetic_workload(config.workload or DEFAULT_WORKLOAD, config.seed, config.limit)
    if config.limit is not None:
        trace = trace.head(config.limit)
    if config.load_scale != 1.0:
        trace = scale_load(trace, config.load_scale)
    return assign_deadlines(trace, default_fraction(trace, config.deadline_fraction), seed=config.seed)


def bind(trace: JobTrace, gpu_types: list[str], reference: str, seed: int, *, sequences: pd.DataFrame | None = None,
         progress: bool = False, warn: Callable[[str], None] | None = None
         ) -> tuple[JobTrace, dict, IterationTimeTable, pd.DataFrame]:
    """The trace bound to workload configs (:mod:`traces.binding`), what the manifest records, and
    the true iteration times and op sequences of the configs it drew (:func:`distribute` needs them).
    ``sequences``: the workload set, when the caller has read it already (read here otherwise);
    ``progress``: a bar on stderr while the true iteration times are built (minutes, once);
    ``warn``: gets the line saying a cached table was rebuilt."""
    from predictor.tables import truth_table
    from traces.binding import CLASS_SHARES, assign_configs, bind_workload, named_configs
    from traces.workloads import WORKLOADS_FILE, read_workloads, workload_configs

    sequences = read_workloads() if sequences is None else sequences
    configs = workload_configs(sequences)
    _, chosen = assign_configs(trace.jobs, configs, seed)  # only these configs need true times
    types = sorted(set(gpu_types) | set(trace.jobs["gpu_type"]) - {""} | {reference})
    drawn = sequences[sequences["config_id"].isin(set(chosen))]
    truth = truth_table(drawn, types, progress=progress, warn=warn)
    bound = bind_workload(trace, configs, truth, gpu_types, reference, seed=seed)
    jobs = bound.jobs
    return bound, {"catalog": str(WORKLOADS_FILE), "configs": int(jobs["config_id"].nunique()),
                   "jobs_by_class": {str(k): int(v) for k, v in jobs["job_class"].value_counts().items()},
                   "class_shares_when_untagged": CLASS_SHARES, "truth": truth.source,
                   "jobs_given_the_model_the_trace_names": int((named_configs(trace.jobs, configs) != "").sum()),
                   "reference_gpu_for_untyped_jobs": reference}, truth, drawn


def distribute(trace: JobTrace, cluster: Cluster, reference: str, truth: IterationTimeTable, drawn: pd.DataFrame,
               *, progress: bool = False, warn: Callable[[str], None] | None = None
               ) -> tuple[JobTrace, PlacementTiming]:
    """The bound trace with its multi-GPU jobs timed as data-parallel steps (their iterations at
    their original placement, their per-type run times packed), and the timing the engine charges
    placements with (:mod:`simulator.communication`). ``truth`` and ``drawn``: :func:`bind`'s true
    iteration times and op sequences; the backward table comes from the same cached emulation."""
    from predictor.tables import truth_table

    jobs = trace.jobs
    multi = jobs.loc[jobs["num_gpus"] > 1, "config_id"].unique()
    types = sorted(set(cluster.gpu_types) | set(jobs["gpu_type"]) - {""} | {reference})
    backward = truth_table(drawn, types, progress=progress, warn=warn, phase="backward")
    timing = PlacementTiming(jobs, cluster, drawn[drawn["config_id"].isin(set(multi))], backward, truth)
    return timing.charge(trace, reference), timing


def timing_manifest(trace: JobTrace, timing: PlacementTiming) -> dict:
    """What the manifest records of the communication model."""
    jobs = trace.jobs
    multi = jobs["num_gpus"].to_numpy() > 1
    return {"model": "data-parallel step: DDP buckets, ring all-reduce (predictor.emulator.devices.collectives)",
            "label": COMMUNICATION_LABEL, "multi_gpu_jobs": int(multi.sum()),
            "jobs_at_their_recorded_shape": int((multi & (jobs["shape"].fillna("").astype(str) != "").to_numpy()).sum())
            if "shape" in jobs else 0,
            "gpu_types_without_links": sorted(timing.unpriced)}


def blind_share(records: pd.DataFrame, timing: PlacementTiming | None) -> dict:
    """Whether multi-GPU jobs paid for their communication, and the GPU-seconds of those timed
    blind (as one GPU, wherever their GPUs were): all of them in a run that is not bound to model
    configs (nothing says what they synchronise) or runs ``--no-communication``."""
    done = records[(records["status"] == "completed") & (records["num_gpus"] > 1)]
    held = float((done["num_gpus"] * done["true_runtime"]).sum())
    return {"modelled": timing is not None, "multi_gpu_jobs": int(len(done)),
            "multi_gpu_gpu_seconds_timed_blind": 0.0 if timing is not None else held}


YEAR_S = 365.25 * 86400
OVERLOAD_FACTOR = 10.0        # offered load above this many times the cluster's GPUs: warn
EXTREME_LOAD_SCALE = 100.0    # --load-scale above this, or below its inverse: warn


def readable(x: float, decimals: int = 0) -> str:
    """``x`` with thousands separators, or in scientific notation from 1e12 on (a duration of
    1e300 s would otherwise print as 300 digits)."""
    if math.isfinite(x) and abs(x) >= 1e12:
        return f"{x:.3e}"
    return f"{x:,.{decimals}f}"


def overload_warning(trace: JobTrace, cluster: Cluster) -> str | None:
    """The offered load while jobs arrive against the cluster's GPUs.

    Offered load: GPU-hours of work per hour of the arrival span, each job counted only up to the
    last arrival (the GPUs an unlimited cluster would keep busy on average), so one long job in
    a short trace is no overload. Past :data:`OVERLOAD_FACTOR` times the GPUs, jobs do little but
    queue: almost always a cluster or load scale that does not fit the trace. None for a single
    batch of arrivals."""
    jobs = trace.jobs
    largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
    admitted = jobs[jobs["num_gpus"] <= largest]  # the others are rejected, they offer no load
    submit = admitted["submit_s"].to_numpy(float)
    if len(submit) < 2 or not submit.max() > submit.min():
        return None
    within = np.minimum(admitted["duration_s"].to_numpy(float), submit.max() - submit)
    with np.errstate(over="ignore"):  # GPU-seconds per second = GPU-hours per hour
        rate = float((admitted["num_gpus"].to_numpy(float) * within).sum()) / (submit.max() - submit.min())
    factor = rate / cluster.total_gpus
    if not factor > OVERLOAD_FACTOR:
        return None
    gpus = f"{cluster.total_gpus:,} GPU{'s' if cluster.total_gpus != 1 else ''}"
    return (f"offered load is {readable(rate)} GPU-hours per hour against {gpus} ({readable(factor)}x the "
            "cluster's capacity): jobs will mostly queue; use a larger --cluster or a --load-scale below 1")


def duration_warning(trace: JobTrace) -> str | None:
    """Jobs that run longer than a year: almost always a wrong unit (ms read as s) or a corrupt row."""
    duration = trace.jobs["duration_s"].to_numpy(float)
    long = duration > YEAR_S
    if not long.any():
        return None
    i = int(np.argmax(duration))
    job = trace.jobs.iloc[i]
    return (f"{int(long.sum()):,} job(s) run longer than a year (longest: job {job['job_id']}, line "
            f"{int(job['line'])}, {readable(duration[i] / YEAR_S)} years): check the trace's durations "
            "(their unit, or corrupt rows)")


def load_scale_warning(load_scale: float) -> str | None:
    """A --load-scale so far from 1 that it is more likely a typo than an experiment."""
    if 1 / EXTREME_LOAD_SCALE <= load_scale <= EXTREME_LOAD_SCALE:
        return None
    how = f"{readable(load_scale)}x denser" if load_scale > 1 else f"{readable(1 / load_scale)}x sparser"
    return f"--load-scale {load_scale:g} makes arrivals {how} than in the trace"


def sanity_warnings(trace: JobTrace, cluster: Cluster, config: RunConfig) -> list[str]:
    """One line per input that is legal but almost surely a mistake (the run goes on)."""
    found = (overload_warning(trace, cluster), duration_warning(trace), load_scale_warning(config.load_scale))
    return [w for w in found if w]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("ets-sim", "simpy", "numpy", "pandas", "scipy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


@dataclass
class RunOutput:
    records: pd.DataFrame
    summary: dict
    manifest: dict
    segments: pd.DataFrame | None = None  # a preemptive run's stretches on GPUs (one per job otherwise)
    outages: pd.DataFrame | None = None  # a run with node failures: each node's failure and repair

    FILES = ("jobs.parquet", "summary.json", "manifest.json")
    SEGMENTS = "segments.parquet"  # written by a preemptive run (or one with failures) only
    OUTAGES = "outages.parquet"  # written by a run with node failures only
    TRUTH = "truth"  # the folder of the --compare-truth run

    def files(self) -> tuple[str, ...]:
        """The files this run writes."""
        return (self.FILES + ((self.SEGMENTS,) if self.segments is not None else ())
                + ((self.OUTAGES,) if self.outages is not None else ()))

    def _writers(self, prefix: str = "") -> list[tuple[str, Callable[[Path], None]]]:
        """(relative path, writer of that file's content to a given path), in :meth:`files` order."""
        writers = [lambda p: self.records.to_parquet(p, index=False),
                   lambda p: p.write_text(json.dumps(self.summary, indent=2) + "\n"),
                   lambda p: p.write_text(json.dumps(self.manifest, indent=2, default=str) + "\n")]
        if self.segments is not None:
            writers.append(lambda p: self.segments.to_parquet(p, index=False))
        if self.outages is not None:
            writers.append(lambda p: self.outages.to_parquet(p, index=False))
        return [(prefix + name, write) for name, write in zip(self.files(), writers)]

    def write(self, out_dir: str | Path, *, truth: RunOutput | None = None) -> Path:
        """Write the run's files into ``out_dir`` (created if needed), with ``truth`` (the
        --compare-truth run) in ``out_dir/truth``.

        All or nothing: every file goes to a temporary name first, and only when all are
        written are they renamed into place. So a full disk or a read-only folder leaves no
        truncated file and no mix of new and old files; it raises a one-line
        :class:`~predictor.common.outputs.OutputError` naming the file. A symbolic link below ``out_dir``
        on the way to a file (e.g. a planted ``truth/``) is refused before anything is written
        (:func:`~predictor.common.outputs.inside`).
        """
        out = Path(out_dir)
        writers = self._writers() + (truth._writers(f"{self.TRUTH}/") if truth is not None else [])
        targets = [(inside(out, *rel.split("/")), write) for rel, write in writers]
        with contextlib.ExitStack() as stack:  # on exit, the renames run (last file first)
            for path, write in targets:
                write(stack.enter_context(atomic_file(path)))
        return out


def execute(config: RunConfig, *, trace: JobTrace | None = None, cluster: Cluster | None = None,
            progress: bool = False, warn: Callable[[str], None] | None = None) -> RunOutput:
    """Run one simulation; ``trace``/``cluster`` override the config's (tests, sweeps).

    ``progress``: bars on stderr for the slow steps (table building, the replay); they do not
    change results. ``warn`` gets each sanity warning (:func:`sanity_warnings`) as soon as the
    input is known, before the long steps, and each iteration-time table rebuilt from a cache that
    failed its hash; the manifest records them in any case."""
    trace = trace if trace is not None else load_workload(config)
    cluster = cluster if cluster is not None else resolve(config.cluster)
    sanity = sanity_warnings(trace, cluster, config)
    if warn is not None:
        for line in sanity:
            warn(line)
    policy = make_policy(config.policy)
    table_warnings: list[str] = []

    def note(line: str) -> None:  # a cache table rebuilt: said now, and kept in the manifest
        table_warnings.append(line)
        (warn or stderr_warning)(line)

    failure_model, checkpoint_every = failure_options(config)
    fates = None
    if failure_model is not None:  # drawn on the trace as loaded: binding keeps its jobs and durations
        fates = job_fates(failure_model, trace, config.seed)
        if failure_model.replay:
            trace = replay_work(trace, fates)
    predictor = make_predictor(config.predictor, seed=config.seed, progress=progress, warn=note)
    reference = canonical_gpu_type(config.reference_gpu) if config.reference_gpu else None
    if isinstance(predictor, ModelPredictor):
        predictor.check_devices(cluster.gpu_types)
    binding, timing = None, None
    check_placement(config.placement)
    if config.bound:
        if config.observe_after is not None:
            check_observe_after(config.observe_after)
        reference = reference or cluster.reference_type()
        from traces.workloads import read_workloads

        sequences = read_workloads()  # once per run: the binding and a model predictor share it
        if isinstance(predictor, ModelPredictor):
            predictor.workloads = sequences
        trace, binding, truth, drawn = bind(trace, cluster.gpu_types, reference, config.seed, sequences=sequences,
                                            progress=progress, warn=note)
        if config.communication:
            trace, timing = distribute(trace, cluster, reference, truth, drawn, progress=progress, warn=note)
            binding["communication"] = timing_manifest(trace, timing)
            predictor.distributed = timing.packed_steps
    elif config.placement == "tiresias":
        raise SpecError("--placement tiresias reads each job's gradients: it needs a bound workload "
                        "(a model-based predictor, or --bind)")
    options = dict(reference_type=reference, progress=progress, observe_after=config.observe_after, timing=timing,
                   placement=config.placement)
    if failure_model is None:
        sim = make_simulation(trace, cluster, policy, predictor, **options)
    else:
        sim = FailureSimulation(trace, cluster, policy, predictor, failures=failure_model, fates=fates,
                                checkpoint_every=checkpoint_every, seed=config.seed, **options)
    result = sim.run()
    summary = summarize(result.records, cluster, policy_seconds=result.policy_seconds,
                        policy_calls=result.policy_calls, wall_seconds=result.wall_seconds,
                        events=result.events, busy_by_type=result.busy_by_type, rounds=result.rounds)
    used_types = sorted(set(cluster.gpu_types) | set(trace.jobs["gpu_type"].unique()) - {""} | {sim.reference_type})
    manifest = {
        "config": asdict(config),
        "policy": policy.describe(),
        "predictor": predictor.describe(),
        "trace": {"source": trace.source, "kind": trace.kind, "jobs": len(trace),
                  "excluded_by_loader": trace.excluded,
                  "measured_runtime_types": trace.runtime_types(),
                  "deadlines_stated_by_trace": trace.deadlines_stated,
                  "deadline_fraction_applied": default_fraction(trace, config.deadline_fraction),
                  "loader": trace.meta},
        "cluster": cluster.describe(),
        "reference_gpu": sim.reference_type,
        "binding": binding,
        "communication": blind_share(result.records, timing),
        "gpu_speeds": {t: {"relative_time": speed(t).relative_time, "source": speed(t).source}
                       for t in used_types},
        "warnings": sanity + table_warnings,
        "failures": None if failure_model is None else failure_manifest(failure_model, sim),
        "rejected_jobs": result.records.loc[result.records["status"] == "rejected",
                                            ["job_id", "line", "reason"]].head(100).to_dict("records"),
        "versions": versions(),
        "argv": sys.argv,
    }
    outages = sim.outages_frame() if failure_model is not None and failure_model.nodes is not None else None
    return RunOutput(result.records, summary, manifest, result.segments, outages)


def failure_manifest(model: FailureModel, sim: FailureSimulation) -> dict:
    """What the manifest records of a run with failures: the models and their sources, and the
    checkpoint rule with the intervals it gave."""
    admitted = ~sim.rejected
    interval = sim.interval[admitted]
    finite = interval[np.isfinite(interval)]
    return {**model.describe(),
            "checkpoint_every": sim.checkpoint_every,
            "checkpoint_write": "restart cost's fixed part + checkpoint_bytes / storage bandwidth (simulator.failures)",
            "checkpoint_interval_s_median": float(np.median(finite)) if len(finite) else None,
            "jobs_never_checkpointing": int((~np.isfinite(interval)).sum()),
            "fates": sim.fates.info,
            "node_failures": len(sim.outages)}
