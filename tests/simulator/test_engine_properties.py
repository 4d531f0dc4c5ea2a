"""Invariants of every run, on random small traces and clusters (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.registry import POLICIES, make_policy
from simulator.cluster import homogeneous_groups
from simulator.metrics import summarize
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records

GPU_TYPES = ["V100", "T4", "A100", "K80"]

jobs_strategy = st.lists(
    st.fixed_dictionaries({
        "submit_s": st.integers(0, 200).map(float),
        "num_gpus": st.sampled_from([1, 1, 1, 2, 3, 4, 8, 16]),
        "duration_s": st.integers(0, 120).map(float),
        "gpu_type": st.sampled_from(GPU_TYPES + [""]),
        "deadline_factor": st.one_of(st.none(), st.floats(1.0, 3.0)),
    }),
    min_size=1, max_size=30,
)
cluster_strategy = st.lists(
    st.tuples(st.sampled_from(GPU_TYPES), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3)),
    min_size=1, max_size=4,
)


def build(jobs):
    rows = []
    for i, j in enumerate(jobs):
        row = {k: v for k, v in j.items() if k != "deadline_factor"}
        row["job_id"] = f"j{i}"
        if j["deadline_factor"] is not None:
            row["deadline_s"] = j["submit_s"] + j["duration_s"] * j["deadline_factor"]
        rows.append(row)
    return from_records(rows)


def simulate(trace, cluster, policy, predictor):
    return make_simulation(trace, cluster, make_policy(policy), make_predictor(predictor, seed=7)).run()


# every policy, and the preemptive ones with leases short enough to preempt these small jobs
POLICY_SPECS = sorted(POLICIES) + ["srtf:lease=20,restart=3", "tiresias:thresholds=40/200,restart=3"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, groups=cluster_strategy, policy=st.sampled_from(POLICY_SPECS),
       predictor=st.sampled_from(["truth", "noisy:0.2", "noisy:1.0"]))
def test_run_invariants(jobs, groups, policy, predictor):
    trace = build(jobs)
    cluster = homogeneous_groups(groups, "prop")
    res = simulate(trace, cluster, policy, predictor)
    rec = res.records
    done = rec[rec["status"] == "completed"]
    largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)

    # rejection is exactly "larger than every type pool"; everything else completes exactly once
    assert set(rec.loc[rec["status"] == "rejected", "job_id"]) == \
        {f"j{i}" for i, j in enumerate(jobs) if j["num_gpus"] > largest}
    assert len(rec) == len(jobs) and rec["job_id"].is_unique
    assert done["end"].notna().all() and done["start"].notna().all()

    # time sanity: start >= submit, JCT >= true run time, end = start + true run time (a suspended
    # job: later, by its waits and restarts)
    assert (done["start"] >= done["submit"]).all()
    assert (done["jct"] >= done["true_runtime"] - 1e-9).all()
    if res.segments is None:
        assert np.allclose(done["end"], done["start"] + done["true_runtime"])
        stretches = done.assign(job_id=done["job_id"])
    else:  # every stretch on GPUs of a preemptive run, each with the job's own GPU count
        assert (done["end"] >= done["start"] + done["true_runtime"] - 1e-6).all()
        stretches = res.segments.merge(done[["job_id", "num_gpus"]], on="job_id")
        assert len(stretches) == len(res.segments) == (done["preemptions"] + 1).sum()

    # placements: right count, right type, never a GPU double-booked, never more GPUs than asked
    type_of_gpu = [n.gpu_type for n in cluster.nodes for _ in range(n.num_gpus)]
    intervals: dict[int, list[tuple[float, float]]] = {}
    for row in stretches.itertuples():
        ids = [int(g) for g in row.gpu_ids.split(",")]
        assert len(ids) == row.num_gpus == len(set(ids))
        assert all(type_of_gpu[g] == row.gpu_type for g in ids)
        for g in ids:
            intervals.setdefault(g, []).append((row.start, row.end))
    for spans in intervals.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0, f"GPU double-booked: {(s0, e0)} and {(s1, e1)}"

    summary = summarize(rec, cluster, policy_seconds=res.policy_seconds, policy_calls=res.policy_calls,
                        wall_seconds=res.wall_seconds, events=res.events, busy_by_type=res.busy_by_type)
    assert 0.0 <= summary["utilization"] <= 1.0 + 1e-9
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in summary["utilization_by_type"].values())
    assert summary["jobs"] + summary["rejected"] == len(jobs)

    # same inputs and seed -> identical records
    again = simulate(trace, cluster, policy, predictor).records
    assert again.equals(rec)
