"""PinSAGE as a recommender uses it: item embeddings, not class logits (Ying et al., KDD 2018).

The CONVOLVE layers are :class:`~fgnn.models.pinsage.PinSAGEConv` (importance pooling over the
random-walk visit counts, concatenation with self, L2 normalisation). After the last layer, two
dense layers ``G2 · ReLU(G1 z + g)`` give the final embedding (Alg. 2, line 17), L2-normalised so
that a dot product is a cosine. The embeddings are trained with :func:`max_margin_loss` on
(query, positive, negative) item triples.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from fgnn.models.aggregate import check_hparams, check_inputs
from fgnn.models.losses import max_margin_loss as scores_max_margin_loss
from fgnn.models.pinsage import PinSAGEConv
from fgnn.sampling.base import Block

__all__ = ["PinSAGEEmbedder", "ItemBias", "ITEM_BIASES", "max_margin_loss", "PinSAGERecModel",
           "QUERY", "POSITIVE", "NEGATIVE", "EMBED"]

ITEM_BIASES = ("none", "degree", "item", "both")


class PinSAGEEmbedder(nn.Module):
    """Stacked PinSAGE convolutions and a two-layer dense head producing unit-norm embeddings.

    Args:
        in_dim: input feature size.
        out_dim: embedding size.
        num_layers: CONVOLVE layers = blocks per sample.
        hidden: size of the convolution outputs.
        num_ids, id_dim: a learned ``id_dim`` embedding per item id (``num_ids`` of them),
            concatenated to the features (the paper's "features + learned embeddings" of
            items); 0: features only.
        normalize: L2-normalise the final embedding (the paper's cosine); without it the
            norm is free to carry how generally relevant an item is.

    Shapes:
        x ``(M, in_dim)`` features of ``sample.input_nodes`` (and ``ids`` ``(M,)``, those
        nodes' ids, when ``id_dim > 0``) -> ``(num_seeds, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int = 64, num_layers: int = 2,
                 hidden: int = 128, num_ids: int = 0, id_dim: int = 0,
                 normalize: bool = True) -> None:
        super().__init__()
        check_hparams("PinSAGEEmbedder", in_dim, out_dim, num_layers, hidden, 0.0)
        if id_dim < 0 or (id_dim > 0) != (num_ids > 0):
            raise ValueError(f"PinSAGEEmbedder: id_dim and num_ids must both be positive or "
                             f"both 0, got id_dim={id_dim!r}, num_ids={num_ids!r}")
        self.in_dim, self.out_dim, self.num_layers = in_dim, out_dim, num_layers
        self.normalize = normalize
        self.ids = nn.Embedding(num_ids, id_dim) if id_dim else None
        if self.ids is not None:
            nn.init.normal_(self.ids.weight, std=0.1)
        dims = [in_dim + id_dim] + [hidden] * num_layers
        self.layers = nn.ModuleList(PinSAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.g1 = nn.Linear(hidden, hidden)
        self.g2 = nn.Linear(hidden, out_dim)

    def forward(self, blocks: Sequence[Block], x: torch.Tensor,
                ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        check_inputs("PinSAGEEmbedder", blocks, x, self.in_dim, self.num_layers)
        h = x[:blocks[0].num_src]
        if self.ids is not None:
            if ids is None:
                raise ValueError("PinSAGEEmbedder: this model has id embeddings; pass the ids "
                                 "of the input nodes")
            h = torch.cat([h, self.ids(ids[:blocks[0].num_src])], 1)
        for layer, block in zip(self.layers, blocks):
            h = layer(block, h)
        z = self.g2(F.relu(self.g1(h)))
        return F.normalize(z, dim=-1) if self.normalize else z


class ItemBias(nn.Module):
    """A popularity term added to every item's score: ``s(q, i) = <z_q, z_i> + b_i``.

    Not in Ying et al. (KDD 2018): PinSAGE's score is the cosine alone. It is our addition
    for recommending to users (docs/benchmarks.md, issue 20): with unit-norm embeddings the
    cosine has little room to carry how popular an item is, while a user's next item is drawn in
    proportion to it.

    Args:
        kind: ``"degree"``: ``b_i = w * x_i + c`` with ``x_i`` the item's standardised log
            degree (the paper's own input feature) and learned scalars ``w``, ``c``;
            ``"item"``: a learned scalar per item (initialised to 0); ``"both"``: their sum.
        log_degree: ``(I,)`` standardised log degree of each item.

    Shapes:
        ``items`` (any shape) -> the same shape.
    """

    def __init__(self, kind: str, log_degree: torch.Tensor) -> None:
        super().__init__()
        if kind not in ITEM_BIASES or kind == "none":
            raise ValueError(f"ItemBias: kind must be one of {ITEM_BIASES[1:]}, got {kind!r}")
        self.kind = kind
        self.register_buffer("log_degree", log_degree.float().clone())
        self.w = nn.Parameter(torch.zeros(())) if kind != "item" else None
        self.c = nn.Parameter(torch.zeros(())) if kind != "item" else None
        self.per_item = (nn.Parameter(torch.zeros(log_degree.numel()))
                         if kind != "degree" else None)

    def forward(self, items: torch.Tensor) -> torch.Tensor:
        b = torch.zeros(items.shape, dtype=self.log_degree.dtype, device=items.device)
        if self.w is not None and self.c is not None:
            b = b + self.w * self.log_degree[items] + self.c
        if self.per_item is not None:
            b = b + self.per_item[items]
        return b


def max_margin_loss(query: torch.Tensor, positive: torch.Tensor, negatives: torch.Tensor,
                    margin: float = 0.1, positive_bias: Optional[torch.Tensor] = None,
                    negative_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """PinSAGE's max-margin ranking loss (Ying et al., eq. 1), mean over the triples:
    ``max(0, <z_q, z_n> + b_n - <z_q, z_p> - b_p + margin)`` (biases 0 unless given).

    Args:
        query, positive: ``(B, D)`` embeddings of the pairs.
        negatives: ``(B, K, D)`` negatives per query, or ``(K, D)`` shared by all queries.
        margin: the margin Δ.
        positive_bias: ``(B,)`` item biases of the positives (:class:`ItemBias`).
        negative_bias: ``(B, K)`` or ``(K,)`` item biases of the negatives.

    Shapes:
        -> scalar.
    """
    pos = (query * positive).sum(-1)                               # (B,)
    if negatives.dim() == 2:
        neg = query @ negatives.t()                                # (B, K)
    else:
        neg = torch.einsum("bd,bkd->bk", query, negatives)
    if positive_bias is not None:
        pos = pos + positive_bias
    if negative_bias is not None:
        neg = neg + negative_bias
    owner = torch.arange(neg.shape[0], device=neg.device).repeat_interleave(neg.shape[1])
    return scores_max_margin_loss(pos, neg.reshape(-1), owner, margin)


#: Roles in a recommender sample's ``pairs`` (row 2; :class:`PinSAGERecModel`).
QUERY, POSITIVE, NEGATIVE, EMBED = 0, 1, 2, 3


class PinSAGERecModel(nn.Module):
    """PinSAGE item embeddings, the learned item bias and the max-margin loss as one module,
    the way the factored runtime trains a recommender (``task="recsys"``,
    :mod:`fgnn.tasks.recsys`): the parameter server, the gradient exchange and checkpoints
    treat it as any model.

    A sample's ``pairs`` is ``(4, P)`` int64: row 0 the local id of an item among the sample's
    seeds, row 1 the example it belongs to (``-1`` for a shared negative and an item to
    embed), row 2 its role (:data:`QUERY`, :data:`POSITIVE`, :data:`NEGATIVE`, :data:`EMBED`),
    row 3 its global item id. Queries are listed example-major, ``query_items`` per example.

    Args:
        in_dim, out_dim, num_layers, hidden: the :class:`PinSAGEEmbedder`'s.
        log_degree: ``(I,)`` standardised log degree of each item (the ``"degree"`` bias).
        margin: the max-margin loss's margin.
        hardest: each query's hinge runs on its ``hardest`` highest-scoring shared negatives
            (0: all of them).
        bias_scale: the bias is ``bias_scale * ItemBias(...)``: with Adam, its parameters then
            move ``bias_scale`` times the job's learning rate (``RecConfig.bias_lr / lr``, the
            single-process recipe's two learning rates under one optimizer).
        item_bias: ``"degree"`` or ``"none"`` (:data:`ITEM_BIASES`).
    """

    def __init__(self, in_dim: int, out_dim: int, num_layers: int, hidden: int,
                 log_degree: torch.Tensor, margin: float = 0.1, hardest: int = 10,
                 bias_scale: float = 10.0, item_bias: str = "degree") -> None:
        super().__init__()
        self.embedder = PinSAGEEmbedder(in_dim, out_dim, num_layers, hidden)
        self.bias = None if item_bias == "none" else ItemBias(item_bias, log_degree)
        self.margin, self.hardest, self.bias_scale = float(margin), int(hardest), float(bias_scale)
        self.num_layers, self.hidden, self.in_dim = num_layers, hidden, in_dim
        self.num_classes = out_dim

    def forward(self, blocks: Sequence[Block], x: torch.Tensor) -> torch.Tensor:
        """Unit-norm embeddings ``(num_seeds, out_dim)`` of the sample's seed items."""
        return self.embedder(blocks, x)

    def item_bias(self, items: torch.Tensor) -> Optional[torch.Tensor]:
        """The score's bias of ``items`` (None without one)."""
        return None if self.bias is None else self.bias_scale * self.bias(items)

    def pairs_loss(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """The max-margin loss of a training sample: query = normalised mean embedding of its
        query items; each query's hinge on its ``hardest`` highest-scoring shared negatives
        (``pairs`` as in the class docstring)."""
        role, loc, items = pairs[2], pairs[0], pairs[3]
        zp, ze = h[loc[role == POSITIVE]], h[loc[role == NEGATIVE]]
        b = zp.shape[0]
        zq = F.normalize(h[loc[role == QUERY]].view(b, -1, h.shape[1]).mean(1), dim=-1)
        bp = be = None
        if self.bias is not None:
            bp = self.item_bias(items[role == POSITIVE])
            be = self.item_bias(items[role == NEGATIVE])
        if self.hardest and self.hardest < ze.shape[0]:
            scores = zq @ ze.t() + (be if be is not None else 0.0)
            top = scores.detach().topk(self.hardest, dim=1).indices
            return max_margin_loss(zq, zp, ze[top], self.margin, bp,
                                   be[top] if be is not None else None)
        return max_margin_loss(zq, zp, ze, self.margin, bp, be)

    @torch.no_grad()
    def pairs_record(self, h: torch.Tensor, pairs: torch.Tensor) -> dict:
        """An evaluation chunk's record: ``pair_scores`` ``(n, D + 1)`` float32, each item's
        embedding and score bias, and ``pair_labels`` their global item ids (chunk order)."""
        items = pairs[3]
        z = h[pairs[0]].float()
        b = self.item_bias(items)
        b = torch.zeros(z.shape[0], device=z.device) if b is None else b.float()
        return {"pair_scores": torch.cat([z, b.unsqueeze(1)], 1).cpu().numpy(),
                "pair_labels": items.cpu().numpy(), "correct": 0,
                "count": int(items.numel()), "loss_sum": 0.0}
