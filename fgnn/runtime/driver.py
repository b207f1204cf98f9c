"""The factored runtime (FGNN §5): builds the executors, runs the epochs, reports.

One object drives a job over N_g devices: it starts Ray (or in-process actors for one device),
lays out Samplers, standby Trainers and Trainers, runs the warm-up epoch and the allocation,
plans and fills the caches, runs the epochs and the evaluation, and handles faults and resume.
docs/architecture.md ("The runtime") describes the layouts and the phases.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import os
import re
import shutil
import time
from dataclasses import replace
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn import gpu
from fgnn.causes import root_cause, strip_ansi
from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.evaluation import EvalPlan, eval_chunk
from fgnn.subsets import subset_ids, val_subset_size
from fgnn.executors import host
from fgnn.executors.actors import ARGS_ACTOR, QueueService
from fgnn.runtime.partition import cluster_nodes
from fgnn.executors.graph_kind import graph_kind
from fgnn.runtime.planners import planner_for
from fgnn.exchange.gradring import default_ring_dir, ring_rows
from fgnn.executors.common import MemmapFeatures
from fgnn.runtime.epoch import EpochCoordinator, EvalOutcome
from fgnn.runtime.faults import RuntimeFailure, Watchdog, _death_errors
from fgnn.runtime.resume import CHECKPOINT_NAME, Checkpointer, RunFinished
from fgnn.runtime.workers import ExecutorSpec, Services, WorkerGroup, _Exec
from fgnn.exchange.collective import ExchangeSpec
from fgnn.executors.fault_injection import FaultSpec
from fgnn.exchange.store import LOOPBACK
from fgnn.executors.inline import InlineActor
from fgnn.exchange.step_ledger import StepLedger
from fgnn.exchange.ps import ParameterServer, flatten, unflatten_into
from fgnn.executors.transport import trainers_share_gpu
from fgnn.executors.scheduler import allocate, epoch_batches, step_tasks, trainer_seconds
from fgnn.monitor.stats import EpochStats, RunResult
from fgnn.procmem import process_memory
from fgnn.reaper import ring_prefix, sweep_stale_rings
from fgnn.monitor.timeline import Timeline
from fgnn.sampling.base import Sampler
from fgnn.tasks import build_task, check_job

__all__ = ["Runtime", "RuntimeFailure", "RunFinished", "CHECKPOINT_NAME"]


OnBatch = Callable[[int, int, int, float], None]
OnEpoch = Callable[[EpochStats], None]
OnEvalBatch = Callable[[tuple[str, ...], int, int], None]


class Runtime:
    """Runs a :class:`~fgnn.config.JobConfig` on Ray (or, on one device, in this process) in
    the configured mode.

    The runtime is composed of parts that hold their own state: the :class:`Checkpointer`
    (:mod:`fgnn.runtime.resume`), the :class:`Watchdog` (deadlines and the job's stop), the
    :class:`WorkerGroup` of executor actors (:mod:`fgnn.runtime.workers`), the
    :class:`CachePlanner` (:mod:`fgnn.runtime.cache_plan`) and the :class:`EpochCoordinator`
    that owns each epoch (:mod:`fgnn.runtime.epoch`); :meth:`run` is the training loop over
    them.

    Args:
        config: the job (``runtime.mode``, ``runtime.devices``, ``runtime.samplers``, ...).
        dataset: the loaded dataset.
        sampler: the sampling algorithm; defaults to ``build_sampler(config.sampler)``.
        model: the model; defaults to ``build_model(config.model, ...)``.
        on_batch: ``on_batch(epoch, batches_done, batches_total, loss)`` on the driver as batches
            complete (progress bars).
        on_epoch: called with each epoch's :class:`~fgnn.monitor.stats.EpochStats`.
        faults: fault injection for tests and benchmarks
            (:class:`~fgnn.executors.fault_injection.FaultSpec`: slow Trainers, Trainers that
            die once right after a gradient of theirs was applied); None: none.
        evaluate: score validation/train/test accuracy (off in throughput benchmarks).
        on_eval_batch: ``on_eval_batch(splits, chunks_done, chunks_total)`` on the driver as
            evaluation chunks complete (progress bars).

    Attributes:
        model: the trained model (CPU) after :meth:`run` (best validation weights, like
            :func:`fgnn.training.fit`).
        identity: model, sampler, dataset and scoring recipe
            (:func:`fgnn.model_file.job_identity`), stored in checkpoints and model files.
        best: ``val_acc``, ``epoch`` and ``state`` (weights) of the best validation so far, and
            ``bad``, the validations since (patience).
        details: per-epoch extras beyond :class:`EpochStats` (overheads, ledger, standby batches).
        actor_names: names of the executor actors of the last epoch.
        checkpointer, watchdog, services, workers, caches, coordinator: the parts.
    """

    def __init__(self, config: JobConfig, dataset: Dataset, *, sampler: Optional[Sampler] = None,
                 model: Optional[nn.Module] = None, on_batch: Optional[OnBatch] = None,
                 on_epoch: Optional[OnEpoch] = None,
                 faults: Optional[FaultSpec] = None,
                 evaluate: bool = True,
                 on_eval_batch: Optional[OnEvalBatch] = None,
                 timeline: Optional[Timeline] = None) -> None:
        if not isinstance(config, JobConfig):
            raise ValueError(f"config must be a JobConfig, got {type(config).__name__}")
        if not isinstance(dataset, Dataset):
            raise ValueError(f"dataset must be a Dataset, got {type(dataset).__name__}")
        if faults is not None and not isinstance(faults, FaultSpec):
            raise TypeError(f"faults must be a FaultSpec, got {faults!r}")
        #: the wall time by part (:mod:`fgnn.monitor.timeline`), the job's when it passes one
        self.timeline = timeline if timeline is not None else Timeline()
        check_job(config, dataset)  # what the task and graph kind refuse, one line
        #: homogeneous or typed (:mod:`fgnn.executors.graph_kind`): payloads, stores, planner
        self.kind = graph_kind(dataset)
        self.sampler = sampler if sampler is not None else self.kind.build_sampler(config,
                                                                                   dataset)
        #: what the job learns (:mod:`fgnn.tasks`): items, samples, loss, scores
        self.task = build_task(config, dataset, model)
        dataset = self.task.training_dataset(dataset)  # a link job: the training message graph
        auto_chunk = config.train.eval_batch_size is None  # the sizing may shrink it
        config = self.config = _settle_sizes(config, self.task, dataset)  # auto batch, eval chunk
        #: the model that runs, and its name in the report: a custom one by its class name
        self.model, self.model_name = self._model(config, dataset, model)
        from fgnn.model_file import job_identity

        self.identity = job_identity(config, dataset, self.model, self.sampler)
        self.identity.update(self.task.identity())  # task, relation
        self.best: dict[str, Any] = {"val_acc": -1.0, "epoch": None, "state": None, "bad": 0}
        self.on_epoch = on_epoch
        self._eval_passes = 0
        #: R: tasks per mini-batch, averaged into one step (parameter server or collective)
        self.step_tasks = step_tasks(config.runtime.mode, config.runtime.devices)
        self.do_evaluate = bool(evaluate) and config.train.eval_mode != "none"
        self.load_s = 0.0
        self._started_ray = False
        self._driver_device_kind = "logical"
        self.checkpointer = Checkpointer(config, self.model, self.identity, self.best)
        self.watchdog = Watchdog(config.runtime.stall_timeout_s, self.checkpointer)
        #: the executors run in this process, without Ray (:func:`~fgnn.executors.host.uses_ray`)
        self.in_process = not host.uses_ray(config.runtime, faults)
        self.services = Services(in_process=self.in_process)
        spec = ExecutorSpec(config, self.sampler, self.model, self.step_tasks,
                            config.disk.feature_tier == "disk", faults or FaultSpec(),
                            self.task.step)
        self.workers = WorkerGroup(spec, self.services, self.watchdog)
        planner = planner_for(self.task, self.kind)
        self.caches = planner(config, dataset, self.sampler, self.step_tasks, self.do_evaluate,
                              self.services, self.workers, self.watchdog)
        self.caches.say = self.workers.say = self.timeline.say
        self.caches.eval_chunk_auto = auto_chunk
        self.coordinator = EpochCoordinator(config, self.services, self.workers, self.watchdog,
                                            self.step_tasks, on_batch, on_eval_batch)

    def _model(self, config: JobConfig, dataset: Any, model: Optional[nn.Module]
               ) -> tuple[nn.Module, str]:
        """The given model, or the configured one built (its size checked against the host's
        memory first), seeded by ``train.seed``; and its name."""
        if model is None:
            _check_model_size(config, dataset, self.task, self.sampler.num_layers)
        torch.manual_seed(config.train.seed)
        if model is not None:
            return model, type(model).__name__
        return self.task.build_model(config, dataset, self.sampler.num_layers), config.model.name

    # ================================================================== the parts' state
    @property
    def dataset(self) -> Dataset:
        """The dataset (renumbered after a hot-first reordering)."""
        return self.caches.dataset

    @property
    def ps(self) -> Any:
        """The parameter server actor (the step ledger with the collective exchange)."""
        return self.services.ps

    @ps.setter
    def ps(self, handle: Any) -> None:
        self.services.ps = handle

    @property
    def queue(self) -> Any:
        """The global queue actor."""
        return self.services.queue

    @queue.setter
    def queue(self, handle: Any) -> None:
        self.services.queue = handle

    @property
    def _refs(self) -> dict[str, Any]:
        return self.services.refs

    @property
    def _execs(self) -> list[_Exec]:
        return self.workers.execs

    @property
    def actor_names(self) -> list[str]:
        """Names of the executor actors of the last layout."""
        return self.workers.names

    @property
    def executor_devices(self) -> set[str]:
        """The devices the executors run on."""
        return self.workers.devices

    @property
    def device_kind(self) -> str:
        """``gpu`` or ``logical``: what the executors run on (before they run: the driver)."""
        if self.workers.devices:
            return "gpu" if any(d.startswith("cuda") for d in self.workers.devices) else "logical"
        return self._driver_device_kind

    @property
    def details(self) -> list[dict[str, Any]]:
        """Per-epoch extras beyond :class:`EpochStats` (overheads, ledger, standby batches)."""
        return self.coordinator.details

    @property
    def reordering(self) -> Any:
        """The hot-first renumbering (new id -> old id maps), or None."""
        return self.caches.reordering

    # ================================================================== public
    def run(self) -> RunResult:
        """Preprocess, profile, train ``config.train.epochs`` epochs, evaluate.

        Returns:
            The run's :class:`~fgnn.monitor.stats.RunResult`.

        Raises:
            RuntimeFailure: when the job cannot continue (a checkpoint was written).
            CheckpointError: ``train.resume`` without a usable checkpoint (before Ray starts).
            RunFinished: ``train.resume`` of a run that has finished (before Ray starts).
            ValueError: when Ray offers fewer devices than ``runtime.devices``.
        """
        self.load_resume()
        if self.in_process:
            self._driver_device_kind = "gpu" if gpu.is_available() else "logical"
        else:
            with self.timeline.phase("ray_start"):
                self._init_ray()
        threads = torch.get_num_threads()  # in-process executors set their own (one)
        try:
            return self._run()
        except RuntimeFailure:
            raise
        except _death_errors() as err:  # a service (queue, parameter server), Ray itself, or a call
            raise self._died(err) from err
        except _task_error() as err:  # an exception inside an actor's (or in-process) call
            raise self.watchdog.failure(f"{_call_of(err)} failed: {root_cause(err)}; the job "
                                        f"stopped") from err
        finally:
            with self.timeline.phase("shutdown"):
                self._teardown()
                torch.set_num_threads(threads)
                if self._started_ray:
                    from fgnn.raystart import shutdown as shutdown_ray

                    shutdown_ray()

    def mark_complete(self, final: dict[str, float]) -> None:
        """The job wrote its outputs: a resume of the checkpoint is finished from now on
        (:meth:`Checkpointer.mark_complete
        <fgnn.runtime.resume.Checkpointer.mark_complete>`)."""
        self.checkpointer.mark_complete(final)

    def load_resume(self) -> int:
        """With ``train.resume``, read and check the checkpoint; returns the first epoch to run
        (:meth:`Checkpointer.load_resume <fgnn.runtime.resume.Checkpointer.load_resume>`)."""
        return self.checkpointer.load_resume()

    # ================================================================== setup
    def _init_ray(self) -> None:
        import ray

        rt = self.config.runtime
        self._driver_device_kind = "gpu" if gpu.is_available() else "logical"
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if rt.address is None and self._driver_device_kind == "logical":
                kw["num_gpus"] = rt.gpus_needed
            if rt.address in (None, "local"):
                from fgnn.raystart import explicit_token_auth, init_local, local_system_config

                explicit_token_auth()  # Ray's default for a new cluster, without its warning
                kw["_system_config"] = local_system_config()
                # "local": a fresh instance even when another cluster runs on this machine,
                # listening on loopback only
                init_local(address="local", **kw)
            else:
                ray.init(address=rt.address, **kw)
            self._started_ray = True
        gpus = ray.cluster_resources().get("GPU", 0)
        need = rt.gpus_needed
        if gpus < need:
            raise ValueError(f"runtime.devices={need} but the Ray cluster offers {gpus:g} GPUs "
                             f"(start Ray with num_gpus={need} logical GPUs on CPU)")

    def _put_payloads(self) -> None:
        """Topology, features, labels and split ids into the object store (what every executor
        needs before it can start)."""
        ds = self.dataset
        # a file-backed memmap (ondisk:DIR) travels as a descriptor: each Trainer maps the file
        # itself, so features larger than memory never enter the object store
        feats = self.kind.features_payload(ds)
        if self.caches.disk_tier and not isinstance(feats, MemmapFeatures):
            raise ValueError(f"disk.feature_tier='disk' reads the features.npy of an ondisk:DIR "
                             f"dataset; {ds.name!r} holds its features in memory")
        put = self.services.put
        self.services.refs = {
            "graph": put(self.kind.graph_payload(ds.graph)),
            "features": feats if isinstance(feats, MemmapFeatures) else put(feats),
            "labels": put(ds.labels.cpu().numpy()),
            "train_idx": put(self._items("train").numpy()),
            "eval_idx": put({s: self._items(s).numpy() for s in ("val", "test")}),
            "hotness": None,
            "task": put(self.task.sampling()),
        }

    def num_items(self, split: str) -> int:
        """How many ids the tasks of ``split`` cut: vertices, or for a link job training
        supervision edges and validation / test pairs."""
        return int(self._items(split).numel())

    def _items(self, split: str) -> torch.Tensor:
        """The ids a split's tasks cut: vertex ids, or for a link job the ids of training
        supervision edges and of validation / test pairs (:meth:`Task.items
        <fgnn.tasks.base.Task.items>`)."""
        return self.task.items(split, self.dataset)

    def _start_services(self) -> None:
        rt, sv = self.config.runtime, self.services
        sv.num_devices = 1 if rt.mode == "single" else rt.devices
        sv.gpus_per_device = float(rt.gpus_per_device)
        if sv.in_process:
            self._start_inline_services()
            return
        import ray
        from ray.util.placement_group import placement_group, placement_group_table

        sv.pg = placement_group([{"GPU": sv.gpus_per_device}] * sv.num_devices, strategy="PACK")
        ray.get(sv.pg.ready())
        nodes = placement_group_table(sv.pg).get("bundles_to_node_id", {})
        if self.caches.partitioning is not None:  # fail now, not after the warm-up
            cluster_nodes(ray.cluster_resources())
        sv.one_node = len(set(nodes.values())) <= 1
        sv.shared_gpu = trainers_share_gpu(rt.mode, ray.cluster_resources().get("GPU", 0))
        # the queue also keeps the executors' arguments: one service process fewer to start
        sv.queue = ray.remote(num_cpus=0, max_restarts=0)(QueueService).options(
            name=ARGS_ACTOR, max_concurrency=1000).remote(rt.queue_size)
        self._start_exchange(set(nodes.values()))

    def _start_inline_services(self) -> None:
        """The services of a job without Ray: the queue and the parameter server as in-process
        actors, the one device the driver's (the first GPU, else the CPU)."""
        sv, tc = self.services, self.config.train
        sv.one_node = sv.shared_gpu = True
        sv.torch_device = "cuda:0" if gpu.is_available() else "cpu"
        sv.queue = InlineActor(QueueService, ARGS_ACTOR, self.config.runtime.queue_size)
        sv.ps = InlineActor(ParameterServer, "fgnn-ps", copy.deepcopy(self.model).cpu(),
                            tc.lr, tc.weight_decay, self.checkpointer.resume_optimizer)

    def _start_exchange(self, nodes: set[str]) -> None:
        """Start the gradient exchange ``runtime.exchange`` picks (the one place that picks):
        ``self.ps``, a :class:`~fgnn.exchange.api.GradientExchange` actor. ``nodes``:
        the nodes of the job's devices."""
        import ray

        sv, tc = self.services, self.config.train
        resumed = self.checkpointer.resume_optimizer
        if self.config.runtime.exchange == "collective":  # no tensors; weights on the Trainers
            sv.ps = ray.remote(num_cpus=0, max_restarts=0)(StepLedger).options(
                name="fgnn-ps", max_concurrency=256, **self._ledger_place(nodes)).remote(
                serve_store=True, store_host=LOOPBACK if self._one_host(nodes) else None)
            sv.exchange = ExchangeSpec(sv.ps, tc.lr, tc.weight_decay, resumed,
                                       **self._ring_place(nodes))
        else:
            sv.ps = ray.remote(num_cpus=0)(ParameterServer).options(name="fgnn-ps").remote(
                copy.deepcopy(self.model).cpu(), tc.lr, tc.weight_decay, resumed)

    @staticmethod
    def _one_host(nodes: set[str]) -> bool:
        """Whether every executor of the job runs on the driver's node (``nodes``: the nodes of
        its devices): the collective's store then binds to loopback, the ledger pinned there."""
        import ray

        return not nodes - {ray.get_runtime_context().get_node_id()}

    def _ledger_place(self, nodes: set[str]) -> dict[str, Any]:
        """The ledger actor's scheduling: on the driver's node when every executor is there
        (its store is then on loopback, :meth:`_one_host`), else Ray's choice."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not self._one_host(nodes):
            return {}
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False)}

    def _ring_place(self, nodes: set[str]) -> dict[str, Any]:
        """Where the collective's CPU members keep their gradient rings: ``/dev/shm`` when
        every executor is on the driver's node (which removes the files at the end, or its
        watcher if it is killed: :mod:`fgnn.reaper`); else none (the members sum over gloo)."""
        import ray

        ring_dir = default_ring_dir()
        if ring_dir is None or nodes - {ray.get_runtime_context().get_node_id()}:
            return {"ring_dir": None}
        sweep_stale_rings(ring_dir)  # of drivers killed before they could remove theirs
        self.services.ring_files = os.path.join(ring_dir, ring_prefix())
        return {"ring_dir": ring_dir, "ring_prefix": os.path.basename(self.services.ring_files),
                "ring_rows": ring_rows(self.step_tasks)}

    def _build_layout(self, n_s: int) -> None:
        """Samplers (and standbys) on devices ``0 .. n_s - 1``, Trainers on the rest; the new
        executors get the chosen cache (or, before it is chosen, count visits)."""
        new = self.workers.build(n_s)
        self.workers.await_ready()
        self.caches.fill(new)

    def _teardown(self) -> None:
        sv = self.services
        if sv.in_process and sv.queue is not None:  # blocked in-process calls return
            self.watchdog.abort(sv.queue, "the job ended")
        self.workers.kill_all()
        self.caches.release_peers()  # the killed Trainers' shared-memory segments
        for h in (sv.queue, sv.ps):
            if h is not None:
                try:
                    host.kill(h)
                except Exception:
                    pass
        if sv.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(sv.pg)
            except Exception:
                pass
        if self.caches.reorder_dir is not None:
            shutil.rmtree(self.caches.reorder_dir, ignore_errors=True)
        for path in glob.glob(f"{sv.ring_files}-*") if sv.ring_files else ():
            with contextlib.suppress(OSError):
                os.unlink(path)

    # ================================================================== the run
    def _run(self) -> RunResult:
        """The training loop: start, train the epochs (warm-up, allocation, cache), score."""
        start_epoch = self.load_resume()
        with self.timeline.phase("startup"):
            self._start()
        warm_end = start_epoch + self.caches.warmup_epochs
        epochs: list[EpochStats] = []
        early_stop: Optional[dict[str, Any]] = None
        for epoch in range(start_epoch, self.config.train.epochs):
            stats = self._train_epoch(epoch, first=epoch == start_epoch)
            stats.warmup = epoch < warm_end
            if epoch == warm_end - 1:
                self.caches.counting = False
                if self.caches.policy != "none":
                    self._choose_caches()
            self._pull_weights()
            self._validate(epoch, stats)
            self.caches.partition_traffic()  # the epoch's reads by tier, per node
            epochs.append(stats)
            self.checkpointer.history.append(stats.to_dict())  # kept by the checkpoint
            self._save_checkpoint(epoch)
            if self.on_epoch is not None:
                self.on_epoch(stats)
            early_stop = self._early_stop(epoch)
            if early_stop is not None or self._patience_spent():
                break
        if self.checkpointer.final_only:  # a resume of trained epochs: their records
            epochs = [EpochStats.from_dict(e) for e in self.checkpointer.history]
            early_stop = self.checkpointer.early_stop
        if self.best["state"] is not None:
            self.model.load_state_dict(self.best["state"])
        with self.timeline.phase("final_eval"):
            final = self._final_scores()
        return RunResult(config=self.config.to_dict(), mode=self.config.runtime.mode,
                         allocation=self._allocation(), preprocess=self._preprocess(),
                         epochs=epochs, final=final, final_eval_s=self.final_eval_s,
                         early_stop=early_stop, metric=getattr(self.task, "metric", "accuracy"),
                         memory=self._process_memory())

    def _start(self) -> None:
        """Reorder (hot-first), start the services and the first layout, and compute a
        sampling-free hotness map while the executors start (processes, imports, topology and
        features mapped)."""
        rt = self.config.runtime
        if rt.mode == "factored" and rt.devices == 1 and not rt.switching:
            raise ValueError("runtime.switching=False with runtime.devices=1 leaves no Trainer in "
                             "factored mode; use mode='single' or enable switching")
        self.relayout_s = self.final_eval_s = 0.0
        self.profile_times: dict[str, float] = {}
        if self.config.cache.reorder == "hot-first":
            with self.timeline.phase("reorder"):
                self.caches.reorder()
        self._start_services()
        self._put_payloads()
        n = self.services.num_devices
        # the first epoch runs with one Sampler and sets N_s (§5.3) when profiling
        self._profile = rt.mode == "factored" and rt.samplers is None and n > 1
        if rt.mode == "time-sharing":
            self._n_s, self._n_t = n, n
        elif rt.mode == "single":
            self._n_s, self._n_t = 1, 0
        else:
            self._n_s = rt.samplers if rt.samplers is not None and not self._profile else 1
            self._n_t = n - self._n_s
        self._k: Optional[float] = None
        self.timeline.say(self._starting())
        self.workers.build(0 if rt.mode == "time-sharing" else self._n_s)
        ranks = self.caches.policy not in ("presc", "none")  # else nothing to rank here
        with self.timeline.phase("ranking") if ranks else contextlib.nullcontext():
            self.caches.policy_hotness()
        self.workers.await_ready()
        # and the services: their start (the server's optimizer and its imports) is start-up,
        # not the first epoch's
        self.watchdog.get([self.queue.qsize.remote(), self.ps.ledger.remote()],
                          "the queue or the parameter server")
        # Warm-up: the first epoch(s) train without the feature cache; they measure T_s and T_t
        # (§5.3) and each Trainer's memory (§6.1), and PreSC counts visits (§6.3). Then the
        # caches are sized and filled.
        self.caches.counting = self.caches.policy == "presc" and self.caches.hotness is None
        if self.caches.counting:
            self.watchdog.get([e.handle.count_visits.remote()
                               for e in self.workers.alive("sampler")], "a Sampler")
        self.caches.count_reads()  # a hotness partition's per-node counts

    def _starting(self) -> str:
        """What the executors' start waits for, in one line."""
        rt, n_g = self.config.runtime, self.services.num_devices
        if rt.mode == "time-sharing":
            n = n_g
        else:  # Samplers (with their standbys) and Trainers
            n = self._n_s * (2 if rt.switching or rt.mode == "single" else 1) + n_g - self._n_s
        if self.in_process:
            return (f"starting {n} executors in this process (one device: no Ray; --ray "
                    f"starts it)")
        return f"starting {n} executor processes (imports, graph and features)..."

    def _choose_caches(self) -> None:
        """After the warm-up: size and fill the caches (the timeline's sizing and fill)."""
        with self.timeline.phase("cache_fill"):
            self.caches.choose(self.coordinator.memory_reports)
        self.timeline.move("cache_fill", "sizing", self.caches.sizing_s)
        chunk, tc = getattr(self.caches, "eval_chunk", None), self.config.train
        if chunk is not None and chunk != tc.eval_batch_size:  # bounded to leave the cache room
            self.timeline.say(f"evaluation chunks of {chunk} seeds (not {tc.eval_batch_size}), "
                              f"so the evaluation leaves the feature cache room; "
                              f"--eval-batch-size sets them")
            self.config = replace(self.config, train=replace(tc, eval_batch_size=chunk))

    def _train_epoch(self, epoch: int, first: bool) -> EpochStats:
        """One training epoch through the coordinator; after the run's first, the allocation
        (§5.3) from its T_s and T_t."""
        tc = self.config.train
        total = len(epoch_batches(self._items("train"), tc.batch_size, tc.seed, epoch,
                                  self.step_tasks))
        if tc.steps_per_epoch is not None:  # the first S mini-batches, R tasks each
            total = min(total, tc.steps_per_epoch * self.step_tasks)
        self.caches.refresh_peers()  # a Trainer restarted: its peers map its new buffer
        with self.timeline.phase("training"):
            stats = self.coordinator.run(epoch, total, measure=first)
        self.caches.collect_reads()  # before a re-layout stops a Trainer
        self.caches.adapt_locality(stats)
        if first and self.config.runtime.mode == "factored" and stats.sample.total > 0:
            self._allocate(stats)
        return stats

    def _allocate(self, stats: EpochStats) -> None:
        """T_s and T_t of the first epoch; when profiling, N_s from the allocation formula and
        the re-layout (§5.3)."""
        rt, n = self.config.runtime, self.services.num_devices
        t_s = stats.sample.total / max(1, stats.batches)
        t_t = trainer_seconds(stats.extract_s, stats.train_s, stats.batches)
        self._k = t_t / t_s
        self.profile_times = {"T_s": t_s, "T_t": t_t}
        self.coordinator.warm_t_train = t_t
        if not self._profile:
            return
        n_s, n_t, self._k = allocate(n, max(t_s, 1e-9), t_t)
        if n_t == 0 and not rt.switching:
            # The formula may give every device to sampling; FGNN then trains on the standby
            # Trainers (P = +inf, §5.3). Without switching there are none: keep one Trainer.
            n_s, n_t = n - 1, 1
        self._n_s, self._n_t = n_s, n_t
        if n_s != 1:
            t0 = time.perf_counter()
            with self.timeline.phase("relayout"):
                self._build_layout(n_s)
            self.relayout_s = time.perf_counter() - t0

    def _validate(self, epoch: int, stats: EpochStats) -> None:
        """Score validation after ``epoch`` when due; keep the best weights (patience)."""
        tc, best = self.config.train, self.best
        if not (self.do_evaluate and self._items("val").numel() > 0
                and ((epoch + 1) % tc.eval_every == 0 or epoch == tc.epochs - 1)):
            return
        with self.timeline.phase("validation"):
            scored = self._evaluate(("val",), subset=self.val_subset)
        stats.eval_s = scored.time_s
        score, fields = self.task.validation(scored)
        for name, value in fields.items():
            setattr(stats, name, value)
        if score > best["val_acc"]:
            best.update(val_acc=score, epoch=epoch, bad=0, state={
                k: v.clone() for k, v in self.model.state_dict().items()})
        else:
            best["bad"] += 1

    def _patience_spent(self) -> bool:
        patience = self.config.train.patience
        return patience is not None and self.best["bad"] >= patience

    def _early_stop(self, epoch: int) -> Optional[dict[str, Any]]:
        """The report's ``early_stop`` when patience ends the run before its last epoch."""
        tc, best = self.config.train, self.best
        if not self._patience_spent() or epoch + 1 >= tc.epochs:
            return None
        return {"epoch": epoch, "patience": tc.patience, "best_val_acc": best["val_acc"],
                "best_epoch": best["epoch"]}

    def _save_checkpoint(self, epoch: int) -> Any:
        """End of epoch ``epoch``: the server's state is the last good one
        (:meth:`Checkpointer.save <fgnn.runtime.resume.Checkpointer.save>`)."""
        state = self.watchdog.get(self.ps.state.remote(), "the parameter server")
        return self.checkpointer.save(epoch, state)

    def _final_scores(self) -> dict[str, float]:
        """Train/val/test accuracy with the best-validation weights, scored by every Trainer."""
        final = {"train_acc": float("nan"), "val_acc": float("nan"), "test_acc": float("nan")}
        if not self.do_evaluate:
            return final
        best = self.best
        weights = self.services.put(flatten([p for p in self.model.parameters()
                                             if p.requires_grad]))
        # The best epoch already scored validation with these weights and the same
        # deterministic recipe (fgnn.evaluation), so that score is reused, not recomputed --
        # unless it scored a subset: the final scores cover the whole split.
        known = (None if best["state"] is None or self.val_subset is not None
                 else best["val_acc"])
        scored = self._evaluate(self.task.final_splits(known), weights=weights)
        self.final_eval_s = scored.time_s
        return self.task.final_scores(scored, known)

    def _allocation(self) -> dict[str, Any]:
        """The report's ``allocation``: what ran, the caches, the profile."""
        rt, c = self.config.runtime, self.caches
        placement = c.placement
        allocation = {"model": self.model_name,
                      "devices": self.services.num_devices, "devices_requested": rt.devices,
                      "val_subset": self.val_subset,
                      "samplers": self._n_s, "trainers": self._n_t, "K": self._k,
                      "device_kind": self.device_kind, "switching": bool(rt.switching),
                      "cache_policy": c.policy, "warmup_epochs": c.warmup_epochs,
                      "alpha": c.alpha_full, "alpha_resident": c.alpha_resident,
                      "budget_bytes": c.budget_bytes, "step_peak_bytes": c.step_peak_bytes,
                      "placement": c.placement_name, "peer_cost": self.config.cache.peer_cost,
                      "cached_rows": ([] if placement is None
                                      else [int(b.numel()) for b in placement.buffers]),
                      "covered_rows": 0 if placement is None else placement.covered(),
                      "cache_plans": {k: p.to_dict() for k, p in c.cache_plans.items()},
                      "eval_chunk": self.config.train.eval_batch_size,
                      "cache_empty": getattr(c, "cache_empty", None)}
        allocation.update(self.profile_times)
        if c.reorder_info is not None:
            allocation["reorder"] = {k: v for k, v in c.reorder_info.items() if k != "seconds"}
        if c.disk_tier:
            allocation["disk"] = c.disk_layout()
        allocation.update(c.extra_allocation())
        return allocation

    def _process_memory(self) -> dict[str, Any]:
        """The report's ``memory``: every process's peak and resident memory (the driver's, and
        each live executor's when they run in processes of their own), and how much of the
        mapped topology is resident on the host (the processes' proportional shares added)."""
        files = getattr(self.dataset.graph, "files", None)  # a typed graph: not mapped
        paths = [] if files is None else [p for p in (files.indptr, files.indices,
                                                      files.weights) if p]
        procs = [{**process_memory(paths, role="driver"), "name": "driver"}]
        if not self.in_process:
            asks = [(e, e.handle.process_memory.remote()) for e in self.workers.execs if e.alive]
            for e, ref in asks:
                try:
                    procs.append({**host.get(ref, timeout=30), "name": e.name})
                except Exception:  # noqa: BLE001 - a process gone at the end: not measured
                    continue
        out: dict[str, Any] = {"processes": procs}
        if paths:
            size = sum(os.path.getsize(p) for p in paths)
            held = [pr["mapped"][p] for pr in procs for p in paths if p in pr["mapped"]]
            out["topology"] = {"files": paths, "file_bytes": size,
                               "resident_pss": sum(m["pss"] for m in held),
                               "private": sum(m["private"] for m in held),
                               "mapped_by": sum(1 for pr in procs
                                                if any(p in pr["mapped"] for p in paths))}
        return out

    def _preprocess(self) -> dict[str, float]:
        """The report's ``preprocess`` seconds."""
        c = self.caches
        preprocess = {"load_s": self.load_s, "hotness_s": c.hotness_s,
                      "startup_s": self.workers.startup_s, "sizing_s": c.sizing_s,
                      "cache_fill_s": c.cache_fill_s, "relayout_s": self.relayout_s}
        if c.reorder_info is not None:
            preprocess["reorder_s"] = c.reorder_info["seconds"]
        return preprocess

    def _died(self, err: BaseException) -> RuntimeFailure:
        """The one-line failure for a death the epoch loop does not handle itself: a service
        actor (queue and argument store, parameter server), an executor outside an epoch, or Ray's
        own processes (the raylet); with the last good checkpoint."""
        why = _why(err)
        if getattr(err, "actor_init_failed", False):  # its constructor raised: name what
            why = f": its constructor raised {root_cause(err)}"
        return self.watchdog.failure(f"{self._who_died(err)} died ({type(err).__name__}"
                                     f"{why}) and the job stopped")

    def _who_died(self, err: BaseException) -> str:
        """Name the actor of a Ray death error (``the parameter server (fgnn-ps)``), or Ray."""
        import ray

        sv = self.services
        names = {"the parameter server": sv.ps, "the global queue": sv.queue}
        actor_id = getattr(err, "actor_id", None)
        if actor_id:
            for what, h in names.items():
                if h is not None and h._actor_id.hex() == actor_id:
                    return f"{what} ({h._ray_actor_creation_function_descriptor.class_name})"
            for e in self.workers.execs:
                if e.handle._actor_id.hex() == actor_id:
                    return f"the {e.role} executor {e.name}"
        if isinstance(err, (ray.exceptions.LocalRayletDiedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.RaySystemError, ray.exceptions.RpcError)):
            return "a Ray process of this node (the raylet or the GCS)"
        return "a Ray actor or object of the job"

    def _pull_weights(self) -> None:
        _, flat = self.watchdog.get(self.ps.weights.remote(), "the parameter server")
        unflatten_into(flat, [p for p in self.model.parameters() if p.requires_grad])

    @property
    def val_subset(self) -> Optional[int]:
        """Ids each epoch's validation scores (``train.val_subset`` resolved,
        :func:`fgnn.subsets.val_subset_size`); None: the whole split (also for tasks that
        score pairs)."""
        if not getattr(self.task, "subset_validation", False):
            return None
        return val_subset_size(self.config.train.val_subset, self.num_items("val"),
                               self.num_items("train"))

    def _evaluate(self, splits: tuple[str, ...], weights: Any = None,
                  subset: Optional[int] = None) -> EvalOutcome:
        """Score ``splits`` through the Samplers and Trainers (an evaluation pass with the
        recipe of :mod:`fgnn.evaluation`: the job's sampler, ``train.eval_batch_size`` (resolved
        in ``__init__``) and seed).

        Args:
            splits: split names to score.
            weights: ``ObjectRef`` of flat weights to score; None uses the server's current.
            subset: score a fixed seeded subset of at most this many ids of each split.
        """
        tc = self.config.train
        if tc.eval_mode == "layerwise":
            return self._evaluate_layerwise(splits, weights, subset)
        plan = EvalPlan(tuple(splits), tuple(int(self._items(s).numel()) for s in splits),
                        tc.eval_batch_size, tc.seed, subset)
        self._eval_passes += 1
        # evaluation passes get ids of their own (negative: training epochs count from 0)
        return self.coordinator.run(-1 - self._eval_passes, plan.num_tasks, plan=plan,
                                    weights=weights)

    def _evaluate_layerwise(self, splits: tuple[str, ...], weights: Any = None,
                            subset: Optional[int] = None) -> EvalOutcome:
        """Score each split with every neighbour, layer by layer
        (:func:`fgnn.evaluation.evaluate_layerwise`), one split per Trainer, in parallel."""
        from fgnn.evaluation import SplitScore

        t0 = time.perf_counter()
        execs = self.workers.alive("trainer") or self.workers.alive("standby")
        if not execs:
            raise RuntimeFailure("no Trainer left to evaluate on")
        calls = {s: execs[i % len(execs)].handle.score_layerwise.remote(
            self.services.refs["graph"],
            subset_ids(getattr(self.dataset, f"{s}_idx").cpu(), subset, self.config.train.seed,
                       s).numpy(), weights) for i, s in enumerate(splits)}
        scores = {s: SplitScore(*self.watchdog.get(ref, "a Trainer scoring layer-wise"))
                  for s, ref in calls.items()}
        done = sum(1 for _ in splits)
        on_eval_batch = self.coordinator.on_eval_batch
        if on_eval_batch is not None:
            on_eval_batch(tuple(splits), done, done)
        return EvalOutcome(scores, time.perf_counter() - t0, len(splits), 0.0, 0.0)


def _call_of(err: Any) -> str:
    """``the call SamplerExecutor.sample_task`` from a ``RayTaskError``'s process title."""
    title = strip_ansi(str(getattr(err, "proctitle", "") or "")).strip()
    name = title.removeprefix("ray::").split("(")[0] or str(getattr(err, "function_name", ""))
    return f"the call {name}" if name else "an actor's call"


def _why(err: BaseException) -> str:
    """``: <Ray's reason>`` from a death error's text (``the actor is dead because its node has
    died``), shortened to its first sentence; for an actor whose constructor raised, the
    exception's own line (``ValueError: sample transport cuda_ipc needs ...``); empty when Ray
    gives none."""
    lines = [line.strip() for line in str(err).splitlines()]
    if any("error raised in its creation task" in line for line in lines):
        raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception): ", line)]
        if raised:
            return ": its constructor raised " + raised[-1][:300]
    for line in lines:
        if line.startswith("The actor is dead because"):
            first = line.split(". ")[0].rstrip(".")
            return ": " + (first[:1].lower() + first[1:])[:120]
    return ""


def _task_error() -> type:
    """Ray's error for an exception inside an actor's call (in-process calls raise it too)."""
    import ray.exceptions

    return ray.exceptions.RayTaskError


def _settle_sizes(config: JobConfig, task: Any, dataset: Dataset) -> JobConfig:
    """``config`` with an auto batch size settled for the task's training items
    (:meth:`~fgnn.config.TrainConfig.with_batch_for`) and an auto evaluation chunk for the
    feature width (:func:`fgnn.evaluation.eval_chunk`)."""
    train = config.train.with_batch_for(int(task.items("train", dataset).numel()))
    if train.eval_batch_size is None:
        train = replace(train, eval_batch_size=eval_chunk(train, dataset.feature_row_bytes))
    return config if train is config.train else replace(config, train=train)


def _check_model_size(config: JobConfig, dataset: Any, task: Any, num_layers: int) -> None:
    """Refuse, before it is built, a model whose weights and training state cannot fit the
    host's memory (:func:`fgnn.models.size.check_model_fits`).

    Raises:
        fgnn.models.size.ModelTooLarge: naming the largest layer and what shrinks it.
    """
    from fgnn.models.size import check_model_fits

    sizes = [f"{what} {int(n):,}" for what, n in (
        ("classes", getattr(dataset, "num_classes", None)),
        ("features", getattr(dataset, "feat_dim", None))) if isinstance(n, int)]
    has = f" (the dataset has {' and '.join(sizes)})" if sizes else ""
    check_model_fits(lambda: task.build_model(config, dataset, num_layers),
                     hint=f"lower --hidden ({config.model.hidden}){has}")
