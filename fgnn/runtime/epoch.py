"""The controller half of the runtime: one epoch on the driver (FGNN §5.2-§5.3).

:class:`EpochCoordinator` owns an epoch: it starts the Trainers, hands mini-batch tasks to the
Samplers dynamically (:class:`TaskScheduler`, a few calls in flight per Sampler, ``wait`` for
whichever finishes first), wakes each Sampler's standby Trainer once that Sampler has finished
its share (dynamic switching, §5.3), polls the global queue for progress, depth and lost
samples, handles executor failures and stalls (leases back to the queue, restart or continue
with fewer -- :meth:`WorkerGroup.failed <fgnn.runtime.workers.WorkerGroup.failed>` -- or stop
with a checkpoint), keeps the exactly-once ledger and folds the records into an
:class:`~fgnn.monitor.stats.EpochStats`. An epoch's state lives in one :class:`_Epoch`; the
coordinator is passed the executors, the services and the watchdog it acts through.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from fgnn.config import JobConfig
from fgnn.evaluation import EvalPlan, SplitScore
from fgnn.executors import host
from fgnn.executors.common import metrics_for
from fgnn.runtime.faults import _RESTART_TIMEOUT_S, RuntimeFailure, Watchdog, pass_name
from fgnn.runtime.ledger import epoch_ledger, redelivered
from fgnn.executors.typed import sum_typed
from fgnn.runtime.workers import Services, WorkerGroup, _Exec
from fgnn.executors.scheduler import StandbyPolicy, TaskScheduler, trainer_seconds
from fgnn.executors.task_record import TaskRecord
from fgnn.monitor.stats import EpochStats, SampleTimes

__all__ = ["EpochCoordinator", "EvalOutcome", "RuntimeFailure"]

log = logging.getLogger(__name__)

#: Seconds between the driver's polls of the queue (progress, depth samples).
_POLL_S = 0.05
#: Sampler calls kept in flight per Sampler (one running, one waiting in its mailbox).
_SAMPLER_DEPTH = 2


@dataclass
class _EpochAcc:
    """Per-epoch accumulation on the driver."""

    sample: SampleTimes = field(default_factory=SampleTimes)
    sampler_wait_s: float = 0.0
    records: list[TaskRecord] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    sampled: int = 0
    lost: int = 0
    """Samples whose owner (a Sampler) died before a Trainer read them."""
    reissued: int = 0
    """Tasks handed to Samplers again after a fault."""
    ledger: Optional[dict[str, Any]] = None
    """The epoch's exactly-once ledger (:func:`~fgnn.runtime.ledger.epoch_ledger`)."""


@dataclass
class _Epoch:
    """The state of one epoch (or evaluation pass) on the driver."""

    epoch: int
    total: int
    plan: Optional[EvalPlan]
    weights: Any
    measure: bool
    samplers: list[_Exec]
    trainers: list[_Exec]
    standbys: dict[int, _Exec]
    """Sampler device -> its standby Trainer."""
    sched: TaskScheduler
    metrics: Any
    t_start: float = field(default_factory=time.perf_counter)
    acc: _EpochAcc = field(default_factory=_EpochAcc)
    running: dict[Any, _Exec] = field(default_factory=dict)
    """``run_epoch`` ref -> Trainer or standby."""
    sampling: dict[Any, tuple[_Exec, int, int]] = field(default_factory=dict)
    """``sample_task`` ref -> (Sampler, task, incarnation)."""
    flushing: dict[Any, _Exec] = field(default_factory=dict)
    """``flush`` ref -> Sampler."""
    unconfirmed: dict[int, int] = field(default_factory=dict)
    """Sampler device -> task whose put is still in flight."""
    woke: set[int] = field(default_factory=set)
    """Sampler devices whose standby was started."""
    switched: dict[str, int] = field(default_factory=dict)
    """Standby name -> batches it trained."""
    declined: dict[str, int] = field(default_factory=dict)
    """Standby name -> runs it ended by declining a fetch (profit not positive)."""
    seen: int = 0
    done: int = 0
    last_loss: float = float("nan")
    last_poll: float = 0.0
    last_progress: float = 0.0


OnBatch = Callable[[int, int, int, float], None]
OnEvalBatch = Callable[[tuple[str, ...], int, int], None]


class EpochCoordinator:
    """Owns an epoch: hands out tasks, collects results, handles executor faults and stalls,
    keeps the exactly-once ledger.

    Args:
        config: the job.
        services: the queue and the parameter server of the job.
        workers: the executors (their failures are handled by :meth:`WorkerGroup.failed`).
        watchdog: the driver's deadline and the job's stop.
        step_tasks: R, tasks per mini-batch.
        on_batch: ``on_batch(epoch, batches_done, batches_total, loss)`` as batches complete.
        on_eval_batch: ``on_eval_batch(splits, chunks_done, chunks_total)`` in evaluation passes.

    Attributes:
        memory_reports: Trainer name -> its measured step memory (the warm-up epoch).
        details: per-epoch extras beyond :class:`EpochStats` (overheads, ledger, standby batches).
        warm_t_train: T_t of the warm-up epoch: a standby's estimate before the epoch's own
            records (None before it is known).
    """

    def __init__(self, config: JobConfig, services: Services, workers: WorkerGroup,
                 watchdog: Watchdog, step_tasks: int, on_batch: Optional[OnBatch] = None,
                 on_eval_batch: Optional[OnEvalBatch] = None) -> None:
        self.config, self.services, self.workers = config, services, workers
        self.watchdog, self.step_tasks = watchdog, step_tasks
        self.on_batch, self.on_eval_batch = on_batch, on_eval_batch
        self.memory_reports: dict[str, Any] = {}
        self.details: list[dict[str, Any]] = []
        self.warm_t_train: Optional[float] = None

    # ------------------------------------------------------------------ the epoch
    def run(self, epoch: int, total: int, plan: Optional[EvalPlan] = None, weights: Any = None,
            measure: bool = False) -> Any:
        """Run one epoch of ``total`` tasks to completion: every task acknowledged once;
        returns its :class:`EpochStats`. With ``measure`` (the warm-up epoch) every Trainer
        measures its training step's device memory; the reports are kept in
        :attr:`memory_reports`.

        With ``plan`` it runs an evaluation pass instead (``epoch`` is then the pass's own id):
        the Samplers sample the plan's chunks, the Trainers score them with ``weights`` (an
        ``ObjectRef`` of flat weights, or None for the server's current ones) through the same
        queue, switching and fault handling; returns an :class:`EvalOutcome`.
        """
        ep = self._begin(epoch, total, plan, weights, measure)
        while not self._step(ep):
            pass
        # the epoch is complete: wait for the executors to notice and return, with a deadline
        # (a stopped process never returns)
        self._drain(ep)
        elapsed = time.perf_counter() - ep.t_start
        if plan is not None:
            return _eval_outcome(plan, ep.acc.records, elapsed)
        return self._finish(ep, elapsed)

    def _begin(self, epoch: int, total: int, plan: Optional[EvalPlan], weights: Any,
               measure: bool) -> _Epoch:
        """Start the epoch on the queue and the server, then the Trainers."""
        rt, sv = self.config.runtime, self.services
        no_trainer = not self.workers.alive("trainer")
        # with no normal Trainer the standby starts only once the epoch is sampled (§7.9): the
        # queue (host memory) must hold the whole epoch
        whole = rt.mode in ("single", "time-sharing") or no_trainer
        maxsize = max(rt.queue_size, total) if whole else rt.queue_size
        starts = [sv.queue.begin_epoch.remote(epoch, total, maxsize)]
        if plan is None:
            starts.append(sv.ps.begin_epoch.remote(epoch, total, self.step_tasks))
        self.watchdog.get(starts, "the queue or the parameter server", epoch)
        if plan is None and rt.exchange == "collective":
            self._join_exchange(epoch)
        ep = _Epoch(epoch, total, plan, weights, measure, self.workers.alive("sampler"),
                    self.workers.alive("trainer"),
                    {e.device: e for e in self.workers.alive("standby")},
                    TaskScheduler(total), metrics_for("driver", "host"))
        if rt.mode == "time-sharing":
            self.watchdog.get(sv.queue.put_tasks.remote(epoch, list(range(total))),
                              "the global queue", epoch)
            for t in range(total):
                ep.sched.next_task(-1)
                ep.sched.task_sampled(t)
        if rt.mode != "single":
            for e in ep.trainers:
                self._start_trainer(ep, e, None)
        ep.last_progress = time.perf_counter()
        return ep

    def _join_exchange(self, epoch: int) -> None:
        """Every live Trainer and standby joins the collective exchange's group of ``epoch``
        (:mod:`fgnn.exchange.collective`); one that cannot is released, and its ``run_epoch``
        meets the fault handling."""
        import ray

        ps = self.services.ps
        members = [e for e in self.workers.execs if e.role != "sampler" and e.alive]
        self.watchdog.get(ps.expect.remote([e.name for e in members]), "the step ledger", epoch)
        refs = {e.handle.exchange_begin.remote(epoch): e for e in members}
        for ref, e in refs.items():
            try:
                self.watchdog.get(ref, e.name, epoch)
            except ray.exceptions.RayError:
                self.watchdog.get(ps.release.remote(e.name), "the step ledger", epoch)

    def _start_trainer(self, ep: _Epoch, e: _Exec, policy: Optional[StandbyPolicy]) -> None:
        ep.running[e.handle.run_epoch.remote(ep.epoch, policy, ep.plan, ep.weights,
                                             ep.measure)] = e

    def _step(self, ep: _Epoch) -> bool:
        """One round of the driver's loop; True once every task is acknowledged."""
        self._hand_out(ep)
        self._flush_finished(ep)
        self._wake_standbys(ep)
        refs = list(ep.sampling) + list(ep.running) + list(ep.flushing)
        ready = []
        if refs:
            ready, _ = host.wait(refs, num_returns=1, timeout=_POLL_S)
        returned = False  # a Trainer's run_epoch: most often the pass is complete
        for r in ready:
            returned = returned or r in ep.running
            self._collect(ep, r)
        now = time.perf_counter()
        if now - ep.last_poll < _POLL_S and ready and not returned:
            return False
        ep.last_poll = now
        return self._poll(ep, now)

    def _hand_out(self, ep: _Epoch) -> None:
        """Hand out tasks dynamically (§5.2): up to ``_SAMPLER_DEPTH`` calls per Sampler."""
        for s in ep.samplers:
            if not s.alive:
                continue
            busy = sum(1 for e, _, _ in ep.sampling.values() if e is s)
            while busy < _SAMPLER_DEPTH:
                t = ep.sched.next_task(s.device)
                if t is None:
                    break
                ep.sampling[s.handle.sample_task.remote(ep.epoch, t, ep.plan)] = (s, t, s.gen)
                busy += 1

    def _flush_finished(self, ep: _Epoch) -> None:
        """A Sampler with its share done flushes its last put."""
        for s in ep.samplers:
            if (s.alive and s.device in ep.unconfirmed and ep.sched.sampler_finished(s.device)
                    and all(f is not s for f in ep.flushing.values())):
                ep.flushing[s.handle.flush.remote()] = s

    def _wake_standbys(self, ep: _Epoch) -> None:
        """Dynamic switching (§5.3): a Sampler's standby takes tasks once the Sampler's share
        is done (or it died, or every normal Trainer did), while P > 0."""
        rt = self.config.runtime
        if not (rt.switching or rt.mode == "single"):
            return
        for s in ep.samplers:
            sb = ep.standbys.get(s.device)
            done_share = (ep.sched.sampler_finished(s.device)
                          and s.device not in ep.unconfirmed)
            if (sb is not None and sb.alive and s.device not in ep.woke
                    and (done_share or not s.alive
                         or (ep.trainers and not any(t.alive for t in ep.trainers)))):
                ep.woke.add(s.device)
                self._start_trainer(ep, sb, self._standby_policy(ep))

    def _collect(self, ep: _Epoch, r: Any) -> None:
        """A call of the epoch returned: a Sampler's flush or task, or a Trainer's epoch."""
        if r in ep.flushing:
            self._flushed(ep, r, ep.flushing.pop(r))
        elif r in ep.sampling:
            self._sampled(ep, r, *ep.sampling.pop(r))
        else:
            self._returned(ep, r, ep.running.pop(r))

    def _flushed(self, ep: _Epoch, r: Any, s: _Exec) -> None:
        import ray

        try:
            res = host.get(r)
        except ray.exceptions.RayError as err:
            # Samples that reached the queue come back as "lost"; the last put may not have
            # reached it, so that task is issued again (the queue drops it if it did arrive).
            self.workers.failed(s, err)
            if s.device in ep.unconfirmed:
                ep.sched.task_failed(ep.unconfirmed.pop(s.device))
            return
        ep.unconfirmed.pop(s.device, None)
        ep.acc.sample.C += res["C"]
        ep.acc.sampler_wait_s += res["queue_wait"]

    def _sampled(self, ep: _Epoch, r: Any, s: _Exec, t: int, gen: int) -> None:
        import ray

        try:
            res = host.get(r)
        except ray.exceptions.RayError as err:
            if gen == s.gen:  # not a late failure of an earlier incarnation
                self.workers.failed(s, err)
                if s.device in ep.unconfirmed:
                    ep.sched.task_failed(ep.unconfirmed.pop(s.device))
            ep.sched.task_failed(t)
            return
        # This call waited for the previous put, so only this task's put is open.
        ep.unconfirmed[s.device] = t
        ep.sched.task_sampled(t)
        acc = ep.acc
        acc.sample.S += res["S"]
        acc.sample.M += res["M"]
        acc.sample.C += res["C"]
        acc.sampler_wait_s += res["queue_wait"]
        acc.sampled += 1
        # progress is a task sampled or finished, not just any call returning (a failing
        # executor's calls return too)
        ep.last_progress = time.perf_counter()

    def _returned(self, ep: _Epoch, r: Any, e: _Exec) -> None:
        """A Trainer's ``run_epoch`` returned, or failed: its leases go back to the queue and
        its slot on the server is released; a restarted one runs the epoch again."""
        import ray

        try:
            self._finished(e, host.get(r), ep)
        except ray.exceptions.RayError as err:
            sv = self.services
            self.watchdog.get([sv.queue.retire.remote(e.name), sv.ps.release.remote(e.name)],
                              "the queue or the parameter server", ep.epoch)
            if self.workers.failed(e, err):
                self._start_trainer(ep, e, None if e.role == "trainer"
                                    else self._standby_policy(ep))

    def _poll(self, ep: _Epoch, now: float) -> bool:
        """Poll the queue: new records, depth, lost samples; True once the epoch is done. Stops
        the job when it cannot finish or no task finished for ``runtime.stall_timeout_s``."""
        st = self.watchdog.get(self.services.queue.poll.remote(ep.seen), "the global queue",
                               ep.epoch)
        ep.seen += len(st["records"])
        depth = int(st["depth"])
        ep.acc.depth.append(depth)
        ep.metrics.queue_depth(depth)
        for task, who, why in st.get("retries", ()):
            log.warning("%s: task %d sampled again: %s could not fetch its sample: %s",
                        pass_name(ep.epoch), task, who, why)
        if st.get("failure"):
            raise self.watchdog.failure(f"{pass_name(ep.epoch)}: {st['failure']}; the job "
                                        f"stopped")
        if st["lost"]:
            ep.acc.lost += len(st["lost"])
            ep.sched.extend(st["lost"])
        for rec in st["records"]:
            self._record(ep, rec)
        if st["done"] >= ep.total:
            return True
        if st["records"]:
            ep.last_progress = now
        self._check_alive(ep.epoch, ep.samplers, ep.trainers, ep.standbys)
        if now - ep.last_progress > self.config.runtime.stall_timeout_s:
            self._stalled(ep.epoch, ep.done, ep.total, depth)
        return False

    def _record(self, ep: _Epoch, rec: TaskRecord) -> None:
        """An acknowledged task's record: keep it, report progress."""
        ep.acc.records.append(rec)
        ep.done += 1
        if rec.loss is not None:
            ep.last_loss = rec.loss
        if ep.plan is not None:
            if self.on_eval_batch is not None:
                self.on_eval_batch(ep.plan.splits, ep.done, ep.total)
        elif self.on_batch is not None:
            self.on_batch(ep.epoch, ep.done, ep.total, float(ep.last_loss))

    def _finish(self, ep: _Epoch, elapsed: float) -> EpochStats:
        """The epoch's exactly-once ledger (server and queue) and its statistics."""
        sv, mode = self.services, self.config.runtime.mode
        ledger, qledger = self.watchdog.get([sv.ps.ledger.remote(), sv.queue.ledger.remote()],
                                            "the queue or the parameter server", ep.epoch)
        ledger = {**ledger, **qledger}
        sched, acc = ep.sched, ep.acc
        # handed out again: tasks the driver issued twice, and leases the queue gave once more
        # (a dead Trainer's, given back by ``retire``)
        again = redelivered(qledger.get("deliveries", {}))
        acc.reissued = sched.issued - (0 if mode == "time-sharing" else ep.total) + again
        acc.ledger = epoch_ledger(ep.total, sched.issued, acc.lost,
                                  max(0, sched.issued - ep.total) + again, ledger)
        stats = self._epoch_stats(ep, elapsed)
        self.details.append(self._epoch_details(ep, ledger))
        return stats

    # ------------------------------------------------------------------ faults
    def _drain(self, ep: _Epoch) -> None:
        """After the last task: collect the executors' returns within
        ``runtime.stall_timeout_s`` (an executor Ray is restarting gets the rest of its
        ``_RESTART_TIMEOUT_S``); one that does not return is hung (stopped), and the job stops
        naming it."""
        import ray

        running, sampling = ep.running, ep.sampling
        owner = {**running, **ep.flushing, **{r: s for r, (s, _, _) in sampling.items()}}
        names = {r: e.name for r, e in owner.items()}
        if not names:
            return
        now = time.perf_counter()
        restarts = [e.first_failure + _RESTART_TIMEOUT_S - now for e in owner.values()
                    if e.first_failure is not None]
        wait_s = max([self.config.runtime.stall_timeout_s, *restarts])
        ready, pending = host.wait(list(names), num_returns=len(names), timeout=wait_s)
        for r in ready:
            try:
                res = host.get(r)
            except ray.exceptions.RayError as err:
                if r in running:
                    self.workers.failed(running[r], err)
                elif r in sampling and sampling[r][2] == sampling[r][0].gen:
                    self.workers.failed(sampling[r][0], err)
                continue
            if r in running:
                self._finished(running[r], res, ep)
        if pending:
            hung = sorted({names[r] for r in pending})
            raise self.watchdog.failure(
                f"{pass_name(ep.epoch)}: {', '.join(hung)} did not return for {wait_s:.0f}s "
                f"after the last task: hung (a stopped process?), and the job stopped "
                f"(runtime.stall_timeout_s, --stall-timeout, sets the limit)")

    def _finished(self, e: _Exec, res: dict[str, Any], ep: _Epoch) -> None:
        """Book a Trainer's finished ``run_epoch``: standby batches and declines, memory
        report."""
        if e.role == "standby" and res["batches"] > 0:
            ep.switched[e.name] = ep.switched.get(e.name, 0) + res["batches"]
        if e.role == "standby" and res.get("declined"):
            ep.declined[e.name] = ep.declined.get(e.name, 0) + 1
        if res.get("memory") is not None:
            self.memory_reports[e.name] = res["memory"]

    def _standby_policy(self, ep: _Epoch) -> StandbyPolicy:
        """T_t from the normal Trainers' records so far (else the warm-up epoch's), N_t alive."""
        recs = [r for r in ep.acc.records if r.role == "trainer"]
        if recs:
            t_t = trainer_seconds(sum(r.extract_s for r in recs), sum(r.train_s for r in recs),
                                  len(recs))
        elif self.warm_t_train is not None:
            t_t = self.warm_t_train
        else:
            t_t = 0.0
        n_t = sum(1 for e in ep.trainers if e.alive)
        return StandbyPolicy(t_train=t_t, num_trainers=n_t, t_standby=t_t)

    def _check_alive(self, epoch: int, samplers: list[_Exec], trainers: list[_Exec],
                     standbys: dict[int, _Exec]) -> None:
        """Stop with a checkpoint when the epoch cannot finish."""
        can_train = any(e.alive for e in trainers) or any(e.alive for e in standbys.values())
        can_sample = (self.config.runtime.mode == "time-sharing"
                      or any(e.alive for e in samplers))
        if can_train and can_sample:
            return
        self.watchdog.abort(self.services.queue, "no executors left")
        what = "Trainer" if not can_train else "Sampler"
        oom = len(self.workers.oom_deaths)
        why = f" ({oom} killed by the kernel's OOM killer, said above)" if oom else ""
        raise self.watchdog.failure(
            f"{pass_name(epoch)}: every {what} executor died and could not be restarted"
            f"{why}; the job stopped")

    def _stalled(self, epoch: int, done: int, total: int, depth: int) -> None:
        """Stop: no task finished for ``runtime.stall_timeout_s``. The failure checkpoint is the
        last completed epoch (kept by the driver, so a hung parameter server is not asked)."""
        limit = self.config.runtime.stall_timeout_s
        self.watchdog.abort(self.services.queue, "stalled")
        raise self.watchdog.failure(
            f"{pass_name(epoch)}: no task finished for {limit:.0f}s ({done} of {total} "
            f"done, {depth} queued): an executor or the parameter server is hung, and the job "
            f"stopped (runtime.stall_timeout_s, --stall-timeout, sets the limit)")

    # ------------------------------------------------------------------ statistics
    def _epoch_stats(self, ep: _Epoch, elapsed: float) -> EpochStats:
        acc, recs = ep.acc, ep.acc.records
        sample = SampleTimes(acc.sample.S, acc.sample.M, acc.sample.C)
        sample.S += sum(r.S for r in recs)
        sample.M += sum(r.M for r in recs)
        hits = sum(r.hits for r in recs)
        misses = sum(r.misses for r in recs)
        tiers = ("local", "peer", "host")
        tier_rows = {t: int(sum(r.tier_rows.get(t, 0) for r in recs)) for t in tiers}
        tier_bytes = {t: int(sum(r.tier_bytes.get(t, 0) for r in recs)) for t in tiers}
        sample_bytes = int(sum(r.nbytes for r in recs))
        extract_s = sum(r.extract_s for r in recs)
        train_s = sum(r.train_s for r in recs)
        losses = [r.loss for r in recs if r.loss is not None]
        ts, n = self.config.runtime.mode == "time-sharing", self.services.num_devices
        return EpochStats(
            epoch=ep.epoch, time_s=elapsed, sample=sample,
            extract_s=extract_s, train_s=train_s,
            hit_rate=hits / (hits + misses) if hits + misses else 0.0,
            bytes_host_to_device=int(sum(r.host_bytes for r in recs)) + sample_bytes,
            sample_bytes=sample_bytes, tier_rows=tier_rows, tier_bytes=tier_bytes,
            peer_host_rows=int(sum(r.tier_rows.get("peer_host", 0) for r in recs)),
            load_ratio=extract_s / (extract_s + train_s) if extract_s + train_s > 0 else 0.0,
            switches=len(ep.switched), declines=sum(ep.declined.values()), batches=len(recs),
            loss=float(np.mean(losses)) if losses else float("nan"),
            samplers=n if ts else sum(1 for s in ep.samplers if s.alive),
            trainers=n if ts else sum(1 for t in ep.trainers if t.alive),
            queue_wait_s=sum(r.wait_s for r in recs),
            queue_depth=acc.depth,
            disk=_sum_counts([r.disk for r in recs if r.disk is not None]),
            typed_cache=sum_typed(recs),
            ledger=acc.ledger,
        )

    def _epoch_details(self, ep: _Epoch, ledger: dict[str, Any]) -> dict[str, Any]:
        """The epoch's extras beyond :class:`EpochStats` (:attr:`details`)."""
        recs = ep.acc.records
        return {
            "epoch": ep.epoch, "warmup": ep.measure,
            "standby_batches": dict(ep.switched),
            "standby_declines": dict(ep.declined),
            "batches_by": _count_by(recs),
            "rpc_s": sum(r.rpc_s for r in recs),
            "fetch_s": sum(r.fetch_s for r in recs),
            "stall_s": sum(r.stall_s for r in recs),
            # queue calls and sample fetches the Trainers' prefetch did not hide
            "exposed_queue_s": sum(min(r.stall_s, r.rpc_s + r.fetch_s) for r in recs),
            "sync_s": sum(r.sync_s for r in recs),
            "step_wait_s": sum(r.step_wait_s for r in recs),
            # sync_s by part (the Trainers' x_* fields: claim, push or delivery, the wait for
            # the step's weights and its pieces), seconds summed over the epoch's tasks
            "exchange_parts": _sum_parts(recs),
            "steps": ledger.get("steps"),
            # the part of queue_wait_s spent before each Trainer's first mini-batch of the
            # epoch (the pipeline filling), apart from waits once samples were flowing
            "fill_wait_s": _first_wait_by(recs),
            # queue waits the Trainer actually idled on (a prefetch thread's wait overlaps the
            # training of the previous mini-batch; only what its stall exposed counts)
            "exposed_wait_s": sum(min(r.stall_s, r.wait_s) for r in recs),
            "sampler_queue_wait_s": ep.acc.sampler_wait_s,
            "task_ids": sorted(r.task_id for r in recs),
            "lost_samples": ep.acc.lost, "reissued": ep.acc.reissued,
            # exactly-once ledger, task id -> count: gradients pushed / applied / turned away on
            # the server, leases handed out and acknowledgements (every call) on the queue
            "attempts": ledger["attempts"], "applied": ledger["applied"],
            "rejected": ledger["rejected"], "applied_by": ledger["by"],
            "deliveries": ledger["deliveries"], "acks": ledger["acks"],
            "ps_busy_s": ledger["busy_s"],
        }


@dataclass
class EvalOutcome:
    """What an evaluation pass through the executors produced.

    Attributes:
        scores: split name -> summed :class:`~fgnn.evaluation.SplitScore`.
        time_s: wall time of the pass.
        batches: chunks scored.
        extract_s: summed Extract seconds of the chunks.
        forward_s: summed forward seconds of the chunks.
        pairs: link prediction: split name -> ``(scores, labels)`` of its pairs in pair order
            (the chunks' records joined by task id); empty for node classification.
    """

    scores: dict[str, SplitScore]
    time_s: float
    batches: int
    extract_s: float
    forward_s: float
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def accuracy(self, split: str) -> float:
        """Accuracy of ``split`` (NaN when it was not scored or is empty)."""
        s = self.scores.get(split)
        return s.accuracy if s is not None else float("nan")


def _eval_outcome(plan: EvalPlan, recs: list[TaskRecord], elapsed: float) -> EvalOutcome:
    """Sum the chunk records of an evaluation pass per split (each task acknowledged once)."""
    scores = {s: SplitScore() for s in plan.splits}
    for r in recs:
        scores[r.split].add(SplitScore(r.correct, r.count, r.loss_sum))
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    linked = sorted((r for r in recs if r.pair_scores is not None), key=lambda r: r.task_id)
    for s in plan.splits:
        mine = [r for r in linked if r.split == s]
        if mine:  # chunks cut the split's pairs in order, so task order is pair order
            pairs[s] = (np.concatenate([r.pair_scores for r in mine]),
                        np.concatenate([r.pair_labels for r in mine]))
    return EvalOutcome(scores, elapsed, len(recs), sum(r.extract_s for r in recs),
                       sum(r.eval_s for r in recs), pairs)


def _sum_counts(dicts: list[dict[str, int]]) -> Optional[dict[str, int]]:
    """Key-wise sum of per-batch counters (None when there are none)."""
    if not dicts:
        return None
    return {k: int(sum(d.get(k, 0) for d in dicts)) for k in dicts[0]}


def _sum_parts(recs: list[TaskRecord]) -> dict[str, float]:
    """Part-wise sum over the records of their ``exchange_parts`` (``x_*`` -> seconds)."""
    out: dict[str, float] = {}
    for r in recs:
        for k, v in r.exchange_parts.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def _count_by(recs: list[TaskRecord]) -> dict[str, int]:
    """Records per consumer."""
    out: dict[str, int] = {}
    for r in recs:
        out[r.consumer] = out.get(r.consumer, 0) + 1
    return out


def _first_wait_by(recs: list[TaskRecord]) -> float:
    """Sum over consumers of the queue wait of each one's first record (records arrive in each
    consumer's training order)."""
    seen: set[str] = set()
    total = 0.0
    for r in recs:
        if r.consumer not in seen:
            seen.add(r.consumer)
            total += float(r.wait_s)
    return total
