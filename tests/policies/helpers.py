"""Helpers shared by the policy tests: run a small trace, read back start/end/type/GPUs."""

from __future__ import annotations

from policies.registry import make_policy
from simulator.cluster import homogeneous_groups
from simulator.engine import Simulation
from simulator.timing import RuntimePredictor, make_predictor
from tests.records import from_records


def simulate(records, groups, policy, predictor="truth"):
    policy = make_policy(policy) if isinstance(policy, str) else policy
    predictor = make_predictor(predictor, seed=1) if isinstance(predictor, str) else predictor
    return Simulation(from_records(records), homogeneous_groups(groups, "t"), policy, predictor).run()


def times(result):
    return {row.job_id: (row.start, row.end, row.gpu_type, row.gpu_ids) for row in result.records.itertuples()}


def job(job_id, duration, submit=0.0, **extra):
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": duration, **extra}


def hetero(job_id, a100, v100, submit=0.0, **extra):
    """A job with measured run times on A100 and V100 (Hydra-case columns)."""
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": a100, "gpu_type": "A100",
            "runtime_s:A100": a100, "runtime_s:V100": v100, **extra}


class SwapTwo(RuntimePredictor):
    """Truth, except that jobs ``a`` and ``b`` (row indices) see each other's predictions."""

    name = "swap-two"

    def __init__(self, a: int, b: int):
        self.a, self.b = a, b

    def runtimes(self, jobs, gpu_types, truth):
        out = truth.copy()
        out[[self.a, self.b]] = truth[[self.b, self.a]]
        return out


class FirstJobPredicted10(RuntimePredictor):
    """Truth, except that job 0 is predicted to take 10 s on every type (it will overrun)."""

    name = "first-job-10s"

    def runtimes(self, jobs, gpu_types, truth):
        out = truth.copy()
        out[0] = 10.0
        return out

