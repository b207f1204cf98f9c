"""The controller half of the runtime: one epoch on the driver (FGNN §5.2-§5.3).

:class:`EpochLoop` is mixed into :class:`~fgnn.executors.runtime.Runtime`. Per epoch it starts
the Trainers, hands mini-batch tasks to the Samplers dynamically (:class:`TaskScheduler`, a few
calls in flight per Sampler, ``ray.wait`` for whichever finishes first), wakes each Sampler's
standby Trainer once that Sampler has finished its share (dynamic switching, §5.3), polls the
global queue for progress, depth and lost samples, handles executor failures (leases back to the
queue, restart or continue with fewer, or stop with a checkpoint) and folds the records into an
:class:`~fgnn.monitor.stats.EpochStats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from fgnn.evaluation import EvalPlan, SplitScore
from fgnn.executors._common import NonFiniteLoss, metrics_for
from fgnn.executors._ledger import epoch_ledger
from fgnn.executors._resume import _resume_hint
from fgnn.executors.scheduler import StandbyPolicy, TaskScheduler, epoch_batches
from fgnn.monitor.stats import EpochStats, SampleTimes

__all__ = ["EpochLoop", "EvalOutcome", "RuntimeFailure"]

#: Seconds between the driver's polls of the queue (progress, depth samples).
_POLL_S = 0.05
#: Sampler calls kept in flight per Sampler (one running, one waiting in its mailbox).
_SAMPLER_DEPTH = 2
#: Times Ray restarts a dead executor before the job continues without it.
_MAX_RESTARTS = 1
#: Seconds a restarting executor may take before the job continues without it.
_RESTART_TIMEOUT_S = 120.0
#: Most seconds the driver waits for the queue to take an abort (it may be the hung part).
_ABORT_TIMEOUT_S = 10.0


def _death_errors() -> tuple[type, ...]:
    """Ray's errors for a process or object that is gone (not an exception inside fgnn code,
    which arrives as ``RayTaskError`` and keeps its traceback)."""
    import ray.exceptions as rx

    return (rx.RayActorError, rx.LocalRayletDiedError, rx.NodeDiedError, rx.WorkerCrashedError,
            rx.ObjectLostError, rx.RaySystemError, rx.RpcError)


class RuntimeFailure(RuntimeError):
    """The job cannot continue (no Trainer or no Sampler left); a checkpoint was written.

    Attributes:
        checkpoint: path of the resumable checkpoint.
    """

    def __init__(self, message: str, checkpoint: Optional[Path] = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


@dataclass
class _Exec:
    """An executor actor the driver tracks."""

    name: str
    role: str  # sampler | trainer | standby
    device: int
    handle: Any
    failures: int = 0
    """Crash incidents so far."""
    alive: bool = True
    gen: int = 0
    """Incarnation: bumped per failure, so calls lost in one crash count as one failure."""
    first_failure: Optional[float] = None
    """When the current incident began (a restart must finish within _RESTART_TIMEOUT_S)."""


@dataclass
class _EpochAcc:
    """Per-epoch accumulation on the driver."""

    sample: SampleTimes = field(default_factory=SampleTimes)
    sampler_wait_s: float = 0.0
    records: list[dict[str, Any]] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    sampled: int = 0
    lost: int = 0
    """Samples whose owner (a Sampler) died before a Trainer read them."""
    reissued: int = 0
    """Tasks handed to Samplers again after a fault."""
    ledger: Optional[dict[str, Any]] = None
    """The epoch's exactly-once ledger (:func:`~fgnn.executors._ledger.epoch_ledger`)."""


class EpochLoop:
    """One epoch on the driver; mixed into :class:`~fgnn.executors.runtime.Runtime`, whose
    attributes (``config``, ``dataset``, ``queue``, ``ps``, ``_execs``, ``on_batch``, ...) it
    uses."""

    def _run_epoch(self, epoch: int, plan: Optional[EvalPlan] = None, weights: Any = None,
                   measure: bool = False) -> Any:
        """Run one epoch to completion: every task acknowledged once; returns its
        :class:`EpochStats`. With ``measure`` (the warm-up epoch) every Trainer measures its
        training step's device memory; the reports are kept in ``self.memory_reports``.

        With ``plan`` it runs an evaluation pass instead (``epoch`` is then the pass's own id):
        the Samplers sample the plan's chunks, the Trainers score them with ``weights`` (an
        ``ObjectRef`` of flat weights, or None for the server's current ones) through the same
        queue, switching and fault handling; returns an :class:`EvalOutcome`.
        """
        import ray

        cfg = self.config
        rt = cfg.runtime
        mode = rt.mode
        if plan is not None:
            total = plan.num_tasks
        else:
            total = len(epoch_batches(self.dataset.train_idx, cfg.train.batch_size,
                                      cfg.train.seed, epoch, self.step_tasks))
        no_trainer = not any(e.role == "trainer" and e.alive for e in self._execs)
        # with no normal Trainer the standby starts only once the epoch is sampled (§7.9): the
        # queue (host memory) must hold the whole epoch
        whole = mode in ("single", "time-sharing") or no_trainer
        maxsize = max(rt.queue_size, total) if whole else rt.queue_size
        starts = [self.queue.begin_epoch.remote(epoch, total, maxsize)]
        if plan is None:
            starts.append(self.ps.begin_epoch.remote(epoch, total, self.step_tasks))
        self._service_get(starts, "the queue or the parameter server", epoch)
        if plan is None and rt.exchange == "collective":
            self._join_exchange(epoch)
        acc = _EpochAcc()
        sched = TaskScheduler(total)
        samplers = [e for e in self._execs if e.role == "sampler" and e.alive]
        trainers = [e for e in self._execs if e.role == "trainer" and e.alive]
        standbys = {e.device: e for e in self._execs if e.role == "standby" and e.alive}
        metrics = metrics_for("driver", "host")
        t_start = time.perf_counter()
        if mode == "time-sharing":
            self._service_get(self.queue.put_tasks.remote(epoch, list(range(total))),
                              "the global queue", epoch)
            for t in range(total):
                sched.next_task(-1)
                sched.task_sampled(t)
        running: dict[Any, _Exec] = {}  # run_epoch ref -> trainer/standby
        if mode != "single":
            for e in trainers:
                running[e.handle.run_epoch.remote(epoch, None, plan, weights, measure)] = e
        sampling: dict[Any, tuple[_Exec, int, int]] = {}  # ref -> (sampler, task, incarnation)
        woke: set[int] = set()
        unconfirmed: dict[int, int] = {}  # sampler device -> task whose put is still in flight
        flushing: dict[Any, _Exec] = {}  # flush ref -> sampler
        switched: dict[str, int] = {}
        seen, done, last_loss, last_poll = 0, 0, float("nan"), 0.0
        last_progress = time.perf_counter()
        while True:
            # hand out tasks dynamically (§5.2)
            for s in samplers:
                if not s.alive:
                    continue
                busy = sum(1 for e, _, _ in sampling.values() if e is s)
                while busy < _SAMPLER_DEPTH:
                    t = sched.next_task(s.device)
                    if t is None:
                        break
                    sampling[s.handle.sample_task.remote(epoch, t, plan)] = (s, t, s.gen)
                    busy += 1
            # a Sampler with its share done flushes its last put; then (dynamic switching,
            # §5.3) its standby takes tasks while P > 0
            for s in samplers:
                if (s.alive and s.device in unconfirmed and sched.sampler_finished(s.device)
                        and all(f is not s for f in flushing.values())):
                    flushing[s.handle.flush.remote()] = s
            for s in samplers:
                sb = standbys.get(s.device)
                done_share = (sched.sampler_finished(s.device)
                              and s.device not in unconfirmed)
                if (sb is not None and sb.alive and s.device not in woke
                        and (done_share or not s.alive
                             or (trainers and not any(t.alive for t in trainers)))
                        and (rt.switching or mode == "single")):
                    woke.add(s.device)
                    policy = self._standby_policy(acc, trainers)
                    running[sb.handle.run_epoch.remote(epoch, policy, plan, weights,
                                                       measure)] = sb
            refs = list(sampling) + list(running) + list(flushing)
            ready = []
            if refs:
                ready, _ = ray.wait(refs, num_returns=1, timeout=_POLL_S)
            for r in ready:
                if r in flushing:
                    s = flushing.pop(r)
                    try:
                        res = ray.get(r)
                        unconfirmed.pop(s.device, None)
                        acc.sample.C += res["C"]
                        acc.sampler_wait_s += res["queue_wait"]
                    except ray.exceptions.RayError as err:
                        # Samples that reached the queue come back as "lost"; the last put may
                        # not have reached it, so that task is issued again (the queue drops it
                        # if it did arrive).
                        self._executor_failed(s, err)
                        if s.device in unconfirmed:
                            sched.task_failed(unconfirmed.pop(s.device))
                elif r in sampling:
                    s, t, g = sampling.pop(r)
                    try:
                        res = ray.get(r)
                    except ray.exceptions.RayError as err:
                        if g == s.gen:  # not a late failure of an earlier incarnation
                            self._executor_failed(s, err)
                            if s.device in unconfirmed:
                                sched.task_failed(unconfirmed.pop(s.device))
                        sched.task_failed(t)
                        continue
                    # This call waited for the previous put, so only this task's put is open.
                    unconfirmed[s.device] = t
                    sched.task_sampled(t)
                    acc.sample.S += res["S"]
                    acc.sample.M += res["M"]
                    acc.sample.C += res["C"]
                    acc.sampler_wait_s += res["queue_wait"]
                    acc.sampled += 1
                    # progress is a task sampled or finished, not just any call returning (a
                    # failing executor's calls return too)
                    last_progress = time.perf_counter()
                else:
                    e = running.pop(r)
                    try:
                        self._finished(e, ray.get(r), switched)
                    except ray.exceptions.RayError as err:
                        self._service_get([self.queue.retire.remote(e.name),
                                           self.ps.release.remote(e.name)],
                                          "the queue or the parameter server", epoch)
                        if self._executor_failed(e, err):
                            policy = (None if e.role == "trainer"
                                      else self._standby_policy(acc, trainers))
                            running[e.handle.run_epoch.remote(epoch, policy, plan,
                                                              weights, measure)] = e
            now = time.perf_counter()
            if now - last_poll >= _POLL_S or not ready:
                last_poll = now
                st = self._service_get(self.queue.poll.remote(seen), "the global queue", epoch)
                seen += len(st["records"])
                acc.depth.append(int(st["depth"]))
                metrics.queue_depth(int(st["depth"]))
                if st["lost"]:
                    acc.lost += len(st["lost"])
                    sched.extend(st["lost"])
                for rec in st["records"]:
                    acc.records.append(rec)
                    done += 1
                    last_loss = rec.get("loss", last_loss)
                    if plan is not None:
                        if self.on_eval_batch is not None:
                            self.on_eval_batch(plan.splits, done, total)
                    elif self.on_batch is not None:
                        self.on_batch(epoch, done, total, float(last_loss))
                if st["done"] >= total:
                    break
                if st["records"]:
                    last_progress = now
                self._check_alive(samplers, trainers, standbys, sched, mode, epoch)
                if now - last_progress > rt.stall_timeout_s:
                    self._stalled(epoch, done, total, int(st["depth"]))
        # the epoch is complete: wait for the executors to notice and return, with a deadline
        # (a stopped process never returns)
        self._drain(epoch, running, flushing, sampling, switched)
        elapsed = time.perf_counter() - t_start
        if plan is not None:
            return _eval_outcome(plan, acc.records, elapsed)
        ledger, qledger = self._service_get([self.ps.ledger.remote(), self.queue.ledger.remote()],
                                            "the queue or the parameter server", epoch)
        ledger = {**ledger, **qledger}
        acc.reissued = sched.issued - (0 if mode == "time-sharing" else total)
        acc.ledger = epoch_ledger(total, sched.issued, acc.lost,
                                  max(0, sched.issued - total), ledger)
        return self._epoch_stats(epoch, elapsed, acc, ledger, switched, samplers, trainers,
                                 measure)

    def _drain(self, epoch: int, running: dict[Any, _Exec], flushing: dict[Any, _Exec],
               sampling: dict[Any, tuple[_Exec, int, int]], switched: dict[str, int]) -> None:
        """After the last task: collect the executors' returns within
        ``runtime.stall_timeout_s`` (an executor Ray is restarting gets the rest of its
        ``_RESTART_TIMEOUT_S``); one that does not return is hung (stopped), and the job stops
        naming it."""
        import ray

        owner = {**running, **flushing, **{r: s for r, (s, _, _) in sampling.items()}}
        names = {r: e.name for r, e in owner.items()}
        if not names:
            return
        limit = self.config.runtime.stall_timeout_s
        now = time.perf_counter()
        restarts = [e.first_failure + _RESTART_TIMEOUT_S - now for e in owner.values()
                    if e.first_failure is not None]
        wait_s = max([limit, *restarts])
        ready, pending = ray.wait(list(names), num_returns=len(names), timeout=wait_s)
        for r in ready:
            try:
                res = ray.get(r)
            except ray.exceptions.RayError as err:
                if r in running:
                    self._executor_failed(running[r], err)
                elif r in sampling and sampling[r][2] == sampling[r][0].gen:
                    self._executor_failed(sampling[r][0], err)
                continue
            if r in running:
                self._finished(running[r], res, switched)
        if pending:
            hung = sorted({names[r] for r in pending})
            path = self._failure_checkpoint()
            raise RuntimeFailure(
                f"{self._pass_name(epoch)}: {', '.join(hung)} did not return for {wait_s:.0f}s "
                f"after the last task: hung (a stopped process?), and the job stopped "
                f"(runtime.stall_timeout_s, --stall-timeout, sets the limit); "
                f"{_resume_hint(path, self._good['epoch'])}", path)

    def _join_exchange(self, epoch: int) -> None:
        """Every live Trainer and standby joins the collective exchange's group of ``epoch``
        (:mod:`fgnn.executors.collective`); one that cannot is released, and its ``run_epoch``
        meets the fault handling."""
        import ray

        members = [e for e in self._execs if e.role != "sampler" and e.alive]
        self._service_get(self.ps.expect.remote([e.name for e in members]), "the step ledger",
                          epoch)
        refs = {e.handle.exchange_begin.remote(epoch): e for e in members}
        for ref, e in refs.items():
            try:
                self._service_get(ref, e.name, epoch)
            except ray.exceptions.RayError:
                self._service_get(self.ps.release.remote(e.name), "the step ledger", epoch)

    def _finished(self, e: _Exec, res: dict[str, Any], switched: dict[str, int]) -> None:
        """Book a Trainer's finished ``run_epoch``: standby batches, memory report."""
        if e.role == "standby" and res["batches"] > 0:
            switched[e.name] = switched.get(e.name, 0) + res["batches"]
        if res.get("memory") is not None:
            self.memory_reports[e.name] = res["memory"]

    def _standby_policy(self, acc: _EpochAcc, trainers: list[_Exec]) -> StandbyPolicy:
        """T_t from the normal Trainers' records so far (else the warm-up epoch's), N_t alive."""
        recs = [r for r in acc.records if r.get("role") == "trainer"]
        if recs:
            t_t = sum(r["extract_s"] + r["train_s"] + r.get("eval_s", 0.0)
                      for r in recs) / len(recs)
        elif hasattr(self, "profile_times"):
            t_t = self.profile_times["T_t"]
        else:
            t_t = 0.0
        n_t = sum(1 for e in trainers if e.alive)
        return StandbyPolicy(t_train=t_t, num_trainers=n_t, t_standby=t_t)

    def _executor_failed(self, e: _Exec, err: BaseException) -> bool:
        """Handle a failed executor call; True when the actor should get the work again.

        ``ActorUnavailableError``: Ray is restarting the actor (``max_restarts``), so the work is
        resubmitted (calls queue until the restart completes; a call that still fails in the
        window is retried for up to ``_RESTART_TIMEOUT_S``). ``ActorDiedError``: the actor is
        gone for good and the job continues without it. Any other error is an exception inside
        the executor, a bug rather than a fault, and is re-raised with the cause chained.
        """
        import ray

        if isinstance(getattr(err, "cause", None), NonFiniteLoss):
            self._abort_queue("non-finite loss")
            path = self._failure_checkpoint()
            raise RuntimeFailure(f"{err.cause} (Trainer {e.name}), and the job stopped; "
                                 f"{_resume_hint(path, self._good['epoch'])}", path)
        if isinstance(err, ray.exceptions.RayTaskError) and \
                isinstance(err.cause, _death_errors()):
            raise err.cause from err  # a service the executor called died: the runtime names it
        if not isinstance(err, ray.exceptions.RayActorError):
            raise RuntimeError(f"executor {e.name} failed: {err}") from err
        now = time.perf_counter()
        if isinstance(err, ray.exceptions.ActorDiedError):
            e.alive = False
            return False
        if e.first_failure is None or now - e.first_failure > 2 * _RESTART_TIMEOUT_S:
            e.first_failure = now
            e.failures += 1
        e.gen += 1
        if now - e.first_failure > _RESTART_TIMEOUT_S:
            e.alive = False
            return False
        time.sleep(0.1)  # let Ray mark the actor as restarting before the resubmission
        # a restarted executor is built without its cache
        self._last_reinstall = self._install_cache([e])
        return True

    def _check_alive(self, samplers: list[_Exec], trainers: list[_Exec],
                     standbys: dict[int, _Exec], sched: TaskScheduler, mode: str,
                     epoch: int) -> None:
        """Stop with a checkpoint when the epoch cannot finish."""
        can_train = any(e.alive for e in trainers) or any(e.alive for e in standbys.values())
        can_sample = mode == "time-sharing" or any(e.alive for e in samplers)
        if can_train and can_sample:
            return
        import ray

        self._abort_queue("no executors left")
        what = "Trainer" if not can_train else "Sampler"
        path = self._failure_checkpoint()
        raise RuntimeFailure(
            f"{self._pass_name(epoch)}: every {what} executor died and could not be restarted; "
            f"the job stopped; {_resume_hint(path, self._good['epoch'])}", path)

    def _service_get(self, refs: Any, what: str, epoch: Optional[int] = None) -> Any:
        """``ray.get`` of a call the driver waits on (the queue, the parameter server, an
        executor's cache fill or settings) with ``runtime.stall_timeout_s`` as its deadline: the
        driver never blocks without one. Past it ``what`` is hung and the job stops with the
        last good checkpoint."""
        import ray

        limit = self.config.runtime.stall_timeout_s
        try:
            return ray.get(refs, timeout=limit)
        except ray.exceptions.GetTimeoutError:
            pass
        path = self._failure_checkpoint()
        where = "" if epoch is None else f"{self._pass_name(epoch)}: "
        raise RuntimeFailure(
            f"{where}{what} did not answer for {limit:.0f}s: it is hung, and the job stopped "
            f"(runtime.stall_timeout_s, --stall-timeout, sets the limit); "
            f"{_resume_hint(path, self._good['epoch'])}", path)

    def _pass_name(self, epoch: int) -> str:
        """``epoch N`` (1-based, as on the console) for a training epoch, ``evaluation pass``
        for the passes (whose ids are negative)."""
        return f"epoch {epoch + 1}" if epoch >= 0 else "evaluation pass"

    def _abort_queue(self, reason: str) -> None:
        """Tell the queue the epoch is over (blocked executors return); best effort, with a
        deadline: the queue may be the part that died or hangs."""
        import ray

        try:
            ray.get(self.queue.abort.remote(reason),
                    timeout=min(_ABORT_TIMEOUT_S, self.config.runtime.stall_timeout_s))
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            pass

    def _stalled(self, epoch: int, done: int, total: int, depth: int) -> None:
        """Stop: no task finished for ``runtime.stall_timeout_s``. The failure checkpoint is the
        last completed epoch (kept by the driver, so a hung parameter server is not asked)."""
        limit = self.config.runtime.stall_timeout_s
        self._abort_queue("stalled")
        path = self._failure_checkpoint()
        raise RuntimeFailure(
            f"{self._pass_name(epoch)}: no task finished for {limit:.0f}s ({done} of {total} "
            f"done, {depth} queued): an executor or the parameter server is hung, and the job "
            f"stopped (runtime.stall_timeout_s, --stall-timeout, sets the limit); "
            f"{_resume_hint(path, self._good['epoch'])}", path)

    def _epoch_stats(self, epoch: int, elapsed: float, acc: _EpochAcc, ledger: dict,
                     switched: dict[str, int], samplers: list[_Exec], trainers: list[_Exec],
                     warmup: bool) -> EpochStats:
        recs = acc.records
        sample = SampleTimes(acc.sample.S, acc.sample.M, acc.sample.C)
        sample.S += sum(r.get("S", 0.0) for r in recs)
        sample.M += sum(r.get("M", 0.0) for r in recs)
        hits = sum(r["hits"] for r in recs)
        misses = sum(r["misses"] for r in recs)
        tiers = ("local", "peer", "host")
        tier_rows = {t: int(sum(r.get(t, 0) for r in recs)) for t in tiers}
        tier_bytes = {t: int(sum(r.get("tier_bytes", {}).get(t, 0) for r in recs)) for t in tiers}
        sample_bytes = int(sum(r.get("nbytes", 0) for r in recs))
        extract_s = sum(r["extract_s"] for r in recs)
        train_s = sum(r["train_s"] for r in recs)
        losses = [r["loss"] for r in recs if "loss" in r]
        mode = self.config.runtime.mode
        stats = EpochStats(
            epoch=epoch, time_s=elapsed, sample=sample,
            extract_s=extract_s, train_s=train_s,
            hit_rate=hits / (hits + misses) if hits + misses else 0.0,
            bytes_host_to_device=int(sum(r["bytes"] for r in recs)) + sample_bytes,
            sample_bytes=sample_bytes, tier_rows=tier_rows, tier_bytes=tier_bytes,
            load_ratio=extract_s / (extract_s + train_s) if extract_s + train_s > 0 else 0.0,
            switches=len(switched), batches=len(recs),
            loss=float(np.mean(losses)) if losses else float("nan"),
            samplers=(self.num_devices if mode == "time-sharing"
                      else sum(1 for s in samplers if s.alive)),
            trainers=(self.num_devices if mode == "time-sharing"
                      else sum(1 for t in trainers if t.alive)),
            queue_wait_s=sum(r["wait_s"] for r in recs),
            queue_depth=acc.depth,
            disk=_sum_counts([r["disk"] for r in recs if "disk" in r]),
            ledger=acc.ledger,
        )
        self.details.append({
            "epoch": epoch, "warmup": warmup,
            "standby_batches": dict(switched),
            "batches_by": _count_by(recs, "consumer"),
            "rpc_s": sum(r["rpc_s"] for r in recs),
            "fetch_s": sum(r.get("fetch_s", 0.0) for r in recs),
            "stall_s": sum(r.get("stall_s", 0.0) for r in recs),
            # queue calls and sample fetches the Trainers' prefetch did not hide
            "exposed_queue_s": sum(min(r.get("stall_s", 0.0), r["rpc_s"] + r.get("fetch_s", 0.0))
                                   for r in recs),
            "sync_s": sum(r["sync_s"] for r in recs),
            "step_wait_s": sum(r.get("step_wait_s", 0.0) for r in recs),
            "steps": ledger.get("steps"),
            # the part of queue_wait_s spent before each Trainer's first mini-batch of the
            # epoch (the pipeline filling), apart from waits once samples were flowing
            "fill_wait_s": _first_wait_by(recs),
            # queue waits the Trainer actually idled on (a prefetch thread's wait overlaps the
            # training of the previous mini-batch; only what its stall exposed counts)
            "exposed_wait_s": sum(min(r.get("stall_s", 0.0), r["wait_s"]) for r in recs),
            "sampler_queue_wait_s": acc.sampler_wait_s,
            "task_ids": sorted(r["task_id"] for r in recs),
            "lost_samples": acc.lost, "reissued": acc.reissued,
            # exactly-once ledger, task id -> count: gradients pushed / applied / turned away on
            # the server, leases handed out and acknowledgements (every call) on the queue
            "attempts": ledger["attempts"], "applied": ledger["applied"],
            "rejected": ledger["rejected"], "applied_by": ledger["by"],
            "deliveries": ledger["deliveries"], "acks": ledger["acks"],
            "ps_busy_s": ledger["busy_s"],
        })
        return stats


@dataclass
class EvalOutcome:
    """What an evaluation pass through the executors produced.

    Attributes:
        scores: split name -> summed :class:`~fgnn.evaluation.SplitScore`.
        time_s: wall time of the pass.
        batches: chunks scored.
        extract_s: summed Extract seconds of the chunks.
        forward_s: summed forward seconds of the chunks.
    """

    scores: dict[str, SplitScore]
    time_s: float
    batches: int
    extract_s: float
    forward_s: float

    def accuracy(self, split: str) -> float:
        """Accuracy of ``split`` (NaN when it was not scored or is empty)."""
        s = self.scores.get(split)
        return s.accuracy if s is not None else float("nan")


def _eval_outcome(plan: EvalPlan, recs: list[dict[str, Any]], elapsed: float) -> EvalOutcome:
    """Sum the chunk records of an evaluation pass per split (each task acknowledged once)."""
    scores = {s: SplitScore() for s in plan.splits}
    for r in recs:
        scores[r["split"]].add(SplitScore(r["correct"], r["count"], r["loss_sum"]))
    return EvalOutcome(scores, elapsed, len(recs), sum(r["extract_s"] for r in recs),
                       sum(r["eval_s"] for r in recs))


def _sum_counts(dicts: list[dict[str, int]]) -> Optional[dict[str, int]]:
    """Key-wise sum of per-batch counters (None when there are none)."""
    if not dicts:
        return None
    return {k: int(sum(d.get(k, 0) for d in dicts)) for k in dicts[0]}


def _count_by(recs: list[dict[str, Any]], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in recs:
        out[r.get(key, "")] = out.get(r.get(key, ""), 0) + 1
    return out


def _first_wait_by(recs: list[dict[str, Any]]) -> float:
    """Sum over consumers of the queue wait of each one's first record (records arrive in each
    consumer's training order)."""
    seen: set[str] = set()
    total = 0.0
    for r in recs:
        c = r.get("consumer", "")
        if c not in seen:
            seen.add(c)
            total += float(r.get("wait_s", 0.0))
    return total
