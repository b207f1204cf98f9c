"""The executors of a job (internal): the shared services they talk to, the actors the driver
tracks, their layout over the devices, and what a failed call means for them.

:class:`Services` holds the job's actors and payloads (placement group, queue -- which also
keeps the executors' arguments --, parameter server, object-store refs), filled in as the run
starts. :class:`WorkerGroup`
owns the executor actors (like Ray Train's ``WorkerGroup``): it builds the layout (Samplers and
their standbys on the first devices, Trainers on the rest), waits for them to be ready, and
decides after a failed call whether an executor gets its work again (Ray restarted it) or the
job goes on without it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from torch import nn

from fgnn.causes import root_cause
from fgnn.config import JobConfig
from fgnn.data.oom import OomWatch
from fgnn.executors import host
from fgnn.executors.actors import LocalSampling, make_actor, stash_args, wait_stashed
from fgnn.executors.common import NonFiniteLoss
from fgnn.executors.device import AUTO
from fgnn.runtime.faults import _RESTART_TIMEOUT_S, Watchdog, _death_errors
from fgnn.executors.fault_injection import FaultSpec
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.trainer import TrainerExecutor
from fgnn.sampling.base import Sampler
from fgnn.tasks.contracts import UserCodeError

__all__ = ["Services", "WorkerGroup", "executor_title"]


def executor_title(e: "_Exec") -> str:
    """``Trainer 2``, ``Sampler 0``, ``standby Trainer 1``: an executor as the console names
    it (its role and device)."""
    role = "standby Trainer" if e.role == "standby" else e.role.capitalize()
    return f"{role} {e.device}"


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
class Services:
    """The job's shared actors and payloads (set as the run starts; None before)."""

    queue: Any = None
    """The global queue actor, which also keeps the executors' arguments
    (:class:`~fgnn.executors._argstore.QueueService`)."""
    ps: Any = None
    pg: Any = None
    refs: dict[str, Any] = field(default_factory=dict)
    """Object-store refs: ``graph``, ``features``, ``labels``, ``train_idx``, ``eval_idx``,
    ``hotness``, ``placement``, ``cache_map``, ``task`` (the task's
    :class:`~fgnn.tasks.base.SamplingSpec`)."""
    num_devices: int = 1
    gpus_per_device: float = 1.0
    one_node: bool = True
    shared_gpu: bool = False
    torch_device: str = AUTO
    exchange: Any = None
    """The Trainers' :class:`~fgnn.exchange.collective.ExchangeSpec` with
    ``runtime.exchange="collective"`` (None: the parameter server)."""
    ring_files: Optional[str] = None
    """The path prefix of the collective's gradient ring files (removed at the job's end)."""
    in_process: bool = False
    """The executors and services are in-process actors of the driver, not Ray's
    (:mod:`fgnn.executors.host`)."""

    def put(self, value: Any) -> Any:
        """Share ``value`` with the executors: ``ray.put``, or an in-process ref."""
        return host.put(value, self.in_process)


@dataclass
class ExecutorSpec:
    """What the executors are built from beside the services."""

    config: JobConfig
    sampler: Sampler
    model: nn.Module
    step_tasks: int
    disk_tier: bool
    faults: FaultSpec
    """The job's fault injection (an empty :class:`FaultSpec`: none)."""
    step: Any = None
    """The task's :class:`~fgnn.tasks.base.StepRule` (None: node classification)."""


#: Seconds between two lines saying how many of the starting executor processes are up.
READY_PROGRESS_S = 3.0


@dataclass
class _Pending:
    """An executor whose arguments are on their way to the store; its actor is not created."""

    exec: _Exec
    cls: type
    gpu: float
    stashed: Any
    """The ref of the store's ``put_args`` call."""
    transport: Optional[str] = None
    """A Sampler's sample transport (its actor options depend on it)."""


#: ``reinstall(execs)``: send the chosen cache to restarted executors; ``(executor, ref)`` back
Reinstall = Callable[[list[_Exec]], list[tuple[_Exec, Any]]]


class WorkerGroup:
    """The executor actors of the job.

    Args:
        spec: what the executors are built from.
        services: the job's services (read when an executor is built).
        watchdog: the driver's deadline and the job's stop.

    Attributes:
        execs: the executors of the current layout.
        startup_s: seconds from the executors' start to the last one built, summed over layouts.
        devices: the devices the executors run on (``cuda:0``, ``cpu``).
        reinstall: sends the chosen cache to a restarted executor (set by the cache planner).
        last_reinstall: the calls of the last reinstall (a cache fill waits on them).
    """

    def __init__(self, spec: ExecutorSpec, services: Services, watchdog: Watchdog) -> None:
        self.spec, self.services, self.watchdog = spec, services, watchdog
        self.execs: list[_Exec] = []
        self.startup_s = 0.0
        self.devices: set[str] = set()
        self.reinstall: Reinstall = lambda execs: []
        self.last_reinstall: list[tuple[_Exec, Any]] = []
        self._pending: list[Any] = []
        self._started_at = 0.0
        #: prints one line on the console (set by the runtime)
        self.say: Callable[[str], None] = lambda line: None
        #: the kernel's OOM kills in the job's memory group since the executors started
        self.oom = OomWatch()
        #: the lines naming executors the OOM killer ended, in order
        self.oom_deaths: list[str] = []

    @property
    def names(self) -> list[str]:
        """Names of the executor actors of the current layout."""
        return [e.name for e in self.execs]

    def alive(self, role: str) -> list[_Exec]:
        """The live executors of ``role``."""
        return [e for e in self.execs if e.role == role and e.alive]

    def _new_sampler(self, device: int) -> "_Pending":
        cfg, sv, sp = self.spec.config, self.services, self.spec
        name = f"fgnn-sampler-{device}"
        # each executor samples with its own sampler (the driver's changes its scale, the
        # executor's its local set), also in-process, where arguments are not copied
        stashed = stash_args(sv.queue, name, sv.refs["graph"], copy.deepcopy(sp.sampler),
                             sv.refs["train_idx"],
                             cfg.train.batch_size, cfg.train.seed, None, sv.queue, name,
                             sv.torch_device, eval_idx=sv.refs["eval_idx"],
                             transport=cfg.runtime.sample_transport, one_node=sv.one_node,
                             parts=sp.step_tasks, shared_gpu=sv.shared_gpu,
                             task=sv.refs.get("task"), deterministic=cfg.train.deterministic)
        return _Pending(_Exec(name, "sampler", device, None), SamplerExecutor,
                        0.5 * sv.gpus_per_device, stashed, cfg.runtime.sample_transport)

    def _new_trainer(self, device: int, index: int, role: str = "trainer") -> "_Pending":
        cfg, sv, sp = self.spec.config, self.services, self.spec
        standby = role == "standby"
        name = f"fgnn-{role}-{device}"
        local = None
        if cfg.runtime.mode == "time-sharing":
            local = LocalSampling(sv.refs["graph"], copy.deepcopy(sp.sampler),
                                  sv.refs["train_idx"],
                                  cfg.train.batch_size, cfg.train.seed, sv.torch_device,
                                  sv.refs["eval_idx"], sp.step_tasks, sv.refs.get("task"))
        stashed = stash_args(sv.queue, name, sv.refs["features"], sv.refs["labels"],
                             copy.deepcopy(sp.model).cpu(), None, device, sv.ps,
                             sv.queue, name, sv.torch_device, role, local,
                             faults=sp.faults.for_trainer(index, role),
                             disk=cfg.disk if sp.disk_tier else None, seed=cfg.train.seed,
                             exchange=sv.exchange, deterministic=cfg.train.deterministic,
                             step=sp.step, peer_tier=cfg.cache.peer_tier)
        share = (0.5 if standby else 1.0) * sv.gpus_per_device
        return _Pending(_Exec(name, role, device, None), TrainerExecutor, share, stashed)

    def _wanted(self, n_s: int) -> list[tuple[str, int]]:
        """``(role, device)`` of the layout with ``n_s`` Samplers."""
        rt = self.spec.config.runtime
        n = self.services.num_devices
        if rt.mode == "time-sharing":
            return [("trainer", d) for d in range(n)]
        want: list[tuple[str, int]] = []
        for d in range(n_s):
            want.append(("sampler", d))
            if rt.switching or rt.mode == "single":
                want.append(("standby", d))
        return want + [("trainer", d) for d in range(n_s, n)]

    def build(self, n_s: int) -> list[_Exec]:
        """Samplers (and standbys) on devices ``0 .. n_s - 1``, Trainers on the rest; executors
        of the layout that run already are kept, the others are stopped. Returns the new
        executors (started, not yet waited for: :meth:`await_ready`)."""
        keep = {e.name: e for e in self.execs if e.alive}
        want = self._wanted(n_s)
        names = {f"fgnn-{r}-{d}" for r, d in want}
        for e in keep.values():
            if e.name not in names:
                host.kill(e.handle)
        execs, pending = [], []
        self._started_at = time.time()
        for i, (role, d) in enumerate(want):
            name = f"fgnn-{role}-{d}"
            if name in keep:
                execs.append(keep[name])
                continue
            if role == "sampler":
                p = self._new_sampler(d)
            else:
                p = self._new_trainer(d, sum(1 for r, _ in want[:i] if r == "trainer"), role)
            execs.append(p.exec)
            pending.append(p)
        # every actor is created at once, while the arguments travel to the store (an executor
        # whose process is up first waits for them there): their processes start concurrently;
        # then one wait for all the arguments, which raises a failed send here
        sv = self.services
        for p in pending:
            p.exec.handle = make_actor(p.cls, p.exec.name, sv.pg, p.exec.device, p.gpu,
                                       sv.queue, p.transport)
        wait_stashed([p.stashed for p in pending])
        self.execs = execs
        self._pending = [p.exec.handle.ready.remote() for p in pending]
        return [p.exec for p in pending]

    def await_ready(self) -> None:
        """Wait for the executors started last; ``startup_s`` counts from their start to the last
        one built (start-up runs while the driver chooses the cache). Several executor
        processes say how many are up every :data:`READY_PROGRESS_S` seconds and when the last
        is (issue 39: no start-up phase silent for more than 5 s)."""
        done = self._gather_ready(self._pending)
        self._pending = []
        if done:
            self.startup_s += max(0.0, max(float(t) for t, _ in done) - self._started_at)
            self.devices.update(d for _, d in done)

    def _gather_ready(self, refs: list[Any]) -> list[Any]:
        """The results of the executors' ``ready`` calls ``refs``; for more than one Ray actor,
        a line ``executors ready: K/N (S s)`` every :data:`READY_PROGRESS_S` seconds of the
        start (counted from :meth:`build`, whose line opened the phase) until all are up, and
        when the last is (a failed start raises as ``host.get`` does)."""
        if len(refs) <= 1 or host.is_inline(refs):
            return host.get(refs)
        t0 = self._started_at or time.time()
        rest, done, beat = list(refs), [], t0 + READY_PROGRESS_S
        while rest:
            ready, rest = host.wait(rest, num_returns=len(rest),
                                    timeout=max(0.05, beat - time.time()))
            done += host.get(ready)
            while beat <= time.time():
                beat += READY_PROGRESS_S
            self.say(f"executors ready: {len(done)}/{len(refs)} ({time.time() - t0:.1f}s)")
        return done

    def failed(self, e: _Exec, err: BaseException) -> bool:
        """Handle a failed executor call; True when the actor should get the work again.

        ``ActorUnavailableError``: Ray is restarting the actor (``max_restarts``), so the work is
        resubmitted (calls queue until the restart completes; a call that still fails in the
        window is retried for up to ``_RESTART_TIMEOUT_S``), after its cache is sent again
        (:attr:`reinstall`). ``ActorDiedError``: the actor is gone for good and the job continues
        without it. A :class:`~fgnn.tasks.contracts.UserCodeError` (a custom sampler or model
        broke its contract) stops the job with that error as it is. Any other error is an
        exception inside the executor (a bug or bad data rather than a fault): the job stops
        with the failure checkpoint, in one line naming the executor and the root cause
        (:func:`fgnn.causes.root_cause`), the error chained.
        """
        import ray

        if isinstance(getattr(err, "cause", None), NonFiniteLoss):
            self.watchdog.abort(self.services.queue, "non-finite loss")
            raise self.watchdog.failure(f"{err.cause} (Trainer {e.name}), and the job stopped")
        if isinstance(getattr(err, "cause", None), UserCodeError):  # the user's code: as is
            self.watchdog.abort(self.services.queue, "a custom sampler or model failed")
            raise err.cause from None
        if isinstance(err, ray.exceptions.RayTaskError) and \
                isinstance(err.cause, _death_errors()):
            raise err.cause from err  # a service the executor called died: the runtime names it
        if not isinstance(err, ray.exceptions.RayActorError):
            raise self.watchdog.failure(f"executor {e.name} failed: {root_cause(err)}; the job "
                                        f"stopped") from err
        now = time.perf_counter()
        if isinstance(err, ray.exceptions.ActorDiedError):
            e.alive = False
            self._named_if_oom(e, restarts=False)
            return False
        if e.first_failure is None or now - e.first_failure > 2 * _RESTART_TIMEOUT_S:
            e.first_failure = now
            e.failures += 1
        e.gen += 1
        if now - e.first_failure > _RESTART_TIMEOUT_S:
            e.alive = False
            self._named_if_oom(e, restarts=False)
            return False
        self._named_if_oom(e, restarts=True)
        time.sleep(0.1)  # let Ray mark the actor as restarting before the resubmission
        # a restarted executor is built without its cache
        self.last_reinstall = self.reinstall([e])
        return True

    def _named_if_oom(self, e: _Exec, restarts: bool) -> None:
        """Say so in one line when the kernel's OOM killer ended ``e`` (a kill counted in the
        job's memory group since the last death looked at: :class:`~fgnn.data.oom.OomWatch`)."""
        kill = self.oom.new_kill()
        if kill is None:
            return
        then = ("Ray restarts it and the run goes on" if restarts else
                "it is not restarted: the run goes on without it, and stops if no "
                f"{'Sampler' if e.role == 'sampler' else 'Trainer'} is left")
        line = (f"warning: {executor_title(e)} was killed by the kernel's OOM killer "
                f"({kill.describe()}); {then}")
        self.oom_deaths.append(line)
        self.say(line)

    def kill_all(self) -> None:
        """Stop every executor (best effort: some may be gone already)."""
        for e in self.execs:
            try:
                host.kill(e.handle)
            except Exception:  # already gone
                pass
