"""The engine with failures: attempts that fail, nodes that fail and are repaired, work lost since
the last checkpoint, checkpoint writes that cost time, jobs that end failed or cancelled.

Why a subclass of the preemptive engine: a failure is a stop the policy did not choose, and the
preemptive engine already keeps what a stop needs — each job's fraction done, its stretches on
GPUs, a restart cost on resuming. This engine runs *every* policy (a non-preemptive one too: it
is never called at rounds and never suspends). A run without failures (``--failures none``)
never comes here, so its results are the plain engines', bit for bit.

Semantics (docs/simulation.md, "Failures"):

* **Attempts.** A job's attempt begins when the policy starts it after its arrival or a failure;
  a preemptive policy's suspensions do not end an attempt. Its fates
  (:func:`simulator.failure_models.job_fates`) say how long each failed attempt runs before it
  fails (seconds on the trace's own clock, scaled to the GPU type it got by the job's true run
  time there over its trace duration, counted over the attempt's stretches on GPUs) and how long
  the job is away before it is submitted again. An attempt whose job finishes its work first
  does not fail. After the failed attempts, the final one runs the job's work and ends as the
  fates say: ``completed``, ``failed`` (a real trace records a failed job's run up to its
  failure) or ``cancelled``.
* **Node failures** (a :class:`~simulator.failure_models.NodeFailures` model): failures arrive
  as a Poisson process over the GPUs that are up; the failed node is drawn in proportion to its
  GPUs; every job with a GPU on it fails (an attempt that is not in its fates, submitted again at
  once); the node leaves the cluster (free and total GPU counts) until its repair ends.
* **Checkpoints.** A job writes a checkpoint after every ``interval`` seconds of work, each write
  holding its GPUs for ``write_s`` seconds (what reading it back costs: the restart cost's fixed
  part plus ``checkpoint_bytes`` over the storage bandwidth); none after the last stretch of
  work. A failure keeps the work up to the last completed write; the rest is done again. A
  policy's suspension keeps all of it (as without failures: the suspension checkpoints).
  ``interval`` is a number of seconds, ``none`` (never), or ``optimal``: Young/Daly's first-order
  optimum √(2 × write_s × MTBF), MTBF being the job's mean seconds of running between failures
  under the run's models (:meth:`~simulator.failure_models.FailureModel.mtbf_s`).
* **Restarts.** Starting again after a failure or a suspension holds the GPUs for the restart
  cost before any work (once per start).
* **What the policy sees.** A failed job leaves ``running`` (a preemptive policy is told with
  ``on_finish``), and when it is submitted again it is a new arrival (``on_arrival``). A
  preemptive policy reads what is left from ``progress``; for a non-preemptive one the view's
  predicted run times of the job are scaled by the share of its work left. Predictors are not
  asked again: they predict iteration times; the work left is the engine's.
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import pandas as pd

from policies.base import Placement, Policy, PolicyError
from predictor.common.inputs import SpecError, short
from simulator.engine import Simulation, SimulationError
from simulator.failure_models import FailureModel, JobFates
from simulator.preemption import PreemptiveSimulation, Segments
from traces.schema import MAX_ATTEMPTS, JobTrace

NO_FAILURES = "none"  # the --failures value of a run where nothing fails (the plain engines run it)
CHECKPOINT_OPTIMAL = "optimal"
NO_CHECKPOINTS = "none"
# Why a stretch on GPUs ended (the segments' ``ended`` column; the timeline marks the failed ones).
ENDINGS = ("completed", "preempted", "failed", "node failure", "cancelled")
COMPLETED, PREEMPTED, FAILED, NODE_FAILURE, CANCELLED = range(len(ENDINGS))
OUTCOME_CODE = {"completed": COMPLETED, "failed": FAILED, "cancelled": CANCELLED}


def check_checkpoint_every(value: object, option: str = "--checkpoint-every") -> str:
    """``optimal``, ``none`` or a number of seconds > 0 (as text: the run's config keeps it so)."""
    text = str(value).strip().lower()
    if text in (CHECKPOINT_OPTIMAL, NO_CHECKPOINTS):
        return text
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise SpecError(f"{option} {short(value)}: expected 'optimal', 'none' or a number of seconds > 0")
    return text


def checkpoint_intervals(every: str, write_s: np.ndarray, mtbf_s: np.ndarray) -> np.ndarray:
    """Per job, the seconds of work between two checkpoint writes: ``every`` seconds, never
    (``none``: +inf), or Young/Daly's √(2 × write cost × MTBF) (``optimal``; +inf where nothing
    fails). A write of no cost would make the optimum 0: such a job checkpoints every second."""
    write_s = np.asarray(write_s, dtype="float64")
    if every == NO_CHECKPOINTS:
        return np.full(write_s.shape, np.inf)
    if every != CHECKPOINT_OPTIMAL:
        return np.full(write_s.shape, float(every))
    with np.errstate(invalid="ignore"):
        optimum = np.sqrt(2.0 * write_s * np.asarray(mtbf_s, dtype="float64"))
    return np.where(np.isfinite(optimum), np.maximum(optimum, 1.0), np.inf)


def replay_work(trace: JobTrace, fates: JobFates) -> JobTrace:
    """A replayed trace's jobs with their work: the GPU time their attempts held, i.e. their span
    (first start to last end, a loader's ``duration_s``) less the gaps between attempts. Each
    failed attempt then fails at its recorded time (no later than the work it has left) and what
    it loses is done again, as it was."""
    gaps = np.fromiter((sum(g) for g in fates.gaps), dtype="float64", count=len(fates.gaps))
    jobs = trace.jobs.copy()
    jobs["duration_s"] = np.maximum(0.0, jobs["duration_s"].to_numpy(dtype="float64") - gaps)
    return trace.with_jobs(jobs)


class FailureSegments(Segments):
    """:class:`Segments` with the seconds each stretch spent writing checkpoints and why it ended."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.ended = array("d"), array("q")

    def add_ended(self, job: int, k: int, gpus: tuple[int, ...], start: float, end: float, restart: float,
                  work: float, writing: float, ended: int) -> None:
        self.add(job, k, gpus, start, end, restart, work)
        self.writing.append(writing)
        self.ended.append(ended)

    def frame(self, job_ids: np.ndarray, gpu_types: list[str]) -> pd.DataFrame:
        frame = super().frame(job_ids, gpu_types)
        frame["checkpoint_s"] = np.frombuffer(self.writing, dtype=np.float64).copy()
        frame["ended"] = np.asarray(ENDINGS, dtype=object)[np.frombuffer(self.ended, dtype=np.int64)]
        return frame


class FailureSimulation(PreemptiveSimulation):
    """Any policy on a cluster where attempts and nodes fail (see the module docstring)."""

    ANY_POLICY = True

    def __init__(self, trace: JobTrace, cluster, policy: Policy, predictor, *, failures: FailureModel,
                 fates: JobFates, checkpoint_every: str = CHECKPOINT_OPTIMAL, seed: int = 0, **options) -> None:
        super().__init__(trace, cluster, policy, predictor, **options)
        jobs = trace.jobs
        n = len(jobs)
        if len(fates.outcome) != n:
            raise ValueError(f"fates for {len(fates.outcome)} jobs, the trace has {n}")
        self.failures, self.fates = failures, fates
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.write_s = self.restart_s.copy()  # writing a checkpoint costs what reading it back costs
        self.mtbf_s = np.asarray(failures.mtbf_s(jobs["num_gpus"].to_numpy(), fates), dtype="float64")
        self.interval = checkpoint_intervals(self.checkpoint_every, self.write_s, self.mtbf_s)
        duration = jobs["duration_s"].to_numpy(dtype="float64")
        with np.errstate(divide="ignore", invalid="ignore"):  # a failed attempt's length, scaled per type
            self._length_scale = np.where(duration[:, None] > 0, self.truth / duration[:, None], 1.0)
        # Per-job state read and written one job at a time, at every event: Python lists (a numpy
        # scalar access costs several times a list's; a 100k-job replay makes millions)
        self._outcome = [OUTCOME_CODE[o] for o in fates.outcome]
        self.ending = [-1] * n  # how each job ended (ENDINGS code of its last stretch)
        self.first_start = [math.nan] * n
        self.failed_attempts = [0] * n
        self.next_failure = [0] * n  # index into the job's fates of its next failed attempt
        self.attempt_held = [0.0] * n  # seconds the current attempt has held GPUs (all its stretches)
        self.lost_work = [0.0] * n  # seconds of work done again (lost since the last checkpoint)
        self.restart_spent = [0.0] * n
        self.write_spent = [0.0] * n
        self.resumed = [False] * n  # a start after a stop (not the first): pays the restart
        self._restart = self.restart_s.tolist()
        self._write = self.write_s.tolist()
        self._interval = self.interval.tolist()
        self._scale = self._length_scale.ravel().tolist()  # (job, type) flattened, as the engine's _truth
        self._left_share = np.ones(n)  # the share of its work a non-preemptive policy's view predicts
        self._unfinished = int((~self.rejected).sum())
        self._segments = FailureSegments()
        self._rng = np.random.default_rng([seed, 54, 1])  # node failures and repairs (fates have their own)
        self._nodes = failures.nodes
        self._node_token = 0
        self._node_sizes = np.array([node.num_gpus for node in cluster.nodes], dtype="float64")
        self.outages: list[tuple[int, float, float]] = []  # (node, failed at, repaired at)
        self._has_on_finish = callable(getattr(policy, "on_finish", None))
        self._preemptive = policy.preemptive
        if not policy.preemptive:  # it reads neither (as without failures): kept current at stops only
            self.view.progress = self.view.attained = None

    def _without_feedback(self) -> str:
        return "--failures"

    # -- stretches on GPUs ---------------------------------------------------------------------
    def _writes(self, job: int, left: float) -> int:
        """Checkpoint writes while ``left`` seconds of work are done: one after every full
        interval but the last."""
        interval = self._interval[job]
        if not (left > 0 and interval < math.inf):
            return 0
        return max(0, math.ceil(left / interval) - 1)

    def _total(self, job: int, k: int) -> float:
        """The job's whole work on type k at the GPUs it holds, in seconds."""
        total = self._truth[job * self._num_types + k]
        return total * float(self.slowdown[job]) if self.timing is not None else total

    def _worked_saved(self, job: int, now: float, k: int) -> tuple[float, float]:
        """Seconds of work done in the job's current stretch on type k by ``now``, and of them the
        part a completed checkpoint write keeps."""
        elapsed = now - float(self.work_start[job])
        if elapsed <= 0:
            return 0.0, 0.0
        left = (1.0 - float(self.done[job])) * self._total(job, k)
        interval = self._interval[job]
        if interval == math.inf:
            return min(left, elapsed), 0.0
        period = interval + self._write[job]
        cycles = math.floor(elapsed / period)
        worked = cycles * interval + min(elapsed - cycles * period, interval)
        return min(left, worked), min(left, cycles * interval)

    def _schedule(self) -> None:
        if self._preemptive:
            super()._schedule()
            return
        self._pending = False  # a non-preemptive policy: no rounds, no suspensions, placements only
        view = self.view
        view.now = now = self._env.now
        if self._new or view.waiting:
            placements = self._decide(view)
            if placements:
                self._start(placements, now)

    def _arrive(self, ev) -> None:
        if self._preemptive:
            super()._arrive(ev)
        else:  # no rounds to begin or arm
            Simulation._arrive(self, ev)

    def _refresh_progress(self, now: float) -> None:
        if self._preemptive:  # only a preemptive policy reads progress at every call
            super()._refresh_progress(now)

    def _fraction_done(self, jobs: np.ndarray, now: float) -> np.ndarray:
        """The running jobs' fraction done at ``now``: none during a restart or a checkpoint write."""
        total = self.truth[jobs, self.type_of[jobs]] * self.slowdown[jobs]
        left = (1.0 - self.done[jobs]) * total
        elapsed = np.maximum(0.0, now - self.work_start[jobs])
        interval = self.interval[jobs]
        finite = np.isfinite(interval)
        step = np.where(finite, interval, 0.0)
        period = np.where(finite, interval + self.write_s[jobs], 1.0)
        cycles = np.where(finite, np.floor(elapsed / period), 0.0)
        worked = np.minimum(left, np.where(finite, cycles * step + np.minimum(elapsed - cycles * period, step),
                                           elapsed))
        started = now >= self.work_start[jobs]
        with np.errstate(divide="ignore", invalid="ignore"):
            fraction = np.where(total > 0, self.done[jobs] + worked / total,
                                np.where(started, 1.0, self.done[jobs]))
        return np.minimum(1.0, fraction)

    def _start(self, placements: list[Placement], now: float) -> None:
        env, fates, epoch, timing = self._env, self.fates.failed_lengths, self.epoch, self.timing
        restart, resumed, first_start, write = self._restart, self.resumed, self.first_start, self._write
        done = self.done
        occupy, total, writes, nt, scale = self._occupy, self._total, self._writes, self._num_types, self._scale
        start, segment_start, work_start = self.start, self.segment_start, self.work_start
        for p in placements:
            job, k = occupy(p, now)
            delay = restart[job] if resumed[job] else 0.0
            if first_start[job] != first_start[job]:  # NaN: its first start
                first_start[job] = now
            start[job] = now  # the view's: when the GPUs were taken (a policy's estimate of their end)
            segment_start[job] = now
            work_start[job] = now + delay
            if timing is not None and self._num[job] > 1:
                self._charge(job, k)
            left = (1.0 - float(done[job])) * total(job, k)
            duration = delay + left + writes(job, left) * write[job]
            token = (job, int(epoch[job]))
            plan = fates[job]
            i = self.next_failure[job]
            if i < len(plan):  # one event per stretch: its failure if that comes first, else its end
                at = plan[i] * scale[job * nt + k] - self.attempt_held[job]
                if at < duration:
                    env.timeout(max(0.0, at), token).callbacks.append(self._attempt_fails)
                    continue
            env.timeout(duration, token).callbacks.append(self._finish)

    def _close_segment(self, job: int, k: int, now: float, worked: float, ended: int = COMPLETED) -> None:
        start = float(self.segment_start[job])
        held = now - start
        restart = min(now, float(self.work_start[job])) - start
        writing = max(0.0, held - restart - worked)
        self._segments.add_ended(job, k, self.gpus_of[job], start, now, restart, worked, writing, ended)
        self._account(job, k, held, worked)
        self.attempt_held[job] += held
        self.restart_spent[job] += restart
        self.write_spent[job] += writing
        self.ending[job] = ended

    def _stop(self, job: int, now: float, ended: int) -> int:
        """Take running ``job`` off its GPUs at ``now`` (a suspension or a failure); returns its type."""
        _, k = self.view.running.pop(job)
        worked, saved = self._worked_saved(job, now, k)
        self._close_segment(job, k, now, worked, ended)
        total = self._total(job, k)
        kept = worked if ended == PREEMPTED else saved  # a suspension checkpoints; a failure keeps the last write
        self.lost_work[job] += worked - kept
        if total > 0:
            self.done[job] = self.fraction[job] = min(1.0, float(self.done[job]) + kept / total)
        self.state.release(k, self.gpus_of[job])
        self.epoch[job] += 1  # its queued completion (and failure) are stale now
        self.resumed[job] = True
        return k

    # -- the policy's stops and the jobs' ends -------------------------------------------------
    def _suspend(self, job: int, now: float) -> None:
        if job not in self.view.running:
            raise PolicyError(f"policy {self.policy.name!r} preempted job {job}, which is not running")
        self._stop(job, now, PREEMPTED)
        self.preemptions[job] += 1
        self.view.waiting[job] = None

    def _finish(self, ev) -> None:
        """A stretch ends with the job's work done: it completes, or ends as its fates say."""
        job, epoch = ev.value
        if epoch == self.epoch[job] and job in self.view.running:
            now = self._env.now
            _, k = self.view.running.pop(job)
            left = (1.0 - float(self.done[job])) * self._total(job, k)
            self._close_segment(job, k, now, left, self._outcome[job])
            self.state.release(k, self.gpus_of[job])
            self.done[job] = self.fraction[job] = 1.0
            self._ended(job, now)
        self._after_event()

    def _ended(self, job: int, now: float) -> None:
        self.end[job] = now
        self._unfinished -= 1
        self.events += 1
        if self._bar is not None:
            self._bar.update(1)
        self._pending = True
        self._left_policy(job, now)

    def _left_policy(self, job: int, now: float) -> None:
        """``job`` left the running set without the policy's decision: tell a policy that keeps
        its own running set, and begin the round an event-driven or "work" policy would."""
        if self._has_on_finish:
            self.policy.on_finish(self.view, job, now)
        if self._preemptive:
            self._event_round()

    def _event_round(self) -> None:
        """Begin a round where the policy's rounds would have one now: every event of an
        event-driven policy (Tiresias), any event while nothing runs for a "work" policy (Gavel)."""
        if ((self._by_work and not self.view.running) or self._by_event) and not self.view.at_round:
            self._begin_round()

    def _attempt_fails(self, ev) -> None:
        job, epoch = ev.value
        if epoch == self.epoch[job] and job in self.view.running:
            i = self.next_failure[job]
            self.next_failure[job] = i + 1
            self._fail(job, FAILED, float(self.fates.gaps[job][i]))
        self._after_event()

    def _fail(self, job: int, ended: int, gap: float) -> None:
        """The job's attempt fails now: back to the policy after ``gap`` seconds, with the work of
        its last checkpoint."""
        now = self._env.now
        self._stop(job, now, ended)
        self.failed_attempts[job] += 1
        if self.failed_attempts[job] > MAX_ATTEMPTS:  # it would start again for ever: a hang, not a result
            raise SimulationError(
                f"job {self.view.job_ids[job]!s} failed {self.failed_attempts[job]:,} times by simulated time "
                f"{now:.4g} s: it cannot finish between failures (it checkpoints "
                f"{'never' if self._interval[job] == math.inf else f'every {self._interval[job]:g} s'}); "
                "checkpoint more often (--checkpoint-every) or lower the failure rate")
        self.attempt_held[job] = 0.0
        self.events += 1
        self._pending = True
        self._left_policy(job, now)
        if gap > 0:
            self._env.timeout(gap, job).callbacks.append(self._resubmitted)
        else:
            self._requeue(job)

    def _resubmitted(self, ev) -> None:
        self._requeue(ev.value)
        self._after_event()

    def _requeue(self, job: int) -> None:
        """``job`` is submitted again: a new arrival to the policy, with the work it has left."""
        self.view.waiting[job] = None
        self._new.append(job)
        self.events += 1
        self._pending = True
        if self._preemptive:
            self._event_round()
            self._arm_round()
        else:  # its view's run times: what is left of the work
            left = 1.0 - float(self.done[job])
            ratio = left / self._left_share[job]
            self._left_share[job] = left
            self.predicted[job] = self.initial_predicted[job] * left
            for matrix in self._quantiles.values():
                matrix[job] *= ratio

    # -- nodes ---------------------------------------------------------------------------------
    def _arm_node_failure(self) -> None:
        """Queue the next node failure among the GPUs up now (a repair draws it again)."""
        if self._nodes is None or self._unfinished <= 0:
            return
        wait = self._nodes.interval(self._rng, int(self.state.total_by_type.sum()))
        self._node_token += 1
        if math.isfinite(wait):
            self._env.timeout(wait, self._node_token).callbacks.append(self._node_fails)

    def _node_fails(self, ev) -> None:
        if ev.value != self._node_token or self._unfinished <= 0:
            return  # drawn before a repair changed the GPUs up, or every job has ended
        state = self.state
        up = np.ones(len(self._node_sizes), dtype=bool)
        up[list(state.down)] = False
        weights = np.where(up, self._node_sizes, 0.0)
        node = int(self._rng.choice(len(weights), p=weights / weights.sum()))
        lo = int(np.searchsorted(state.gpu_node, node))
        ids = range(lo, lo + int(self._node_sizes[node]))
        for job in sorted({int(state.gpu_job[g]) for g in ids} - {-1, -2}):
            self._fail(job, NODE_FAILURE, 0.0)
        state.take_down(node)
        self._event_round()  # fewer GPUs: the round an event-driven policy has at any event (none ran on it too)
        repair = float(self._nodes.repair.sample(self._rng, 1)[0])
        now = self._env.now
        self.outages.append((node, now, now + repair))
        self._env.timeout(repair, node).callbacks.append(self._node_repaired)
        self.events += 1
        self._pending = True
        self._arm_node_failure()
        self._after_event()

    def _node_repaired(self, ev) -> None:
        self.state.bring_up(ev.value)
        self.events += 1
        if self.view.waiting:  # GPUs for the jobs that wait: the policy's turn (a round, for one of events)
            self._pending = True
            self._event_round()
        self._arm_node_failure()
        self._after_event()

    # -- driver ----------------------------------------------------------------------------------
    def _before_replay(self) -> None:
        super()._before_replay()
        self._arm_node_failure()

    def _rounds_taken(self) -> int | None:
        return self._rounds if self.policy.preemptive else None  # a non-preemptive policy has no rounds

    def _busy_by_type(self) -> dict[str, float]:
        return dict(zip(self.cluster.gpu_types, self.held_by_type.tolist()))

    def _records(self) -> pd.DataFrame:
        records = super()._records()
        placed = self.type_of >= 0
        ending = np.asarray(self.ending, dtype=np.int64)
        status = np.where(self.rejected, "rejected",
                          np.asarray(["completed", "failed", "cancelled"], dtype=object)[
                              np.select([ending == FAILED, ending == CANCELLED], [1, 2], 0)])
        submit = records["submit"].to_numpy()
        records["status"] = pd.array(status, dtype=records["status"].dtype)
        first_start = np.asarray(self.first_start, dtype="float64")
        failed = np.asarray(self.failed_attempts, dtype=np.int64)
        records["start"] = first_start
        records["queueing_delay"] = first_start - submit
        records["attempts"] = np.where(placed, 1 + failed, 0)
        records["failed_attempts"] = failed
        records["gpu_seconds"] = np.where(placed, self.attained, 0.0)
        records["lost_work_s"] = np.asarray(self.lost_work, dtype="float64")
        records["checkpoint_s"] = np.asarray(self.write_spent, dtype="float64")
        records["checkpoint_interval_s"] = self.interval
        records["restart_overhead_s"] = np.asarray(self.restart_spent, dtype="float64")
        return records

    def outages_frame(self) -> pd.DataFrame:
        """One row per node failure: the node, when it failed and when its repair ended."""
        names = [node.name for node in self.cluster.nodes]
        return pd.DataFrame({"node": [names[n] for n, _, _ in self.outages],
                             "failed_at": [t for _, t, _ in self.outages],
                             "repaired_at": [r for _, _, r in self.outages]})
