"""Model export: ``launch.py --save-model`` -> ``fgnn.load_model`` -> the reported accuracy.

The suite's shared Ray cluster (conftest ``ray_cluster``); ``launch.py``'s ``main`` joins it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import fgnn
from fgnn.checkpoint import CheckpointError
from fgnn.data import load_dataset
from fgnn.evaluation import evaluate_split
from fgnn.model_file import job_identity, save_model

from test_checkpoint import full_disk_under  # noqa: E402

TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=1"
ARGS = ["--dataset", TINY, "--model", "sage", "--hidden", "16", "--fanouts", "4,4",
        "--devices", "2", "--samplers", "1", "--batch-size", "16", "--lr", "0.02",
        "--cache-ratio", "0.2", "--dashboard-host", "off", "--no-progress"]


@pytest.fixture(scope="module")
def dataset():
    return load_dataset(TINY)


def _one_line_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln]
    assert len(err) == 1, err
    return err[0]


def test_save_load_evaluate_reproduces_the_reported_scores(ray_cluster, dataset, tmp_path):
    from fgnn.cli import main

    model_path, report = tmp_path / "m" / "model.pt", tmp_path / "r.json"
    ckpt_dir = tmp_path / "ck"
    assert main(ARGS + ["--epochs", "4", "--eval-batch-size", "16",
                        "--save-model", str(model_path),
                        "--checkpoint-dir", str(ckpt_dir), "--report", str(report)]) == 0
    final = json.loads(report.read_text())["final"]

    saved = fgnn.load_model(model_path, dataset)
    meta = saved.meta
    assert meta["model"]["name"] == "sage" and meta["model"]["hidden"] == 16
    assert meta["dataset"]["spec"] == TINY and meta["dataset"]["num_nodes"] == 256
    assert meta["eval"] == {"seed": 0, "batch_size": 16, "mode": "sampled"}
    assert tuple(meta["sampler"]["config"]["fanouts"]) == (4, 4)
    assert saved.final == final
    test = evaluate_split(saved.model, dataset, "test", saved.eval_sampler(),
                          meta["eval"]["batch_size"], meta["eval"]["seed"])
    assert test.accuracy == final["test_acc"]  # exactly the reported number
    for split in ("train", "val"):
        assert saved.evaluate(dataset, split).accuracy == final[f"{split}_acc"]

    # the runtime checkpoint keeps the best-validation weights, the ones `final` scored
    from_ckpt = fgnn.load_model(ckpt_dir / "runtime.pt", dataset)
    assert all(torch.equal(a, b) for a, b in zip(from_ckpt.model.state_dict().values(),
                                                 saved.model.state_dict().values()))
    assert from_ckpt.evaluate(dataset, "test").accuracy == final["test_acc"]


def test_the_new_frontier_trains_end_to_end_and_a_loaded_model_scores_with_it(
        ray_cluster, dataset, tmp_path):
    """``--frontier new`` (PyG's NeighborLoader semantics) reaches the Samplers, the report and
    the model file: the loaded model re-scores every split exactly with the same frontier."""
    from fgnn.cli import main

    model_path, report = tmp_path / "model.pt", tmp_path / "r.json"
    assert main(ARGS + ["--epochs", "2", "--eval-batch-size", "16", "--frontier", "new",
                        "--save-model", str(model_path), "--report", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["config"]["sampler"]["frontier"] == "new"
    saved = fgnn.load_model(model_path, dataset)
    assert saved.eval_sampler().frontier == "new"
    for split in ("train", "val", "test"):
        assert saved.evaluate(dataset, split).accuracy == rep["final"][f"{split}_acc"]


def test_full_disk_under_the_checkpoint_directory_ends_in_one_line(ray_cluster, tmp_path,
                                                                   monkeypatch, capsys):
    from fgnn.cli import main

    ckpt_dir = tmp_path / "ck"
    ckpt_dir.mkdir()
    full_disk_under(monkeypatch, ckpt_dir)
    assert main(ARGS + ["--epochs", "1", "--checkpoint-dir", str(ckpt_dir)]) == 1
    line = _one_line_error(capsys)
    assert line == (f"launch.py: error: cannot write {ckpt_dir / 'runtime.pt'}: No space left "
                    f"on device (errno 28)")
    assert os.listdir(ckpt_dir) == []  # no partial or temporary file


def test_full_disk_under_the_report_directory_ends_in_one_line(ray_cluster, tmp_path,
                                                               monkeypatch, capsys):
    from fgnn.cli import main

    out = tmp_path / "out"
    out.mkdir()
    full_disk_under(monkeypatch, out)
    assert main(ARGS + ["--epochs", "1", "--report", str(out / "r.json")]) == 1
    line = _one_line_error(capsys)
    # the plot comes first; its failure does not stop the report, which fails too
    assert line.startswith(f"launch.py: error: could not write plot {out / 'r.png'}: No space "
                           f"left on device (errno 28); could not write --report "
                           f"{out / 'r.json'}: No space left"), line
    assert line.endswith("; kept: nothing")
    assert os.listdir(out) == []


# ------------------------------------------------------------------ without Ray
def _saved(tmp_path, dataset, name: str = "sage") -> Path:
    from fgnn.config import JobConfig, ModelConfig, SamplerConfig
    from fgnn.models import build_model
    from fgnn.sampling import build_sampler

    cfg = JobConfig(dataset=TINY, model=ModelConfig(name, hidden=16),
                    sampler=SamplerConfig(fanouts=(4, 4)))
    sampler = build_sampler(cfg.sampler)
    model = build_model(cfg.model, dataset.feat_dim, dataset.num_classes, 2)
    return save_model(tmp_path / "model.pt", model, job_identity(cfg, dataset, model, sampler),
                      final={"test_acc": 0.5})


def test_a_model_file_for_another_graph_names_both(tmp_path, dataset):
    path = _saved(tmp_path, dataset)
    other = load_dataset(TINY.replace("scale=8", "scale=7"))
    with pytest.raises(CheckpointError) as info:
        fgnn.load_model(path, other)
    assert str(info.value) == (
        f"model file {path} holds a sage model (2 layers, hidden 16) for rmat-8 (256 nodes, 1024 "
        f"edges, 16 features, 4 classes); the dataset given is rmat-7 (128 nodes, 512 edges, "
        f"16 features, 4 classes)")


def test_a_model_file_loaded_into_another_model_names_both(tmp_path, dataset):
    from fgnn.models import GCN

    path = _saved(tmp_path, dataset)
    with pytest.raises(CheckpointError, match=r"holds a sage model \(2 layers, hidden 16\) .*; "
                                              r"the model given is a gcn model "
                                              r"\(2 layers, hidden 16\)$"):
        fgnn.load_model(path, model=GCN(16, 4, num_layers=2, hidden=16))
    saved = fgnn.load_model(path)  # rebuilt from the stored config
    assert not saved.model.training and saved.final == {"test_acc": 0.5}


def test_a_file_that_is_not_a_model(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="is not an fgnn model file or checkpoint"):
        fgnn.load_model(tmp_path / "x.pt")
    with pytest.raises(FileNotFoundError, match="no model file at"):
        fgnn.load_model(tmp_path / "missing.pt")


def test_save_model_into_a_directory_fails_before_anything_runs(tmp_path, capsys):
    from fgnn.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--dataset", TINY, "--save-model", str(tmp_path), "--no-progress"])
    assert e.value.code == 2
    assert _one_line_error(capsys) == (
        f"launch.py: error: argument --save-model: is a directory; give a file such as "
        f"model.pt. Received --save-model={str(tmp_path)!r}.")
