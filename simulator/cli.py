"""``simrun``: run one simulation and print its summary.

Why a thin layer: all logic lives in :mod:`simulator.run`; this module turns options into a
RunConfig, user errors into one-line messages (never tracebacks), and the summary into a table.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

import click

from policies.registry import policy_help
from predictor.common.errors import UserErrorGroup
from predictor.common.gpus import names_help
from predictor.common.inputs import UserError, printable
from predictor.common.outputs import (
    LOCK_NAME,
    OutputError,
    check_writable,
    claim_folder,
    inside,
    locked_folder,
    remove_if_empty,
)
from predictor.tables import open_cache
from simulator.cluster import PRESETS
from simulator.communication import PLACEMENTS
from simulator.failure_models import FAILURES_HELP
from simulator.run import DEFAULT_CLUSTER, DEFAULT_WORKLOAD, RunConfig, RunOutput, execute, readable
from simulator.timing import PREDICTOR_HELP
from traces.registry import kinds_help
from traces.synthetic import KINDS as SYNTHETIC_KINDS


def format_summary(summary: dict) -> str:
    """A two-column table of the headline metrics (seconds shown also in hours where long)."""
    def dur(x: float) -> str:
        return f"{readable(x, 1)} s" + (f"  ({readable(x / 3600, 2)} h)" if x >= 3600 else "")

    rows = [
        ("jobs completed", f"{summary['jobs'] - summary.get('jobs_failed', 0) - summary.get('jobs_cancelled', 0):,}"),
        ("jobs rejected", f"{summary['rejected']:,}"),
        ("JCT mean", dur(summary["jct_mean"])),
        ("JCT p50 / p95 / p99", " / ".join(readable(summary[k]) for k in ("jct_p50", "jct_p95", "jct_p99")) + " s"),
        ("queueing delay mean", dur(summary["queue_mean"])),
        ("makespan", dur(summary["makespan"])),
        ("late jobs", f"{summary['late_jobs']:,} of {summary['jobs_with_deadline']:,} with a deadline"),
        ("tardiness total / mean",
         f"{readable(summary['tardiness_total'])} s / {readable(summary['tardiness_mean'], 1)} s"),
        ("utilisation", f"{summary['utilization']:.1%}  ("
         + ", ".join(f"{t} {u:.0%}" for t, u in summary["utilization_by_type"].items()) + ")"),
    ]
    if summary.get("preemptions"):  # a preemptive policy that suspended jobs
        resuming, lost = readable(summary["restart_overhead_seconds"]), readable(summary["gpu_seconds_lost"])
        rows.append(("preemptions", f"{summary['preemptions']:,} ({summary['preemptions_per_job_mean']:.2f} per job, "
                     f"p95 {summary['preemptions_per_job_p95']:g}); resuming {resuming} s, {lost} GPU-s lost"))
    if "communication_gpu_seconds" in summary:  # a bound run with its communication model
        rows.append(("communication", f"{readable(summary['communication_gpu_seconds'] / 3600, 1)} GPU-h exposed "
                     f"({summary['communication_share']:.1%} of GPU time; spec-derived)"))
    if summary.get("failed_attempts") or summary.get("jobs_cancelled"):  # failures happened
        rows.append(("failures", f"{summary['failed_attempts']:,} failed attempts ({summary['attempts_mean']:.2f} "
                     f"attempts per job); {summary['jobs_failed']:,} jobs ended failed, "
                     f"{summary['jobs_cancelled']:,} cancelled"))
        total = summary["gpu_seconds_total"]
        rows.append(("GPU time", f"{readable(total / 3600, 1)} GPU-h; failed jobs "
                     f"{summary['failed_gpu_seconds'] / total if total else 0:.1%}, lost "
                     f"{summary['gpu_seconds_lost'] / total if total else 0:.1%} (restarts, work redone, "
                     f"checkpoints); goodput {summary['goodput']:.1%}"))
    if "rounds" in summary:  # a preemptive policy's round boundaries
        rows.append(("rounds", f"{summary['rounds']:,}"))
    rows += [
        ("policy time", f"{summary['policy_seconds']:.3f} s in {summary['policy_calls']:,} calls"),
        ("wall time", f"{summary['wall_seconds']:.2f} s ({summary['events_per_second']:,.0f} events/s)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def default_out_dir(policy: str, predictor: str) -> Path:
    """A new folder runs/<time>_<policy>_<predictor>, created now; a suffix -2, -3, ... keeps it
    unique when two runs start in the same second (mkdir is atomic, so even concurrent ones)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{policy}_{predictor}")
    base = Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}_{slug}"
    for n in range(1, 1000):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"cannot create {folder}: {exc.strerror or exc}") from None
        try:
            return check_writable(folder)
        except OutputError:
            folder.rmdir()  # empty: ours, just made
            raise
    raise OutputError(f"cannot find a free name for {base} (999 taken); pass --out")


# What a run folder holds: simrun's files, those `simrun timeline` / `simrun plot` add, and the
# hidden temporary files of an interrupted write.
RUN_ENTRIES = {*RunOutput.FILES, RunOutput.SEGMENTS, RunOutput.TRUTH, "timeline.json", "plots"}


def _leftover(name: str) -> bool:
    """A hidden temporary file of an interrupted write (predictor.common.outputs names them so), or the
    run's lock file."""
    return name == LOCK_NAME or name.startswith(".") and (".tmp-" in name or name.startswith(".write-check-"))


def refuse_foreign(out: Path) -> None:
    """--overwrite empties a folder of an earlier run: refuse one that holds anything else (a
    mistyped --out such as the home folder must not be emptied)."""
    if not out.is_dir():
        return
    foreign = sorted(e.name for e in out.iterdir()
                     if e.name not in RUN_ENTRIES and not _leftover(e.name))
    if foreign:
        raise OutputError(f"--out {out} holds files that are not a simrun run (e.g. {foreign[0]!r}); "
                          "--overwrite replaces only run folders: choose a new folder")


def check_out(out: Path, overwrite: bool) -> None:
    """An explicit --out, checked before any work: writable, and holding no other run's files
    unless --overwrite (then the earlier run is replaced when the results are written, so a run
    that fails keeps it)."""
    if not overwrite:
        claim_folder(out)
        return
    refuse_foreign(out)
    check_writable(out)
    for name in RUN_ENTRIES:  # a link planted among the earlier run's entries is refused before the work
        inside(out, name)


def simulate(config: RunConfig, compare_truth: bool, *, progress: bool) -> tuple[RunOutput, RunOutput | None]:
    """The run and, with --compare-truth, the same workload (bound the same way) planned with the
    true run times. Sanity warnings go to stderr as soon as the input is read, before the long steps."""
    output = execute(config, progress=progress, warn=lambda m: click.echo(f"warning: {printable(m)}", err=True))
    truth = None
    if compare_truth:
        truth = execute(replace(config, predictor="truth", bind=config.bound, observe_after=None), progress=progress)
    return output, truth


def remove_others(out: Path, keep: set[str]) -> None:
    """Remove what an earlier run left in ``out`` beside the new run's ``keep`` entries (its
    truth/, timeline.json, plots/, temporary files)."""
    for entry in [e for e in out.iterdir() if e.name not in keep]:
        try:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        except OSError as exc:
            raise OutputError(f"cannot remove {entry}, left by the earlier run: {exc.strerror or exc}") from None


def write_results(out_dir: Path, output: RunOutput, truth: RunOutput | None, *, explicit: bool,
                  overwrite: bool) -> Path:
    """Write the run (and its truth run) into ``out_dir``, which then holds exactly these files.

    An explicit --out is checked again (another run may have written into it meanwhile). With
    --overwrite the earlier run's files are replaced and the rest of them removed only once the
    new ones are written, so a write that fails (full disk) keeps the earlier run whole."""
    if not explicit:  # the new default folder, ours alone
        return output.write(out_dir, truth=truth)
    if not overwrite:
        claim_folder(out_dir)
        return output.write(out_dir, truth=truth)
    refuse_foreign(out_dir)
    output.write(out_dir, truth=truth)
    remove_others(out_dir, set(output.files()) | {LOCK_NAME} | ({RunOutput.TRUTH} if truth is not None else set()))
    return out_dir


@click.group(cls=UserErrorGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"],
                                                           "max_content_width": 100})
@click.option("--policy", metavar="NAME[:k=v,...]", help=f"Scheduling policy. {policy_help()}.")
@click.option("--predictor", metavar="SPEC",
              help=f"Run-time predictor the policy plans with: {PREDICTOR_HELP}. The engine always "
                   "advances with true run times.")
@click.option("--trace", "trace", metavar="KIND:PATH",
              help=f"Replay a real trace. KIND: {kinds_help()}.")
@click.option("--workload", metavar="KIND:N",
              help=f"Synthetic workload fitted to the real traces: {' or '.join(f'{k}:N' for k in SYNTHETIC_KINDS)} "
                   f"[default when no --trace: {DEFAULT_WORKLOAD}].")
@click.option("--limit", type=int, metavar="N", help="Keep the first N jobs in submit order.")
@click.option("--cluster", default=DEFAULT_CLUSTER, show_default=True, metavar="PRESET[:SCALE]|FILE",
              help=f"Presets: {', '.join(PRESETS)} (PRESET:0.1 scales node counts); pai-spec:PATH or "
                   "philly-machines:PATH read the real inventories; or a YAML/JSON file with "
                   "nodes: [{gpu_type, num_gpus, count}], gpu_type any GPU of the catalogue "
                   "(--reference-gpu lists them).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the synthetic workload, deadlines and injected prediction error.")
@click.option("--deadline-fraction", type=click.FloatRange(0, 1), default=None,
              help="For traces without deadlines: share of jobs given deadline = submit + duration x U(1.2, 3.0) "
                   "[default: 0.2; 0 for traces that state their deadlines, such as gavel and csv, so that "
                   "none is made up unless asked for].")
@click.option("--reference-gpu", metavar="TYPE",
              help="GPU type on which traces without a GPU type were observed [default: the cluster's "
                   "most numerous type]. " + names_help() + ".")
@click.option("--load-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Arrival density: 2 halves every inter-arrival time, 0.5 doubles it.")
@click.option("--bind", is_flag=True,
              help="Bind jobs to held-out model configs even for truth/noisy (automatic for model-based "
                   "predictors), so the run is comparable with theirs.")
@click.option("--observe-after", type=click.IntRange(1), metavar="K",
              help="Online feedback: once a job has run K iterations on a GPU type, the policy's estimate "
                   "for it on that type becomes the measured truth (binds the workload).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="consolidate", show_default=True,
              help="Where a multi-GPU job's GPUs go: consolidate (fewest nodes, best fit), spread (as many "
                   "nodes as possible), tiresias (consolidate only models with a skewed gradient; others "
                   "first fit; needs a bound workload).")
@click.option("--communication/--no-communication", default=True, show_default=True,
              help="In a bound run, multi-GPU jobs take a data-parallel step at the GPUs they get: compute plus "
                   "the gradient all-reduces backward does not hide (spec-derived). --no-communication times "
                   "them as one GPU, as before.")
@click.option("--failures", default="none", show_default=True, metavar="SPEC",
              help=f"Attempts and nodes that fail: {FAILURES_HELP} (docs/simulation.md, Failures).")
@click.option("--checkpoint-every", metavar="SECONDS|optimal|none",
              help="With --failures: seconds of work between a job's checkpoints (each write costs what a restart "
                   "reads back) [default: optimal, Young/Daly's sqrt(2 x write cost x the job's MTBF)].")
@click.option("--compare-truth", is_flag=True,
              help="Also run the truth predictor on the same workload and print the ratios.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory for jobs.parquet, summary.json, manifest.json [default: a new "
                   "runs/<time>_<policy>_<predictor>]. It must be empty or new (checked before the run).")
@click.option("--overwrite", is_flag=True,
              help="Let --out hold an earlier run: it is replaced once this run's results are written "
                   "(kept if the run fails).")
@click.option("--quiet", is_flag=True,
              help="No progress bars; print only the output directory (warnings still go to stderr).")
@click.pass_context
def main(ctx: click.Context, policy, predictor, trace, workload, limit, cluster, seed, deadline_fraction,
         reference_gpu, load_scale, bind, observe_after, placement, communication, failures, checkpoint_every,
         compare_truth, out, overwrite, quiet) -> None:
    """Simulate a heterogeneous GPU cluster replaying a job trace under a scheduling policy.

    Policies plan with PREDICTED run times; jobs finish after their TRUE run times. With only
    --policy and --predictor it runs the embedded default: a synthetic PAI-like workload on a
    36-GPU T4/P100/V100 cluster.

    summary.json keys (seconds): jobs, rejected, jct_mean, jct_p50, jct_p95, jct_p99, queue_mean,
    queue_p50, queue_p95, makespan, tardiness_total, tardiness_mean (over all jobs), late_jobs,
    late_tardiness_mean, jobs_with_deadline, utilization, utilization_by_type, preemptions,
    preemptions_per_job_mean, preemptions_per_job_p95, restart_overhead_seconds, gpu_seconds_lost,
    policy_seconds, policy_calls, wall_seconds, events, events_per_second; with --failures also
    jobs_failed, jobs_cancelled, failed_attempts, attempts_mean, gpu_seconds_total,
    failed_gpu_seconds, goodput.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not policy or not predictor:
        raise click.UsageError("--policy and --predictor are required (see --help)")
    config = RunConfig(policy=policy, predictor=predictor, trace=trace, workload=workload, limit=limit,
                       cluster=cluster, seed=seed, deadline_fraction=deadline_fraction,
                       reference_gpu=reference_gpu, load_scale=load_scale, bind=bind, observe_after=observe_after,
                       placement=placement, communication=communication, failures=failures,
                       checkpoint_every=checkpoint_every)
    try:
        fresh = out is None or not out.exists()  # a folder this run creates is removed if it fails
        out_dir = out if out is not None else default_out_dir(policy, predictor)
        try:
            with locked_folder(out_dir):  # a second run into --out is refused at once
                if out is not None:
                    check_out(out, overwrite)
                if config.bound:  # an unusable table cache fails here, not after the workload set and binding
                    open_cache()
                output, truth = simulate(config, compare_truth, progress=not quiet)
                write_results(out_dir, output, truth, explicit=out is not None, overwrite=overwrite)
        except BaseException:
            if fresh:
                remove_if_empty(out_dir)
            raise
    except UserError as exc:  # every input error a user can fix (predictor.common.inputs.UserError)
        raise click.ClickException(str(exc)) from None
    if quiet:
        click.echo(printable(out_dir))
        return
    echo_run(output, truth, policy, predictor, out_dir)


def echo_run(output: RunOutput, truth: RunOutput | None, policy: str, predictor: str, out_dir: Path) -> None:
    """The run's header, summary and "results in" line. Every value from the user or a file
    (options, trace and cluster names, job ids, paths) is escaped (:func:`printable`): a job id
    holding a newline forged a "results in" line of its own."""
    m = output.manifest
    click.echo(f"policy {printable(policy)} | predictor {printable(predictor)} | trace "
               f"{printable(m['trace']['source'])} ({m['trace']['jobs']:,} jobs) | cluster "
               f"{printable(m['cluster']['name'])} ({m['cluster']['gpus']} GPUs)")
    click.echo(format_summary(output.summary))
    if output.summary["rejected"]:
        first = m["rejected_jobs"][0]
        click.echo(f"  rejected e.g. job {printable(first['job_id'])} (line {first['line']}): "
                   f"{printable(first['reason'])}")
    if truth is not None:
        click.echo(format_ratios(output.summary, truth.summary))
    click.echo(f"results in {printable(out_dir)}/")


def format_ratios(run: dict, truth: dict) -> str:
    """The run's headline metrics against the truth run's on the same workload."""
    def ratio(key: str) -> str:
        return f"{run[key] / truth[key]:.3f}x" if truth[key] > 0 else ("1.000x" if run[key] == 0 else "n/a (truth 0)")

    rows = [("JCT mean", "jct_mean", "s"), ("queueing delay mean", "queue_mean", "s"),
            ("tardiness total", "tardiness_total", "s"), ("late jobs", "late_jobs", "")]
    lines = ["against truth (same workload, planned with true run times):"]
    lines += [f"  {name:<20} {readable(run[key], 1):>14} vs {readable(truth[key], 1):>14} {unit:<1}  {ratio(key)}"
              for name, key, unit in rows]
    return "\n".join(lines)


# Subcommands (simulator.cli_sweep never imports this module, so no cycle).
from simulator.cli_sweep import plot_cmd, sweep_cmd, timeline_cmd  # noqa: E402

main.add_command(sweep_cmd)
main.add_command(plot_cmd)
main.add_command(timeline_cmd)
