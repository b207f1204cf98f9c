"""The factored runtime on Ray (FGNN §5): builds the executors, runs the epochs, reports.

Layout of a job over N_g devices (GPUs, or Ray logical GPUs on CPU):

* ``factored`` -- N_s Sampler executors and N_t = N_g - N_s Trainer executors, N_s from the
  allocation formula over a profiling epoch (§5.3, :func:`~fgnn.executors.scheduler.allocate`)
  unless ``RuntimeConfig.samplers`` fixes it. Each Sampler device also hosts a standby Trainer
  with a smaller cache (the topology shares the device) that takes tasks once its Sampler has
  finished its share of the epoch, while the switching profit is positive (§5.3).
* ``time-sharing`` -- the conventional design and the baseline: every device samples and trains;
  the topology is resident on every device, so its degree-ranked cache is smaller by the graph's
  bytes.
* ``single`` -- one device alternates: its Sampler samples the whole epoch into the queue (host
  memory), then its standby Trainer trains it (§7.9), the N_t = 0 case of switching.

All executors are plain classes made actors here, in :func:`_make_actor` only, with
``ray.remote(num_gpus=...)`` inside a placement group of one ``{"GPU": 1}`` bundle per device (a
Sampler and its standby share their bundle's device with ``num_gpus=0.5`` each). Gradients go
through a parameter-server actor (:mod:`fgnn.executors.ps`): asynchronous updates with staleness
bounded by the number of Trainers, which needs no group membership when standby Trainers join and
leave mid-epoch or a Trainer dies, and is the exactly-once ledger of trained tasks.

Host features: in-memory matrices go through the object store once (mapped zero-copy by every
executor on the node); a file-backed ``np.memmap`` (an ``ondisk:DIR`` dataset, possibly larger
than memory) is shipped as a :class:`~fgnn.executors._common.MemmapFeatures` descriptor and each
Trainer maps the file itself, reading only its cache rows and misses.

Cache ratios: one training step is measured once (PaGraph's peak, with model, optimizer and batch
counted as resident) and both α (a Trainer's whole budget; a device that also holds the
topology) are derived from that peak (:func:`fgnn.cache.budget.alpha_from_peak`).

Feature caches: the cached rows follow ``cache.placement`` over the layout's Trainers
(:meth:`Runtime._plan_caches`, Song & Jiang §3.2); the Samplers mark every sampled vertex with the
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
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.executors._common import MemmapFeatures, features_payload, graph_payload
from fgnn.executors._epoch import (_MAX_RESTARTS, PROFILE_BATCHES, EpochLoop, RuntimeFailure,
                                   _Exec)
from fgnn.executors.ps import ParameterServer, unflatten_into
from fgnn.executors.queue import GlobalQueue
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.scheduler import allocate
from fgnn.executors.trainer import TrainerExecutor
from fgnn.monitor.stats import EpochStats, RunResult
from fgnn.sampling.base import Sampler
from fgnn.sampling.locality import LocalityAwareKHop

__all__ = ["Runtime", "RuntimeFailure", "CHECKPOINT_NAME", "PROFILE_BATCHES"]

#: File the runtime's resumable checkpoint is written to under ``TrainConfig.checkpoint_dir``.
CHECKPOINT_NAME = "runtime.pt"

OnBatch = Callable[[int, int, int, float], None]
OnEpoch = Callable[[EpochStats], None]


def _make_actor(cls: type, name: str, pg: Any, bundle: int, gpu: float, *args: Any,
                **kwargs: Any) -> Any:
    """The one place executors become actors: ``ray.remote(num_gpus=gpu)`` on device ``bundle``
    of the job's placement group, named by role and device, restartable."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
    actor_cls = ray.remote(num_gpus=gpu, num_cpus=0, max_restarts=_MAX_RESTARTS)(cls)
    return actor_cls.options(name=name, scheduling_strategy=strategy).remote(*args, **kwargs)


class Runtime(EpochLoop):
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
        evaluate: score validation/train/test accuracy (off in throughput benchmarks).

    Attributes:
        model: the trained model (CPU) after :meth:`run` (best validation weights, like
            :func:`fgnn.training.fit`).
        details: per-epoch extras beyond :class:`EpochStats` (overheads, ledger, standby batches).
        actor_names: names of the executor actors of the last epoch.
    """

    def __init__(self, config: JobConfig, dataset: Dataset, *, sampler: Optional[Sampler] = None,
                 model: Optional[nn.Module] = None, on_batch: Optional[OnBatch] = None,
                 on_epoch: Optional[OnEpoch] = None,
                 slow_trainers: Optional[dict[int, float]] = None,
                 evaluate: bool = True) -> None:
        if not isinstance(config, JobConfig):
            raise ValueError(f"config must be a JobConfig, got {type(config).__name__}")
        if not isinstance(dataset, Dataset):
            raise ValueError(f"dataset must be a Dataset, got {type(dataset).__name__}")
        self.config, self.dataset = config, dataset
        self.sampler = sampler if sampler is not None else _build_sampler(config)
        torch.manual_seed(config.train.seed)
        self.model = model if model is not None else _build_model(config, dataset, self.sampler)
        self.on_batch, self.on_epoch = on_batch, on_epoch
        self.slow_trainers = dict(slow_trainers or {})
        self.do_evaluate = bool(evaluate)
        self.details: list[dict[str, Any]] = []
        self.actor_names: list[str] = []
        self.load_s = 0.0
        self._execs: list[_Exec] = []
        self._started_ray = False

    # ================================================================== public
    def run(self) -> RunResult:
        """Preprocess, profile, train ``config.train.epochs`` epochs, evaluate.

        Returns:
            The run's :class:`~fgnn.monitor.stats.RunResult`.

        Raises:
            RuntimeFailure: when the job cannot continue (a checkpoint was written).
            ValueError: when Ray offers fewer devices than ``runtime.devices``.
        """
        import ray

        self._init_ray()
        try:
            return self._run()
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
                kw["num_gpus"] = rt.devices
            # "local": start a fresh instance even when another cluster runs on this machine
            ray.init(address=rt.address or "local", **kw)
            self._started_ray = True
        gpus = ray.cluster_resources().get("GPU", 0)
        need = 1 if rt.mode == "single" else rt.devices
        if gpus < need:
            raise ValueError(f"runtime.devices={need} but the Ray cluster offers {gpus:g} GPUs "
                             f"(start Ray with num_gpus={need} logical GPUs on CPU)")

    def _preprocess(self) -> None:
        """Hotness (presample_s), cache ratios (cache_build_s) and object-store payloads."""
        import ray

        cfg, ds = self.config, self.dataset
        mode = cfg.runtime.mode
        t0 = time.perf_counter()
        policy = "degree" if mode == "time-sharing" else cfg.cache.policy
        if policy == "none":
            self.hotness = None
        else:
            from fgnn.cache.hotness import compute_hotness

            gen = torch.Generator().manual_seed(cfg.train.seed + 7919)
            kw: dict[str, Any] = {}
            if policy in ("presc",) or policy.startswith("presc"):
                kw = {"sampler": self.sampler, "epochs": cfg.cache.presample_epochs,
                      "batch_size": cfg.train.batch_size, "generator": gen}
            elif policy == "random":
                kw = {"generator": gen}
            self.hotness = compute_hotness(policy, ds.graph, ds.train_idx, **kw).float().cpu()
        self.presample_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        self.alpha_full, self.alpha_resident, self.budget_bytes = self._cache_ratios()
        self.cache_ratio_s = time.perf_counter() - t1
        # a file-backed memmap (ondisk:DIR) travels as a descriptor: each Trainer maps the file
        # itself, so features larger than memory never enter the object store
        feats = features_payload(ds.features)
        self._refs = {
            "graph": ray.put(graph_payload(ds.graph)),
            "features": feats if isinstance(feats, MemmapFeatures) else ray.put(feats),
            "labels": ray.put(ds.labels.cpu().numpy()),
            "train_idx": ray.put(ds.train_idx.cpu().numpy()),
        }
        self._plan_key: Optional[tuple] = None

    def _cache_ratios(self) -> tuple[float, float, int]:
        """α of a Trainer (whole budget) and of a device that also holds the topology (standby,
        time-sharing): ``budget - graph bytes`` (FGNN §5.3, §6.1)."""
        cfg, ds = self.config, self.dataset
        if cfg.cache.policy == "none" and cfg.runtime.mode != "time-sharing":
            return 0.0, 0.0, 0
        n, row = ds.num_nodes, ds.feature_row_bytes
        gbytes = ds.graph.nbytes()
        if cfg.cache.cache_ratio is not None and cfg.cache.device_memory_gib is None:
            budget = int(cfg.cache.cache_ratio * n * row)
            full = float(cfg.cache.cache_ratio)
            resident = min(1.0, max(0, budget - gbytes) // row / n)
            return full, resident, budget
        gib = cfg.cache.device_memory_gib
        if gib is None:
            gib = (torch.cuda.mem_get_info()[0] / 2 ** 30 if torch.cuda.is_available() else 1.0)
        budget = int(gib * 2 ** 30)
        from fgnn.cache.budget import alpha_from_peak, measure_step_peak

        # one measured step prices both layouts (PaGraph's peak, FGNN §6.1): the step is the
        # costliest part of preprocessing on CPU, and the peak does not depend on the graph
        step, resident_objs = self._one_step_closure()
        peak = measure_step_peak(step, resident=resident_objs)
        self.step_peak_bytes = int(peak)
        kw = {"budget_bytes": budget, "num_nodes": n, "row_bytes": row}
        try:
            full = alpha_from_peak(peak, **kw).alpha
        except ValueError:
            full = 0.0
        try:
            resident = alpha_from_peak(peak, graph_bytes=gbytes, **kw).alpha
        except ValueError:
            resident = 0.0
        if cfg.cache.cache_ratio is not None:
            full, resident = min(full, cfg.cache.cache_ratio), min(resident, cfg.cache.cache_ratio)
        return full, resident, budget

    def _one_step_closure(self) -> tuple[Callable[[], None], list[Any]]:
        """One real training step on a copy of the model (PaGraph's peak measurement), and the
        objects resident on the device before it (model, optimizer, the batch's features and
        labels) for the CPU meter. Only the batch's feature rows are read (memmaps included)."""
        from fgnn.training import extract_features, train_step

        ds = self.dataset
        model = copy.deepcopy(self.model)
        opt = torch.optim.Adam(model.parameters(), lr=self.config.train.lr)
        seeds = ds.train_idx[: self.config.train.batch_size]
        sample = self.sampler.sample(ds.graph, seeds, torch.Generator().manual_seed(0))
        x = extract_features(ds.features, sample.input_nodes)
        labels = ds.labels[sample.seeds]
        return (lambda: train_step(model, opt, sample, x, labels)), [model, opt, x, labels]

    def _start_services(self) -> None:
        import ray
        from ray.util.placement_group import placement_group

        rt = self.config.runtime
        self.num_devices = 1 if rt.mode == "single" else rt.devices
        self.pg = placement_group([{"GPU": 1}] * self.num_devices, strategy="PACK")
        ray.get(self.pg.ready())
        self.queue = ray.remote(num_cpus=0, max_restarts=0)(GlobalQueue).options(
            name="fgnn-queue", max_concurrency=1000).remote(rt.queue_size)
        self.ps = ray.remote(num_cpus=0)(ParameterServer).options(name="fgnn-ps").remote(
            copy.deepcopy(self.model).cpu(), self.config.train.lr,
            self.config.train.weight_decay, self._resume_optimizer)
        self.torch_device = "cuda:0" if self.device_kind == "gpu" else "cpu"

    def _plan_caches(self, n_s: int) -> None:
        """Place the cached rows over the layout with ``n_s`` Samplers (Song & Jiang §3;
        :func:`~fgnn.cache.placement.job_placement`): the Trainers share the configured
        placement (``cache.placement``) with ``⌊α N⌋`` rows each; a standby Trainer (or every
        device in time-sharing mode) has the smaller ``α`` of a device that also holds the
        topology. The holder bits of the result are the Samplers' M-step map.

        Executors are created with their cache in their arguments, which Ray replays when it
        restarts one; so when the placement changes with the layout (after the profiling
        epoch), every executor whose view of it changed is replaced rather than updated.
        """
        import ray

        from fgnn.cache.feature_store import num_cached_rows
        from fgnn.cache.placement import job_placement

        t0 = time.perf_counter()
        cfg, n = self.config, self.dataset.num_nodes
        rt, n_g = cfg.runtime, self.num_devices
        if rt.mode == "time-sharing":
            trainers, standbys = list(range(n_g)), []
            cap = num_cached_rows(self.alpha_resident, n)
        elif rt.mode == "single":
            trainers, standbys, cap = [], [0], 0
        else:
            trainers = list(range(n_s, n_g))
            standbys = list(range(n_s)) if rt.switching else []
            cap = num_cached_rows(self.alpha_full, n)
        key = (tuple(trainers), tuple(standbys))
        if key == self._plan_key:
            return
        old = getattr(self, "placement", None)
        if self.hotness is None or max(self.alpha_full, self.alpha_resident) <= 0:
            name, placement = "none", None
        else:
            name, placement = job_placement(
                self.hotness, n_g, trainers, cap, standbys,
                num_cached_rows(self.alpha_resident, n), cfg.cache.placement,
                cfg.cache.peer_cost)
        self.placement, self.placement_name, self._plan_key = placement, name, key
        self._refs["placement"] = ray.put(placement)
        self._refs["cache_map"] = (None if placement is None
                                   else ray.put(placement.holder_bits().numpy()))
        stale = [e for e in self._execs if e.alive and _view_changed(old, placement, e)]
        for e in stale:
            ray.kill(e.handle, no_restart=True)
            e.alive = False
        for e in stale:  # the replacement takes the same name: wait until Ray releases it
            _wait_gone(e.name)
        self.cache_build_s = getattr(self, "cache_build_s", 0.0) + time.perf_counter() - t0

    def _new_sampler(self, device: int) -> _Exec:
        cfg = self.config
        name = f"fgnn-sampler-{device}"
        h = _make_actor(SamplerExecutor, name, self.pg, device, 0.5, self._refs["graph"],
                        self.sampler, self._refs["train_idx"], cfg.train.batch_size,
                        cfg.train.seed, self._refs["cache_map"], self.queue, name,
                        self.torch_device)
        return _Exec(name, "sampler", device, h)

    def _new_trainer(self, device: int, index: int, role: str = "trainer") -> _Exec:
        cfg = self.config
        standby = role == "standby"
        name = f"fgnn-{role}-{device}"
        local = None
        if cfg.runtime.mode == "time-sharing":
            local = _LocalSampling(self._refs["graph"], self.sampler, self._refs["train_idx"],
                                   cfg.train.batch_size, cfg.train.seed, self.torch_device,
                                   self._refs["cache_map"])
        h = _make_actor(TrainerExecutor, name, self.pg, device, 0.5 if standby else 1.0,
                        self._refs["features"], self._refs["labels"],
                        copy.deepcopy(self.model).cpu(), self._refs["placement"], device,
                        self.ps, self.queue, name, self.torch_device, role, local,
                        self.slow_trainers.get(index, 0.0))
        return _Exec(name, role, device, h)

    def _adapt_locality(self, stats: EpochStats) -> None:
        """Song & Jiang Algorithm 2 once per epoch: record the scale ``s`` the epoch sampled
        with, feed the epoch's data-loading share ``r`` (``stats.load_ratio``) to the
        controller, and send the new ``s`` to every executor that samples."""
        import ray

        if not isinstance(self.sampler, LocalityAwareKHop):
            return
        stats.locality_scale = self.sampler.scale
        s = self.sampler.end_epoch(stats.load_ratio)
        ray.get([e.handle.set_scale.remote(s) for e in self._execs
                 if e.alive and (e.role == "sampler" or self.config.runtime.mode
                                 == "time-sharing")])

    def _build_layout(self, n_s: int) -> None:
        """Samplers (and standbys) on devices ``0 .. n_s - 1``, Trainers on the rest."""
        import ray

        rt = self.config.runtime
        self._plan_caches(n_s)
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
        execs = []
        for i, (role, d) in enumerate(want):
            name = f"fgnn-{role}-{d}"
            if name in keep:
                execs.append(keep[name])
            elif role == "sampler":
                execs.append(self._new_sampler(d))
            else:
                idx = sum(1 for r, _ in want[:i] if r == "trainer")
                execs.append(self._new_trainer(d, idx, role))
        t0 = time.perf_counter()
        ray.get([e.handle.ready.remote() for e in execs])
        self.cache_build_s += time.perf_counter() - t0
        self._execs = execs
        self.actor_names = [e.name for e in execs]

    def _teardown(self) -> None:
        import ray

        for e in self._execs:
            try:
                ray.kill(e.handle, no_restart=True)
            except Exception:  # already gone
                pass
        for attr in ("queue", "ps"):
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

    # ================================================================== the run
    def _run(self) -> RunResult:
        import ray

        cfg = self.config
        rt, tc = cfg.runtime, cfg.train
        if rt.mode == "factored" and rt.devices == 1 and not rt.switching:
            raise ValueError("runtime.switching=False with runtime.devices=1 leaves no Trainer in "
                             "factored mode; use mode='single' or enable switching")
        start_epoch = self._maybe_resume()
        self._preprocess()
        self.cache_build_s = self.cache_ratio_s
        self._start_services()
        k: Optional[float] = None
        if rt.mode == "time-sharing":
            n_s, n_t = self.num_devices, self.num_devices
            self._build_layout(0)
        elif rt.mode == "single":
            n_s, n_t = 1, 0
            self._build_layout(1)
        elif rt.samplers is not None or self.num_devices == 1:
            n_s = rt.samplers if rt.samplers is not None else 1
            n_t = self.num_devices - n_s
            self._build_layout(n_s)
        else:  # profiling epoch with one Sampler, then the allocation formula (§5.3)
            self._build_layout(1)
            t0 = time.perf_counter()
            t_s, t_t = self._profile()
            n_s, n_t, k = allocate(self.num_devices, t_s, t_t)
            if n_t == 0 and not rt.switching:
                # The formula may give every device to sampling; FGNN then trains on the standby
                # Trainers (P = +inf, §5.3). Without switching there are none: keep one Trainer.
                n_s, n_t = self.num_devices - 1, 1
            self.profile_times = {"T_s": t_s, "T_t": t_t, "profile_s": time.perf_counter() - t0}
            if n_s != 1:
                self._build_layout(n_s)
        epochs: list[EpochStats] = []
        best_val, best_state, bad = -1.0, None, 0
        for epoch in range(start_epoch, tc.epochs):
            stats = self._run_epoch(epoch)
            self._adapt_locality(stats)
            if k is None and rt.mode == "factored" and stats.sample.total > 0:
                t_s = stats.sample.total / max(1, stats.batches)
                t_t = (stats.extract_s + stats.train_s) / max(1, stats.batches)
                k = t_t / t_s
            self._pull_weights()
            if self.do_evaluate and ((epoch + 1) % tc.eval_every == 0 or epoch == tc.epochs - 1):
                stats.val_acc = self._accuracy(self.dataset.val_idx)
                if stats.val_acc > best_val:
                    best_val, bad = stats.val_acc, 0
                    best_state = {k_: v.clone() for k_, v in self.model.state_dict().items()}
                else:
                    bad += 1
            epochs.append(stats)
            self._save_checkpoint(epoch)
            if self.on_epoch is not None:
                self.on_epoch(stats)
            if tc.patience is not None and bad >= tc.patience:
                break
        if best_state is not None:
            self.model.load_state_dict(best_state)
        final = {"train_acc": float("nan"), "val_acc": float("nan"), "test_acc": float("nan")}
        if self.do_evaluate:
            final = {"train_acc": self._accuracy(self.dataset.train_idx),
                     "val_acc": self._accuracy(self.dataset.val_idx),
                     "test_acc": self._accuracy(self.dataset.test_idx)}
        allocation = {"devices": self.num_devices, "samplers": n_s, "trainers": n_t, "K": k,
                      "device_kind": self.device_kind, "switching": bool(rt.switching),
                      "alpha": self.alpha_full, "alpha_resident": self.alpha_resident,
                      "budget_bytes": self.budget_bytes, "cache_ratio_s": self.cache_ratio_s,
                      "placement": self.placement_name, "peer_cost": cfg.cache.peer_cost,
                      "cached_rows": ([] if self.placement is None
                                      else [int(b.numel()) for b in self.placement.buffers]),
                      "covered_rows": (0 if self.placement is None
                                       else self.placement.covered()),
                      "step_peak_bytes": getattr(self, "step_peak_bytes", None)}
        if hasattr(self, "profile_times"):
            allocation.update(self.profile_times)
        return RunResult(config=cfg.to_dict(), mode=rt.mode, allocation=allocation,
                         preprocess={"load_s": self.load_s, "presample_s": self.presample_s,
                                     "cache_build_s": self.cache_build_s},
                         epochs=epochs, final=final)

    def _profile(self) -> tuple[float, float]:
        """The profiling epoch (§5.3): T_s and T_t per mini-batch, gradients discarded."""
        stats = self._run_epoch(-1, profiling=True)
        n = max(1, stats.batches)
        t_s = stats.sample.total / n
        t_t = (stats.extract_s + stats.train_s) / n
        self.profile_stats = stats
        return max(t_s, 1e-9), t_t

    # ------------------------------------------------------------------ model, eval, ckpt
    def _pull_weights(self) -> None:
        import ray

        _, flat = ray.get(self.ps.weights.remote())
        unflatten_into(flat, [p for p in self.model.parameters() if p.requires_grad])

    def _accuracy(self, idx: torch.Tensor) -> float:
        from fgnn.training import evaluate

        if idx.numel() == 0:
            return float("nan")
        return float(evaluate(self.model, self.dataset, None, idx,
                              batch_size=self.config.train.batch_size))

    def _checkpoint_path(self, force: bool) -> Optional[Path]:
        d = self.config.train.checkpoint_dir
        if d is None:
            if not force:
                return None
            d = tempfile.mkdtemp(prefix="fgnn-runtime-")
        return Path(d) / CHECKPOINT_NAME

    def _save_checkpoint(self, epoch: int, force: bool = False) -> Optional[Path]:
        """Write model + optimizer from the parameter server (atomic, resumable)."""
        import ray

        path = self._checkpoint_path(force)
        if path is None:
            return None
        from fgnn.checkpoint import save_checkpoint

        state = ray.get(self.ps.state.remote())
        model = copy.deepcopy(self.model)
        model.load_state_dict(state["model"])
        opt = torch.optim.Adam(model.parameters(), lr=self.config.train.lr)
        opt.load_state_dict(state["optimizer"])
        return save_checkpoint(path, model, opt, max(epoch, 0),
                               extra={"runtime": {"finished_epoch": epoch}})

    def _maybe_resume(self) -> int:
        """Load the checkpoint when ``train.resume``; returns the first epoch to run."""
        self._resume_optimizer = None
        tc = self.config.train
        if not tc.resume:
            return 0
        path = Path(tc.checkpoint_dir) / CHECKPOINT_NAME
        if not path.exists():
            return 0
        from fgnn.checkpoint import load_checkpoint

        opt = torch.optim.Adam(self.model.parameters(), lr=tc.lr)
        ckpt = load_checkpoint(path, self.model, opt, restore_rng=False)
        self._resume_optimizer = opt.state_dict()
        finished = int(ckpt.extra.get("runtime", {}).get("finished_epoch", ckpt.epoch))
        return finished + 1


class _LocalSampling(SamplerExecutor):
    """The in-process sampler a time-sharing Trainer carries (topology resident on its device).

    Built lazily inside the Trainer actor so the graph is mapped from the object store there.
    """

    def __init__(self, graph: Any, sampler: Sampler, train_idx: Any, batch_size: int,
                 seed: int, device: str, cache_map: Any = None) -> None:  # noqa: D107
        self._args = (graph, sampler, train_idx, batch_size, seed, device, cache_map)
        self._built = False

    def _build(self) -> None:
        import ray

        graph, sampler, train_idx, batch_size, seed, device, cache_map = self._args
        graph, train_idx, cache_map = (ray.get(x) if isinstance(x, ray.ObjectRef) else x
                                       for x in (graph, train_idx, cache_map))
        SamplerExecutor.__init__(self, graph, sampler, train_idx, batch_size, seed, cache_map,
                                 None, "local", device)
        self._built = True

    def sample(self, epoch: int, task_id: int):  # noqa: D102
        if not self._built:
            self._build()
        return SamplerExecutor.sample(self, epoch, task_id)

    def set_scale(self, scale: float) -> None:  # noqa: D102
        if not self._built:
            self._build()
        SamplerExecutor.set_scale(self, scale)


def _wait_gone(name: str, timeout_s: float = 60.0) -> None:
    """Wait until no live actor is named ``name`` (after ``ray.kill``)."""
    import ray

    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return
        time.sleep(0.05)
    raise RuntimeError(f"actor {name} still alive {timeout_s:g}s after it was killed")


def _view_changed(old: Any, new: Any, e: _Exec) -> bool:
    """Whether executor ``e`` sees placement ``new`` differently from ``old``: a Sampler marks
    against the holder bits, a Trainer reads its own buffer and its ``dev_num`` lookup."""
    if old is None or new is None:
        return (old is None) != (new is None)
    if e.role == "sampler":
        return not torch.equal(old.holder_bits(), new.holder_bits())
    d = e.device
    return not (torch.equal(old.buffers[d], new.buffers[d])
                and torch.equal(old.lookup(d)[0], new.lookup(d)[0]))


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
