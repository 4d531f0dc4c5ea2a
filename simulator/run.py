"""One simulation run from its description to files on disk: jobs.parquet, summary.json, manifest.json.

Why: ``simrun``, sweeps and the paper reproduction all run the same thing; a frozen
:class:`RunConfig` is the unit they pass around, cache by, and record in the manifest.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import pandas as pd

from policies.registry import make_policy
from simulator.cluster import Cluster, resolve
from simulator.engine import Simulation
from simulator.gpus import SPEEDS, canonical_gpu_type
from simulator.metrics import summarize
from simulator.timing import MODEL_PREDICTORS, ModelPredictor, make_predictor
from traces.deadlines import assign_deadlines
from traces.schema import JobTrace

DEFAULT_WORKLOAD = "pai-like:2000"
DEFAULT_CLUSTER = "default"


class WorkloadSpecError(ValueError):
    """A malformed --workload value."""


@dataclass(frozen=True)
class RunConfig:
    policy: str
    predictor: str
    trace: str | None = None          # KIND:PATH
    workload: str | None = None       # philly-like:N | pai-like:N
    limit: int | None = None
    cluster: str = DEFAULT_CLUSTER
    seed: int = 0
    deadline_fraction: float = 0.2
    reference_gpu: str | None = None
    load_scale: float = 1.0           # >1 compresses inter-arrival times (more load), <1 stretches them
    bind: bool = False                # bind jobs to model configs (automatic for model-based predictors)
    observe_after: int | None = None  # K: after K iterations on a type the policy sees the true time

    @property
    def bound(self) -> bool:
        """Whether the run binds its jobs to model configs: asked for, needed by a model-based
        predictor, or needed by online feedback (which counts iterations)."""
        return self.bind or self.predictor in MODEL_PREDICTORS or self.observe_after is not None


def load_workload(config: RunConfig) -> JobTrace:
    """The job trace of a run: a real trace file, a synthetic workload, or the embedded default."""
    if config.trace and config.workload:
        raise WorkloadSpecError("give either --trace or --workload, not both")
    if config.trace:
        from traces.registry import load_trace

        trace = load_trace(config.trace)
    else:
        from traces.synthetic import generate

        kind, _, count = (config.workload or DEFAULT_WORKLOAD).partition(":")
        try:
            n = int(count)
        except ValueError:
            raise WorkloadSpecError(f"--workload {config.workload!r}: expected KIND:N, e.g. pai-like:1000") from None
        try:
            trace = generate(kind, n, seed=config.seed)
        except ValueError as exc:
            raise WorkloadSpecError(f"--workload {config.workload!r}: {exc}") from None
    if not config.load_scale > 0:
        raise WorkloadSpecError(f"load scale must be > 0, got {config.load_scale}")
    if config.load_scale != 1.0:
        trace = trace.scaled_load(config.load_scale)
    if config.limit is not None:
        if config.limit < 1:
            raise WorkloadSpecError(f"--limit must be >= 1, got {config.limit}")
        trace = trace.head(config.limit)
    return assign_deadlines(trace, config.deadline_fraction, seed=config.seed)


def bind(trace: JobTrace, gpu_types: list[str], reference: str, seed: int) -> tuple[JobTrace, dict]:
    """The trace bound to catalog configs (:mod:`traces.binding`), and what the manifest records."""
    from traces.binding import CLASS_SHARES, assign_configs, bind_workload
    from traces.catalog import CATALOG_FILE, catalog_configs, read_catalog
    from traces.tables import truth_table

    sequences = read_catalog()
    configs = catalog_configs(sequences)
    _, chosen = assign_configs(trace.jobs, configs, seed)  # only these configs need true times
    types = sorted(set(gpu_types) | set(trace.jobs["gpu_type"]) - {""} | {reference})
    truth = truth_table(sequences[sequences["config_id"].isin(set(chosen))], types)
    bound = bind_workload(trace, configs, truth, gpu_types, reference, seed=seed)
    jobs = bound.jobs
    return bound, {"catalog": str(CATALOG_FILE), "configs": int(jobs["config_id"].nunique()),
                   "jobs_by_class": {str(k): int(v) for k, v in jobs["job_class"].value_counts().items()},
                   "class_shares_when_untagged": CLASS_SHARES, "truth": truth.source,
                   "reference_gpu_for_untyped_jobs": reference}


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

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.records.to_parquet(out / "jobs.parquet", index=False)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        (out / "manifest.json").write_text(json.dumps(self.manifest, indent=2, default=str) + "\n")
        return out


def execute(config: RunConfig, *, trace: JobTrace | None = None, cluster: Cluster | None = None,
            progress: bool = False) -> RunOutput:
    """Run one simulation; ``trace``/``cluster`` override the config's (tests, sweeps)."""
    trace = trace if trace is not None else load_workload(config)
    cluster = cluster if cluster is not None else resolve(config.cluster)
    policy = make_policy(config.policy)
    predictor = make_predictor(config.predictor, seed=config.seed)
    reference = canonical_gpu_type(config.reference_gpu) if config.reference_gpu else None
    if isinstance(predictor, ModelPredictor):
        predictor.check_devices(cluster.gpu_types)
    binding = None
    if config.bound:
        if config.observe_after is not None and config.observe_after < 1:
            raise WorkloadSpecError(f"--observe-after must be >= 1 iteration, got {config.observe_after}")
        reference = reference or max(cluster.gpu_types, key=cluster.gpus_of_type)
        trace, binding = bind(trace, cluster.gpu_types, reference, config.seed)
    sim = Simulation(trace, cluster, policy, predictor, reference_type=reference, progress=progress,
                     observe_after=config.observe_after)
    result = sim.run()
    summary = summarize(result.records, cluster, policy_seconds=result.policy_seconds,
                        policy_calls=result.policy_calls, wall_seconds=result.wall_seconds,
                        events=result.events)
    used_types = sorted(set(cluster.gpu_types) | set(trace.jobs["gpu_type"]) - {""} | {sim.reference_type})
    manifest = {
        "config": asdict(config),
        "policy": policy.describe(),
        "predictor": predictor.describe(),
        "trace": {"source": trace.source, "kind": trace.kind, "jobs": len(trace),
                  "excluded_by_loader": trace.excluded,
                  "measured_runtime_types": trace.runtime_types()},
        "cluster": cluster.describe(),
        "reference_gpu": sim.reference_type,
        "binding": binding,
        "gpu_speeds": {t: {"relative_time": SPEEDS[t].relative_time, "source": SPEEDS[t].source}
                       for t in used_types},
        "rejected_jobs": result.records.loc[result.records["status"] == "rejected",
                                            ["job_id", "line", "reason"]].head(100).to_dict("records"),
        "versions": versions(),
        "argv": sys.argv,
    }
    return RunOutput(result.records, summary, manifest)
