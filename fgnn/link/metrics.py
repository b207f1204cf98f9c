"""Link-prediction metrics, exact and dependency-free.

* :func:`roc_auc` -- the probability that a random positive outscores a random negative, ties
  counting one half (the Mann-Whitney U statistic; equals scikit-learn's ``roc_auc_score``).
* :func:`average_precision` -- ``sum_n (R_n - R_{n-1}) P_n`` over the distinct score thresholds
  in decreasing order, tied scores forming one threshold (scikit-learn's
  ``average_precision_score``).
* :func:`mrr` and :func:`hits_at_k` -- the rank of each positive among its own negatives,
  ``1 + #(neg > pos) + #(neg == pos) / 2`` (OGB's mean of the optimistic and pessimistic ranks).
* :func:`recall_at_k` -- per query, the share of its relevant items among its ``k`` top-scored
  items, averaged over queries with at least one relevant item.
"""

from __future__ import annotations

import torch

__all__ = ["roc_auc", "average_precision", "ranks", "mrr", "hits_at_k", "recall_at_k"]


def _scores(pos: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pos, neg = pos.detach().double().flatten(), neg.detach().double().flatten()
    if pos.numel() == 0 or neg.numel() == 0:
        raise ValueError(f"need at least one positive and one negative score, got "
                         f"{pos.numel()} and {neg.numel()}")
    return pos, neg


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Area under the ROC curve of positive scores ``pos`` against negative scores ``neg``."""
    pos, neg = _scores(pos, neg)
    scores = torch.cat([pos, neg])
    uniq, inverse = torch.unique(scores, return_inverse=True)
    counts = torch.bincount(inverse, minlength=uniq.numel()).double()
    # mid-rank (1-based) of each distinct score: ties share the mean of their ranks
    mid = torch.cumsum(counts, 0) - (counts - 1) / 2
    rank_sum = mid[inverse[:pos.numel()]].sum()
    p, n = pos.numel(), neg.numel()
    return float((rank_sum - p * (p + 1) / 2) / (p * n))


def average_precision(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Average precision of ``pos`` (label 1) against ``neg`` (label 0)."""
    pos, neg = _scores(pos, neg)
    scores = torch.cat([pos, neg])
    label = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    uniq, inverse = torch.unique(scores, return_inverse=True)      # ascending
    tp = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, label)
    total = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(
        0, inverse, torch.ones_like(label))
    tp, total = tp.flip(0).cumsum(0), total.flip(0).cumsum(0)      # thresholds, high to low
    precision, recall = tp / total, tp / pos.numel()
    prev = torch.cat([torch.zeros(1, dtype=torch.float64), recall[:-1]])
    return float(((recall - prev) * precision).sum())


def ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """``(P,)`` rank of each positive ``pos[i]`` among its negatives ``neg[i]`` (``(P, K)``),
    1 = best, ties counting one half."""
    pos, neg = pos.detach().double(), neg.detach().double()
    if neg.dim() != 2 or neg.shape[0] != pos.numel():
        raise ValueError(f"neg must have shape (P, K) with P = {pos.numel()}, got "
                         f"{tuple(neg.shape)}")
    p = pos.unsqueeze(1)
    return 1.0 + (neg > p).sum(1).double() + 0.5 * (neg == p).sum(1).double()


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Mean reciprocal rank of ``pos`` ``(P,)`` among ``neg`` ``(P, K)``."""
    return float((1.0 / ranks(pos, neg)).mean())


def hits_at_k(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """Share of positives ranked within the top ``k`` among their negatives (ties: the
    half-credit rank of :func:`ranks`)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    return float((ranks(pos, neg) <= k).double().mean())


def recall_at_k(scores: torch.Tensor, relevant: torch.Tensor, k: int) -> float:
    """Mean over queries of ``|top-k ∩ relevant| / |relevant|``.

    Args:
        scores: ``(Q, I)`` score of every item for every query.
        relevant: ``(Q, I)`` bool, the held-out items of each query.
        k: list length.

    Queries without a relevant item are skipped; ties in ``scores`` are broken by item id
    (lower first).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if scores.shape != relevant.shape or scores.dim() != 2:
        raise ValueError(f"scores and relevant must both be (Q, I), got {tuple(scores.shape)} "
                         f"and {tuple(relevant.shape)}")
    relevant = relevant.bool()
    n_rel = relevant.sum(1)
    has = n_rel > 0
    if not bool(has.any()):
        raise ValueError("recall_at_k: no query has a relevant item")
    k = min(k, scores.shape[1])
    # stable sort on -score keeps the lower item id first among ties
    top = torch.sort(-scores.detach().double(), dim=1, stable=True).indices[:, :k]
    hit = relevant.gather(1, top).sum(1).double()
    return float((hit[has] / n_rel[has].double()).mean())
