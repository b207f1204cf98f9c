"""Link-prediction losses on pair logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bce_loss", "max_margin_loss", "LOSSES"]

LOSSES = ("bce", "margin")


def bce_loss(logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of ``sigmoid(logits)`` against 0/1 ``label`` (``(P,)`` each)."""
    return F.binary_cross_entropy_with_logits(logits, label.to(logits.dtype))


def max_margin_loss(pos: torch.Tensor, neg: torch.Tensor, neg_pos_index: torch.Tensor,
                    margin: float = 0.1) -> torch.Tensor:
    """PinSAGE's max-margin loss: mean over negatives of ``max(0, s_neg - s_pos + margin)``.

    Args:
        pos: ``(P,)`` scores of the positives.
        neg: ``(K,)`` scores of the negatives.
        neg_pos_index: ``(K,)`` the positive (query) each negative belongs to.
        margin: Δ of Ying et al. (KDD 2018), Eq. (1).
    """
    if neg.numel() == 0:
        return pos.sum() * 0.0
    return F.relu(neg - pos.index_select(0, neg_pos_index) + margin).mean()
