"""Non-finite or out-of-range input is refused with one line (issue 19): features (every loader
and Dataset itself), hyperparameters (config and CLI), labels, a single class."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fgnn.cli import main
from fgnn.config import CacheConfig, ModelConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.data import Dataset, load_dataset
from fgnn.data.convert import from_pyg
from fgnn.data.ondisk import load_ondisk, save_dataset

TINY = "rmat:scale=6,edge_factor=4,feat_dim=4,num_classes=2,train_frac=0.5,seed=0"


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


def _with(ds: Dataset, **kw) -> Dataset:
    args = dict(name="bad", graph=ds.graph, features=ds.features, labels=ds.labels,
                train_idx=ds.train_idx, val_idx=ds.val_idx, test_idx=ds.test_idx,
                num_classes=ds.num_classes)
    args.update(kw)
    return Dataset(**args)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("kind", ["tensor", "array"])
def test_dataset_refuses_non_finite_features(tiny, bad, kind):
    feats = tiny.features.clone()
    feats[37, 3] = bad
    feats = feats if kind == "tensor" else feats.numpy()
    with pytest.raises(ValueError) as info:
        _with(tiny, features=feats)
    line = _one_line(info)
    assert "dataset 'bad'" in line and "row 37, column 3" in line and "non-finite" in line


def test_ondisk_refuses_inf_features_chunk_by_chunk(tiny, tmp_path, monkeypatch):
    """+inf in a memory-mapped features.npy: refused naming the file, row and column; the scan
    reads small chunks (here 64 bytes), never the whole file at once."""
    import fgnn.data.ondisk as ondisk

    root = save_dataset(tiny, tmp_path / "ds")
    feats = np.load(root / "features.npy")
    feats[50, 1] = np.inf
    np.save(root / "features.npy", feats)
    monkeypatch.setattr(ondisk, "_CHUNK_BYTES", 64)
    seen = []
    real = np.isfinite
    monkeypatch.setattr(np, "isfinite", lambda a, *k, **kw: seen.append(np.shape(a)) or
                        real(a, *k, **kw))
    with pytest.raises(ValueError) as info:
        load_ondisk(root)
    line = _one_line(info)
    assert "features.npy" in line and "row 50, column 1" in line and "inf" in line
    assert seen and max(s[0] for s in seen) <= 4       # 64 bytes = 4 rows of 4 float32


def test_cli_refuses_ondisk_inf_before_ray(tiny, tmp_path, capsys):
    import ray

    root = save_dataset(tiny, tmp_path / "ds")
    feats = np.load(root / "features.npy")
    feats[3, 0] = np.inf
    np.save(root / "features.npy", feats)
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(["--dataset", f"ondisk:{root}", "--epochs", "1", "--report", str(report)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dataset" in err[0] and "row 3, column 0" in err[0], err
    assert not report.exists() and not ray.is_initialized()


def _pyg(x) -> SimpleNamespace:
    return SimpleNamespace(x=x, y=torch.tensor([0, 1, 0, 1]), num_nodes=4,
                           edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))


@pytest.mark.parametrize("bad", [float("nan"), 1e39])   # 1e39: finite float64, inf as float32
def test_pyg_conversion_refuses_non_finite(bad):
    x = torch.ones(4, 2, dtype=torch.float64)
    x[2, 1] = bad
    with pytest.raises(ValueError) as info:
        from_pyg(_pyg(x), name="mine", train=[0, 1], val=[2], test=[3])
    assert "row 2, column 1" in _one_line(info), str(info.value)


@pytest.mark.parametrize("labels, cls", [([0, 1, 2, 0], "2"), ([0, -1, 1, 0], "-1")])
def test_labels_out_of_range_refused(labels, cls):
    g = from_pyg(_pyg(torch.ones(4, 2)), train=[0, 1], val=[2], test=[3]).graph
    with pytest.raises(ValueError, match=f"class {cls}, outside"):
        Dataset("bad", g, torch.ones(4, 2), torch.tensor(labels), [0], [1], [2], 2)


def test_single_class_refused(capsys, tmp_path):
    """num_classes=1: every label the same; a classifier learns nothing (and scores 1.0)."""
    import ray

    spec = TINY.replace("num_classes=2", "num_classes=1")
    with pytest.raises(SystemExit) as e:
        main(["--dataset", spec, "--epochs", "1", "--report", str(tmp_path / "r.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_classes=1" in err[0] and "learns nothing" in err[0], err
    assert not ray.is_initialized() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("make", [
    lambda v: TrainConfig(lr=v), lambda v: TrainConfig(weight_decay=v),
    lambda v: ModelConfig(dropout=v), lambda v: ModelConfig(input_dropout=v),
    lambda v: CacheConfig(peer_cost=v), lambda v: CacheConfig(device_memory_gib=v),
    lambda v: SamplerConfig(locality_max_scale=v), lambda v: RuntimeConfig(stall_timeout_s=v),
])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_config_refuses_non_finite(make, value):
    with pytest.raises(ValueError) as info:
        make(value)
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("flag, value", [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "Infinity"), ("--weight-decay", "nan"),
    ("--weight-decay", "inf"), ("--dropout", "nan"), ("--peer-cost", "inf"),
    ("--device-memory", "inf"), ("--stall-timeout", "inf"), ("--locality-max-scale", "inf"),
])
def test_cli_refuses_non_finite_hyperparameters(flag, value, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main([flag, value, "--report", str(tmp_path / "r.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and value in err[0], err
    assert not (tmp_path / "r.json").exists()
