"""Hydra's deadline cases (``20_ddl.csv`` light, ``30_ddl.csv`` heavy; ../shared/hydra_cases).

Why: they are the workload of the Hydra paper: 5,000 single-GPU PAI-derived jobs, all submitted
at t = 0, some with deadlines, each with a run time per GPU type. Every column other than the
index, ``job_name``, ``norm_job_submit_time`` and ``ddl`` is a GPU type (Hydra's own rule) and
becomes a ``runtime_s:<canonical type>`` column, the ground truth per type (``GTX2080Ti`` →
``RTX2080Ti``). The file has no observed type, so ``gpu_type`` is the first type column and
``duration_s`` its run time. Note (hydra_cases/README.md): the "A100" and "GTX2080Ti" columns are
really PAI T4/P100 run times under those names. Rows keep file order (Hydra runs the first N).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import LocatedError, short
from traces.schema import RUNTIME_PREFIX, JobTrace, finalize, identifiers, numeric, read_csv_rows

NON_TYPE_COLUMNS = ("", "Unnamed: 0", "job_name", "norm_job_submit_time", "ddl")
REQUIRED = ["job_name", "norm_job_submit_time", "ddl"]


def load(path: str | Path) -> JobTrace:
    """Load a Hydra case file; ``ddl`` is an absolute deadline on the submit clock (``inf`` = none)."""
    rows, names = read_csv_rows(path, required=REQUIRED)
    lines = rows["line"].to_numpy()
    type_cols = [c for c in names if c not in NON_TYPE_COLUMNS]
    if not type_cols:
        raise LocatedError(path, "no GPU-type run-time column in the header", line=1, field="(GPU type columns)")
    canon: dict[str, str] = {}
    for col in type_cols:
        try:
            gpu = canonical_gpu_type(col)
        except UnknownGpuTypeError as exc:
            raise LocatedError(path, f"column is not a GPU type: {exc.brief}", line=1, field=col) from None
        if gpu in canon.values():
            first = next(c for c, g in canon.items() if g == gpu)
            raise LocatedError(path, f"names the same GPU type ({gpu}) as column {short(first)}", line=1, field=col)
        canon[col] = gpu
    runtimes = {col: numeric(rows[col], path, lines, col, min_value=0.0) for col in type_cols}
    submit = numeric(rows["norm_job_submit_time"], path, lines, "norm_job_submit_time", min_value=0.0)
    ddl = numeric(rows["ddl"], path, lines, "ddl", allow_nan=True, allow_inf=True, min_value=0.0)
    early = ddl < submit
    if early.any():
        i = int(np.argmax(early))
        raise LocatedError(path, f"deadline {ddl[i]:g} lies before the submit time {submit[i]:g}",
                           line=int(lines[i]), field="ddl")
    first = type_cols[0]
    df = pd.DataFrame({
        "job_id": identifiers(rows["job_name"], path, lines, "job_name", unique=True),
        "submit_s": submit,
        "num_gpus": 1,
        "duration_s": runtimes[first],
        "gpu_type": canon[first],
        "deadline_s": np.where(np.isinf(ddl), np.nan, ddl),
        "user": "",
        "workload": "",
        "line": lines,
    })
    for col in type_cols:
        df[RUNTIME_PREFIX + canon[col]] = runtimes[col]
    return finalize(df, path, "hydra", deadlines_stated=True)
