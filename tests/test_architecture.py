"""The architecture's contract holds: every import points down the layers, no cycles in a package.

Why: the layering (docs/architecture.md) is only real if a change that breaks it fails. The
contract lives in pyproject.toml ([tool.importlinter]); this runs import-linter's own command on
it, and on the reversed layering, which must fail, so the check is known to see the imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["experiments", "simulator", "policies", "traces", "predictor"]


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter", reason="import-linter is a test dependency: pip install '.[test]'")
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
               str(config), "--no-cache", "--no-logo"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_imports_keep_the_layers_and_have_no_cycles():
    result = lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 kept, 0 broken" in result.stdout


def test_the_reversed_layering_is_broken_so_the_check_sees_imports(tmp_path):
    reversed_layers = ", ".join(f'"{p}"' for p in reversed(LAYERS))
    config = tmp_path / "reversed.toml"
    config.write_text(f"""[tool.importlinter]
root_packages = [{reversed_layers}]

[[tool.importlinter.contracts]]
name = "reversed"
type = "layers"
layers = [{reversed_layers}]
""")
    result = lint_imports(config)
    assert result.returncode != 0
    assert "reversed BROKEN" in result.stdout


def test_the_emulator_below_the_methods_is_checked(tmp_path):
    """The rooms' contract sees imports too: putting the emulator above the methods breaks it
    (the Habitat-style baseline reads GPU spec sheets through the emulator's `devices.specs`)."""
    config = tmp_path / "inner.toml"
    config.write_text("""[tool.importlinter]
root_packages = ["predictor"]

[[tool.importlinter.contracts]]
name = "emulator above methods"
type = "layers"
containers = ["predictor"]
layers = ["emulator", "methods"]
""")
    result = lint_imports(config)
    assert result.returncode != 0
    assert "emulator above methods BROKEN" in result.stdout


def copy_tree(tmp_path: Path) -> Path:
    """The source tree's packages (code only) and the project's contracts, under ``tmp_path``."""
    import shutil

    for package in LAYERS:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "data", "*.json", "*.parquet", "*.pt", "*.csv"))
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    return config


def lint_copy(tmp_path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
               str(tmp_path / "pyproject.toml"), "--no-cache", "--no-logo"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize(("module", "line", "broken"), [
    # the foundation reaching up into a method
    ("predictor.common.families", "import predictor.methods.ets", "Rooms of predictor"),
    # the emulator reaching up into the predictors' features
    ("predictor.emulator.devices.specs", "import predictor.features", "Rooms of predictor"),
    # one method borrowing from another instead of from base or training
    ("predictor.methods.habitat", "import predictor.methods.opbased", "Methods share through"),
    # the simulator reaching past the bridge into the emulator's capture
    ("simulator.timing", "import predictor.emulator.capture.opseq", "simulator, policies, traces"),
])
def test_an_import_planted_against_the_rooms_is_reported_broken(tmp_path, module, line, broken):
    """The rooms' contracts on a copy of the real code: kept as it is, broken by one planted import."""
    pytest.importorskip("importlinter", reason="import-linter is a test dependency: pip install '.[test]'")
    copy_tree(tmp_path)
    clean = lint_copy(tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    target = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    target.write_text(target.read_text() + f"\n{line}\n")
    result = lint_copy(tmp_path)
    assert result.returncode != 0
    assert any(broken in row and "BROKEN" in row for row in result.stdout.splitlines()), result.stdout
