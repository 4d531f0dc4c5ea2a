"""Whether a CPU profile was disturbed: the CPU time other processes took while it ran.

Why: a CPU timing is only worth the conditions it was taken in. On a 2-core development
machine, one single-threaded job on the other core (a GEMM loop, or a memory-bound loop) slowed
profiled iterations on the first by up to 28 %; a quiet re-profile of configs first profiled
beside other work took a quarter less time in the median, while two quiet profiles agreed within
2 %. A model cannot be more accurate than its data, so a CPU profile during which other processes
(or the hypervisor: steal time) used more than :data:`DISTURBANCE_LIMIT` of a core is taken
again, and one still disturbed after :data:`RETRIES` tries is not recorded
(:mod:`predictor.emulator.collect` writes it to ``failures.jsonl``; a rerun profiles it again).

Linux only (``/proc/stat``); elsewhere the load is unknown (``None``) and profiles are kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

PROC_STAT = Path("/proc/stat")
DISTURBANCE_LIMIT = 0.25  # cores of other work while profiling, on average
RETRIES = 3
RETRY_WAIT_S = 2.0

T = TypeVar("T")


class DisturbedError(RuntimeError):
    """Every try of a profile ran beside other work."""


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds the whole machine was busy (steal included), this process's CPU seconds, wall
    seconds — at one instant."""

    busy_s: float
    own_s: float
    wall_s: float


def sample(stat: Path = PROC_STAT) -> CpuSample | None:
    """The machine's busy time and this process's CPU time now; ``None`` without ``/proc/stat``."""
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]  # guest time is already inside user and nice
    own = os.times()
    return CpuSample(busy / os.sysconf("SC_CLK_TCK"), own.user + own.system, time.monotonic())


def others_load(before: CpuSample | None, after: CpuSample | None) -> float | None:
    """Cores other processes kept busy between two samples, on average (``None``: unknown)."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / (after.wall_s - before.wall_s))


def undisturbed(measure: Callable[[], T], *, limit: float | None = None, retries: int | None = None,
                wait_s: float | None = None, probe: Callable[[], CpuSample | None] | None = None) -> T:
    """``measure()`` taken again while other work used more than ``limit`` cores (default
    :data:`DISTURBANCE_LIMIT`); raises :class:`DisturbedError` naming the loads when every one of
    ``retries`` tries was disturbed."""
    limit = DISTURBANCE_LIMIT if limit is None else limit
    retries = RETRIES if retries is None else retries
    wait_s = RETRY_WAIT_S if wait_s is None else wait_s
    probe = probe or sample
    loads = []
    for attempt in range(retries):
        before = probe()
        result = measure()
        load = others_load(before, probe())
        if load is None or load <= limit:
            return result
        loads.append(load)
        if attempt + 1 < retries:
            time.sleep(wait_s)
    raise DisturbedError(f"other processes kept {', '.join(f'{x:.2f}' for x in loads)} cores busy during the "
                         f"{retries} tries (limit {limit}); profile again on a quiet machine")
