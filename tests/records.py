"""Job traces built from dicts, for tests: every field checked as a loaded trace's would be."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traces.schema import JobTrace, finalize


def from_records(records: list[dict], source: str = "<table>", kind: str = "table") -> JobTrace:
    """Build a checked trace from dicts; missing optional fields get defaults."""
    rows = []
    for i, rec in enumerate(records, start=1):
        row = {"gpu_type": "", "deadline_s": np.nan, "user": "", "workload": "", "line": i}
        row.update(rec)
        row.setdefault("job_id", str(i - 1))
        rows.append(row)
    return finalize(pd.DataFrame(rows), source, kind)
