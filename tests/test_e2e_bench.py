"""bench/e2e.py in-process: the launch.py command it times, the 5% training graph, the layouts,
and the summary without PyG (no subprocess, no Ray)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def e2e():
    spec = importlib.util.spec_from_file_location("bench_e2e", REPO / "bench" / "e2e.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_frac_rewrites_or_adds_the_spec_key(e2e):
    assert e2e.with_train_frac("rmat:scale=17,train_frac=0.1,seed=0", 0.05) == \
        "rmat:scale=17,train_frac=0.05,seed=0"
    assert e2e.with_train_frac("rmat:scale=9", 0.05) == "rmat:scale=9,train_frac=0.05"
    assert e2e.with_train_frac("rmat", 0.05) == "rmat:train_frac=0.05"
    assert e2e.with_train_frac("rmat:scale=9", None) == "rmat:scale=9"
    with pytest.raises(ValueError, match="--train-frac"):
        e2e.with_train_frac("rmat", 1.5)


def test_layouts_and_the_launch_command_build_the_job(e2e):
    assert e2e.parse_layouts("single:1,factored:2") == [("single", 1), ("factored", 2)]
    with pytest.raises(ValueError, match="MODE:DEVICES"):
        e2e.parse_layouts("factored")
    args = e2e._parser().parse_args(["--train-frac", "0.05", "--val-subset", "all",
                                     "--layouts", "factored:2"])
    args.dataset = e2e.with_train_frac(args.dataset, args.train_frac)
    cfg = e2e._job(args, args.layouts[0], 7)
    assert (cfg.runtime.mode, cfg.runtime.devices, cfg.train.seed) == ("factored", 2, 7)
    assert "train_frac=0.05" in cfg.dataset and cfg.train.val_subset == 0
    assert (cfg.model.hidden, cfg.sampler.fanouts, cfg.train.batch_size) == (256, (25, 10), 1024)
    argv = e2e.fgnn_argv(args, ("single", 1), 0, "r.json")
    assert argv[-2:] == ["--report", "r.json"] and "--no-progress" in argv


def test_summary_without_pyg_has_fgnn_columns_only(e2e):
    run = {"wall_s": 30.0, "test_acc": 0.5,
           "epochs": [{"train_s": 3.0, "val_acc": 0.4, "loss": 1.0},
                      {"train_s": 1.0, "val_acc": 0.5, "loss": 0.8}]}
    s = e2e.summarize([run], [])
    assert s["fgnn_wall_s"] == 30.0 and s["fgnn_epoch_s"] == 1.0  # warm-up epoch left out
    assert "wall_ratio" not in s and "pyg_val" not in s["curve"][0]
    pyg = {"wall_s": 40.0, "test_acc": 0.5,
           "epochs": [{"train_s": 2.0, "val_acc": 0.4, "loss": 1.0},
                      {"train_s": 2.0, "val_acc": 0.45, "loss": 0.9}]}
    s = e2e.summarize([run], [pyg])
    assert s["wall_ratio"] == 0.75 and s["fgnn_faster_whole_run"]
    assert s["curve"][1]["diff"] == pytest.approx(0.05)
