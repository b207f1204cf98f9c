"""Factored training on Cora with 4 logical devices reaches the single-process loop's accuracy.

Three seeds; the mean test accuracy of :class:`~fgnn.executors.runtime.Runtime` (1 Sampler with
its standby, 3 Trainers, asynchronous updates through the parameter server) must lie within 1.5
points of :func:`fgnn.training.fit` with the same model, sampler and hyper-parameters.
"""

from __future__ import annotations

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,  # noqa: E402
                         SamplerConfig, TrainConfig)
from fgnn.executors.runtime import Runtime  # noqa: E402
from fgnn.models import build_model  # noqa: E402
from fgnn.sampling.khop import KHop  # noqa: E402
from fgnn.training import fit  # noqa: E402

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def ray_cluster():
    if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) < 4:
        ray.shutdown()
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=4, num_gpus=4, include_dashboard=False,
                 log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def cora_job(seed: int) -> JobConfig:
    return JobConfig(
        dataset="cora",
        model=ModelConfig("sage", hidden=64, dropout=0.5),
        sampler=SamplerConfig(fanouts=(10, 10)),
        cache=CacheConfig(policy="presc", cache_ratio=0.3),
        train=TrainConfig(epochs=15, batch_size=28, lr=0.01, weight_decay=5e-4, seed=seed),
        runtime=RuntimeConfig(mode="factored", devices=4, samplers=1))


@pytest.mark.slow
def test_factored_cora_matches_the_single_process_loop(ray_cluster, planetoid_root):
    from fgnn.data.planetoid import load_planetoid

    ds = load_planetoid("cora", planetoid_root)
    ref, got = [], []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like the executors; the cores are shared with Ray's workers
    try:
        _compare(ds, ref, got)
    finally:
        torch.set_num_threads(threads)
    mean_ref, mean_got = sum(ref) / len(ref), sum(got) / len(got)
    print(f"cora test acc: fit {ref} mean {mean_ref:.4f}; runtime {got} mean {mean_got:.4f}")
    assert mean_ref > 0.6  # the loop itself learns
    assert abs(mean_got - mean_ref) <= 0.015


def _compare(ds, ref: list, got: list) -> None:
    for seed in SEEDS:
        cfg = cora_job(seed)
        torch.manual_seed(seed)
        model = build_model(cfg.model, ds.feat_dim, ds.num_classes, 2)
        hist = fit(ds, model, KHop(cfg.sampler.fanouts), cfg.train)
        ref.append(hist.test_acc)
        result = Runtime(cfg, ds, sampler=KHop(cfg.sampler.fanouts)).run()
        got.append(result.final["test_acc"])
        assert result.allocation["trainers"] == 3
