"""Hydra's deadline cases: FIFO, SJF, EDF, AlloX and Hydra on the first N jobs, N = 10..400.

Why: the Hydra paper's own evaluation (../shared/hydra_cases/README.md): the light workload
(20_ddl.csv on 15 A100 / 15 V100 / 15 RTX2080Ti) and the heavy one (30_ddl.csv on 10 / 20 / 15),
all jobs submitted at t = 0, each N a separate simulation with true run times known to the
policies (the cases' measured per-type times). One-shot where the policy has it: AlloX offline
with the exact matching over all jobs, Hydra offline (one plan), heuristic-only and with branch-and-bound
under a node budget, and with its defaults (a work budget per decision); every Hydra budget is in
work units, never the clock, so the table is the same on any machine (the report says how often a
node budget bound).

    python -m experiments.hydra_cases [--cases DIR] [--out reports/hydra_cases] [--max-n 400] [--step 10]

Writes results.csv (one row per workload, N and policy, appended as each run finishes; a rerun
skips the rows already there), table.md, and jct_tardiness.png/.pdf.
"""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd
from tqdm import tqdm

from experiments.shared_data import shared_dir
from simulator.cluster import resolve
from simulator.run import RunConfig, execute
from traces.hydra_cases import load as load_case

WORKLOADS = {"light": ("20_ddl.csv", "hydra-light"), "heavy": ("30_ddl.csv", "hydra-heavy")}
POLICIES = {
    "FIFO": "fifo",
    "SJF": "sjf",
    "EDF": "edf",
    "AlloX": "allox:mode=offline,window=all",
    "Hydra-heuristic": "hydra:mode=offline,bnb=off,work=all",  # unbounded: the heuristic on every queue
    "Hydra-B&B": "hydra:mode=offline,nodes=20000,work=all",
    "Hydra": "hydra:mode=offline",  # the defaults
}
COLUMNS = ["workload", "n", "policy", "spec", "jct_mean", "queue_mean", "late_jobs", "tardiness_total",
           "late_tardiness_mean", "policy_calls", "policy_ms", "bnb_searches", "bnb_stopped_by_node_budget"]


def default_cases() -> Path:
    return shared_dir() / "hydra_cases"


def run_point(trace, cluster, spec: str) -> dict:
    out = execute(RunConfig(policy=spec, predictor="truth"), trace=trace, cluster=cluster)
    s, pol = out.summary, out.manifest["policy"]
    return {"jct_mean": s["jct_mean"], "queue_mean": s["queue_mean"], "late_jobs": s["late_jobs"],
            "tardiness_total": s["tardiness_total"], "late_tardiness_mean": s["late_tardiness_mean"],
            "policy_calls": s["policy_calls"], "policy_ms": s["policy_seconds"] * 1000,
            "bnb_searches": pol.get("bnb_searches", 0),
            "bnb_stopped_by_node_budget": pol.get("bnb_stopped_by_node_budget", 0)}


def markdown_table(df: pd.DataFrame, ns: list[int]) -> str:
    lines = []
    for workload, group in df[df["n"].isin(ns)].groupby("workload", sort=False):
        lines += [f"### {workload} ({WORKLOADS[workload][0]} on {WORKLOADS[workload][1]})", "",
                  "| N | policy | avg JCT s | avg queueing s | late jobs | total tardiness s | "
                  "mean tardiness of late s | scheduler calls | scheduler ms |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in group.sort_values(["n", "policy"], key=lambda c: c.map(_policy_rank) if c.name == "policy"
                                     else c).itertuples():
            lines.append(f"| {row.n} | {row.policy} | {row.jct_mean:,.0f} | {row.queue_mean:,.0f} | "
                         f"{row.late_jobs} | {row.tardiness_total:,.0f} | {row.late_tardiness_mean:,.0f} | "
                         f"{row.policy_calls} | {row.policy_ms:,.1f} |")
        lines.append("")
    return "\n".join(lines)


def _policy_rank(name: str) -> int:
    return list(POLICIES).index(name) if name in POLICIES else len(POLICIES)


def plot(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    for r, workload in enumerate(WORKLOADS):
        sub = df[df["workload"] == workload]
        for name in POLICIES:
            line = sub[sub["policy"] == name].sort_values("n")
            if line.empty:
                continue
            axes[r, 0].plot(line["n"], line["jct_mean"] / 3600, marker=".", label=name)
            axes[r, 1].plot(line["n"], line["tardiness_total"] / 3600, marker=".", label=name)
        axes[r, 0].set_ylabel(f"{workload}: average JCT (h)")
        axes[r, 1].set_ylabel(f"{workload}: total tardiness (h, symlog)")
        axes[r, 1].set_yscale("symlog", linthresh=1.0)
    for ax in axes[1]:
        ax.set_xlabel("jobs N (all submitted at t = 0)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Hydra deadline cases: light = 20_ddl on 15/15/15, heavy = 30_ddl on 10 A100/20 V100/15 2080Ti")
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"jct_tardiness.{ext}", dpi=130)
    plt.close(fig)


@click.command()
@click.option("--cases", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with 20_ddl.csv and 30_ddl.csv [default: $ETS_SHARED/hydra_cases].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/hydra_cases"),
              show_default=True)
@click.option("--max-n", type=click.IntRange(10, 5000), default=400, show_default=True)
@click.option("--step", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--policies", default=",".join(POLICIES), show_default=True, help="Comma-separated subset.")
@click.option("--table-n", default="100,200,400", show_default=True, help="N values shown in table.md.")
def main(cases: Path | None, out: Path, max_n: int, step: int, policies: str, table_n: str) -> None:
    cases = cases or default_cases()
    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        raise click.ClickException(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    traces = {}
    for workload, (file, _) in WORKLOADS.items():
        if not (cases / file).exists():
            raise click.ClickException(f"{cases / file} not found; pass --cases or set ETS_SHARED")
        traces[workload] = load_case(cases / file)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    done = pd.read_csv(results) if results.exists() else pd.DataFrame(columns=COLUMNS)
    finished = {(w, int(n), p) for w, n, p in done[["workload", "n", "policy"]].itertuples(index=False)}
    points = [(w, n, p) for w in WORKLOADS for n in range(step, max_n + 1, step) for p in chosen
              if (w, n, p) not in finished]
    for workload, n, name in tqdm(points, desc="hydra cases", unit="run"):
        row = {"workload": workload, "n": n, "policy": name, "spec": POLICIES[name],
               **run_point(traces[workload].head(n), resolve(WORKLOADS[workload][1]), POLICIES[name])}
        pd.DataFrame([row], columns=COLUMNS).to_csv(results, mode="a", header=not results.exists(), index=False)
    df = pd.read_csv(results)
    ns = [int(x) for x in table_n.split(",") if x.strip()]
    (out / "table.md").write_text(markdown_table(df, ns))
    plot(df, out)
    click.echo(markdown_table(df, ns))
    click.echo(f"wrote {results}, {out / 'table.md'}, {out / 'jct_tardiness.png'} (.pdf)")


if __name__ == "__main__":
    main()
