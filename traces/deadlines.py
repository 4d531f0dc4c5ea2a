"""Deadlines for traces that have none (DESIGN §5, Hydra's convention).

Why: tardiness is half of the study, yet Philly, PAI and ITP record no deadlines. A seeded
fraction p of jobs gets ``deadline = submit + duration x U(1.2, 3.0)``, where duration is the
job's observed run time; the choice of jobs and factors depends only on (seed, job id), so the
same job gets the same deadline whatever else is in the run.
"""

from __future__ import annotations

import numpy as np

from traces.schema import JobTrace
from traces.seeding import hashed_uniform

LOW, HIGH = 1.2, 3.0
DEFAULT_FRACTION = 0.2  # the share of jobs given a deadline when a run does not say


def default_fraction(trace: JobTrace, fraction: float | None) -> float:
    """The share of jobs a run gives deadlines: ``fraction`` when the run names one, else 0 for a
    trace that states its deadlines (Gavel's, a generic ``csv:`` trace: no deadline is made up)
    and :data:`DEFAULT_FRACTION` for one that states nothing (Philly, PAI, ITP, synthetic)."""
    if fraction is not None:
        return fraction
    return 0.0 if trace.deadlines_stated else DEFAULT_FRACTION


def assign_deadlines(trace: JobTrace, fraction: float, seed: int = 0) -> JobTrace:
    """Return a copy where jobs without a deadline get one with probability ``fraction``.

    Traces that already carry deadlines (e.g. Hydra's cases) are returned unchanged. Whether a
    trace that states it has none (:attr:`JobTrace.deadlines_stated`) gets any is the caller's
    choice of ``fraction`` (:func:`default_fraction`).
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"deadline fraction must lie in [0, 1], got {fraction}")
    jobs = trace.jobs
    if jobs["deadline_s"].notna().any() or fraction == 0.0:
        return trace
    ids = jobs["job_id"].astype(str).to_numpy()
    pick = hashed_uniform(np.char.add(f"{seed}|pick|", ids.astype(str))) < fraction
    factor = LOW + (HIGH - LOW) * hashed_uniform(np.char.add(f"{seed}|factor|", ids.astype(str)))
    jobs = jobs.copy()
    jobs["deadline_s"] = np.where(pick, jobs["submit_s"] + jobs["duration_s"] * factor, np.nan)
    return trace.with_jobs(jobs)
