"""Fit the communication model's parameters to real all-reduce timings, and score it.

Why: α, B and the protocols' costs must come from measured collectives, never from a guess
(issue 52). Least squares on log time — every row's relative error counts alike, from 2 KB
(latency-bound) to 500 MB (bandwidth-bound) — over the rows of whatever setups are given; the
network's streams per node, a whole number a setup may not record, is chosen by the same
criterion among 1..8. Scoring (:func:`errors`) runs the same model on any rows, so a fit on some
setups is checked on others, out of sample.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from predictor.emulator.devices.collectives import LINKS, CommParams, Link, Network, Protocol, ring_seconds

# Starting point (s, fraction, bytes/s): small latencies, NCCL-like efficiencies; the fit moves them.
_START = {"call": 40e-6, "ll_share": 0.6, "simple_call": 100e-6, "alpha": 1e-6, "efficiency": 0.6,
          "net_alpha": 10e-6, "net_bps": 5e9}
MAX_STREAMS = 8


def _unpack(x: np.ndarray, streams: int, links: tuple[str, ...], one_protocol: bool) -> CommParams:
    v = np.exp(np.clip(x, -60.0, 60.0))
    if one_protocol:  # the plain α–β ring: both protocols the same, the full bandwidth
        protocols = {"ll": Protocol(v[0], 1.0), "simple": Protocol(v[0], 1.0)}
        v = np.concatenate([v[:1], [1.0, v[0]], v[1:]])
    else:
        protocols = {"ll": Protocol(v[0], v[1]), "simple": Protocol(v[2], 1.0)}
    fitted = {k: Link(v[3 + 2 * i], v[4 + 2 * i]) for i, k in enumerate(links)}
    fitted |= {k: Link(_START["alpha"], _START["efficiency"]) for k in LINKS if k not in fitted}  # unused here
    rest = 3 + 2 * len(links)
    return CommParams(protocols, fitted, Network(v[rest], v[rest + 1], streams), {})


def _columns(rows: pd.DataFrame) -> tuple:
    return (rows["nbytes"].to_numpy(dtype=float), rows["gpus"].to_numpy(), rows["per_node"].to_numpy(),
            rows["intra"].to_numpy(dtype=str), rows["intra_bps"].to_numpy(dtype=float), rows["streams"].to_numpy())


def predict(rows: pd.DataFrame, params: CommParams) -> np.ndarray:
    """Seconds the model gives each row of a :mod:`predictor.emulator.devices.collective_data` table."""
    return ring_seconds(*_columns(rows), params)


def fit(rows: pd.DataFrame, *, one_protocol: bool = False, description: str = "") -> CommParams:
    """Parameters minimising the squared log error over ``rows``. ``one_protocol``: the plain
    α–β ring (one fixed cost, the full bandwidth), kept to show what the two protocols buy."""
    if rows.empty:
        raise ValueError("no all-reduce rows to fit on")
    links = tuple(k for k in LINKS if (rows["intra"] == k).any())
    head = [_START["call"]] if one_protocol else [_START["call"], _START["ll_share"], _START["simple_call"]]
    start = np.log([*head, *[v for _ in links for v in (_START["alpha"], _START["efficiency"])],
                    _START["net_alpha"], _START["net_bps"]])
    # Bounds: a latency of at least 1 ns (a latency the data cannot see stays there, not at 1e-30);
    # an efficiency or protocol share of at most 1 (no link beats its spec sheet).
    at_most_one = [False] if one_protocol else [False, True, False]
    at_most_one += [flag for _ in links for flag in (False, True)] + [False, False]
    upper = np.where(at_most_one, 0.0, np.inf)
    lower = np.full(len(start), np.log(1e-9))
    columns, measured = _columns(rows), np.log(rows["seconds"].to_numpy(dtype=float))
    needs_streams = bool(((rows["gpus"] > rows["per_node"]) & (rows["streams"] == 0)).any())
    best = None
    for streams in (range(1, MAX_STREAMS + 1) if needs_streams else (1,)):
        def residuals(x: np.ndarray, streams: int = streams) -> np.ndarray:
            return np.log(ring_seconds(*columns, _unpack(x, streams, links, one_protocol))) - measured

        result = least_squares(residuals, start if best is None else best[0].x, bounds=(lower, upper),
                               method="trf", max_nfev=2000)
        if best is None or result.cost < best[0].cost:
            best = (result, streams)
    result, streams = best
    params = _unpack(result.x, streams, links, one_protocol)
    provenance = {"fitted_on": description or ", ".join(sorted(rows["setup"].unique())), "rows": len(rows),
                  "rms_log_error": round(float(np.sqrt(np.mean(result.fun ** 2))), 4),
                  "date": date.today().isoformat(), "fitted_links": list(links),
                  "method": "least squares on log time (scipy.optimize.least_squares, trf); network streams per "
                            "node by grid 1..8" + ("; one protocol" if one_protocol else "")}
    return CommParams(params.protocols, params.links, params.network, provenance)


def errors(rows: pd.DataFrame, params: CommParams) -> pd.DataFrame:
    """``rows`` with ``predicted_s``, signed ``error`` (predicted / measured − 1) and ``abs_error``."""
    out = rows.copy()
    out["predicted_s"] = predict(rows, params)
    out["error"] = out["predicted_s"] / out["seconds"] - 1
    out["abs_error"] = out["error"].abs()
    return out


def summary(scored: pd.DataFrame, min_bytes: float = 1e6) -> pd.DataFrame:
    """Per set: rows, median |error| over messages ≥ ``min_bytes`` and over all, median signed
    error and share within ±15 % (both ≥ ``min_bytes``)."""
    table = []
    for setup, g in scored.groupby("setup", sort=False):
        big = g[g["nbytes"] >= min_bytes]
        table.append({"set": setup, "n": len(g), "n_large": len(big),
                      "median_large": float(big["abs_error"].median()) if len(big) else float("nan"),
                      "median_all": float(g["abs_error"].median()),
                      "signed_large": float(big["error"].median()) if len(big) else float("nan"),
                      "within_15": float((big["abs_error"] <= 0.15).mean()) if len(big) else float("nan")})
    return pd.DataFrame(table)
