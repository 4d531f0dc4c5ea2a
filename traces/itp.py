"""Microsoft ITP 2021 job traces (ElasticFlow, Gu et al. ASPLOS'23): ``clusterNN.csv``.

Why: a second real Microsoft workload (10 clusters, 2021; not Philly) with clean
``job_id, submission_time, duration, num_gpu`` rows, for multi-cluster or robustness runs.
It records no GPU type, user or status: ``gpu_type``, ``user`` and ``workload`` are "".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traces.schema import JobTrace, finalize, gpu_counts, identifiers, numeric, read_csv_rows

COLUMNS = ["job_id", "submission_time", "duration", "num_gpu"]


def load(path: str | Path) -> JobTrace:
    """Load one ITP cluster file; times are seconds from the start of collection."""
    rows, _ = read_csv_rows(path, required=COLUMNS)
    lines = rows["line"].to_numpy()
    df = pd.DataFrame({
        "job_id": identifiers(rows["job_id"], path, lines, "job_id", unique=True),
        "submit_s": numeric(rows["submission_time"], path, lines, "submission_time", min_value=0.0),
        "num_gpus": gpu_counts(numeric(rows["num_gpu"], path, lines, "num_gpu"), path, lines, "num_gpu"),
        "duration_s": numeric(rows["duration"], path, lines, "duration", min_value=0.0),
        "gpu_type": "",
        "deadline_s": np.nan,
        "user": "",
        "workload": "",
        "line": lines,
    })
    return finalize(df, path, "itp")
