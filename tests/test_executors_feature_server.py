"""Feature servers on two simulated Ray nodes (custom resources): local rows through the object
store, remote rows from their owner's server."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fgnn.cache import FeatureStore, hotness_partition
from fgnn.executors.feature_server import FeatureServer, node_source, start_feature_servers
from fgnn.raystart import local_system_config


def test_feature_server_in_process(tmp_path):
    feats = np.arange(10 * 2, dtype=np.float32).reshape(10, 2)
    counts = torch.zeros(2, 10)
    counts[0, :5] = 1
    counts[1, 5:] = 1
    counts[:, 9] = 5  # the hottest row: replicated
    p = hotness_partition(counts, 2, budget=1)
    path = tmp_path / "f.npy"
    np.save(path, feats)
    s = FeatureServer(p, 1, str(path))
    assert s.ids.tolist() == [5, 6, 7, 8, 9]
    assert np.array_equal(s.read(np.array([9, 6])), feats[[9, 6]])
    with pytest.raises(ValueError, match="does not hold row 0"):
        s.read(np.array([0]))
    with pytest.raises(ValueError, match="features"):
        FeatureServer(p, 0, feats[:3])


@pytest.mark.own_ray  # other resources than the shared cluster
def test_trainer_sources_on_two_simulated_nodes():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, resources={"fgnn_node0": 1, "fgnn_node1": 1}, include_dashboard=False,
             log_to_driver=False, _system_config=local_system_config())
    try:
        n, m = 5000, 2
        feats = torch.rand(n, 16)
        g = torch.Generator().manual_seed(0)
        counts = torch.randint(0, 3, (m, n), generator=g).float()
        p = hotness_partition(counts, m, budget=500)
        servers = start_feature_servers(p, ray.put(feats.numpy()))
        infos = ray.get([s.info.remote() for s in servers])
        assert [i["rows"] for i in infos] == p.host_rows()
        ids = torch.randperm(n, generator=g)[:1200]
        for node in range(m):
            src = node_source(p, node, servers)
            store = FeatureStore.single(src, None)
            assert torch.equal(store.gather(ids), feats[ids])
            st = src.take_stats()
            held = p.holds(node)[ids]
            assert st["rows"] == {"local": int(held.sum()), "remote": int((~held).sum())}
            assert st["rows"]["remote"] > 0 and st["remote_wait_s"] > 0
    finally:
        ray.shutdown()
