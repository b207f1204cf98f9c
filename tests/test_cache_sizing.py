"""Cache sizing terms (issue 18, defect 3): what the plan leaves beside the cache covers an
evaluation chunk, ``gather``'s temporary rows, the Sampler's reserved bytes, CUDA contexts and
fragmentation -- not only the warm-up training step.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from conftest import random_graph
from fgnn.cache import FeatureStore, load_cache
from fgnn.cache.budget import TensorAllocationMeter, plan_device_cache, resident_bytes
from fgnn.cache.sizing import (CUDA_CONTEXT_BYTES, FRAGMENTATION_FRACTION, device_terms,
                               eval_ratio, sampler_bytes)
from fgnn.config import ModelConfig
from fgnn.evaluation import score_logits
from fgnn.executors._memory import StepMemoryMeter, batch_bytes
from fgnn.exchange.ps import flatten
from fgnn.models import build_model
from fgnn.sampling import KHop

MIB = 1 << 20


def test_eval_ratio_is_the_chunk_over_a_training_task():
    assert eval_ratio(8000, 8000, 8) == 8.0  # 8 devices: 1000-seed tasks, 8000-seed chunks
    assert eval_ratio(4096, 1000, 3) == 4096 / 334
    assert eval_ratio(100, 1000, 1) == 1.0  # a smaller chunk than the step: the step bounds it
    assert eval_ratio(8000, 8000, 8, evaluates=False) == 1.0
    with pytest.raises(ValueError, match="eval_chunk"):
        eval_ratio(0, 10, 1)


def test_device_terms_exact():
    report = {"model_bytes": 1000, "step_peak_bytes": 10_000, "gather_bytes": 2_000}
    t = device_terms(report, ratio=8.0)
    assert t == {"model": 1000, "step_peak": 10_000, "eval_chunk": 70_000, "gather": 16_000,
                 "fragmentation": math.ceil(FRAGMENTATION_FRACTION * 96_000), "context": 0}
    cuda = device_terms(report, ratio=8.0, cuda=True, processes=2, graph_bytes=500,
                        sampler=700)
    assert cuda["context"] == 2 * CUDA_CONTEXT_BYTES
    assert (cuda["graph"], cuda["sampler"]) == (500, 700)
    assert device_terms(report, cuda=True)["context"] == CUDA_CONTEXT_BYTES
    with pytest.raises(ValueError, match="ratio"):
        device_terms(report, ratio=0.5)


def test_sampler_share_uses_reserved_bytes_and_scales_with_the_chunk():
    ws = {"scratch_bytes": 400, "max_sample_bytes": 100, "graph_bytes": 5000,
          "cuda_peak_bytes": 6000, "cuda_reserved_bytes": 8000}
    # reserved, not allocated: 8000 - 5000 - 400 of per-sample bytes
    assert sampler_bytes(ws) == 400 + 2600
    assert sampler_bytes(ws, 2.0) == 400 + 5200
    cpu = {"scratch_bytes": 400, "max_sample_bytes": 100, "graph_bytes": 5000,
           "cuda_peak_bytes": None, "cuda_reserved_bytes": None}
    assert sampler_bytes(cpu, 3.0) == 400 + 3 * 400


@pytest.mark.parametrize("term", ["model", "step_peak", "eval_chunk", "gather", "fragmentation",
                                  "context", "graph", "sampler"])
def test_the_plan_subtracts_every_term(term):
    n, row, budget = 10_000_000, 1024, 8 << 30  # 9.5 GiB of features: a partial cache
    report = {"model_bytes": 10 * MIB, "step_peak_bytes": 40 * MIB, "gather_bytes": 8 * MIB}
    terms = device_terms(report, ratio=8.0, cuda=True, processes=2, graph_bytes=300 * MIB,
                         sampler=sampler_bytes({"scratch_bytes": 4 * MIB,
                                                "max_sample_bytes": 0,
                                                "graph_bytes": 300 * MIB,
                                                "cuda_reserved_bytes": 420 * MIB}, 8.0))
    margin = max(32 * MIB, int(0.05 * budget))
    plan = plan_device_cache(budget, terms, num_nodes=n, row_bytes=row)
    assert plan.num_cached == (budget - sum(terms.values()) - margin) // row
    more = dict(terms, **{term: terms[term] + 100 * row})
    assert plan_device_cache(budget, more, num_nodes=n, row_bytes=row).num_cached == \
        plan.num_cached - 100
    # the terms of the example are all there, and not small
    assert terms["eval_chunk"] == 7 * 40 * MIB and terms["gather"] == 64 * MIB
    assert terms["context"] == 2 * CUDA_CONTEXT_BYTES
    assert terms["sampler"] == 4 * MIB + 8 * (420 - 300 - 4) * MIB


def _setup(num_nodes=20_000, dim=128):
    graph = random_graph(num_nodes, 10 * num_nodes, seed=3)
    feats = torch.randn(num_nodes, dim, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 8, (num_nodes,), generator=torch.Generator().manual_seed(1))
    hot = torch.rand(num_nodes, generator=torch.Generator().manual_seed(2))
    store = FeatureStore.single(feats, load_cache(hot, 0.5, feats), threads=1)
    torch.manual_seed(0)
    model = build_model(ModelConfig("sage", hidden=64, dropout=0.0), dim, 8, 2)
    return graph, labels, store, model


def _batch(graph, labels, store, seeds, gen):
    sample = KHop([10, 5]).sample(graph, seeds, gen)
    x = store.gather(sample.input_nodes)
    return SimpleNamespace(sample=sample, x=x, labels=labels[sample.seeds])


def test_an_evaluation_chunk_fits_in_what_the_plan_leaves():
    """The allocation meter over an evaluation chunk (8x a training task's seeds, scored while
    the next chunk is gathered) against the sizing terms planned from the warm-up's measured
    training step. Sizing from the training step alone leaves too little."""
    graph, labels, store, model = _setup()
    gen = torch.Generator().manual_seed(4)
    task, chunk = 64, 512
    perm = torch.randperm(graph.num_nodes, generator=gen)
    train = _batch(graph, labels, store, perm[:task], gen)

    def train_step(b):
        model.train()
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(b.sample.blocks, b.x), b.labels)
        loss.backward()
        return {"grad": flatten([p.grad for p in model.parameters()])}

    meter = StepMemoryMeter(model, torch.device("cpu"), pipelined=True)
    assert meter.run(train_step, train) is not None
    report = meter.report()
    ratio = eval_ratio(chunk, task, 1)
    terms = device_terms(report, ratio=ratio)
    planned = sum(v for k, v in terms.items() if k not in ("model", "context"))

    # the evaluation chunk being scored and the next one, as the Trainer's pipeline holds them
    cur = _batch(graph, labels, store, perm[task:task + chunk], gen)
    nxt_seeds = perm[task + chunk:task + 2 * chunk]
    nxt_sample = KHop([10, 5]).sample(graph, nxt_seeds, gen)
    resident = [model, cur.x, cur.labels, cur.sample.seeds, cur.sample.input_nodes,
                [t for b in cur.sample.blocks for t in (b.src, b.dst)]]

    @torch.no_grad()
    def score():
        model.eval()
        return score_logits(model(cur.sample.blocks, cur.x), cur.labels)

    gathered = []
    g_meter = TensorAllocationMeter(resident)
    g_peak = g_meter.measure(lambda: gathered.append(store.gather(nxt_sample.input_nodes)))
    nxt = SimpleNamespace(sample=nxt_sample, x=gathered[0], labels=labels[nxt_sample.seeds])
    s_meter = TensorAllocationMeter(resident + [nxt.x, nxt.labels, nxt_sample.input_nodes,
                                                [t for b in nxt_sample.blocks
                                                 for t in (b.src, b.dst)]])
    s_peak = s_meter.measure(score)
    model_bytes = resident_bytes(model)
    # the gather's rise beyond its output (the local rows it holds) can coincide with the
    # score's peak (two threads): count both
    gather_extra = g_peak - g_meter.resident_peak - resident_bytes(nxt.x)
    measured = (s_peak - model_bytes) + max(0, gather_extra)
    assert batch_bytes(cur) > batch_bytes(train)  # the chunk is larger than the task...
    assert measured > report["step_peak_bytes"]  # ...so the training step alone is too little
    assert measured <= planned, (measured, planned, terms)


# ---------------------------------------------------------------------------- GPU budget inputs
GIB = 1 << 30


def test_a_gpu_budget_is_the_share_of_the_gpu_at_most_what_was_free():
    from fgnn.cache.sizing import gpu_budget

    # an 80 GiB GPU, half of it per device: 40 GiB when the GPU is empty enough
    assert gpu_budget(80 * GIB, 0.5, free_bytes=70 * GIB, process_bytes=2 * GIB) == 40 * GIB
    # another tenant holds 50 GiB: what was free (20) plus what this process held (2)
    assert gpu_budget(80 * GIB, 0.5, free_bytes=20 * GIB, process_bytes=2 * GIB) == 22 * GIB
    assert gpu_budget(80 * GIB, 1.0) == 80 * GIB  # nothing measured: the share of the total
    for bad in ((0, 0.5), (80 * GIB, 0.0), (80 * GIB, 1.5)):
        with pytest.raises(ValueError, match="share"):
            gpu_budget(*bad)
    with pytest.raises(ValueError, match="free_bytes"):
        gpu_budget(80 * GIB, 0.5, free_bytes=-1)


def test_nccl_buffers_and_queued_ipc_samples_are_counted():
    from fgnn.cache.sizing import NCCL_CHANNELS, ipc_queue_bytes, nccl_buffer_bytes

    assert nccl_buffer_bytes(1) == 0  # no peer: no buffers
    assert nccl_buffer_bytes(4) == 2 * NCCL_CHANNELS * (4 * MIB) == 256 * MIB
    assert nccl_buffer_bytes(2, channels=2, buffsize=MIB) == 4 * MIB
    assert ipc_queue_bytes(64, 3 * MIB) == 192 * MIB
    with pytest.raises(ValueError, match="members"):
        nccl_buffer_bytes(0)
    with pytest.raises(ValueError, match="queued"):
        ipc_queue_bytes(-1, 10)
    report = {"model_bytes": 1000, "step_peak_bytes": 10_000, "gather_bytes": 0}
    t = device_terms(report, cuda=True, processes=2, context_bytes=300 * MIB, nccl=256 * MIB,
                     ipc_queue=192 * MIB, graph_bytes=5, sampler=7)
    assert t["context"] == 600 * MIB  # measured, not the assumed 512 MiB each
    assert (t["nccl"], t["ipc_queue"]) == (256 * MIB, 192 * MIB)
    assert "nccl" not in device_terms(report, cuda=True)  # only when there are some


def _sizer(mode="factored", exchange="server", transport="object_store", gpd=0.5,
           devices=2, queue_size=64, train=10_000, batch=1000, step_tasks=1):
    from fgnn.runtime.cache_plan import CachePlanner

    cfg = SimpleNamespace(runtime=SimpleNamespace(mode=mode, exchange=exchange, devices=devices,
                                                  sample_transport=transport,
                                                  queue_size=queue_size),
                          cache=SimpleNamespace(device_memory_gib=None),
                          train=SimpleNamespace(batch_size=batch))
    sizer = CachePlanner.__new__(CachePlanner)
    sizer.config, sizer.step_tasks = cfg, step_tasks
    sizer.services = SimpleNamespace(gpus_per_device=gpd)
    sizer.dataset = SimpleNamespace(train_idx=torch.arange(train))
    sizer.workers = SimpleNamespace(alive=lambda role: [])
    return sizer


def test_the_runtime_budget_uses_free_memory_and_the_measured_context(monkeypatch):
    reports = [{"device_total_bytes": 80 * GIB, "device_free_bytes": 30 * GIB,
                "process_bytes": 3 * GIB, "context_bytes": 400 * MIB},
               {"device_total_bytes": 80 * GIB, "device_free_bytes": 60 * GIB,
                "process_bytes": 3 * GIB, "context_bytes": None}]
    sizer = _sizer()
    assert sizer._device_budget(reports) == 33 * GIB  # not 0.5 x 80 GiB of total memory
    assert sizer._gpu_terms(reports, cuda=True) == {"context_bytes": 400 * MIB, "nccl": 0}
    import fgnn.data.memory as memory

    monkeypatch.setattr(memory, "host_memory_limit", lambda: None)  # the host's share: below
    assert sizer._device_budget([{"device_total_bytes": None}]) == GIB  # a logical device
    # the collective on distinct GPUs holds NCCL buffers; members sharing a GPU use gloo
    assert _sizer(exchange="collective", gpd=1.0)._gpu_terms(reports, True)["nccl"] == 256 * MIB
    assert _sizer(exchange="collective", gpd=0.5)._gpu_terms(reports, True)["nccl"] == 0
    assert _sizer()._gpu_terms(reports, cuda=False) == {}


def test_queued_cuda_ipc_samples_count_on_the_sampler_device():
    reports = [{"sampler": {"max_sample_bytes": 2 * MIB}}]
    assert _sizer()._ipc_queue(reports) == 0  # the object store holds them in host memory
    assert _sizer(transport="cuda_ipc")._ipc_queue(reports) == 64 * 2 * MIB
    # single mode: the queue holds the whole epoch (100 tasks here)
    single = _sizer(mode="single", transport="cuda_ipc", train=100_000)
    assert single._ipc_queue(reports) == 100 * 2 * MIB
