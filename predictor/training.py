"""What every predictor's training and checkpoints share: device selection, early stopping on the
validation iteration MRE with a convergence history, and checked checkpoint reading.

Why one module: ETS and the three baselines are compared on wall time to their best validation
MRE (the paper's convergence figure), so they must stop by the same rule and record the same
history; and a bad checkpoint must be refused with the same messages whichever method wrote it.
"""

from __future__ import annotations

import hashlib
import io
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

if TYPE_CHECKING:
    from predictor.intervals import IntervalCalibration

CHECKPOINT_FORMAT = 1
ENVELOPE = "ets-checkpoint/sha256"  # the outer dict: the body's torch.save bytes and their SHA-256


class CheckpointError(ValueError):
    """A checkpoint that cannot be used with this code or this data; the message says why."""


def write_checkpoint(path: str | Path, predictor, method: str, **extra) -> Path:
    """Save a trained predictor with the fields every method's checkpoint carries, plus ``extra``
    (what that method needs to rebuild itself: feature spec, scalers, ...); sealed with the
    SHA-256 of the whole body (weights and metadata), written atomically."""
    from predictor import __version__

    return write_body(path, {"format": CHECKPOINT_FORMAT, "method": method, "version": __version__,
                             "device": predictor.device, "config": asdict(predictor.config),
                             "state_dict": predictor.model.state_dict(), "history": predictor.history,
                             "split": predictor.split, "fingerprint": predictor.fingerprint,
                             "intervals": intervals.to_dict() if (intervals := getattr(predictor, "intervals", None))
                             else None, **extra})


def with_intervals(body: dict, predictor):
    """``predictor`` (just loaded from ``body``) with its stored interval calibration, or None."""
    predictor.intervals = stored_intervals(body)
    return predictor


def stored_intervals(body: dict) -> "IntervalCalibration | None":
    """The interval calibration of a checkpoint body; None for a checkpoint without one (written
    before intervals existed, or never calibrated)."""
    from predictor.intervals import IntervalCalibration

    data = body.get("intervals") if isinstance(body, dict) else None
    return IntervalCalibration.from_dict(data) if data else None


def write_body(path: str | Path, body: dict) -> Path:
    """``body`` as a checkpoint file: ``torch.save`` of {envelope, sha256, payload}, payload being
    the ``torch.save`` bytes of ``body`` (a uint8 tensor). Why bytes in an envelope: the hash must
    cover exactly what is unpickled, and the file stays one ``torch.load``-able archive."""
    from predictor.outputs import atomic_file

    buffer = io.BytesIO()
    torch.save(body, buffer)
    payload = buffer.getvalue()
    envelope = {"envelope": ENVELOPE, "sha256": hashlib.sha256(payload).hexdigest(),
                # as a byte tensor: stored raw (pickled bytes would be latin-1 text, 1.5 times the size)
                "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}
    archive = io.BytesIO()  # in memory, so the archive's folder is "archive", not the temporary name
    torch.save(envelope, archive)
    with atomic_file(path) as tmp:
        tmp.write_bytes(archive.getvalue())
    return Path(path)


def load_body(path: str | Path):
    """The unpickled, verified content of a checkpoint file; CheckpointError for a missing,
    unreadable or corrupted one. Files from before the hash (no envelope) are accepted; their
    zip archive's CRC-32s still catch flipped bytes."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint")
    _check_archive(path)
    outer = _unpickle(path, path)
    if not (isinstance(outer, dict) and outer.get("envelope") == ENVELOPE):
        return outer  # a checkpoint written before the hash
    stored, tensor = outer.get("sha256"), outer.get("payload")
    payload = tensor.numpy().tobytes() if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8 else None
    actual = hashlib.sha256(payload).hexdigest() if payload is not None else None
    if actual is None or actual != stored:
        raise CheckpointError(f"{path}: corrupted checkpoint: its content does not match the SHA-256 stored in it "
                              f"({str(stored)[:12]}…); restore the file (git checkout / a copy) or train it again")
    return _unpickle(io.BytesIO(payload), path)


def _check_archive(path: Path) -> None:
    """CheckpointError when a zip-format checkpoint fails its CRC-32 check (flipped bytes): torch
    reads a damaged archive without complaint and predicts slightly different numbers."""
    if not zipfile.is_zipfile(path):
        return  # not an archive (an old torch format, or junk that torch.load will refuse)
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{path}: corrupted checkpoint ({type(exc).__name__}: {exc}); "
                              "restore the file or train it again") from None
    if bad is not None:
        raise CheckpointError(f"{path}: corrupted checkpoint (entry {bad} fails its CRC check); "
                              "restore the file (git checkout / a copy) or train it again")


def _unpickle(source, path: Path):
    try:
        return torch.load(source, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated or foreign file: say so instead of a pickle traceback
        first = (str(exc).splitlines() or [""])[0]
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {first})") from None


def read_checkpoint(path: str | Path, method: str) -> dict:
    """The body of a checkpoint written by ``method``; CheckpointError naming the path and the reason."""
    body = load_body(path)
    if not isinstance(body, dict) or body.get("format") != CHECKPOINT_FORMAT:
        found = body.get("format") if isinstance(body, dict) else type(body).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, this version reads {CHECKPOINT_FORMAT}")
    if body.get("method") != method:
        raise CheckpointError(f"{path}: a {body.get('method')!r} checkpoint, not a {method!r} one")
    return body


def load_weights(path: str | Path, model: nn.Module, state_dict: dict) -> None:
    try:
        model.load_state_dict(state_dict)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path}: weights do not match the stored feature spec / architecture ({first})") from None


def device_rows(train_traces: pd.DataFrame, val_traces: pd.DataFrame,
                device: str | None) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The device to model and both splits' rows of it; ValueError for empty or ambiguous input."""
    if train_traces.empty or val_traces.empty:
        raise ValueError("training and validation splits must both hold traces")
    devices = sorted(set(train_traces["device"]) | set(val_traces["device"]))
    if device is None:
        if len(devices) != 1:
            raise ValueError(f"traces of several devices ({', '.join(devices)}): train one model per device")
        device = devices[0]
    train_rows, val_rows = (t[t["device"] == device] for t in (train_traces, val_traces))
    for name, rows in (("training", train_rows), ("validation", val_rows)):
        if rows.empty:
            raise ValueError(f"the {name} split holds no traces of device {device!r}; present: {', '.join(devices)}")
    return device, train_rows, val_rows


class EarlyStopping:
    """Epoch bookkeeping: history (wall time, loss, validation MRE), the best weights, the
    learning-rate schedule (halve after 2 epochs without improvement, down to 1/16 of the initial
    rate: a noisy validation MRE must not freeze training), patience and time budget.

        stop = EarlyStopping(model, history, config, "train ets", optimizer=opt)
        for epoch in stop.epochs():
            ...
            if stop.end_epoch(losses, val_mre):
                break
        stop.restore()
    """

    def __init__(self, model: nn.Module, history: list[dict], config, desc: str, *,
                 optimizer: torch.optim.Optimizer | None = None, progress: bool = True,
                 log: Callable[[dict], None] | None = None) -> None:
        from tqdm import tqdm

        self.model, self.history, self.log = model, history, log
        self.patience, self.max_seconds, self.max_epochs = config.patience, config.max_minutes * 60, config.max_epochs
        self.schedule = (torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2,
                                                                     min_lr=optimizer.defaults["lr"] / 16)
                         if optimizer is not None else None)
        self.best, self.best_state, self.stale = np.inf, None, 0
        self.bar = tqdm(total=self.max_epochs, desc=desc, unit="epoch", disable=not progress)
        self.started = time.perf_counter()

    def epochs(self) -> range:
        return range(self.max_epochs)

    def end_epoch(self, losses: list[float], val_mre: float) -> bool:
        """Record the epoch; True when training should stop."""
        lr = self.schedule.get_last_lr()[0] if self.schedule is not None else None  # this epoch's rate
        if self.schedule is not None:
            self.schedule.step(val_mre)
        elapsed = time.perf_counter() - self.started
        loss = float(np.mean(losses)) if losses else float("nan")
        self.history.append({"epoch": len(self.history) + 1, "wall_s": round(elapsed, 2),
                             "train_loss": round(loss, 5), "val_mre": round(val_mre, 5), "lr": lr})
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}", val_mre=f"{val_mre:.3%}")
        if self.log is not None:
            self.log(self.history[-1])
        if val_mre < self.best - 1e-5:
            self.best, self.stale = val_mre, 0
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        else:
            self.stale += 1
        return self.stale >= self.patience or elapsed > self.max_seconds

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.started > self.max_seconds

    def restore(self, keep: str = "best") -> None:
        """Load the best epoch's weights (``keep="last"``: leave the last epoch's; a fixed epoch
        count has no held-out traces to pick the best by). ValueError when no epoch had a finite
        validation MRE."""
        self.bar.close()
        if keep == "last" and self.history and np.isfinite(self.history[-1]["val_mre"]):
            return
        if self.best_state is None:
            last = self.history[-1]["val_mre"] if self.history else "no epoch"
            raise ValueError(f"validation MRE was never finite ({last}): check the validation traces' iteration times")
        self.model.load_state_dict(self.best_state)
