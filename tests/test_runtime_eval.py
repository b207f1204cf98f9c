"""Evaluation on the executors: the reported accuracies are the recipe of fgnn.evaluation, run
as tasks through the Samplers and Trainers, with no graph work on the driver.

Graph: R-MAT scale 9 (512 vertices); validation and test splits of 51 vertices each, scored in
chunks of 16 (4 chunks per split), so every pass has several tasks to spread over Trainers.
"""

from __future__ import annotations

import pytest
import torch

from fgnn.evaluation import (EvalPlan, SplitScore, default_eval_chunk, eval_batches,
                             eval_generator, evaluate_split)
from fgnn.sampling import KHop

ray = pytest.importorskip("ray")

from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,  # noqa: E402
                         SamplerConfig, TrainConfig)
from fgnn.data.synthetic import rmat_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime  # noqa: E402

DEVICES = 3


# ---------------------------------------------------------------------------- the plan
def test_plan_numbers_chunks_split_by_split():
    plan = EvalPlan(("train", "test"), (5, 7), batch_size=3, seed=4)
    assert plan.chunks("train") == 2 and plan.chunks("test") == 3
    assert plan.num_tasks == 5
    assert [plan.task(t) for t in range(5)] == [("train", 0), ("train", 1), ("test", 0),
                                                 ("test", 1), ("test", 2)]
    idx = torch.arange(100, 107)
    assert plan.seeds(idx, 4).tolist() == [106]
    assert plan.seeds(idx, 3).tolist() == [103, 104, 105]
    with pytest.raises(ValueError, match=r"task_id must be in \[0, 5\)"):
        plan.task(5)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        EvalPlan(("dev",), (3,), 2)


def test_plan_chunks_are_the_reference_chunks():
    idx = torch.randperm(50)
    plan = EvalPlan(("val",), (50,), batch_size=8)
    ref = eval_batches(idx, 8)
    assert len(ref) == plan.num_tasks
    for t, chunk in enumerate(ref):
        assert torch.equal(plan.seeds(idx, t), chunk)


def test_default_eval_chunk_shrinks_with_the_feature_row():
    assert default_eval_chunk(512, 128 * 4) == 4096          # narrow rows: 4096 seeds
    assert default_eval_chunk(8000, 128 * 4) == 8000         # never below a mini-batch
    assert default_eval_chunk(128, 768 * 4) == 682           # 2 MiB of seed rows
    assert default_eval_chunk(1, 10 ** 9) == 1
    cfg = JobConfig(train=TrainConfig(batch_size=128))
    ds = rmat_dataset(scale=8, edge_factor=4, feat_dim=768, num_classes=3, seed=0)
    assert Runtime(cfg, ds).config.train.eval_batch_size == 682  # resolved from the dataset
    given = JobConfig(train=TrainConfig(batch_size=128, eval_batch_size=300))
    assert Runtime(given, ds).config.train.eval_batch_size == 300


def test_eval_generators_differ_by_split_and_chunk_and_repeat():
    draw = lambda *k: torch.rand(4, generator=eval_generator(*k)).tolist()  # noqa: E731
    assert draw(0, "val", 0) == draw(0, "val", 0)
    assert len({tuple(draw(0, s, i)) for s in ("train", "val", "test") for i in (0, 1)}) == 6
    assert draw(0, "val", 0) != draw(1, "val", 0)


def test_scores_add_up():
    a, b = SplitScore(3, 4, 1.5), SplitScore(1, 6, 2.5)
    total = SplitScore().add(a).add(b)
    assert (total.correct, total.count, total.loss_sum) == (4, 10, 4.0)
    assert total.accuracy == 0.4 and total.loss == 0.4
    assert SplitScore().accuracy != SplitScore().accuracy  # NaN when empty


# ---------------------------------------------------------------------------- on executors
@pytest.fixture(scope="module")
def dataset():
    return rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.3,
                        val_frac=0.1, test_frac=0.1, seed=0)


def _job(mode: str, devices: int) -> JobConfig:
    return JobConfig(
        model=ModelConfig("sage", hidden=16, dropout=0.5),
        sampler=SamplerConfig(fanouts=(4, 4)),
        cache=CacheConfig(policy="degree", cache_ratio=0.25),
        train=TrainConfig(epochs=2, batch_size=16, lr=0.01, seed=3, eval_batch_size=16),
        runtime=RuntimeConfig(mode=mode, devices=devices, samplers=1 if mode == "factored"
                              else None, queue_size=4))


@pytest.fixture
def no_driver_evaluation(monkeypatch):
    """Scoring on the driver fails the test: the executors must do it (actors are separate
    processes, so the patch does not reach them)."""
    def refuse(*a, **k):
        raise AssertionError("the driver evaluated a split")

    import fgnn.evaluation
    import fgnn.training
    monkeypatch.setattr(fgnn.training, "evaluate", refuse)
    monkeypatch.setattr(fgnn.evaluation, "evaluate_split", refuse)


@pytest.mark.parametrize("mode,devices", [("factored", 3), ("time-sharing", 2), ("single", 1)])
def test_reported_accuracies_are_the_reference_recipe(ray_cluster, dataset, mode, devices,
                                                      no_driver_evaluation):
    cfg = _job(mode, devices)
    seen = []
    rt = Runtime(cfg, dataset, on_eval_batch=lambda *a: seen.append(a))
    result = rt.run()
    # Re-score the reported (best-validation) weights in this process with the same recipe.
    sampler = KHop(cfg.sampler.fanouts)
    for split in ("train", "val", "test"):
        ref = _unpatched_evaluate_split(rt.model, dataset, split, sampler, 16, cfg.train.seed)
        assert result.final[f"{split}_acc"] == ref.accuracy, split
    # per-epoch validation ran on the executors, with a progress callback per chunk
    assert all(e.val_acc is not None and e.eval_s > 0 for e in result.epochs)
    val_chunks = -(-int(dataset.val_idx.numel()) // 16)
    assert ("val",) in {s for s, _, _ in seen}
    assert max(d for s, d, t in seen if s == ("val",)) == val_chunks
    assert rt.final_eval_s > 0
    # the final pass reuses the best epoch's validation score (checked above against a
    # re-score) and scores only train and test
    assert {s for s, _, _ in seen} == {("val",), ("train", "test")}
    assert result.final["val_acc"] == max(e.val_acc for e in result.epochs)


def _unpatched_evaluate_split(*args, **kwargs) -> SplitScore:
    """fgnn.evaluation.evaluate_split as imported at the top (not the fixture's patch)."""
    return evaluate_split(*args, **kwargs)


def test_layerwise_scores_are_every_neighbour_scores(ray_cluster, dataset, no_driver_evaluation):
    """--eval-mode layerwise: the Trainers score each split with every neighbour; the reported
    numbers equal full-neighbour per-vertex evaluation of the best weights (no sampling)."""
    from dataclasses import replace

    from fgnn.evaluation import SplitScore, score_logits
    from fgnn.training import FullNeighborSampler, extract_features

    cfg = _job("factored", 3)
    cfg.train = replace(cfg.train, eval_mode="layerwise")
    rt = Runtime(cfg, dataset)
    result = rt.run()
    model = rt.model.eval()
    full = FullNeighborSampler(2)
    for split in ("train", "val", "test"):
        idx = getattr(dataset, f"{split}_idx")
        with torch.no_grad():
            s = full.sample(dataset.graph, idx)
            ref = score_logits(model(s.blocks, extract_features(dataset.features,
                                                                s.input_nodes)),
                               dataset.labels[s.seeds])
        assert isinstance(ref, SplitScore)
        assert result.final[f"{split}_acc"] == pytest.approx(ref.accuracy, abs=1e-12), split
    assert all(e.val_acc is not None and e.eval_s > 0 for e in result.epochs)
