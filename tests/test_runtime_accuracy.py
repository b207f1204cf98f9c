"""Accuracy holds as devices grow: factored training on 8 logical devices learns like one process.

* Cora, GCN and GraphSAGE: the mean test accuracy over three seeds of
  :class:`~fgnn.runtime.driver.Runtime` (1 Sampler with its standby, 7 Trainers, each mini-batch
  cut into 8 tasks whose gradients the parameter server averages into one step) lies within 2.5
  points of :func:`fgnn.training.fit` with the same model, sampler and hyper-parameters. Both
  score with exact full-neighbour inference (the runtime with ``eval_mode="layerwise"``), so
  only training differs.

Why 2.5 points: a run with several Trainers does not repeat exactly (which tasks share a step
depends on timing; docs/concepts.md, Seeds). Measured on 2026-11-25 (GraphSAGE, 2 shared cores):
repeats of one seed at 8 devices spread with a standard deviation of about 1 point (seed 1:
0.783-0.808 over five runs), and 15 runs averaged 0.5-0.9 points below ``fit`` on the same
seeds (``fit``, seeds 0-9: 0.805-0.819). A mean of three seeds then lies within 0.6 points of its
expectation (one standard deviation), and a 1.5-point bound failed about one CI run in four;
2.5 points is that expectation plus 2.7 standard deviations. It still catches what the test is
for: before the rule of :mod:`fgnn.exchange.ps`, 8 devices were 12 points below one process.
* PinSAGE on a synthetic graph with 8 devices ends clearly above the majority class.

Before the rule of :mod:`fgnn.exchange.ps` (plain asynchronous updates, one step per task), 8
devices left PinSAGE at chance and GraphSAGE on the default graph 12 points below one process.
"""

from __future__ import annotations

import time

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,  # noqa: E402
                         SamplerConfig, TrainConfig)
from fgnn.data import load_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime  # noqa: E402
from fgnn.models import build_model  # noqa: E402
from fgnn.sampling.khop import KHop  # noqa: E402
from fgnn.training import fit  # noqa: E402

SEEDS = (0, 1, 2)
DEVICES = 8
PINSAGE_GRAPH = ("rmat:scale=10,edge_factor=8,feat_dim=16,num_classes=4,train_frac=0.5,"
                 "val_frac=0.2,test_frac=0.3,seed=0")


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like the executors; the cores are shared with Ray's workers
    yield
    torch.set_num_threads(threads)


def cora_job(model: str, seed: int) -> JobConfig:
    return JobConfig(
        dataset="cora",
        model=ModelConfig(model, hidden=64, dropout=0.5),
        sampler=SamplerConfig(fanouts=(10, 10)),
        cache=CacheConfig(policy="presc", cache_ratio=0.3),
        train=TrainConfig(epochs=15, batch_size=28, lr=0.01, weight_decay=5e-4, seed=seed,
                          eval_mode="layerwise"),
        runtime=RuntimeConfig(mode="factored", devices=DEVICES, samplers=1))


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_factored_cora_on_8_devices_matches_the_single_process_loop(ray_cluster, one_thread,
                                                                   planetoid_root, model):
    from fgnn.data.planetoid import load_planetoid

    ds = load_planetoid("cora", planetoid_root)
    ref, got = [], []
    start = time.perf_counter()
    for seed in SEEDS:
        cfg = cora_job(model, seed)
        torch.manual_seed(seed)
        net = build_model(cfg.model, ds.feat_dim, ds.num_classes, 2)
        ref.append(fit(ds, net, KHop(cfg.sampler.fanouts), cfg.train).test_acc)
        rt = Runtime(cfg, ds, sampler=KHop(cfg.sampler.fanouts))
        result = rt.run()
        got.append(result.final["test_acc"])
        assert result.allocation["trainers"] == DEVICES - 1
        # every epoch, the uncached warm-up included, takes 140 / 28 optimizer steps
        assert [d["steps"] for d in rt.details] == [5] * cfg.train.epochs
    mean_ref, mean_got = sum(ref) / len(ref), sum(got) / len(got)
    print(f"\ncora {model}, {DEVICES} devices: fit {ref} mean {mean_ref:.4f}; runtime {got} "
          f"mean {mean_got:.4f}; {time.perf_counter() - start:.0f} s")
    assert mean_ref > 0.7  # the loop itself learns
    assert abs(mean_got - mean_ref) <= 0.025


@pytest.mark.slow
def test_pinsage_on_8_devices_learns(ray_cluster, one_thread):
    ds = load_dataset(PINSAGE_GRAPH)
    majority = torch.bincount(ds.labels[ds.test_idx]).max().item() / ds.test_idx.numel()
    cfg = JobConfig(
        dataset=PINSAGE_GRAPH,
        model=ModelConfig("pinsage", hidden=64, dropout=0.5),
        sampler=SamplerConfig(kind="random_walk"),
        cache=CacheConfig(policy="degree", cache_ratio=0.2),
        train=TrainConfig(epochs=10, batch_size=64, lr=0.01, seed=0),
        runtime=RuntimeConfig(mode="factored", devices=DEVICES, samplers=1))
    start = time.perf_counter()
    result = Runtime(cfg, ds).run()
    acc = result.final["test_acc"]
    print(f"\npinsage, {DEVICES} devices: test {acc:.4f}, majority class {majority:.4f}; "
          f"{time.perf_counter() - start:.0f} s")
    assert acc >= majority + 0.15
