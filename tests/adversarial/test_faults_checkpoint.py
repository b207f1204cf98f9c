"""A failure never replaces a good checkpoint with an inconsistent one (issue 19).

Hostile trial: a Sampler killed twice during an evaluation pass stopped the job with "epoch -13"
and a forced checkpoint of the parameter server's state labelled ``finished_epoch=-14``, which
replaced the good one; ``--resume`` then trained 43 epochs. These tests drive the runtime's
checkpoint policy in-process (plain classes: a fake parameter server and queue, ``ray.get`` the
identity), with no Ray.
"""

from __future__ import annotations

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.checkpoint import CheckpointError, read_checkpoint, save_checkpoint  # noqa: E402
from fgnn.config import JobConfig, ModelConfig, SamplerConfig, TrainConfig  # noqa: E402
from fgnn.data.synthetic import rmat_dataset  # noqa: E402
from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime, RuntimeFailure  # noqa: E402

EPOCHS = 4


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class FakeServer:
    """The parameter server's ``state``: whatever weights it holds now."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=0.01)
        self.state = _Remote(lambda: {"model": {k: v.detach().clone() for k, v in
                                                self.model.state_dict().items()},
                                      "optimizer": self.opt.state_dict(), "version": 0})

    def train_step(self, value: float) -> None:
        """Move every weight (a step mid-epoch)."""
        with torch.no_grad():
            for p in self.model.parameters():
                p.fill_(value)


class FakeQueue:
    def __init__(self) -> None:
        self.abort = _Remote(lambda reason: None)


@pytest.fixture(scope="module")
def dataset():
    return rmat_dataset(scale=7, edge_factor=4, feat_dim=8, num_classes=3, train_frac=0.4,
                        val_frac=0.2, test_frac=0.2, seed=0)


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """The fakes answer at once: ``ray.get`` returns what it is given."""
    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: refs)


def _runtime(dataset, checkpoint_dir, resume=False) -> Runtime:
    cfg = JobConfig(model=ModelConfig("sage", hidden=8), sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=EPOCHS, batch_size=16, checkpoint_dir=checkpoint_dir,
                                      resume=resume))
    rt = Runtime(cfg, dataset)
    rt.load_resume()
    import copy

    rt.ps, rt.queue = FakeServer(copy.deepcopy(rt.model)), FakeQueue()
    return rt


def _weights(path) -> torch.Tensor:
    payload = read_checkpoint(path)
    return torch.cat([v.flatten().float() for v in payload["model"].values()])


def _fail_everything_died(rt: Runtime, epoch: int) -> RuntimeFailure:
    """What the epoch loop does when no Sampler is left (the Sampler killed twice)."""
    with pytest.raises(RuntimeFailure) as info:
        rt.coordinator._check_alive(epoch, [], [], {})
    return info.value


@pytest.mark.parametrize("where", ["evaluation", "training"])
def test_failure_keeps_the_last_completed_epoch(dataset, tmp_path, where):
    rt = _runtime(dataset, str(tmp_path))
    rt.ps.train_step(0.5)  # epoch 0 trained ...
    rt._save_checkpoint(0)  # ... and checkpointed: the good state
    path = tmp_path / CHECKPOINT_NAME
    good = _weights(path)
    rt.ps.train_step(0.9)  # epoch 1 half-trained: the server's weights move on
    # an evaluation pass has an id of its own (negative); a training epoch its number
    err = _fail_everything_died(rt, -3 if where == "evaluation" else 1)
    msg = str(err)
    assert "epoch -" not in msg, msg
    assert ("evaluation pass" if where == "evaluation" else "epoch 2") in msg
    assert err.checkpoint == path and str(path) in msg
    payload = read_checkpoint(path)
    assert payload["extra"]["runtime"]["finished_epoch"] == 0
    assert torch.equal(_weights(path), good), "the failure checkpoint holds mid-epoch weights"
    # resuming goes on with epoch 1: the run trains EPOCHS epochs in all, not 43
    assert _runtime(dataset, str(tmp_path), resume=True).load_resume() == 1


def test_failure_without_checkpoint_dir_writes_the_good_state(dataset):
    rt = _runtime(dataset, None)
    start = torch.cat([v.flatten().float() for v in rt.model.state_dict().values()])
    rt.ps.train_step(0.7)  # epoch 0 half-trained when everything dies
    err = _fail_everything_died(rt, 0)
    payload = read_checkpoint(err.checkpoint)
    assert payload["extra"]["runtime"]["finished_epoch"] == -1  # no epoch finished
    # a resume would start where a new run does: the line says to run the job again
    assert "no epoch finished" in str(err) and "run the job again" in str(err), str(err)
    assert "--resume" not in str(err), str(err)
    assert torch.equal(_weights(err.checkpoint), start)
    rt.ps.train_step(0.2)
    rt._save_checkpoint(0)  # no checkpoint_dir: kept in memory only
    rt.ps.train_step(0.3)
    err = _fail_everything_died(rt, -2)
    assert read_checkpoint(err.checkpoint)["extra"]["runtime"]["finished_epoch"] == 0
    assert torch.all(_weights(err.checkpoint) == 0.2)


def test_non_finite_weights_are_never_checkpointed(dataset, tmp_path):
    rt = _runtime(dataset, str(tmp_path))
    rt.ps.train_step(0.5)
    rt._save_checkpoint(0)
    rt.ps.train_step(float("nan"))  # a NaN step got through
    with pytest.raises(RuntimeFailure, match="not finite") as info:
        rt._save_checkpoint(1)
    assert info.value.checkpoint == tmp_path / CHECKPOINT_NAME
    assert read_checkpoint(info.value.checkpoint)["extra"]["runtime"]["finished_epoch"] == 0
    assert torch.all(_weights(info.value.checkpoint) == 0.5)


def test_resume_rejects_a_negative_finished_epoch(dataset, tmp_path):
    # the file the old runtime wrote after the evaluation-pass failure
    rt = _runtime(dataset, str(tmp_path))
    save_checkpoint(tmp_path / CHECKPOINT_NAME, rt.model, torch.optim.Adam(rt.model.parameters()),
                    0, extra={**rt.checkpointer.extra(0),
                              "runtime": {"finished_epoch": -14, "best_val_acc": -1.0,
                                          "best_epoch": None, "bad_evals": 0}})
    with pytest.raises(CheckpointError, match="finished_epoch=-14"):
        _runtime(dataset, str(tmp_path), resume=True)


def test_a_non_finite_loss_stops_naming_epoch_and_task(dataset, tmp_path):
    """A Trainer's ``NonFiniteLoss`` (it did not push the gradient) stops the job in one line
    naming the epoch and the task; the checkpoint stays the last completed epoch."""
    from fgnn.executors.common import NonFiniteLoss
    from fgnn.runtime.epoch import _Exec

    rt = _runtime(dataset, str(tmp_path))
    rt.ps.train_step(0.5)
    rt._save_checkpoint(0)
    err = ray.exceptions.RayTaskError("run_epoch", "Traceback ...",
                                      NonFiniteLoss(1, 7, float("nan")))
    trainer = _Exec("fgnn-trainer-1", "trainer", 1, handle=None)
    with pytest.raises(RuntimeFailure) as info:
        rt.workers.failed(trainer, err)
    msg = str(info.value)
    assert msg.startswith("epoch 2: the loss of task 7 is not finite (loss nan); its gradient "
                          "was not applied (Trainer fgnn-trainer-1)"), msg
    assert "\n" not in msg and str(tmp_path) in msg
    assert read_checkpoint(info.value.checkpoint)["extra"]["runtime"]["finished_epoch"] == 0
    assert torch.all(_weights(info.value.checkpoint) == 0.5)
