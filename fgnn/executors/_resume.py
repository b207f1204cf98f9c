"""Checkpoints of the runtime (internal): writing them after each epoch, reading one to resume.

:class:`Checkpointing` is mixed into :class:`~fgnn.executors.runtime.Runtime`. A checkpoint holds
the parameter server's model and optimizer, the best-validation weights so far and the job's
identity (:mod:`fgnn.model_file`), written atomically; resuming checks the identity before Ray
starts (:meth:`Checkpointing.load_resume`).
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch

__all__ = ["Checkpointing", "CHECKPOINT_NAME"]

#: File the runtime's resumable checkpoint is written to under ``TrainConfig.checkpoint_dir``.
CHECKPOINT_NAME = "runtime.pt"


class Checkpointing:
    """The runtime's checkpoints; mixed into the runtime."""

    def _checkpoint_path(self, force: bool) -> Optional[Path]:
        d = self.config.train.checkpoint_dir
        if d is None:
            if not force:
                return None
            d = tempfile.mkdtemp(prefix="fgnn-runtime-")
        return Path(d) / CHECKPOINT_NAME

    def _save_checkpoint(self, epoch: int, force: bool = False) -> Optional[Path]:
        """Write model + optimizer from the parameter server, the best-validation weights so far
        and the job's identity (atomic, resumable; :func:`fgnn.load_model` reads it too)."""
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
                               extra=self._checkpoint_extra(epoch))

    def _checkpoint_extra(self, epoch: int) -> dict[str, Any]:
        """What a checkpoint stores beside the weights: the finished epoch, the best validation
        so far (with its weights) and the job's identity."""
        best = self.best
        extra = {"runtime": {"finished_epoch": epoch, "best_val_acc": best["val_acc"],
                             "best_epoch": best["epoch"], "bad_evals": best["bad"]},
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
                unreadable, truncated or pickle-carrying file, or a checkpoint of another model
                or dataset (naming both).
        """
        if self._start_epoch is not None:
            return self._start_epoch
        tc = self.config.train
        self._start_epoch = 0
        if not tc.resume:
            return 0
        from fgnn.checkpoint import CheckpointError, load_checkpoint, read_checkpoint
        from fgnn.model_file import check_identity

        path = Path(tc.checkpoint_dir) / CHECKPOINT_NAME
        if not path.is_file():
            self._start_epoch = None
            raise CheckpointError(path, f"no checkpoint {CHECKPOINT_NAME} to resume from in "
                                        f"{tc.checkpoint_dir}")
        try:
            payload = read_checkpoint(path)
            check_identity(path, "checkpoint", payload["extra"].get("job", {}), self.identity)
            opt = torch.optim.Adam(self.model.parameters(), lr=tc.lr)
            ckpt = load_checkpoint(path, self.model, opt, restore_rng=False, payload=payload)
        except BaseException:
            self._start_epoch = None
            raise
        self._resume_optimizer = opt.state_dict()
        run = ckpt.extra.get("runtime", {})
        self.best.update(val_acc=float(run.get("best_val_acc", -1.0)),
                         epoch=run.get("best_epoch"), bad=int(run.get("bad_evals", 0)),
                         state=ckpt.extra.get("best_state"))
        self._start_epoch = int(run.get("finished_epoch", ckpt.epoch)) + 1
        return self._start_epoch
