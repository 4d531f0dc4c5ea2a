"""Why the code has function-local imports: the command lines and the simulator must start without
torch (about 1.2 s and 400 MB to import on this machine), PyTorch Geometric or LightGBM, which
only training, prediction and emulation need. This checks it, so a top-level import that pulls
torch into `simrun --help` or a cached simulation fails here instead of slowing every start.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "torch_geometric", "lightgbm")
LIGHT = ("simulator.cli", "simulator.run", "simulator.engine", "policies.registry", "traces.registry",
         "predictor.cli", "predictor.cli.model", "predictor.cli.devices", "predictor.cli.checkpoint",
         "predictor.methods", "predictor.tables", "predictor.prediction")


def test_the_command_lines_and_the_simulator_start_without_torch():
    code = (f"import sys\nfor m in {LIGHT!r}: __import__(m)\n"
            f"print(','.join(h for h in {HEAVY!r} if h in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported at start: {done.stdout.strip()}"


def test_the_check_sees_a_heavy_import():
    code = f"import sys\nimport predictor.methods.ets\nprint(','.join(h for h in {HEAVY!r} if h in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "torch" in done.stdout
