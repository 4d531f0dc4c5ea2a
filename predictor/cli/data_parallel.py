"""The data-parallel step as the command lines print it: `ets devices time --gpus N` (compute
emulated) and `ets predict --gpus N` (compute predicted by a checkpoint) show the same fields.

Why a module of its own: two commands print one result; one place keeps their text and JSON
keys equal (:func:`predictor.emulator.devices.data_parallel.data_parallel_step` computes it).
"""

from __future__ import annotations

import click

# The keys of data_parallel_step's result that --json carries as they are (besides compute_ms,
# which is the caller's single-GPU number as it printed it, and communication_label).
STEP_KEYS = ("total_ms", "allreduce_ms", "communication_ms", "gpus", "per_node", "nodes", "scaling_efficiency",
             "link", "buckets")


def data_parallel_fields(step: dict, compute_ms: float) -> dict:
    """The JSON fields of a data-parallel ``step``: ``total_ms`` the N-GPU step, ``compute_ms``
    the single-GPU one as the command printed it (equal to the step's up to rounding), and
    ``communication_label`` (what the communication is: spec-derived); the compute keeps the
    label its command gave it."""
    return {key: step[key] for key in STEP_KEYS} | {"compute_ms": compute_ms, "communication_label": step["label"]}


def print_data_parallel(r: dict, compute: str = "the step above") -> None:
    """The data-parallel block below a single-GPU result; ``compute``: what the compute is."""
    click.echo(f"  on {r['gpus']} GPUs ({r['nodes']} node(s) × {r['per_node']} GPU(s), data-parallel; "
               f"communication {r['communication_label']}, bottleneck {r['link']})")
    click.echo(f"    compute               {r['compute_ms']:>10.3f} ms   ({compute}, per GPU)")
    click.echo(f"    all-reduce            {r['allreduce_ms']:>10.3f} ms   ({r['buckets']} bucket(s))")
    click.echo(f"    exposed communication {r['communication_ms']:>10.3f} ms")
    click.echo(f"    total                 {r['total_ms']:>10.3f} ms   scaling efficiency "
               f"{r['scaling_efficiency']:.3f}")
