"""The pretrained checkpoints shipped in the package, one per method and GPU type of the default
cluster.

Why: `simrun --predictor ets|habitat|dnnperf` must work right after install. The checkpoints
are produced by `python -m experiments.pretrain` (emulated traces, family-disjoint split) and
live in ``predictor/checkpoints/<method>-<GPU>.pt``. ``ets-T4-real.pt`` is ETS fine-tuned on the
real T4 traces (``python -m experiments.transfer``), for ``ets predict --ckpt``.
"""

from __future__ import annotations

from pathlib import Path

from predictor.checkpoint_file import CheckpointError
from predictor.emulator.devices.specs import device_key
from predictor.intervals import IntervalCalibration
from predictor.methods.base import TrainedPredictor

CHECKPOINT_DIR = Path(__file__).with_name("checkpoints")


def checkpoint_path(gpu: str, directory: str | Path = CHECKPOINT_DIR, method: str = "ets") -> Path:
    return Path(directory) / f"{method}-{device_key(gpu)}.pt"


def available(directory: str | Path = CHECKPOINT_DIR, method: str = "ets") -> list[str]:
    """GPU types with a pretrained checkpoint of ``method`` (emulated-trained; other files, such as
    ``ets-T4-real.pt``, are not a GPU type's default)."""
    from predictor.emulator.devices.specs import spec_sheets

    names = (p.stem.removeprefix(f"{method}-") for p in Path(directory).glob(f"{method}-*.pt"))
    return sorted(n for n in names if n in spec_sheets())


def pretrained_path(gpu: str, directory: str | Path = CHECKPOINT_DIR, method: str = "ets") -> Path:
    """The file of the shipped ``method`` model for ``gpu`` (a CheckpointError names the GPUs that have one)."""
    path = checkpoint_path(gpu, directory, method)
    if not path.exists():
        have = ", ".join(available(directory, method)) or "none"
        raise CheckpointError(f"no pretrained {method} checkpoint for {gpu!r} in {directory} (have: {have}); "
                              "train one with `python -m experiments.pretrain --devices ...`")
    return path


def pretrained(gpu: str, directory: str | Path = CHECKPOINT_DIR, method: str = "ets") -> TrainedPredictor:
    """The shipped ``method`` model for ``gpu`` (a CheckpointError names the GPUs that have one)."""
    from predictor.methods import load

    return load(pretrained_path(gpu, directory, method))


class Pretrained:
    """The shipped ``method`` checkpoints of some GPU types, each file read once: its bytes are
    what a table's cache key hashes, what its model is built from and what its intervals come
    from, so no second read can see another file (or spend the time). CheckpointError naming the
    GPUs that have one when a type has none."""

    def __init__(self, method: str, gpus: list[str], directory: str | Path = CHECKPOINT_DIR) -> None:
        from predictor.common.inputs import read_bytes

        self.method, self.directory = method, Path(directory)
        self.paths = {gpu: pretrained_path(gpu, self.directory, method) for gpu in gpus}
        self.data = {gpu: read_bytes(path, "checkpoint file") for gpu, path in self.paths.items()}

    def body(self, gpu: str) -> dict:
        """The checked body of ``gpu``'s checkpoint (its SHA-256 verified), from the bytes read."""
        from predictor.checkpoint_file import decode

        return decode(self.data[gpu], self.paths[gpu])

    def model(self, gpu: str) -> TrainedPredictor:
        from predictor.methods import from_body

        return from_body(self.body(gpu), self.paths[gpu])

    def intervals(self, gpu: str) -> IntervalCalibration | None:
        from predictor.methods.base import stored_intervals

        return stored_intervals(self.body(gpu), self.paths[gpu])
