"""Policy names and the ``NAME[:key=value,...]`` syntax of ``--policy``.

Why: one table that the CLI, sweeps and tests share, so a policy added here is usable
everywhere and documented in ``simrun --help``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from policies.allox import AlloxPolicy
from policies.base import Policy
from policies.edf import EdfPolicy
from policies.fifo import FifoPolicy
from policies.gavel import OBJECTIVES, GavelPolicy
from policies.hydra import DEFAULT_WORK, HydraPolicy
from policies.sjf import SjfPolicy
from policies.srtf import SrtfPolicy
from policies.tiresias import TiresiasPolicy
from predictor.common.inputs import SpecError

PREEMPTION_OPTIONS = ("lease=360 (seconds between rounds, >= 1; inf: never preempt), restart=10 (seconds to "
                      "resume, <= 86400, plus checkpoint_bytes / storage_gbps where the trace has them), "
                      "storage_gbps=2 (>= 0.001)")

# name -> (factory taking the parsed options, one-line help)
POLICIES: dict[str, tuple[Callable[..., Policy], str]] = {
    "fifo": (FifoPolicy, "strict arrival order; head job on the type with most free GPUs"),
    "sjf": (SjfPolicy, "least predicted run time over all (waiting job, free GPU type) pairs"),
    "edf": (EdfPolicy, "deadline jobs by deadline, then shortest; type with the most slack "
                       "[deadline_quantile=Q in (0,1): type of least Q-quantile tardiness]"),
    "allox": (AlloxPolicy, "min-cost matching of jobs to (GPU, queue position) slots "
                           "[window=50|N|all, alpha=1.0 (0,1], mode=online|offline]"),
    "hydra": (HydraPolicy, "deadline-aware greedy queue assignment with branch-and-bound ordering "
                           f"[work={DEFAULT_WORK['online']} online|{DEFAULT_WORK['offline']} offline|N|all "
                           "(search work per decision: the same plan on any machine), budget_ms=MS (a wall-clock "
                           "budget instead: plans depend on the machine), nodes=N|all, bnb=on|off, "
                           "mode=online|offline, window=100|N|all, deadline_quantile=Q in (0,1): tardiness planned "
                           "with Q-quantile run times]"),
    "srtf": (SrtfPolicy, "preemptive shortest remaining predicted time, heterogeneity-aware; reallocates every "
                         f"lease [{PREEMPTION_OPTIONS}]"),
    "tiresias": (TiresiasPolicy, "preemptive discretised 2D-LAS (Tiresias): queues by attained GPU-seconds, "
                                 "no run-time prediction [thresholds=3200 (a/b/...), starve=0 (off) or S, "
                                 f"{PREEMPTION_OPTIONS}]"),
    "gavel": (GavelPolicy, "Gavel's heterogeneity-aware LP allocation over predicted throughputs, realised in "
                           f"rounds as Gavel's simulator does [objective={'|'.join(OBJECTIVES)} (ftf: Themis's "
                           "finish-time fairness), reset=1920 (least seconds between allocation resets), "
                           "share=perf|isolated (max_min's normalisation), solver=ecos|highs (max_min's LP), "
                           f"{PREEMPTION_OPTIONS}]"),
}


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``name:key=value,key=value`` into the name and a dict of raw option strings."""
    name, _, rest = spec.strip().partition(":")
    options: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SpecError(f"policy option {item!r} in {spec!r} is not key=value")
        options[key.strip()] = value.strip()
    return name, options


def make_policy(spec: str) -> Policy:
    name, options = parse_spec(spec)
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r}; available: {', '.join(POLICIES)}")
    factory, _ = POLICIES[name]
    accepted = set(inspect.signature(factory).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise SpecError(f"policy {name!r} does not take option(s) {unknown}"
                        + (f"; it takes {sorted(accepted)}" if accepted else ""))
    return factory(**options)


def policy_help() -> str:
    return "; ".join(f"{name}: {text}" for name, (_, text) in POLICIES.items())
