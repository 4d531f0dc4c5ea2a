"""``simrun`` end to end: files written, summary keys, and clean one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SUMMARY_KEYS = {"jobs", "rejected", "jct_mean", "jct_p50", "jct_p95", "jct_p99", "queue_mean", "makespan",
                "tardiness_total", "tardiness_mean", "late_jobs", "utilization", "policy_seconds",
                "wall_seconds"}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_default_run_writes_records_summary_and_manifest(tmp_path):
    out = tmp_path / "run"
    result = invoke("--policy", "sjf", "--predictor", "noisy:0.1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "jobs completed" in result.output and "2,000" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["jobs"] == 2000 and summary["rejected"] == 0
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert len(jobs) == 2000 and (jobs["jct"] >= jobs["true_runtime"] - 1e-9).all()
    # the summary agrees with the records it was computed from
    assert summary["jct_mean"] == pytest.approx(jobs["jct"].mean())
    assert summary["late_jobs"] == int((jobs["end"] > jobs["deadline"]).sum())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["policy"] == "sjf" and manifest["predictor"]["mre"] == 0.1
    assert manifest["cluster"]["gpus"] == 36
    assert manifest["trace"]["source"] == "synthetic:pai-like:2000:seed=0"


def test_hydra_case_replay_uses_measured_per_type_runtimes(tmp_path):
    out = tmp_path / "h"
    result = invoke("--policy", "edf", "--predictor", "truth", "--trace", f"hydra:{FIXTURES / 'hydra_case.csv'}",
                    "--cluster", "hydra-light", "--out", str(out))
    assert result.exit_code == 0, result.output
    jobs = pd.read_parquet(out / "jobs.parquet").set_index("job_id")
    # 45 idle GPUs, 3 jobs: each starts at 0 on its fastest type (A100)
    assert list(jobs["gpu_type"]) == ["A100"] * 3 and (jobs["start"] == 0).all()
    assert jobs.loc["h01", "end"] == 2000 and jobs.loc["h01", "deadline"] == 4000
    assert jobs.loc["h03", "true_runtime"] == 1000


def test_limit_keeps_the_first_jobs_in_submit_order(tmp_path):
    out = tmp_path / "l"
    result = invoke("--policy", "fifo", "--predictor", "truth", "--trace",
                    f"philly:{FIXTURES / 'philly_jobs.csv'}", "--limit", "2", "--cluster", "philly:0.01",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    jobs = pd.read_parquet(out / "jobs.parquet")
    full = pd.read_csv(FIXTURES / "philly_jobs.csv")
    first_two = full.sort_values(full.columns[1], kind="stable").iloc[:2, 0].astype(str).tolist()
    assert jobs["job_id"].tolist() == first_two


@pytest.mark.parametrize("args, message", [
    (["--policy", "tetris", "--predictor", "truth"],
     "unknown policy 'tetris'; available: fifo, sjf, edf, allox, hydra"),
    (["--policy", "hydra:budget_ms=fast", "--predictor", "truth"], "option budget_ms='fast': expected a number"),
    (["--policy", "allox:window=0", "--predictor", "truth"], "expected a positive integer or 'all'"),
    (["--policy", "hydra:mode=batch", "--predictor", "truth"], "expected one of online, offline"),
    (["--policy", "fifo", "--predictor", "oracle"], "unknown predictor 'oracle'"),
    (["--policy", "fifo", "--predictor", "ets", "--cluster", "philly"], "no pretrained checkpoint for GPU type(s) P40"),
    (["--policy", "fifo:x=1", "--predictor", "truth"], "does not take option"),
    (["--policy", "fifo", "--predictor", "noisy:lots"], "noisy:<MRE> needs a number"),
    (["--policy", "fifo", "--predictor", "truth", "--cluster", "moon"], "unknown cluster 'moon'"),
    (["--policy", "fifo", "--predictor", "truth", "--trace", "nope:x.csv"], "unknown trace kind 'nope'"),
    (["--policy", "fifo", "--predictor", "truth", "--trace", "philly:/no/such.csv"], "/no/such.csv"),
    (["--policy", "fifo", "--predictor", "truth", "--workload", "alibaba:10"], "unknown"),
    (["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:ten"], "expected KIND:N"),
    (["--policy", "fifo", "--predictor", "truth", "--limit", "0"], "--limit must be >= 1"),
    (["--policy", "fifo", "--predictor", "truth", "--reference-gpu", "H900"], "unknown GPU type 'H900'"),
    (["--predictor", "truth"], "--policy and --predictor are required"),
])
def test_user_errors_are_one_clean_message(tmp_path, args, message):
    result = CliRunner().invoke(main, args + ["--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, (AttributeError, KeyError, TypeError))


def test_malformed_trace_row_names_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nb,5,ten,1\n")
    result = CliRunner().invoke(main, ["--policy", "fifo", "--predictor", "truth", "--trace", f"itp:{bad}",
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert f"{bad}:3" in result.output and "'duration'" in result.output and "'ten'" in result.output


def test_oversized_job_is_rejected_and_reported(tmp_path):
    trace = tmp_path / "itp.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nhuge,1,10,64\n")
    out = tmp_path / "o"
    result = invoke("--policy", "fifo", "--predictor", "truth", "--trace", f"itp:{trace}", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "jobs rejected           1" in result.output
    assert "job huge (line 3): needs 64 GPUs of one type; the largest pool has 16" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected"] == 1 and summary["jobs"] == 1


def test_help_documents_every_option():
    result = invoke("--help")
    for word in ("--policy", "--predictor", "--trace", "--workload", "--limit", "--cluster", "--seed",
                 "--out", "philly-json", "pai-sample", "itp", "hydra", "noisy:<MRE>", "hydra-light",
                 "summary.json"):
        assert word in result.output, word


def test_values_echoed_to_the_terminal_are_escaped(tmp_path):
    # a newline in the output folder forged a second "results in" line, an ESC in a cluster file's
    # name reached the terminal raw (issue 50); both now print escaped, each on its own line
    cluster = tmp_path / "c\x1b[2J.yaml"
    cluster.write_text("nodes:\n  - {gpu_type: V100, num_gpus: 8}\n")
    out = tmp_path / "o\nresults in elsewhere"
    result = invoke("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:10", "--cluster",
                    str(cluster), "--reference-gpu", "V100", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "| cluster c\\x1b[2J (8 GPUs)" in result.output
    results = [line for line in result.output.splitlines() if line.startswith("results in")]
    assert results == [f"results in {tmp_path}/o\\nresults in elsewhere/"]
    quiet = invoke("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:10", "--out",
                   str(tmp_path / "q\x1b]0;x\x07"), "--quiet")
    assert quiet.output == f"{tmp_path}/q\\x1b]0;x\\x07\n"
