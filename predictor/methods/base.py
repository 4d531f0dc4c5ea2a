"""What every trained predictor shares, whatever its method: its fields, its checkpoint (written,
read and checked), the interval calibration stored with it, and the fit options of its config.

Why one base: a checkpoint is a file from a stranger (docs/security.md), so reading and checking
it lives once, here, and a method only says how it rebuilds itself from a checked body
(:meth:`TrainedPredictor.from_checkpoint`) and what it stores besides the common fields
(:meth:`TrainedPredictor.checkpoint_fields`) — as scikit-learn's estimators share ``BaseEstimator``.
The epoch loop every method trains with is :class:`predictor.methods.training.EarlyStopping`.

The fit options (:class:`FitConfig`) are a protocol, not a dataclass base: a base's fields would
come first in every config, a config is stored in field order, and so every shipped checkpoint
would change its bytes (and every sweep key that hashes them).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import pandas as pd

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.features import FeatureSpec

if TYPE_CHECKING:  # no torch at import: the simulator names this shape without loading it
    from torch import nn

    from predictor.intervals import IntervalCalibration

CHECKPOINT_FORMAT = 1  # the body's layout (fields per method); the file format is checkpoint_file's
MAX_MINUTES = 15.0  # every method's default training budget, wall clock


class FitConfig(Protocol):
    """The options every method's config has, with which :class:`EarlyStopping` trains it
    (the conformance test checks each registered config against :data:`FIT_FIELDS`)."""

    lr: float
    batch_size: int
    max_epochs: int
    patience: int
    max_minutes: float
    seed: int


FIT_FIELDS = ("lr", "batch_size", "max_epochs", "patience", "max_minutes", "seed")
P = TypeVar("P", bound="TrainedPredictor")


def write_checkpoint(path: str | Path, predictor, method: str, **extra) -> Path:
    """Save a trained predictor with the fields every method's checkpoint carries, plus ``extra``
    (what that method needs to rebuild itself: feature spec, scalers, ...); sealed with the
    SHA-256 of the whole body (weights and metadata), written atomically."""
    from predictor import __version__

    intervals = getattr(predictor, "intervals", None)
    return checkpoint_file.write(path, {
        "format": CHECKPOINT_FORMAT, "method": method, "version": __version__, "device": predictor.device,
        "config": asdict(predictor.config), "state_dict": predictor.model.state_dict(), "history": predictor.history,
        "split": predictor.split, "fingerprint": predictor.fingerprint,
        "intervals": intervals.to_dict() if intervals else None, **extra})


def stored_intervals(body: dict) -> IntervalCalibration | None:
    """The interval calibration of a checkpoint body; None for a checkpoint without one (written
    before intervals existed, or never calibrated)."""
    from predictor.intervals import IntervalCalibration

    data = body.get("intervals") if isinstance(body, dict) else None
    return IntervalCalibration.from_dict(data) if data else None


def read_checkpoint(path: str | Path, method: str) -> dict:
    """The body of a checkpoint written by ``method``; CheckpointError naming the path and the reason."""
    body = checkpoint_file.read(path)
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
        raise CheckpointError(f"{path}: weights do not match the stored feature spec / architecture "
                              f"({first})") from None


def checked_spec(body: dict, path: str | Path) -> FeatureSpec:
    """The feature spec a checkpoint's model was built on, refused when it no longer gives the
    feature count the weights expect (written by an incompatible version)."""
    spec = FeatureSpec.from_dict(body["spec"])
    if spec.dim != body.get("dim"):
        raise CheckpointError(f"{path}: feature spec gives {spec.dim} features but the model was built for "
                              f"{body.get('dim')}: the checkpoint was written by an incompatible version")
    return spec


def stored_fields(body: dict) -> dict[str, Any]:
    """The common fields of a checked body, as :class:`TrainedPredictor` takes them."""
    return {"device": body["device"], "fingerprint": body.get("fingerprint", ""), "history": body.get("history"),
            "split": body.get("split")}


class TrainedPredictor:
    """A trained model of any method: which method and target device, its config, weights,
    training history and split, the fingerprint of its training data and, once calibrated, its
    prediction intervals. A method subclasses it, sets :attr:`method` and implements
    :meth:`iteration_times` and :meth:`from_checkpoint` (and :meth:`checkpoint_fields` when it stores more)."""

    method: ClassVar[str]
    intervals: IntervalCalibration | None = None  # set by predictor.intervals once calibrated

    def __init__(self, config: Any, model: nn.Module, device: str, fingerprint: str = "",
                 history: list[dict] | None = None, split: dict | None = None) -> None:
        self.config, self.model, self.device = config, model, device
        self.fingerprint, self.history, self.split = fingerprint, history or [], split or {}

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        """One row per trace (config_id): predicted and, where the traces have them, true µs."""
        raise NotImplementedError

    def checkpoint_fields(self) -> dict[str, Any]:
        """What this method stores besides the common fields to rebuild itself (feature spec, scalers)."""
        return {}

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint (:func:`write_checkpoint`); returns its path."""
        return write_checkpoint(path, self, self.method, **self.checkpoint_fields())

    @classmethod
    def load(cls: type[P], path: str | Path) -> P:
        """A saved model of this method; CheckpointError (one line naming the path and what is
        wrong) for a foreign, corrupted, incomplete or incompatible file."""
        body = read_checkpoint(path, cls.method)
        try:
            predictor = cls.from_checkpoint(body, path)
        except (KeyError, TypeError) as exc:
            raise CheckpointError(f"{path}: incomplete {cls.method} checkpoint ({type(exc).__name__}: {exc})") from None
        predictor.intervals = stored_intervals(body)
        return predictor

    @classmethod
    def from_checkpoint(cls: type[P], body: dict, path: str | Path) -> P:
        """Rebuild from a checked body (:func:`read_checkpoint`; weights via :func:`load_weights`)."""
        raise NotImplementedError
