"""``deadline_quantile=Q`` for Hydra and EDF: deadlines planned with the Q-quantile run time, JCT
with the point estimate.

Why: a point estimate plans a tight deadline as met that the true run time then misses; these
tests show the miss avoided in the engine, pin the two-clock scoring (compiled kernels against
the Python queue cost, the orderer and the greedy assignment against exhaustive references), and
check that a quantile equal to the point changes no decision at all.

The instances checked against references use integer times, so every sum is exact in floating
point and equal costs are exactly equal (the references and the code then agree on ties, not just
up to rounding); the bit-for-bit checks use times that round.
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest

from policies import hydra_greedy as kernels
from policies.edf import EdfPolicy
from policies.hydra import GpuState, HydraPolicy, Jobs, QueueOrderer, greedy_assign, queue_cost, srtf, swap_heuristic
from policies.registry import make_policy
from predictor.common.inputs import SpecError
from simulator.timing import NoisyPredictor, RuntimePredictor, TruthPredictor
from tests.policies.helpers import hetero, job, simulate, times

INF = math.inf
EXACT_HYDRA = "budget_ms=3600000,nodes=2000"  # a time budget that never binds: reproducible plans


class StatedQuantiles(RuntimePredictor):
    """``inner``'s predictions, except ``overrides`` (row -> seconds on every type, or one per type);
    states the q-quantile of true / predicted as ``factors`` (per GPU type, or per job and type),
    whatever q."""

    name = "stated-quantiles"

    def __init__(self, factors: list, inner: RuntimePredictor | None = None,
                 overrides: dict[int, float | list[float]] | None = None):
        self.factors, self.inner, self.overrides = factors, inner or TruthPredictor(), overrides or {}

    def runtimes(self, jobs, gpu_types, truth):
        out = self.inner.runtimes(jobs, gpu_types, truth)
        for row, seconds in self.overrides.items():
            out[row] = seconds
        return out

    def quantile_factors(self, q, jobs, gpu_types):
        return np.broadcast_to(np.asarray(self.factors, dtype=float), (len(jobs), len(gpu_types))).copy()


# -- 1. Hydra: the quantile plan avoids the miss the point plan makes ----------------------------------
@pytest.mark.parametrize("mode", ["online", "offline"])
def test_hydra_runs_the_risky_job_first_and_meets_its_deadline(mode):
    # One GPU, both at t=0. A: predicted 10 s, truly 20 s, due 22; B: 8 s, no deadline. The predictor
    # says the 0.9-quantile is twice the prediction: A 20 s, B 16 s.
    # Point plan: SRTF [B, A] ends A at 8 + 10 = 18 <= 22, on time as planned; truly B 0-8, A 8-28:
    # 6 s late. Quantile plan: [B, A] ends A at 16 + 20 = 36 on the due clock (14 late); [A, B] ends
    # it at 20 <= 22: on time, JCT 10 + 18 = 28 by the point. Truly A 0-20 (on time), B 20-28.
    jobs = [job("A", 20, deadline_s=22), job("B", 8)]
    predictor = StatedQuantiles([2.0], overrides={0: 10.0})
    point = simulate(jobs, [("V100", 1, 1)], f"hydra:mode={mode}", predictor)
    assert {j: t[:2] for j, t in times(point).items()} == {"B": (0, 8), "A": (8, 28)}
    assert point.records.set_index("job_id").loc["A", "tardiness"] == 6
    risk = simulate(jobs, [("V100", 1, 1)], f"hydra:mode={mode},deadline_quantile=0.9", predictor)
    assert {j: t[:2] for j, t in times(risk).items()} == {"A": (0, 20), "B": (20, 28)}
    assert risk.records["tardiness"].sum() == 0


def test_online_due_clock_starts_when_a_busy_gpu_frees_at_its_quantile():
    # Two GPUs. P (3 s, but its 0.9-quantile is 30 s) and S (2 s) start at 0. At t=1 A (2 s) and B
    # (6 s, due 9.5) arrive; at t=2 S ends: one GPU idle (free at 2 on both clocks), P's busy (free
    # at 3 by the point, 30 by the quantile). Point plan: B behind P ends 3 + 6 = 9 on time, JCT 8,
    # A alone on the idle GPU: A 2-4 starts, B waits for P's GPU: 3-9. Quantile plan: B behind P
    # ends 36 on the due clock (late), so the idle GPU takes [B, A] (B ends 8: on time): B 2-8, and
    # A starts on P's GPU when it frees: 3-5.
    jobs = [job("P", 3), job("S", 2), job("A", 2, submit=1), job("B", 6, submit=1, deadline_s=9.5)]
    predictor = StatedQuantiles([[10.0], [1.0], [1.0], [1.0]])
    point = times(simulate(jobs, [("V100", 2, 1)], "hydra", predictor))
    assert (point["A"][:2], point["B"][:2]) == ((2, 4), (3, 9))
    risk = times(simulate(jobs, [("V100", 2, 1)], "hydra:deadline_quantile=0.9", predictor))
    assert (risk["B"][:2], risk["A"][:2]) == ((2, 8), (3, 5))


def test_gpus_free_at_the_same_point_time_are_one_group_only_if_equal_on_the_due_clock_too():
    # Three GPUs. P (3 s, 0.9-quantile 30 s), Q (3 s, quantile 3 s) and S (2 s) start at 0; at t=1
    # A (2 s), B1 and B2 (6 s each, due 9.5) arrive; at t=2 S ends. Q's and P's GPUs are free at 3
    # by the point, but at 3 and 30 on the due clock: two groups. Plan: A alone on the idle GPU
    # (JCT 3), B1 behind Q (ends 9: on time, JCT 8); B2 behind P ends 36 on the due clock (late),
    # so the idle GPU takes [B2, A] (B2 ends 8: on time; JCT 7 + 9 = 16): B2 2-8, then A and B1 on
    # P's and Q's GPUs at 3. (One group of both, free at 3 on the due clock, would give B2 P's GPU
    # and start A at 2, as the point plan does.)
    jobs = [job("P", 3), job("Q", 3), job("S", 2), job("A", 2, submit=1),
            job("B1", 6, submit=1, deadline_s=9.5), job("B2", 6, submit=1, deadline_s=9.5)]
    predictor = StatedQuantiles([[10.0], [1.0], [1.0], [1.0], [1.0], [1.0]])
    point = times(simulate(jobs, [("V100", 3, 1)], "hydra", predictor))
    assert {j: point[j][:2] for j in ("A", "B1", "B2")} == {"A": (2, 4), "B1": (3, 9), "B2": (3, 9)}
    risk = times(simulate(jobs, [("V100", 3, 1)], "hydra:deadline_quantile=0.9", predictor))
    assert {j: risk[j][:2] for j in ("A", "B1", "B2")} == {"B2": (2, 8), "A": (3, 5), "B1": (3, 9)}


def test_a_gpu_later_by_the_point_but_earlier_on_the_due_clock_stays_a_candidate():
    # Offline, two GPUs. X (5 s, 0.9-quantile 50 s) and Y (8 s) start at 0. At t=1 one job, D (2 s,
    # due 12): X's GPU frees first by the point (5) but at 50 on the due clock, Y's at 8 on both.
    # With one job to place only the earliest-free GPU would do by the point; on two clocks Y's GPU
    # must stay: D behind X ends at 52 on the due clock (late), behind Y at 10 (on time): D 8-10.
    jobs = [job("X", 5), job("Y", 8), job("D", 2, submit=1, deadline_s=12)]
    predictor = StatedQuantiles([[10.0], [1.0], [1.0]])
    point = times(simulate(jobs, [("V100", 2, 1)], "hydra:mode=offline", predictor))
    assert point["D"][:2] == (5, 7) and point["D"][3] == point["X"][3]
    risk = times(simulate(jobs, [("V100", 2, 1)], "hydra:mode=offline,deadline_quantile=0.9", predictor))
    assert risk["D"][:2] == (8, 10) and risk["D"][3] == risk["Y"][3]


def test_offline_due_clock_goes_behind_installed_queues_by_their_quantiles():
    # One GPU, every 0.9-quantile twice the prediction (= the truth). P1, P2 (10 s each) at t=0:
    # P1 starts, P2 stays installed. At t=1 A (4 s, due 48) and B (3 s) are planned behind them:
    # from 10 + 10 = 20 by the point, 20 + 20 = 40 on the due clock. SRTF [B, A] ends A at
    # 40 + 6 + 8 = 54 on the due clock (late), [A, B] at 48: on time -> A 20-24, B 24-27. (Planned
    # from the due clock of the point sum, 30, [B, A] would be on time: B 20-23, A 23-27, as
    # without the option.)
    jobs = [job("P1", 10), job("P2", 10), job("A", 4, submit=1, deadline_s=48), job("B", 3, submit=1)]
    predictor = StatedQuantiles([2.0])
    point = times(simulate(jobs, [("V100", 1, 1)], "hydra:mode=offline", predictor))
    assert (point["B"][:2], point["A"][:2]) == ((20, 23), (23, 27))
    risk = times(simulate(jobs, [("V100", 1, 1)], "hydra:mode=offline,deadline_quantile=0.9", predictor))
    assert (risk["A"][:2], risk["B"][:2]) == ((20, 24), (24, 27))


def test_queue_cost_runs_two_clocks_by_hand():
    # The same two jobs (A = 0, B = 1) as planned: point run times 10, 8; quantile 20, 16; A due 22.
    jobs = Jobs(np.array([10.0, 8.0]), np.zeros(2), np.array([22.0, INF]), np.array([20.0, 16.0]))
    point = Jobs(jobs.p, jobs.submit, jobs.deadline)
    assert point.due_p is point.p  # without a due clock's run times: the point ones, the same array
    assert queue_cost([1, 0], 0.0, point) == (0.0, 8.0 + 18.0)
    # [B, A]: due clock 16, 36 -> A 14 late; point clock 8, 18 -> JCT 26
    assert queue_cost([1, 0], 0.0, jobs) == (14.0, 26.0)
    # [A, B]: due clock 20 (on time), 36; point clock 10, 18 -> JCT 28
    assert queue_cost([0, 1], 0.0, jobs) == (0.0, 28.0)
    # a GPU free at 1 by the point and at 3 by the quantile: A ends 23 on the due clock, 1 late
    assert queue_cost([0, 1], 1.0, jobs, 3.0) == (1.0, 11.0 + 19.0)
    assert srtf({0, 1}, jobs) == [1, 0]  # SRTF stays by the point run time
    assert swap_heuristic([1, 0], 0.0, jobs) == ([0, 1], (0.0, 28.0))  # A late on the due clock: moved
    assert swap_heuristic([1, 0], 0.0, point) == ([1, 0], (0.0, 26.0))
    for planned, want in ((jobs, ([0, 1], (0.0, 28.0))), (point, ([1, 0], (0.0, 26.0)))):
        assert QueueOrderer(bnb=True, budget_ms=1e6, max_nodes=None).order(frozenset({0, 1}), 0.0, 0, planned) == want


def test_orderer_memo_tells_due_clock_starts_apart():
    # A (10 s, quantile 20 s, due 42) and B (8 s, quantile 16 s) on a GPU free at 20 by the point.
    # Free at 20 on the due clock too: [B, A] ends A at 56 (late), [A, B] at 40: A first. Free at 0
    # on the due clock (a low quantile): [B, A] ends A at 36 <= 42, so SRTF: B first.
    jobs = Jobs(np.array([10.0, 8.0]), np.zeros(2), np.array([42.0, INF]), np.array([20.0, 16.0]))
    orderer = QueueOrderer(bnb=True, budget_ms=1e6, max_nodes=None)
    assert orderer.order(frozenset({0, 1}), 20.0, 0, jobs, 20.0) == ([0, 1], (0.0, 30.0 + 38.0))
    assert orderer.order(frozenset({0, 1}), 20.0, 0, jobs, 0.0) == ([1, 0], (0.0, 28.0 + 38.0))


# -- 2. a quantile equal to the point changes nothing -----------------------------------------------------
def random_workload(seed: int, n: int = 300) -> list[dict]:
    """Batches of arrivals on two types, some gang jobs, deadlines on half of the jobs (tight to loose)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        a100 = float(rng.uniform(10, 200))
        v100 = a100 * float(rng.uniform(1.2, 2.5))
        submit = float(rng.integers(0, 10)) * 300.0
        extra = {"num_gpus": 2} if rng.random() < 0.1 else {}
        if rng.random() < 0.5:
            extra["deadline_s"] = submit + a100 * float(rng.uniform(1.0, 4.0))
        records.append(hetero(f"j{i}", a100, v100, submit, **extra))
    return records


TWO_TYPES = [("A100", 2, 2), ("V100", 2, 2)]


@pytest.mark.parametrize("policy", [f"hydra:{EXACT_HYDRA}", f"hydra:mode=offline,{EXACT_HYDRA}", "edf"])
def test_a_quantile_equal_to_the_point_changes_no_decision(policy):
    records = random_workload(4)
    predictor = StatedQuantiles([1.0, 1.0], inner=NoisyPredictor(0.3, seed=1))
    sep = "," if ":" in policy else ":"
    plain = simulate(records, TWO_TYPES, policy, predictor).records
    risk = simulate(records, TWO_TYPES, f"{policy}{sep}deadline_quantile=0.9", predictor).records
    assert plain["tardiness"].sum() > 0  # deadlines are missed: the due clock has work to do
    assert plain.equals(risk)


# -- 3. the compiled kernels score tardiness on the due clock --------------------------------------------
def random_column(rng, coarse: bool):
    """One group's queue and the waiting rows; integer times unless ``coarse`` (then rounding shows)."""
    n, num_types = int(rng.integers(1, 40)), int(rng.integers(1, 3))
    rows = rng.permutation(1000)[:n].astype(np.int64)
    scale = rng.choice([0.5, 1.7, 3.3]) if coarse else 1.0
    row_p = np.ascontiguousarray(rng.integers(1, 6, (num_types, n)) * scale)
    # quantile run times in any order relative to the point ones (the kernel does not rely on it)
    row_due_p = np.ascontiguousarray(row_p * rng.integers(1, 3, (num_types, n)) + rng.integers(0, 4, (num_types, n)))
    row_ok = np.ascontiguousarray(rng.random((num_types, n)) < 0.85)
    row_submit = rng.integers(0, 20, n).astype(float) * (0.3 if coarse else 1.0)
    row_deadline = np.where(rng.random(n) < 0.6, rng.integers(2, 90, n) * (0.7 if coarse else 1.0), INF)
    alive = rng.random(n) < 0.8
    k = int(rng.integers(0, num_types))
    t0 = float(rng.integers(0, 30)) * (0.1 if coarse else 1.0)
    t0_due = t0 + float(rng.integers(-3, 10))
    size = int(rng.integers(0, n + 1))
    queued = rng.permutation(n)[:size]
    seq = np.array(sorted(queued, key=lambda i: (row_p[k, i], rows[i])), dtype=np.int64)
    alive[queued] = False  # a queued job is no longer waiting
    width = 3
    state = {
        "scores": (alive, rows, row_p, row_ok, row_submit, row_deadline),
        "g_type": np.full(width, k, np.int64), "g_t0": np.full(width, t0), "g_t0_due": np.full(width, t0_due),
        "g_tard": np.full(width, float(rng.integers(0, 5))), "g_len": np.full(width, size, np.int64),
        "g_slot": np.zeros(width, np.int64), "seqs": np.zeros((max(n, 1), max(n, 1)), np.int64),
        "row_due_p": row_due_p, "c": int(rng.integers(0, width)), "seq": seq, "k": k, "width": width,
    }
    state["seqs"][0, :size] = seq
    return state


def run_fill_column(s, srtf_only, *due):
    n = len(s["scores"][1])
    tard, jct = np.full((n, s["width"]), -1.0), np.full((n, s["width"]), -1.0)
    code = np.full((n, s["width"]), -1, dtype=np.int8)
    kernels.fill_column(s["c"], srtf_only, tard, jct, code, *s["scores"], s["g_type"], s["g_t0"], s["g_tard"],
                        s["g_len"], s["g_slot"], s["seqs"], np.zeros(3, np.int64), *due)
    return tard[:, s["c"]], jct[:, s["c"]], code[:, s["c"]]


@pytest.mark.parametrize("srtf_only", [False, True])
def test_fill_column_equals_the_two_clock_queue_cost(srtf_only):
    rng = np.random.default_rng(23 + srtf_only)
    checked = {kernels.BOUND: 0, kernels.ON_TIME: 0, kernels.EXACT: 0}
    for case in range(300):
        s = random_column(rng, coarse=False)
        alive, rows, row_p, row_ok, row_submit, row_deadline = s["scores"]
        k, c, row_due_p = s["k"], s["c"], s["row_due_p"]
        t0, t0_due, g_tard = s["g_t0"][c], s["g_t0_due"][c], s["g_tard"][c]
        tard, jct, code = run_fill_column(s, srtf_only, row_due_p, s["g_t0_due"])
        jobs = Jobs(row_p[k], row_submit, row_deadline, row_due_p[k])
        for i in range(len(rows)):
            where = f"case {case} row {i}"
            if not (alive[i] and row_ok[k, i]):
                assert tard[i] == jct[i] == INF and code[i] == kernels.EXACT, where
                continue
            order = sorted([*s["seq"], i], key=lambda x: (row_p[k, x], rows[x]))  # SRTF by the point
            want_tard, want_jct = queue_cost(order, t0, jobs, t0_due)
            assert jct[i] == want_jct, where
            assert (code[i] == kernels.ON_TIME) == (want_tard == 0.0), where
            if code[i] == kernels.BOUND:  # the queue's own tardiness, or the job's on the due clock if run first
                assert not srtf_only, where
                assert tard[i] == max(g_tard, max(0.0, t0_due + row_due_p[k, i] - row_deadline[i])), where
            else:
                assert tard[i] == want_tard, where
            on_time = kernels.meets_deadlines(i, c, rows, row_p, row_deadline, s["g_type"], s["g_len"], s["g_slot"],
                                              s["seqs"], row_due_p, s["g_t0_due"])
            assert on_time == (want_tard == 0.0), where
            checked[int(code[i])] += 1
    if srtf_only:
        assert checked.pop(kernels.BOUND) == 0, checked
    assert min(checked.values()) >= 20, checked  # every kind of score was exercised


def test_fill_column_with_the_point_as_due_clock_is_the_one_clock_scoring_bit_for_bit():
    rng = np.random.default_rng(29)
    for case in range(300):
        s = random_column(rng, coarse=True)  # non-integer times: any other operation order would show
        srtf_only = bool(case % 2)
        one = run_fill_column(s, srtf_only)
        row_p = s["scores"][2]
        two = run_fill_column(s, srtf_only, row_p.copy(), s["g_t0"].copy())
        for a, b in zip(one, two):
            assert np.array_equal(a, b), case


# -- the orderer and the greedy assignment against exhaustive two-clock references ---------------------------
def two_clock_cost(seq, t0, t0_due, jobs):
    """(total tardiness on the due clock, total JCT on the point clock) of ``seq`` back to back."""
    clock, due_clock, tardiness, jct = t0, t0_due, 0.0, 0.0
    for j in seq:
        clock, due_clock = clock + jobs.p[j], due_clock + jobs.due_p[j]
        jct += clock - jobs.submit[j]
        tardiness += max(0.0, due_clock - jobs.deadline[j])
    return tardiness, jct


def brute_force(job_set, t0, t0_due, jobs):
    costs = [(two_clock_cost(q, t0, t0_due, jobs), list(q)) for q in itertools.permutations(sorted(job_set))]
    best = min(c for c, _ in costs)
    winners = [q for c, q in costs if c == best]
    return best, winners[0], len(winners)


def monotone_due(rng, p):
    """Quantile run times ordered like the point ones (one factor for a type's jobs, below 1 too),
    where the search is exact (FixNonDDL keeps deadline-free jobs in point SRTF order)."""
    return p * float(rng.choice([0.5, 1.0, 2.0, 3.0]))


def test_orderer_is_exact_on_two_clocks():
    rng = np.random.default_rng(31)
    srtf_late = point_would_differ = 0
    for case in range(200):
        universe, n = 12, int(rng.integers(1, 8))
        t0 = float(rng.integers(0, 40))
        t0_due = t0 + float(rng.integers(0, 20))
        p = rng.integers(1, 30, universe).astype(float)
        due_p = monotone_due(rng, p)
        submit = np.floor(rng.uniform(0, t0 + 1, universe))
        deadline = np.where(rng.random(universe) < 0.6, t0 + np.ceil(due_p * rng.uniform(1.0, 3.0, universe)), INF)
        jobs = Jobs(p, submit, deadline, due_p)
        job_set = frozenset(int(j) for j in rng.choice(universe, n, replace=False))
        seq, cost = QueueOrderer(bnb=True, budget_ms=1e6, max_nodes=None).order(job_set, t0, 0, jobs, t0_due)
        best, _, _ = brute_force(job_set, t0, t0_due, jobs)
        where = f"case {case}: set={sorted(job_set)} t0={t0}/{t0_due} p={p.tolist()} due_p={due_p.tolist()}"
        assert sorted(seq) == sorted(job_set) and cost == best, where
        assert two_clock_cost(seq, t0, t0_due, jobs) == cost, where
        srtf_late += two_clock_cost(srtf(job_set, jobs), t0, t0_due, jobs)[0] > 0
        point_would_differ += brute_force(job_set, t0, t0, Jobs(p, submit, deadline))[1] != seq
    assert srtf_late >= 60 and point_would_differ >= 30  # the search runs, and the due clock matters


def eager_assign(waiting, groups, per_type, feasible):
    """Score every (job, GPU group) pair exactly (brute force, two clocks); take the lexicographic
    min, ties by job order then group order; a group of several GPUs hands its first GPU the job."""
    groups = [{"type": g.type_k, "t0": g.t0, "t0_due": g.t0_due, "members": list(g.members), "seq": []}
              for g in groups]
    left = list(waiting)
    while left:
        best = None
        for j in left:
            for c, g in enumerate(groups):
                if feasible[j, g["type"]]:
                    cost, seq, _ = brute_force(set(g["seq"]) | {j}, g["t0"], g["t0_due"], per_type[g["type"]])
                    if best is None or cost < best[0]:
                        best = (cost, j, c, seq)
        if best is None:
            break
        _, j, c, seq = best
        g = groups[c]
        if len(g["members"]) > 1:
            groups.append({**g, "members": [g["members"].pop(0)], "seq": seq})
        else:
            g["seq"] = seq
        left.remove(j)
    return {g["members"][0]: g for g in groups if g["seq"]}


@pytest.mark.parametrize("two_clocks", [False, True])
def test_greedy_assignment_equals_eager_reference(two_clocks):
    """One clock (no quantile: Hydra as its authors built it) and two."""
    rng = np.random.default_rng(37 if two_clocks else 13)
    for case in range(150):
        n, num_types = int(rng.integers(1, 7)), int(rng.integers(1, 3))
        base = rng.integers(2, 25, n).astype(float)
        p = np.stack([np.ceil(base * rng.uniform(1.0, 2.5, n)) if k else base for k in range(num_types)], axis=1)
        due_p = np.stack([monotone_due(rng, p[:, k]) for k in range(num_types)], axis=1) if two_clocks else p
        submit = rng.integers(0, 10, n).astype(float)
        deadline = np.where(rng.random(n) < 0.6, 10 + np.ceil(base * rng.uniform(0.8, 4.0, n)), INF)
        per_type = [Jobs(p[:, k], submit, deadline, due_p[:, k] if two_clocks else None) for k in range(num_types)]
        gpus, first_id = [], 0
        for _ in range(int(rng.integers(2, 4))):
            size = int(rng.integers(1, 4)) if rng.random() < 0.4 else 1
            t0 = 10.0 + (float(rng.integers(0, 15)) if rng.random() < 0.5 else 0.0)
            t0_due = t0 + (float(rng.integers(0, 15)) if two_clocks and rng.random() < 0.5 else 0.0)
            gpus.append(GpuState(int(rng.integers(0, num_types)), t0, list(range(first_id, first_id + size)), [],
                                 t0_due=t0_due))
            first_id += size
        feasible = rng.random((n, num_types)) < 0.8
        present = sorted({g.type_k for g in gpus})
        for j in range(n):
            if not feasible[j, present].any():
                feasible[j, present[0]] = True
        waiting = [int(j) for j in rng.permutation(n)]
        ref = eager_assign(waiting, gpus, per_type, feasible)
        out = greedy_assign(waiting, copy.deepcopy(gpus), per_type, feasible,
                            QueueOrderer(bnb=True, budget_ms=1e6, max_nodes=None))
        got = {g.members[0]: g for g in out if g.seq}
        where = f"case {case}: waiting={waiting} p={p.tolist()} due_p={due_p.tolist()} due={deadline.tolist()} " \
                f"gpus={gpus} feasible={feasible.tolist()}"
        assert sorted(got) == sorted(ref), where
        for gpu, g in got.items():
            assert (g.t0, g.t0_due) == (ref[gpu]["t0"], ref[gpu]["t0_due"]), where  # split groups keep both
            assert sorted(g.seq) == sorted(ref[gpu]["seq"]), where
            best, _, ways = brute_force(set(g.seq), g.t0, g.t0_due, per_type[g.type_k])
            assert two_clock_cost(g.seq, g.t0, g.t0_due, per_type[g.type_k]) == best, where
            assert g.tardiness == best[0], where
            if ways == 1:
                assert g.seq == ref[gpu]["seq"], where


# -- 4. options ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hydra", "edf"])
def test_deadline_quantile_option(name):
    assert make_policy(name).deadline_quantile is None
    assert make_policy(name).describe()["deadline_quantile"] is None
    policy = make_policy(f"{name}:deadline_quantile=0.9")
    assert isinstance(policy, HydraPolicy if name == "hydra" else EdfPolicy)
    assert policy.deadline_quantile == 0.9 and policy.describe()["deadline_quantile"] == 0.9


@pytest.mark.parametrize("name", ["hydra", "edf"])
@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.1", "abc", "nan"])
def test_deadline_quantile_outside_the_open_unit_interval_is_refused(name, value):
    with pytest.raises(SpecError, match=r"\bdeadline_quantile="):
        make_policy(f"{name}:deadline_quantile={value}")


# -- 5. EDF: the quantile changes the chosen type ---------------------------------------------------------
def test_edf_places_a_deadline_job_where_its_quantile_is_on_time():
    # One A100 and one V100. X (due 12): predicted 8 s on A100, 10 s on V100; truly 15 s and 10 s.
    # The predictor is less sure of A100: its 0.9-quantile is 2x the prediction (16 s: now + 16 - 12
    # = 4 late), on V100 1.1x (11 s: on time). Point EDF takes the fastest, A100, and X ends at 15,
    # 3 late; with the quantile, V100: X ends at 10. Y (no deadline) goes to the fastest type left
    # either way.
    jobs = [hetero("X", 15, 10, deadline_s=12), hetero("Y", 5, 7)]
    predictor = StatedQuantiles([2.0, 1.1], overrides={0: [8.0, 10.0]})
    cluster = [("A100", 1, 1), ("V100", 1, 1)]
    point = times(simulate(jobs, cluster, "edf", predictor))
    assert point == {"X": (0, 15, "A100", "0"), "Y": (0, 7, "V100", "1")}
    risk = simulate(jobs, cluster, "edf:deadline_quantile=0.9", predictor)
    assert times(risk) == {"X": (0, 10, "V100", "1"), "Y": (0, 5, "A100", "0")}
    assert risk.records["tardiness"].sum() == 0


def test_edf_breaks_quantile_ties_by_the_point_then_type_order():
    # X due 30 fits on time at the quantile on both types (A100 16, V100 11): the fastest by the
    # point, A100, as without the option. Z due 5 is late on both (A100 16 - 5 = 11, V100 11 - 5 =
    # 6): the less late, V100, although A100 is faster by the point.
    predictor = StatedQuantiles([2.0, 1.1])
    cluster = [("A100", 1, 1), ("V100", 1, 1)]
    on_time = times(simulate([hetero("X", 8, 10, deadline_s=30)], cluster, "edf:deadline_quantile=0.9", predictor))
    assert on_time["X"][2] == "A100"
    late = times(simulate([hetero("Z", 8, 10, deadline_s=5)], cluster, "edf:deadline_quantile=0.9", predictor))
    assert late["Z"][2] == "V100"
