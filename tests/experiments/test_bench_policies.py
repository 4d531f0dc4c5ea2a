"""experiments.bench_policies: which runs a command asks for, and a clear word when there are none.

Why: ``--policy`` names specs that no case lists (``gavel:objective=ftf``); it used to filter each
case's own list, ran nothing and ended in a traceback. The runs themselves (child processes,
minutes each) are replaced by a recorder here.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from experiments import bench_policies


def fake_row(case, policy: str) -> dict:
    return {"case": case.name, "policy": policy, "status": "ok", "jobs": 10, "load_s": 0.0, "wall_s": 2.0,
            "policy_s": 1.0, "decisions": 20, "events": 20, "jct_mean": 1.0, "tardiness_total": 0.0,
            "peak_rss_mib": 1.0, "bare_s": float("nan")}


@pytest.fixture
def ran(monkeypatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def measure(case, policy, limit_s):
        calls.append((case.name, policy))
        return fake_row(case, policy)

    monkeypatch.setattr(bench_policies, "measure", measure)
    return calls


def test_policy_specs_run_on_each_case_given(tmp_path, ran):
    args = ["--out", str(tmp_path), "--case", "pai-like-10k", "--case", "pai-like-100k",
            "--policy", "gavel:objective=ftf", "--policy", "fifo"]
    result = CliRunner().invoke(bench_policies.main, args)
    assert result.exit_code == 0, result.output
    assert ran == [("pai-like-10k", "gavel:objective=ftf"), ("pai-like-10k", "fifo"),
                   ("pai-like-100k", "gavel:objective=ftf"), ("pai-like-100k", "fifo")]
    # the scaling table lists the policies run, ONLINE's first: 2.0 / 2.0 s
    assert "| fifo | 1.00 |" in result.output and "| gavel:objective=ftf | 1.00 |" in result.output
    assert "| hydra |" not in result.output
    again = CliRunner().invoke(bench_policies.main, args)  # a rerun skips what results.csv holds
    assert again.exit_code == 0 and len(ran) == 4


def test_a_case_without_its_policy_list_runs_its_own(tmp_path, ran):
    result = CliRunner().invoke(bench_policies.main, ["--out", str(tmp_path), "--case", "pai-like-10k"])
    assert result.exit_code == 0, result.output
    assert ran == [("pai-like-10k", p) for p in bench_policies.CASES["pai-like-10k"].policies]


def test_nothing_to_run_is_said_in_one_line(tmp_path, ran, monkeypatch):
    monkeypatch.setenv("ETS_SHARED", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(bench_policies.main, ["--out", str(tmp_path / "out"), "--case", "philly-2k"])
    assert result.exit_code == 2 and ran == []
    assert "nothing to run: no case available (philly-2k)" in result.output
    assert "Traceback" not in result.output
