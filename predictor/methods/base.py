"""What every trained predictor shares, whatever its method: its fields, its checkpoint (written,
read and checked), the interval calibration stored with it, the fit options of its config, and
the per-trace sums of op predictions every :meth:`TrainedPredictor.iteration_times` returns.

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

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np
import pandas as pd

from predictor import checkpoint_file
from predictor.checkpoint_file import CheckpointError
from predictor.common.inputs import Checker, short
from predictor.features import FeatureSpec
from predictor.methods import checks
from predictor.methods.checks import check_tensors, check_weights, cut, planned_shapes

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


def field_checker(path: str | Path, prefix: str = "") -> Checker:
    """Checks of a checkpoint's fields whose errors read ``"FILE: field 'prefix.name': ..."``."""
    def name(field: str) -> str:
        full = f"{prefix}.{field}" if prefix and field else prefix or field
        return f"{path}: field {short(full, 80)}" if full else str(path)

    return Checker(name, CheckpointError)


def stored_intervals(body: dict, path: str | Path = "checkpoint") -> IntervalCalibration | None:
    """The interval calibration of a checkpoint body; None for a checkpoint without one (written
    before intervals existed, or never calibrated). Every value checked (finite, ascending
    log-ratios, family indices in range): CheckpointError naming the field otherwise."""
    from predictor.intervals import IntervalCalibration

    data = body.get("intervals") if isinstance(body, dict) else None
    if data is None or data == {}:
        return None
    return IntervalCalibration.from_dict(data, field_checker(path, "intervals"))


def read_checkpoint(path: str | Path, method: str) -> dict:
    """The body of a checkpoint written by ``method``; CheckpointError naming the path and the reason."""
    return checked_body(checkpoint_file.read(path), path, method)


def checked_body(body: Any, path: str | Path, method: str) -> dict:
    """``body`` when it is a checkpoint body of this format written by ``method``."""
    found = body.get("format") if isinstance(body, dict) else type(body).__name__
    if type(found) is not int or found != CHECKPOINT_FORMAT:  # not True, not 1.0
        raise CheckpointError(f"{path}: checkpoint format {short(found)}, this version reads {CHECKPOINT_FORMAT}")
    if body.get("method") != method:
        raise CheckpointError(f"{path}: a {short(body.get('method'))} checkpoint, not a {method!r} one")
    return body


def build_weights(path: str | Path, build: Callable[[], nn.Module], state_dict: Any) -> nn.Module:
    """The model ``build`` makes, with the stored weights: its size computed on the meta device
    and capped before any memory is allocated (:func:`predictor.methods.checks.planned_shapes`),
    the weights checked against it (names, shapes, floating point, finite), then built for real."""
    weights = check_tensors(state_dict, field_checker(path))
    shapes = planned_shapes(build, field_checker(path))
    check_weights(weights, shapes, field_checker(path))
    model = build()
    model.load_state_dict(weights)
    return model


def checked_model_size(build: Callable[[], nn.Module], what: str) -> None:
    """Refuse a model to be trained whose config asks for more than the parameter cap (ValueError
    naming ``what``), before it is built: the check a checkpoint's config gets."""
    planned_shapes(build, Checker(lambda _: what, ValueError))


def checked_config(cls: type, data: Any, path: str | Path, **defaults):
    """A method's config from a checkpoint's ``config`` (``defaults`` for fields older
    checkpoints lack), every value checked (:func:`predictor.methods.checks.checked_config`)."""
    data = field_checker(path, "config").mapping(data, "")
    return checks.checked_config(cls, {**defaults, **data}, field_checker(path, "config"))


def checked_spec(body: dict, path: str | Path) -> FeatureSpec:
    """The feature spec a checkpoint's model was built on, every field checked, and refused when
    it no longer gives the feature count the weights expect (written by an incompatible version)."""
    spec = check_spec(body.get("spec"), field_checker(path, "spec"))
    dim = field_checker(path).integer(body.get("dim"), "dim", 1)
    if spec.dim != dim:
        raise CheckpointError(f"{path}: feature spec gives {spec.dim} features but the model was built for "
                              f"{dim}: the checkpoint was written by an incompatible version")
    return spec


def check_spec(data: Any, check: Checker) -> FeatureSpec:
    """A :class:`FeatureSpec` from its stored form: each field of its type, the scalers finite
    and as long as the spec's columns, standard deviations positive."""
    from dataclasses import fields

    from predictor.features import NORMS, TARGET_TRANSFORMS

    data = check.mapping(data, "")
    known = {f.name for f in fields(FeatureSpec)}
    foreign = sorted(set(data) - known)
    if foreign:
        raise check.fail(foreign[0], "is not a field of a feature spec")
    check.texts(data.get("ops"), "ops", distinct=True, longest=checks.MAX_OPS)
    check.choice(data.get("norm", "global"), "norm", NORMS)
    check.choice(data.get("target_transform", "log"), "target_transform", TARGET_TRANSFORMS)
    check.flag(data.get("context", False), "context")
    for name in ("peaks", "floor", "ceiling", "per_op"):
        check.mapping(data.get(name, {}), name)
    for name, value in data.get("floor", {}).items():
        check.number(value, f"floor.{name}", hi=0)  # the lowest log-ratio to the anchor seen in training
    try:
        spec = FeatureSpec(**data)
    except (ValueError, TypeError) as exc:
        raise check.fail("", cut(str(exc))) from None
    n = spec.n_continuous
    for prefix, stats in (("", data), *((f"per_op.{op}.", check.mapping(s, f"per_op.{op}"))
                                         for op, s in spec.per_op.items())):
        check.numbers(stats.get("mean"), prefix + "mean", n)
        check.numbers(stats.get("std"), prefix + "std", n, positive=True)
        check.numbers(stats.get("target_mean"), prefix + "target_mean", 2)
        check.numbers(stats.get("target_std"), prefix + "target_std", 2, positive=True)
    if spec.low or spec.high:
        low, high = check.numbers(spec.low, "low", n), check.numbers(spec.high, "high", n)
        if any(a > b for a, b in zip(low, high)):
            raise check.fail("low", "must not exceed 'high' in any column")
    return spec


def stored_fields(body: dict, path: str | Path) -> dict[str, Any]:
    """The common fields of a checked body, as :class:`TrainedPredictor` takes them, each of its type."""
    check = field_checker(path)
    check.text(body.get("version", ""), "version", longest=100)
    history = check.sequence(body.get("history") or [], "history")
    for i, entry in enumerate(history):
        for key, value in check.mapping(entry, f"history[{i}]").items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise check.fail(f"history[{i}].{key}", "must be a number or null", value)
    split = check.mapping(body.get("split"), "split", optional=True)
    for key in ("test_units", "val_units"):
        if key in split:
            check.texts(split[key], f"split.{key}")
    return {"device": check.text(body.get("device"), "device", empty=False, longest=200),
            "fingerprint": check.text(body.get("fingerprint", ""), "fingerprint", longest=200),
            "history": history, "split": split}


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
        return cls.from_body(read_checkpoint(path, cls.method), path)

    @classmethod
    def from_body(cls: type[P], body: dict, path: str | Path) -> P:
        """The model a checkpoint's body (:func:`read_checkpoint`) describes, every field checked
        before it is used (``ets checkpoint info`` runs this too). A value the checks missed still
        gives a one-line CheckpointError, never a traceback."""
        try:
            intervals = stored_intervals(body, path)
            predictor = cls.from_checkpoint(body, path)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: unusable {cls.method} checkpoint ({type(exc).__name__}: "
                                  f"{cut(str(exc))})") from None
        predictor.intervals = intervals
        return predictor

    @classmethod
    def from_checkpoint(cls: type[P], body: dict, path: str | Path) -> P:
        """Rebuild from a body: config via :func:`checked_config`, the common fields via
        :func:`stored_fields`, the model and weights via :func:`build_weights`."""
        raise NotImplementedError


def summarize(ops: pd.DataFrame) -> pd.DataFrame:
    """Per-trace iteration time (µs) from per-op predictions, per phase and duration/gap.

    numpy sums over factorised trace ids: a pandas groupby-aggregate costs more than the model
    itself for one trace, and inference speed is a target."""
    codes, ids = pd.factorize(ops["config_id"], sort=True)
    n = len(ids)

    def total(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(codes if mask is None else codes[mask], values if mask is None else values[mask],
                           minlength=n)

    duration, gap = ops["pred_duration_us"].to_numpy(np.float64), ops["pred_gap_us"].to_numpy(np.float64)
    both = duration + gap
    first = np.unique(codes, return_index=True)[1]
    out = pd.DataFrame({"config_id": np.asarray(ids), "device": ops["device"].to_numpy()[first],
                        "family": ops["family"].to_numpy()[first], "model": ops["model"].to_numpy()[first],
                        "ops": np.bincount(codes, minlength=n), "pred_us": total(both),
                        "pred_duration_us": total(duration), "pred_gap_us": total(gap)})
    phase = ops["phase"].to_numpy()
    for name in ("forward", "backward", "update"):
        out[f"pred_{name}_us"] = total(both, phase == name)
    if "duration_us" in ops and ops["duration_us"].notna().all():
        out["true_us"] = total((ops["duration_us"] + ops["gap_us"]).to_numpy(np.float64))
    return out
