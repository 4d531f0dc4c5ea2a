"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# Property tests draw their examples from a fixed seed: the suite gives the same result on every
# run and machine (a failure found once is kept as an explicit test, not left to chance).
settings.register_profile("seeded", derandomize=True, database=None)
settings.load_profile("seeded")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data directory: $ETS_SHARED, default <repo>/../shared; skips tests when absent."""
    path = Path(os.environ.get("ETS_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        pytest.skip(f"shared data directory {path} not found: set ETS_SHARED")
    return path
