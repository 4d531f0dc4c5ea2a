"""`python -m experiments.transfer --quick` on the real ETS traces (skipped without ../shared)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from experiments import transfer


def test_counts_and_summary_by_hand():
    assert transfer.counts_for(23, transfer.COUNTS) == [0, 1, 2, 5, 10, 20, 23]
    assert transfer.counts_for(4, transfer.COUNTS) == [0, 1, 2, 4]
    rows = pd.DataFrame([{"experiment": "T4", "seed": s, "n": 1, "method": "a", "mre": m}
                         for s, m in enumerate((0.1, 0.2, 0.3))]
                        + [{"experiment": "T4", "seed": s, "n": n, "method": "a", "mre": 0.1 * (s + 1)}
                           for s, n in enumerate((17, 23, 17))]
                        + [{"experiment": "T4", "seed": 0, "n": 2, "method": "a", "mre": 50.0}])
    table = transfer.table(rows).set_index("count")
    assert table.loc["1", "mean"] == pytest.approx(0.2) and table.loc["1", "sd"] == pytest.approx(0.1)
    assert table.loc["1", "cell"] == "20.0% ± 10.0%" and table.loc["1", "seeds"] == 3
    # every pool trace is one row over seeds whatever the pool's size; absurd errors are capped in print
    assert table.loc["all", "seeds"] == 3 and table.loc["all", "n"] == pytest.approx(19)
    assert table.loc["2", "cell"] == "> 1000% ± 0.0%"


def test_quick_transfer_on_real_traces(shared_dir, tmp_path):
    traces = shared_dir / "ets_traces"
    if not (traces / "T4").is_dir() or not (traces / "2080Ti").is_dir():
        pytest.skip(f"{traces}: no T4/ and 2080Ti/ ETS traces")
    out = tmp_path / "transfer"
    result = CliRunner().invoke(transfer.main, ["--quick", "--ets-traces", str(traces), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    t4 = [r for r in rows if r["experiment"] == "T4"]
    assert {r["n"] for r in t4} >= {0, 1} and all(r["mre"] >= 0 and r["test_traces"] >= 1 for r in rows)
    rtx = {(r["n"], r["method"]) for r in rows if r["experiment"] == "T4 -> 2080Ti"}
    bias, every = transfer.TUNES["scale"], transfer.TUNES["all"]
    assert {(0, f"real T4, {bias}"), (1, transfer.SCRATCH), (2, f"emulated T4, {every}")} <= rtx
    zero = [r for r in rows if r["n"] == 0 and r["experiment"] == "T4"]
    assert len({r["mre"] for r in zero}) == 1 and all(r["epochs"] == 0 for r in zero)  # N = 0: the parent alone
    for name in ("report.md", "summary.csv", "transfer.png", "transfer.pdf", "ets-T4-real.pt"):
        assert (out / name).stat().st_size > 0
    again = CliRunner().invoke(transfer.main, ["--quick", "--ets-traces", str(traces), "--out", str(out)])
    assert again.exit_code == 0, again.output  # resumed: nothing rerun
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)
