"""The out-of-core builder and the shared topology: the same bytes under any memory cap, the
degree law and homophily it promises, a killed build that leaves nothing loadable, reuse from
the cache, the twins by name, and one mapping of the topology across executor processes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fgnn.data.outofcore as ooc
from fgnn.config import CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, \
    TrainConfig
from fgnn.data import load_dataset
from fgnn.data.ondisk import load_ondisk
from fgnn.data.outofcore import GraphRecipe, build, build_peak_bytes, ensure_built
from fgnn.data.spec import builder_recipe, estimate_spec_bytes
from fgnn.data.twins import TWINS, twin_recipe
from fgnn.job import Job

SMALL = dict(num_nodes=4000, num_edges=48000, feat_dim=8, num_classes=4)


def _checksums(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())["build"]["checksums"]


def _edges(ds) -> tuple[torch.Tensor, torch.Tensor]:
    g = ds.graph
    rows = torch.repeat_interleave(torch.arange(g.num_nodes), g.degrees())
    return g.indices.long(), rows


@pytest.mark.parametrize("law", ["zipf", "rmat"])
def test_a_tiny_memory_cap_forces_many_ranges_and_writes_the_same_bytes(tmp_path, law):
    kw = dict(SMALL, num_nodes=4096) if law == "rmat" else SMALL
    r = GraphRecipe("t", law=law, weighted=True, feat_dtype="float16", **kw)
    big = build(r, tmp_path / "big", progress=False)
    small = build(r, tmp_path / "small", memory_cap=20_000, progress=False)
    ranges = [json.loads((p / "manifest.json").read_text())["build"]["row_ranges"]
              for p in (big.path, small.path)]
    assert ranges[0] == 1 and ranges[1] > 10                     # the cap cut the rows
    assert _checksums(big.path) == _checksums(small.path)
    for f in ("indptr", "indices", "features", "labels", "weights", "train_idx"):
        assert (big.path / f"{f}.npy").read_bytes() == (small.path / f"{f}.npy").read_bytes()
    ds = load_ondisk(small.path)                                  # sorted rows, valid CSR
    assert ds.graph.indices.dtype == torch.int32 and ds.features.dtype == np.float16
    assert ds.graph.num_edges == r.num_edges and ds.graph.files is not None


def test_zipf_skew_gives_hubs_and_no_skew_gives_poisson_degrees(tmp_path):
    n, e = 20000, 200000
    flat = load_ondisk(build(GraphRecipe("u", n, e, feat_dim=2, skew=0.0, homophily=0.0),
                             tmp_path / "u", progress=False).path).graph.degrees().double()
    mean = e / n
    assert abs(flat.mean().item() - mean) < 1e-9
    # uniform destinations: row lengths Binomial(E, 1/N), variance ~ mean
    assert abs(flat.var().item() / mean - 1.0) < 0.1
    assert flat.max().item() < mean + 7 * math.sqrt(mean)
    skewed = load_ondisk(build(GraphRecipe("s", n, e, feat_dim=2, skew=0.8, head=1.0),
                               tmp_path / "s", progress=False).path).graph.degrees().double()
    assert skewed.max().item() > 50 * mean                       # hubs
    # the top 1 % of rows hold the law's share of the edges: ((0.01 N + h)^(1-a) - h^(1-a))
    # / ((N + h)^(1-a) - h^(1-a)) with a = 0.8, h = 1
    om = 0.2
    want = ((0.01 * n + 1) ** om - 1) / ((n + 1) ** om - 1)
    top = skewed.sort(descending=True).values[:n // 100].sum().item() / e
    assert abs(top - want) < 0.03, (top, want)


def test_homophily_and_planted_classes_are_what_the_recipe_says(tmp_path):
    h, c = 0.6, 5
    r = GraphRecipe("h", 20000, 200000, feat_dim=16, num_classes=c, homophily=h, skew=0.5)
    ds = load_ondisk(build(r, tmp_path / "h", progress=False).path)
    src, dst = _edges(ds)
    same = (ds.labels[src] == ds.labels[dst]).double().mean().item()
    want = h + (1 - h) / c
    assert abs(same - want) < 4 * math.sqrt(want * (1 - want) / r.num_edges) + 0.005
    # a vertex's features lean to its class centroid: the class means are apart
    x = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    means = torch.stack([x[ds.labels == k].mean(0) for k in range(c)])
    assert torch.cdist(means, means).triu(1).max() > 0.3
    counts = torch.bincount(ds.labels, minlength=c).double()
    assert (counts / counts.sum() - 1 / c).abs().max() < 0.01
    assert abs(ds.train_idx.numel() / r.num_nodes - r.train_frac) < 0.005


def test_a_killed_build_leaves_nothing_that_loads_and_the_next_build_restarts(tmp_path,
                                                                              monkeypatch):
    r = GraphRecipe("k", **SMALL)
    dest = tmp_path / "k"

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ooc, "_features", killed)
    with pytest.raises(KeyboardInterrupt):
        ensure_built(r, dest, progress=False)
    assert not dest.exists() and not list(tmp_path.glob(".k.partial-*"))
    # a build killed with SIGKILL leaves its partial directory: no manifest, never loaded
    stale = tmp_path / ".k.partial-999999999"
    stale.mkdir()
    (stale / "indptr.npy").write_bytes(b"half")
    monkeypatch.undo()
    first = ensure_built(r, dest, progress=False)
    assert not first.reused and not stale.exists() and (dest / "manifest.json").is_file()
    again = ensure_built(r, dest, progress=False)
    assert again.reused and again.path == dest
    with pytest.raises(ValueError, match="holds another build"):
        ensure_built(GraphRecipe("k", **dict(SMALL, seed=1)), dest, progress=False)


def test_twins_by_name_have_the_seeds_sizes_and_build_through_a_spec(tmp_path, monkeypatch):
    pa = twin_recipe("pa-like")
    assert (pa.num_nodes, pa.num_edges, pa.feat_dim, pa.train_frac) == \
        (111_059_956, 1_615_685_872, 128, 0.011)
    assert twin_recipe("pr-like").train_frac == 0.08 and set(TWINS) == {
        "pr-like", "tw-like", "pa-like", "uk-like"}
    # the size check is the builder's peak: indptr plus bounded buffers, not the edges
    assert estimate_spec_bytes("pa-like") < 8 * (pa.num_nodes + 1) + (4 << 30)
    assert build_peak_bytes(dataclasses.replace(pa, num_edges=10 * pa.num_edges)) == \
        build_peak_bytes(pa)                                    # independent of the edges
    monkeypatch.setenv(ooc.CACHE_ENV, str(tmp_path / "cache"))
    spec = "pr-like:num_nodes=3000,num_edges=30000,feat_dtype=float16"
    said: list[str] = []
    ds = load_dataset(spec, say=said.append)
    assert ds.name == "pr-like-fp16" and ds.features.dtype == np.float16
    assert "building 3,000 vertices" in said[0]
    load_dataset(spec, say=said.append)
    assert "reusing the build" in said[1]
    with pytest.raises(ValueError, match="unknown key 'scale'"):
        load_dataset("pa-like:scale=3")


def test_an_rmat_spec_too_large_for_memory_takes_the_builder():
    from fgnn.data.memory import MemoryLimit

    spec = "rmat:scale=16,feat_dtype=float16"
    assert builder_recipe(spec) is None                          # fits: the in-memory path
    tight = MemoryLimit(40 << 20, "a test's limit")
    recipe = builder_recipe(spec, tight)
    assert recipe is not None and recipe.law == "rmat" and recipe.num_nodes == 1 << 16
    with pytest.raises(ValueError, match="keeps multi-edges and self-loops"):
        builder_recipe("rmat:scale=16,dedup=true", tight)


def test_executor_processes_map_one_copy_of_the_topology(ray_cluster, tmp_path):
    """A factored job on an on-disk graph: the Sampler and the driver map the topology files;
    their resident pages add up to the files' size once (no private copy anywhere)."""
    built = build(GraphRecipe("m", 20000, 400000, feat_dim=8, num_classes=4),
                  tmp_path / "m", progress=False)
    cfg = JobConfig(dataset=f"ondisk:{built.path}", model=ModelConfig(name="sage", hidden=16),
                    sampler=SamplerConfig(fanouts=(5, 5)),
                    train=TrainConfig(epochs=1, batch_size=64, steps_per_epoch=2),
                    cache=CacheConfig(cache_ratio=0.1),
                    runtime=RuntimeConfig(devices=2))
    result = Job(cfg, progress=False).run()
    topo = result.memory["topology"]
    assert topo["file_bytes"] == sum(os.path.getsize(p) for p in topo["files"])
    assert topo["mapped_by"] >= 2 and topo["private"] == 0
    assert topo["resident_pss"] <= 1.1 * topo["file_bytes"]
    names = {p["name"] for p in result.memory["processes"]}
    assert {"driver", "fgnn-sampler-0", "fgnn-trainer-1"} <= names
    assert all(p["peak_rss"] > 0 for p in result.memory["processes"])
    assert result.to_dict()["memory"]["plan"]["total"] > 0
    assert sum(r.batches for r in result.epochs) == 2 * 2     # 2 steps of 2 tasks


def test_a_bounded_throughput_run_trains_s_steps_and_scores_nothing(tmp_path):
    """``--steps-per-epoch`` hands out the first S mini-batches of each epoch's shuffle;
    ``--eval-mode none`` skips validation and the final scores (in-process, one device)."""
    built = build(GraphRecipe("b", 3000, 30000, feat_dim=8, num_classes=4, train_frac=0.5),
                  tmp_path / "b", progress=False)
    cfg = JobConfig(dataset=f"ondisk:{built.path}", model=ModelConfig(name="sage", hidden=8),
                    sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=2, batch_size=100, steps_per_epoch=3,
                                      eval_mode="none"), report=str(tmp_path / "r.json"))
    result = Job(cfg, progress=False).run()
    written = json.loads((tmp_path / "r.json").read_text())        # a valid report
    assert written["final"]["train_acc"] is None
    assert [e.batches for e in result.epochs] == [3, 3]
    assert all(math.isnan(v) for v in result.final.values())
    assert all(e.eval_s == 0.0 for e in result.epochs)
