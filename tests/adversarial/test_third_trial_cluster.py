"""The third hostile trial (issue 40), ``--address auto``: the job says which cluster it joined
(the address Ray resolved, not ``auto``) and what that cluster holds, so a job that lands on
another job's cluster says so on the console.
"""

from __future__ import annotations

import io
import types

import pytest

from fgnn.config import JobConfig, RuntimeConfig
from fgnn.job import Job
from fgnn.monitor.summary import cluster_text

RESOURCES = {"CPU": 16.0, "GPU": 2.0, "memory": 24 * 2 ** 30, "object_store_memory": 2 ** 30,
             "node:10.1.2.3": 1.0, "node:__internal_head__": 1.0, "accelerator_type:H100": 1.0}


def test_cluster_text_names_address_nodes_and_resources():
    text = cluster_text("10.1.2.3:6379", RESOURCES, nodes=1)
    assert text == "10.1.2.3:6379 (1 node: 16 CPUs, 2 GPUs, 24.0 GiB memory)"
    assert cluster_text("h:1", {"CPU": 1.0}, nodes=3) == "h:1 (3 nodes: 1 CPU, 0 GPUs)"


class _Ctx:
    dashboard_url = None
    address_info = {"gcs_address": "10.1.2.3:6379", "address": "10.1.2.3:6379"}


@pytest.fixture
def fake_cluster(monkeypatch):
    """``ray.init`` joins nothing: it returns a context of a cluster at 10.1.2.3:6379."""
    import ray
    calls = []
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw) or _Ctx())
    monkeypatch.setattr(ray, "cluster_resources", lambda: dict(RESOURCES))
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": False}])
    return calls


@pytest.mark.parametrize("address", ["auto", "10.1.2.3:6379"])
def test_joining_prints_the_resolved_address_and_the_resources(fake_cluster, address):
    out = io.StringIO()
    job = Job(JobConfig(runtime=RuntimeConfig(devices=2, address=address)), out=out)
    url, gpus = job._start_ray()
    assert fake_cluster[0]["address"] == address and gpus == 2.0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"fgnn: joining the Ray cluster at {address}..."
    assert lines[1] == ("fgnn: joined the Ray cluster at 10.1.2.3:6379 (1 node: 16 CPUs, "
                        "2 GPUs, 24.0 GiB memory)"), lines


def test_a_client_context_without_an_address_names_the_address_given(fake_cluster,
                                                                     monkeypatch):
    import ray
    monkeypatch.setattr(ray, "init", lambda **kw: types.SimpleNamespace(dashboard_url=None))
    out = io.StringIO()
    Job(JobConfig(runtime=RuntimeConfig(devices=2, address="ray://h:10001")),
        out=out)._start_ray()
    assert "fgnn: joined the Ray cluster at ray://h:10001 (1 node: 16 CPUs" in out.getvalue()
