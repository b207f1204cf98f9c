"""``--feature-partition``: the config's checks, the cluster's node names, and the per-node
traffic the driver sums from its Trainers (no Ray; the two-raylet run is tests/test_cluster.py)."""

from __future__ import annotations

import types

import pytest
import torch

from fgnn.cli import build_parser, config_from_args
from fgnn.config import CacheConfig, DiskConfig, JobConfig, RuntimeConfig, TrainConfig
from fgnn.executors._partition import FeaturePartitioning, cluster_nodes


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
    part = FeaturePartitioning("hash", 0.0)
    part.server_info = [{"node": 0, "ray_node_id": "A"}, {"node": 1, "ray_node_id": "B"},
                        {"node": 2, "ray_node_id": "B"}]
    got = part._assign({0: "A", 1: "B", 2: "B"},
                       [_exec("t0", 0), _exec("t1", 1), _exec("t2", 2)])
    assert got == {"t0": 0, "t1": 1, "t2": 2}
    with pytest.raises(ValueError, match="t9 runs on Ray node C"):
        part._assign({9: "C"}, [_exec("t9", 9)])


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


def test_a_typed_job_refuses_a_partitioned_store_in_one_line():
    from fgnn.executors._hetero import HeteroCachePlanner
    from fgnn.executors._workers import Services

    cfg = JobConfig(cache=CacheConfig(feature_partition="hotness"),
                    runtime=RuntimeConfig(address="auto"))
    with pytest.raises(ValueError, match="feature_partition='hotness' is not supported on a typed"):
        HeteroCachePlanner(cfg, None, None, 1, False, Services(), types.SimpleNamespace(), None)
