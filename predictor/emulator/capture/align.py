"""Imported traces carried onto our own captured op sequence: the same features at test time.

Why: a model trained on traces captured by ``ets collect`` meets, in an imported trace, other op
names (``relu`` vs ``relu_``, a backward row named after its forward op vs ``ReluBackward0``),
another ``params`` layout (the ETS CSVs' 30-slot blocks vs our shape lists), other FLOP counts
and fewer rows (the ETS profiler records only ops that launch kernels). Recomputing each imported
feature with our formulas would need every op's shapes, which the imports do not all carry. So
the timings move instead: the zoo config of the same model, batch, input size, dtype and classes
is captured on the meta device (features only), each imported row is matched to one captured op
of the same phase and kind, and the captured sequence gets the imported durations and gaps.

Matching is a weighted longest common subsequence per phase over canonical op names (the
imported and captured names reduced to one vocabulary, :func:`canonical`), preferring pairs
whose FLOP counts agree. Timings are kept whole:

* a matched captured op gets its imported row's kernel time, gap, host time and kernel count;
* a captured op with no imported row (``AccumulateGrad``, views, the ``num_batches_tracked``
  increment) gets zeros: in the imported trace its time, if any, is already inside a gap;
* an imported row with no captured op (a ``linear`` logged twice) is added to the nearest earlier
  matched op (the next one if none), so the iteration's kernel time and its gap total are those
  of the imported file, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.op_trace import validate

# Reduced names (lower case, no "aten::", no "__", no in-place "_", no "BackwardN") -> one name.
ALIASES = {
    "iadd": "add", "imul": "mul", "convolution": "conv2d", "nativebatchnorm": "batch_norm",
    "cudnnbatchnorm": "batch_norm", "maxpool2dwithindices": "max_pool2d", "addmm": "linear",
    "mm": "linear", "nllloss": "cross_entropy", "logsoftmax": "cross_entropy",
    "cross_entropy_loss": "cross_entropy", "nativelayernorm": "layer_norm", "nativedropout": "dropout",
    "avgpool2d": "avg_pool2d", "bmm": "matmul", "constantpadnd": "pad",
    # torch lowers a 1x1 adaptive average pool to mean (its backward is MeanBackward1)
    "adaptiveavgpool2d": "mean", "adaptive_avg_pool2d": "mean",
    "contiguous": "clone",  # a non-contiguous tensor's copy kernel runs in aten::clone
}
# Backward rows the ETS profiler names after the forward op whose autograd node is a multiply:
# dropout's mask and stochastic depth's Bernoulli noise (MulBackward0 in a capture).
BACKWARD_ALIASES = {"dropout": "mul", "bernoulli": "mul"}
_BACKWARD = re.compile(r"Backward\d*$")
FLOP_AGREEMENT = 0.25  # relative FLOP difference under which a pair earns the agreement bonus
FLOP_CONFLICT = 0.75  # ... and above which it pays a penalty (a 4x difference: likely another op)
MATCH, AGREE_BONUS, DISAGREE_PENALTY = 1.0, 0.5, 0.5
FEATURE_TOLERANCE = 0.01  # relative difference under which an imported FLOP / byte count equals ours


def canonical(op: str, phase: str = "forward") -> str:
    """One vocabulary for imported and captured op names (forward and backward alike)."""
    name = op.removeprefix("aten::")
    backward = bool(_BACKWARD.search(name))
    if backward:
        name = _BACKWARD.sub("", name)
    name = ALIASES.get(name.strip("_").lower(), name.strip("_").lower())
    return BACKWARD_ALIASES.get(name, name) if phase == "backward" else name


def _pair_score(a_name: str, a_flops: float, b_name: str, b_flops: float) -> float:
    if a_name != b_name:
        return 0.0
    if a_flops > 0 and b_flops > 0:
        ratio = abs(a_flops - b_flops) / max(a_flops, b_flops)
        if ratio <= FLOP_AGREEMENT:
            return MATCH + AGREE_BONUS
        if ratio > FLOP_CONFLICT:
            return MATCH - DISAGREE_PENALTY
    elif (a_flops > 0) != (b_flops > 0) and max(a_flops, b_flops) > 0:
        return MATCH - DISAGREE_PENALTY / 2
    return MATCH


def match(real_names: list[str], real_flops: np.ndarray,
          captured_names: list[str], captured_flops: np.ndarray) -> list[tuple[int, int]]:
    """(real index, captured index) pairs of the best-scoring order-preserving matching."""
    n, m = len(real_names), len(captured_names)
    score = np.zeros((n + 1, m + 1))
    for i in range(1, n + 1):
        row, prev = score[i], score[i - 1]
        a, fa = real_names[i - 1], float(real_flops[i - 1])
        for j in range(1, m + 1):
            best = prev[j] if prev[j] >= row[j - 1] else row[j - 1]
            s = _pair_score(a, fa, captured_names[j - 1], float(captured_flops[j - 1]))
            if s > 0 and prev[j - 1] + s > best:
                best = prev[j - 1] + s
            row[j] = best
    # Backtrack from the end; on ties leave the later imported row unmatched, so that a row
    # logged twice folds into its earlier, matched twin.
    pairs, i, j = [], n, m
    while i > 0 and j > 0:
        if np.isclose(score[i, j], score[i - 1, j]):
            i -= 1
        elif np.isclose(score[i, j], score[i, j - 1]):
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


@dataclass
class Alignment:
    """The captured sequence with the imported timings, and how well the two agreed."""

    trace: pd.DataFrame
    real_rows: int
    captured_rows: int
    matched: int
    matched_time_share: float  # share of the imported iteration time on matched rows
    pairs: list[tuple[int, int]]  # (imported row, captured row), in order
    # Over matched pairs, before alignment: the share whose imported op name, params, FLOPs and
    # bytes equal ours (FLOPs and bytes within FEATURE_TOLERANCE).
    name_agreement: float
    params_agreement: float
    flops_agreement: float
    bytes_agreement: float

    @property
    def real_rate(self) -> float:
        return self.matched / self.real_rows if self.real_rows else 0.0


def align(real: pd.DataFrame, captured: pd.DataFrame) -> Alignment:
    """``captured``'s rows and features with ``real``'s timings (both one iteration)."""
    real = real.reset_index(drop=True)
    captured = captured.reset_index(drop=True)
    pairs: list[tuple[int, int]] = []
    for phase in ("forward", "backward", "update"):
        ri = np.flatnonzero(real["phase"].to_numpy() == phase)
        ci = np.flatnonzero(captured["phase"].to_numpy() == phase)
        found = match([canonical(o, phase) for o in real["op"].iloc[ri]], real["flops"].to_numpy()[ri],
                      [canonical(o, phase) for o in captured["op"].iloc[ci]], captured["flops"].to_numpy()[ci])
        pairs += [(int(ri[a]), int(ci[b])) for a, b in found]
    pairs.sort()
    of_real = dict(pairs)
    timing = ("duration_us", "gap_us", "cpu_us")
    out = {c: np.zeros(len(captured)) for c in timing}
    kernels = np.zeros(len(captured), dtype=np.int64)
    sources = np.array([f"capture:meta (no row in {real['source'].iloc[0].rsplit(':', 1)[0]})"] * len(captured),
                       dtype=object)
    matched_captured = sorted(of_real.values())
    if not matched_captured:
        raise ValueError(f"{real['config_id'].iloc[0]}: no imported row matches the captured sequence")
    last = None  # the latest matched captured op, in imported order
    for r in range(len(real)):
        c = of_real.get(r)
        if c is not None:
            last = c
            sources[c] = real["source"].iloc[r]
        into = c if c is not None else (last if last is not None else matched_captured[0])
        for col in timing:
            out[col][into] += float(real[col].iloc[r])
        kernels[into] += int(real["kernels"].iloc[r])
    trace = captured.copy()
    for col in timing:
        trace[col] = out[col]
    trace["kernels"] = kernels
    trace["source"] = sources
    trace["device"] = real["device"].iloc[0]
    trace["config_id"] = real["config_id"].iloc[0]
    ri, ci = [r for r, _ in pairs], [c for _, c in pairs]
    total = real["duration_us"] + real["gap_us"]
    return Alignment(
        trace=validate(trace, real["config_id"].iloc[0]),
        real_rows=len(real), captured_rows=len(captured), matched=len(pairs),
        matched_time_share=float(total.iloc[ri].sum() / total.sum()) if total.sum() else 0.0,
        pairs=pairs,
        name_agreement=float(np.mean(real["op"].to_numpy()[ri] == captured["op"].to_numpy()[ci])),
        params_agreement=float(np.mean([list(real["params"].iloc[r]) == list(captured["params"].iloc[c])
                                        for r, c in pairs])),
        flops_agreement=_agreement(real["flops"].to_numpy()[ri], captured["flops"].to_numpy()[ci]),
        bytes_agreement=_agreement(real["bytes"].to_numpy()[ri], captured["bytes"].to_numpy()[ci]),
    )


def _agreement(imported: np.ndarray, ours: np.ndarray) -> float:
    if not len(imported):
        return float("nan")
    scale = np.maximum(np.abs(imported), np.abs(ours))
    return float(np.mean(np.abs(ours - imported) <= FEATURE_TOLERANCE * np.where(scale > 0, scale, 1.0)))


@dataclass
class Unaligned:
    """An imported iteration that has no zoo counterpart, and why."""

    config_id: str
    source: str
    reason: str


def align_onto_zoo(traces: pd.DataFrame, zoo_config, *, progress: bool = False
                   ) -> tuple[pd.DataFrame, pd.DataFrame, list[Unaligned]]:
    """Every imported iteration of ``traces`` aligned onto the meta capture of its zoo config.

    ``zoo_config(trace) -> ModelConfig`` names the config (raising ``ValueError`` with the reason
    when the zoo cannot build it). Returns the aligned traces, one report row per iteration
    (rows, matches, the share of time on matched rows, FLOP agreement) and the iterations left
    unaligned with their reasons; the caller decides what to do with those (nothing is dropped
    silently here).
    """
    from tqdm import tqdm

    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.zoo.config import ModelBuildError

    out, report, skipped = [], [], []
    groups = list(traces.groupby(["device", "config_id"], sort=True))
    for (device, config_id), real in tqdm(groups, desc="align onto zoo captures", unit="trace", disable=not progress):
        real = real.sort_values("idx")
        source = str(real["source"].iloc[0]).rsplit(":", 1)[0]
        try:
            config = zoo_config(real)
            result = align(real, capture(config, "meta"))
        except (ValueError, ModelBuildError) as exc:  # also: no imported row matches the capture
            skipped.append(Unaligned(config_id, source, str(exc)))
            continue
        out.append(result.trace)
        report.append({"device": device, "config_id": config_id, "family": real["family"].iloc[0],
                       "model": real["model"].iloc[0], "zoo_config": config.config_id, "source": source,
                       "real_rows": result.real_rows, "captured_rows": result.captured_rows,
                       "matched": result.matched, "real_rate": result.real_rate,
                       "matched_time_share": result.matched_time_share,
                       "name_agreement": result.name_agreement, "params_agreement": result.params_agreement,
                       "flops_agreement": result.flops_agreement, "bytes_agreement": result.bytes_agreement})
    aligned = pd.concat(out, ignore_index=True) if out else traces.iloc[:0]
    return aligned, pd.DataFrame(report), skipped
