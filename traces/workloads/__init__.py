"""The workload set: op sequences of the model configs that cluster jobs are bound to.

Why: a scheduling study with predicted run times needs jobs that are real models the predictors
have never seen. The workload set holds the meta-device op sequences of the held-out (test-split)
configs of the shipped checkpoints (written by ``python -m experiments.pretrain``); true and
predicted iteration times are computed from them on demand (:mod:`predictor.tables`), so the
package ships sequences, not timings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.families import job_class
from predictor.common.op_trace import ELEMENT_BYTES, OpTraceFormatError, first_input_elements, validate
from predictor.memory import OPTIMIZER_STATES

WORKLOADS_FILE = Path(__file__).with_name("sequences.parquet")
TIMING_COLUMNS = ("duration_us", "gap_us", "cpu_us", "kernels", "source")


def write_workloads(traces: pd.DataFrame, path: str | Path = WORKLOADS_FILE) -> Path:
    """The op sequences of ``traces`` (one device's rows), without their timings."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    devices = traces["device"].unique()
    if len(devices) != 1:
        raise ValueError(f"the workload set takes one device's traces, got {len(devices)}")
    seq = traces.drop(columns=list(TIMING_COLUMNS)).sort_values(["config_id", "idx"]).reset_index(drop=True)
    seq["device"] = "meta"
    seq.to_parquet(path, index=False, compression="zstd")
    return path


# The last workload set read, by (file, modification time, size): a sweep runs hundreds of bound points
# in one process, and each read validates ~470,000 rows (about 2 s on 2 cores: most of a quick
# reproduction's time). A changed file is read afresh.
_LAST_READ: dict[tuple[str, int, int], pd.DataFrame] = {}


def read_workloads(path: str | Path = WORKLOADS_FILE) -> pd.DataFrame:
    """The workload set's op sequences, with each config's job class (image / language / speech); a
    copy of the last read while the file is unchanged (callers may add or change columns)."""
    path = Path(path)
    if not path.exists():
        raise OpTraceFormatError(path, "no workload set; build one with `python -m experiments.pretrain`")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    seq = _LAST_READ.get(key)
    if seq is None:
        seq = pd.read_parquet(path)
        seq["duration_us"], seq["gap_us"], seq["cpu_us"] = 0.0, 0.0, float("nan")
        seq["kernels"], seq["source"] = 0, str(path)
        seq = validate(seq, str(path))
        _LAST_READ.clear()
        _LAST_READ[key] = seq
    return seq.copy()


def workload_configs(sequences: pd.DataFrame) -> pd.DataFrame:
    """One row per config: config_id, family, model, ops, job class, checkpoint bytes."""
    out = sequences.groupby("config_id", sort=True).agg(family=("family", "first"), model=("model", "first"),
                                                       ops=("idx", "size")).reset_index()
    out["job_class"] = [job_class(f, m) for f, m in zip(out["family"], out["model"])]
    out["checkpoint_bytes"] = checkpoint_bytes(sequences).reindex(out["config_id"]).fillna(0.0).to_numpy()
    return out


def checkpoint_bytes(sequences: pd.DataFrame) -> pd.Series:
    """Per config: what a training checkpoint holds — every parameter (autograd accumulates one
    gradient per parameter: the ``AccumulateGrad`` ops' shapes) at its element size, times one
    plus the optimizer's state tensors (the optimizer named in the config id; 0 states for
    another). The preemptive engine reads it to price a resume (:class:`policies.base.RestartCost`)."""
    grads = sequences[sequences["op"] == "AccumulateGrad"]
    texts = grads["input_shapes"].astype(str)
    elements = {text: first_input_elements(text) for text in pd.unique(texts)}  # each shape parsed once
    weighted = (texts.map(elements).to_numpy(np.float64)
                * grads["dtype"].astype(str).map(ELEMENT_BYTES).fillna(4).to_numpy(np.float64))
    totals = pd.Series(weighted, index=grads["config_id"].to_numpy()).groupby(level=0, sort=True).sum()
    sizes = {}
    for config_id, total in totals.items():
        parts = str(config_id).split(":")
        states = OPTIMIZER_STATES.get(parts[4], 0) if len(parts) > 4 else 0
        sizes[config_id] = float(total) * (1 + states)
    return pd.Series(sizes, dtype="float64")
