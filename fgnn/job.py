"""The Python API: ``fgnn.Job(config).run()`` loads the data, starts Ray (for more than one
device), trains, writes the report.

Example:
    >>> import fgnn
    >>> from fgnn.config import JobConfig, RuntimeConfig, TrainConfig
    >>> cfg = JobConfig(runtime=RuntimeConfig(devices=4), train=TrainConfig(epochs=2),
    ...                 report="runs/api/report.json")
    >>> result = fgnn.Job(cfg).run()          # doctest: +SKIP
    >>> result.final["test_acc"]              # doctest: +SKIP

A custom sampler (subclass :class:`fgnn.Sampler`) or model (any ``torch.nn.Module`` called as
``model(blocks, x)``) replaces the one the config would build; see ``docs/api.md``.
"""

from __future__ import annotations

import dataclasses

import logging
import os
import socket
import threading
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Optional

import torch

from fgnn import gpu
from fgnn.config import JobConfig
from fgnn.data import Dataset
from fgnn.monitor.heartbeat import heartbeat
from fgnn.monitor.stats import RunResult, early_stop_message
from fgnn.monitor.summary import cluster_text, devices_note, plural, timing_text
from fgnn.monitor.timeline import Timeline
from fgnn.outputs import (check_inputs, check_outputs, lock_outputs, output_paths,
                          write_outputs)
from fgnn.raystart import (explicit_token_auth, init_local, init_with_dashboard, join_errors,
                           local_system_config, token_auth_enabled, token_hint)
from fgnn.raystart import shutdown as shutdown_ray
from fgnn.sampling import Sampler
from fgnn.sigterm import interrupt_on_sigterm

__all__ = ["Job", "JobConfigError", "batch_note", "batch_warning", "check_address",
           "describe_devices"]

#: Seconds the address pre-check waits for a TCP connection before calling it unreachable.
ADDRESS_TIMEOUT_S = 3.0
#: Host memory of one executor process: a Ray worker with torch and fgnn loaded (a Sampler or
#: Trainer on a small graph measured about 290 MB RSS).
EXECUTOR_PROCESS_BYTES = 300 << 20


def batch_warning(batch_size: int, num_train: int) -> Optional[str]:
    """The one-line warning for a mini-batch that holds every training vertex (one optimizer
    step per epoch, whatever the devices), or None."""
    if batch_size < num_train:
        return None
    return (f"batch size {batch_size} >= {num_train} training vertices: one optimizer step per "
            f"epoch; a smaller --batch-size learns more per epoch")


#: What a task's training items are, for :func:`batch_note` (other tasks: "items").
_ITEMS = {"node": "nodes", "link": "edges", "recsys": "users"}


def batch_note(batch_size: int, num_train: int, task: str = "node") -> str:
    """The one line that says which batch size ``TrainConfig.batch_size=None`` (auto) chose.

    Example:
        ``batch size 14 (140 training nodes; set --batch-size to override)``
    """
    return (f"batch size {batch_size} ({num_train} training {_ITEMS.get(task, 'items')}; set "
            f"--batch-size to override)")


class JobConfigError(ValueError):
    """A job setting that cannot work (unreadable path, unreachable cluster, unknown dataset).

    Attributes:
        field: dotted config field, e.g. ``runtime.address`` or ``data_root``.
        value: the value received.
        why: what is wrong with it.
    """

    def __init__(self, field: str, value: Any, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        name = field.rsplit(".", 1)[-1]
        super().__init__(f"JobConfig.{field}: {why}. Received {name}={value!r} instead.")


def check_address(address: Optional[str], timeout: float = ADDRESS_TIMEOUT_S) -> None:
    """Fail fast when a Ray cluster address cannot be reached.

    ``None``, ``local`` and ``auto`` are left to Ray. ``HOST:PORT`` (the GCS address printed by
    ``ray start --head``) and ``ray://HOST:PORT`` (Ray Client) get a TCP connect with ``timeout``.

    Raises:
        JobConfigError: malformed or unreachable address.
    """
    if address in (None, "", "local", "auto"):
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise JobConfigError("runtime.address", address,
                             "must be HOST:PORT, ray://HOST:PORT, auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise JobConfigError("runtime.address", address,
                             f"cannot reach a Ray cluster there ({why})") from e


def _check_utf8(cfg: JobConfig) -> None:
    """Every path of the job is UTF-8 text: Ray passes the driver's command line to its
    processes as UTF-8, and ``ray.init`` fails deep inside on a name holding other bytes.

    Raises:
        JobConfigError: naming the field and the path.
    """
    for field, value in (("dataset", cfg.dataset), ("data_root", cfg.data_root),
                         ("report", cfg.report), ("save_model", cfg.save_model),
                         ("train.checkpoint_dir", cfg.train.checkpoint_dir)):
        if value is None:
            continue
        try:
            os.fsencode(value).decode("utf-8")
        except UnicodeError as e:
            raise JobConfigError(field, value, "is not UTF-8 text (the path holds bytes of "
                                 "another encoding), which Ray cannot pass to its processes; "
                                 "rename it, or give a UTF-8 path to it (a symlink)") from e


def _check_dir_readable(field: str, path: Optional[str]) -> None:
    if path is None:
        return
    p = Path(path)
    if not p.is_dir():
        raise JobConfigError(field, path, "is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise JobConfigError(field, path, "is not readable")


def describe_devices(devices: int, cluster_gpus: Optional[float] = None) -> tuple[str, str]:
    """Which devices a job lays out: ``("gpu" | "logical", human-readable line)``.

    Args:
        devices: N_g the layout uses.
        cluster_gpus: ``GPU`` resources of a joined Ray cluster (``None`` for a local start).
    """
    n = plural(devices, "device")
    if cluster_gpus is not None:
        kind = "gpu" if gpu.is_available() else "logical"
        what = "GPUs" if kind == "gpu" else "Ray logical GPUs"
        return kind, (f"{n}: {what} of the Ray cluster "
                      f"({cluster_gpus:g} GPU resources in total)")
    n_cuda = gpu.device_count() if gpu.is_available() else 0
    if n_cuda >= devices:
        return "gpu", f"{n}: CUDA GPUs ({n_cuda} present)"
    why = ("no CUDA device found" if n_cuda == 0
           else f"only {plural(n_cuda, 'CUDA device')} present")
    return "logical", f"{n}: Ray logical GPUs on CPU ({why})"


class Job:
    """One training job: data loading, Ray start, the runtime, progress, report and plot.

    Args:
        config: the job; ``None`` uses :class:`~fgnn.config.JobConfig` defaults (a small R-MAT).
        sampler: a custom :class:`~fgnn.sampling.Sampler` instead of the configured one.
        model: a custom ``torch.nn.Module`` (called as ``model(blocks, x)``) instead of the
            configured one.
        dataset: an already loaded :class:`~fgnn.data.Dataset` to train on instead of loading
            ``config.dataset`` (e.g. after reading its dimensions for a custom model).
        progress: draw tqdm bars and per-epoch summary lines.
        out: stream for the job's own messages (dashboard URL, devices, report path).
        since: the wall-clock time (``time.time()``) the run's time line starts from: the
            command line passes the process start, so interpreter start-up and imports count;
            ``None``: the start of :meth:`run`.

    Attributes:
        dataset: the loaded dataset (after :meth:`run`).
        model: the trained model (after :meth:`run`).
        result: the :class:`~fgnn.monitor.stats.RunResult` (after :meth:`run`).
        timeline: the run's :class:`~fgnn.monitor.timeline.Timeline` (during and after
            :meth:`run`); its parts add up to the wall time (``result.timeline``).
        dashboard_url: the Ray dashboard URL, or ``None`` when the dashboard is off (or
            Ray is not used: a one-device job runs in this process).
        on_node_death: called from a watcher thread, with the job's one-line
            :class:`~fgnn.runtime.RuntimeFailure` (last good checkpoint written), the moment
            the raylet of a Ray node this job started dies (:mod:`fgnn.raylet_watch`). Without
            it, :meth:`run` raises that failure once the job's calls fail. The CLI prints the
            line and exits at once, before Ray's core worker can end the process without one.
    """

    def __init__(self, config: Optional[JobConfig] = None, sampler: Optional[Sampler] = None,
                 model: Optional[torch.nn.Module] = None, *, dataset: Optional[Dataset] = None,
                 progress: bool = True, out: Optional[IO[str]] = None,
                 since: Optional[float] = None) -> None:
        if config is not None and not isinstance(config, JobConfig):
            raise TypeError(f"Job: config must be a fgnn.config.JobConfig. "
                            f"Received {type(config).__name__}.")
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"Job: sampler must subclass fgnn.Sampler. "
                            f"Received {type(sampler).__name__}.")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"Job: model must be a torch.nn.Module. "
                            f"Received {type(model).__name__}.")
        if model is not None:
            from fgnn.tasks.contracts import check_trainable_model
            check_trainable_model(model)
        if dataset is not None and not isinstance(dataset, Dataset):
            raise TypeError(f"Job: dataset must be a fgnn.Dataset. "
                            f"Received {type(dataset).__name__}.")
        self.config = config if config is not None else JobConfig()
        self.sampler = sampler
        self.model = model
        self.progress = progress
        self.out = out
        self.dataset: Optional[Dataset] = dataset
        self.result: Optional[RunResult] = None
        self.since = since
        self.timeline: Optional[Timeline] = None
        self.dashboard_url: Optional[str] = None
        self.device_kind: Optional[str] = None
        self.on_node_death: Optional[Callable[[Exception], None]] = None
        self._node_failure: Optional[Exception] = None
        self._ran = False  # a Job runs once (:meth:`run`)

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Cheap checks that need neither the data nor Ray; :meth:`run` calls it first.

        Raises:
            JobConfigError: naming the field and value (dataset spec, data root, an output
                path that is not a regular file or absent, not in a directory where a file can
                be created, the same file as another output, or one that is or lies inside an
                input of the dataset spec (:mod:`fgnn.outputs`), a
                checkpoint directory that is a file or holds no checkpoint to resume, Ray
                address).
        """
        cfg = self.config
        _check_utf8(cfg)
        if self.dataset is None:
            from fgnn.data import parse_spec
            try:
                kind, _ = parse_spec(cfg.dataset)
            except ValueError as e:
                raise JobConfigError("dataset", cfg.dataset, str(e).rstrip(".")) from e
            if cfg.disk.feature_tier == "disk" and kind != "ondisk":
                raise JobConfigError("disk.feature_tier", cfg.disk.feature_tier,
                                     f"reads features.npy from storage, so it needs an "
                                     f"ondisk:DIR dataset, not {cfg.dataset!r}")
            _check_dir_readable("data_root", cfg.data_root)
            _check_data_spec(cfg.dataset, cfg.data_root)
        outputs = output_paths(cfg.report, cfg.save_model, cfg.train.checkpoint_dir)
        check_outputs(outputs, JobConfigError)
        if self.dataset is None:
            from fgnn.data.spec import input_paths
            check_inputs(outputs, input_paths(cfg.dataset, cfg.data_root), JobConfigError)
        if cfg.train.resume:
            from fgnn.runtime.driver import CHECKPOINT_NAME

            _check_dir_readable("train.checkpoint_dir", cfg.train.checkpoint_dir)
            if not (Path(cfg.train.checkpoint_dir) / CHECKPOINT_NAME).is_file():
                raise JobConfigError("train.checkpoint_dir", cfg.train.checkpoint_dir,
                                     f"holds no checkpoint {CHECKPOINT_NAME} to resume from")
        rc = cfg.runtime
        if rc.address in (None, "local") and gpu.is_available():
            n_cuda = gpu.device_count()
            if n_cuda < rc.gpus_needed:
                raise JobConfigError("runtime.devices", rc.devices,
                                     f"only {n_cuda} CUDA devices are present")
        from fgnn.executors.host import uses_ray

        if rc.address in (None, "local") and not gpu.is_available() and uses_ray(rc):
            from fgnn.cores import check_device_cores

            why = check_device_cores(rc.devices_used)  # processes the cores cannot start
            if why is not None:
                raise JobConfigError("runtime.devices", rc.devices, why)
            _check_executor_memory(rc.devices, rc.devices_used)  # in-process: no processes
        check_address(rc.address)

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        """Validate, load the dataset, check the resume checkpoint, start or join Ray (for a
        layout of more than one device, or when asked: a one-device job runs its executors in
        this process), train, and write the model file and the report.

        A Job runs once: its ``model``, ``dataset`` and ``config`` then hold the run's
        trained weights and settled data, so a second run would silently continue from them.
        While it runs it holds an exclusive lock on its report, model file and checkpoint
        directory (:func:`fgnn.outputs.lock_outputs`).

        Returns:
            The run's :class:`~fgnn.monitor.stats.RunResult` (also ``self.result``).

        Raises:
            RuntimeError: this Job has run already (whether that run returned or raised,
                unless it was refused by :meth:`validate` or an output lock); create a new
                :class:`Job` to train again.
            JobConfigError: a setting that cannot work, including a resume checkpoint that is
                unreadable or from another task, link relation, model or dataset (or the same
                sizes with other contents), or an output another running job holds the lock
                of; raised before Ray starts, nothing is written.
            fgnn.runtime.RunFinished: ``train.resume`` of a run that has finished its epochs
                (before Ray starts; its message is the run's result in one line).
            fgnn.runtime.RuntimeFailure: the job stopped on a fault (an executor or service
                died or hung, a non-finite loss); ``.checkpoint`` resumes it.
            fgnn.atomic.WriteError: a checkpoint could not be written (a full disk); no
                partial file is left.
            fgnn.outputs.OutputsError: (a ``WriteError``) the model file, plot or report could
                not be written; each of them is tried whatever became of the others, and the
                message names what failed and what was kept.
        """
        if self._ran:
            raise RuntimeError("Job.run: this Job has run already; a Job runs once (its model "
                               "and dataset hold that run's trained weights and data), so "
                               "create a new fgnn.Job to train again")
        self.timeline = Timeline(self.since, announce=lambda s: self._say(f"fgnn: {s}"))
        self.validate()
        from fgnn.recipes import resolve_recipe
        self.config = resolve_recipe(self.config)  # recipe "auto": what launch.py applies
        cfg = self.config
        with lock_outputs(output_paths(cfg.report, cfg.save_model, cfg.train.checkpoint_dir),
                          JobConfigError):
            self._ran = True  # a refusal above changed nothing: the Job may run after it
            return self._run()

    def _run(self) -> RunResult:
        """The body of :meth:`run`, after its checks, under the output locks."""
        from_spec = self.dataset is None
        with self.timeline.phase("load"), heartbeat(self._say, "loading the dataset"):
            load_s = self._prepare_dataset()
        with self.timeline.phase("setup"):
            runtime, progress = self._runtime_and_progress(from_spec)
            plan = self._plan_memory(runtime)
        result = self._train(runtime, progress)
        if plan is not None:
            result.memory = {**(result.memory or {}), "plan": plan.to_dict()}
        self._complete(result, load_s)
        self.result = result
        self._say_result(result)
        self._write_outputs(result, runtime)
        runtime.mark_complete(result.final)  # a resume of its checkpoint: finished from now
        self._say(f"fgnn: time: {timing_text(result.to_dict())}")
        return result

    # ------------------------------------------------------------------ internals
    def _runtime_and_progress(self, from_spec: bool) -> tuple[Any, Any]:
        """The runtime and its progress display; prints the batch size an auto
        ``train.batch_size`` settled on (or warns about a set batch that holds every training
        item)."""
        from fgnn.monitor.progress import Progress
        progress = Progress(self.config.train.epochs, 1, enabled=self.progress)
        runtime = self._runtime(progress, from_spec)
        cfg, batch = self.config, runtime.config.train.batch_size
        # training items: vertices, a link job's training supervision edges, users
        num_train = progress.num_train = runtime.num_items("train")
        progress.batch_size = -(-batch // runtime.step_tasks)
        warning = batch_warning(batch, num_train)
        if cfg.train.batch_size is None:
            self._say(f"fgnn: {batch_note(batch, num_train, cfg.task)}")
        elif warning and cfg.recipe not in ("kipf-welling", "velickovic"):  # one batch by design
            self._say(f"fgnn: warning: {warning}")
        return runtime, progress

    def _plan_memory(self, runtime: Any) -> Any:
        """The memory plan of the job (:mod:`fgnn.memory_plan`), printed as a table when it
        holds more than a quarter of the host's limit; None for a typed dataset, which it
        does not size (or no dataset: a stand-in job of the tests).

        Raises:
            JobConfigError: the plan exceeds the host's limit (naming the largest term's
                field).
        """
        from fgnn.data.dataset_hetero import HeteroDataset
        from fgnn.memory_plan import plan_job

        if self.dataset is None or isinstance(self.dataset, HeteroDataset):
            return None
        # the job's config with the batch the runtime settled (auto), on the job's dataset
        cfg = dataclasses.replace(self.config, train=dataclasses.replace(
            self.config.train, batch_size=runtime.config.train.batch_size))
        plan = plan_job(cfg, self.dataset, getattr(runtime, "model", None))
        quarter = (plan.limit.bytes if plan.limit is not None else 16 << 30) // 4
        if plan.total > quarter or plan.refusal() is not None:  # small jobs stay quiet
            self._say(f"fgnn: memory plan ({plan.layout['mode']}):\n{plan.table()}")
        why = plan.refusal()
        if why is not None:
            field = plan.largest().field or "dataset"
            value: Any = cfg
            for part in field.split("."):
                value = getattr(value, part)
            raise JobConfigError(field, value, why)
        return plan

    def _prepare_dataset(self) -> float:
        """Load the dataset (unless given), check it can train this config, settle a typed
        link job's relation; the load's seconds.

        Raises:
            JobConfigError: a dataset that cannot load or train.
        """
        cfg = self.config
        t0 = time.perf_counter()
        if self.dataset is None:
            self.dataset = self._load()
        try:
            self.dataset.check_trainable()
        except ValueError as e:
            raise JobConfigError("dataset", cfg.dataset, str(e)) from e
        _check_typed(cfg, self.dataset)
        if cfg.task == "node":
            _check_node_scores(cfg, self.dataset)
        cfg = self.config = _typed_link_config(cfg, self.dataset)  # the relation it predicts
        load_s = time.perf_counter() - t0
        self._say(f"fgnn: dataset {self.dataset!r} loaded in {load_s:.2f}s")
        relation = f" of {cfg.link.edge_type}" if cfg.link.edge_type else ""
        model = cfg.model.name if self.model is None else type(self.model).__name__
        self._say(f"fgnn: task {cfg.task}{relation}, model {model}, recipe {cfg.recipe} "
                  f"(defaults for the settings not given)")
        return load_s

    def _train(self, runtime: Any, progress: Any) -> RunResult:
        """Start or join Ray (unless ``runtime`` runs in this process) and run ``runtime`` under
        the raylet watch; Ray is shut down after (if this call started it) whatever happens."""
        if runtime.in_process:
            self._say_in_process()
            started = False
        else:
            with self.timeline.phase("ray_start"):
                started = self._init_ray()
        restore_sigterm = interrupt_on_sigterm()  # after ray.init, whose handler dumps a stack
        reaper = _watch_driver() if started else None  # ends the node if the driver is killed
        watch = self._watch_raylet(runtime) if started else None
        try:
            result = runtime.run()
            self.model = runtime.model
        except Exception:
            if self._node_failure is not None:  # the errors that followed the raylet's death
                raise self._node_failure from None
            raise
        finally:
            with self.timeline.phase("shutdown"):
                if self.config.report:  # the plot's imports, while Ray shuts down
                    from fgnn.monitor.plot import preload
                    preload()
                if watch is not None:
                    watch.stop()  # ray.shutdown ends the raylet too
                progress.close()
                if started:
                    shutdown_ray()
                if reaper is not None:
                    reaper.stop()
                restore_sigterm()
        return result

    def _say_in_process(self) -> None:
        """The devices line of a job that runs without Ray (one device, in this process)."""
        rc = self.config.runtime
        cuda = gpu.is_available()
        self.device_kind = "gpu" if cuda else "logical"
        where = "CUDA GPU 0" if cuda else "the CPU (no CUDA device found)"
        line = (f"1 device: {where}, in this process; no Ray (one device needs none; --ray "
                f"starts it)")
        note = devices_note(1, rc.devices, rc.mode)
        self._say(f"fgnn: {line}" + (f"; {note}" if note else ""))

    def _say_result(self, result: RunResult) -> None:
        """Print the early stop (if any) and the final metrics."""
        if result.early_stop:
            why = early_stop_message(result.early_stop, result.metric or "accuracy")
            self._say(f"fgnn: {why}")
        fin = result.final
        if self.config.task in ("link", "recsys"):
            self._say("fgnn: final " + "  ".join(f"{k} {v:.4f}" for k, v in fin.items()))
        else:
            self._say(f"fgnn: final train_acc {fin.get('train_acc', float('nan')):.4f}  "
                      f"val_acc {fin.get('val_acc', float('nan')):.4f}  "
                      f"test_acc {fin.get('test_acc', float('nan')):.4f}")

    def _write_outputs(self, result: RunResult, runtime: Any) -> None:
        """Write the model file, the plot and the report, each whatever became of the others;
        the time line (``result.timeline``) closes just before the report is written, so it
        covers the other outputs too.

        Raises:
            fgnn.outputs.OutputsError: naming what could not be written and what was kept.
        """
        cfg = self.config
        writers = []
        if cfg.save_model:
            from fgnn.model_file import save_model
            best = {"epoch": runtime.best["epoch"], "val_acc": runtime.best["val_acc"]}
            writers.append(("save_model", "model", Path(cfg.save_model),
                            lambda: save_model(cfg.save_model, runtime.model, runtime.identity,
                                               final=result.final, best=best)))
        if cfg.report:
            from fgnn.monitor.plot import plot_report
            from fgnn.report import png_path_for, report_dict, write_json_atomic
            report = report_dict(result)  # the plot's: drawn before the time line closes
            writers.append(("report", "plot", png_path_for(cfg.report),
                            lambda: plot_report(report, png_path_for(cfg.report))))
            writers.append(("report", "report", Path(cfg.report),
                            lambda: write_json_atomic(report_dict(self._close_timeline(result)),
                                                      cfg.report)))
        with self.timeline.phase("outputs"), heartbeat(self._say, "writing the outputs"):
            written = write_outputs(writers)
        self._close_timeline(result)
        kept = dict(((f, w), p) for f, w, p in written)
        if ("save_model", "model") in kept:
            self._say(f"fgnn: model {cfg.save_model} (fgnn.load_model reads it)")
        if ("report", "report") in kept:
            self._say(f"fgnn: report {cfg.report}, plot {kept[('report', 'plot')]}")

    def _close_timeline(self, result: RunResult) -> RunResult:
        """Close the run's time line into ``result.timeline`` (once); returns ``result``."""
        if result.timeline is None:
            result.timeline = self.timeline.close()
        return result

    def _watch_raylet(self, runtime: Any) -> Any:
        """Watch the raylet and the GCS of the node :meth:`_init_ray` started: on the death
        of either, build the job's failure at once (:attr:`on_node_death`), once. Returns what
        :meth:`_NodeWatch.stop` stops, or None when there is nothing to watch."""
        from fgnn.raylet_watch import RayletWatch, local_gcs_pid, local_raylet_pid

        once = threading.Lock()

        def died(death: Any) -> None:
            if not once.acquire(blocking=False):  # the other one died of the first's death
                return
            self._node_failure = runtime.watchdog.failure(
                f"{death.describe()}; the job's executors and services died with it, and the "
                f"job stopped")
            _release_segments(runtime)  # on_node_death may end the process at once
            if self.on_node_death is not None:
                self.on_node_death(self._node_failure)

        watches = [RayletWatch(pid, died, what).start()
                   for pid, what in ((local_raylet_pid(), "the raylet"),
                                     (local_gcs_pid(), "the GCS")) if pid is not None]
        return _NodeWatch(watches) if watches else None

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)

    def _runtime(self, progress: Any, from_spec: bool) -> Any:
        """Build the runtime and read its resume checkpoint: no Ray yet, so a checkpoint that
        cannot be used fails here, in one line. ``from_spec``: the dataset was loaded from
        ``config.dataset`` (otherwise the spec is not recorded as the dataset's)."""
        from fgnn.checkpoint import CheckpointError
        from fgnn.runtime.driver import Runtime

        from fgnn.models.size import ModelTooLarge

        cfg = self.config
        try:
            runtime = Runtime(cfg, self.dataset, sampler=self.sampler, model=self.model,
                              on_batch=progress.on_batch, on_epoch=progress.on_epoch,
                              on_eval_batch=progress.on_eval, timeline=self.timeline)
        except ModelTooLarge as e:  # before the model is built: one line naming the field
            raise JobConfigError("model.hidden", cfg.model.hidden, str(e)) from e
        if not from_spec:
            runtime.identity["dataset"]["spec"] = None
        try:
            runtime.load_resume()
        except CheckpointError as e:
            raise JobConfigError("train.checkpoint_dir", cfg.train.checkpoint_dir,
                                 str(e).rstrip(".")) from e
        if runtime.checkpointer.final_only:
            self._say(f"fgnn: the run in {cfg.train.checkpoint_dir} trained its epochs but "
                      f"wrote no final scores or outputs: resuming into the final evaluation "
                      f"and the outputs")
        return runtime

    def _load(self):
        from fgnn.data import load_dataset
        cfg = self.config
        try:
            return load_dataset(cfg.dataset, cfg.data_root,
                                say=lambda m: self._say(f"fgnn: {m}"))
        except (ValueError, OSError) as e:
            field, value = ("dataset", cfg.dataset)
            if isinstance(e, OSError) and cfg.data_root is not None:
                field, value = "data_root", cfg.data_root
            raise JobConfigError(field, value, f"cannot load dataset: {e}".rstrip(".")) from e

    def _init_ray(self) -> bool:
        """Start or join Ray; print devices and the dashboard URL. True if this call started it."""
        import ray
        rc = self.config.runtime
        started = False
        if ray.is_initialized():
            url = _current_dashboard_url()
            cluster_gpus: Optional[float] = float(ray.cluster_resources().get("GPU", 0))
        else:
            url, cluster_gpus = self._start_ray()
            started = True
        try:
            self._say_devices(url, cluster_gpus)
        except BaseException:  # Ctrl-C or SIGTERM too: the node this call started ends
            if started:
                shutdown_ray()
            raise
        return started

    def _say_devices(self, url: Optional[str], cluster_gpus: Optional[float]) -> None:
        """Print the devices and dashboard lines of the cluster :meth:`_init_ray` started or
        joined (the cluster shut down by the caller should this raise).

        Raises:
            JobConfigError: on ``runtime.devices`` when the cluster has too few GPUs.
        """
        rc = self.config.runtime
        used = rc.devices_used
        self.device_kind, line = describe_devices(used, cluster_gpus)
        note = devices_note(used, rc.devices, rc.mode)
        if note:
            line += f"; {note}"
        if cluster_gpus is not None and cluster_gpus < rc.gpus_needed:
            raise JobConfigError("runtime.devices", rc.devices,
                                 f"the Ray cluster has only {cluster_gpus:g} GPU resources")
        self._say(f"fgnn: {line}")
        self._say_dashboard(url)

    def _start_ray(self) -> tuple[Optional[str], Optional[float]]:
        """``ray.init`` a new local node (``runtime.address`` None or ``"local"``, with the
        dashboard if asked) or join ``runtime.address``; ``(dashboard URL or None, the
        cluster's GPUs, None for a local node)``.

        Raises:
            JobConfigError: on ``runtime.address`` when the cluster cannot be joined.
        """
        import ray
        rc = self.config.runtime
        local = rc.address is None or rc.address == "local"
        dashboard = local and rc.dashboard_host is not None
        kwargs = _ray_init_kwargs(rc, local, dashboard)
        what = " and its dashboard" if dashboard else ""
        self._say(f"fgnn: starting Ray (a local node{what})..." if local
                  else f"fgnn: joining the Ray cluster at {rc.address}...")
        try:
            with heartbeat(self._say, "starting Ray" if local else "joining the Ray cluster"):
                ctx = self._ray_init(kwargs, local, dashboard)
        except join_errors() as e:
            raise JobConfigError("runtime.address", rc.address,
                                 f"cannot join the Ray cluster ({' '.join(str(e).split())})"
                                 f"{'' if local else token_hint()}") from e
        url = getattr(ctx, "dashboard_url", None) or None
        if local:
            return url, None
        resources = ray.cluster_resources()
        self._say(f"fgnn: joined the Ray cluster at "
                  f"{cluster_text(_joined_address(ctx, rc.address), resources, _live_nodes())}")
        return url, float(resources.get("GPU", 0))

    def _ray_init(self, kwargs: dict[str, Any], local: bool, dashboard: bool) -> Any:
        """Start a local Ray node (with its dashboard when ``dashboard``) or join the cluster
        (not ``local``); Ray's context."""
        import ray

        if dashboard:
            ctx, why = init_with_dashboard(say=self._say, **kwargs)
            if why is not None:
                self._say(f"fgnn: warning: Ray's dashboard did not start ({why}); "
                          f"training without it")
            return ctx
        if local:
            return init_local(include_dashboard=False, say=self._say, **kwargs)
        return ray.init(**kwargs)

    def _say_dashboard(self, url: Optional[str]) -> None:
        """Set :attr:`dashboard_url` from Ray's ``url`` (``None``: off) and print it."""
        if url:
            self.dashboard_url = url if "://" in url else f"http://{url}"
            login = ("log in with the token `ray get-auth-token` prints; "
                     if token_auth_enabled() else "")
            self._say(f"fgnn: Ray dashboard at {self.dashboard_url} ({login}"
                      f"metrics ray_fgnn_*, see docs/dashboard.md)")
        else:
            self.dashboard_url = None
            self._say("fgnn: Ray dashboard off")

    def _complete(self, result: RunResult, load_s: float) -> None:
        """Fill what only the job knows: the config, load time and device kind."""
        if not result.config:
            result.config = self.config.to_dict()
        pre = dict(result.preprocess or {})
        pre["load_s"] = float(load_s) if not pre.get("load_s") else float(pre["load_s"])
        # GNNLab Table 6's rows besides: the dataset's build (an out-of-core twin's, once) and
        # PreSC#K's pre-sampling (the sampling of the warm-up epochs, which train uncached)
        if self.dataset is not None and self.dataset.meta.get("build_s") is not None:
            pre["build_s"] = float(self.dataset.meta["build_s"])
        if self.config.cache.policy == "presc":
            pre["presample_s"] = float(sum(e.sample.S for e in result.epochs if e.warmup))
        result.preprocess = pre
        alloc = dict(result.allocation or {})
        alloc.setdefault("device_kind", self.device_kind)
        result.allocation = alloc


def _check_typed(cfg: JobConfig, dataset: Dataset) -> None:
    """What a typed dataset cannot train with, and per-relation fanouts on a homogeneous one
    (:func:`fgnn.tasks.checks.check_job`), before Ray starts.

    Raises:
        JobConfigError: naming the field and value.
    """
    from fgnn.tasks.checks import TypedJobError, check_job

    try:
        check_job(cfg, dataset)
    except TypedJobError as e:
        raise JobConfigError(e.field, e.value, e.why) from e


def _check_node_scores(cfg: JobConfig, dataset: Dataset) -> None:
    """A node job's scores: warn about those that cannot be computed (an empty validation or
    test split, a single training class); refuse early stopping with no validation split.

    Raises:
        JobConfigError: ``train.patience`` set while ``val_idx`` is empty.
    """
    if cfg.train.patience is not None and dataset.val_idx.numel() == 0:
        raise JobConfigError("train.patience", cfg.train.patience,
                             f"early stopping watches validation accuracy, but dataset "
                             f"{dataset.name!r} has an empty validation split (val_idx)")
    dataset.warn_unscorable()


def _typed_link_config(cfg: JobConfig, dataset: Dataset) -> JobConfig:
    """A typed link job's config with ``link.edge_type`` resolved (the dataset's default made
    explicit, so the console, the report and checkpoints name the relation predicted)."""
    from fgnn.data.dataset_hetero import HeteroDataset
    from fgnn.tasks.checks import resolved_config

    if cfg.task != "link" or not isinstance(dataset, HeteroDataset):
        return cfg

    return resolved_config(cfg, dataset)


def _check_data_spec(spec: str, data_root: Optional[str]) -> None:
    """Before loading: a Planetoid or OGB-named spec has its data directory; a synthetic one
    fits in memory."""
    from fgnn.data.planetoid import PLANETOID_NAMES
    from fgnn.data.spec import (OGB_NAMES, check_spec_memory, ogb_named_dir, parse_spec,
                                planetoid_root)
    kind = parse_spec(spec)[0]
    try:
        if kind in PLANETOID_NAMES:
            planetoid_root(spec, data_root)
        elif kind in OGB_NAMES:
            ogb_named_dir(kind, data_root)
    except ValueError as e:
        raise JobConfigError("data_root", data_root, str(e)) from e
    try:
        check_spec_memory(spec)
    except ValueError as e:
        raise JobConfigError("dataset", spec, str(e)) from e


def _check_executor_memory(devices: int, needed: int) -> None:
    """Logical GPUs on this machine: every device runs at least one executor process (plus the
    queue and the parameter server), so host memory caps the device count."""
    from fgnn.data.memory import format_bytes, host_memory_limit
    limit = host_memory_limit()
    procs = needed + 2
    need = procs * EXECUTOR_PROCESS_BYTES
    if limit is None or need <= limit.bytes:
        return
    cap = max(0, limit.bytes // EXECUTOR_PROCESS_BYTES - 2)
    raise JobConfigError(
        "runtime.devices", devices,
        f"{needed} Ray logical GPUs need at least {procs} executor processes of about "
        f"{format_bytes(EXECUTOR_PROCESS_BYTES)} each ({format_bytes(need)}), more than the "
        f"{format_bytes(limit.bytes)} this machine can give ({limit.source}); at most {cap} "
        f"devices fit")


def _ray_init_kwargs(rc: Any, local: bool, dashboard: bool) -> dict[str, Any]:
    """``ray.init`` keywords for the job's runtime settings ``rc``: a new ``local`` node sized
    for the executors (with the dashboard on ``rc.dashboard_host`` if ``dashboard``), or the
    cluster at ``rc.address``."""
    # Executor output would tear the progress bars; their errors reach the driver as
    # exceptions anyway.
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if not local:
        kwargs["address"] = rc.address
        return kwargs
    # "local": a new node even when another cluster (``ray start``) runs on this machine; Ray
    # would join that one and refuse num_cpus/num_gpus
    kwargs["address"] = "local"
    kind, _ = describe_devices(rc.gpus_needed)
    if kind == "logical":
        kwargs["num_gpus"] = rc.gpus_needed
    # Executors are light on CPU; declare enough logical CPUs for all of them.
    kwargs["num_cpus"] = max(os.cpu_count() or 1, rc.devices + 2)
    kwargs["_system_config"] = local_system_config()
    if dashboard:
        kwargs["dashboard_host"] = rc.dashboard_host
    explicit_token_auth()  # Ray's default for a new cluster, without its warning
    return kwargs


class _NodeWatch:
    """The watches of a local node's raylet and GCS (:meth:`Job._watch_raylet`), stopped
    together before ``ray.shutdown`` ends both."""

    def __init__(self, watches: list[Any]) -> None:
        self.watches = watches

    def stop(self) -> None:
        """Stop every watch: a death from now on is the shutdown's."""
        for w in self.watches:
            w.stop()


def _release_segments(runtime: Any) -> None:
    """Remove the shared-memory segments (``/dev/shm/fgnn-peer-<pid>-*``) the job's Trainers
    exported, after the raylet's death: the Trainers died with it, and the CLI then ends the
    process without the runtime's teardown, which would have removed them. Best effort."""
    caches = getattr(runtime, "caches", None)
    if caches is None:
        return
    try:
        caches.release_peers()
    except Exception:  # noqa: BLE001 - the job's own failure line comes next
        pass


def _watch_driver() -> Any:
    """The watcher that ends the local Ray node this job started and removes its ring files
    should the driver be killed (:mod:`fgnn.reaper`); None where there is none."""
    from fgnn.raystart import local_node_processes
    from fgnn.reaper import watch_driver

    pids = local_node_processes()
    return None if pids is None else watch_driver(pids)


def _joined_address(ctx: Any, given: str) -> str:
    """The address of the cluster ``ray.init(address=given)`` joined: its GCS, as Ray resolved
    ``auto`` or ``HOST:PORT``; ``given`` for a context without one (Ray Client)."""
    info = getattr(ctx, "address_info", None) or {}
    return str(info.get("gcs_address") or info.get("address") or given)


def _live_nodes() -> int:
    """Nodes of the joined cluster that are alive."""
    import ray
    return sum(1 for n in ray.nodes() if n.get("Alive"))


def _current_dashboard_url() -> Optional[str]:
    """The dashboard URL of an already initialised Ray, if it has one."""
    try:
        from ray._private.worker import get_dashboard_url
        return get_dashboard_url() or None
    except Exception:  # private API moved, or no dashboard
        return None
