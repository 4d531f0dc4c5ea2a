"""The two timing channels: true run times (the engine's clock) and predicted ones (the policy's).

Why: the whole study is how prediction error turns into JCT and tardiness, so the engine must
complete jobs with true times while policies plan with a predictor's times, and both must be
matrices over (job, GPU type) computed once per run.

Ground truth: a trace's measured per-type run times (``runtime_s:<GPU>`` columns, Hydra cases)
where present; otherwise (no column, or an empty cell: not known) the observed duration scaled by
the measured relative iteration time of the target type over the observed type
(:mod:`predictor.common.gpus`). Jobs without an observed type are taken to have been observed on the
*reference type* (by default the cluster's most numerous type). **+inf** means the job cannot run
on that type: a ``runtime_s:<GPU>`` cell of +inf, or a type outside the job's ``allowed_gpus``.
The engine rejects a job that no type of the cluster can both hold and run, gives the policies
+inf as the predicted time of every pair the job cannot run on (whatever the predictor says: it is
a stated constraint, not an estimate), and refuses a placement there.

Predictors produce a matrix of the same shape. ``truth`` returns the ground truth; ``noisy:<MRE>``
multiplies it by ``exp(sigma * z)``, z ~ N(0, 1) drawn from a hash of (seed, job id, GPU type) —
so a job's error on a type never depends on which other jobs are in the run — with sigma solved
from E|exp(sigma z) - 1| = exp(sigma^2 / 2) (2 Phi(sigma) - 1) = MRE, so the expected mean relative
error is exactly MRE, predictions stay positive and the error is symmetric in log space.
Model-based predictors (ETS, Habitat-style, DNNPerf-style, operator-based) plug in through
:class:`IterationTimeTable`: predicted run time = iterations x predicted seconds per iteration, on
a workload bound to model configs (:mod:`traces.binding`), whose per-type true run times come from
the same configs' true iteration times.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from predictor.common.gpus import relative_time
from predictor.common.inputs import SpecError, check_probability
from predictor.methods import METHODS
from predictor.tables import IterationTimeTable
from traces.schema import ALLOWED_GPUS, ALLOWED_SEPARATOR, RUNTIME_PREFIX
from traces.seeding import hashed_uniform, scalar_exp


def true_runtimes(jobs: pd.DataFrame, gpu_types: list[str], reference_type: str) -> np.ndarray:
    """Seconds each job takes on each GPU type alone (matrix n_jobs x n_types); +inf where it
    cannot run (see the module docstring)."""
    codes, observed = pd.factorize(jobs["gpu_type"].astype(str), use_na_sentinel=False)  # per type, not per job
    speeds = np.array([relative_time(reference_type if t == "" else t) for t in observed], dtype="float64")
    obs_speed = speeds[codes]
    duration = jobs["duration_s"].to_numpy(dtype="float64")
    out = np.empty((len(jobs), len(gpu_types)))
    for k, gpu in enumerate(gpu_types):
        measured = RUNTIME_PREFIX + gpu
        if measured in jobs.columns:
            out[:, k] = jobs[measured].to_numpy(dtype="float64")
            unknown = np.isnan(out[:, k])
            if unknown.any():  # an empty cell: scaled from the duration, as without a column
                out[unknown, k] = duration[unknown] * relative_time(gpu) / obs_speed[unknown]
        else:
            out[:, k] = duration * relative_time(gpu) / obs_speed
    if ALLOWED_GPUS in jobs.columns:
        out[~allowed_matrix(jobs[ALLOWED_GPUS], gpu_types)] = np.inf
    return out


def allowed_matrix(allowed: pd.Series, gpu_types: list[str]) -> np.ndarray:
    """(job, type): whether the type is among the job's ``allowed_gpus`` ("" allows every type);
    each distinct list is split once (a constraint column repeats a few lists over many jobs)."""
    codes, lists = pd.factorize(allowed.fillna("").astype(str), use_na_sentinel=False)
    table = np.ones((len(lists), len(gpu_types)), dtype=bool)
    for i, text in enumerate(lists):
        if text:
            names = {name.strip() for name in text.split(ALLOWED_SEPARATOR)}
            table[i] = [gpu in names for gpu in gpu_types]
    return table[codes]


class RuntimePredictor(ABC):
    """Produces the run-time matrix (seconds per job and GPU type) a policy plans with: the
    ``--predictor`` of a run. Not to be confused with an iteration-time model of the ``predictor``
    package (:class:`predictor.methods.base.TrainedPredictor`), which :class:`ModelPredictor`
    turns into run times through an iteration-time table."""

    name: str
    # Per-iteration compute (job, type) → seconds of a step on each type, packed: a bound run's
    # communication model (simulator.communication), set by the run; predictors that start from
    # the truth (truth, noisy) have it already.
    distributed: Callable[[np.ndarray], np.ndarray] | None = None

    @abstractmethod
    def runtimes(self, jobs: pd.DataFrame, gpu_types: list[str], truth: np.ndarray) -> np.ndarray:
        """Predicted seconds for each (job, GPU type); ``truth`` is passed for oracle-style predictors."""

    def comm_scale(self, jobs: pd.DataFrame, gpu_types: list[str]) -> np.ndarray:
        """(job, GPU type): the predictor's communication ÷ the communication model's, which a
        policy's view of placement uses (:meth:`policies.base.SchedulerView.starts_now`): 1 for
        all but an injected error on communication."""
        return np.ones((len(jobs), len(gpu_types)))

    def quantile_factors(self, q: float, jobs: pd.DataFrame, gpu_types: list[str]) -> np.ndarray:
        """(job, GPU type): the q-quantile of true / predicted run time, how the predictor states
        its uncertainty (the view's quantiles and interval bounds, ``deadline_quantile`` planning)."""
        raise SpecError(f"predictor {self.name!r} states no uncertainty (no quantiles)")

    def describe(self) -> dict:
        return {"name": self.name}


class TruthPredictor(RuntimePredictor):
    name = "truth"

    def runtimes(self, jobs, gpu_types, truth):
        return truth.copy()

    def quantile_factors(self, q, jobs, gpu_types):
        check_probability(q, "quantile")
        return np.ones((len(jobs), len(gpu_types)))  # the truth is certain


def sigma_for_mre(mre: float) -> float:
    """Log-normal sigma whose expected |exp(sigma z) - 1| equals ``mre``."""
    if mre == 0:
        return 0.0
    # math.exp, not np.exp: the root moves with the last bit of exp, and numpy's differs by CPU
    return brentq(lambda s: math.exp(s * s / 2) * (2 * float(ndtr(s)) - 1) - mre, 1e-12, 20.0, xtol=1e-14)


class NoisyPredictor(RuntimePredictor):
    """Truth x exp(sigma z), seeded per (job, GPU type); expected mean relative error = ``mre``."""

    def __init__(self, mre: float, seed: int = 0):
        if not (mre >= 0 and np.isfinite(mre)):
            raise SpecError(f"noisy: the mean relative error must be a number >= 0, got {mre}")
        self.mre, self.seed = float(mre), int(seed)
        self.sigma = sigma_for_mre(self.mre)
        self.name = f"noisy:{mre:g}"

    def runtimes(self, jobs, gpu_types, truth):
        ids = jobs["job_id"].astype(str).to_numpy()
        out = np.empty_like(truth)
        for k, gpu in enumerate(gpu_types):
            z = ndtri(hashed_uniform([f"{self.seed}|{gpu}|{i}" for i in ids]))
            out[:, k] = truth[:, k] * scalar_exp(self.sigma * z)
        return out

    def quantile_factors(self, q, jobs, gpu_types):
        """Exact: predicted = truth · exp(σz), so truth = predicted · exp(-σz) and
        P(truth <= predicted · exp(σ Φ⁻¹(q))) = P(-z <= Φ⁻¹(q)) = q, whatever the truth."""
        q = check_probability(q, "quantile")
        return np.full((len(jobs), len(gpu_types)), math.exp(self.sigma * float(ndtri(q))))

    def describe(self) -> dict:
        return {"name": self.name, "mre": self.mre, "sigma": self.sigma, "seed": self.seed,
                "distribution": "truth * exp(sigma * z), z ~ N(0,1) hashed from (seed, gpu_type, job_id)"}


class NoisyPartPredictor(NoisyPredictor):
    """The truth with the error on one part only: ``compute`` (the per-GPU compute of a step) or
    ``comm`` (its exposed communication), each × exp(σz) as :class:`NoisyPredictor`'s; for
    bound runs with their communication model (the ``compute_s:<GPU>`` columns split the truth)."""

    PARTS = ("compute", "comm")

    def __init__(self, part: str, mre: float, seed: int = 0):
        super().__init__(mre, seed)
        self.part = part
        self.name = f"noisy-{part}:{mre:g}"

    def runtimes(self, jobs, gpu_types, truth):
        from simulator.communication import COMPUTE_PREFIX

        missing = [g for g in gpu_types if COMPUTE_PREFIX + g not in jobs.columns]
        if missing:
            raise SpecError(f"predictor {self.name!r} needs a bound run with its communication model "
                            "(--bind, without --no-communication)")
        factors = self._factors(jobs, gpu_types)
        compute = np.column_stack([jobs[COMPUTE_PREFIX + g].to_numpy(dtype="float64") for g in gpu_types])
        with np.errstate(invalid="ignore"):  # inf - inf where the job cannot run: +inf stays
            comm = np.where(np.isfinite(truth), np.maximum(0.0, truth - compute), 0.0)
        compute = np.where(np.isfinite(truth), compute, truth)
        return compute * factors + comm if self.part == "compute" else compute + comm * factors

    def _factors(self, jobs, gpu_types) -> np.ndarray:
        """exp(σz) per (job, type), as :class:`NoisyPredictor` draws them."""
        return super().runtimes(jobs, gpu_types, np.ones((len(jobs), len(gpu_types))))

    def comm_scale(self, jobs, gpu_types):
        return self._factors(jobs, gpu_types) if self.part == "comm" else super().comm_scale(jobs, gpu_types)

    def quantile_factors(self, q, jobs, gpu_types):
        raise SpecError(f"predictor {self.name!r} states no uncertainty (no quantiles)")

    def describe(self) -> dict:
        return {**super().describe(), "part": self.part}


class TablePredictor(RuntimePredictor):
    """Run time = iterations x table seconds, for workloads bound to model configs."""

    def __init__(self, name: str, table: IterationTimeTable):
        self.name, self.table = name, table

    def runtimes(self, jobs, gpu_types, truth):
        for col in ("config_id", "iterations"):
            if col not in jobs.columns:
                raise SpecError(f"predictor {self.name!r} needs a workload bound to model configs "
                                f"(column {col!r} is missing)")
        per_iter = self.table.matrix(jobs["config_id"], gpu_types)
        if self.distributed is not None:  # a multi-GPU job's step: the predicted compute plus communication
            per_iter = self.distributed(per_iter)
        return per_iter * jobs["iterations"].to_numpy(dtype="float64")[:, None]


class ModelPredictor(RuntimePredictor):
    """A pretrained predictor (ETS or a baseline) through its iteration-time table over the bound
    workload's configs and the cluster's GPU types (built on first use, cached on disk)."""

    def __init__(self, method: str, *, progress: bool = False, warn: Callable[[str], None] | None = None):
        self.name = self.method = method
        self.progress = progress  # a bar on stderr while the table is built (not when cached)
        self.warn = warn  # gets the line saying a cache table was rebuilt [default: stderr]
        self.workloads: pd.DataFrame | None = None  # the run's workload configs, handed on by it (else read once)
        self.table: IterationTimeTable | None = None
        self.pretrained = None  # the checkpoints read for the table, kept for their intervals (read once)

    def sequences(self) -> pd.DataFrame:
        """The workload set the run was bound to (read here, once, when the run did not hand it on)."""
        if self.workloads is None:
            from traces.workloads import read_workloads

            self.workloads = read_workloads()
        return self.workloads

    def check_devices(self, gpu_types: list[str]) -> None:
        """Refuse, before any work, a cluster with a GPU type that has no pretrained checkpoint."""
        from predictor.checkpoints import available
        from predictor.emulator.devices.specs import DeviceParamsError, device_key

        have = available(method=self.method)
        missing = []
        for gpu in gpu_types:
            try:
                if device_key(gpu) not in have:
                    missing.append(gpu)
            except DeviceParamsError:
                missing.append(gpu)
        if missing:
            raise SpecError(f"predictor {self.name!r} has no pretrained checkpoint for GPU type(s) "
                            f"{', '.join(missing)} (it has: {', '.join(have) or 'none'}); "
                            "train them with `python -m experiments.pretrain --devices ...`")

    def runtimes(self, jobs, gpu_types, truth):
        from predictor.tables import method_table

        for col in ("config_id", "iterations"):
            if col not in jobs.columns:
                raise SpecError(f"predictor {self.name!r} needs a workload bound to model configs "
                                f"(column {col!r} is missing)")
        catalog = self.sequences()
        sequences = catalog[catalog["config_id"].isin(set(jobs["config_id"]))]
        self.table = method_table(self.method, sequences, gpu_types, progress=self.progress, warn=self.warn,
                                  pretrained=self._pretrained(gpu_types))
        table = TablePredictor(self.name, self.table)
        table.distributed = self.distributed
        return table.runtimes(jobs, gpu_types, truth)

    def quantile_factors(self, q, jobs, gpu_types):
        """From each GPU type's checkpoint calibration (:mod:`predictor.intervals`), by the family
        of each job's config: leave-family-out for the workload set's held-out families it was
        calibrated on, so no job plans with its own family's errors."""
        q = check_probability(q, "quantile")
        families = self.sequences().groupby("config_id")["family"].first()
        job_families = families.reindex(jobs["config_id"].astype(str)).to_numpy(dtype=object)
        out = np.empty((len(jobs), len(gpu_types)))
        for k, gpu in enumerate(gpu_types):
            calibration = self._pretrained(gpu_types).intervals(gpu)
            if calibration is None:
                raise SpecError(f"the pretrained {self.method} checkpoint for {gpu} has no calibrated "
                                "intervals; add them with `ets calibrate --ckpt CKPT --data DIR`")
            out[:, k] = calibration.factors(q, job_families)
            if not np.all((out[:, k] > 0) & np.isfinite(out[:, k])):
                raise SpecError(f"the {self.method} checkpoint for {gpu} was calibrated on "
                                f"{calibration.traces} traces: too few for a {q:g}-quantile")
        return out

    def _pretrained(self, gpu_types):
        """The checkpoints of ``gpu_types``, each read once per run (again only for a type not read yet)."""
        from predictor.checkpoints import CheckpointError, Pretrained
        from predictor.common.inputs import InputError

        if self.pretrained is None or not set(gpu_types) <= set(self.pretrained.data):
            try:
                self.pretrained = Pretrained(self.method, sorted(set(gpu_types)))
            except CheckpointError as exc:  # names the GPUs that have one
                raise InputError(str(exc)) from None
        return self.pretrained

    def describe(self) -> dict:
        return {"name": self.name, "table": self.table.source if self.table is not None else None}


MODEL_PREDICTORS = tuple(METHODS)
PREDICTOR_HELP = " | ".join(["truth", "noisy:<MRE> (e.g. noisy:0.1)",
                             "noisy-compute:<MRE> | noisy-comm:<MRE> (the error on one part of a bound step)",
                             *MODEL_PREDICTORS])


def make_predictor(spec: str, seed: int = 0, *, progress: bool = False,
                   warn: Callable[[str], None] | None = None) -> RuntimePredictor:
    """The predictor of a --predictor value; ``progress`` shows a model-based one's table building;
    ``warn`` gets the line saying its cache table was rebuilt [default: stderr]."""
    name, _, arg = spec.partition(":")
    if name == "truth" and not arg:
        return TruthPredictor()
    if name in MODEL_PREDICTORS and not arg:
        return ModelPredictor(name, progress=progress, warn=warn)
    if name in ("noisy", "noisy-compute", "noisy-comm"):
        try:
            mre = float(arg)
            return NoisyPredictor(mre, seed) if name == "noisy" else NoisyPartPredictor(name[6:], mre, seed)
        except ValueError as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"{name}:<MRE> needs a number, got {arg!r}") from None
    raise SpecError(f"unknown predictor {spec!r}; available: {PREDICTOR_HELP}")
