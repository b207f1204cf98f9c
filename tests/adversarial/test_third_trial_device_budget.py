"""The third hostile trial (issue 40), the automatic budget of a logical device: it was 1 GiB
whatever the memory group held, so in a 1 GiB group an on-disk dataset with 1 GiB of features
planned (and filled) a 1 GiB cache per Trainer. A logical device's memory is host memory: its
automatic budget is now a share of the host's limit (the cgroup's whole limit) over the
Trainers, at most 1 GiB, the same in the memory plan and in the runtime's cache sizing, and
for a typed (heterogeneous) dataset's cache as for a homogeneous one's.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import fgnn.memory_plan as mp
from fgnn.cache.budget import LOGICAL_CACHE_SHARE, logical_device_bytes
from fgnn.config import CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, \
    TrainConfig
from fgnn.data.memory import MemoryLimit
from fgnn.data.ondisk import load_ondisk
from fgnn.data.outofcore import GraphRecipe, build

GIB, MIB = 1 << 30, 1 << 20


def _group(total: int) -> MemoryLimit:
    return MemoryLimit(total - 100 * MIB, "a test's cgroup", total)


def test_the_budget_is_a_share_of_the_group_over_the_trainers():
    assert logical_device_bytes(1, _group(GIB)) == int(LOGICAL_CACHE_SHARE * GIB)
    assert logical_device_bytes(2, _group(GIB)) == int(LOGICAL_CACHE_SHARE * GIB) // 2
    assert logical_device_bytes(3, _group(64 * GIB)) == GIB          # at most 1 GiB
    assert logical_device_bytes(3, None) == GIB                      # limit unknown
    free_now = MemoryLimit(2 * GIB, "MemAvailable in /proc/meminfo")  # no whole limit: free now
    assert logical_device_bytes(1, free_now) == int(LOGICAL_CACHE_SHARE * 2 * GIB)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget") / "g"
    return build(GraphRecipe("g", 5000, 50000, feat_dim=64, num_classes=4), path,
                 progress=False).path


def _config(built, device_memory=None) -> JobConfig:
    return JobConfig(dataset=f"ondisk:{built}", model=ModelConfig(name="sage", hidden=32),
                     sampler=SamplerConfig(fanouts=(10, 5)),
                     train=TrainConfig(epochs=1, batch_size=64, eval_batch_size=64),
                     cache=CacheConfig(device_memory_gib=device_memory),
                     runtime=RuntimeConfig(devices=4))


def test_the_plan_counts_the_caches_the_group_can_hold(built):
    ds = load_ondisk(built)
    features = ds.num_nodes * ds.feature_row_bytes          # 1.2 MiB: "a 1 GiB" of the trial
    group = _group(4 * MIB)
    plan = mp.plan_job(_config(built), ds, limit=group, logical=True)
    cache = {t.name: t for t in plan.terms}["device cache (logical device: host memory)"]
    trainers = plan.layout["trainers"]
    # the 3 Trainers' replicated rows are one buffer a host (shared memory), each Trainer's
    # budget still its share of the group
    assert trainers == 3 and cache.count == 1
    assert cache.each == logical_device_bytes(3, group) < features
    roomy = mp.plan_job(_config(built), ds, limit=_group(64 * GIB), logical=True)
    assert {t.name: t for t in roomy.terms}[cache.name].each == features   # all of it fits
    given = mp.plan_job(_config(built, device_memory=0.0005), ds, limit=group, logical=True)
    assert {t.name: t for t in given.terms}[cache.name].each == int(0.0005 * GIB)


def test_the_runtime_sizes_the_cache_with_the_plans_budget(monkeypatch):
    import fgnn.data.memory as memory
    from fgnn.runtime.cache_plan import CachePlanner

    group = _group(GIB)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: group)
    roles = ("sampler", "trainer", "trainer", "standby")
    alive = lambda role: [r for r in roles if r == role]  # noqa: E731
    planner = SimpleNamespace(config=JobConfig(), workers=SimpleNamespace(alive=alive),
                              services=SimpleNamespace(gpus_per_device=1.0))
    budget = CachePlanner._device_budget(planner, [{"device_total_bytes": None}])
    assert budget == logical_device_bytes(2, group) == GIB // 8


def _typed_planner(cache: CacheConfig, trainers: int = 2) -> SimpleNamespace:
    """A stand-in :class:`~fgnn.runtime.cache_plan_typed.HeteroCachePlanner` with what ``_budgets``
    reads: a small typed graph, no measured model or step, ``trainers`` live Trainers."""
    from fgnn.data.synthetic_hetero import typed_synthetic
    from fgnn.runtime.cache_plan import CachePlanner

    roles = ("sampler",) + ("trainer",) * trainers
    planner = SimpleNamespace(
        config=JobConfig(cache=cache), dataset=typed_synthetic(papers=2000, feat_dim=64),
        step_peak_bytes=0, _model_bytes=0,
        workers=SimpleNamespace(alive=lambda role: [r for r in roles if r == role]),
        services=SimpleNamespace(gpus_per_device=1.0))
    planner._device_budget = lambda reports: CachePlanner._device_budget(planner, reports)
    return planner


def test_a_typed_job_takes_the_same_share_of_the_group(monkeypatch):
    """A typed (heterogeneous) dataset's cache had 1 GiB a logical device whatever the group
    held; it now gets the homogeneous rule's budget: the group's share over the Trainers."""
    import fgnn.data.memory as memory
    from fgnn.cache.hetero import feature_bytes
    from fgnn.runtime.cache_plan_typed import HeteroCachePlanner

    group = _group(2 * MIB)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: group)
    planner = _typed_planner(CacheConfig())
    features = feature_bytes(planner.dataset.graph)
    share = logical_device_bytes(2, group)
    assert share < features            # the group cannot hold every row: its share is cached
    full, _ = HeteroCachePlanner._budgets(planner, [{"device_total_bytes": None}])
    assert full == share
    given = _typed_planner(CacheConfig(device_memory_gib=0.0001))
    assert HeteroCachePlanner._budgets(given, [{}])[0] == int(0.0001 * GIB)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: _group(64 * GIB))
    assert HeteroCachePlanner._budgets(planner, [{}])[0] == features   # a roomy group: all
