"""Where the experiments find the shared real data: ``$ETS_SHARED``, else ``<repo>/../shared``.

Why one place: every experiment that reads ``../shared`` (traces, Hydra's cases, calibration
data) must honour the same override, and none may commit that data.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    return Path(os.environ.get("ETS_SHARED") or REPO.parent / "shared")
