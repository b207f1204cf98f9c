"""Atomic checkpoints, model validation on load, and bitwise-identical resume of fit()."""

from __future__ import annotations

import dataclasses
import os
import random

import numpy as np
import pytest
import torch

from fgnn.checkpoint import load_checkpoint, model_signature, save_checkpoint
from fgnn.config import TrainConfig
from fgnn.models import GCN, GraphSAGE
from fgnn.sampling import KHop
from fgnn.training import CHECKPOINT_NAME, fit

from test_training import single_thread, toy_dataset  # noqa: F401 (autouse fixture)


def _model_and_opt(seed: int = 0):
    torch.manual_seed(seed)
    model = GCN(6, 3, num_layers=2, hidden=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(_blocks(), torch.randn(4, 6)).sum().backward()
    opt.step()  # non-trivial optimizer state
    return model, opt


def _blocks():
    from fgnn.sampling import Block

    return [Block(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 0]), 4, 2),
            Block(torch.tensor([1]), torch.tensor([0]), 2, 1)]


def _draws(gen: torch.Generator):
    return (torch.rand(3), np.random.rand(3), random.random(), torch.rand(3, generator=gen))


def test_roundtrip_restores_weights_optimizer_and_every_rng(tmp_path):
    model, opt = _model_and_opt()
    gen = torch.Generator().manual_seed(7)
    torch.rand(5, generator=gen)
    path = save_checkpoint(tmp_path / "ck.pt", model, opt, epoch=4, generator=gen,
                           extra={"note": "hi", "vals": [1.0, None]})
    expected = _draws(gen)

    other, other_opt = _model_and_opt(seed=1)
    gen2 = torch.Generator().manual_seed(99)
    ck = load_checkpoint(path, other, other_opt, generator=gen2)
    got = _draws(gen2)
    assert ck.epoch == 4 and ck.extra == {"note": "hi", "vals": [1.0, None]}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  other.state_dict().values()))
    assert other_opt.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert torch.equal(other_opt.state_dict()["state"][0]["exp_avg"],
                       opt.state_dict()["state"][0]["exp_avg"])
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1])
    assert expected[2] == got[2] and torch.equal(expected[3], got[3])


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    model, opt = _model_and_opt()
    path = tmp_path / "sub" / "ck.pt"
    save_checkpoint(path, model, opt, epoch=1)
    save_checkpoint(path, model, opt, epoch=2)  # overwrite in place
    assert os.listdir(path.parent) == ["ck.pt"]
    with pytest.raises(Exception):  # an unpicklable extra fails mid-write ...
        save_checkpoint(path, model, opt, epoch=3, extra={"bad": lambda: None})
    assert os.listdir(path.parent) == ["ck.pt"]  # ... no temp file is left behind
    assert load_checkpoint(path, model).epoch == 2  # and the previous checkpoint is intact


def test_checkpoint_from_another_model_is_rejected(tmp_path):
    model, opt = _model_and_opt()
    path = save_checkpoint(tmp_path / "ck.pt", model, opt, epoch=0)
    with pytest.raises(ValueError, match=r"saved from model fgnn\.models\.gcn\.GCN, but the "
                                         r"model given is fgnn\.models\.sage\.GraphSAGE"):
        load_checkpoint(path, GraphSAGE(6, 3, num_layers=2, hidden=8))
    with pytest.raises(ValueError, match=r"'hidden': 8.*'hidden': 16"):
        load_checkpoint(path, GCN(6, 3, num_layers=2, hidden=16))


def test_parameter_shape_mismatch_names_the_parameter(tmp_path):
    class Tiny(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = torch.nn.Linear(n, 2)

    path = save_checkpoint(tmp_path / "ck.pt", Tiny(3))
    with pytest.raises(ValueError, match=r"lin\.weight of shape \(2, 3\), the model given has "
                                         r"shape \(2, 4\)"):
        load_checkpoint(path, Tiny(4))
    assert model_signature(Tiny(3))["shapes"]["lin.weight"] == [2, 3]


def test_bad_files_and_arguments(tmp_path):
    model, opt = _model_and_opt()
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not an fgnn checkpoint"):
        load_checkpoint(tmp_path / "other.pt", model)
    path = save_checkpoint(tmp_path / "ck.pt", model)  # no optimizer stored
    with pytest.raises(ValueError, match="holds no optimizer state"):
        load_checkpoint(path, model, opt)
    with pytest.raises(ValueError, match="no state for generator 'sampler'"):
        load_checkpoint(path, model, generator=torch.Generator())
    with pytest.raises(ValueError, match="epoch=-1"):
        save_checkpoint(path, model, epoch=-1)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt", model)


# ------------------------------------------------------------------ resume through fit()
class Interrupted(Exception):
    pass


def _fit(ds, seed_init, cfg, **kw):
    torch.manual_seed(seed_init)
    model = GCN(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16, dropout=0.5)
    hist = fit(ds, model, KHop([3, 2]), cfg, restore_best=False, **kw)
    return model, hist


def test_resumed_training_is_bitwise_identical_to_an_uninterrupted_run(tmp_path):
    ds = toy_dataset()
    cfg = TrainConfig(epochs=6, batch_size=10, lr=0.02, weight_decay=5e-4, seed=3)
    ref, ref_hist = _fit(ds, 0, cfg)

    def stop_after_epoch_2(rec):
        if rec.epoch == 2:
            raise Interrupted

    ck_cfg = dataclasses.replace(cfg, checkpoint_dir=str(tmp_path))
    with pytest.raises(Interrupted):
        _fit(ds, 0, ck_cfg, on_epoch_end=stop_after_epoch_2)
    assert (tmp_path / CHECKPOINT_NAME).exists()

    torch.rand(100)  # disturb the global RNG; resume must restore it
    resumed, hist = _fit(ds, 123, dataclasses.replace(ck_cfg, resume=True))  # other init
    assert hist.resumed_from == 2
    assert [r.epoch for r in hist.epochs] == list(range(6))
    assert [r.loss for r in hist.epochs] == [r.loss for r in ref_hist.epochs]
    assert [r.val_acc for r in hist.epochs] == [r.val_acc for r in ref_hist.epochs]
    ref_state, state = ref.state_dict(), resumed.state_dict()
    assert all(torch.equal(ref_state[k], state[k]) for k in ref_state)
    assert hist.test_acc == ref_hist.test_acc


def test_resume_from_another_models_checkpoint_fails_clearly(tmp_path):
    ds = toy_dataset()
    cfg = TrainConfig(epochs=1, batch_size=30, seed=0, checkpoint_dir=str(tmp_path))
    _fit(ds, 0, cfg)
    model = GraphSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16)
    with pytest.raises(ValueError, match="saved from model fgnn.models.gcn.GCN"):
        fit(ds, model, KHop([3, 2]), dataclasses.replace(cfg, resume=True))
