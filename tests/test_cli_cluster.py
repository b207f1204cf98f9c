"""launch.py --address: one job across a two-node Ray cluster (head + 1 worker node).

Each node offers 2 logical GPUs, so ``--devices 4`` can only be placed by using both nodes.
Slow (two raylets start); kept lean: tiny graph, one epoch.
"""

from __future__ import annotations

import json

import pytest

from fgnn.cli import main
from fgnn.report import validate_report

TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=2"


@pytest.fixture
def two_node_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    assert not ray.is_initialized()
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "num_gpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_job_across_two_nodes(two_node_cluster, tmp_path, capsys):
    import ray
    report = tmp_path / "cluster.json"
    rc = main(["--address", two_node_cluster.address, "--dataset", TINY, "--devices", "4",
               "--samplers", "1", "--fanouts", "4,4", "--hidden", "16", "--batch-size", "32",
               "--epochs", "1", "--no-progress", "--report", str(report)])
    assert rc == 0
    assert not ray.is_initialized()  # the job disconnected; the cluster itself keeps running
    out = capsys.readouterr().out
    assert "4 devices" in out and "Ray cluster (4 GPU resources" in out
    data = json.loads(report.read_text())
    validate_report(data)
    assert data["allocation"]["devices"] == 4
    assert (data["allocation"]["samplers"], data["allocation"]["trainers"]) == (1, 3)
    assert data["config"]["runtime"]["address"] == two_node_cluster.address
    assert report.with_suffix(".png").exists()
