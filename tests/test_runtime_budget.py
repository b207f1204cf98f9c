"""Cache sizing in the runtime: measured by each Trainer on its own device during the warm-up
epoch, planned item by item (FGNN §6.1), filled after the warm-up.

No training step runs on the driver for sizing: the plans come from the Trainers' reports.
"""

from __future__ import annotations

import math

import pytest

from fgnn.cache.budget import SIZING_MARGIN_MIN_BYTES, plan_device_cache
from fgnn.cache.sizing import eval_ratio
from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,
                         TrainConfig)
from fgnn.data.synthetic import rmat_dataset

ray = pytest.importorskip("ray")

from fgnn.runtime.driver import Runtime  # noqa: E402


@pytest.fixture(scope="module")
def dataset():
    # 4096 vertices x 512 features x 4 B = 8 MiB of features against budgets of tens of MiB
    return rmat_dataset(scale=12, edge_factor=8, feat_dim=512, num_classes=4, train_frac=0.05,
                        val_frac=0.02, test_frac=0.02, seed=0)


def _job(gib: float, mode: str = "factored", devices: int = 2) -> JobConfig:
    return JobConfig(model=ModelConfig("sage", hidden=64, dropout=0.0),
                     sampler=SamplerConfig(fanouts=(5, 5)),
                     cache=CacheConfig(policy="degree", device_memory_gib=gib),
                     # a chunk the user sets: the sizing budgets it as it is (one left unset
                     # shrinks to leave the cache room, tests/test_cache_never_empty.py)
                     train=TrainConfig(epochs=2, batch_size=64, seed=1, eval_batch_size=1024),
                     runtime=RuntimeConfig(mode=mode, devices=devices, samplers=1))


@pytest.fixture
def no_driver_step(monkeypatch):
    """A training step or peak measurement on the driver fails the test."""
    def refuse(*a, **k):
        raise AssertionError("the driver ran a training step to size the cache")

    import fgnn.cache.budget as budget
    import fgnn.training as training
    monkeypatch.setattr(training, "train_step", refuse)
    monkeypatch.setattr(budget, "measure_step_peak", refuse)


def test_plans_come_from_the_trainers_measurements(ray_cluster, dataset, no_driver_step):
    n, row = dataset.num_nodes, dataset.feature_row_bytes
    # a first run with room for everything learns what the step costs...
    first = Runtime(_job(1.0), dataset).run().allocation["cache_plans"]["resident"]
    assert first["alpha"] == 1.0
    # ...then a budget that leaves about half the features after model, step, evaluation
    # chunk, gather, fragmentation, topology and sampling working set: the two layouts get
    # different partial caches
    # (at this budget the margin is its 32 MiB floor)
    gib = (SIZING_MARGIN_MIN_BYTES + sum(first["resident"].values()) + n * row // 2) / 2 ** 30
    rt = Runtime(_job(gib), dataset)
    result = rt.run()
    a = result.allocation
    full, res = a["cache_plans"]["full"], a["cache_plans"]["resident"]
    # every device-resident structure is itemised
    working = {"model", "step_peak", "eval_chunk", "gather", "fragmentation", "context"}
    assert set(full["resident"]) == working
    assert set(res["resident"]) == working | {"graph", "sampler"}
    # an evaluation chunk (the default chunk against a task of 64 / R seeds) is sized from the
    # measured step; logical devices have no CUDA context
    ratio = eval_ratio(rt.config.train.eval_batch_size, 64, rt.step_tasks)
    assert ratio > 1 and full["resident"]["context"] == 0
    assert full["resident"]["eval_chunk"] == math.ceil((ratio - 1) * full["resident"]["step_peak"])
    assert full["resident"]["gather"] >= 64 * row  # the input rows of a task, at least
    assert res["resident"]["graph"] == dataset.graph.nbytes()
    assert res["resident"]["sampler"] >= 4 * n  # the remap scratch array at least
    # the step peak counts the batch (at least its seeds' feature rows) and the model
    assert full["resident"]["step_peak"] > 64 * row and full["resident"]["model"] > 0
    # the plans follow the formula exactly, with the stated margin (32 MiB at these budgets)
    for p, key in ((full, "alpha"), (res, "alpha_resident")):
        assert p["margin_bytes"] == 32 << 20
        again = plan_device_cache(p["budget_bytes"], p["resident"], num_nodes=n, row_bytes=row)
        assert a[key] == again.alpha == p["alpha"]
        assert p["free_bytes"] >= 0
    assert 0.0 < a["alpha_resident"] < a["alpha"] < 1.0
    assert a["budget_bytes"] == int(gib * 2 ** 30)
    # the warm-up epoch ran uncached; the next one reads the planned cache
    assert result.epochs[0].hit_rate == 0.0 and result.epochs[1].hit_rate > 0.0


def test_a_budget_smaller_than_the_step_caches_nothing(ray_cluster, dataset, no_driver_step):
    rt = Runtime(_job(1 / 1024), dataset)  # 1 MiB: the margin alone is larger
    result = rt.run()
    assert result.allocation["alpha"] == 0.0 and result.allocation["alpha_resident"] == 0.0
    assert result.allocation["cache_plans"]["full"]["free_bytes"] < 0
    assert all(e.hit_rate == 0.0 for e in result.epochs)
