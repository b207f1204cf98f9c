"""``--feature-partition``: the config's checks, the cluster's node names, and the per-node
traffic the driver sums from its Trainers (no Ray; the two-raylet run is tests/test_cluster.py)."""

from __future__ import annotations

import types

import pytest
import torch

from fgnn.cli import build_parser, config_from_args
from fgnn.config import CacheConfig, DiskConfig, JobConfig, RuntimeConfig, TrainConfig
from fgnn.runtime.partition import FeaturePartitioning, cluster_nodes


def test_the_flag_defaults_to_replicate_and_takes_the_three_strategies():
    def cfg(*argv: str) -> JobConfig:
        return config_from_args(build_parser().parse_args(list(argv)))

    assert cfg().cache.feature_partition == "replicate"
    got = cfg("--feature-partition", "hotness", "--feature-replicate-ratio", "0.1",
              "--address", "auto").cache
    assert (got.feature_partition, got.feature_replicate_ratio) == ("hotness", 0.1)
    for name in ("replicate", "hotness", "hash"):
        assert CacheConfig(feature_partition=name).feature_partition == name
    with pytest.raises(ValueError, match="feature_partition.*'ring'"):
        CacheConfig(feature_partition="ring")
    with pytest.raises(ValueError, match="feature_replicate_ratio"):
        CacheConfig(feature_replicate_ratio=1.5)
    with pytest.raises(ValueError, match="feature_partition.*cache policy"):
        CacheConfig(feature_partition="hotness", policy="none")


@pytest.mark.parametrize("section", ["disk", "eval", "time-sharing", "no-cluster"])
def test_what_a_partitioned_store_does_not_support_fails_naming_the_field(section):
    cache = CacheConfig(feature_partition="hash")
    cluster = RuntimeConfig(address="auto")
    kw = {"disk": {"disk": DiskConfig(feature_tier="disk"), "runtime": cluster},
          "eval": {"train": TrainConfig(eval_mode="layerwise"), "runtime": cluster},
          "time-sharing": {"runtime": RuntimeConfig(mode="time-sharing", address="auto")},
          "no-cluster": {"runtime": RuntimeConfig(devices=2)}}[section]
    field = {"disk": "feature_tier", "eval": "eval_mode", "time-sharing": "mode",
             "no-cluster": "address"}[section]
    with pytest.raises(ValueError, match=field):
        JobConfig(cache=cache, **kw)


def test_cluster_nodes_counts_the_fgnn_node_resources():
    assert cluster_nodes({"CPU": 4, "GPU": 2, "fgnn_node0": 1, "fgnn_node1": 1}) == 2
    with pytest.raises(ValueError, match="fgnn_node0 .. fgnn_node<M-1>.*none"):
        cluster_nodes({"CPU": 4, "GPU": 2})
    with pytest.raises(ValueError, match="fgnn_node1"):
        cluster_nodes({"fgnn_node1": 1})


def _exec(name: str, device: int):
    return types.SimpleNamespace(name=name, device=device)


def test_trainers_go_to_the_node_of_their_ray_node_and_take_turns_on_a_shared_one():
    from fgnn.runtime.partition import node_hosts

    hosts = node_hosts([{"NodeID": "A", "Alive": True, "Resources": {"fgnn_node0": 1.0}},
                        {"NodeID": "B", "Alive": True,
                         "Resources": {"GPU": 2.0, "fgnn_node2": 1.0, "fgnn_node1": 1.0}},
                        {"NodeID": "D", "Alive": False, "Resources": {"fgnn_node3": 1.0}},
                        {"NodeID": "E", "Alive": True, "Resources": {"CPU": 1.0}}])
    assert hosts == {"A": [0], "B": [1, 2]}
    part = FeaturePartitioning("hash", 0.0)
    got = part._assign({0: "A", 1: "B", 2: "B"},
                       [_exec("t2", 2), _exec("t0", 0), _exec("t1", 1)], hosts)
    assert got == {"t0": 0, "t1": 1, "t2": 2}
    with pytest.raises(ValueError, match="t9 runs on Ray node C"):
        part._assign({9: "C"}, [_exec("t9", 9)], hosts)


def _reads(n: int, rows: list[int], times: int = 1) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.int32)
    out[rows] = times
    return out


def test_measured_reads_per_node_put_each_row_on_its_top_reader():
    """The planner input of a hotness partition: the Trainers' warm-up reads summed per node by
    the Trainer -> node assignment (device 0's standby and device 2 on node 0, device 1 on node
    1); device 3's Trainer trains no more and is left out."""
    from fgnn.cache.node_partition import partition_rows

    n = 12
    hot = torch.ones(n)
    hot[11] = 50.0  # replicated (the policy's hottest row)
    part = FeaturePartitioning("hotness", 1 / n)
    part.add_reads({0: _reads(n, [0, 1, 2]), 1: _reads(n, [6, 7, 8, 9, 11], 2),
                    2: _reads(n, [3, 4, 5]), 3: _reads(n, list(range(n)), 9)})
    part.add_reads({0: _reads(n, [0]), 1: None, 2: None})
    assert part.read_epochs == 2 and part.counts_reads
    said: list[str] = []
    counts = part.planner_input(hot, n, 2, {0: 0, 1: 1, 2: 0}, said.append)
    assert said == [] and part.owners_from == "measured" and part.reads == {}
    assert counts[0, :6].tolist() == [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert counts[1, 6:].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert part.node_reads == [3.5, 5.0]
    p = partition_rows("hotness", n, 2, counts=counts, budget=1, hotness=hot)
    assert p.replicated.nonzero().flatten().tolist() == [11]
    assert p.owner[:6].tolist() == [0] * 6 and p.owner[6:10].tolist() == [1] * 4
    hash_like = partition_rows("hotness", n, 2, counts=(hot / 2).repeat(2, 1), budget=1,
                               hotness=hot)
    assert not torch.equal(p.owner[:10], hash_like.owner[:10])


def test_no_reads_falls_back_to_the_even_split_and_says_so():
    part = FeaturePartitioning("hotness", 0.1)
    part.add_reads({1: None})
    said: list[str] = []
    hot = torch.arange(8, dtype=torch.float32)
    counts = part.planner_input(hot, 8, 2, {1: 1}, said.append)
    assert torch.equal(counts, (hot / 2).repeat(2, 1)) and part.owners_from == "even split"
    assert len(said) == 1 and "no Trainer counted a read" in said[0]
    assert part.read_epochs == 0
    assert FeaturePartitioning("hash", 0.0).planner_input(None, 8, 2, {}) is None
    assert not FeaturePartitioning("hash", 0.0).counts_reads


def test_a_trainer_counts_the_rows_of_its_training_batches_only(monkeypatch):
    """Between count_reads and use_partition a Trainer counts each training mini-batch's input
    rows (never an evaluation chunk's); take_reads hands them over and counting goes on."""
    from fgnn.config import ModelConfig
    from fgnn.executors import trainer as trainer_mod
    from fgnn.models import build_model
    from fgnn.sampling.base import Sample

    n = 16
    model = build_model(ModelConfig("sage", hidden=4), 2, 2, 1)
    threads = torch.get_num_threads()
    try:
        t = trainer_mod.TrainerExecutor(torch.zeros(n, 2), torch.zeros(n, dtype=torch.long),
                                        model, None, 0, None, None)
    finally:
        torch.set_num_threads(threads)
    inputs = {0: torch.tensor([1, 2, 3]), 1: torch.tensor([3, 4]), 2: torch.tensor([9])}

    class _Get:
        def remote(self, name, generation, timeout):
            return ("item", types.SimpleNamespace(task_id=self.task, ref=None, producer="s",
                                                  nbytes=0), 0.0)

    class _Sampler:
        def sample(self, epoch, task_id, plan):
            ids = inputs[task_id]
            return Sample(input_nodes=ids, seeds=ids[:1], blocks=[]), 0.0, 0.0

    get = _Get()
    t.queue, t.local_sampler = types.SimpleNamespace(get=get), _Sampler()
    monkeypatch.setattr(trainer_mod.host, "get", lambda ref, timeout=None: ref)
    assert t.take_reads() is None
    get.task = 0
    t._take(0, 0)  # not counting yet
    t.count_reads(n)
    for task, plan in ((0, None), (1, None), (2, object())):  # task 2: an evaluation chunk
        get.task = task
        assert t._take(0, 0, plan)[0] == task
    assert t.take_reads().tolist() == _reads(n, [1, 2, 4]).add(_reads(n, [3], 2)).tolist()
    assert t.take_reads().tolist() == [0] * n
    t._reads = None  # what use_partition does
    assert t.take_reads() is None


def test_an_epochs_traffic_is_summed_per_node_by_tier():
    from fgnn.cache.node_partition import hash_partition

    part = FeaturePartitioning("hash", 0.0)
    part.partition = hash_partition(10, 2)
    part.node_of = {"a": 0, "b": 1, "c": 1}

    def got(dev, local, remote, wait):
        return {"rows": {"device": dev, "local": local, "remote": remote},
                "bytes": {"device": 4 * dev, "local": 4 * local, "remote": 4 * remote},
                "remote_wait_s": wait}

    nodes = part.take_epoch({"a": got(1, 2, 3, 0.5), "b": got(0, 1, 1, 0.25),
                             "c": got(2, 0, 4, 0.25), "sampler": None})
    assert nodes[0]["rows"] == {"device": 1, "local": 2, "remote": 3}
    assert nodes[1]["rows"] == {"device": 2, "local": 1, "remote": 5}
    assert nodes[1]["bytes"]["remote"] == 20 and nodes[1]["remote_wait_s"] == 0.5
    assert part.epochs == [nodes]
    rep = part.report()
    assert rep["host_rows"] == [5, 5] and rep["traffic"] == [nodes] and rep["nodes"] == 2
    assert torch.equal(part.partition.owner, torch.arange(10) % 2)


def test_the_report_prints_each_nodes_host_rows_and_mean_traffic_after_the_fill():
    from fgnn.report import _partition_text

    def rec(node, remote):
        return {"node": node, "rows": {"device": 1, "local": 2, "remote": remote},
                "bytes": {"device": 4, "local": 8, "remote": 4096 * remote},
                "remote_wait_s": 0.5}

    part = {"strategy": "hotness", "nodes": 2, "host_rows": [6, 7], "num_rows": 10,
            "replicated_rows": 3, "trainers": {"t": 0},
            "traffic": [[rec(0, 1000), rec(1, 1000)], [rec(0, 2), rec(1, 0)],
                        [rec(0, 4), rec(1, 0)]]}
    lines = _partition_text(part)
    assert lines[0] == "nodes    hotness over 2 nodes: host rows 6, 7 of 10 (3 replicated)"
    assert "node 0 per epoch: device 1 rows, local 2 (8 B), remote 3 (12.0 KiB)" in lines[1]
    assert "remote 0 (0 B), remote wait 0.500s" in lines[2]
    assert _partition_text(None) == []
    measured = dict(part, owners_from="measured", node_reads=[1200.4, 800.0])
    assert _partition_text(measured)[0].endswith(
        "; owners by warm-up reads per node (1200, 800 per epoch)")
    assert _partition_text(dict(part, owners_from="even split"))[0].endswith(
        "; owners row mod M (no warm-up reads counted)")


def test_a_typed_job_refuses_a_partitioned_store_in_one_line():
    from fgnn.runtime.cache_plan_typed import HeteroCachePlanner
    from fgnn.runtime.workers import Services

    cfg = JobConfig(cache=CacheConfig(feature_partition="hotness"),
                    runtime=RuntimeConfig(address="auto"))
    with pytest.raises(ValueError, match="feature_partition='hotness' is not supported on a typed"):
        HeteroCachePlanner(cfg, types.SimpleNamespace(feature_row_bytes=64), None, 1, False,
                           Services(), types.SimpleNamespace(), None)
