"""Per-epoch validation on a fixed seeded subset (``train.val_subset``); final scores on the
whole split; the best epoch and patience follow the per-epoch score. In-process: the runtime's
evaluation passes are replaced by recorded fakes, so no Ray starts."""

from __future__ import annotations

import argparse

import pytest
import torch

from fgnn.config import JobConfig, ModelConfig, SamplerConfig, TrainConfig
from fgnn.data.synthetic import rmat_dataset
from fgnn.evaluation import EvalPlan, SplitScore
from fgnn.subsets import VAL_SUBSET_FLOOR, subset_ids, subset_positions, val_subset_size
from fgnn.runtime.epoch import EvalOutcome
from fgnn.flags import subset_count
from fgnn.monitor.stats import EpochStats


def test_subset_is_seeded_sorted_and_the_same_every_call():
    a = subset_positions(1000, 100, 7, "val")
    subset_positions.cache_clear()
    b = subset_positions(1000, 100, 7, "val")
    assert torch.equal(a, b) and a.numel() == 100 and a.unique().numel() == 100
    assert torch.equal(a, a.sort().values)
    assert not torch.equal(a, subset_positions(1000, 100, 8, "val"))   # another seed
    assert not torch.equal(a, subset_positions(1000, 100, 7, "test"))  # another split
    assert torch.equal(subset_positions(50, 100, 7, "val"), torch.arange(50))


def test_plan_with_subset_cuts_the_subset_the_same_every_pass():
    idx = torch.randperm(10_000)[:3000] + 5
    plan = EvalPlan(("val",), (3000,), batch_size=128, seed=3, subset=500)
    assert plan.scored("val") == 500 and plan.num_tasks == 4
    first = torch.cat([plan.seeds(idx, t) for t in range(plan.num_tasks)])
    again = torch.cat([plan.seeds(idx, t) for t in range(plan.num_tasks)])  # a later epoch
    assert torch.equal(first, again)
    assert torch.equal(first, subset_ids(idx, 500, 3, "val"))
    assert set(first.tolist()) <= set(idx.tolist()) and first.unique().numel() == 500
    full = EvalPlan(("val",), (3000,), batch_size=128, seed=3)
    assert full.num_tasks == 24
    with pytest.raises(ValueError, match="EvalPlan.subset"):
        EvalPlan(("val",), (3,), 2, subset=0)


def test_subset_size_auto_all_and_given():
    assert val_subset_size(None, 100_000, 10) == VAL_SUBSET_FLOOR
    assert val_subset_size(None, 100_000, 20_000) == 20_000    # auto: at least the training ids
    assert val_subset_size(None, 3000, 10) is None              # covers the split
    assert val_subset_size(0, 100_000, 10) is None              # all
    assert val_subset_size(700, 100_000, 10) == 700
    assert subset_count("auto") is None and subset_count("all") == 0
    assert subset_count("12") == 12
    with pytest.raises(argparse.ArgumentTypeError, match="'auto', 'all' or an integer"):
        subset_count("-1")
    with pytest.raises(ValueError, match="val_subset"):
        TrainConfig(val_subset=-2)


# ---------------------------------------------------------------------------- the runtime
@pytest.fixture(scope="module")
def dataset():
    return rmat_dataset(scale=10, edge_factor=4, feat_dim=8, num_classes=3, train_frac=0.05,
                        val_frac=0.5, test_frac=0.1, seed=0)


def _runtime(dataset, val_subset, patience=None):
    from fgnn.runtime.driver import Runtime

    cfg = JobConfig(model=ModelConfig("sage", hidden=8), sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=6, batch_size=32, val_subset=val_subset,
                                      patience=patience, eval_batch_size=64))
    rt = Runtime(cfg, dataset)
    calls = []

    def fake_evaluate(splits, weights=None, subset=None):
        calls.append((tuple(splits), subset))
        n = int(dataset.val_idx.numel()) if subset is None else subset
        acc = scores.pop(0) if splits == ("val",) else 0.5
        return EvalOutcome({s: SplitScore(int(acc * n), n) for s in splits}, 0.01, 1, 0.0, 0.0)

    scores: list[float] = []
    rt._evaluate = fake_evaluate
    return rt, calls, scores


def test_epochs_score_the_subset_and_the_final_the_whole_split(dataset, monkeypatch):
    import ray

    rt, calls, scores = _runtime(dataset, val_subset=100)
    assert rt.val_subset == 100 < dataset.val_idx.numel()
    scores.extend([0.3, 0.6, 0.4])
    for epoch in range(3):
        rt._validate(epoch, EpochStats(epoch=epoch))
    assert calls == [(("val",), 100)] * 3
    assert rt.best["epoch"] == 1 and rt.best["val_acc"] == pytest.approx(0.6)
    monkeypatch.setattr(ray, "put", lambda x: x)
    final = rt._final_scores()
    # the final pass scores validation again, on every id (the epochs scored a subset)
    assert calls[-1] == (("train", "val", "test"), None)
    assert final["val_acc"] == pytest.approx(0.5)


def test_whole_split_reuses_the_best_epoch_score(dataset, monkeypatch):
    import ray

    rt, calls, scores = _runtime(dataset, val_subset=0)
    assert rt.val_subset is None
    scores.extend([0.3, 0.6])
    for epoch in range(2):
        rt._validate(epoch, EpochStats(epoch=epoch))
    monkeypatch.setattr(ray, "put", lambda x: x)
    final = rt._final_scores()
    assert calls[-1] == (("train", "test"), None)
    assert final["val_acc"] == pytest.approx(0.6, abs=1e-3)


def test_best_epoch_and_patience_follow_the_per_epoch_score(dataset):
    rt, _, scores = _runtime(dataset, val_subset=200, patience=2)
    scores.extend([0.2, 0.5, 0.45, 0.7, 0.6, 0.65])
    stopped = None
    for epoch in range(6):
        stats = EpochStats(epoch=epoch)
        rt._validate(epoch, stats)
        assert stats.val_acc == pytest.approx([0.2, 0.5, 0.45, 0.7, 0.6, 0.65][epoch], abs=0.01)
        if rt._patience_spent():
            stopped = epoch
            break
    assert rt.best["epoch"] == 3 and rt.best["val_acc"] == pytest.approx(0.7)
    assert stopped == 5 and rt._early_stop(stopped) is None  # the last epoch: no early stop


def test_fit_validates_the_same_subset_every_epoch(dataset, monkeypatch):
    import fgnn.training as training
    from fgnn.models import GraphSAGE
    from fgnn.sampling import KHop

    seen = []
    real = training.evaluate

    def recording(model, ds, how, idx, *a, **k):
        seen.append(idx.clone())
        return real(model, ds, how, idx, *a, **k)

    monkeypatch.setattr(training, "evaluate", recording)
    model = GraphSAGE(8, 3, num_layers=2, hidden=8)
    cfg = TrainConfig(epochs=2, batch_size=32, val_subset=50, seed=1)
    training.fit(dataset, model, KHop([3, 3]), cfg, eval_sampler=[3, 3])
    val, test = seen[:2], seen[2]
    assert val[0].numel() == 50 and torch.equal(val[0], val[1])
    assert torch.equal(val[0], subset_ids(dataset.val_idx, 50, 1, "val"))
    assert torch.equal(test, dataset.test_idx)  # the test split is scored whole
