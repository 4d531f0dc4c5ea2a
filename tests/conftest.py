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


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n 2``), one PyTorch thread per test process, and in the processes its
    tests start: two processes of two threads each on two cores fight over them (measured
    2026-12-08 on the 2-core VM: the suite took 10 min so, 14 min in one process)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data directory: $ETS_SHARED, default <repo>/../shared; skips tests when absent."""
    path = Path(os.environ.get("ETS_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        pytest.skip(f"shared data directory {path} not found: set ETS_SHARED")
    return path
