"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data directory: $ETS_SHARED, default <repo>/../shared; skips tests when absent."""
    path = Path(os.environ.get("ETS_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        pytest.skip(f"shared data directory {path} not found: set ETS_SHARED")
    return path
