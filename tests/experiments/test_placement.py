"""experiments/placement.py: the table's ratios to blind timing and intervals, by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.placement import BLIND, PLACEMENTS, Setting, grid, headline, markdown, table


def _row(policy, placement, communication, seed, jct, share=0.0, predictor="truth"):
    return {"status": "ok", "workload": "philly-like:10", "cluster": "modern", "policy": policy,
            "predictor": predictor, "placement": placement, "trace": None, "communication": communication, "seed": seed,
            "jct_mean": jct, "tardiness_mean": 0.0, "utilization": 0.5, "communication_share": share}


def test_ratios_to_blind_pool_over_seeds_and_intervals_follow_the_t_formula():
    rows = [_row("fifo", "consolidate", False, 0, 100.0), _row("fifo", "consolidate", False, 1, 300.0),
            _row("fifo", "spread", True, 0, 120.0, 0.1), _row("fifo", "spread", True, 1, 330.0, 0.3)]
    out = table(pd.DataFrame(rows)).set_index("placement")
    assert out.loc[BLIND, "jct_vs_blind"] == 1.0
    assert out.loc["spread", "jct_vs_blind"] == pytest.approx(450 / 400)  # pooled, not the mean of 1.2 and 1.1
    # two seeds: t(0.975, 1) = 12.706; ratios 1.2 and 1.1: sd 0.0707, half-width 12.706 * 0.0707 / sqrt(2)
    assert out.loc["spread", "jct_vs_blind_ci"] == pytest.approx(12.7062 * 0.05, rel=1e-4)
    assert out.loc["spread", "communication_share"] == pytest.approx(0.2)
    assert "| philly-like on modern | fifo | truth | spread |" in markdown(out.reset_index())
    assert "| philly-like on modern | fifo | – | 1.125 ± 0.635 | – | – / 20.0% |" in headline(out.reset_index())


def test_the_grid_has_one_blind_run_per_policy_and_seed_and_every_rule_per_predictor():
    configs = grid(2, [Setting("philly-like:20", "modern", ("truth", "noisy-comm:0.2"), ("fifo",))])
    blind = [c for c in configs if not c.communication]
    assert len(blind) == 2 and all(c.predictor == "truth" and c.bind for c in blind)
    timed = {(c.predictor, c.placement, c.seed) for c in configs if c.communication}
    assert timed == {(p, r, s) for p in ("truth", "noisy-comm:0.2") for r in PLACEMENTS for s in (0, 1)}
