"""A resumable results file: one JSON object per line, appended as each result comes.

Why one class: a long experiment must survive an interruption; each appends a row per finished
run and, on a rerun, skips the runs whose key (a few of the row's fields) is already there.
"""

from __future__ import annotations

import json
from pathlib import Path


class ResultsLog:
    """``path`` (JSON lines) read back on creation; ``key_fields`` name what identifies a run."""

    def __init__(self, path: Path, key_fields: tuple[str, ...]) -> None:
        self.path, self.key_fields = path, key_fields
        self.rows = [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []
        self.done = {self.key(r) for r in self.rows}

    def key(self, row: dict) -> tuple:
        return tuple(row[f] for f in self.key_fields)

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.done.add(self.key(row))
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=float) + "\n")
