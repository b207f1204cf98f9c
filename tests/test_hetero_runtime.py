"""Heterogeneous node classification through the factored runtime and ``launch.py`` (issue 20).

* Typed samples cross the queue: :func:`pack_sample` / :func:`unpack_sample` carry a
  :class:`Sample` exactly, and a Sampler executor's task draws from the same per-task
  generator as a homogeneous task (:func:`task_generator`).
* An end-to-end ``Runtime`` run on 2 and 4 logical devices learns the planted graph (test
  accuracy well above the majority class), and its typed cache accounting is exact: per epoch
  and node type, hits + misses equals the rows of that type the epoch's samples hold, recomputed
  here from the task generators; a type that got no bytes of the budget has no hit; the type
  without features (learned embeddings) is never counted.
* ``launch.py`` on a typed ``ondisk:DIR`` dataset exits 0 and writes a valid report, and resumes
  from its checkpoint; bad typed
  specs fail with one line naming the flag (an unknown relation in ``--relation-fanouts``, a
  typed graph without labels, a model other than ``sage``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from fgnn.config import CacheConfig, JobConfig, LinkConfig, ModelConfig, RuntimeConfig, \
    SamplerConfig, TrainConfig
from fgnn.data import from_pyg, load_dataset
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.executors.common import task_generator
from fgnn.executors.typed import graph_payload
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.transport import pack_sample, unpack_sample
from fgnn.executors.scheduler import epoch_batches, step_tasks
from fgnn import HeteroKHop
from fgnn.sampling import Sample

SPEC = "hetero:papers=1000,authors=300,fields=16,seed=0"
FANOUTS = (5, 5)


def _same_sample(a: Sample, b: Sample) -> None:
    assert a.seed_type == b.seed_type and a.task_id == b.task_id
    assert torch.equal(a.seeds, b.seeds)
    assert a.input_nodes.keys() == b.input_nodes.keys()
    for t in a.input_nodes:
        assert torch.equal(a.input_nodes[t], b.input_nodes[t]), t
    assert len(a.blocks) == len(b.blocks)
    for x, y in zip(a.blocks, b.blocks):
        assert x.num_src == y.num_src and x.num_dst == y.num_dst
        assert x.edges.keys() == y.edges.keys()
        for et in x.edges:
            assert all(torch.equal(p, q) for p, q in zip(x.edges[et], y.edges[et])), et


def test_sampler_executor_draws_typed_samples_from_the_task_generator():
    """A Sampler executor over the typed payload samples task ``i`` of epoch ``e`` exactly as
    HeteroKHop does with ``task_generator(seed, e, i)``; the packed sample unpacks to it."""
    ds = load_dataset(SPEC)
    sampler = HeteroKHop(FANOUTS)
    ex = SamplerExecutor(graph_payload(ds.graph), sampler, ds.train_idx.numpy(), 64, 7)
    for epoch, task in ((0, 0), (1, 3), (2, 4)):
        got, _, _ = ex.sample(epoch, task)
        seeds = epoch_batches(ds.train_idx, 64, 7, epoch, 1)[task]
        want = HeteroKHop(FANOUTS).sample_type(ds.graph, "paper", seeds,
                                          task_generator(7, epoch, task))
        want.task_id = task
        _same_sample(got, want)
        assert set(got.input_nodes) == {"paper", "author", "field"}
        back = unpack_sample(pack_sample(got))
        _same_sample(back, got)
        assert back.nbytes() == sum(t.numel() * t.element_size() for t in got.tensors())


def _rows_requested(ds: HeteroDataset, cfg: JobConfig, epoch: int) -> dict[str, int]:
    """Rows per node type the samples of ``epoch``'s training tasks hold, recomputed here."""
    tc = cfg.train
    parts = step_tasks(cfg.runtime.mode, cfg.runtime.devices)
    rows: Counter = Counter()
    for task, seeds in enumerate(epoch_batches(ds.train_idx, tc.batch_size, tc.seed, epoch,
                                               parts)):
        s = HeteroKHop(FANOUTS).sample_type(ds.graph, "paper", seeds,
                                       task_generator(tc.seed, epoch, task))
        rows.update({t: int(v.numel()) for t, v in s.input_nodes.items()})
    return dict(rows)


def _config(devices: int, ratio: float) -> JobConfig:
    return JobConfig(dataset=SPEC, sampler=SamplerConfig(fanouts=FANOUTS),
                     model=ModelConfig(name="sage", hidden=32, dropout=0.2),
                     cache=CacheConfig(cache_ratio=ratio),
                     train=TrainConfig(epochs=4, batch_size=128, lr=0.01, seed=3),
                     runtime=RuntimeConfig(devices=devices))


# Thresholds (measured 2026-11-25 on 2 shared CPU cores, bench/hetero_runtime.py, this spec and
# job): test accuracy 0.980 on 2 devices and 0.986 on 4; the majority class holds 0.252 of the
# test papers, and a logistic regression on the paper features alone reaches 0.74. The test
# asks for at least 0.85 (the relations must be used) and 0.25 above the majority share.
@pytest.mark.parametrize("devices, ratio", [(2, 0.3), (4, 0.008)])
def test_runtime_learns_the_planted_graph_and_counts_typed_hits_exactly(ray_cluster, devices,
                                                                         ratio):
    from fgnn.runtime.driver import Runtime

    ds = load_dataset(SPEC)
    cfg = _config(devices, ratio)
    res = Runtime(cfg, ds).run().to_dict()
    majority = Counter(ds.labels[ds.test_idx].tolist()).most_common(1)[0][1] / len(ds.test_idx)
    acc = res["final"]["test_acc"]
    assert acc >= 0.85 and acc >= majority + 0.25, (acc, majority)
    typed = res["allocation"]["typed_cache"]
    cached = typed["cached_rows"]
    assert cached["author"] == 0  # no features: learned embeddings, never cached
    assert sum(typed["cached_bytes"].values()) <= typed["budget_bytes"]
    for ep in res["epochs"]:
        want = _rows_requested(ds, cfg, ep["epoch"])
        got = ep["typed_cache"]
        assert set(got) == {"paper", "field"}  # only the types with features are counted
        for t in got:
            assert got[t]["hits"] + got[t]["misses"] == want[t], (ep["epoch"], t, got, want)
        for t, n in cached.items():
            if n == 0 and t in got:
                assert got[t]["hits"] == 0, (t, got)
        if ep["warmup"]:
            assert all(v["hits"] == 0 for v in got.values())
    late = res["epochs"][-1]["typed_cache"]
    if ratio == 0.008:  # 516 bytes: the 16 hot, narrow field rows win; no paper row fits
        assert cached == {"paper": 0, "author": 0, "field": 16}
        assert late["paper"]["hits"] == 0 and late["field"]["hits"] > 0
    else:  # both types cache rows and hit
        assert cached["paper"] > 0 and cached["field"] > 0
        assert late["paper"]["hits"] > 0 and late["field"]["hits"] > 0


def test_launch_trains_a_typed_ondisk_dataset_and_writes_a_report(ray_cluster, tmp_path,
                                                                  capsys):
    from fgnn.cli import main
    from fgnn.data.ondisk_hetero import save_ondisk_hetero
    from fgnn.report import load_report

    ds = load_dataset("hetero:papers=600,authors=200,seed=1")
    splits = {"train_idx": ds.train_idx, "val_idx": ds.val_idx, "test_idx": ds.test_idx}
    root = save_ondisk_hetero(ds.graph, tmp_path / "typed", num_classes=ds.num_classes,
                              splits=splits)
    back = load_dataset(f"ondisk:{root}")
    assert isinstance(back, HeteroDataset) and torch.equal(back.test_idx, ds.test_idx)
    report = tmp_path / "r.json"
    argv = ["--dataset", f"ondisk:{root}", "--model", "sage", "--hidden", "32",
            "--fanouts", "5,5", "--relation-fanouts", "cites=5,3", "written_by=3,0",
            "--devices", "2", "--batch-size", "128", "--cache-ratio", "0.3",
            "--no-progress", "--dashboard-host", "off", "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(argv + ["--epochs", "3", "--report", str(report)]) == 0
    rep = load_report(report)  # validates the schema
    assert rep["config"]["sampler"]["relation_fanouts"] == {"cites": [5, 3],
                                                           "written_by": [3, 0]}
    assert rep["final"]["test_acc"] > 0.5, rep["final"]
    assert set(rep["epochs"][-1]["typed_cache"]) == {"paper", "field"}
    assert rep["allocation"]["typed_cache"]["cached_rows"]["author"] == 0
    assert "HeteroDataset(" in capsys.readouterr().out
    json.dumps(rep)
    # the same job resumed from its checkpoint runs only the epoch left
    resumed = tmp_path / "r2.json"
    assert main(argv + ["--epochs", "4", "--resume", "--report", str(resumed)]) == 0
    assert [e["epoch"] for e in load_report(resumed)["epochs"]] == [3]


def test_an_unknown_relation_in_relation_fanouts_is_one_line(cli_error):
    line = cli_error(["--dataset", "hetero:papers=200,authors=50", "--model", "sage",
                            "--fanouts", "5,5", "--relation-fanouts", "cited=5,5"])
    assert line.startswith("launch.py: error: argument --relation-fanouts: 'cited' is not a "
                           "relation of dataset"), line
    assert "paper:cites:paper" in line


def test_relation_fanouts_need_one_fanout_per_layer_and_a_typed_dataset(cli_error):
    line = cli_error(["--dataset", "hetero:papers=200,authors=50", "--model", "sage",
                            "--fanouts", "5,5", "--relation-fanouts", "cites=5"])
    assert line.startswith("launch.py: error: argument --relation-fanouts: "), line
    line = cli_error(["--dataset", "rmat:scale=6,feat_dim=4", "--fanouts", "5,5",
                            "--relation-fanouts", "cites=5,5"])
    assert "needs a typed dataset" in line, line


def _bare_ondisk(tmp_path) -> "Path":
    """The planted typed graph saved on disk without labels (a manifest with no ``target``)."""
    from fgnn.data.ondisk_hetero import save_ondisk_hetero
    from fgnn import HeteroGraph

    g = load_dataset("hetero:papers=100,authors=30").graph
    bare = HeteroGraph(g.num_nodes, g.relations, g.features, meta={"name": "bare"})
    return save_ondisk_hetero(bare, tmp_path / "bare")


def test_a_typed_ondisk_dataset_without_labels_loads_for_link_prediction(tmp_path):
    root = _bare_ondisk(tmp_path)
    assert json.loads((root / "manifest.json").read_text())["target"] is None
    ds = load_dataset(f"ondisk:{root}")
    assert isinstance(ds, HeteroDataset) and not ds.labelled and ds.graph.labels is None
    assert ds.train_idx.numel() == 0 and ds.meta["root"] == str(root)


def test_a_typed_ondisk_graph_without_labels_refuses_node_classification_naming_the_file(
        tmp_path, cli_error):
    root = _bare_ondisk(tmp_path)
    line = cli_error(["--dataset", f"ondisk:{root}", "--model", "sage"])
    assert line.startswith("launch.py: error: argument --task: 'node' needs labels, and no node "
                           "type of the typed dataset 'bare' has any"), line
    assert f"({root / 'manifest.json'}: \"target\" is null)" in line and "task='link'" in line


def test_launch_trains_link_prediction_on_a_typed_ondisk_graph_without_labels(tmp_path):
    """What a user of a typed link graph on disk types: ``--task link`` on it exits 0 and the
    report holds AUC and AP (one device, in this process)."""
    from fgnn.cli import main

    root = _bare_ondisk(tmp_path)
    report = tmp_path / "r.json"
    rc = main(["--dataset", f"ondisk:{root}", "--task", "link", "--link-edge-type",
               "author,writes,paper", "--model", "sage", "--hidden", "16", "--fanouts", "3,3",
               "--epochs", "2", "--batch-size", "64", "--devices", "1", "--no-progress",
               "--report", str(report)])
    assert rc == 0
    res = json.loads(report.read_text())
    assert res["config"]["task"] == "link" and len(res["epochs"]) == 2
    assert 0.0 <= res["final"]["test_auc"] <= 1.0 and 0.0 <= res["final"]["test_ap"] <= 1.0


def test_a_typed_dataset_refuses_other_models_in_one_line(cli_error):
    line = cli_error(["--dataset", "hetero:papers=200,authors=50", "--model", "gcn"])
    assert line.startswith("launch.py: error: argument --model: 'gcn' is not supported on the "
                           "typed dataset"), line


def test_a_bad_hetero_spec_key_is_one_line(cli_error):
    line = cli_error(["--dataset", "hetero:papers=200,wings=2", "--model", "sage"])
    assert "unknown key 'wings' for hetero" in line, line


@pytest.mark.parametrize("policy, want", [("none", "none"), ("presc", "presc"),
                                          ("degree", "degree")])
def test_the_cache_planner_reads_every_cache_policy(policy, want):
    """``--cache-policy none`` reached ``parse_policy``, which knows only rankings, and every
    factored job with it failed in ``policy_hotness`` (homogeneous and typed alike)."""
    from types import SimpleNamespace

    from fgnn.runtime.cache_plan import CachePlanner

    cfg = JobConfig(cache=CacheConfig(policy=policy))
    dataset = SimpleNamespace(feature_row_bytes=64)   # the planner sizes its eval chunk by it
    planner = CachePlanner(cfg, dataset, None, 1, True, None, SimpleNamespace(), None)
    assert planner.policy == want


class _HeteroDataLike(dict):
    """What ``torch_geometric.data.HeteroData`` provides: ``node_types``, ``edge_types`` and a
    store per type (``data[t].x = ...``)."""

    node_types = property(lambda self: [k for k in self if isinstance(k, str)])
    edge_types = property(lambda self: [k for k in self if isinstance(k, tuple)])

    def __getitem__(self, key):
        return self.setdefault(key, type("Store", (), {})())


def test_job_trains_a_typed_graph_given_through_from_pyg(ray_cluster):
    """``fgnn.data.from_pyg`` on a HeteroData-like object gives a dataset ``fgnn.Job`` trains
    end to end (one device, two epochs on a small planted graph)."""
    from fgnn import Job

    ds = from_pyg(_planted_pyg(labelled=True), name="papers")
    assert isinstance(ds, HeteroDataset) and ds.target_type == "paper"
    cfg = JobConfig(model=ModelConfig(name="sage", hidden=16),
                    sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=2, batch_size=64, lr=0.01, seed=0),
                    runtime=RuntimeConfig(devices=1, dashboard_host=None))
    res = Job(cfg, dataset=ds, progress=False).run().to_dict()
    assert [ep["epoch"] for ep in res["epochs"]] == [0, 1]
    assert all(ep["loss"] is not None and math.isfinite(ep["loss"]) for ep in res["epochs"])
    assert 0.0 <= res["final"]["test_acc"] <= 1.0
    assert set(res["epochs"][-1]["typed_cache"]) == {"paper", "field"}   # author: no features


def _planted_pyg(labelled: bool = False) -> _HeteroDataLike:
    """The planted typed graph as a HeteroData-like object: ``y`` on the papers when
    ``labelled``, on no node type otherwise."""
    planted = load_dataset("hetero:papers=200,authors=60,fields=8,seed=0").graph
    data = _HeteroDataLike()
    for t, n in planted.num_nodes.items():
        data[t].num_nodes = n
    for t, x in planted.features.items():
        data[t].x = x
    if labelled:
        data["paper"].y = planted.labels
    for et in planted.edge_types:
        data[et].edge_index = planted.edge_index(et)
    return data


def test_a_typed_graph_without_labels_refuses_node_classification_in_one_line():
    from fgnn import Job
    from fgnn.job import JobConfigError

    cfg = JobConfig(model=ModelConfig(name="sage", hidden=16), sampler=SamplerConfig(fanouts=(3,)),
                    runtime=RuntimeConfig(devices=1, dashboard_host=None))
    with pytest.raises(JobConfigError, match=r"task: 'node' needs labels, and no node type .*"
                                             r"task='link'"):
        Job(cfg, dataset=from_pyg(_planted_pyg(), name="bare"), progress=False).run()


def test_job_trains_link_prediction_on_a_typed_graph_without_labels(ray_cluster):
    """``from_pyg`` of a HeteroData with no ``y`` (every typed link graph) gives a dataset whose
    graph keeps no labels, and a typed link ``Job`` trains it end to end."""
    from fgnn import Job

    ds = from_pyg(_planted_pyg(), name="bare")
    assert isinstance(ds, HeteroDataset) and not ds.labelled and ds.graph.labels is None
    cfg = JobConfig(task="link", link=LinkConfig(edge_type="author,writes,paper", neg_ratio=1),
                    model=ModelConfig(name="sage", hidden=16),
                    sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=2, batch_size=64, lr=0.01, seed=0),
                    runtime=RuntimeConfig(devices=1, dashboard_host=None))
    res = Job(cfg, dataset=ds, progress=False).run().to_dict()
    assert [ep["epoch"] for ep in res["epochs"]] == [0, 1]
    assert all(ep["loss"] is not None and math.isfinite(ep["loss"]) for ep in res["epochs"])
    assert 0.0 <= res["final"]["test_auc"] <= 1.0
