"""The runtime's cache ratios come from one measured training step (FGNN §6.1)."""

from __future__ import annotations

import pytest
import torch

from fgnn.cache.budget import alpha_from_peak
from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,
                         TrainConfig)
from fgnn.data.synthetic import rmat_dataset
from fgnn.executors.runtime import Runtime


@pytest.fixture(scope="module")
def dataset():
    # features (512 x 128 x 4 = 256 KiB) outweigh the topology, so both ratios are in (0, 1)
    return rmat_dataset(scale=9, edge_factor=8, feat_dim=128, num_classes=4, train_frac=0.3125,
                        val_frac=0.1, test_frac=0.1, seed=0)


def _job(gib: float, mode: str = "factored") -> JobConfig:
    return JobConfig(model=ModelConfig("sage", hidden=16, dropout=0.0),
                     sampler=SamplerConfig(fanouts=(4, 4)),
                     cache=CacheConfig(policy="degree", device_memory_gib=gib),
                     train=TrainConfig(epochs=1, batch_size=16, seed=1),
                     runtime=RuntimeConfig(mode=mode, devices=2))


def test_both_cache_ratios_come_from_one_step(dataset, monkeypatch):
    import fgnn.training as training

    calls = []
    real = training.train_step

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(training, "train_step", counting)
    rt = Runtime(_job(1.0), dataset)
    rt._cache_ratios()
    peak = rt.step_peak_bytes
    assert len(calls) == 1 and peak > 0
    # a budget that caches about half the features: the resident layout loses the graph bytes
    n, row, g = dataset.num_nodes, dataset.feature_row_bytes, dataset.graph.nbytes()
    budget = peak + n * row // 2
    rt = Runtime(_job(budget / 2 ** 30), dataset)
    full, resident, got_budget = rt._cache_ratios()
    assert len(calls) == 2                       # one more step for the second job, not two
    assert rt.step_peak_bytes == peak            # the same step, measured the same way
    kw = {"budget_bytes": got_budget, "num_nodes": n, "row_bytes": row}
    assert full == alpha_from_peak(peak, **kw).alpha
    assert resident == alpha_from_peak(peak, graph_bytes=g, **kw).alpha
    assert 0.0 < resident < full < 1.0


def test_resident_model_and_batch_count_from_the_start_of_the_step(dataset):
    # the step closure names what lives on the device before the step (model, optimizer, the
    # batch); the CPU meter counts it from the start instead of only once the step touches it
    from fgnn.cache.budget import TensorAllocationMeter, resident_bytes

    rt = Runtime(_job(1.0), dataset)
    step, resident = rt._one_step_closure()
    before = resident_bytes(*resident)             # model, batch (Adam state comes later)
    assert before > resident_bytes(resident[0]) > 0
    meter = TensorAllocationMeter(resident)
    peak = meter.measure(step)
    assert meter.resident_peak == before
    assert peak >= meter.resident_peak + meter.step_peak and meter.step_peak > 0
    step2, _ = rt._one_step_closure()
    assert peak >= TensorAllocationMeter().measure(step2)
