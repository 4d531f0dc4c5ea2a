"""What `simrun` tells a user besides the summary: one-line warnings on stderr for input that is
legal but almost surely a mistake, overflowing counts refused under the file's own field name,
sane numbers for absurd durations, and progress bars on stderr that --quiet turns off and that
never change results."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.common.inputs import InputError
from simulator.cli import main
from simulator.cluster import resolve
from simulator.run import RunConfig, execute, load_workload, readable, sanity_warnings
from tests.cli_checks import one_line_error
from traces.registry import load_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def simrun(*args: str):
    return CliRunner().invoke(main, list(args))


def itp(tmp_path: Path, rows: list[tuple]) -> str:
    """An ITP trace file (job_id, submission_time, duration, num_gpu) as a --trace value."""
    path = tmp_path / "itp.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\n" + "".join(f"{','.join(map(str, r))}\n" for r in rows))
    return f"itp:{path}"


def cluster_file(tmp_path: Path, num_gpus) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(f"nodes:\n  - {{gpu_type: V100, num_gpus: {num_gpus}}}\n")
    return str(path)


def warnings_of(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def long_jobs(n: int) -> list[tuple]:
    """n one-GPU jobs a minute apart, each longer than the whole arrival span: while they arrive
    they keep n/2 GPUs busy on average."""
    return [(f"j{i}", 60 * i, 100_000, 1) for i in range(n)]


# -- warnings ----------------------------------------------------------------------------------

def test_an_overloaded_cluster_warns_with_how_much(tmp_path):
    out = tmp_path / "o"
    result = simrun("--policy", "fifo", "--predictor", "truth", "--trace", itp(tmp_path, long_jobs(60)),
                    "--cluster", cluster_file(tmp_path, 2), "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert warnings_of(result) == ["warning: offered load is 30 GPU-hours per hour against 2 GPUs (15x the "
                                   "cluster's capacity): jobs will mostly queue; use a larger --cluster or a "
                                   "--load-scale below 1"]
    assert "warning" not in result.stdout  # stderr only
    assert json.loads((out / "manifest.json").read_text())["warnings"] == [warnings_of(result)[0][len("warning: "):]]


@pytest.mark.parametrize("case", ["long jobs on 8 GPUs", "one batch", "philly-like:300", "pai-like:2000"])
def test_fitting_loads_do_not_warn(tmp_path, case):
    config = RunConfig(policy="fifo", predictor="truth")
    config = {  # 3.75x on 8 GPUs is a busy cluster, not a mistake; a batch has no arrival rate
        "long jobs on 8 GPUs": replace(config, trace=itp(tmp_path, long_jobs(60)), cluster=cluster_file(tmp_path, 8)),
        "one batch": replace(config, trace=f"hydra:{FIXTURES / 'hydra_case.csv'}", cluster="hydra-light"),
        "philly-like:300": replace(config, workload="philly-like:300"),
        "pai-like:2000": replace(config, workload="pai-like:2000"),
    }[case]
    assert sanity_warnings(load_workload(config), resolve(config.cluster), config) == []


def test_the_issues_case_philly_on_the_default_cluster_warns(shared_dir):
    trace = load_trace(f"philly:{shared_dir / 'traces' / 'philly' / 'rfold_philly_trace.csv'}")
    config = RunConfig(policy="fifo", predictor="truth")
    (warning,) = sanity_warnings(trace, resolve("default"), config)
    assert "GPU-hours per hour against 36 GPUs" in warning and "31x the cluster's capacity" in warning


def test_absurd_durations_warn_and_print_sanely(tmp_path):
    # up to the clock's exact range (1e12 s) a duration runs, with a warning past a year
    out = tmp_path / "o"
    result = simrun("--policy", "fifo", "--predictor", "truth", "--trace",
                    itp(tmp_path, [("a", 0, "1e12", 1), ("b", 5, "1e11", 1), ("c", 7, 10, 2)]), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert warnings_of(result) == ["warning: 2 job(s) run longer than a year (longest: job a, line 2, 31,688 "
                                   "years): check the trace's durations (their unit, or corrupt rows)"]
    assert max(len(line) for line in result.stdout.splitlines()[1:-1]) < 100  # the summary: no 300-digit JCT
    # exact: (1e12 + 1e11 + 10) / 3
    assert "JCT mean                366,666,666,670.0 s  (101,851,851.85 h)" in result.stdout
    assert "makespan                1.000e+12 s" in result.stdout


def test_a_duration_past_the_exact_clock_is_refused_naming_row_and_field(tmp_path):
    # 1e300 s used to run: 1e300 + 5 == 1e300, so the summary's numbers meant nothing (issue 50)
    result = simrun("--policy", "fifo", "--predictor", "truth", "--trace",
                    itp(tmp_path, [("a", 0, "1e300", 1), ("c", 7, 10, 2)]), "--out", str(tmp_path / "o"))
    one_line_error(result, "itp.csv:2: field 'duration_s': value 1e+300 is above the maximum 1e+12")
    assert not (tmp_path / "o").exists()


def test_readable_numbers():
    assert readable(1234.5, 1) == "1,234.5" and readable(999_999_999_999) == "999,999,999,999"
    assert readable(1e12) == "1.000e+12" and readable(-1e300) == "-1.000e+300"
    assert readable(float("inf")) == "inf" and readable(float("nan")) == "nan"


@pytest.mark.parametrize("scale, message", [
    ("1e-6", "--load-scale 1e-06 makes arrivals 1,000,000x sparser than in the trace"),
    ("1000", "--load-scale 1000 makes arrivals 1,000x denser than in the trace"),
])
def test_an_extreme_load_scale_warns(tmp_path, scale, message):
    result = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20", "--load-scale", scale,
                    "--out", str(tmp_path / "o"), "--quiet")
    assert result.exit_code == 0, result.output
    assert f"warning: {message}" in warnings_of(result)


def test_ordinary_runs_print_no_warning(tmp_path):
    result = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:200", "--load-scale", "2",
                    "--out", str(tmp_path / "o"), "--quiet")
    assert result.exit_code == 0 and result.stderr == ""


# -- overflowing integers ----------------------------------------------------------------------

def test_a_gpu_count_that_overflows_names_the_files_field(tmp_path):
    result = simrun("--policy", "fifo", "--predictor", "truth", "--trace",
                    itp(tmp_path, [("a", 0, 10, "1e20"), ("b", 5, 10, 1)]), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert "itp.csv:2: field 'num_gpu': GPU count 1e+20 is too large (it overflows a 64-bit integer)" in result.output
    assert "-9.22" not in result.output and "'num_gpus'" not in result.output


@pytest.mark.parametrize("value", ["100000000000000000000", "1025"])
def test_a_cluster_file_with_too_many_gpus_names_the_field(tmp_path, value):
    result = simrun("--policy", "fifo", "--predictor", "truth", "--cluster", cluster_file(tmp_path, value),
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"nodes[1]: field 'num_gpus' must be an integer >= 1 and <= 1,024, got {value}" in result.output


def test_a_cluster_too_large_in_total_is_refused_quickly(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n" + "  - {gpu_type: V100, num_gpus: 16, count: 50000}\n" * 2)
    with pytest.raises(InputError, match="1,600,000 GPUs; at most 1,000,000"):
        resolve(str(path))
    with pytest.raises(InputError, match="cluster scale 1e\\+20 is too large"):
        resolve("default:1e20")


# -- progress ----------------------------------------------------------------------------------

def test_progress_goes_to_stderr_and_quiet_silences_it(tmp_path):
    loud = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:50", "--out", str(tmp_path / "a"))
    assert loud.exit_code == 0, loud.output
    assert "simulating fifo" in loud.stderr and "job" in loud.stderr
    assert "simulating" not in loud.stdout
    quiet = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:50", "--out",
                   str(tmp_path / "b"), "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == f"{tmp_path / 'b'}\n"


def test_progress_does_not_change_results():
    config = RunConfig(policy="hydra", predictor="noisy:0.2", workload="philly-like:200")
    loud, quiet = execute(config, progress=True), execute(config, progress=False)
    timing = ["wall_seconds", "events_per_second", "policy_seconds"]
    assert loud.records.equals(quiet.records)
    assert {k: v for k, v in loud.summary.items() if k not in timing} == \
        {k: v for k, v in quiet.summary.items() if k not in timing}


def test_table_building_shows_progress_and_the_same_table(tmp_path, monkeypatch, capsys):
    from predictor.tables import truth_table
    from traces.workloads import read_workloads

    sequences = read_workloads()
    one = sequences[sequences["config_id"] == sorted(sequences["config_id"].unique())[0]]
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "loud"))
    loud = truth_table(one, ["T4"], progress=True).to_frame()
    assert "true iteration times on T4" in capsys.readouterr().err
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "quiet"))
    quiet = truth_table(one, ["T4"], progress=False).to_frame()
    assert capsys.readouterr().err == ""
    pd.testing.assert_frame_equal(loud, quiet)
