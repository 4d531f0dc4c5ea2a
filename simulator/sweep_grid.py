"""The grid of a sweep: policies x predictors (+ injected errors) x workloads/traces x seeds x loads,
expanded from the command line's comma lists into RunConfigs.

Why: the paper's comparisons are hundreds of runs that differ in one field at a time; the grid
is written once, as lists, and every point of it is a plain :class:`~simulator.run.RunConfig`, so
that running, caching and comparing points never depend on how the grid was spelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from simulator.run import DEFAULT_CLUSTER, DEFAULT_WORKLOAD, RunConfig, needs_binding


class SweepSpecError(ValueError):
    """A malformed sweep option (seeds, errors, load scales, an empty grid)."""


def split_specs(text: str | Iterable[str] | None) -> list[str]:
    """Split comma lists of specs, keeping ``name:k=v,k2=v2`` option lists together.

    A piece with ``=`` and no ``:`` continues the previous spec (``hydra:window=10,bnb=off,allox``
    -> ``["hydra:window=10,bnb=off", "allox"]``). Accepts one string or several (repeated options).
    """
    if text is None:
        return []
    items = [text] if isinstance(text, str) else list(text)
    out: list[str] = []
    for item in items:
        start = len(out)
        for piece in (p.strip() for p in item.split(",")):
            if not piece:
                continue
            if "=" in piece and ":" not in piece.split("=", 1)[0] and len(out) > start and ":" in out[-1]:
                out[-1] += "," + piece
            else:
                out.append(piece)
    return out


def parse_seeds(text: str | int | Sequence[int]) -> list[int]:
    """``"3"`` (a single integer: a count) -> 0, 1, 2; ``"0,5"`` or ``"7,"`` (a comma list) -> those seeds."""
    if isinstance(text, int):
        text = str(text)
    if not isinstance(text, str):
        return [int(s) for s in text]
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) == 1:
            count = int(parts[0])
            if count < 1:
                raise SweepSpecError(f"--seeds {text!r}: a single number is a count and must be >= 1 "
                                     "(write '0,' for the one seed 0)")
            return list(range(count))
        return list(dict.fromkeys(int(p) for p in parts if p))
    except ValueError:
        raise SweepSpecError(f"--seeds {text!r}: expected a count N (seeds 0..N-1) or a comma list "
                             "of integers") from None


def parse_floats(text: str | Sequence[float] | None, what: str, *, positive: bool = False) -> list[float]:
    if text is None:
        return []
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    out = []
    for p in parts:
        if p == "":
            continue
        try:
            x = float(p)
        except ValueError:
            raise SweepSpecError(f"{what} {text!r}: {p!r} is not a number") from None
        if not np.isfinite(x) or x < 0 or (positive and x == 0):
            raise SweepSpecError(f"{what} {text!r}: {p!r} must be {'> 0' if positive else '>= 0'}")
        out.append(x)
    return list(dict.fromkeys(out))


def error_predictor(mre: float) -> str:
    """The predictor spec of an injected-error point: 0.05 -> ``noisy:0.05``, 0 -> ``noisy:0``."""
    return f"noisy:{mre:g}"


def _absolute_trace(spec: str) -> str:
    kind, sep, path = spec.partition(":")
    if not sep:
        return spec  # invalid; the point records the loader's error
    return f"{kind}:{Path(path).expanduser().resolve()}"


def plan(policies: str | Sequence[str], predictors: str | Sequence[str] = (), *,
         errors: str | Sequence[float] = (), workloads: str | Sequence[str] = (),
         traces: str | Sequence[str] = (), seeds: str | int | Sequence[int] = 1,
         load_scales: str | Sequence[float] = (1.0,), cluster: str = DEFAULT_CLUSTER,
         limit: int | None = None, deadline_fraction: float = 0.2,
         reference_gpu: str | None = None, observe_after: int | None = None) -> list[RunConfig]:
    """The grid policies x (predictors + noisy:<e> for e in errors) x (workloads + traces) x seeds x loads.

    No workload and no trace -> the embedded default workload. Trace paths are made absolute (so
    workers in another directory find them). Specs are not validated here: a bad one becomes a
    failed point, the others still run. When any predictor is model-based (or with online
    feedback), every point binds its jobs to model configs, so all predictors of a workload,
    truth included, see the same jobs.
    """
    pols = split_specs(policies)
    preds = list(dict.fromkeys(split_specs(predictors)
                               + [error_predictor(e) for e in parse_floats(errors, "--errors")]))
    sources: list[tuple[str | None, str | None]] = [(None, w) for w in split_specs(workloads)]
    sources += [(_absolute_trace(t), None) for t in split_specs(traces)]
    if not sources:
        sources = [(None, DEFAULT_WORKLOAD)]
    seed_list = parse_seeds(seeds)
    loads = parse_floats(load_scales, "--load-scales", positive=True) or [1.0]
    if not pols:
        raise SweepSpecError("no policy given (--policies)")
    if not preds:
        raise SweepSpecError("no predictor given (--predictors and/or --errors)")
    bind = any(needs_binding(q, observe_after) for q in preds)
    configs = [RunConfig(policy=p, predictor=q, trace=t, workload=w, limit=None if limit is None else int(limit),
                         cluster=cluster, seed=int(s), deadline_fraction=float(deadline_fraction),
                         reference_gpu=reference_gpu, load_scale=float(ls), bind=bind, observe_after=observe_after)
               for p in pols for q in preds for t, w in sources for s in seed_list for ls in loads]
    return list(dict.fromkeys(configs))
