"""A bound run reads the workload set once and hands it on (binding, model predictor).

Why: the workload set is a 2 MB table validated on every read; reading it three times per run was
the simulator's data flowing back and forth instead of one way.
"""

from __future__ import annotations

import traces.workloads
from simulator.run import RunConfig, execute


def test_a_bound_model_run_reads_the_catalog_once(monkeypatch, tmp_path):
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    reads = []
    real = traces.workloads.read_workloads

    def counted(*args, **kwargs):
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(traces.workloads, "read_workloads", counted)
    config = RunConfig(policy="hydra:deadline_quantile=0.9", predictor="ets", workload="pai-like:8", seed=3)
    run = execute(config)
    assert len(reads) == 1
    assert run.summary["jobs"] == 8 and run.manifest["binding"]["configs"] >= 1
