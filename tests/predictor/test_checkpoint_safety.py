"""Checkpoints from strangers and the limits of training (issue 31, findings 1, 2, 4, 7): a crafted
checkpoint never runs code, a FIFO or a device is refused at once, an existing file is never
replaced without --overwrite, and time limits hold within an epoch."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from predictor import methods
from predictor.checkpoint_file import CheckpointError
from predictor.checkpoints import CHECKPOINT_DIR
from predictor.cli import main as cli
from predictor.common.op_trace import write_traces
from predictor.methods import ets
from tests.cli_checks import one_line_error as _one_line_error
from tests.predictor.ets_data import tiny_traces

REPO = Path(__file__).resolve().parents[2]
SHIPPED = CHECKPOINT_DIR / "ets-T4.pt"


class WritesMarker:
    """Unpickling this object calls ``open(marker, "w")``: the file appears if the pickle ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def hostile_checkpoints(folder: Path) -> tuple[Path, list[Path]]:
    """A marker path and checkpoints whose loading would create it: a raw pickle, and the old
    format's envelope correctly sealed around a hostile body (whoever writes it computes the hash)."""
    marker = folder / "code-ran"
    raw = folder / "raw.pt"
    torch.save({"format": 1, "method": "ets", "payload": WritesMarker(marker)}, raw)
    body = io.BytesIO()
    torch.save({"format": 1, "method": "ets", "x": WritesMarker(marker)}, body)
    payload = body.getvalue()
    sealed = folder / "sealed.pt"
    torch.save({"envelope": "ets-checkpoint/sha256", "sha256": hashlib.sha256(payload).hexdigest(),
                "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}, sealed)
    return marker, [raw, sealed]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("data")
    write_traces(directory, tiny_traces())
    return directory


def one_line_error(result, *fragments: str) -> str:
    return _one_line_error(result, *fragments, codes=(1,), alone=True)


def test_a_crafted_checkpoint_runs_no_code_in_any_command(tmp_path, data):
    marker, files = hostile_checkpoints(tmp_path)
    for ckpt in files:
        commands = [["predict", "--ckpt", ckpt, "alexnet"], ["evaluate", "--ckpt", ckpt, "--data", data],
                    ["calibrate", "--ckpt", ckpt, "--data", data, "--out", tmp_path / "c.pt"],
                    ["finetune", "--ckpt", ckpt, "--data", data, "--out", tmp_path / "f.pt"],
                    ["checkpoint", "info", ckpt]]
        for args in commands:
            one_line_error(CliRunner().invoke(cli, [str(a) for a in args]), f"{ckpt}: a pickled checkpoint",
                           "ets checkpoint convert --trust FILE")
            assert not marker.exists(), (args, "the checkpoint ran code")
        with pytest.raises(CheckpointError):
            methods.load(ckpt)
        # converting it does not run it either: torch's weights-only unpickler refuses the call
        one_line_error(CliRunner().invoke(cli, ["checkpoint", "convert", "--trust", str(ckpt)]),
                       f"{ckpt}: the pickle asks for more than data", "refused")
        assert not marker.exists() and ckpt.exists() and not ckpt.with_name(ckpt.name + ".pickled").exists()


def test_the_package_never_unpickles():
    sources = [p for folder in ("predictor", "simulator", "policies", "traces", "experiments")
               for p in (REPO / folder).rglob("*.py")]
    for path in sources:
        text = path.read_text()
        assert "weights_only=False" not in text and "pickle.load" not in text, path


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``ets`` in a child process under a 4 GB address-space limit (torch alone maps 3) and a
    time limit, so that a file read whole or a blocking open fails the test instead of taking the
    machine down."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
            "from predictor.cli import main; sys.argv = ['ets', *sys.argv[1:]]; main()")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_as_checkpoint_is_refused_at_once(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "pipe.pt"
        os.mkfifo(path)
        what = "a named pipe (FIFO)"
    else:
        path = Path("/dev/zero")
        what = "a device"
    done = run_cli("predict", "--ckpt", str(path), "alexnet", timeout=30)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"Error: {path}: is {what}, not a regular checkpoint file", done.stderr


def test_an_existing_file_is_never_replaced_without_overwrite(tmp_path, data):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    for args in (["train", "--data", data, "--out", notes],
                 ["finetune", "--ckpt", SHIPPED, "--data", data, "--out", notes],
                 ["calibrate", "--ckpt", SHIPPED, "--data", data, "--out", notes]):
        one_line_error(CliRunner().invoke(cli, [str(a) for a in args]),
                       f"--out {notes} already exists; pass --overwrite")
        # --overwrite replaces checkpoints only: a mistyped --out never loses a file
        one_line_error(CliRunner().invoke(cli, [str(a) for a in args] + ["--overwrite"]),
                       f"--out {notes} exists and is not a file this command writes")
        assert notes.read_text() == "my notes"
    copy = tmp_path / "copy.pt"
    copy.write_bytes(SHIPPED.read_bytes())
    one_line_error(CliRunner().invoke(cli, ["calibrate", "--ckpt", str(copy), "--data", str(data)]),
                   f"--out {copy} already exists; pass --overwrite")  # in place only when asked
    assert copy.read_bytes() == SHIPPED.read_bytes()


@pytest.mark.parametrize("minutes", ["0", "-1", "nan", "inf"])
def test_a_time_limit_must_be_positive(data, tmp_path, minutes):
    for command in (["train", "--data", str(data)], ["finetune", "--ckpt", str(SHIPPED), "--data", str(data)]):
        result = CliRunner().invoke(cli, [*command, "--out", str(tmp_path / "m.pt"), "--minutes", minutes])
        assert result.exit_code == 2 and "--minutes" in result.output, result.output
        assert not (tmp_path / "m.pt").exists()


def test_the_time_limit_holds_within_an_epoch(monkeypatch):
    """A clock that advances 1 s per reading and a 3 s budget: training stops after a few
    batches of its first epoch, not at the end of it."""
    traces = tiny_traces()
    ids = sorted(traces["config_id"].unique())
    train, val = traces[traces["config_id"].isin(ids[:-2])], traces[traces["config_id"].isin(ids[-2:])]
    config = ets.EtsConfig(hidden=8, layers=1, batch_size=1, max_epochs=5, max_minutes=3 / 60)
    windows = len(ets.make_windows(ets.fit_features(train, top_k=config.top_k), train, config.width,
                                   config.stride).index)
    assert windows > 20  # one batch per window: a full epoch would take >20 clock readings
    steps = {"count": 0}
    real_step = torch.optim.Adam.step

    def counted(self, *args, **kwargs):
        steps["count"] += 1
        return real_step(self, *args, **kwargs)

    ticks = iter(range(10**6))
    monkeypatch.setattr("predictor.methods.training.time.perf_counter", lambda: float(next(ticks)))
    monkeypatch.setattr(torch.optim.Adam, "step", counted)
    model = ets.train(train, val, config, progress=False)
    assert len(model.history) == 1 and steps["count"] <= 4, steps


def test_an_import_replaces_held_iterations_only_with_overwrite(tmp_path):
    trace = REPO / "tests" / "fixtures" / "kineto" / "new_schema.json"
    args = ["import", "kineto", str(trace), "--out", str(tmp_path / "data")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir()}
    one_line_error(CliRunner().invoke(cli, args), "already holds 1 of the imported iteration(s)", "--overwrite")
    assert {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir()} == before
    assert CliRunner().invoke(cli, [*args, "--overwrite"]).exit_code == 0


def test_refitting_the_emulator_replaces_its_files_only_with_overwrite(tmp_path, shared_dir):
    params = tmp_path / "params.json"
    params.write_text("{}")
    result = CliRunner().invoke(cli, ["devices", "calibrate", "--calibration", str(shared_dir / "calibration"),
                                      "--out", str(params), "--kernel-model", str(tmp_path / "k.json"),
                                      "--report", str(tmp_path / "report"), "--cache", str(tmp_path / "seq.parquet")])
    one_line_error(result, f"--out {params} already exists; pass --overwrite")
    assert params.read_text() == "{}" and not (tmp_path / "k.json").exists()
