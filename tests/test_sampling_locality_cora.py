"""Locality-aware sampling keeps Cora's accuracy (Song & Jiang §4, §5: MAXS = 8 trains "to the
same accuracy").

Three seeds of the 2-layer GCN recipe of ``test_models_cora.py`` (fanouts 15, 10), trained once
with plain k-hop sampling and once with :class:`~fgnn.sampling.LocalityAwareKHop` at the largest
scale Algorithm 2 can reach, ``s = MAXS = 8``, the local set being the 20% highest-degree
vertices (what a degree cache holds). The mean test accuracies must lie within one point. The
in-process loop (:func:`fgnn.training.fit`) keeps CI time modest; the runtime path of the
sampler (local set from the cache map, the controller) is tested end to end in
``test_runtime_placement.py``.
"""

from __future__ import annotations

import pytest
import torch

from fgnn.cache.hotness import compute_hotness
from fgnn.cache.placement import hot_order
from fgnn.config import TrainConfig
from fgnn.data import load_planetoid
from fgnn.models import GCN
from fgnn.sampling import KHop, LocalityAwareKHop
from fgnn.training import fit

from test_training import single_thread  # noqa: F401 (autouse fixture: one intra-op thread)

SEEDS = (0, 1, 2)
FANOUTS = (15, 10)
MAXS = 8.0


@pytest.mark.slow
def test_locality_sampling_at_maxs_keeps_cora_accuracy(planetoid_root):
    cora = load_planetoid("cora", planetoid_root)
    local = torch.zeros(cora.num_nodes, dtype=torch.bool)
    hot = compute_hotness("degree", cora.graph, cora.train_idx)
    local[hot_order(hot)[: cora.num_nodes // 5]] = True
    cfg = dict(epochs=100, batch_size=140, lr=0.01, weight_decay=5e-4)
    acc: dict[str, list[float]] = {"khop": [], "locality": []}
    for seed in SEEDS:
        for name in acc:
            sampler = (KHop(FANOUTS) if name == "khop"
                       else LocalityAwareKHop(FANOUTS, local=local, scale=MAXS))
            torch.manual_seed(seed)
            model = GCN(cora.feat_dim, cora.num_classes, num_layers=2, hidden=64, dropout=0.5)
            acc[name].append(fit(cora, model, sampler, TrainConfig(seed=seed, **cfg)).test_acc)
    mean = {k: sum(v) / len(v) for k, v in acc.items()}
    print(f"\ncora test acc: {acc}, means {mean}")
    assert mean["khop"] > 0.79  # the baseline itself learns
    assert abs(mean["locality"] - mean["khop"]) <= 0.01, acc
