"""Model files and checkpoints carry a checksum of their payload (issue 19): bytes overwritten in
the middle are refused with one line (fgnn.load_model, --resume), and so is a file without one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fgnn
from fgnn.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from fgnn.cli import main
from fgnn.config import JobConfig, ModelConfig, SamplerConfig
from fgnn.data import load_dataset
from fgnn.model_file import job_identity, save_model
from fgnn.models import build_model
from fgnn.sampling import build_sampler

TINY = "rmat:scale=6,edge_factor=4,feat_dim=4,num_classes=2,train_frac=0.5,seed=0"


def _model_file(path: Path) -> tuple[Path, torch.nn.Module]:
    dataset = load_dataset(TINY)
    cfg = JobConfig(dataset=TINY, model=ModelConfig("sage", hidden=16),
                    sampler=SamplerConfig(fanouts=(4, 4)))
    model = build_model(cfg.model, dataset.feat_dim, dataset.num_classes, 2)
    ident = job_identity(cfg, dataset, model, build_sampler(cfg.sampler))
    return save_model(path, model, ident, final={"test_acc": 0.78}), model


def _overwrite_weights(path: Path, model: torch.nn.Module) -> None:
    """Overwrite bytes in the middle of the largest stored tensor: the zip stays valid and torch
    loads the file (with other weights) unless something checks its content."""
    t = max(model.state_dict().values(), key=lambda v: v.numel())
    raw = t.detach().cpu().contiguous().numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(raw)
    assert at > 0
    mid = at + len(raw) // 2
    data[mid:mid + 8] = b"\x7f" * 8
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=True)  # still loads: only a checksum can tell


def test_corrupt_model_file_refused(tmp_path):
    path, model = _model_file(tmp_path / "m.pt")
    assert fgnn.load_model(path).final == {"test_acc": 0.78}
    _overwrite_weights(path, model)
    with pytest.raises(CheckpointError) as info:
        fgnn.load_model(path)
    line = str(info.value)
    assert len(line.splitlines()) == 1 and str(path) in line and "checksum" in line, line


def _checkpoint(path: Path) -> torch.nn.Module:
    model = torch.nn.Linear(64, 32)
    save_checkpoint(path, model, torch.optim.Adam(model.parameters()), epoch=3)
    return model


def test_corrupt_checkpoint_refused(tmp_path):
    path = tmp_path / "runtime.pt"
    model = _checkpoint(path)
    assert read_checkpoint(path)["epoch"] == 3
    _overwrite_weights(path, model)
    with pytest.raises(CheckpointError, match="corrupt.*checksum"):
        read_checkpoint(path)


def test_resume_from_corrupt_checkpoint_one_line(tmp_path, capsys):
    """--resume reads the checkpoint before Ray starts: one line, exit 2, nothing written."""
    import ray

    ck = tmp_path / "ck"
    ck.mkdir()
    model = _checkpoint(ck / "runtime.pt")
    _overwrite_weights(ck / "runtime.pt", model)
    before = (ck / "runtime.pt").read_bytes()
    with pytest.raises(SystemExit) as e:
        main(["--dataset", TINY, "--epochs", "2", "--no-progress", "--checkpoint-dir", str(ck),
              "--resume", "--report", str(tmp_path / "r.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--checkpoint-dir" in err[0] and "checksum" in err[0], err
    assert not ray.is_initialized() and not (tmp_path / "r.json").exists()
    assert (ck / "runtime.pt").read_bytes() == before


def test_file_without_checksum_refused(tmp_path):
    """Policy: a checkpoint or model file written before checksums is refused, naming why."""
    path = tmp_path / "old.pt"
    model = torch.nn.Linear(2, 2)
    payload = {"format": "fgnn-checkpoint", "version": 1, "signature": {},
               "model": model.state_dict(), "optimizer": None, "epoch": 0, "rng": {},
               "extra": {}}
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="no checksum.*older fgnn"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checksum.*older fgnn"):
        fgnn.load_model(path)
