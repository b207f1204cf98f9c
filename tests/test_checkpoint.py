"""Atomic checkpoints, model validation on load, and bitwise-identical resume of fit()."""

from __future__ import annotations

import dataclasses
import errno
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import fgnn.atomic
from fgnn.atomic import WriteError
from fgnn.checkpoint import (CheckpointError, load_checkpoint, model_signature, read_torch_file,
                             save_checkpoint)
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


# ------------------------------------------------------------------ unusable files: one line
class _Payload:
    """Pickles to a call of ``open(path, "w")``: loading it unchecked would create ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_truncated_checkpoint_is_one_line_naming_the_file(tmp_path, keep):
    model, opt = _model_and_opt()
    path = save_checkpoint(tmp_path / "ck.pt", model, opt, epoch=1)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, model)
    line = _one_line(info.value)
    assert line.startswith(f"checkpoint {path} is truncated")


def test_pickle_payload_is_refused_in_one_line_without_running(tmp_path):
    victim = tmp_path / "written-by-payload"
    path = tmp_path / "evil.pt"
    torch.save({"format": "fgnn-checkpoint", "version": 1, "x": _Payload(victim)}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, _model_and_opt()[0])
    line = _one_line(info.value)
    assert line == (f"checkpoint {path} holds pickled Python objects that fgnn refuses to load "
                    f"(weights_only=True): it references io.open")
    assert not victim.exists()  # nothing in the file ran


@pytest.mark.parametrize("content, why", [
    (b"", "is empty"), (b"not a torch file at all", r"not a torch file \(no zip header\)")])
def test_empty_and_foreign_files(tmp_path, content, why):
    path = tmp_path / "ck.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=why) as info:
        read_torch_file(path)
    assert str(path) in _one_line(info.value)


# ------------------------------------------------------------------ a full disk
class _FullDisk:
    """A file object that writes half of what it is given, then fails with ENOSPC."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def full_disk_under(monkeypatch, directory) -> None:
    """Every atomic write into ``directory`` runs out of space half-way."""
    real = os.fdopen
    directory = os.path.realpath(directory)

    def fdopen(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        where = os.path.dirname(os.readlink(f"/proc/self/fd/{fd}"))
        return _FullDisk(f) if where == directory else f

    monkeypatch.setattr(fgnn.atomic.os, "fdopen", fdopen)


def test_full_disk_under_the_checkpoint_directory(tmp_path, monkeypatch):
    model, opt = _model_and_opt()
    path = save_checkpoint(tmp_path / "ck.pt", model, opt, epoch=1)
    before = path.read_bytes()
    full_disk_under(monkeypatch, tmp_path)
    with pytest.raises(WriteError) as info:
        save_checkpoint(path, model, opt, epoch=2)
    assert _one_line(info.value) == f"cannot write {path}: No space left on device (errno 28)"
    assert os.listdir(tmp_path) == ["ck.pt"] and path.read_bytes() == before  # no temp, intact


def test_full_disk_under_the_report_directory(tmp_path, monkeypatch):
    from fgnn.report import write_json_atomic

    full_disk_under(monkeypatch, tmp_path)
    with pytest.raises(WriteError, match=f"cannot write {tmp_path / 'r.json'}: No space left"):
        write_json_atomic({"epochs": list(range(10000))}, tmp_path / "r.json")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ launch.py --resume
TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=1"


def _no_ray(monkeypatch) -> None:
    """Resume errors must come before Ray: starting it fails the test."""
    from fgnn.job import Job

    def started(self):
        raise AssertionError("Ray was started before the checkpoint was checked")

    monkeypatch.setattr(Job, "_init_ray", started)


def _launch_fails(argv, capsys) -> str:
    from fgnn.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv + ["--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("launch.py: error: argument --checkpoint-dir: ")
    return err[0]


def _runtime_checkpoint(directory, model: str = "sage", dataset: str = TINY) -> str:
    """The checkpoint a Runtime writes after epoch 0, made without Ray."""
    from fgnn.cli import build_parser, config_from_args
    from fgnn.data import load_dataset
    from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime

    cfg = config_from_args(build_parser().parse_args(["--model", model, "--dataset", dataset]))
    rt = Runtime(cfg, load_dataset(dataset))
    opt = torch.optim.Adam(rt.model.parameters())
    save_checkpoint(Path(directory) / CHECKPOINT_NAME, rt.model, opt, 0,
                    extra=rt.checkpointer.extra(0))
    return str(Path(directory) / CHECKPOINT_NAME)


def test_resume_from_an_empty_directory_fails_before_ray(tmp_path, monkeypatch, capsys):
    _no_ray(monkeypatch)
    line = _launch_fails(["--dataset", TINY, "--resume", "--checkpoint-dir", str(tmp_path)],
                         capsys)
    assert "holds no checkpoint runtime.pt to resume from" in line and str(tmp_path) in line


def test_resume_with_another_model_names_both(tmp_path, monkeypatch, capsys):
    path = _runtime_checkpoint(tmp_path, model="sage")
    _no_ray(monkeypatch)
    line = _launch_fails(["--dataset", TINY, "--model", "gcn", "--resume",
                          "--checkpoint-dir", str(tmp_path)], capsys)
    assert (f"checkpoint {path} holds a sage model (2 layers, hidden 256) for rmat-8 (256 nodes, "
            f"1024 edges, 16 features, 4 classes); this job is a gcn model (3 layers, hidden "
            f"256) on rmat-8 (256 nodes, 1024 edges, 16 features, 4 classes)") in line


def test_resume_on_another_graph_names_both(tmp_path, monkeypatch, capsys):
    _runtime_checkpoint(tmp_path, model="sage")
    _no_ray(monkeypatch)
    other = TINY.replace("feat_dim=16", "feat_dim=8")
    line = _launch_fails(["--dataset", other, "--model", "sage", "--resume",
                          "--checkpoint-dir", str(tmp_path)], capsys)
    assert "for rmat-8 (256 nodes, 1024 edges, 16 features, 4 classes)" in line
    assert "on rmat-8 (256 nodes, 1024 edges, 8 features, 4 classes)" in line


@pytest.mark.parametrize("damage", ["truncate", "payload"])
def test_resume_from_a_damaged_checkpoint_fails_before_ray(tmp_path, monkeypatch, capsys,
                                                           damage):
    path = Path(_runtime_checkpoint(tmp_path, model="sage"))
    victim = tmp_path / "written-by-payload"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        torch.save({"format": "fgnn-checkpoint", "version": 1, "x": _Payload(victim)}, path)
    _no_ray(monkeypatch)
    line = _launch_fails(["--dataset", TINY, "--model", "sage", "--resume",
                          "--checkpoint-dir", str(tmp_path)], capsys)
    assert str(path) in line
    assert ("is truncated" if damage == "truncate" else "weights_only=True") in line
    assert not victim.exists()


def test_resume_with_the_same_job_passes_the_checks(tmp_path, monkeypatch, capsys):
    """The same model on the same graph gets past every check (and only then starts Ray)."""
    from fgnn.cli import main

    _runtime_checkpoint(tmp_path, model="sage")
    _no_ray(monkeypatch)
    # the CLI turns the stub's AssertionError into its one error line
    assert main(["--dataset", TINY, "--model", "sage", "--resume", "--checkpoint-dir",
                 str(tmp_path), "--no-progress", "--ray"]) == 1
    assert "Ray was started" in capsys.readouterr().err
