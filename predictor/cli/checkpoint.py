"""``ets checkpoint info | convert``: look inside a checkpoint without trusting it, and bring a
checkpoint of the old pickled format into the current one.

Why a command: a pickled checkpoint can run code when loaded, so the tools refuse it; a user who
trusts a file's source converts it once, explicitly, and every later load is data-only.
"""

from __future__ import annotations

from pathlib import Path

import click

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.common.inputs import printable


@click.group("checkpoint")
def checkpoint() -> None:
    """Inspect checkpoints; convert old pickled ones."""


@checkpoint.command("info")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info_cmd(path: Path, as_json: bool) -> None:
    """What a checkpoint holds: method, device, version, split, intervals, weights (read as data;
    its SHA-256 is checked first, then every field, as loading it would)."""
    from predictor.cli.model import json_text
    from predictor.methods import from_body

    try:
        body = checkpoint_file.read(path)
        from_body(body, path)  # refused here as every command would refuse it
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    summary = describe(body, path)
    if as_json:
        click.echo(json_text(summary, indent=1))
        return
    click.echo(printable(  # the device, version and family names are the file's: never sent raw to a terminal
        f"{path}: {summary['method']} checkpoint for {summary['device']} (tool version {summary['version']}), "
        f"{summary['tensors']} tensors, {summary['parameters']:,} parameters, {summary['epochs']} epochs; "
        f"held-out families: {', '.join(summary['test_units']) or '-'}; "
        f"intervals: {'calibrated' if summary['intervals'] else 'none'}; sha256 {summary['sha256'][:16]}…"))


def describe(body: dict, path: Path) -> dict:
    """What ``info`` prints of a checkpoint ``read`` has verified (so its first line holds the
    SHA-256 of its content)."""
    import torch

    weights = [v for v in (body.get("state_dict") or {}).values() if isinstance(v, torch.Tensor)]
    with path.open("rb") as handle:
        sha256 = handle.read(checkpoint_file.HEADER_BYTES)[len(checkpoint_file.MAGIC):-1].decode("ascii")
    return {"checkpoint": str(path), "method": body.get("method"), "device": body.get("device"),
            "version": body.get("version"), "format": body.get("format"),
            "tensors": len(weights), "parameters": int(sum(w.numel() for w in weights)),
            "epochs": len(body.get("history") or []),
            "test_units": list((body.get("split") or {}).get("test_units") or []),
            "intervals": bool(body.get("intervals")), "sha256": sha256}


@checkpoint.command("convert")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--trust", is_flag=True,
              help="Required: you trust the file's source. (It is still read with torch's weights-only "
                   "unpickler, which refuses anything but data.)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the converted checkpoint here [default: in place, the original kept as PATH.pickled].")
@click.option("--overwrite", is_flag=True, help="Let --out (or PATH.pickled) replace an existing file.")
def convert_cmd(path: Path, trust: bool, out: Path | None, overwrite: bool) -> None:
    """Convert a checkpoint of the old pickled format (before 2026-12) into the current one: JSON
    metadata and safetensors weights, sealed by a SHA-256. The converted file is read back and
    checked to hold exactly the same weights and metadata."""
    from predictor.common.outputs import OutputError, claim_file

    if not trust:
        raise click.UsageError("a pickled checkpoint is converted only with --trust (you trust its source)")
    try:
        body = checkpoint_file.convert_legacy(path)
        data = checkpoint_file.encode(body)
        if not same(checkpoint_file.decode(data, path), body):
            raise CheckpointError(f"{path}: the converted checkpoint does not read back identically; not written")
        if out is None:
            backup = path.with_name(path.name + ".pickled")
            claim_file(backup, overwrite, option="the original's copy")
            with_backup(path, backup, data)
            target = path
        else:
            claim_file(out, overwrite, is_ours=checkpoint_file.looks_like_checkpoint)
            checkpoint_file.write_bytes(out, data)
            target = out
    except (CheckpointError, OutputError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"converted {path} -> {target}" + (f" (original kept as {backup})" if out is None else ""))


def with_backup(path: Path, backup: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``, the original renamed to ``backup`` first."""
    import os

    from predictor.common.outputs import OutputError

    try:
        os.replace(path, backup)
    except OSError as exc:
        raise OutputError(f"cannot keep {path} as {backup}: {exc.strerror or exc}") from None
    try:
        checkpoint_file.write_bytes(path, data)
    except OutputError:
        os.replace(backup, path)  # put the original back
        raise


def same(a, b) -> bool:
    """Equal bodies: tensors bit for bit (dtype, shape, values), NaN equal to NaN."""
    import math

    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b
