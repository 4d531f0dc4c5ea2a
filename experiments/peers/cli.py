"""``python -m experiments.peers``: the peers' commands, each a thin door to its peer's module.

Gavel (:mod:`experiments.peers.gavel`): ``gavel`` (run Gavel's simulator on a trace and cluster),
``gavel-refs`` (re-measure the stored reference runs), ``table`` (ours beside them). Tiresias
(:mod:`experiments.peers.tiresias`): ``tiresias``, ``tiresias-refs``, ``tiresias-table``, the same
three. A command whose peer cannot be run here exits ``EXIT_UNAVAILABLE`` (75) with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from experiments.peers.common import DATA, EXIT_UNAVAILABLE, PeerUnavailable, write_json
from experiments.peers.gavel import (
    GAVEL_POLICY,
    OUR_GAVEL,
    REFERENCE_CASES,
    format_summary,
    gavel_reference,
    gavel_table,
    table_markdown,
)
from experiments.peers.tiresias import (
    OUR_TIRESIAS,
    TIRESIAS_CASES,
    TIRESIAS_DATA,
    TIRESIAS_DEMOTION_TIMERS,
    TIRESIAS_GPU_TYPE,
    TIRESIAS_SCHEDULE,
    TIRESIAS_SCHEME,
    format_tiresias_summary,
    tiresias_checkout,
    tiresias_inputs,
    tiresias_reference,
    tiresias_table,
    tiresias_table_markdown,
)


@click.group()
def main() -> None:
    """Peer simulators' own runs (issue 51)."""


def _common(func):
    func = click.option("--repo", default=None, help="Gavel clone or bare mirror (default $ETS_PEER_GAVEL_REPO, "
                        "else GitHub).")(func)
    func = click.option("--scratch", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Scratch dir for the checkout, venv and logs (default $ETS_PEER_SCRATCH).")(func)
    return func


@main.command()
@click.option("--trace", required=True, help="Gavel trace: a file, or a path inside Gavel's scheduler/.")
@click.option("--cluster", required=True, help="e.g. v100:4,p100:4,k80:4 (or Gavel's 4:4:4).")
@click.option("--policy", default=GAVEL_POLICY, show_default=True)
@click.option("--time-per-iteration", default=360, show_default=True, help="Round length, s.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Keep Gavel's log here.")
@click.option("--rounds/--no-rounds", default=True, show_default=True,
              help="Keep the per-round schedule in the JSON (--no-rounds: summary and per-job only).")
@_common
def gavel(trace, cluster, policy, time_per_iteration, seed, out, log, rounds, repo, scratch) -> None:
    """Run Gavel's simulator; print its numbers and write them as JSON."""
    try:
        result = gavel_reference(trace, cluster, repo=repo, scratch=scratch, policy=policy,
                                 time_per_iteration=time_per_iteration, seed=seed, log=log)
    except PeerUnavailable as err:
        click.echo(f"gavel: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    click.echo(format_summary(result))
    if out:
        write_json(result, out, rounds)
        click.echo(f"wrote {out}")


@main.command("gavel-refs")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=DATA / "gavel",
              show_default=True)
@_common
def gavel_refs(out_dir, repo, scratch) -> None:
    """Re-measure the Gavel reference runs kept under experiments/data/peers/gavel/."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, trace, cluster, rounds in REFERENCE_CASES:
        try:
            result = gavel_reference(trace, cluster, repo=repo, scratch=scratch)
        except PeerUnavailable as err:
            click.echo(f"gavel: unavailable: {err}", err=True)
            sys.exit(EXIT_UNAVAILABLE)
        write_json(result, out_dir / f"{name}.json", rounds)
        click.echo(format_summary(result))
        s = result["summary"]
        rows.append(f"| {name} | {cluster} | {s['jobs']} | {s['avg_jct_s']:.3f} | {s['makespan_s']:.3f} | "
                    f"{s['rounds']} | {s['preemptions']} | {s['wall_s']:.1f} |")
    click.echo("| trace | cluster | jobs | avg JCT (s) | makespan (s) | rounds | preemptions | wall (s) |")
    click.echo("|---|---|---|---|---|---|---|---|")
    click.echo("\n".join(rows))


@main.command("table")
@click.option("--policy", default=OUR_GAVEL, show_default=True, help="Our policy spec to put beside Gavel's.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write peers.md and peers.json here.")
def table(policy, out) -> None:
    """Our Gavel beside Gavel's own simulator on the stored reference cases (experiments/data/peers)."""
    try:
        rows = gavel_table(policy=policy)
    except PeerUnavailable as err:
        click.echo(f"peers: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    text = table_markdown(rows)
    click.echo(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "peers.md").write_text(text + "\n")
        (out / "peers.json").write_text(json.dumps(rows, indent=1) + "\n")


# -- Tiresias' commands --------------------------------------------------------------------------

def _tiresias_common(func):
    func = click.option("--repo", default=None, help="Tiresias clone or bare mirror (default "
                        "$ETS_PEER_TIRESIAS_REPO, else GitHub).")(func)
    func = click.option("--scratch", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Scratch dir for the checkout, Python 2.7 virtualenv and logs "
                        "(default $ETS_PEER_SCRATCH).")(func)
    func = click.option("--python27", default=None, help="A CPython 2.7 (default $ETS_PEER_PYTHON27, else one "
                        "found on PATH or in pyenv).")(func)
    return func


@main.command("tiresias")
@click.option("--trace", required=True, help="Tiresias trace: a file, or a path inside Tiresias' simulator/ "
              "(e.g. 60_job.csv).")
@click.option("--cluster", default="default", show_default=True,
              help="SWITCHES:NODES_PER_SWITCH:GPUS_PER_NODE (e.g. 1:2:8), nNgG, or default (run_sim.py's 1:32:8).")
@click.option("--schedule", default=TIRESIAS_SCHEDULE, show_default=True)
@click.option("--scheme", default=TIRESIAS_SCHEME, show_default=True,
              help="Placement scheme flag (dlas-gpu ignores it for placement: it counts GPUs).")
@click.option("--demotion-timer", type=click.Choice(TIRESIAS_DEMOTION_TIMERS), default="simulator",
              show_default=True, help="simulator: run_sim.py unmodified; paper: with paper_timer.patch.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep Tiresias' stdout here.")
@_tiresias_common
def tiresias(trace, cluster, schedule, scheme, demotion_timer, out, log, repo, scratch, python27) -> None:
    """Run Tiresias' simulator; print its numbers and write them as JSON."""
    try:
        result = tiresias_reference(trace, cluster, repo=repo, scratch=scratch, schedule=schedule, scheme=scheme,
                                    python27=python27, demotion_timer=demotion_timer, log=log)
    except PeerUnavailable as err:
        click.echo(f"tiresias: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    click.echo(format_tiresias_summary(result))
    if out:
        write_json(result, out)
        click.echo(f"wrote {out}")


@main.command("tiresias-refs")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=TIRESIAS_DATA, show_default=True)
@_tiresias_common
def tiresias_refs(out_dir, repo, scratch, python27) -> None:
    """Re-make inputs/ and re-measure the Tiresias reference runs kept under experiments/data/peers/tiresias/."""
    try:
        checkout = tiresias_checkout(repo, scratch)
    except PeerUnavailable as err:
        click.echo(f"tiresias: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    inputs = out_dir / "inputs"
    notes = tiresias_inputs(checkout, inputs)
    rows = []
    for (name, trace, cluster, made), timer in ((case, timer) for case in TIRESIAS_CASES
                                                for timer in TIRESIAS_DEMOTION_TIMERS):
        try:
            result = tiresias_reference(inputs / trace, cluster, repo=repo, scratch=scratch, python27=python27,
                                        demotion_timer=timer)
        except PeerUnavailable as err:
            click.echo(f"tiresias: unavailable: {err}", err=True)
            sys.exit(EXIT_UNAVAILABLE)
        result["trace"] |= {"source": f"inputs/{trace}", "input": f"inputs/{trace}", "made": made,
                            "derivation": notes[trace], "generic": f"inputs/{Path(trace).stem}.generic.csv",
                            "generic_gpu_type": TIRESIAS_GPU_TYPE}
        result["our_cluster"] = f"inputs/{name}.cluster.yaml"
        result["command"] = result["command"].replace(str((inputs / trace).resolve()),
                                                      f"experiments/data/peers/tiresias/inputs/{trace}")
        stored = f"{name}.json" if timer == "simulator" else f"{name}.{timer}_timer.json"
        write_json(result, out_dir / stored)
        click.echo(format_tiresias_summary(result))
        s, c = result["summary"], result["cluster"]
        by = " / ".join(f"{s['avg_jct_by_gpus_s'][g]:,.1f}" for g in s["avg_jct_by_gpus_s"])
        rows.append(f"| {stored} | {c['num_switch']}x{c['num_node_p_switch']}x{c['num_gpu_p_node']} ({c['gpus']}) | "
                    f"{s['jobs']} | {s['avg_jct_s']:,.3f} | {by} | {s['makespan_s']:,} | {s['preemptions']} | "
                    f"{s['demotions']} |")
    click.echo("| file | cluster (GPUs) | jobs | avg JCT (s) | by size 1/2/4/8 GPUs (s) | makespan (s) | "
               "preemptions | demotions |")
    click.echo("|---|---|---|---|---|---|---|---|")
    click.echo("\n".join(rows))


@main.command("tiresias-table")
@click.option("--policy", default=OUR_TIRESIAS, show_default=True, help="Our policy spec to put beside Tiresias'.")
@click.option("--timer", type=click.Choice(TIRESIAS_DEMOTION_TIMERS), default="simulator", show_default=True,
              help="Which stored Tiresias runs: simulator (unmodified) or paper (paper_timer.patch).")
def tiresias_table_command(policy, timer) -> None:
    """Our tiresias beside Tiresias' own simulator on the stored cases, per job-size class."""
    click.echo(tiresias_table_markdown(tiresias_table(policy=policy, timer=timer)))
