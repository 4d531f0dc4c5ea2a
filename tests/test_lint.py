"""The code is lint-clean under the project's ruff configuration (pyproject.toml, [tool.ruff]).

Why: a rule set nobody runs drifts; this runs ruff's own command on the tree, and on a file with a
known finding, which must fail, so the check is known to read the configuration and the code.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    if shutil.which("ruff") is None:
        pytest.skip("ruff is a test dependency: pip install '.[test]'")
    return subprocess.run(["ruff", "check", "--no-cache", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_tree_is_lint_clean():
    result = ruff(".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_known_finding_is_reported_under_the_project_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\nfrom typing import Callable\n\nx: Callable = print\n")
    result = ruff(".", "--output-format", "concise", cwd=tmp_path)
    assert result.returncode == 1
    assert "F401" in result.stdout  # unused import (pyflakes)
    assert "UP035" in result.stdout  # typing.Callable (pyupgrade: one of the project's chosen rules)
