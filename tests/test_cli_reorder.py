"""launch.py --reorder hot-first: the renumbered job sees the same graph as the plain one.

Hot-first reordering (DataTiering Algorithm 2) renumbers topology, features, labels and splits at
load and keeps every neighbour list in its order, so with one Trainer (a deterministic order of
updates) and no dropout the reordered run trains on the very same mini-batches: its losses, hit
rates, bytes and accuracies must equal the plain run's. Both rank by degree: a PreSC order would be
pre-sampled on the driver for the reordered run (the order must exist at load) but counted in the
warm-up epoch for the plain one, two different draws. Any id the runtime forgot to map (labels,
a split, the hotness, the cache map, the Samplers' seeds, the evaluation) breaks the equality.
"""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from fgnn.cli import main  # noqa: E402
from fgnn.report import validate_report  # noqa: E402

DEVICES = 4
COMMON = ["--dataset", "rmat:scale=9,edge_factor=8,feat_dim=16,num_classes=4,train_frac=0.3,"
                       "seed=0",
          "--model", "sage", "--hidden", "16", "--dropout", "0", "--fanouts", "4,4",
          "--devices", "2", "--samplers", "1", "--no-switching", "--batch-size", "16",
          "--epochs", "2", "--lr", "0.01", "--cache-ratio", "0.2", "--cache-policy", "degree",
          "--no-progress"]


def _run(tmp_path, name: str, *extra: str) -> dict:
    path = tmp_path / f"{name}.json"
    assert main([*COMMON, "--report", str(path), *extra]) == 0
    report = json.loads(path.read_text())
    validate_report(report)
    return report


def test_hot_first_run_trains_and_scores_exactly_like_the_plain_run(ray_cluster, tmp_path):
    plain = _run(tmp_path, "plain")
    re = _run(tmp_path, "reordered", "--reorder", "hot-first")
    assert plain["config"]["cache"]["reorder"] == "none" and "reorder" not in plain["allocation"]
    assert re["config"]["cache"]["reorder"] == "hot-first"
    info = re["allocation"]["reorder"]
    # the cache is the id prefix [0, C): "is v cached?" is "v < C" (DataTiering §3.2)
    assert info["kind"] == "hot-first" and info["score"] == "degree"
    assert info["cache_is_prefix"] and info["cached_prefix"] == int(0.2 * 512)
    assert re["preprocess"]["reorder_s"] > 0
    for a, b in zip(plain["epochs"], re["epochs"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6, abs=0)
        assert (b["batches"], b["hit_rate"], b["bytes_host_to_device"], b["val_acc"]) == \
            (a["batches"], a["hit_rate"], a["bytes_host_to_device"], a["val_acc"])
    assert re["final"] == plain["final"]
