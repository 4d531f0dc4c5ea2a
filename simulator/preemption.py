"""The engine for preemptive policies: leases in rounds, suspended jobs that keep their progress,
restart costs, and moves between GPU types.

Why a subclass: the non-preemptive engine (:class:`simulator.engine.Simulation`) is tuned for
100k-job replays and its plans are frozen (experiments/frozen_cases.py); a preemptive policy gets
this engine instead, which shares the arrivals, the coalesced policy calls and the checks of a
placement, and changes only what preemption changes:

* **Rounds.** Besides arrivals and completions, the policy is called at round boundaries; the
  view's ``at_round`` says so, and only then may its decisions include
  :class:`policies.base.Preemption` s, which are applied before its placements. Where rounds fall
  is the policy's ``rounds`` attribute: ``"grid"``, every ``lease_seconds`` at multiples of the
  lease after the first arrival while jobs wait or run; ``"work"``, as Gavel's simulator runs
  them (``scheduler.py``, ``simulate``): a round lasts until its leases end, ``lease_seconds``
  after it began, or sooner once every job it ran has finished; with nothing running, the next
  arrival begins one (the first round is at the first arrival); ``"event"``, as Tiresias' simulator:
  every arrival and completion is a round, and so is the time the policy names after each call
  (``next_event``: a demotion, a promotion). Finished jobs are reported to the policy
  (``on_finish``) as they end.
* **Progress.** A job's work is its true run time on a type; on type k it advances its fraction
  done by elapsed / truth[job, k]. Suspended at time t, it keeps the fraction done at t (measured
  on the true clock, as a checkpoint of the iterations done) and may resume on any type, where the
  rest runs at that type's true speed. The view's ``progress`` holds each job's fraction done,
  current at every call (it is what a real scheduler counts: iterations done over iterations
  asked), ``attained`` its GPU-seconds of service.
* **Restart cost.** Resuming (not a first start) holds the GPUs for the policy's restart delay
  (:class:`policies.base.RestartCost`: a fixed restart plus the job's ``checkpoint_bytes`` over
  the storage bandwidth — a bound job's from its config's parameters and optimizer state
  (:func:`traces.workloads.checkpoint_bytes`), a trace's from that optional column) before any work
  is done; charged once per resume.

* **An end.** A run takes at most the ``rounds`` limit of :data:`predictor.common.inputs.LIMITS`
  (``ETS_SIM_MAX_ROUNDS``): one that certainly needs more (its
  jobs run, at the least, longer than that many leases) is refused before it starts, naming
  ``lease`` and the least lease that fits; one that passes the count anyway (restarts longer than
  a lease, a policy that keeps moving jobs) stops with the same kind of message. With the option
  ranges of :mod:`policies.preemptive` every round falls strictly later than the one before.

Records: ``start`` is the first start, ``gpu_type`` the type the job finished on,
``true_runtime`` the seconds it trained on GPUs (all segments), ``predicted_runtime`` the initial
prediction on its final type; plus ``preemptions`` and ``restart_overhead_s`` per job.
"""

from __future__ import annotations

import heapq
import math
from array import array

import numpy as np
import pandas as pd
import simpy

from policies.base import Placement, Policy, PolicyError, Preemption, RestartCost, read_only
from policies.preemptive import PreemptivePolicy
from predictor.common.inputs import LIMITS, SimulationError, SpecError, limit
from simulator.engine import Simulation
from traces.schema import CHECKPOINT_BYTES

# The most rounds one run may take: predictor.common.inputs.LIMITS "rounds" (ETS_SIM_MAX_ROUNDS), read once
# per run. Why a count: rounds come every lease while any job waits or runs, so their number is the
# run's span over the lease, whatever the jobs do; an SRTF round costs ~70 us, so a million take
# about a minute (a Gavel round, an LP: more).


# Stale completions queued before the engine takes them out of simpy's queue (_drop_stale): at
# least this many, and half the queue.
DROP_AT = 4096
PRUNE_AT = 65_536  # dropped completions kept for _restore_dropped before those now past are let go


def _heap_queue(env: simpy.Environment) -> bool:
    """Whether simpy's event queue is the list heap :meth:`PreemptiveSimulation._drop_stale` edits
    (simpy's private ``_queue``: another simpy version may keep it otherwise; then nothing is dropped)."""
    queue = getattr(env, "_queue", None)
    return isinstance(queue, list) and all(isinstance(entry, tuple) and len(entry) == 4 for entry in queue)


def _round_up(x: float) -> float:
    """``x`` rounded up to 3 significant digits (a bound quoted in a message must hold)."""
    exponent = 10.0 ** (np.floor(np.log10(x)) - 2) if x > 0 else 1.0
    return float(np.ceil(x / exponent) * exponent)


def make_simulation(trace, cluster, policy: Policy, predictor, **options) -> Simulation:
    """The engine for ``policy``: :class:`PreemptiveSimulation` for a preemptive one, else the
    non-preemptive :class:`Simulation`."""
    engine = PreemptiveSimulation if policy.preemptive else Simulation
    return engine(trace, cluster, policy, predictor, **options)


class Segments:
    """Each stretch a job held GPUs, in compact columns: Gavel's rounds make tens of them per job,
    millions on a 100k-job trace, where a tuple per stretch cost gigabytes."""

    def __init__(self) -> None:
        self.ints = array("q")  # per stretch: job, type, where its GPU ids end in gpus
        self.gpus = array("q")  # every stretch's GPU ids, one after another
        self.floats = array("d")  # per stretch: start, end, restart, work

    def add(self, job: int, k: int, gpus: tuple[int, ...], start: float, end: float, restart: float,
            work: float) -> None:
        self.gpus.extend(gpus)
        self.ints.extend((job, k, len(self.gpus)))
        self.floats.extend((start, end, restart, work))

    def frame(self, job_ids: np.ndarray, gpu_types: list[str]) -> pd.DataFrame:
        """One row per stretch: job (index and id), GPU type, GPU ids ("3,4"), start, end, and the
        seconds of it spent restarting and working."""
        ints = np.frombuffer(self.ints, dtype=np.int64).reshape(-1, 3)
        floats = np.frombuffer(self.floats, dtype=np.float64).reshape(-1, 4)
        jobs = ints[:, 0].copy()
        ends = ints[:, 2].tolist()
        ids = list(map(str, self.gpus))  # as numpy's astype(str) writes them, several times faster
        firsts = [0, *ends[:-1]]
        return pd.DataFrame({
            "job": jobs,
            "job_id": job_ids[jobs],
            "gpu_type": np.asarray(gpu_types, dtype=object)[ints[:, 1]],
            "gpu_ids": [",".join(ids[a:b]) for a, b in zip(firsts, ends)],
            "start": floats[:, 0].copy(),
            "end": floats[:, 1].copy(),
            "restart_s": floats[:, 2].copy(),
            "work_s": floats[:, 3].copy(),
        })


class PreemptiveSimulation(Simulation):
    """:class:`Simulation` for a :class:`PreemptivePolicy` (see the module docstring)."""

    PREEMPTIVE = True
    ANY_POLICY = False  # a subclass that also runs non-preemptive policies (simulator.failures) says so

    def __init__(self, trace, cluster, policy: PreemptivePolicy, predictor, **options) -> None:
        if not policy.preemptive and not self.ANY_POLICY:
            raise TypeError(f"policy {policy.name!r} is not preemptive; use Simulation")
        super().__init__(trace, cluster, policy, predictor, **options)
        if self.observe_time is not None:
            raise SpecError(f"--observe-after does not combine with {self._without_feedback()} "
                            "(a resumed job's measured time is not modelled)")
        n = len(trace.jobs)
        jobs = trace.jobs
        checkpoint = jobs[CHECKPOINT_BYTES].to_numpy(dtype="float64") if CHECKPOINT_BYTES in jobs else np.zeros(n)
        # a non-preemptive policy (run here by a subclass) has no lease: no rounds, and the
        # default restart cost for a job that starts again
        restart = policy.restart if policy.preemptive else RestartCost()
        self.checkpoint_bytes = checkpoint
        self.restart_s = restart.seconds(checkpoint)
        self._restart_list = np.asarray(self.restart_s, dtype="float64").tolist()  # Python floats, per placement
        self.lease = float(policy.lease_seconds) if policy.preemptive else np.inf
        self.done = np.zeros(n)  # fraction of the work done when the current segment began
        self.fraction = np.zeros(n)  # the view's progress: fraction done now
        self.attained = np.zeros(n)  # GPU-seconds of service (restarts included)
        self.worked = np.zeros(n)  # seconds trained on GPUs, all segments
        self.communicated = np.zeros(n)  # of them, seconds of exposed communication (placement timing)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.work_start = np.full(n, np.nan)  # when the current segment's work began (after its restart)
        self.segment_start = np.full(n, np.nan)
        self.epoch = np.zeros(n, dtype=np.int64)  # a completion of an older segment is stale
        self.held_by_type = np.zeros(len(cluster.gpu_types))  # GPU-seconds held per type
        self._attained_before = np.zeros(n)  # attained service when the current segment began
        self._num_array = jobs["num_gpus"].to_numpy(dtype="float64")
        self._segments = Segments()
        # progress (attained service) is kept current at every call only for a policy that reads it
        # (none: not there); either is current at every segment's end whatever the policy
        self._reads_progress = bool(getattr(policy, "reads_progress", True))
        self._reads_attained = bool(getattr(policy, "reads_attained", True))
        self.view.progress = read_only(self.fraction) if self._reads_progress else None
        self.view.attained = read_only(self.attained) if self._reads_attained else None
        self._round_armed = False
        rounds = policy.rounds if policy.preemptive else None
        self._by_work = rounds == "work"
        self._by_event = rounds == "event"
        self._round_token = 0  # "work" rounds: a queued round boundary is live while this is unchanged
        self._rounds = 0
        self._max_rounds = int(limit("rounds"))
        # Stale completions (a suspended job's) leave simpy's queue (see _drop_stale); only in this
        # class, whose events are all known here (a subclass may queue events of its own), and only
        # while simpy keeps its queue as the heap of (time, priority, id, event) it has since 3.0
        self._drop = type(self) is PreemptiveSimulation  # and simpy's queue is that heap (_before_replay)
        self._completion: list[simpy.Event | None] = [None] * n  # each running job's queued completion
        self._stale: set[simpy.Event] = set()  # completions made stale by a suspension, still queued
        self._dropped: list[tuple] = []  # the queue entries _drop_stale took out (time, priority, eid, event)
        self._dropped_kept = 0  # len(_dropped) after its last pruning
        self._check_rounds()

    def _without_feedback(self) -> str:
        """What ``--observe-after`` does not combine with, for its message."""
        return f"the preemptive policy {self.policy.name!r}"

    def _check_rounds(self) -> None:
        """Refuse, before the run, a lease that certainly needs more rounds than the ``rounds``
        limit: rounds fall every lease from the first arrival until the last job ends, which is no
        sooner than any job's submit time plus its least true run time on a type that holds it."""
        admitted = np.flatnonzero(~self.rejected)
        if not np.isfinite(self.lease) or not len(admitted):
            return
        fits = self._num_array[admitted, None] <= self.state.total_by_type[None, :]
        least = np.where(fits, self.truth[admitted], np.inf).min(axis=1)
        submit = self.view.submit[admitted]
        span = float((submit + least).max() - submit.min())
        if span / self.lease > self._max_rounds:
            raise SimulationError(
                f"option lease={self.lease:g} s: this trace's jobs run for at least {span:.4g} s, "
                f"{span / self.lease:.3g} rounds; a run takes at most {self._max_rounds:,} rounds "
                f"(for this trace use lease >= {_round_up(span / self._max_rounds):.3g}, or raise the limit "
                f"with {LIMITS['rounds'].variable}=N)")

    # -- rounds --------------------------------------------------------------------------------
    def _arm_round(self) -> None:
        """Queue the next round boundary (on the lease grid) if jobs wait, run or will arrive."""
        if self._by_work or self._by_event or self._round_armed or not np.isfinite(self.lease):
            return
        view, now = self.view, self._env.now
        if not (view.waiting or view.running or self._arrival_batch < len(self._arrival_times)):
            return
        rounds = np.floor((now - self._first) / self.lease) + 1
        self._round_armed = True
        # never negative, should rounding put the grid point a hair before now (a round at the same
        # instant is counted like any other: the run still ends, at the rounds limit)
        delay = max(0.0, float(self._first + rounds * self.lease - now))
        self._env.timeout(delay).callbacks.append(self._round)

    def _round(self, _ev) -> None:
        self._round_armed = False
        self._begin_round()
        self._after_event()
        self._arm_round()

    def _work_round_ends(self, ev) -> None:
        """A queued boundary: a "work" round's leases end, or an "event" policy's own next event
        (stale if a round came since)."""
        if ev.value == self._round_token:
            self._begin_round()
            self._after_event()
        elif self._dropped and self._pending and self._env.peek() > self._env.now:
            self._restore_dropped()  # the one place a dropped completion could have mattered (_drop_stale)

    def _begin_round(self) -> None:
        """This timestamp's policy call is a round boundary (counted against the rounds limit)."""
        self._round_token += 1
        self._rounds += 1
        if self._rounds > self._max_rounds and self._by_event:  # a round per event: no lease to raise
            view = self.view
            raise SimulationError(
                f"policy {self.policy.name!r} passed {self._max_rounds:,} rounds (one at every arrival, completion "
                f"and demotion) at simulated time {self._env.now:.4g} s with {len(view.waiting) + len(view.running):,} "
                f"job(s) unfinished; raise the limit with {LIMITS['rounds'].variable}=N")
        if self._rounds > self._max_rounds:
            view = self.view
            raise SimulationError(
                f"option lease={self.lease:g} s: policy {self.policy.name!r} passed {self._max_rounds:,} rounds at "
                f"simulated time {self._env.now:.4g} s with {len(view.waiting) + len(view.running):,} job(s) "
                "unfinished (restarts longer than the lease keep a run from ending); a run takes at most "
                f"{self._max_rounds:,} rounds: raise the lease, or the limit with {LIMITS['rounds'].variable}=N")
        self.view.at_round = True
        self.events += 1
        self._pending = True

    def _arrive(self, ev) -> None:
        if ((self._by_work and not self.view.running) or self._by_event) and not self.view.at_round:
            self._begin_round()  # nothing runs, or every event is one: the arrival begins a round
        super()._arrive(ev)
        self._arm_round()

    # -- progress ------------------------------------------------------------------------------
    def _fraction_done(self, jobs: np.ndarray, now: float) -> np.ndarray:
        """The fraction of each running job's work done at ``now`` (none during its restart)."""
        truth = self.truth[jobs, self.type_of[jobs]] * self.slowdown[jobs]  # at the GPUs each holds now
        worked = np.maximum(0.0, now - self.work_start[jobs])
        started = now >= self.work_start[jobs]
        with np.errstate(divide="ignore", invalid="ignore"):  # a job of no work: done once it starts working
            fraction = np.where(truth > 0, self.done[jobs] + worked / truth, np.where(started, 1.0, self.done[jobs]))
        return np.minimum(1.0, fraction)

    def _fraction_of(self, job: int, k: int, now: float) -> float:
        """:meth:`_fraction_done` of one running job on type k, in Python floats (the same IEEE
        operations, so the same value): a suspension's, where the policy does not read progress."""
        truth = self._truth[job * self._num_types + k] * self.slowdown[job]
        work_start = self.work_start[job]
        if truth > 0:
            fraction = self.done[job] + max(0.0, now - work_start) / truth
        else:  # a job of no work: done once it starts working
            fraction = 1.0 if now >= work_start else self.done[job]
        return min(1.0, fraction)

    def _refresh_progress(self, now: float) -> None:
        """The view's progress and attained service of the running jobs, as of ``now`` (vectorised:
        this runs at every policy call, with hundreds of jobs running on a large cluster)."""
        running = self.view.running
        if not running or not (self._reads_progress or self._reads_attained):
            return
        jobs = np.fromiter(running, dtype=np.int64, count=len(running))
        if self._reads_progress:
            self.fraction[jobs] = self._fraction_done(jobs, now)
        if self._reads_attained:
            self.attained[jobs] = self._attained_before[jobs] + (now - self.segment_start[jobs]) * self._num_array[jobs]

    # -- the policy's turn ---------------------------------------------------------------------
    def _schedule(self) -> None:
        self._pending = False
        view = self.view
        view.now = now = self._env.now
        at_round = view.at_round
        # a round may move running jobs; a "work" round is the policy's even with no job (Gavel resets then)
        if not (self._new or view.waiting or (at_round and (view.running or self._by_work))):
            view.at_round = False
            return
        self._refresh_progress(now)
        decisions = self._decide(view)
        view.at_round = False
        preempt = [d for d in decisions if isinstance(d, Preemption)]
        placements = [d for d in decisions if not isinstance(d, Preemption)]
        if preempt and not at_round:
            raise PolicyError(f"policy {self.policy.name!r} preempted job(s) between rounds "
                              f"(first: {preempt[0].job}); preemptions are taken at round boundaries only")
        for p in preempt:
            self._suspend(int(p.job), now)
        self._start(placements, now)
        if at_round and self._by_work and view.running and np.isfinite(self.lease):
            self._env.timeout(self.lease, self._round_token).callbacks.append(self._work_round_ends)
        if self._by_event:  # the policy's own next event (a demotion, a promotion), if any
            wake = float(self.policy.next_event(view))
            if np.isfinite(wake) and wake > now:
                self._env.timeout(wake - now, self._round_token).callbacks.append(self._work_round_ends)
        if self._drop and len(self._stale) > DROP_AT and 2 * len(self._stale) > len(self._env._queue):
            self._drop_stale(now)

    # -- stale completions -----------------------------------------------------------------------
    def _drop_stale(self, now: float) -> None:
        """Take the stale completions out of simpy's queue: a time-sharing policy (Gavel) suspends
        most jobs it starts, and each suspension leaves its completion queued, often days ahead —
        hundreds of thousands of entries that made every pop of the queue slow.

        Why the run is the same to the bit: a stale completion's callback (:meth:`_finish`) only
        calls :meth:`_after_event`, which calls the policy if something changed at this timestamp
        and no event of it is left. Without it, the event before it at its timestamp sees none
        left and makes that same call, with nothing between, and the queue's order (time, then
        creation) is kept for every other event. The exception is an event before it that does not
        call :meth:`_after_event`: a stale round end (:meth:`_work_round_ends`). So a stale
        completion at the time of a queued round end stays queued (a round end queued later
        comes after it), and where a stale round end leaves a change at its timestamp with no
        event of it left (the policy's call then waits for the next event), the completions
        dropped after it go back into the queue (:meth:`_restore_dropped`), in their places.
        Dropping runs only at a policy call, when no event of the current timestamp is queued
        but the call's own, so every dropped completion lies ahead."""
        queue, stale, dropped = self._env._queue, self._stale, self._dropped
        keep, candidates = [], []
        for entry in queue:
            (candidates if entry[3] in stale and entry[0] > now else keep).append(entry)
        round_end = [self._work_round_ends]
        ends = {entry[0] for entry in keep if entry[3].callbacks == round_end}
        for entry in candidates:
            if entry[0] in ends:
                keep.append(entry)
            else:
                dropped.append(entry)
                stale.discard(entry[3])
        heapq.heapify(keep)
        queue[:] = keep
        if len(dropped) > 2 * self._dropped_kept + PRUNE_AT:  # those now past can never go back
            dropped[:] = [entry for entry in dropped if entry[0] > now]
            self._dropped_kept = len(dropped)

    def _restore_dropped(self) -> None:
        """Queue again the dropped completions still ahead (:meth:`_drop_stale`)."""
        now, queue = self._env.now, self._env._queue
        back = [entry for entry in self._dropped if entry[0] > now]
        queue.extend(back)
        heapq.heapify(queue)
        self._stale.update(entry[3] for entry in back)
        self._dropped.clear()
        self._dropped_kept = 0

    def _suspend(self, job: int, now: float) -> None:
        running = self.view.running
        if job not in running:
            raise PolicyError(f"policy {self.policy.name!r} preempted job {job}, which is not running")
        _, k = running.pop(job)
        # refreshed at this call's start (_schedule) where the policy reads it; else computed now
        fraction = self.fraction[job] if self._reads_progress else self._fraction_of(job, k, now)
        self._close_segment(job, k, now, max(0.0, now - self.work_start[job]))
        self.done[job] = self.fraction[job] = fraction
        self.state.release(k, self.gpus_of[job])
        self.epoch[job] += 1  # its queued completion is stale now
        self._stale.add(self._completion[job])
        self.preemptions[job] += 1
        self.view.waiting[job] = None  # waits again, behind the jobs waiting already

    def _close_segment(self, job: int, k: int, now: float, worked: float) -> None:
        segment_start = self.segment_start[job]
        held = now - segment_start
        self._segments.add(job, k, self.gpus_of[job], float(segment_start), now,
                           float(self.work_start[job] - segment_start), worked)
        self._account(job, k, held, worked)

    def _account(self, job: int, k: int, held: float, worked: float) -> None:
        """A closed segment's work, exposed communication (at this segment's GPUs) and GPU time held;
        one bookkeeping for suspensions here and for failures (:mod:`simulator.failures`)."""
        self.worked[job] += worked
        if self.timing is not None and worked > 0:
            packed = self.truth[job, k] * self.slowdown[job]
            compute = self.timing.compute_runtime_of(job, k)
            self.communicated[job] += worked * max(0.0, 1.0 - compute / packed) if packed > 0 else 0.0
        gpu_seconds = held * self._num[job]
        self.attained[job] = self._attained_before[job] = self._attained_before[job] + gpu_seconds
        self.held_by_type[k] += gpu_seconds

    def _start(self, placements: list[Placement], now: float) -> None:
        occupy, env, finish, timing, num = self._occupy, self._env, self._finish, self.timing, self._num
        restart_s, preemptions, start = self._restart_list, self.preemptions, self.start
        segment_start, work_start, done, epoch, slowdown = (self.segment_start, self.work_start, self.done, self.epoch,
                                                            self.slowdown)
        truth, num_types, completion = self._truth, self._num_types, self._completion
        for p in placements:
            job, k = occupy(p, now)
            delay = restart_s[job] if preemptions[job] else 0.0  # a resume, not a first start
            if math.isnan(start[job]):
                start[job] = now
            segment_start[job] = now
            work_start[job] = now + delay
            if timing is not None and num[job] > 1:
                self._charge(job, k)  # this segment's GPUs: a resumed job may land elsewhere
            duration = delay + (1.0 - done[job]) * truth[job * num_types + k] * slowdown[job]
            completion[job] = ev = env.timeout(duration, (job, int(epoch[job])))
            ev.callbacks.append(finish)

    def _finish(self, ev: simpy.Event) -> None:
        """A segment's end: the job completes, unless it was suspended since (a stale event)."""
        job, epoch = ev.value
        if epoch != self.epoch[job]:
            self._stale.discard(ev)
        elif job in self.view.running:
            now = self._env.now
            _, k = self.view.running.pop(job)
            self._close_segment(job, k, now, (1.0 - self.done[job]) * self.truth[job, k] * self.slowdown[job])
            self.state.release(k, self.gpus_of[job])
            self.done[job] = self.fraction[job] = 1.0
            self.end[job] = now
            self.events += 1
            if self._bar is not None:
                self._bar.update(1)
            self._pending = True
            self.policy.on_finish(self.view, job, now)
            if ((self._by_work and not self.view.running) or self._by_event) and not self.view.at_round:
                self._begin_round()  # every job of the round has finished (or every event is a round)
        self._after_event()

    # -- driver ----------------------------------------------------------------------------------
    def _before_replay(self) -> None:
        self._first = self._env.now  # the first admitted submit time: rounds fall on its lease grid
        self._drop = self._drop and _heap_queue(self._env)
        self._arm_round()

    def _rounds_taken(self) -> int:
        return self._rounds

    def _busy_by_type(self) -> dict[str, float] | None:
        if not self.preemptions.any():  # one segment per job: its records tell it
            return None
        return dict(zip(self.cluster.gpu_types, self.held_by_type.tolist()))

    def _segments_frame(self) -> pd.DataFrame:
        return self._segments.frame(self.trace.jobs["job_id"].to_numpy(), self.cluster.gpu_types)

    def _records(self) -> pd.DataFrame:
        records = super()._records()
        placed = self.type_of >= 0
        records["true_runtime"] = np.where(placed, self.worked, np.nan)
        if self.timing is not None:
            records["communication_s"] = np.where(placed, self.communicated, np.nan)
        records["preemptions"] = self.preemptions
        records["restart_overhead_s"] = self.preemptions * self.restart_s  # each suspension, one resume
        return records
