"""Defaults that use the devices (issue 11): every Trainer gets work, and a batch that holds the
whole training split is pointed out in one line."""

from __future__ import annotations

from fgnn.config import JobConfig
from fgnn.data import load_dataset
from fgnn.executors.scheduler import epoch_batches, step_tasks
from fgnn.job import batch_warning


def test_default_job_on_8_devices_has_a_task_for_every_trainer():
    cfg = JobConfig()
    ds = load_dataset(cfg.dataset)
    r = step_tasks("factored", 8)
    tasks = epoch_batches(ds.train_idx, cfg.train.batch_size, cfg.train.seed, 0, r)
    steps = epoch_batches(ds.train_idx, cfg.train.batch_size, cfg.train.seed, 0)
    assert len(tasks) >= 8 and len(tasks) == r * len(steps)
    assert step_tasks("single", 8) == 1 and step_tasks("time-sharing", 3) == 3


def test_a_batch_holding_every_training_vertex_is_warned_about():
    cfg = JobConfig()
    n = int(load_dataset(cfg.dataset).train_idx.numel())
    msg = batch_warning(cfg.train.batch_size, n)
    assert msg is not None and str(n) in msg and "one optimizer step per epoch" in msg
    assert "\n" not in msg
    assert batch_warning(256, n) is None
