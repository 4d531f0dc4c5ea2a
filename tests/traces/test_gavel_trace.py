"""Gavel's trace format (``--trace gavel:PATH``): a 3-line fixture timed by a tiny throughputs file
written here (run time = steps / throughput, exactly), the older msr format and its conversion,
the bad-input catalogue, and ``simrun --trace gavel:PATH --policy fifo --predictor truth`` end to
end on Gavel's kind of cluster (one GPU per server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.common.inputs import LocatedError
from simulator.cli import main as simrun
from traces import gavel
from traces.registry import load_trace

# Gavel's throughputs file: worker type -> "(job type, scale factor)" -> {"null": steps/s, ...}
THROUGHPUTS = {
    "k80": {"('ResNet-18 (batch size 64)', 1)": {"null": 2.0}, "('Transformer (batch size 128)', 1)": {"null": 1.0},
            "('ResNet-50 (batch size 128)', 2)": {"null": 0.0}},
    "p100": {"('ResNet-18 (batch size 64)', 1)": {"null": 8.0}, "('Transformer (batch size 128)', 1)": {"null": 3.0},
             "('ResNet-50 (batch size 128)', 2)": {"null": 1.6}},
    "v100": {"('ResNet-18 (batch size 64)', 1)": {"null": 10.0, "('Transformer (batch size 128)', 1)": [5.0, 2.0]},
             "('Transformer (batch size 128)', 1)": {"null": 4.0}, "('ResNet-50 (batch size 128)', 2)": {"null": 2.5}},
    "v100_unconsolidated": {"('ResNet-18 (batch size 64)', 1)": {"null": 999.0}},  # not used
}
LINES = [  # job type, command, working dir, num_steps_arg, needs_data_dir, steps, scale factor, weight, SLO, arrival
    "ResNet-18 (batch size 64)\tpython3 main.py --data_dir=%s/cifar10 --batch_size 64\timage_classification/cifar10"
    "\t--num_steps\t1\t1000\t1\t1\t-1.000000\t0",
    "Transformer (batch size 128)\tpython3 train.py -batch_size 128\ttranslation\t-step\t1\t600\t1\t1\t-1.000000\t0",
    "ResNet-50 (batch size 128)\tpython3 main.py -b 128\timage_classification/imagenet\t--num_minibatches\t1\t500"
    "\t2\t5\t-1.000000\t120.5",
]


@pytest.fixture
def throughputs(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(THROUGHPUTS))
    monkeypatch.setenv(gavel.THROUGHPUTS_VARIABLE, str(path))
    return path


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def expect_error(spec: str, path: Path, line: int | None, field: str | None, text: str) -> str:
    with pytest.raises(LocatedError) as info:
        load_trace(spec)
    err, message = info.value, str(info.value)
    assert "\n" not in message and (err.path, err.line, err.field) == (str(path), line, field), message
    assert text in message, message
    return message


def test_run_times_are_steps_over_gavels_throughputs(tmp_path, throughputs):
    trace = load_trace(f"gavel:{write(tmp_path / 'three.trace', *LINES)}")
    j = trace.jobs.set_index("job_id")
    assert trace.kind == "gavel" and trace.deadlines_stated and trace.excluded == {}
    assert trace.meta["throughputs"] == str(throughputs) and trace.meta["format"] == "gavel (10 fields)"
    assert list(trace.jobs["job_id"]) == ["0", "1", "2"]  # Gavel's job ids: file order
    assert j["submit_s"].tolist() == [0.0, 0.0, 120.5] and j["num_gpus"].tolist() == [1, 1, 2]
    assert j["workload"].tolist() == ["ResNet-18 (batch size 64)", "Transformer (batch size 128)",
                                      "ResNet-50 (batch size 128)"]
    assert j["steps"].tolist() == [1000.0, 600.0, 500.0] and j["priority_weight"].tolist() == [1.0, 1.0, 5.0]
    assert trace.runtime_types() == ["K80", "P100", "V100"]  # the unconsolidated entries are not read
    assert j["runtime_s:K80"].tolist() == [1000 / 2.0, 600 / 1.0, np.inf]  # throughput 0: cannot run
    assert j["runtime_s:P100"].tolist() == [1000 / 8.0, 600 / 3.0, 500 / 1.6]
    assert j["runtime_s:V100"].tolist() == [1000 / 10.0, 600 / 4.0, 500 / 2.5]
    assert j["throughput:K80"].tolist() == [2.0, 1.0, 0.0] and j["throughput:V100"].tolist() == [10.0, 4.0, 2.5]
    assert (j["gpu_type"] == "V100").all() and j["duration_s"].tolist() == j["runtime_s:V100"].tolist()
    assert j["deadline_s"].isna().all()


def test_the_throughputs_file_can_be_named_by_the_loader(tmp_path, throughputs, monkeypatch):
    monkeypatch.setenv(gavel.THROUGHPUTS_VARIABLE, str(tmp_path / "absent.json"))
    trace = gavel.load(write(tmp_path / "t.trace", *LINES), throughputs=throughputs)
    assert trace.meta["throughputs"] == str(throughputs)
    expect_error(f"gavel:{tmp_path / 't.trace'}", tmp_path / "absent.json", None, None, "file not found")


@pytest.mark.parametrize("fields,line,field,text", [
    (9, 2, "arrival_time", "line has 9 tab-separated field(s), expected 10 like line 1"),
    (11, 2, "arrival_time", "line has 11 tab-separated field(s), expected 10"),
])
def test_a_line_with_a_wrong_field_count_is_one_line_naming_it(tmp_path, throughputs, fields, line, field, text):
    parts = LINES[1].split("\t")
    bad = "\t".join(parts[:fields] if fields < 10 else parts + ["x"] * (fields - 10))
    path = write(tmp_path / "bad.trace", LINES[0], bad, LINES[2])
    expect_error(f"gavel:{path}", path, line, field, text)


@pytest.mark.parametrize("change,line,field,text", [
    ((6, "0"), 1, "scale_factor", "below the minimum 1"),
    ((6, "-1"), 1, "scale_factor", "below the minimum 1"),
    ((5, "1.5"), 1, "total_steps", "not a whole number"),
    ((9, "soon"), 1, "arrival_time", "not a number"),
    ((0, "VGG-16 (batch size 8)"), 1, "job_type", "no throughput for ('VGG-16 (batch size 8)', 1) on K80"),
    ((6, "4"), 1, "job_type", "at scale factor(s) 1 only"),
])
def test_bad_fields_are_one_line_naming_line_and_field(tmp_path, throughputs, change, line, field, text):
    parts = LINES[0].split("\t")
    parts[change[0]] = change[1]
    path = write(tmp_path / "bad.trace", "\t".join(parts))
    expect_error(f"gavel:{path}", path, line, field, text)


def test_other_layouts_are_refused(tmp_path, throughputs):
    path = write(tmp_path / "csv.trace", "a,b,c")
    expect_error(f"gavel:{path}", path, 1, None, "Gavel's trace format has 10")
    path = write(tmp_path / "blank.trace", LINES[0], "", LINES[1])
    expect_error(f"gavel:{path}", path, 2, "command", "line has 1 tab-separated field(s)")
    nothing = {"k80": {"('ResNet-18 (batch size 64)', 1)": {"null": 0.0}}}
    throughputs.write_text(json.dumps(nothing))
    path = write(tmp_path / "one.trace", LINES[0])
    expect_error(f"gavel:{path}", path, 1, "job_type", "no GPU type can run it")
    throughputs.write_text(json.dumps({"k80": {"ResNet-18": {"null": 1.0}}}))
    expect_error(f"gavel:{path}", throughputs, None, "k80.ResNet-18", "not a Gavel job-type key")


MSR = [  # job type, command, num_steps_arg, needs_data_dir, steps, arrival, scale factor
    "ResNet-18 (batch size 64)\tcd %s/gpusched/workloads/pytorch/image_classification/cifar10 && python3 main.py"
    "\t--num_steps\t1\t1000\t0.000000\t1",
    "Transformer (batch size 128)\tcd %s/gpusched/workloads/pytorch/translation && python3 train.py\t-step\t1\t600"
    "\t30.000000\t0",
    "ResNet-50 (batch size 128)\tcd %s/gpusched/workloads/pytorch/image_classification/imagenet && python3 main.py"
    "\t--num_minibatches\t1\t500\t60.000000\t2",
]


def test_msr_traces_are_read_as_gavels_parser_of_that_time_read_them(tmp_path, throughputs):
    trace = load_trace(f"gavel:{write(tmp_path / 'msr.trace', *MSR)}")
    assert trace.meta["format"] == "gavel-msr (7 fields)"
    assert trace.excluded == {gavel.SKIPPED_SCALE_0: 1}  # scale factor 0: skipped, counted
    j = trace.jobs
    assert j["job_id"].tolist() == ["0", "1"] and j["line"].tolist() == [1, 3]
    assert j["submit_s"].tolist() == [0.0, 60.0] and j["num_gpus"].tolist() == [1, 2]
    assert j["runtime_s:P100"].tolist() == [1000 / 8.0, 500 / 1.6] and j["priority_weight"].tolist() == [1.0, 1.0]


def test_msr_traces_convert_to_the_current_format(tmp_path, throughputs):
    source = write(tmp_path / "msr.trace", *MSR)
    assert gavel.convert_msr(source, tmp_path / "new.trace") == 2
    lines = (tmp_path / "new.trace").read_text().splitlines()
    assert lines[0].split("\t") == ["ResNet-18 (batch size 64)", "python3 main.py", "image_classification/cifar10",
                                    "--num_steps", "1", "1000", "1", "1", "-1.000000", "0"]
    assert lines[1].split("\t")[2] == "image_classification/imagenet" and lines[1].split("\t")[-1] == "60"
    old, new = gavel.load(source), gavel.load(tmp_path / "new.trace")
    columns = [c for c in old.jobs.columns if c != "line"]
    pd.testing.assert_frame_equal(old.jobs[columns], new.jobs[columns])
    with pytest.raises(LocatedError, match="not an msr trace"):
        gavel.convert_msr(tmp_path / "new.trace", tmp_path / "again.trace")


CLUSTER = """name: gavel-4-4-4
nodes:
  - {gpu_type: V100, num_gpus: 1, count: 4}
  - {gpu_type: P100, num_gpus: 1, count: 4}
  - {gpu_type: K80, num_gpus: 1, count: 4}
"""


def test_simrun_runs_a_gavel_trace_end_to_end(tmp_path, throughputs):
    trace = write(tmp_path / "three.trace", *LINES)
    cluster = tmp_path / "gavel.yaml"
    cluster.write_text(CLUSTER)
    out = tmp_path / "run"
    result = CliRunner().invoke(simrun, ["--trace", f"gavel:{trace}", "--cluster", str(cluster), "--policy", "fifo",
                                         "--predictor", "truth", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    jobs = pd.read_parquet(out / "jobs.parquet").set_index("job_id")
    # FIFO: the type with the most free GPUs (ties: cluster order) among those the job can run on
    assert jobs["gpu_type"].to_dict() == {"0": "V100", "1": "P100", "2": "V100"}  # job 2: not K80 (throughput 0)
    assert jobs["end"].to_dict() == {"0": 1000 / 10.0, "1": 600 / 3.0, "2": 120.5 + 500 / 2.5}
    assert jobs["deadline"].isna().all()  # Gavel's traces have none, and none were made up
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["trace"]["deadline_fraction_applied"] == 0.0
    assert manifest["trace"]["loader"]["throughputs"] == str(throughputs)


def test_the_default_throughputs_are_gavels_simulation_file_in_shared(shared_dir, monkeypatch):
    for name in (gavel.THROUGHPUTS_VARIABLE, "ETS_CALIBRATION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ETS_SHARED", str(shared_dir))
    path = gavel.default_throughputs()
    assert path == shared_dir / "calibration" / gavel.THROUGHPUTS_FILE
    if not path.is_file():
        pytest.skip(f"{path} not found")
    table = gavel.read_throughputs(path)
    assert list(table) == ["K80", "P100", "V100"] and all(len(t) == 83 for t in table.values())
    zero = sorted(key for gpu, t in table.items() for key, value in t.items() if value == 0)
    assert zero == [("ResNet-50 (batch size 128)", 2), ("ResNet-50 (batch size 128)", 4),
                    ("ResNet-50 (batch size 128)", 8)]  # all on K80: "cannot run there"
