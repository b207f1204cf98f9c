"""The factored runtime on Ray (FGNN §5): builds the executors, runs the epochs, reports.

Layout of a job over N_g devices (GPUs, or Ray logical GPUs on CPU):

* ``factored`` -- N_s Sampler executors and N_t = N_g - N_s Trainer executors, N_s from the
  allocation formula over the first epoch, run with one Sampler (§5.3,
  :func:`~fgnn.executors.scheduler.allocate`) unless ``RuntimeConfig.samplers`` fixes it. Each Sampler device also hosts a standby Trainer
  with a smaller cache (the topology shares the device) that takes tasks once its Sampler has
  finished its share of the epoch, while the switching profit is positive (§5.3).
* ``time-sharing`` -- the conventional design and the baseline: every device samples and trains;
  the topology is resident on every device, so its degree-ranked cache is smaller by the graph's
  bytes.
* ``single`` -- one device alternates: its Sampler samples the whole epoch into the queue (host
  memory), then its standby Trainer trains it (§7.9), the N_t = 0 case of switching.

All executors are plain classes made actors here, in :func:`~fgnn.executors._actors.make_actor` only, with
``ray.remote(num_gpus=...)`` inside a placement group of one ``{"GPU": g}`` bundle per device
(``g = RuntimeConfig.gpus_per_device``, 1 by default; 0.5 puts two devices on one GPU, so the
factored layout runs on a single GPU). A Sampler and its standby share their bundle's device with
half of it each. Each executor resolves its torch device inside its actor from the GPU Ray
assigned it (:mod:`fgnn.executors._device`). An executor's constructor arguments wait in a
named store actor that a restarted executor reads again (:mod:`fgnn.executors._actors`). Each
mini-batch is cut into R tasks (R = ``runtime.devices``, 1 in single mode) whose gradients are
averaged into one step, so training takes the steps of the single-process loop at any device
count. ``runtime.exchange`` picks how: ``collective`` (the default) keeps weights and optimizer on
every Trainer's device and all-reduces the gradients once per step, with a ledger actor
(:class:`~fgnn.executors.collective.StepLedger`, no tensors) handing out slots, keeping the
exactly-once ledger and the group's membership (:mod:`fgnn.executors.collective`); ``server``
sends every task's gradient to a parameter-server actor (:mod:`fgnn.executors.ps`). Either way
the actor is ``self.ps`` (``begin_epoch``, ``release``, ``ledger``, ``weights``, ``state``).

Host features: in-memory matrices go through the object store once (mapped zero-copy by every
executor on the node); a file-backed ``np.memmap`` (an ``ondisk:DIR`` dataset, possibly larger
than memory) is shipped as a :class:`~fgnn.executors._common.MemmapFeatures` descriptor and each
Trainer maps the file itself, reading only its cache rows and misses.

Start-up and warm-up: the executors start (process, imports, topology and features mapped) while
the driver computes a sampling-free hotness map (degree, WRPR, random). The first epoch of the run
(the first K for PreSC#K) trains without the feature cache, as FGNN does ("we run the first K
epochs of an end-to-end training pipeline for presampling without features cache", §6.3): it
measures T_s and T_t for the allocation (§5.3), each Trainer measures its training step's memory
on its own device (§6.1), and for PreSC the Samplers count visits. Then each executor's cache is
planned (:func:`fgnn.cache.budget.plan_device_cache` over the terms of
:mod:`fgnn.cache.sizing`: the device budget less the model, the measured step, an evaluation
chunk's excess, gather's temporary rows, fragmentation, CUDA contexts, the topology and sampling
working set where the device also samples, and a margin) and filled. The driver samples nothing.

Evaluation: validation after each epoch and the final train/val/test scores are passes of tasks
through the same Samplers and Trainers (:mod:`fgnn.evaluation`'s recipe), with the best-validation
weights for the final scores.

Feature caches: the cached rows follow ``cache.placement`` over the layout's Trainers
(:meth:`Runtime._place_caches`, Song & Jiang §3.2); the Samplers mark every sampled vertex with the
devices that cache it (the M step, one bit per device), which each Trainer's Extract splits into
local, peer and host rows. With the locality-aware sampler, its local set is that cache map and
its scale ``s`` is adapted once per epoch on the driver (Song & Jiang Algorithm 2).

Faults: a dead Trainer's leased tasks go back to the queue and it is restarted by Ray
(``max_restarts``) and resubmitted, or the epoch continues without it; a dead Sampler's in-flight
tasks are handed out again, and samples it owned that were lost are re-sampled. When no Trainer
(or no Sampler) is left, the job stops with :class:`RuntimeFailure` after writing a resumable
checkpoint (:mod:`fgnn.checkpoint`).
"""

from __future__ import annotations

import copy
import shutil
import time
from dataclasses import replace
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.evaluation import EvalPlan, eval_chunk
from fgnn.executors._actors import ARGS_ACTOR, ArgStore, LocalSampling, make_actor
from fgnn.executors._caches import CacheSetup
from fgnn.executors._common import MemmapFeatures, features_payload, graph_payload
from fgnn.executors._device import AUTO
from fgnn.executors._epoch import (EpochLoop, EvalOutcome, RuntimeFailure, _death_errors,
                                   _Exec)
from fgnn.executors._resume import CHECKPOINT_NAME, Checkpointing, RunFinished, _resume_hint
from fgnn.executors.collective import ExchangeSpec, StepLedger
from fgnn.executors.ps import ParameterServer, flatten, unflatten_into
from fgnn.executors.queue import GlobalQueue
from fgnn.executors.sampler import SamplerExecutor, trainers_share_gpu
from fgnn.executors.scheduler import allocate, step_tasks
from fgnn.executors.trainer import TrainerExecutor
from fgnn.monitor.stats import EpochStats, RunResult
from fgnn.sampling.base import Sampler

__all__ = ["Runtime", "RuntimeFailure", "RunFinished", "CHECKPOINT_NAME"]


OnBatch = Callable[[int, int, int, float], None]
OnEpoch = Callable[[EpochStats], None]
OnEvalBatch = Callable[[tuple[str, ...], int, int], None]


class Runtime(CacheSetup, Checkpointing, EpochLoop):
    """Runs a :class:`~fgnn.config.JobConfig` on Ray in the configured mode.

    Args:
        config: the job (``runtime.mode``, ``runtime.devices``, ``runtime.samplers``, ...).
        dataset: the loaded dataset.
        sampler: the sampling algorithm; defaults to ``build_sampler(config.sampler)``.
        model: the model; defaults to ``build_model(config.model, ...)``.
        on_batch: ``on_batch(epoch, batches_done, batches_total, loss)`` on the driver as batches
            complete (progress bars).
        on_epoch: called with each epoch's :class:`~fgnn.monitor.stats.EpochStats`.
        slow_trainers: fault injection for tests and benchmarks: Trainer index -> extra seconds
            per mini-batch.
        crash_after_apply: fault injection: indices of Trainers that die once, right after the
            server applied a gradient of theirs and before its task is acknowledged.
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
    """

    def __init__(self, config: JobConfig, dataset: Dataset, *, sampler: Optional[Sampler] = None,
                 model: Optional[nn.Module] = None, on_batch: Optional[OnBatch] = None,
                 on_epoch: Optional[OnEpoch] = None,
                 slow_trainers: Optional[dict[int, float]] = None,
                 crash_after_apply: Optional[set[int]] = None,
                 evaluate: bool = True,
                 on_eval_batch: Optional[OnEvalBatch] = None) -> None:
        if not isinstance(config, JobConfig):
            raise ValueError(f"config must be a JobConfig, got {type(config).__name__}")
        if not isinstance(dataset, Dataset):
            raise ValueError(f"dataset must be a Dataset, got {type(dataset).__name__}")
        if config.train.eval_batch_size is None:
            chunk = eval_chunk(config.train, dataset.feature_row_bytes)
            config = replace(config, train=replace(config.train, eval_batch_size=chunk))
        self.config, self.dataset = config, dataset
        self.sampler = sampler if sampler is not None else _build_sampler(config)
        torch.manual_seed(config.train.seed)
        self.model = model if model is not None else _build_model(config, dataset, self.sampler)
        from fgnn.model_file import job_identity

        self.identity = job_identity(config, dataset, self.model, self.sampler)
        self._start_epoch: Optional[int] = None
        self._resume_optimizer: Optional[dict[str, Any]] = None
        self.best: dict[str, Any] = {"val_acc": -1.0, "epoch": None, "state": None, "bad": 0}
        self.on_batch, self.on_epoch = on_batch, on_epoch
        self.on_eval_batch = on_eval_batch
        self._eval_passes = 0
        self.slow_trainers = dict(slow_trainers or {})
        self.crash_after_apply = set(crash_after_apply or ())
        #: R: tasks per mini-batch, averaged into one step (parameter server or collective)
        self.step_tasks = step_tasks(config.runtime.mode, config.runtime.devices)
        self.do_evaluate = bool(evaluate)
        self.details: list[dict[str, Any]] = []
        self.actor_names: list[str] = []
        self.load_s = 0.0
        self._execs: list[_Exec] = []
        self._pending: list[Any] = []
        self._started_at = 0.0
        self.executor_devices: set[str] = set()
        self._started_ray = False
        self.reordering = None
        self.reorder_info: Optional[dict[str, Any]] = None
        self._disk_tier = config.disk.feature_tier == "disk"
        self._reorder_dir: Optional[str] = None

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
        import ray

        self.load_resume()
        self._init_ray()
        try:
            return self._run()
        except RuntimeFailure:
            raise
        except _death_errors() as err:  # a service (queue, parameter server), Ray itself, or a call
            raise self._died(err) from err
        finally:
            self._teardown()
            if self._started_ray:
                ray.shutdown()

    # ================================================================== setup
    def _init_ray(self) -> None:
        import ray

        rt = self.config.runtime
        self.device_kind = "gpu" if torch.cuda.is_available() else "logical"
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if rt.address is None and self.device_kind == "logical":
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
        import ray

        ds = self.dataset
        # a file-backed memmap (ondisk:DIR) travels as a descriptor: each Trainer maps the file
        # itself, so features larger than memory never enter the object store
        feats = features_payload(ds.features)
        if self._disk_tier and not isinstance(feats, MemmapFeatures):
            raise ValueError(f"disk.feature_tier='disk' reads the features.npy of an ondisk:DIR "
                             f"dataset; {ds.name!r} holds its features in memory")
        self._refs = {
            "graph": ray.put(graph_payload(ds.graph)),
            "features": feats if isinstance(feats, MemmapFeatures) else ray.put(feats),
            "labels": ray.put(ds.labels.cpu().numpy()),
            "train_idx": ray.put(ds.train_idx.cpu().numpy()),
            "eval_idx": ray.put({"val": ds.val_idx.cpu().numpy(),
                                 "test": ds.test_idx.cpu().numpy()}),
            "hotness": None,
        }

    def _start_services(self) -> None:
        import ray
        from ray.util.placement_group import placement_group

        rt = self.config.runtime
        self.num_devices = 1 if rt.mode == "single" else rt.devices
        self.gpus_per_device = float(rt.gpus_per_device)
        self.pg = placement_group([{"GPU": self.gpus_per_device}] * self.num_devices,
                                  strategy="PACK")
        ray.get(self.pg.ready())
        from ray.util.placement_group import placement_group_table

        nodes = placement_group_table(self.pg).get("bundles_to_node_id", {})
        self.one_node = len(set(nodes.values())) <= 1
        self.shared_gpu = trainers_share_gpu(rt.mode, ray.cluster_resources().get("GPU", 0))
        self.args_store = ray.remote(num_cpus=0, max_restarts=0)(ArgStore).options(
            name=ARGS_ACTOR).remote()
        self.queue = ray.remote(num_cpus=0, max_restarts=0)(GlobalQueue).options(
            name="fgnn-queue", max_concurrency=1000).remote(rt.queue_size)
        if rt.exchange == "collective":  # a ledger without tensors; weights on the Trainers
            self.ps = ray.remote(num_cpus=0, max_restarts=0)(StepLedger).options(
                name="fgnn-ps", max_concurrency=256).remote(serve_store=True)
        else:
            self.ps = ray.remote(num_cpus=0)(ParameterServer).options(name="fgnn-ps").remote(
                copy.deepcopy(self.model).cpu(), self.config.train.lr,
                self.config.train.weight_decay, self._resume_optimizer)
        self.torch_device = AUTO  # each executor takes the GPU Ray assigned it

    def _new_sampler(self, device: int) -> _Exec:
        cfg = self.config
        name = f"fgnn-sampler-{device}"
        h = make_actor(SamplerExecutor, name, self.pg, device, 0.5 * self.gpus_per_device,
                        self._refs["graph"], self.sampler, self._refs["train_idx"],
                        cfg.train.batch_size, cfg.train.seed, None, self.queue, name,
                        self.torch_device, eval_idx=self._refs["eval_idx"],
                        transport=cfg.runtime.sample_transport, one_node=self.one_node,
                        parts=self.step_tasks, shared_gpu=self.shared_gpu)
        return _Exec(name, "sampler", device, h)

    def _new_trainer(self, device: int, index: int, role: str = "trainer") -> _Exec:
        cfg = self.config
        standby = role == "standby"
        name = f"fgnn-{role}-{device}"
        local = None
        if cfg.runtime.mode == "time-sharing":
            local = LocalSampling(self._refs["graph"], self.sampler, self._refs["train_idx"],
                                   cfg.train.batch_size, cfg.train.seed, self.torch_device,
                                   self._refs["eval_idx"], self.step_tasks)
        share = (0.5 if standby else 1.0) * self.gpus_per_device
        h = make_actor(TrainerExecutor, name, self.pg, device, share,
                        self._refs["features"], self._refs["labels"],
                        copy.deepcopy(self.model).cpu(), None, device, self.ps,
                        self.queue, name, self.torch_device, role, local,
                        self.slow_trainers.get(index, 0.0),
                        crash_after_apply=not standby and index in self.crash_after_apply,
                        disk=cfg.disk if self._disk_tier else None, seed=cfg.train.seed,
                        exchange=self._exchange_spec())
        return _Exec(name, role, device, h)

    def _exchange_spec(self) -> Optional[ExchangeSpec]:
        """What a Trainer needs for the collective exchange (None: the parameter server)."""
        if self.config.runtime.exchange != "collective":
            return None
        tc = self.config.train
        return ExchangeSpec(self.ps, tc.lr, tc.weight_decay, self._resume_optimizer)

    def _build_layout(self, n_s: int, start_only: bool = False) -> None:
        """Samplers (and standbys) on devices ``0 .. n_s - 1``, Trainers on the rest.

        New executors get the chosen cache and the call waits until they are ready; with
        ``start_only`` (the cache is not chosen yet) it only starts them.
        """
        import ray

        rt = self.config.runtime
        keep = {e.name: e for e in self._execs if e.alive}
        want: list[tuple[str, int]] = []
        if rt.mode == "time-sharing":
            want = [("trainer", d) for d in range(self.num_devices)]
        else:
            for d in range(n_s):
                want.append(("sampler", d))
                if rt.switching or rt.mode == "single":
                    want.append(("standby", d))
            want += [("trainer", d) for d in range(n_s, self.num_devices)]
        names = {f"fgnn-{r}-{d}" for r, d in want}
        for e in keep.values():
            if e.name not in names:
                ray.kill(e.handle, no_restart=True)
        execs, new = [], []
        self._started_at = time.time()
        for i, (role, d) in enumerate(want):
            name = f"fgnn-{role}-{d}"
            if name in keep:
                execs.append(keep[name])
                continue
            if role == "sampler":
                e = self._new_sampler(d)
            else:
                e = self._new_trainer(d, sum(1 for r, _ in want[:i] if r == "trainer"), role)
            execs.append(e)
            new.append(e)
        self._execs = execs
        self.actor_names = [e.name for e in execs]
        self._pending = [e.handle.ready.remote() for e in new]
        if not start_only:
            self._await_ready()
            self._fill_caches(new)  # or, before the cache is chosen, count visits

    def _await_ready(self) -> None:
        """Wait for the executors started last; ``startup_s`` counts from their start to the last
        one built (start-up runs while the driver chooses the cache)."""
        import ray

        done = ray.get(self._pending)
        self._pending = []
        if done:
            self.startup_s += max(0.0, max(float(t) for t, _ in done) - self._started_at)
            self.executor_devices.update(d for _, d in done)
            # what the executors run on, not what the driver sees
            self.device_kind = ("gpu" if any(d.startswith("cuda") for d in
                                             self.executor_devices) else "logical")

    def _teardown(self) -> None:
        import ray

        for e in self._execs:
            try:
                ray.kill(e.handle, no_restart=True)
            except Exception:  # already gone
                pass
        for attr in ("queue", "ps", "args_store"):
            h = getattr(self, attr, None)
            if h is not None:
                try:
                    ray.kill(h, no_restart=True)
                except Exception:
                    pass
        pg = getattr(self, "pg", None)
        if pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(pg)
            except Exception:
                pass
        if self._reorder_dir is not None:
            shutil.rmtree(self._reorder_dir, ignore_errors=True)

    # ================================================================== the run
    def _run(self) -> RunResult:
        import ray

        cfg = self.config
        rt, tc = cfg.runtime, cfg.train
        if rt.mode == "factored" and rt.devices == 1 and not rt.switching:
            raise ValueError("runtime.switching=False with runtime.devices=1 leaves no Trainer in "
                             "factored mode; use mode='single' or enable switching")
        start_epoch = self.load_resume()
        self.startup_s = self.cache_fill_s = self.sizing_s = self.relayout_s = 0.0
        self.memory_reports: dict[str, Any] = {}
        self.alpha_full = self.alpha_resident = 0.0
        self.budget_bytes, self.step_peak_bytes = 0, None
        self.hotness, self._cache_chosen = None, False
        self.placement_name, self.placement = "none", None
        self.hotness_s = 0.0
        if self.config.cache.reorder == "hot-first":
            self._reorder()
        # The executors start (processes, imports, topology and features mapped) while the
        # driver computes a sampling-free hotness map.
        self._start_services()
        self._put_payloads()
        profile = rt.mode == "factored" and rt.samplers is None and self.num_devices > 1
        if rt.mode == "time-sharing":
            n_s, n_t = self.num_devices, self.num_devices
        elif rt.mode == "single":
            n_s, n_t = 1, 0
        elif not profile:
            n_s = rt.samplers if rt.samplers is not None else 1
            n_t = self.num_devices - n_s
        else:  # the first epoch runs with one Sampler and sets N_s (§5.3)
            n_s, n_t = 1, self.num_devices - 1
        self._build_layout(0 if rt.mode == "time-sharing" else n_s, start_only=True)
        self._policy_hotness()
        self._await_ready()
        # Warm-up: the first epoch(s) train without the feature cache; they measure T_s and T_t
        # (§5.3) and each Trainer's memory (§6.1), and PreSC counts visits (§6.3). Then the
        # caches are sized and filled.
        warm_end = start_epoch + self.warmup_epochs
        self._counting = self.policy == "presc" and self.hotness is None
        if self._counting:
            self._service_get([e.handle.count_visits.remote() for e in self._execs
                               if e.role == "sampler"], "a Sampler")
        k: Optional[float] = None
        epochs: list[EpochStats] = []
        best = self.best
        early_stop: Optional[dict[str, Any]] = None
        for epoch in range(start_epoch, tc.epochs):
            stats = self._run_epoch(epoch, measure=epoch == start_epoch)
            stats.warmup = epoch < warm_end
            self._adapt_locality(stats)
            if epoch == start_epoch and rt.mode == "factored" and stats.sample.total > 0:
                t_s = stats.sample.total / max(1, stats.batches)
                t_t = (stats.extract_s + stats.train_s) / max(1, stats.batches)
                k = t_t / t_s
                self.profile_times = {"T_s": t_s, "T_t": t_t}
                if profile:
                    n_s, n_t, k = allocate(self.num_devices, max(t_s, 1e-9), t_t)
                    if n_t == 0 and not rt.switching:
                        # The formula may give every device to sampling; FGNN then trains on the
                        # standby Trainers (P = +inf, §5.3). Without switching there are none:
                        # keep one Trainer.
                        n_s, n_t = self.num_devices - 1, 1
                    if n_s != 1:
                        t0 = time.perf_counter()
                        self._build_layout(n_s)
                        self.relayout_s = time.perf_counter() - t0
            if epoch == warm_end - 1:
                self._counting = False
                if self.policy != "none":
                    self._choose_cache()
            self._pull_weights()
            if (self.do_evaluate and self.dataset.val_idx.numel() > 0
                    and ((epoch + 1) % tc.eval_every == 0 or epoch == tc.epochs - 1)):
                scored = self._evaluate(("val",))
                stats.val_acc, stats.eval_s = scored.accuracy("val"), scored.time_s
                if stats.val_acc > best["val_acc"]:
                    best.update(val_acc=stats.val_acc, epoch=epoch, bad=0, state={
                        k_: v.clone() for k_, v in self.model.state_dict().items()})
                else:
                    best["bad"] += 1
            epochs.append(stats)
            self._save_checkpoint(epoch)
            if self.on_epoch is not None:
                self.on_epoch(stats)
            if tc.patience is not None and best["bad"] >= tc.patience:
                if epoch + 1 < tc.epochs:
                    early_stop = {"epoch": epoch, "patience": tc.patience,
                                  "best_val_acc": best["val_acc"], "best_epoch": best["epoch"]}
                break
        if best["state"] is not None:
            self.model.load_state_dict(best["state"])
        final = {"train_acc": float("nan"), "val_acc": float("nan"), "test_acc": float("nan")}
        if self.do_evaluate:
            # the weights final reports are the best-validation ones, scored by every Trainer
            weights = ray.put(flatten([p for p in self.model.parameters() if p.requires_grad]))
            # The best epoch already scored validation with these weights and the same
            # deterministic recipe (fgnn.evaluation), so that score is reused, not recomputed.
            known = {} if best["state"] is None else {"val": best["val_acc"]}
            scored = self._evaluate(tuple(s for s in ("train", "val", "test") if s not in known),
                                    weights=weights)
            final = {f"{s}_acc": known[s] if s in known else scored.accuracy(s)
                     for s in ("train", "val", "test")}
            self.final_eval_s = scored.time_s
        allocation = {"devices": self.num_devices, "devices_requested": rt.devices,
                      "samplers": n_s, "trainers": n_t, "K": k,
                      "device_kind": self.device_kind, "switching": bool(rt.switching),
                      "cache_policy": self.policy, "warmup_epochs": self.warmup_epochs,
                      "alpha": self.alpha_full, "alpha_resident": self.alpha_resident,
                      "budget_bytes": self.budget_bytes, "step_peak_bytes": self.step_peak_bytes,
                      "placement": self.placement_name, "peer_cost": cfg.cache.peer_cost,
                      "cached_rows": ([] if self.placement is None
                                      else [int(b.numel()) for b in self.placement.buffers]),
                      "covered_rows": (0 if self.placement is None
                                       else self.placement.covered()),
                      "cache_plans": {k_: p.to_dict() for k_, p in
                                      getattr(self, "cache_plans", {}).items()}}
        allocation.update(getattr(self, "profile_times", {}))
        preprocess = {"load_s": self.load_s, "hotness_s": self.hotness_s,
                      "startup_s": self.startup_s, "sizing_s": self.sizing_s,
                      "cache_fill_s": self.cache_fill_s, "relayout_s": self.relayout_s}
        if self.reorder_info is not None:
            allocation["reorder"] = {k: v for k, v in self.reorder_info.items() if k != "seconds"}
            preprocess["reorder_s"] = self.reorder_info["seconds"]
        if self._disk_tier:
            allocation["disk"] = self._disk_layout()
        return RunResult(config=cfg.to_dict(), mode=rt.mode, allocation=allocation,
                         preprocess=preprocess, epochs=epochs, final=final,
                         final_eval_s=getattr(self, "final_eval_s", 0.0),
                         early_stop=early_stop)

    def _died(self, err: BaseException) -> RuntimeFailure:
        """The one-line failure for a death the epoch loop does not handle itself: a service
        actor (queue, parameter server, argument store), an executor outside an epoch, or Ray's
        own processes (the raylet); with the last good checkpoint."""
        path = self._failure_checkpoint()
        return RuntimeFailure(f"{self._who_died(err)} died ({type(err).__name__}{_why(err)}) and "
                              f"the job stopped; {_resume_hint(path, self._good['epoch'])}", path)

    def _who_died(self, err: BaseException) -> str:
        """Name the actor of a Ray death error (``the parameter server (fgnn-ps)``), or Ray."""
        import ray

        names = {"ps": "the parameter server", "queue": "the global queue",
                 "args_store": "the executors' argument store"}
        actor_id = getattr(err, "actor_id", None)
        if actor_id:
            for attr, what in names.items():
                h = getattr(self, attr, None)
                if h is not None and h._actor_id.hex() == actor_id:
                    return f"{what} ({h._ray_actor_creation_function_descriptor.class_name})"
            for e in self._execs:
                if e.handle._actor_id.hex() == actor_id:
                    return f"the {e.role} executor {e.name}"
        if isinstance(err, (ray.exceptions.LocalRayletDiedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.RaySystemError, ray.exceptions.RpcError)):
            return "a Ray process of this node (the raylet or the GCS)"
        return "a Ray actor or object of the job"

    def _pull_weights(self) -> None:
        _, flat = self._service_get(self.ps.weights.remote(), "the parameter server")
        unflatten_into(flat, [p for p in self.model.parameters() if p.requires_grad])

    def _evaluate(self, splits: tuple[str, ...], weights: Any = None) -> EvalOutcome:
        """Score ``splits`` through the Samplers and Trainers (an evaluation pass with the
        recipe of :mod:`fgnn.evaluation`: the job's sampler, ``train.eval_batch_size`` (resolved
        in ``__init__``) and seed).

        Args:
            splits: split names to score.
            weights: ``ObjectRef`` of flat weights to score; None uses the server's current.
        """
        ds, tc = self.dataset, self.config.train
        if tc.eval_mode == "layerwise":
            return self._evaluate_layerwise(splits, weights)
        plan = EvalPlan(tuple(splits), tuple(int(getattr(ds, f"{s}_idx").numel())
                                             for s in splits), tc.eval_batch_size, tc.seed)
        self._eval_passes += 1
        # evaluation passes get ids of their own (negative: training epochs count from 0)
        return self._run_epoch(-1 - self._eval_passes, plan=plan, weights=weights)

    def _evaluate_layerwise(self, splits: tuple[str, ...], weights: Any = None) -> EvalOutcome:
        """Score each split with every neighbour, layer by layer
        (:func:`fgnn.evaluation.evaluate_layerwise`), one split per Trainer, in parallel."""
        import ray

        from fgnn.evaluation import SplitScore

        t0 = time.perf_counter()
        execs = ([e for e in self._execs if e.alive and e.role == "trainer"]
                 or [e for e in self._execs if e.alive and e.role == "standby"])
        if not execs:
            raise RuntimeFailure("no Trainer left to evaluate on")
        calls = {s: execs[i % len(execs)].handle.score_layerwise.remote(
            self._refs["graph"], getattr(self.dataset, f"{s}_idx").cpu().numpy(), weights)
            for i, s in enumerate(splits)}
        scores = {s: SplitScore(*self._service_get(ref, "a Trainer scoring layer-wise"))
                  for s, ref in calls.items()}
        done = sum(1 for _ in splits)
        if self.on_eval_batch is not None:
            self.on_eval_batch(tuple(splits), done, done)
        return EvalOutcome(scores, time.perf_counter() - t0, len(splits), 0.0, 0.0)

def _why(err: BaseException) -> str:
    """``: <Ray's reason>`` from a death error's text (``the actor is dead because its node has
    died``), shortened to its first sentence; empty when Ray gives none."""
    for line in str(err).splitlines():
        line = line.strip()
        if line.startswith("The actor is dead because"):
            first = line.split(". ")[0].rstrip(".")
            return ": " + (first[:1].lower() + first[1:])[:120]
    return ""


def _build_sampler(config: JobConfig) -> Sampler:
    try:
        from fgnn.sampling import build_sampler  # type: ignore[attr-defined]
    except ImportError:
        from fgnn.sampling.khop import KHop

        return KHop(config.sampler.fanouts, weighted=config.sampler.kind == "weighted")
    return build_sampler(config.sampler)


def _build_model(config: JobConfig, dataset: Dataset, sampler: Sampler) -> nn.Module:
    from fgnn.models import build_model

    return build_model(config.model, dataset.feat_dim, dataset.num_classes, sampler.num_layers)
