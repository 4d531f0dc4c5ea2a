"""``simrun sweep``, ``simrun plot``, ``simrun timeline``: thin click layers over
the sweep (the :mod:`simulator.sweep` package), :mod:`simulator.plots` and
:mod:`simulator.timeline`.

Why separate from :mod:`simulator.cli`: the single-run command stays small, and the heavy imports
(matplotlib, ray) happen only when these subcommands run. This module must not import
:mod:`simulator.cli` (which registers these commands at its end).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

from simulator.run import DEFAULT_CLUSTER, DEFAULT_WORKLOAD


@click.command("sweep", context_settings={"max_content_width": 100})
@click.option("--policies", multiple=True, required=True, metavar="SPEC,...",
              help="Policies (comma list; NAME:k=v,k2=v2 options stay together; repeatable).")
@click.option("--predictors", multiple=True, metavar="SPEC,...",
              help="Predictor specs, e.g. truth,ets (comma list; repeatable).")
@click.option("--errors", metavar="X,...",
              help="Injected-error levels: adds predictor noisy:X for each X (0 allowed).")
@click.option("--workloads", multiple=True, metavar="KIND:N,...",
              help=f"Synthetic workloads, e.g. pai-like:300,philly-like:300 [default with no --traces: "
                   f"{DEFAULT_WORKLOAD}].")
@click.option("--traces", multiple=True, metavar="KIND:PATH,...", help="Real traces (paths made absolute).")
@click.option("--seeds", default="1", show_default=True, metavar="N|S,...",
              help="A single integer N = the N seeds 0..N-1; a comma list = those seeds (e.g. 0,1 or 7,).")
@click.option("--load-scales", default="1", show_default=True, metavar="X,...",
              help="Arrival-rate factors (>1 compresses inter-arrival times).")
@click.option("--cluster", default=DEFAULT_CLUSTER, show_default=True, metavar="PRESET[:SCALE]|FILE")
@click.option("--limit", type=int, metavar="N", help="Keep the first N jobs of each workload/trace.")
@click.option("--deadline-fraction", type=click.FloatRange(0, 1), default=0.2, show_default=True)
@click.option("--reference-gpu", metavar="TYPE")
@click.option("--observe-after", type=click.IntRange(1), metavar="K",
              help="Online feedback after K iterations on a GPU type (see simrun --help).")
@click.option("--placements", default="consolidate", show_default=True, metavar="RULE,...",
              help="Placement rules of multi-GPU jobs (consolidate, spread, tiresias; see simrun --help).")
@click.option("--no-communication", "blind", is_flag=True,
              help="Time multi-GPU jobs as one GPU wherever their GPUs are (see simrun --help).")
@click.option("--failures", multiple=True, metavar="SPEC,...",
              help="Failure models (comma list, as simrun's --failures; repeatable) [default: none].")
@click.option("--checkpoint-every", "checkpoints", metavar="X,...",
              help="With failures: checkpoint intervals (seconds, optimal, none; comma list) [default: optimal].")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Sweep directory; rerunning with the same one skips finished points and retries failed ones.")
@click.option("--workers", type=click.IntRange(1), metavar="N",
              help="Local worker processes [default: min(2, CPUs)], at most one per CPU core this process may "
                   "use (a larger N is capped there, with a warning); 1 runs the points in this process.")
@click.option("--ray", "ray_address", metavar="auto|ADDRESS|local",
              help="Run one Ray task per point: ray.init(address=...) ('local' starts a local Ray).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def sweep_cmd(policies, predictors, errors, workloads, traces, seeds, load_scales, cluster, limit,
              deadline_fraction, reference_gpu, observe_after, placements, blind, failures, checkpoints, out, workers,
              ray_address, quiet) -> None:
    """Run a grid of simulations: policies x predictors (+ noisy:X) x workloads/traces x seeds x loads
    x placement rules x failure models x checkpoint intervals.

    Each point is cached as OUT/points/<key>.parquet (config, summary metrics, status) and
    OUT/runs/<key>/ (jobs.parquet, summary.json, manifest.json) as soon as it finishes (a rerun skips
    finished points, and redoes, with a warning, one whose point file does not match its run folder); a failing
    point, or one whose files cannot be written (e.g. a full disk), is recorded (status error,
    OUT/runs/<key>/error.txt) and the others go on; an OUT that cannot be written at all stops the
    sweep with one line (checked before the first point). At the end
    OUT/results.parquet holds all points and a table compares each predictor with truth. With a
    model-based predictor (ets, habitat, dnnperf, opbased) every point binds its jobs to model
    configs, so truth and the predictors see the same jobs.
    Exit status 1 when a point of this grid failed.
    """
    from predictor.common.inputs import SpecError
    from predictor.common.outputs import OutputError, locked_folder
    from simulator.sweep.driver import run_sweep
    from simulator.sweep.grid import plan
    from simulator.sweep.points import config_key
    from simulator.sweep.tables import format_table, summary_table

    try:
        configs = plan(policies, predictors, errors=errors or (), workloads=workloads, traces=traces,
                       seeds=seeds, load_scales=load_scales, cluster=cluster, limit=limit,
                       deadline_fraction=deadline_fraction, reference_gpu=reference_gpu, observe_after=observe_after,
                       placements=placements, communication=not blind, failures=failures or ("none",),
                       checkpoints=checkpoints or ())
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    if ray_address:
        check_ray_address(ray_address)
    try:
        with locked_folder(out):  # a second sweep into OUT is refused at once, not run twice
            table = run_sweep(configs, out, workers=workers, ray_address=ray_address,
                              progress=not quiet, log=lambda m: click.echo(m, err=True))
    except ConnectionError as exc:
        raise click.ClickException(f"--ray {ray_address}: {exc}") from None
    except OutputError as exc:  # OUT unusable or in use (checked before any point runs), or broken mid-sweep
        raise click.ClickException(str(exc)) from None
    current = table[table["key"].isin({config_key(c) for c in configs})]
    click.echo(format_table(summary_table(current)))
    failed = current[current["status"] != "ok"]
    if len(failed):
        click.echo(f"{len(failed)} point(s) failed, e.g. {failed['policy'].iloc[0]} | "
                   f"{failed['predictor'].iloc[0]}: {failed['error'].iloc[0]}  "
                   f"(details in {out / 'runs' / failed['key'].iloc[0] / 'error.txt'}; rerun to retry)")
    click.echo(f"results in {out / 'results.parquet'} ({len(table)} points in {out})")
    if len(failed):
        click.get_current_context().exit(1)


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a --ray value that Ray cannot use before any work: ray missing, a malformed address
    (Ray raises a bare ValueError) or a HOST:PORT nobody answers on (Ray would retry for minutes)."""
    import re
    import socket

    if importlib.util.find_spec("ray") is None:
        raise click.ClickException("--ray needs the ray package: pip install 'ets-sim[distributed]'")
    if address in ("auto", "local"):
        return
    match = re.fullmatch(r"(?:ray://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})", address)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise click.BadParameter(f"{address!r}: expected auto, local, HOST:PORT or ray://HOST:PORT", param_hint="--ray")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise click.ClickException(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); "
                                   "start one (`ray start --head`) or use --ray local") from None


@click.command("plot", context_settings={"max_content_width": 100})
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory [default: PATH/plots].")
@click.option("--overwrite", is_flag=True, help="Let the output directory hold earlier figures (replaced).")
def plot_cmd(path, out, overwrite) -> None:
    """Figures (PNG + PDF) of a sweep directory, or JCT CDF + utilisation of a single run directory.

    Sweep: mean JCT and total tardiness / truth per predictor and policy (bars: the pooled ratio
    the sweep table prints; dots: each seed); mean JCT / truth against the MRE of noisy:X points
    (pooled, with each seed); JCT CDFs and utilisation over time of every run (a panel per policy,
    workload and load; a line per predictor and seed).
    """
    from predictor.common.inputs import InputError
    from predictor.common.outputs import OutputError, inside
    from simulator.plots import plot

    try:  # PATH/plots is ours to create: a link planted there is refused; an --out given is taken as is
        check_figures_folder(out or inside(path, "plots"), overwrite)
        files = plot(path, out, log=lambda m: click.echo(m, err=True))
    except (InputError, OutputError) as exc:
        raise click.ClickException(str(exc)) from None
    for f in files:
        click.echo(f)


FIGURE_SUFFIXES = (".png", ".pdf")


def check_figures_folder(folder: Path, overwrite: bool) -> None:
    """Earlier figures are replaced only with --overwrite, and a folder holding anything but
    figures never (a mistyped --out must not lose files)."""
    from predictor.common.outputs import OutputError

    if folder.exists() and not folder.is_dir():
        raise OutputError(f"--out {folder} is a file, not a folder")
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    foreign = [e.name for e in entries if (e.suffix not in FIGURE_SUFFIXES or not e.is_file())
               and not (e.name.startswith(".") and ".tmp-" in e.name)]  # an interrupted write's leftover
    if foreign:
        raise OutputError(f"--out {folder} holds files that are not figures (e.g. {foreign[0]!r}); "
                          "choose another folder")
    if entries and not overwrite:
        raise OutputError(f"--out {folder} already holds figures (e.g. {entries[0].name}); pass --overwrite to "
                          "replace them, or choose another folder")


@click.command("timeline", context_settings={"max_content_width": 100})
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Output JSON [default: RUN_DIR/timeline.json].")
@click.option("--overwrite", is_flag=True, help="Let the output file replace an existing one.")
def timeline_cmd(run_dir, out, overwrite) -> None:
    """The schedule of one run as Chrome-trace JSON (open in ui.perfetto.dev or chrome://tracing).

    One track per GPU (grouped by node), one slice per job per GPU, and a waiting-jobs counter.
    """
    from predictor.common.inputs import InputError
    from predictor.common.outputs import OutputError
    from simulator.timeline import write_timeline

    try:
        path = write_timeline(run_dir, out, overwrite, warn=lambda m: click.echo(f"warning: {m}", err=True))
    except (InputError, OutputError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(path)


__all__ = ["sweep_cmd", "plot_cmd", "timeline_cmd"]
