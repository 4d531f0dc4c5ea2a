"""The pretrained ETS checkpoints shipped in the package, one per GPU type of the default cluster.

Why: `simrun --predictor ets` must work right after install. The checkpoints are produced by
`python -m experiments.pretrain` (emulated traces, family-disjoint split) and live in
``predictor/checkpoints/ets-<GPU>.pt``.
"""

from __future__ import annotations

from pathlib import Path

from predictor.devices.specs import device_key

CHECKPOINT_DIR = Path(__file__).with_name("checkpoints")


def checkpoint_path(gpu: str, directory: str | Path = CHECKPOINT_DIR) -> Path:
    return Path(directory) / f"ets-{device_key(gpu)}.pt"


def available(directory: str | Path = CHECKPOINT_DIR) -> list[str]:
    """GPU types with a pretrained checkpoint."""
    return sorted(p.stem.removeprefix("ets-") for p in Path(directory).glob("ets-*.pt"))


def pretrained(gpu: str, directory: str | Path = CHECKPOINT_DIR):
    """The shipped ETS model for ``gpu`` (a CheckpointError names the GPUs that have one)."""
    from predictor.ets import CheckpointError, load

    path = checkpoint_path(gpu, directory)
    if not path.exists():
        have = ", ".join(available(directory)) or "none"
        raise CheckpointError(f"no pretrained ETS checkpoint for {gpu!r} in {directory} (have: {have}); "
                              "train one with `python -m experiments.pretrain --devices ...`")
    return load(path)
