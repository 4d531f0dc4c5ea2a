"""Failures against the real traces' own numbers, and what they cost in speed (issue 54's targets).

Why: a failure model is only as good as the numbers it gives back on the trace it came from, and
an engine with failures must stay fast enough to replay full traces. Three parts, each appended to
``OUT/results.jsonl`` as it ends (a rerun skips what is there):

1. ``replay`` on the Philly subset (3,034 jobs of >= 4 GPUs with their attempts; **real**): the
   share of jobs that ran more than once per GPU class, simulated against recorded (target: within
   2 points);
2. ``jobs:philly`` on full Philly (111,549 jobs, RFold's CSV; shares **published** by AcmeTrace):
   ``jobs_failed`` / jobs against 30.5 % and ``failed_gpu_seconds`` / ``gpu_seconds_total``
   against 38.6 % (target: within 3 points), per seed;
3. speed: per policy, full Philly with ``jobs:philly`` against the same run without failures,
   both in this process, end to end (fates drawn, engine, records) and the engine's replay alone
   (target: <= 1.5x).

    python -m experiments.bench_failures [--out reports/bench_failures] [--seeds 3] [--policy fifo ...] [--repeats N]
                                         [--part replay|rates|speed ...]
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import click

from experiments.shared_data import shared_dir
from simulator.cluster import resolve
from simulator.run import RunConfig, execute
from traces.deadlines import assign_deadlines, default_fraction
from traces.philly import load as load_philly
from traces.philly import load_json

ACME_PHILLY = {"failed_jobs": 0.305, "failed_gpu_time": 0.386}  # AcmeTrace, NSDI'24 (cluster_summary.csv)
SPEED_POLICIES = ("fifo", "sjf", "edf", "srtf", "tiresias", "allox", "gavel", "hydra")
CLASSES = (("4 GPUs", 4, 4), ("8 GPUs", 5, 8), ("> 8 GPUs", 9, 10**9))


def philly_files() -> tuple[Path, Path]:
    folder = shared_dir() / "traces" / "philly"
    return folder / "marwage_philly_jobs_subset.json", folder / "rfold_philly_trace.csv"


def done(path: Path) -> set[str]:
    return {json.loads(line)["id"] for line in path.read_text().splitlines()} if path.exists() else set()


def append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def replay_part(subset: Path) -> dict:
    """Jobs with more than one attempt per GPU class: recorded in the subset, and in its replay."""
    out = execute(RunConfig(policy="fifo", predictor="truth", trace=f"philly-json:{subset}", cluster="philly",
                            failures="replay"))
    rec = out.records[out.records["status"] != "rejected"]
    recorded = load_json(subset).jobs.set_index("job_id")["attempts"].fillna("")
    rows = []
    for name, lo, hi in CLASSES:
        mine = rec[(rec["num_gpus"] >= lo) & (rec["num_gpus"] <= hi)]
        was = recorded.loc[mine["job_id"].astype(str)] != ""
        rows.append({"class": name, "jobs": len(mine), "recorded": float(was.mean()),
                     "replayed": float((mine["attempts"] > 1).mean()),
                     "failed_attempts_recorded": int(sum(len(t.split(";")) for t in recorded.loc[mine["job_id"]
                                                                                       .astype(str)] if t)),
                     "failed_attempts_replayed": int(mine["failed_attempts"].sum())})
    return {"id": "replay", "rejected": int((out.records["status"] == "rejected").sum()), "classes": rows}


def rates_part(trace, seed: int) -> dict:
    out = execute(RunConfig(policy="fifo", predictor="truth", cluster="philly", failures="jobs:philly", seed=seed,
                            trace="philly:x"), trace=trace, cluster=resolve("philly"))
    s = out.summary
    return {"id": f"rates-{seed}", "seed": seed, "jobs": s["jobs"],
            "failed_jobs": s["jobs_failed"] / s["jobs"],
            "failed_gpu_time": s["failed_gpu_seconds"] / s["gpu_seconds_total"],
            "cancelled_jobs": s["jobs_cancelled"] / s["jobs"], "attempts_mean": s["attempts_mean"],
            "goodput": s["goodput"]}


def speed_part(policy: str, trace, repeats: int) -> dict:
    """The two runs alternated ``repeats`` times, the fastest of each kept (a shared machine's
    noise only ever slows a run down)."""
    row = {"id": f"speed-{policy}", "policy": policy, "repeats": repeats}
    for _ in range(repeats):
        for failures in ("none", "jobs:philly"):
            t0 = time.perf_counter()
            out = execute(RunConfig(policy=policy, predictor="truth", cluster="philly", failures=failures,
                                    trace="philly:x"), trace=trace, cluster=resolve("philly"))
            wall = time.perf_counter() - t0
            key = "plain" if failures == "none" else "failures"
            if wall < row.get(f"{key}_end_to_end_s", math.inf):
                row[f"{key}_end_to_end_s"] = wall
                row[f"{key}_replay_s"] = out.summary["wall_seconds"]
                row[f"{key}_policy_s"] = out.summary["policy_seconds"]
                row[f"{key}_events"] = out.summary["events"]
    row["ratio_end_to_end"] = row["failures_end_to_end_s"] / row["plain_end_to_end_s"]
    row["ratio_replay"] = row["failures_replay_s"] / row["plain_replay_s"]
    return row


def report(rows: list[dict]) -> str:
    lines = [f"# Failures against the traces' own numbers ({time.strftime('%Y-%m-%d')})", ""]
    replay = [r for r in rows if r["id"] == "replay"]
    if replay:
        lines += ["## `replay` on the Philly subset (real attempts): jobs run more than once", "",
                  "| class | jobs | recorded | replayed | difference (points) | failed attempts recorded / replayed |",
                  "|---|---:|---:|---:|---:|---:|"]
        for c in replay[0]["classes"]:
            lines.append(f"| {c['class']} | {c['jobs']:,} | {c['recorded']:.1%} | {c['replayed']:.1%} | "
                         f"{100 * (c['replayed'] - c['recorded']):+.1f} | {c['failed_attempts_recorded']:,} / "
                         f"{c['failed_attempts_replayed']:,} |")
        lines.append("")
    rates = [r for r in rows if r["id"].startswith("rates-")]
    if rates:
        lines += ["## `jobs:philly` on full Philly: failed jobs and failed GPU time (targets: AcmeTrace 30.5 % / "
                  "38.6 %, within 3 points)", "",
                  "| seed | jobs | failed jobs | failed GPU time | cancelled jobs | attempts per job | goodput |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(rates, key=lambda r: r["seed"]):
            lines.append(f"| {r['seed']} | {r['jobs']:,} | {r['failed_jobs']:.1%} | {r['failed_gpu_time']:.1%} | "
                         f"{r['cancelled_jobs']:.1%} | {r['attempts_mean']:.3f} | {r['goodput']:.1%} |")
        lines.append("")
    speed = [r for r in rows if r["id"].startswith("speed-")]
    if speed:
        lines += ["## Speed: full Philly with `jobs:philly` against without failures (target <= 1.5x)", "",
                  "| policy | end to end: without / with (s) | ratio | replay: without / with (s) | ratio | "
                  "policy time: without / with (s) | events: without / with | ratio |",
                  "|---|---|---:|---|---:|---|---|---:|"]
        for r in speed:
            events = (f"{r['plain_events']:,} / {r['failures_events']:,} | "
                      f"{r['failures_events'] / r['plain_events']:.2f}x" if "plain_events" in r else "- | -")
            lines.append(f"| {r['policy']} | {r['plain_end_to_end_s']:.1f} / {r['failures_end_to_end_s']:.1f} | "
                         f"{r['ratio_end_to_end']:.2f}x | {r['plain_replay_s']:.1f} / {r['failures_replay_s']:.1f} | "
                         f"{r['ratio_replay']:.2f}x | {r['plain_policy_s']:.1f} / {r['failures_policy_s']:.1f} | "
                         f"{events} |")
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/bench_failures"),
              show_default=True)
@click.option("--seeds", type=click.IntRange(1), default=3, show_default=True, help="Seeds of the rates part.")
@click.option("--policy", "policies", multiple=True,
              help=f"Speed part's policies [default: {', '.join(SPEED_POLICIES)}].")
@click.option("--repeats", type=click.IntRange(1), default=1, show_default=True,
              help="Speed part: runs of each kind, the fastest kept.")
@click.option("--part", "parts", multiple=True, type=click.Choice(["replay", "rates", "speed"]),
              help="Parts to run [default: all].")
def main(out: Path, seeds: int, policies: tuple[str, ...], repeats: int, parts: tuple[str, ...]) -> None:
    subset, csv = philly_files()
    for path in (subset, csv):
        if not path.exists():
            raise click.ClickException(f"{path} not found: set ETS_SHARED to the shared data folder")
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    finished = done(results)
    parts = parts or ("replay", "rates", "speed")
    if "replay" in parts and "replay" not in finished:
        append(results, replay_part(subset))
    if "rates" in parts or "speed" in parts:
        full = load_philly(csv)
        trace = assign_deadlines(full, default_fraction(full, None), seed=0)  # simrun's: 20 % of jobs
        if "rates" in parts:
            for seed in range(seeds):
                if f"rates-{seed}" not in finished:
                    append(results, rates_part(trace, seed))
        if "speed" in parts:
            for policy in policies or SPEED_POLICIES:
                if f"speed-{policy}" not in finished:
                    click.echo(f"speed: {policy} ...", err=True)
                    append(results, speed_part(policy, trace, repeats))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    text = report(rows)
    (out / "report.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()
