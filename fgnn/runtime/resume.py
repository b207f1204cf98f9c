"""Checkpoints of the runtime (internal): writing them after each epoch, reading one to resume.

:class:`Checkpointer` is a part of :class:`~fgnn.runtime.driver.Runtime`. A checkpoint holds
the parameter server's model and optimizer, the best-validation weights so far and the job's
identity (:mod:`fgnn.model_file`), written atomically; resuming checks the identity before Ray
starts (:meth:`Checkpointer.load_resume`): first what the job is trained for (:func:`check_task`:
the task and, for a typed link job, the relation), then the model and dataset sizes
(:func:`fgnn.model_file.check_identity`), then the dataset's contents (the content fingerprint of
its graph, features, labels and splits, :func:`fgnn.model_file.check_content`), then the weights'
shapes.

A checkpoint is only ever written from a consistent state: the end of a training epoch, after
its validation. The driver keeps that state in memory (the last *good* one, beside the file), so
when the job fails -- mid-epoch, in an evaluation pass, or with the parameter server itself gone
-- the failure checkpoint (:meth:`Checkpointer.failure_checkpoint`) is that last completed
epoch, never the server's half-stepped weights; where the file already holds it, it is kept as
it is. Weights that are not finite are never written.
"""

from __future__ import annotations

import copy
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from fgnn.runtime.faults import RuntimeFailure

__all__ = ["Checkpointer", "CHECKPOINT_NAME", "RunFinished", "check_task"]

#: File the runtime's resumable checkpoint is written to under ``TrainConfig.checkpoint_dir``.
CHECKPOINT_NAME = "runtime.pt"


class RunFinished(RuntimeError):
    """``train.resume`` from a checkpoint whose run has finished (every epoch trained, or stopped
    early by ``train.patience``): there is nothing to train. Raised before Ray starts.

    Attributes:
        checkpoint: the checkpoint's path.
        finished_epoch: its last finished epoch (0-based).
        best_val_acc: the best validation accuracy it recorded (None when never validated).
        best_epoch: the epoch of that score (0-based, or None).
    """

    def __init__(self, checkpoint: Path, finished_epoch: int, epochs: int,
                 best_val_acc: Optional[float], best_epoch: Optional[int],
                 early: bool) -> None:
        self.checkpoint, self.finished_epoch = checkpoint, finished_epoch
        self.best_val_acc, self.best_epoch = best_val_acc, best_epoch
        how = ("stopped early (train.patience)" if early
               else f"finished all {epochs} epochs")
        best = ("" if best_val_acc is None or best_epoch is None
                else f"; best val_acc {best_val_acc:.4f} at epoch {best_epoch + 1}")
        super().__init__(f"the run in {checkpoint} has {how} and written its outputs (last "
                         f"epoch {finished_epoch + 1}{best}); nothing to resume; train more with "
                         f"a larger --epochs")


class Checkpointer:
    """The runtime's checkpoints: the last consistent state, its file, resuming.

    Args:
        config: the job (``train.checkpoint_dir``, ``train.resume``, ``train.lr``, ...).
        model: the driver's model (resuming loads into it; written checkpoints use its class).
        identity: the job's identity (:func:`fgnn.model_file.job_identity`), stored in every
            checkpoint.
        best: the runtime's best-validation record (``val_acc``, ``epoch``, ``state``,
            ``bad``), shared: resuming restores it, checkpoints store it.

    Attributes:
        resume_optimizer: the optimizer state read by :meth:`load_resume` (None: fresh run).
        history: the report records (:meth:`~fgnn.monitor.stats.EpochStats.to_dict`) of every
            epoch of the run so far, resumed ones included; the runtime appends each epoch's
            before its checkpoint, which stores them.
        final_only: :meth:`load_resume` read a run that trained its epochs but had not
            written its final scores and outputs (interrupted in the final evaluation or while
            writing them): the runtime trains nothing and goes on to them.
        early_stop: with ``final_only``, the report's ``early_stop`` of a run that patience
            stopped (None otherwise).
    """

    def __init__(self, config: Any, model: torch.nn.Module, identity: dict[str, Any],
                 best: dict[str, Any]) -> None:
        self.config, self.model, self.identity, self.best = config, model, identity, best
        self.resume_optimizer: Optional[dict[str, Any]] = None
        self.history: list[dict[str, Any]] = []
        self.final_only = False
        self.early_stop: Optional[dict[str, Any]] = None
        self._final: Optional[dict[str, Any]] = None  # the resumed run's final scores
        self._start_epoch: Optional[int] = None
        #: the last consistent state: ``epoch``, ``model``, ``optimizer``, ``extra``
        self._good: dict[str, Any] = {"epoch": -1}
        #: whether the file ``_good_path`` holds ``_good``
        self._file_good = False
        self._good_path: Optional[Path] = None
        #: held while the good state or its file changes: a failure reported from another
        #: thread (:class:`fgnn.raylet_watch.RayletWatch`) waits for a write under way
        self._lock = threading.RLock()

    @property
    def good_epoch(self) -> int:
        """The last completed epoch of the good state (-1: none)."""
        return int(self._good["epoch"])

    def _checkpoint_path(self, force: bool) -> Optional[Path]:
        d = self.config.train.checkpoint_dir
        if d is None:
            if not force:
                return None
            d = tempfile.mkdtemp(prefix="fgnn-runtime-")
        return Path(d) / CHECKPOINT_NAME

    def save(self, epoch: int, state: dict[str, Any]) -> Optional[Path]:
        """End of epoch ``epoch`` (trained and validated): take the parameter server's
        ``state`` (model and optimizer) as the last good state and write it, with the
        best-validation weights so far and the job's identity, to ``train.checkpoint_dir``
        (atomic, resumable; :func:`fgnn.load_model` reads it too).

        Raises:
            RuntimeFailure: the weights are not finite (a NaN or inf step); the last good state
                and its file stay.
        """
        bad = [k for k, v in state["model"].items()
               if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            raise self.failure(f"epoch {epoch + 1}: the weights are not finite ({bad[0]})")
        with self._lock:
            self._good = {"epoch": epoch, "model": state["model"],
                          "optimizer": state["optimizer"], "extra": self.extra(epoch)}
            self._file_good = False
            path = self._checkpoint_path(force=False)
            if path is None:
                return None
            self._write_good(path)
            self._file_good, self._good_path = True, path
            return path

    def failure(self, text: str) -> RuntimeFailure:
        """The job's stop: ``text; resume from the checkpoint ...`` with the failure checkpoint
        (:meth:`failure_checkpoint`, written now). Safe from any thread: it waits for a
        checkpoint write under way."""
        with self._lock:
            path = self.failure_checkpoint()
            return RuntimeFailure(f"{text}; {_resume_hint(path, self.good_epoch)}", path)

    def failure_checkpoint(self) -> Path:
        """The checkpoint to resume from after a failure: the last good state (the last
        completed epoch, or the start of the run), never the server's state mid-epoch. The file
        of ``train.checkpoint_dir`` is kept when it already holds that state; without a
        ``checkpoint_dir`` it goes to a new temporary directory."""
        with self._lock:
            if self._file_good and self._good_path is not None:
                return self._good_path
            path = self._checkpoint_path(force=True)
            self._write_good(path)
            self._file_good, self._good_path = True, path
            return path

    def _write_good(self, path: Path) -> Path:
        from fgnn.checkpoint import save_checkpoint

        good = self._good
        model = copy.deepcopy(self.model).cpu()
        model.load_state_dict(good["model"])
        opt = torch.optim.Adam(model.parameters(), lr=self.config.train.lr)
        if good["optimizer"] is not None:
            opt.load_state_dict(good["optimizer"])
        return save_checkpoint(path, model, opt, max(good["epoch"], 0), extra=good["extra"])

    def _keep_start_state(self, epoch: int, optimizer: Optional[dict[str, Any]],
                          from_file: bool) -> None:
        """The state before the first epoch of this run: the failure checkpoint until an epoch
        completes (``epoch`` is the finished one, -1 for a fresh run)."""
        self._good = {"epoch": epoch,
                      "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                      "optimizer": optimizer, "extra": self.extra(epoch)}
        self._file_good = from_file
        self._good_path = self._checkpoint_path(force=False) if from_file else None

    def extra(self, epoch: int) -> dict[str, Any]:
        """What a checkpoint stores beside the weights: the finished epoch, the best validation
        so far (with its weights) and the job's identity."""
        best = self.best
        extra = {"runtime": {"finished_epoch": epoch, "best_val_acc": best["val_acc"],
                             "best_epoch": best["epoch"], "bad_evals": best["bad"],
                             "epochs": list(self.history)},
                 "job": self.identity}
        if best["state"] is not None:
            extra["best_state"] = best["state"]
        return extra

    def load_resume(self) -> int:
        """With ``train.resume``, read and check the checkpoint and restore the model, optimizer
        state and best-validation weights; returns the first epoch to run. Needs no Ray (the
        job calls it before Ray starts); later calls return the first result.

        Raises:
            CheckpointError: one line naming the file: no checkpoint in ``checkpoint_dir``, an
                unreadable, truncated or pickle-carrying file, or a checkpoint of another task,
                link relation, model or dataset (naming both; :func:`check_task`), or of a
                dataset of the same sizes with other contents.
            RunFinished: the checkpoint's run has finished.
        """
        if self._start_epoch is not None:
            return self._start_epoch
        tc = self.config.train
        self._start_epoch = 0
        if not tc.resume:
            self._keep_start_state(-1, None, from_file=False)
            return 0
        path = Path(tc.checkpoint_dir) / CHECKPOINT_NAME
        try:
            finished = self._restore(path)
        except BaseException:
            self._start_epoch = None
            raise
        self._keep_start_state(finished, self.resume_optimizer, from_file=True)
        self._start_epoch = finished + 1
        patience = tc.patience
        early = patience is not None and self.best["bad"] >= patience
        if self._start_epoch >= tc.epochs or early:
            self._finished(path, finished, early and self._start_epoch < tc.epochs)
        return self._start_epoch

    def _finished(self, path: Path, finished: int, early: bool) -> None:
        """A resumed run that trained its epochs (``early``: stopped by patience): its final
        evaluation and outputs still to do when it recorded no final scores (set
        :attr:`final_only`, nothing to train); else :class:`RunFinished`. A checkpoint without
        epoch records (written before they were kept) cannot rebuild the report: finished."""
        tc, best = self.config.train, self.best
        if self._final is None and self.history:
            self.final_only, self._start_epoch = True, tc.epochs
            if early:
                self.early_stop = {"epoch": finished, "patience": tc.patience,
                                   "best_val_acc": best["val_acc"], "best_epoch": best["epoch"]}
            return
        raise RunFinished(path, finished, tc.epochs,
                          None if best["epoch"] is None else float(best["val_acc"]),
                          best["epoch"], early)

    def mark_complete(self, final: Mapping[str, Any]) -> Optional[Path]:
        """The job has its final scores ``final`` and has written its outputs: record them in
        the checkpoint of ``train.checkpoint_dir`` (rewritten atomically), so a resume of it is
        :class:`RunFinished`; until then a resume goes on to the final evaluation and the
        outputs. Returns the checkpoint's path (None without a checkpoint directory or
        epoch)."""
        with self._lock:
            if self.config.train.checkpoint_dir is None or self.good_epoch < 0:
                return None
            extra = copy.deepcopy(self._good["extra"])
            extra["runtime"]["final"] = {k: float(v) for k, v in final.items()}
            self._good = {**self._good, "extra": extra}
            path = self._checkpoint_path(force=False)
            self._write_good(path)
            self._file_good, self._good_path = True, path
            return path

    def _restore(self, path: Path) -> int:
        """Read and check the checkpoint ``path`` into the model, the optimizer state and the
        best-validation record; returns its finished epoch."""
        from fgnn.checkpoint import CheckpointError, load_checkpoint, read_checkpoint
        from fgnn.model_file import check_content, check_identity

        tc = self.config.train
        if not path.is_file():
            raise CheckpointError(path, f"no checkpoint {CHECKPOINT_NAME} to resume from in "
                                        f"{tc.checkpoint_dir}")
        payload = read_checkpoint(path)
        check_task(path, payload["extra"].get("job", {}), self.identity)
        check_identity(path, "checkpoint", payload["extra"].get("job", {}), self.identity)
        check_content(path, "checkpoint", payload["extra"].get("job", {}), self.identity)
        opt = torch.optim.Adam(self.model.parameters(), lr=tc.lr)
        ckpt = load_checkpoint(path, self.model, opt, restore_rng=False, payload=payload)
        self.resume_optimizer = opt.state_dict()
        run = ckpt.extra.get("runtime", {})
        self.best.update(val_acc=float(run.get("best_val_acc", -1.0)),
                         epoch=run.get("best_epoch"), bad=int(run.get("bad_evals", 0)),
                         state=ckpt.extra.get("best_state"))
        self.history = [dict(e) for e in run.get("epochs", []) if isinstance(e, Mapping)]
        self._final = run.get("final")
        finished = run.get("finished_epoch", ckpt.epoch)
        if isinstance(finished, bool) or not isinstance(finished, int) or finished < -1:
            raise CheckpointError(path, f"checkpoint {path} records finished_epoch="
                                        f"{finished!r}, not an epoch (an integer >= -1)")
        return finished


def check_task(path: Path, saved: Mapping[str, Any], now: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the field and both values, a checkpoint trained for another
    task or, for a typed link job, another relation (:meth:`Task.identity <fgnn.tasks.base.Task.identity>` forms).

    Checkpoints written before these fields were recorded: one without ``task`` (written before
    link prediction existed: node classification) is not compared, the model and dataset checks
    still apply. One without ``link`` cannot say which relation it was trained for, so a typed
    link job refuses it (another relation of the same size would load silently); a job that is
    not a typed link job has no relation to compare and accepts it.

    Raises:
        CheckpointError: naming the file, the field (``task`` or ``link.edge_type``) and both
            values.
    """
    from fgnn.checkpoint import CheckpointError

    task = saved.get("task")
    if task is not None and task != now.get("task"):
        raise CheckpointError(path, f"checkpoint {path} was trained for task {task}, but this "
                                    f"job has task {now.get('task')} (--task); resume a "
                                    f"checkpoint of this task, or train without --resume")
    want = (now.get("link") or {}).get("edge_type")
    if "link" not in saved:
        if want is not None:
            raise CheckpointError(path, f"checkpoint {path} records no link.edge_type (written "
                                        f"by an fgnn before checkpoints recorded the relation), "
                                        f"so nothing tells which relation it was trained for; "
                                        f"this job has link.edge_type {want}; train without "
                                        f"--resume")
        return
    had = (saved.get("link") or {}).get("edge_type")
    if had != want:
        raise CheckpointError(path, f"checkpoint {path} was trained for link.edge_type "
                                    f"{had or 'none (not a typed link job)'}, but this job has "
                                    f"link.edge_type {want or 'none (not a typed link job)'} "
                                    f"(--link-edge-type); resume with the relation it was "
                                    f"trained for, or train without --resume")


def _resume_hint(path: Optional[Path], finished_epoch: int) -> str:
    """``resume from the checkpoint PATH (epoch N finished) with ...`` for failure lines; before
    any epoch finished, a resume would start where a new run starts, so the hint says to run
    the job again."""
    if path is None:
        return "no checkpoint was written"
    if finished_epoch < 0:
        return (f"no epoch finished, so a resume would start where a new run starts: run the "
                f"job again (its start state is in {path})")
    return (f"resume from the checkpoint {path} (epoch {finished_epoch + 1} finished) with "
            f"--resume --checkpoint-dir {path.parent} (train.resume=True, "
            f"train.checkpoint_dir)")
