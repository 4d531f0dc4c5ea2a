"""What every method's training shares: device selection, mini-batches, the one epoch loop
with early stopping on the validation iteration MRE and a convergence history, and the helpers
more than one method trains with (traces in op order, the training data's fingerprint, the MRE,
the small MLP of the op-level baselines).

Why one module: ETS and the three baselines are compared on wall time to their best validation
MRE (the paper's convergence figure), so they must stop by the same rule and record the same
history. What a trained model shares (its fields, checkpoint, fit config) is in
:mod:`predictor.methods.base`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd
import torch
from torch import nn

from predictor.emulator.peaks import Peaks, for_device

if TYPE_CHECKING:
    from predictor.methods.base import FitConfig

T = TypeVar("T")


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


def anchor_peaks(target_transform: str, device: str, peaks: Peaks | None) -> Peaks | None:
    """The peaks anchored targets use for ``device``: ``peaks`` when given (a CPU dataset's
    recorded ones), else the GPU catalogue's; a CPU without them is refused with the command
    that records them (:func:`predictor.emulator.peaks.for_device`). None for the other targets."""
    if target_transform != "anchored":
        return None
    return peaks or for_device(device)


def clock() -> float:
    """The training clock: a method's ``train`` reads it first and hands it to
    :class:`EarlyStopping`, so ``max_minutes`` (``--minutes``) covers everything it does."""
    return time.perf_counter()


def shuffled_rows(rng: np.random.Generator, n: int, batch_size: int, *, tensor: bool = True) -> list:
    """One epoch's mini-batches: a fresh permutation of ``n`` rows cut into ``batch_size`` slices
    (as torch tensors, or numpy arrays with ``tensor=False``)."""
    order = rng.permutation(n)
    if tensor:
        order = torch.from_numpy(order)
    return [order[start:start + batch_size] for start in range(0, n, batch_size)]


class EarlyStopping:
    """Epoch bookkeeping: history (wall time, loss, validation MRE), the best weights, the
    learning-rate schedule (halve after 2 epochs without improvement, down to 1/16 of the initial
    rate: a noisy validation MRE must not freeze training), patience and time budget; and the one
    epoch loop every method trains with (:meth:`fit`).

        stop = EarlyStopping(model, history, config, "train ets", optimizer=opt)
        stop.fit(model, opt, batches, loss_of, validate)
        stop.restore()
    """

    def __init__(self, model: nn.Module, history: list[dict], config: FitConfig, desc: str, *,
                 optimizer: torch.optim.Optimizer | None = None, progress: bool = True,
                 log: Callable[[dict], None] | None = None, started: float | None = None) -> None:
        """``started``: when the time budget began (:func:`clock` at the start of ``train``, so that
        fitting features and building the model count too); default now."""
        from tqdm import tqdm

        self.model, self.history, self.log = model, history, log
        self.patience, self.max_seconds, self.max_epochs = config.patience, config.max_minutes * 60, config.max_epochs
        self.schedule = (torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2,
                                                                     min_lr=optimizer.defaults["lr"] / 16)
                         if optimizer is not None else None)
        self.best, self.best_state, self.stale = np.inf, None, 0
        self.bar = tqdm(total=self.max_epochs, desc=desc, unit="epoch", disable=not progress)
        self.started = clock() if started is None else started

    def epochs(self) -> range:
        return range(self.max_epochs)

    def fit(self, model: nn.Module, optimizer: torch.optim.Optimizer, batches: Callable[[], Iterable[T]],
            loss_of: Callable[[T], torch.Tensor], validate: Callable[[], float], *,
            after_step: Callable[[], None] | None = None, early_stop: bool = True) -> None:
        """The epoch loop: each epoch, ``batches()`` (drawn anew: a method shuffles there) until
        the time budget is spent, one optimizer step on each ``loss_of(batch)``, then
        ``validate()`` (the validation MRE) and the bookkeeping. ``after_step``: after each step
        (ETS's weight average). ``early_stop=False``: a fixed epoch count that only the time budget
        cuts short (fine-tuning without held-out traces to stop on)."""
        for _ in self.epochs():
            model.train()
            losses = []
            for batch in self.batches(batches()):
                loss = loss_of(batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if after_step is not None:
                    after_step()
                losses.append(float(loss.detach()))
            if self.end_epoch(losses, validate()) and early_stop:
                break
            if not early_stop and self.out_of_time():
                break

    def batches(self, batches: Iterable[T]) -> Iterator[T]:
        """``batches`` until the time budget is spent: checked before each batch, so a time limit
        holds within a long epoch too (the epoch then ends early and is validated as usual)."""
        for batch in batches:
            if self.out_of_time():
                return
            yield batch

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


def sorted_traces(traces: pd.DataFrame) -> list[pd.DataFrame]:
    return [t.sort_values("idx").reset_index(drop=True) for _, t in traces.groupby("config_id", sort=True)]


def fingerprint(traces: pd.DataFrame) -> str:
    """A short hash of which traces (and how many ops and how much time) a model was trained on."""
    summary = traces.groupby(["device", "config_id"]).agg(n=("idx", "size"), d=("duration_us", "sum"),
                                                          g=("gap_us", "sum"))
    text = summary.round(3).to_csv()
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def iteration_mre(summary: pd.DataFrame) -> float:
    return float((np.abs(summary["pred_us"] - summary["true_us"]) / summary["true_us"]).mean())


def mre(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - truth) / truth))


def mlp(inputs: int, hidden: int, layers: int) -> nn.Sequential:
    """``layers`` hidden ReLU layers of ``hidden`` units and one linear output."""
    if layers < 1 or hidden < 1:
        raise ValueError(f"an MLP needs at least one hidden layer of one unit, got {layers} x {hidden}")
    body: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        body += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*body, nn.Linear(width, 1))


@torch.no_grad()
def run_mlp(model: nn.Module, x: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Model output for every row of ``x`` (evaluation mode, chunked), as a 1-D float64 array."""
    model.eval()
    out = [model(torch.from_numpy(x[i:i + chunk])).squeeze(1).numpy() for i in range(0, len(x), chunk)]
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)
