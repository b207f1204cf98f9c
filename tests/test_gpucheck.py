"""``python -m fgnn.gpucheck``: its CPU dry run (what CI can run) and its refusal without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fgnn import gpucheck

REPO = Path(__file__).resolve().parents[1]


def test_cpu_dry_run_writes_json_and_markdown_with_torch_and_numpy_only(tmp_path):
    out = tmp_path / "gc"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "fgnn.gpucheck", "--device", "cpu", "--quick",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads((out / "gpucheck.json").read_text())
    assert res["failed"] == []
    assert res["environment"]["device"] == "cpu"
    assert "skipped" in res["gpu_tests"] and "skipped" in res["epochs"]
    s = res["sampler"]
    assert s["edges"] > 0 and s["random_reads_per_s"] > 0 and s["hops"] == 3
    assert len(s["edges_per_batch"]) == s["batches"] and min(s["edges_per_batch"]) > 0
    assert s["syncs_per_sample"] <= 2 * 3 + 1 and s["ops_per_sample"] <= 300
    e = res["extract"]
    assert e["hit_gb_per_s"] > 0 and e["miss_gb_per_s"] > 0 and 0 < e["hit_rate"] < 1
    assert e["split_rows_per_s"] > 0 and e["gather_hit_gb_per_s"] > 0  # the split apart
    ex = res["executors"]
    assert ex["device"] == "cpu" and len(ex["losses"]) == ex["tasks"] > 0
    assert isinstance(ex["batch_size"], int) and ex["batch_size"] > 0  # seeds, not a batch
    assert (out / ex["trace"]).is_file()
    # the in-process part needs torch and numpy only
    assert not {"ray", "scipy"} & set(res["heavy_modules_in_process"])
    md = (out / "gpucheck.md").read_text()
    assert "| check | result |" in md and "sampler edges/s" in md and "extract GB/s" in md


def test_without_cuda_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpucheck.main(["--out", str(tmp_path / "gc")]) == 2
    got = capsys.readouterr()
    lines = (got.out + got.err).strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--device cpu" in lines[0]
    assert not (tmp_path / "gc").exists()


def test_overlap_is_the_intersection_of_copy_and_kernel_time():
    spans = gpucheck._union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    assert spans == [(0.0, 3.0), (5.0, 6.0)]
    assert gpucheck._intersection(spans, [(2.0, 5.5)]) == 1.5


def test_batches_cycle_the_seeds_and_are_never_empty():
    """The issue's case: 10 batches of 8000 from a 10,486-id split (batches 2-9 were empty)."""
    order = torch.randperm(10_486, generator=torch.Generator().manual_seed(0))
    batches = [gpucheck.batch_seeds(order, 8000, i) for i in range(10)]
    assert [b.numel() for b in batches] == [8000] * 10
    assert all(b.unique().numel() == 8000 for b in batches)  # distinct seeds in a batch
    assert torch.equal(batches[0], order[:8000])
    assert not torch.equal(batches[1], batches[0])  # the next pass is reshuffled
    assert all(set(b.tolist()) <= set(order.tolist()) for b in batches)
    for bad in (0, 10_487):
        with pytest.raises(ValueError, match="batch must be in"):
            gpucheck.batch_seeds(order, bad, 0)


def test_a_batch_larger_than_the_split_draws_from_every_vertex():
    train = torch.arange(100)
    ids, pool = gpucheck.seed_pool(train, 5000, 320)
    assert pool == "all vertices" and sorted(ids.tolist()) == list(range(5000))
    ids, pool = gpucheck.seed_pool(train, 5000, 64)
    assert pool == "train" and sorted(ids.tolist()) == list(range(100))
