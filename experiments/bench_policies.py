"""Policy speed: wall time, policy time and decisions/s of every policy on traces up to 1M jobs.

Why: researchers replay whole traces. Each (case, policy) runs in its own process under a time
limit (a run past it is reported as not finished, with the limit), appended to results.csv as it
ends (a rerun skips what is there). The FIFO runs also time a bare heapq FIFO loop (no GPU types,
no placement, no records) on the same jobs in the same process: the engine's overhead as a ratio.
Memory is the process's peak RSS. Run times are the traces' own (``--predictor truth``); the
synthetic and Philly traces get simrun's default deadlines (20 % of jobs).

    python -m experiments.bench_policies [--out reports/bench_policies] [--limit-s 600] [--case NAME ...]
                                         [--policy SPEC ...]
    python -m experiments.bench_policies --hydra-budgets [--repeats 3] [--slow 3] [--variant work=N ...]
    python -m experiments.bench_policies --gavel-lp [--repeats 3]
    python -m experiments.bench_policies --per-decision [--case philly-10k] [--policy SPEC ...] [--label NAME]

``--per-decision`` (issue 55): microseconds per policy decision (its ``schedule`` call) against
the jobs waiting at that moment, per policy, on one case (default ``philly-10k``: the overloaded
default cluster, queues of thousands): the cost of a decision that re-examines the queue grows
with it. Each (case, policy, ``--label``) runs in its own process, appended to
``per_decision.csv`` (a rerun skips what is there); binned by powers of two of jobs waiting, median
and mean per bin, plotted (``per_decision.png``/``.pdf``; one line style per label, e.g. before
and after a change).

``--hydra-budgets`` (issue 31): Hydra's default budget in work units against the wall-clock default
it replaced (``budget_ms`` 20 online, 1000 offline), on the Hydra cases (heavy and light 400, both
modes) and 300-job Philly-like and PAI-like workloads, each run ``--repeats`` times on the real
clock and once with Hydra's clock running ``--slow`` times fast (a machine that much slower, as
Hydra sees it); a table of tardiness, mean JCT and Hydra's policy time, with ratios against the
old default's real-clock mean measured in the same run, and how many distinct results each got.

Targets (issue 19): Hydra online on full Philly <= 5 min, every run <= 10 min; AlloX online
exact on heavy 400 <= 5 s of planning; Hydra offline on heavy 400 <= 1 s, tardiness <= 6,114 s;
AlloX online on full Philly <= 60 s; FIFO on full Philly <= 5x the bare loop;
wall(100k) / wall(10k) <= 11 per policy; FIFO on 1M pai-like jobs <= 60 s within 4 GiB. Issue 35:
every preemptive policy (srtf, tiresias, gavel) on full Philly <= 5 min, on pai-like 100k <= 10 min.
"""

from __future__ import annotations

import heapq
import json
import os
import resource
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np
import pandas as pd

from experiments.shared_data import shared_dir

ONLINE = ("fifo", "sjf", "edf", "allox", "hydra", "srtf", "tiresias", "gavel")
HEAVY = ("hydra:mode=offline", "hydra:mode=offline,budget_ms=5000", "hydra", "allox:mode=offline,window=all",
         "allox:window=all")


@dataclass(frozen=True)
class Case:
    name: str
    policies: tuple[str, ...]
    cluster: str
    workload: str | None = None      # synthetic KIND:N
    trace: str | None = None         # KIND:PATH under ../shared
    limit: int | None = None

    def config(self, policy: str):
        from simulator.run import RunConfig

        trace = None
        if self.trace:
            kind, _, rel = self.trace.partition(":")
            trace = f"{kind}:{shared_dir() / rel}"
        return RunConfig(policy=policy, predictor="truth", trace=trace, workload=self.workload,
                         limit=self.limit, cluster=self.cluster)

    def available(self) -> bool:
        return self.trace is None or (shared_dir() / self.trace.partition(":")[2]).exists()


PHILLY = "philly:traces/philly/rfold_philly_trace.csv"
CASES = {c.name: c for c in (
    Case("hydra-heavy-400", HEAVY, "hydra-heavy", trace="hydra:hydra_cases/30_ddl.csv", limit=400),
    Case("pai-like-10k", ONLINE, "default", workload="pai-like:10000"),
    Case("pai-like-100k", ONLINE, "default", workload="pai-like:100000"),
    Case("philly-2k", ONLINE, "default", trace=PHILLY, limit=2000),
    Case("philly-10k", ONLINE, "default", trace=PHILLY, limit=10000),
    Case("philly-full", ONLINE, "philly", trace=PHILLY),
    Case("pai-like-1M", ("fifo",), "default", workload="pai-like:1000000"),
)}


# -- Hydra's budgets (issue 31, finding 8) ----------------------------------------------------------
BUDGET_CASES = {c.name: c for c in (
    CASES["hydra-heavy-400"],
    Case("hydra-light-400", (), "hydra-light", trace="hydra:hydra_cases/20_ddl.csv", limit=400),
    Case("philly-like-300", (), "default", workload="philly-like:300"),
    Case("pai-like-300", (), "default", workload="pai-like:300"),
)}
OLD_DEFAULT = {"online": "budget_ms=20", "offline": "budget_ms=1000"}  # Hydra's wall-clock default before


@contextmanager
def fast_clock(factor: float) -> Iterator[None]:
    """Hydra's clock (``policies.hydra.time.perf_counter``) runs ``factor`` times fast while inside:
    a machine ``factor`` times slower, as far as Hydra's time budget can tell."""
    import policies.hydra as hydra

    real = hydra.time
    start = real.perf_counter()
    hydra.time = SimpleNamespace(perf_counter=lambda: start + factor * (real.perf_counter() - start))
    try:
        yield
    finally:
        hydra.time = real


def budget_run(case: Case, spec: str, slow: float) -> dict:
    """One Hydra run of ``case`` in this process, its clock ``slow`` times fast (1: the real one)."""
    from experiments.frozen_cases import digest
    from simulator.cluster import resolve
    from simulator.run import execute, load_workload

    config = case.config(spec)
    trace = load_workload(config)
    with fast_clock(slow):
        out = execute(config, trace=trace, cluster=resolve(case.cluster))
    s, pol = out.summary, out.manifest["policy"]
    return {"case": case.name, "spec": spec, "clock": f"{slow:g}x fast" if slow != 1 else "real",
            "tardiness_total": s["tardiness_total"], "jct_mean": s["jct_mean"], "policy_s": s["policy_seconds"],
            "bound": pol["bound"], "cut": pol["decisions_cut_by_work_budget"] + pol["decisions_cut_by_time_budget"],
            "decisions": s["policy_calls"], "digest": digest(out.records)}


def budget_specs(mode: str, variants: tuple[str, ...]) -> list[tuple[str, str]]:
    """(label, spec) of the runs per case and mode: the old default, the new one, any variants."""
    prefix = "hydra" if mode == "online" else "hydra:mode=offline"
    join = ":" if mode == "online" else ","
    return [("old default", f"{prefix}{join}{OLD_DEFAULT[mode]}"), ("new default", prefix),
            *((v, f"{prefix}{join}{v}") for v in variants)]


def _span(values: pd.Series, fmt: str) -> str:
    """A value, or the range of the values when they differ."""
    lo, hi = values.min(), values.max()
    return format(lo, fmt) if lo == hi else f"{lo:{fmt}}–{hi:{fmt}}"


def _ratio(value: float, reference: float) -> str:
    """value / reference (1.00 for 0 / 0)."""
    if reference:
        return f"{value / reference:.2f}"
    return "1.00" if not value else "inf"


def budget_table(df: pd.DataFrame) -> str:
    """One row per (case, mode, budget, clock): ranges over the repeats and ratios of the means to
    the old default's on the real clock."""
    lines = ["| case | mode | budget | clock | runs | distinct results | tardiness s | mean JCT s | policy s | "
             "tardiness ratio | JCT ratio | policy-time ratio | decisions cut |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    measures = ("tardiness_total", "jct_mean", "policy_s")
    for (case, mode), group in df.groupby(["case", "mode"], sort=False):
        base = group[(group["label"] == "old default") & (group["clock"] == "real")]
        ref = {k: base[k].mean() for k in measures}
        for (label, clock), runs in group.groupby(["label", "clock"], sort=False):
            ratios = " | ".join(_ratio(runs[k].mean(), ref[k]) for k in measures)
            lines.append(f"| {case} | {mode} | {label} | {clock} | {len(runs)} | {runs['digest'].nunique()} | "
                         f"{_span(runs['tardiness_total'], ',.0f')} | {_span(runs['jct_mean'], ',.0f')} | "
                         f"{_span(runs['policy_s'], '.2f')} | {ratios} | "
                         f"{_span(runs['cut'], 'd')} of {int(runs['decisions'].max())} |")
    return "\n".join(lines)


def run_hydra_budgets(out: Path, repeats: int, slow: float, variants: tuple[str, ...], names: tuple[str, ...]) -> str:
    """Run the budget comparison (see the module docstring); returns the report's text."""
    from tqdm import tqdm

    cases = [BUDGET_CASES[n] for n in (names or BUDGET_CASES) if BUDGET_CASES[n].available()]
    budget_run(Case("warm-up", (), "default", workload="pai-like:20"), "hydra", 1.0)  # numba's first load
    todo = [(case, mode, label, spec, clock) for case in cases for mode in ("online", "offline")
            for label, spec in budget_specs(mode, variants) for clock in [1.0] * repeats + [slow]]
    load_before = os.getloadavg()
    rows = []
    for case, mode, label, spec, clock in tqdm(todo, desc="hydra budgets", unit="run"):
        rows.append({"mode": mode, "label": label, **budget_run(case, spec, clock)})
    load_after = os.getloadavg()
    df = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "hydra_budgets.csv", index=False)
    text = (f"{budget_table(df)}\n\nold default: {OLD_DEFAULT['online']} online, {OLD_DEFAULT['offline']} offline; "
            f"new default: work in units (policies.hydra.DEFAULT_WORK); {os.cpu_count()} CPUs, load average "
            f"(1, 5, 15 min) {tuple(round(x, 2) for x in load_before)} before, "
            f"{tuple(round(x, 2) for x in load_after)} after\n")
    (out / "hydra_budgets.md").write_text(text)
    return text


def code_label() -> str:
    """The checkout's commit, with '+' when its tree has changes (what a before/after run ran)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=root).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def bare_fifo(submit: np.ndarray, num_gpus: np.ndarray, duration: np.ndarray, total_gpus: int) -> int:
    """FIFO on one pool of ``total_gpus`` GPUs with a heap of completions: the floor of an event
    loop over these jobs. Returns the number of events (arrivals + completions)."""
    submit, num_gpus, duration = submit.tolist(), num_gpus.tolist(), duration.tolist()
    heap: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    free, i, n, events = total_gpus, 0, len(submit), 0
    while i < n or heap:
        if heap and (i >= n or heap[0][0] <= submit[i]):
            t, g = heapq.heappop(heap)
            free += g
        else:
            t = submit[i]
            if num_gpus[i] <= total_gpus:
                queue.append(i)
            i += 1
        events += 1
        while queue and num_gpus[queue[0]] <= free:
            j = queue.popleft()
            free -= num_gpus[j]
            heapq.heappush(heap, (t + duration[j], num_gpus[j]))
    return events


def run_one(case: Case, policy: str) -> dict:
    """One measured run in this process (called in a child by the driver)."""
    from simulator.cluster import resolve
    from simulator.run import execute, load_workload
    from simulator.timing import true_runtimes

    config = case.config(policy)
    t0 = time.perf_counter()
    trace = load_workload(config)
    load_s = time.perf_counter() - t0
    cluster = resolve(case.cluster)
    t0 = time.perf_counter()
    out = execute(config, trace=trace, cluster=cluster)
    wall = time.perf_counter() - t0
    s = out.summary
    row = {"case": case.name, "policy": policy, "status": "ok", "jobs": len(trace), "load_s": load_s,
           "wall_s": wall, "policy_s": s["policy_seconds"], "decisions": s["policy_calls"],
           "events": s["events"], "jct_mean": s["jct_mean"], "tardiness_total": s["tardiness_total"],
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "bare_s": np.nan}
    if policy == "fifo":
        jobs = trace.jobs
        reference = cluster.reference_type()
        duration = true_runtimes(jobs, cluster.gpu_types, reference)[:, cluster.gpu_types.index(reference)]
        t0 = time.perf_counter()
        bare_fifo(jobs["submit_s"].to_numpy(), jobs["num_gpus"].to_numpy(), duration, cluster.total_gpus)
        row["bare_s"] = time.perf_counter() - t0
    return row


def measure(case: Case, policy: str, limit_s: float) -> dict:
    """``run_one`` in a child process, killed at ``limit_s``."""
    cmd = [sys.executable, "-m", "experiments.bench_policies", "--one", case.name, policy]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s,
                              cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired:
        return {"case": case.name, "policy": policy, "status": f"not finished in {limit_s:.0f} s",
                "wall_s": np.nan}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"case": case.name, "policy": policy, "status": f"failed: {tail}", "wall_s": np.nan}
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- per-decision cost against queue length (issue 55) ---------------------------------------------
DECISION_BINS = 2.0 ** np.arange(0, 21)  # jobs waiting: [0, 1), [1, 2), [2, 4), ... [2^19, 2^20)


@contextmanager
def timed_decisions(samples: list[tuple[int, float]]) -> Iterator[None]:
    """Every policy :func:`simulator.run.execute` makes while inside has its ``schedule`` timed:
    (jobs waiting, seconds) appended to ``samples`` per call."""
    import simulator.run as run

    real = run.make_policy

    def make(spec: str):
        policy = real(spec)
        schedule = policy.schedule

        def timed(view):
            waiting = len(view.waiting)
            t0 = time.perf_counter()
            decisions = schedule(view)
            samples.append((waiting, time.perf_counter() - t0))
            return decisions

        policy.schedule = timed
        return policy

    run.make_policy = make
    try:
        yield
    finally:
        run.make_policy = real


def decision_bins(samples: list[tuple[int, float]]) -> list[dict]:
    """Per bin of jobs waiting (lower edge inclusive): decisions, median and mean microseconds."""
    waiting = np.array([w for w, _ in samples], dtype=np.int64)
    micros = np.array([dt for _, dt in samples]) * 1e6
    edges = np.concatenate(([0.0], DECISION_BINS))
    which = np.searchsorted(edges, waiting, side="right") - 1
    rows = []
    for b in np.unique(which):
        mine = micros[which == b]
        rows.append({"waiting_lo": int(edges[b]), "waiting_hi": int(edges[b + 1]) - 1, "decisions": int(len(mine)),
                     "median_us": float(np.median(mine)), "mean_us": float(mine.mean())})
    return rows


def decisions_one(case: Case, policy: str) -> list[dict]:
    """One run of ``policy`` on ``case`` in this process, its decisions timed and binned."""
    from simulator.cluster import resolve
    from simulator.run import execute, load_workload

    config = case.config(policy)
    trace = load_workload(config)
    samples: list[tuple[int, float]] = []
    with timed_decisions(samples):
        execute(config, trace=trace, cluster=resolve(case.cluster))
    return decision_bins(samples)


def run_per_decision(out: Path, case: Case, policies: tuple[str, ...], label: str, limit_s: float) -> str:
    """Each policy's binned decision costs on ``case`` (a child process per policy), appended to
    ``per_decision.csv``; the plot and a table of the median per bin."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    path = out / "per_decision.csv"
    done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["case", "policy", "label"])
    seen = set(zip(done["case"], done["policy"], done["label"].astype(str)))
    for policy in tqdm([p for p in policies or ONLINE if (case.name, p, label) not in seen],
                       desc="per-decision cost", unit="policy"):
        cmd = [sys.executable, "-m", "experiments.bench_policies", "--one-decisions", case.name, policy]
        try:
            child = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s,
                                   cwd=Path(__file__).resolve().parents[1])
        except subprocess.TimeoutExpired:
            click.echo(f"{policy}: not finished in {limit_s:.0f} s (nothing recorded)", err=True)
            continue
        if child.returncode != 0:
            tail = (child.stderr.strip().splitlines() or ["(no output)"])[-1]
            click.echo(f"{policy}: failed: {tail}", err=True)
            continue
        rows = [{"case": case.name, "policy": policy, "label": label, **r}
                for r in json.loads(child.stdout.strip().splitlines()[-1])]
        pd.DataFrame(rows).to_csv(path, mode="a", header=not path.exists(), index=False)
    df = pd.read_csv(path)
    df = df[df["case"] == case.name]
    plot_per_decision(df, out / "per_decision")
    return decision_table(df)


def decision_table(df: pd.DataFrame) -> str:
    """Median microseconds per decision by jobs waiting: a row per (policy, label)."""
    bins = sorted(set(zip(df["waiting_lo"], df["waiting_hi"])))
    head = " | ".join(f"{lo:,}–{hi:,}" if hi > lo else f"{lo:,}" for lo, hi in bins)
    lines = [f"| policy | label | {head} |", "|---|---|" + "---:|" * len(bins)]
    for (policy, label), g in df.groupby(["policy", "label"], sort=False):
        by = {(r.waiting_lo, r.waiting_hi): r.median_us for r in g.itertuples()}
        cells = " | ".join(f"{by[b]:,.0f}" if b in by else "" for b in bins)
        lines.append(f"| {policy} | {label} | {cells} |")
    return "\n".join(lines)


def plot_per_decision(df: pd.DataFrame, stem: Path) -> None:
    """Median microseconds per decision against jobs waiting (log-log), a colour per policy and a
    line style per label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = {p: f"C{i}" for i, p in enumerate(dict.fromkeys(df["policy"]))}
    styles = {lab: s for lab, s in zip(dict.fromkeys(df["label"].astype(str)), ("-", "--", ":", "-."))}
    for (policy, label), g in df.groupby(["policy", "label"], sort=False):
        x = np.maximum(g["waiting_lo"].to_numpy(), 0.5)  # the [0, 1) bin at 0.5 on a log axis
        ax.plot(x, g["median_us"], marker="o", ms=3, color=colours[policy], linestyle=styles.get(str(label), "-"),
                label=f"{policy} ({label})" if len(styles) > 1 else policy)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs waiting at the decision (bin's lower edge; 0 at 0.5)")
    ax.set_ylabel("median µs per decision")
    ax.set_title(f"Cost of a policy decision against the queue ({df['case'].iloc[0]})")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(stem.with_suffix(f".{ext}"))
    plt.close(fig)


def table(df: pd.DataFrame) -> str:
    lines = ["| case | policy | jobs | wall s | policy s | decisions | decisions/s | peak MiB | "
             "FIFO / bare loop | tardiness s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in df.itertuples():
        if r.status != "ok":
            lines.append(f"| {r.case} | {r.policy} | | {r.status} | | | | | | |")
            continue
        ratio = f"{r.wall_s / r.bare_s:.1f}× ({r.bare_s:.2f} s)" if r.bare_s == r.bare_s else ""
        rate = f"{r.decisions / r.policy_s:,.0f}" if r.policy_s > 0 else ""
        lines.append(f"| {r.case} | {r.policy} | {int(r.jobs):,} | {r.wall_s:,.2f} | {r.policy_s:,.2f} | "
                     f"{int(r.decisions):,} | {rate} | {r.peak_rss_mib:,.0f} | {ratio} | {r.tardiness_total:,.0f} |")
    return "\n".join(lines)


def scaling(df: pd.DataFrame) -> str:
    ok = df[df["status"] == "ok"].set_index(["case", "policy"])["wall_s"]
    lines = ["| policy | wall(pai-like 100k) / wall(10k) |", "|---|---:|"]
    ran = df.loc[df["case"].isin(["pai-like-10k", "pai-like-100k"]), "policy"]
    for policy in dict.fromkeys([*(p for p in ONLINE if p in set(ran)), *ran]):  # ONLINE's order, then others
        a, b = ok.get(("pai-like-100k", policy)), ok.get(("pai-like-10k", policy))
        lines.append(f"| {policy} | {a / b:.2f} |" if a is not None and b is not None else f"| {policy} | n/a |")
    return "\n".join(lines)


def gavel_lp_table(jobs: int = 1000, repeats: int = 3, seed: int = 0) -> str:
    """Seconds per round of each Gavel objective's LPs for ``jobs`` active jobs on 4 GPU types
    (64/64/32/32 GPUs, 1-8 GPUs per job, random throughputs, progress and ages), best of ``repeats``."""
    from policies.gavel import OBJECTIVES, Allocation

    rng = np.random.default_rng(seed)
    throughput = 1.0 / rng.uniform(100, 10_000, (jobs, 4))
    num_gpus, gpus = rng.choice([1, 1, 1, 2, 4, 8], jobs), np.array([64, 64, 32, 32])
    remaining, elapsed = rng.uniform(0.1, 1.0, jobs), rng.uniform(0, 1000, jobs)
    lines = [f"| objective | seconds per round ({jobs} jobs x 4 types, best of {repeats}) |", "|---|---:|"]
    for objective in OBJECTIVES:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            lp = Allocation(throughput, num_gpus, gpus)
            if objective == "max_min":
                lp.max_min()
            elif objective == "makespan":
                lp.makespan(remaining)
            else:
                lp.ftf(remaining, elapsed)
            best = min(best, time.perf_counter() - t0)
        lines.append(f"| {objective} | {best:.3f} |")
    return "\n".join(lines)


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/bench_policies"),
              show_default=True)
@click.option("--limit-s", type=float, default=600.0, show_default=True, help="Per run; longer runs are stopped.")
@click.option("--case", "names", multiple=True, type=click.Choice(list(CASES)), help="Only these cases.")
@click.option("--policy", "policies", multiple=True,
              help="These policy specs on each case, instead of its own list (e.g. hydra, gavel:objective=ftf).")
@click.option("--one", nargs=2, hidden=True, default=None)
@click.option("--one-decisions", nargs=2, hidden=True, default=None)
@click.option("--per-decision", is_flag=True,
              help="Instead: microseconds per decision against jobs waiting, per policy, on one case "
                   "(--case, default philly-10k), with a plot.")
@click.option("--label", default="", help="--per-decision: this run's name in the table and plot "
              "[default: the git commit, '+' if the tree has changes].")
@click.option("--hydra-budgets", is_flag=True,
              help="Instead: Hydra's default work budget against its former time budget (issue 31).")
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True,
              help="--hydra-budgets: real-clock runs per budget.")
@click.option("--slow", type=click.FloatRange(1.0, 1000.0), default=3.0, show_default=True,
              help="--hydra-budgets: Hydra's clock runs this many times fast in one more run per budget.")
@click.option("--variant", "variants", multiple=True,
              help="--hydra-budgets: another budget to compare, as Hydra options (e.g. work=5000).")
@click.option("--budget-case", "budget_cases", multiple=True, type=click.Choice(list(BUDGET_CASES)),
              help="--hydra-budgets: only these cases.")
@click.option("--gavel-lp", is_flag=True, help="Instead: seconds per round of Gavel's LPs, 1,000 jobs x 4 types.")
def main(out: Path, limit_s: float, names: tuple[str, ...], policies: tuple[str, ...],
         one: tuple[str, str] | None, hydra_budgets: bool, repeats: int, slow: float, variants: tuple[str, ...],
         budget_cases: tuple[str, ...], gavel_lp: bool, one_decisions: tuple[str, str] | None, per_decision: bool,
         label: str) -> None:
    if one_decisions:
        click.echo(json.dumps(decisions_one(CASES[one_decisions[0]], one_decisions[1])))
        return
    if per_decision:
        if len(names) > 1:
            raise click.UsageError("--per-decision takes one --case")
        click.echo(run_per_decision(out, CASES[names[0] if names else "philly-10k"], policies,
                                    label or code_label(), limit_s))
        return
    if gavel_lp:
        click.echo(gavel_lp_table(repeats=repeats))
        return
    if one:
        click.echo(json.dumps(run_one(CASES[one[0]], one[1])))
        return
    if hydra_budgets:
        click.echo(run_hydra_budgets(out, repeats, slow, variants, budget_cases))
        return
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    done = pd.read_csv(results) if results.exists() else pd.DataFrame(columns=["case", "policy"])
    seen = set(zip(done["case"], done["policy"]))
    cases = [CASES[n] for n in (names or CASES)]
    missing = [c.name for c in cases if not c.available()]
    if missing:
        click.echo(f"skipping {', '.join(missing)}: trace not under {shared_dir()} (set ETS_SHARED)", err=True)
    todo = [(c, p) for c in cases if c.available() for p in (policies or c.policies) if (c.name, p) not in seen]
    for case, policy in tqdm(todo, desc="policy benchmark", unit="run"):
        row = measure(case, policy, limit_s)
        pd.DataFrame([row]).to_csv(results, mode="a", header=not results.exists(), index=False)
    if not results.exists():
        raise click.UsageError(f"nothing to run: no case available ({', '.join(missing)})")
    df = pd.read_csv(results)
    order = {n: i for i, n in enumerate(CASES)}
    df = df.sort_values(["case", "policy"], key=lambda c: c.map(order) if c.name == "case" else c, kind="stable")
    text = f"{table(df)}\n\n{scaling(df)}\n"
    (out / "table.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()
