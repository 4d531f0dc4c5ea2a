"""The grid of a sweep: policies x predictors (+ injected errors) x workloads/traces x seeds x loads,
expanded from the command line's comma lists into RunConfigs.

Why: the paper's comparisons are hundreds of runs that differ in one field at a time; the grid
is written once, as lists, and every point of it is a plain :class:`~simulator.run.RunConfig`, so
that running, caching and comparing points never depend on how the grid was spelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from predictor.common.inputs import SpecError, over_limit, short
from predictor.common.inputs import limit as input_limit
from simulator.communication import PLACEMENTS
from simulator.run import (
    DEFAULT_CLUSTER,
    DEFAULT_WORKLOAD,
    INT64_MAX,
    RunConfig,
    check_deadline_fraction,
    check_limit,
    check_observe_after,
    check_seed,
    needs_binding,
)


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


def seed_values(text: str | int | Sequence[int], option: str = "--seeds") -> range | list[int]:
    """The seeds of ``text`` without building a count's list: ``"3"`` -> range(3) (a count),
    ``"0,5"`` or ``"7,"`` (a comma list) -> those seeds, each checked to be a valid seed."""
    if isinstance(text, int):
        text = str(text)
    try:
        if not isinstance(text, str):
            return [_seed(int(s), option) for s in dict.fromkeys(text)]
        parts = [p.strip() for p in text.split(",")]
        if len(parts) == 1:
            count = int(parts[0])
            if count < 1:
                raise SpecError(f"{option} {short(text)}: a single number is a count and must be >= 1 "
                                "(write '0,' for the one seed 0)")
            if count > INT64_MAX:  # len() of a longer range overflows
                raise SpecError(f"{option} {short(text)}: a count of seeds must be at most {INT64_MAX:,}")
            return range(count)
        return [_seed(s, option) for s in dict.fromkeys(int(p) for p in parts if p)]
    except SpecError:
        raise
    except ValueError:
        raise SpecError(f"{option} {short(text)}: expected a count N (seeds 0..N-1) or a comma list "
                        "of integers") from None


def _seed(value: object, option: str) -> int:
    """One seed of a list, as :func:`simulator.run.check_seed` takes it."""
    return check_seed(value, option)


def parse_seeds(text: str | int | Sequence[int]) -> list[int]:
    """``"3"`` (a single integer: a count) -> 0, 1, 2; ``"0,5"`` or ``"7,"`` (a comma list) -> those
    seeds. A count past the grid-point limit is refused before its list is built."""
    seeds = seed_values(text)
    if len(seeds) > input_limit("grid_points"):
        raise SpecError(str(over_limit("grid_points", f"--seeds {short(text)}", len(seeds))))
    return list(seeds)


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
        except (TypeError, ValueError):
            raise SpecError(f"{what} {short(text)}: {short(p)} is not a number") from None
        if not np.isfinite(x) or x < 0 or (positive and x == 0):
            finite = "" if np.isfinite(x) else "a finite number "
            raise SpecError(f"{what} {short(text)}: {short(p)} must be {finite}{'> 0' if positive else '>= 0'}")
        out.append(x)
    return list(dict.fromkeys(out))


def error_predictor(mre: float) -> str:
    """The predictor spec of an injected-error point: 0.05 -> ``noisy:0.05``, 0 -> ``noisy:0``."""
    return f"noisy:{mre:g}"


def error_predictors(errors: str | Sequence[float]) -> list[str]:
    """The noisy:X predictors of --errors, each checked by building it (cheap for noisy), so that a
    level the noise model cannot reach fails here, once, not in every point of the grid."""
    from simulator.timing import make_predictor

    specs = []
    for mre in parse_floats(errors, "--errors"):
        spec = error_predictor(mre)
        try:
            make_predictor(spec)
        except SpecError as exc:
            raise SpecError(f"--errors {mre:g}: {exc}") from None
        specs.append(spec)
    return specs


def check_grid_size(counts: dict[str, int]) -> None:
    """Refuse a grid of more than the grid-point limit from the counts of its option lists
    (option -> count), before a point is built (``--seeds 100000000`` once filled 22.7 GB)."""
    total = math.prod(counts.values())
    if total > input_limit("grid_points"):
        factors = " x ".join(f"{n:,} {option}" for option, n in counts.items())
        raise SpecError(str(over_limit("grid_points", f"the grid of {factors}", total)))


def _check_run_options(limit: int | None, deadline_fraction: float, observe_after: int | None) -> None:
    """The grid's single-valued numeric options, checked as a single run checks them."""
    check_limit(limit)
    check_deadline_fraction(deadline_fraction)
    if observe_after is not None:
        check_observe_after(observe_after)


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
         reference_gpu: str | None = None, observe_after: int | None = None,
         placements: str | Sequence[str] = ("consolidate",), communication: bool = True,
         failures: str | Sequence[str] = ("none",), checkpoints: str | Sequence[str] = ()) -> list[RunConfig]:
    """The grid policies x (predictors + noisy:<e> for e in errors) x (workloads + traces) x seeds x loads
    x placement rules (``communication``: bound multi-GPU jobs pay for their all-reduces) x failure
    models x checkpoint intervals (``optimal`` when none is given; a model of ``none`` runs once,
    without checkpoints).

    No workload and no trace -> the embedded default workload. Trace paths are made absolute (so
    workers in another directory find them). Specs are not validated here: a bad one becomes a
    failed point, the others still run. When any predictor is model-based (or with online
    feedback), every point binds its jobs to model configs, so all predictors of a workload,
    truth included, see the same jobs.
    """
    pols = split_specs(policies)
    preds = list(dict.fromkeys(split_specs(predictors) + error_predictors(errors)))
    sources: list[tuple[str | None, str | None]] = [(None, w) for w in split_specs(workloads)]
    sources += [(_absolute_trace(t), None) for t in split_specs(traces)]
    if not sources:
        sources = [(None, DEFAULT_WORKLOAD)]
    seed_list = seed_values(seeds)
    loads = parse_floats(load_scales, "--load-scales", positive=True) or [1.0]
    if not pols:
        raise SpecError("no policy given (--policies)")
    if not preds:
        raise SpecError("no predictor given (--predictors and/or --errors)")
    _check_run_options(limit, deadline_fraction, observe_after)
    rules = split_specs(placements) or ["consolidate"]
    unknown = [r for r in rules if r not in PLACEMENTS]
    if unknown:
        raise SpecError(f"unknown placement {unknown[0]!r} in --placements; known: {', '.join(PLACEMENTS)}")
    models = split_specs(failures) or ["none"]
    every = split_specs(checkpoints)
    failure_points = [(m, None) if m == "none" else (m, c) for m in models for c in (every or [None])]
    check_grid_size({"--policies": len(pols), "--predictors/--errors": len(preds),
                     "--workloads/--traces": len(sources), "--seeds": len(seed_list), "--load-scales": len(loads),
                     "--placements": len(rules), "--failures/--checkpoint-every": len(failure_points)})
    bind = any(needs_binding(q, observe_after) for q in preds) or any(r == "tiresias" for r in rules)
    configs = [RunConfig(policy=p, predictor=q, trace=t, workload=w, limit=None if limit is None else int(limit),
                         cluster=cluster, seed=int(s), deadline_fraction=float(deadline_fraction),
                         reference_gpu=reference_gpu, load_scale=float(ls), bind=bind, observe_after=observe_after,
                         placement=r, communication=bool(communication), failures=f, checkpoint_every=c)
               for p in pols for q in preds for t, w in sources for s in seed_list for ls in loads for r in rules
               for f, c in failure_points]
    return list(dict.fromkeys(configs))
