"""The memory plan made before a job starts: its terms from the dataset's sizes and the flags,
a plan over the limit refused in one line naming the largest term and its flag (before Ray
starts), and the same job passing with that flag lowered."""

from __future__ import annotations

import dataclasses

import pytest

import fgnn.memory_plan as mp
from fgnn.config import CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, \
    TrainConfig
from fgnn.data.memory import MemoryLimit
from fgnn.data.outofcore import GraphRecipe, build
from fgnn.data.ondisk import load_ondisk
from fgnn.job import Job, JobConfigError
from fgnn.memory_plan import plan_job

GIB = 1 << 30


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "g"
    return build(GraphRecipe("g", 5000, 50000, feat_dim=64, num_classes=4), path,
                 progress=False).path


def _config(built, batch: int = 400, **kw) -> JobConfig:
    return JobConfig(dataset=f"ondisk:{built}", model=ModelConfig(name="sage", hidden=32),
                     sampler=SamplerConfig(fanouts=(10, 5)),
                     train=TrainConfig(epochs=1, batch_size=batch, steps_per_epoch=1,
                                       eval_batch_size=batch),
                     cache=CacheConfig(cache_ratio=kw.pop("ratio", 0.5),
                                       peer_tier=kw.pop("peer_tier", "auto")),
                     runtime=RuntimeConfig(devices=kw.pop("devices", 4)), **kw)


def test_terms_follow_the_sizes_and_flags(built):
    ds = load_ondisk(built)
    cfg = _config(built)
    plan = plan_job(cfg, ds, limit=MemoryLimit(100 * GIB, "test"), logical=True)
    terms = {t.name: t for t in plan.terms}
    cache = terms["device cache (logical device: host memory)"]
    # replicated rows: one buffer a host, which every Trainer maps; private copies otherwise
    assert cache.each == int(0.5 * 5000 * 64 * 4) and cache.count == 1
    own = plan_job(dataclasses.replace(cfg, cache=dataclasses.replace(cfg.cache,
                                                                      peer_tier="host")),
                   ds, limit=MemoryLimit(100 * GIB, "test"), logical=True)
    assert {t.name: t for t in own.terms}[cache.name].count == plan.layout["trainers"]
    assert terms["topology (mapped files: one copy a host)"].count == 1
    assert terms["topology (mapped files: one copy a host)"].each == ds.graph.nbytes()
    feats = terms["features (mapped file)"]
    assert not feats.counted and feats.each == 5000 * 64 * 4
    # the evaluation chunk of 400 seeds, fanouts 10, 5: 400, 4400, 26400 vertices at most
    # (capped at N = 5000), and 4000 + 22000 edges (E = 50000)
    sizes, edges = mp._hops(400, (10, 5), 5000, 50000)
    assert sizes == [400, 4400, 5000] and edges == 4000 + 22000
    work = (5000 * 64 * (4 * mp.INPUT_COPIES + 4) + (400 + 4400) * 32 * 4 * mp.ACTIVATION_COPIES
            + 2 * (8 * (400 + 4400 + 5000) + 16 * edges))
    assert terms["evaluation chunk working set"].each == work
    # the ranking on the driver; one holder map a host (uint8 for 4 devices); each Trainer
    # holds the group's cached ids
    assert terms["cache ranking (hotness and its order, on the driver)"].each == 16 * 5000
    assert terms["cache map (holder bits, one copy a host)"].each == 5000
    assert terms["cache map (holder bits, one copy a host)"].count == 1
    lookup = terms["cache lookup (the group's cached ids)"]
    rows = int(0.5 * 5000 * 64 * 4) // (64 * 4)
    # replicated (Rule 1): one table of the Trainers' ids, one of a standby's
    assert lookup.each == mp.LOOKUP_BYTES_PER_ROW * rows * 2
    assert lookup.count == plan.layout["trainers"] + plan.layout["standbys"]
    assert plan.total == sum(t.bytes for t in plan.terms if t.counted)
    on_gpu = plan_job(cfg, ds, limit=MemoryLimit(100 * GIB, "test"), logical=False)
    assert "device cache (logical device: host memory)" not in {t.name for t in on_gpu.terms}


def test_a_plan_over_the_limit_is_refused_naming_its_largest_term(built):
    ds = load_ondisk(built)
    plan = plan_job(_config(built, ratio=1.0), ds, limit=MemoryLimit(GIB, "a 1 GiB group"),
                    logical=True)
    with pytest.raises(ValueError) as e:
        plan.check()
    msg = str(e.value)
    assert "\n" not in msg and "more than the 1.0 GiB" in msg and "a 1 GiB group" in msg
    assert f"the largest term is {plan.largest().name}" in msg


def test_a_job_whose_cache_cannot_fit_stops_before_ray_and_passes_with_the_flag(
        built, monkeypatch):
    import ray

    # a small graph: make the processes' own bytes small, so the cache is the largest term as
    # on a large one
    monkeypatch.setattr(mp, "PROCESS_BYTES", 1 << 16)
    monkeypatch.setattr(mp, "RAY_SYSTEM_BYTES", 1 << 16)
    ds = load_ondisk(built)
    base = plan_job(_config(built, batch=8, ratio=0.0, peer_tier="host"), ds, limit=MemoryLimit(100 * GIB, "x"),
                    logical=True).total
    cache_each = 5000 * 64 * 4
    # room for everything but a cache of every row on each of the 3 Trainers (private copies:
    # --peer-tier host)
    limit = MemoryLimit(base + 2 * cache_each, "a test's cgroup")
    monkeypatch.setattr(mp, "host_memory_limit", lambda: limit)
    monkeypatch.setattr(mp, "LOGICAL_DEVICE_BYTES", 1 << 40)
    with pytest.raises(JobConfigError) as e:
        Job(_config(built, batch=8, ratio=1.0, peer_tier="host"), progress=False).run()
    assert e.value.field == "cache.cache_ratio" and "lower --cache-ratio (1.0)" in str(e.value)
    assert not ray.is_initialized()
    plan = plan_job(_config(built, batch=8, ratio=0.1, peer_tier="host"), ds, logical=True)
    assert plan.refusal() is None                                # the flag it named
