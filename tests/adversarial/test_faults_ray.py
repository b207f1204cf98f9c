"""Executor and service faults on a real (shared) Ray cluster (issue 19).

* A Trainer stopped (``SIGSTOP``) between epochs: the other Trainer finishes the epoch, and the
  driver used to wait for the stopped one's return for ever (no message for 290 s with
  ``--stall-timeout 40``). Now every wait has the stall deadline: the job stops with a line
  naming the executor, and the checkpoint is the last completed epoch.
* The parameter server or the global queue killed mid-epoch: a Ray traceback (86 and 42 lines
  on the CLI) before; now one ``RuntimeFailure`` naming it, with the last completed epoch's
  checkpoint, which resumes.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from conftest import descendants  # noqa: E402
from fgnn.checkpoint import read_checkpoint  # noqa: E402
from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,  # noqa: E402
                         SamplerConfig, TrainConfig)
from fgnn.data.synthetic import rmat_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime, RuntimeFailure  # noqa: E402

STALL_S = 8.0
#: the gradient exchange (``FGNN_TEST_EXCHANGE=collective`` runs these faults on the collective)
EXCHANGE = os.environ.get("FGNN_TEST_EXCHANGE", "server")


@pytest.fixture(scope="module")
def dataset():
    return rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.3125,
                        val_frac=0.1, test_frac=0.1, seed=0)


def _job(checkpoint_dir: str) -> JobConfig:
    # one Sampler and two Trainers, no standby
    return JobConfig(model=ModelConfig("sage", hidden=16, dropout=0.0),
                     sampler=SamplerConfig(fanouts=(4, 4)),
                     cache=CacheConfig(policy="degree", cache_ratio=0.25),
                     train=TrainConfig(epochs=2, batch_size=16, lr=0.01, seed=1,
                                       checkpoint_dir=checkpoint_dir),
                     runtime=RuntimeConfig(devices=3, samplers=1, switching=False, queue_size=4,
                                           stall_timeout_s=STALL_S, exchange=EXCHANGE))


def _stop_all(cls: str, limit: int | None = None) -> list[int]:
    """SIGSTOP the processes of the executor class (Ray titles them ``ray::Class...``) among this
    test's Ray's processes (started by this process: the shared ``ray_cluster``), at most
    ``limit`` of them."""
    pids = []
    for pid in descendants(os.getpid()):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith(f"ray::{cls}") and (limit is None or len(pids) < limit):
            os.kill(pid, signal.SIGSTOP)
            pids.append(pid)
    assert pids, f"no {cls} process of this test's Ray found"
    return pids


def _finished_epoch(path) -> int:
    return read_checkpoint(path)["extra"]["runtime"]["finished_epoch"]


def _fails_then_resumes(rt: Runtime, stopped: list[tuple[int, float]]) -> Any:
    """Run ``rt`` expecting its :class:`RuntimeFailure`; the processes in ``stopped`` (pid,
    time) are continued afterwards, whatever happened."""
    try:
        with pytest.raises(RuntimeFailure) as info:
            rt.run()
    finally:
        for pid, _ in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    return info


@pytest.mark.timeout(300)  # the runtime before the fix waits here for ever
def test_a_stopped_trainer_is_caught_within_the_stall_timeout(ray_cluster, dataset, tmp_path):
    stopped: list[tuple[int, float]] = []

    def on_epoch(stats):
        if stats.epoch == 0:  # the Trainers are idle between epochs
            stopped.append((_stop_all("TrainerExecutor", limit=1)[0], time.monotonic()))

    rt = Runtime(_job(str(tmp_path)), dataset, on_epoch=on_epoch, evaluate=False)
    info = _fails_then_resumes(rt, stopped)
    waited = time.monotonic() - stopped[0][1]
    msg = str(info.value)
    print(f"stopped Trainer caught after {waited:.1f}s (stall timeout {STALL_S:g}s): {msg}")
    assert "epoch 2" in msg and any(m in msg for m in ("did not return", "no task finished",
                                                      "did not answer"))
    assert info.value.checkpoint == tmp_path / "runtime.pt" and str(tmp_path) in msg
    assert _finished_epoch(info.value.checkpoint) == 0
    assert waited < STALL_S + 120  # generous: the machine is loaded; it was never before


@pytest.mark.timeout(300)
def test_a_trainer_stopped_in_an_evaluation_pass_is_caught_within_the_stall_timeout(
        ray_cluster, dataset, tmp_path):
    """The same stall guard holds in the validation pass after epoch 1 (evaluation tasks go
    through the same queue and Trainers): every Trainer is stopped during it."""
    stopped: list[tuple[int, float]] = []

    def on_eval_batch(splits, done, total):
        if not stopped and done >= 1:  # the first validation pass is under way
            now = time.monotonic()
            stopped.extend((pid, now) for pid in _stop_all("TrainerExecutor"))

    cfg = _job(str(tmp_path))
    cfg = replace(cfg, train=replace(cfg.train, eval_batch_size=4))  # 13 validation chunks
    rt = Runtime(cfg, dataset, on_eval_batch=on_eval_batch, evaluate=True)
    info = _fails_then_resumes(rt, stopped)
    assert stopped, "no evaluation chunk finished"
    waited = time.monotonic() - stopped[0][1]
    msg = str(info.value)
    print(f"Trainer stopped in evaluation caught after {waited:.1f}s: {msg}")
    assert "evaluation pass" in msg, msg
    assert any(m in msg for m in ("did not return", "no task finished", "did not answer")), msg
    assert info.value.checkpoint is not None and str(tmp_path) in msg
    assert waited < STALL_S + 120


@pytest.mark.parametrize("service,name", [("fgnn-ps", "the parameter server"),
                                          ("fgnn-queue", "the global queue")])
def test_a_killed_service_is_one_line_with_the_last_good_checkpoint(ray_cluster, dataset,
                                                                   tmp_path, service, name):
    killed = []

    def on_batch(epoch, done, total, loss):
        if epoch == 1 and done == 2 and not killed:
            ray.kill(ray.get_actor(service), no_restart=True)
            killed.append(done)

    rt = Runtime(_job(str(tmp_path)), dataset, on_batch=on_batch, evaluate=False)
    with pytest.raises(RuntimeFailure) as info:
        rt.run()
    msg = str(info.value)
    print(msg)
    assert killed and msg.startswith(f"{name} (") and "died" in msg and "\n" not in msg
    assert info.value.checkpoint == tmp_path / "runtime.pt" and str(tmp_path) in msg
    assert _finished_epoch(info.value.checkpoint) == 0  # not the half-trained epoch 1
    if service != "fgnn-ps":
        return
    # and it resumes: epoch 1 only
    cfg = _job(str(tmp_path))
    cfg.train.resume = True
    result = Runtime(cfg, dataset, evaluate=False).run()
    assert [e.epoch for e in result.epochs] == [1]
