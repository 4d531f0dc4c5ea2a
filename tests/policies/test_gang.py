"""Gang jobs under the queue planners (AlloX and Hydra share policies/queues.py): holds, EASY
backfilling, pool-size feasibility, and invariants on gang-heavy random workloads.

Hand cases: the plans were worked out for both policies; they agree on these instances (for Hydra:
G alone on an idle V100 first (JCT 10), then S2 on T4 (5), then S on the other idle V100).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cluster import homogeneous_groups
from tests.policies.helpers import hetero, simulate, times

# node budget on Hydra so the random runs are reproducible whatever the machine speed
PLANNERS = ["allox:mode=online", "allox:mode=offline", "hydra:mode=online,nodes=200,budget_ms=1e6",
            "hydra:mode=offline,nodes=200,budget_ms=1e6"]


def gang_case(s_seconds):
    """V100 x3 (one node) and T4 x1; (V100, T4) run times.

    t=0: L (1 GPU, 100 s) starts on V100 GPU 0. t=1: G (3 GPUs, 10 s; too big for the T4 pool),
    S (1 GPU, ``s_seconds`` on V100, 5000 on T4) and S2 (1 GPU, 1000 on V100, 5 on T4) arrive.
    The plan puts G and S at the heads of the idle V100s 1 and 2 (apart: 10 + s beats 10 + (10 + s)
    together, and GPU 0 is busy until 100). G needs 3 free V100s -> V100 is held for G from
    R = 100 (the 3rd earliest predicted free time of a V100). S may backfill only if it is predicted
    to end by R: 1 + s <= 100. S2 runs on T4 at 1-6 either way (holds are per type).
    """
    def two(job_id, n, v100, t4, submit):
        return {"job_id": job_id, "submit_s": submit, "num_gpus": n, "duration_s": v100, "gpu_type": "V100",
                "runtime_s:V100": v100, "runtime_s:T4": t4}

    return [two("L", 1, 100, 5000, 0), two("G", 3, 10, 10, 1), two("S", 1, s_seconds, 5000, 1),
            two("S2", 1, 1000, 5, 1)]


@pytest.mark.parametrize("spec", PLANNERS)
def test_gang_job_holds_its_type_until_it_starts(spec):
    # S = 200 s would end at 201 > R = 100: it waits although its GPU idles from 1 to 110.
    # t=100: L ends, G starts on all three V100s (100-110); t=110: S runs 110-310.
    out = times(simulate(gang_case(200), [("V100", 3, 1), ("T4", 1, 1)], spec))
    assert out["L"] == (0, 100, "V100", "0")
    assert out["S2"] == (1, 6, "T4", "3")
    assert out["G"] == (100, 110, "V100", "0,1,2")
    assert out["S"][:3] == (110, 310, "V100")


@pytest.mark.parametrize("spec", PLANNERS)
@pytest.mark.parametrize("s_seconds,backfills", [(20, True), (99, True), (100, False)])
def test_gang_hold_backfills_only_jobs_ending_by_the_reservation(spec, s_seconds, backfills):
    # S predicted to end at 1 + s: 21 and 100 are <= R = 100 (EASY backfilling: starts at 1 and G
    # still starts at 100); 101 > R: S waits until G is done (110).
    out = times(simulate(gang_case(s_seconds), [("V100", 3, 1), ("T4", 1, 1)], spec))
    assert out["G"] == (100, 110, "V100", "0,1,2")
    start = 1 if backfills else 110
    assert out["S"][:3] == (start, start + s_seconds, "V100")


@pytest.mark.parametrize("spec", PLANNERS)
def test_gang_job_is_never_planned_on_a_too_small_pool(spec):
    # A100 x2, V100 x4. G needs 3 GPUs: A100 would take 1 s, but only V100's pool can hold it.
    # (Planned on A100 it would hold A100 forever and the run would fail.)
    jobs = [hetero("G", 1, 100, num_gpus=3), hetero("s", 5, 10)]
    out = times(simulate(jobs, [("A100", 2, 1), ("V100", 4, 1)], spec))
    assert out["G"][:3] == (0, 100, "V100") and len(out["G"][3].split(",")) == 3
    assert out["s"][:3] == (0, 5, "A100")


def gang_workload(seed, n=40):
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        sub = float(rng.integers(0, 150))
        dur = float(rng.integers(1, 80))
        rec = {"job_id": f"g{i}", "submit_s": sub, "num_gpus": int(rng.choice([1, 1, 2, 2, 3, 4, 6, 8])),
               "duration_s": dur, "gpu_type": str(rng.choice(["V100", "T4", "A100"]))}
        if rng.random() < 0.3:
            rec["deadline_s"] = sub + dur * float(rng.uniform(1.0, 3.0))
        records.append(rec)
    return records


GANG_CLUSTER = [("V100", 4, 2), ("T4", 2, 2), ("A100", 1, 3)]  # pools: V100 8, T4 4, A100 3


@pytest.mark.parametrize("spec", PLANNERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gang_heavy_random_invariants(spec, seed):
    records = gang_workload(seed)
    cluster = homogeneous_groups(GANG_CLUSTER, "t")
    pools = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
    type_of_gpu = [n.gpu_type for n in cluster.nodes for _ in range(n.num_gpus)]
    res = simulate(records, GANG_CLUSTER, spec, "noisy:0.3")
    rec = res.records
    assert (rec["status"] == "completed").all() and rec["job_id"].is_unique and len(rec) == len(records)
    assert rec["end"].notna().all()
    assert (rec["start"] >= rec["submit"]).all()
    assert (rec["jct"] >= rec["true_runtime"] - 1e-9).all()
    assert np.allclose(rec["end"], rec["start"] + rec["true_runtime"])
    busy: dict[int, list[tuple[float, float]]] = {}
    for row in rec.itertuples():
        ids = [int(g) for g in row.gpu_ids.split(",")]
        assert len(set(ids)) == len(ids) == row.num_gpus
        assert {type_of_gpu[g] for g in ids} == {row.gpu_type}
        assert pools[row.gpu_type] >= row.num_gpus
        for g in ids:
            busy.setdefault(g, []).append((row.start, row.end))
    for spans in busy.values():
        spans.sort()
        assert all(s1 >= e0 for (_, e0), (s1, _) in zip(spans, spans[1:]))
    assert (rec["num_gpus"] > 1).sum() >= 15  # the workload really is gang-heavy
    again = simulate(records, GANG_CLUSTER, spec, "noisy:0.3").records
    assert again.equals(rec)

