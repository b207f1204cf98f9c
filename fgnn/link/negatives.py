"""Negative sampling for link prediction.

* :func:`uniform_negatives` -- per positive edge ``(s, d)``, ``k`` negatives ``(s, d')`` with
  ``d'`` uniform over the vertices (the destination replaced, GraphBolt's and PyG's uniform
  negative sampler). With ``known``, a draw that hits a known edge (or ``d' == s``) is redrawn,
  and one still bad after ``max_rounds`` redraws is dropped, so no negative is ever a known edge.
* :func:`sample_negative_pairs` -- a fixed set of distinct non-edges (the validation and test
  negatives of :func:`fgnn.link.split.random_link_split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fgnn.link.edges import EdgeSet

__all__ = ["Negatives", "uniform_negatives", "sample_negative_pairs"]


@dataclass
class Negatives:
    """Negative edges drawn for a batch of positives.

    Attributes:
        src: ``(K,)`` int64 source of each negative (the positive's source).
        dst: ``(K,)`` int64 drawn destination.
        pos_index: ``(K,)`` int64 position of the positive each negative was drawn for.
    """

    src: torch.Tensor
    dst: torch.Tensor
    pos_index: torch.Tensor


def _randint(n: int, size: int, generator: Optional[torch.Generator],
             device: torch.device) -> torch.Tensor:
    return torch.randint(0, n, (size,), generator=generator, device=device)


def uniform_negatives(src: torch.Tensor, num_nodes: int, k: int = 1,
                      generator: Optional[torch.Generator] = None,
                      known: Optional[EdgeSet] = None, max_rounds: int = 10,
                      no_self: Optional[bool] = None) -> Negatives:
    """``k`` negatives per positive source, the destination drawn uniformly from ``[0, N)``.

    Args:
        src: ``(P,)`` int64 sources of the positive edges.
        num_nodes: N.
        k: negatives per positive (the ratio), >= 1.
        generator: random source.
        known: edges a negative must never be (the filter of false negatives); ``None`` keeps
            every draw (plain uniform sampling, false negatives included).
        max_rounds: redraws of filtered draws before they are dropped.
        no_self: also redraw ``d' == s``; ``None``: exactly when ``known`` is given (a typed
            relation between two node types passes ``False``: there ``s`` and ``d'`` are ids of
            different types).

    Returns:
        :class:`Negatives`, positive-major (the ``k`` draws of positive 0 first); fewer than
        ``P * k`` only when ``known`` filtered draws out.

    Raises:
        ValueError: on ``k < 1``, ``num_nodes < 1`` or ``max_rounds < 0``.
    """
    if k < 1:
        raise ValueError(f"negative ratio k must be >= 1, got k={k!r}")
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes!r}")
    if max_rounds < 0:
        raise ValueError(f"max_rounds must be >= 0, got {max_rounds!r}")
    src = src.long()
    dev = src.device
    pos_index = torch.arange(src.numel(), device=dev).repeat_interleave(k)
    neg_src = src.repeat_interleave(k)
    neg_dst = _randint(num_nodes, neg_src.numel(), generator, dev)
    no_self = known is not None if no_self is None else no_self
    if known is None and not no_self:
        return Negatives(neg_src, neg_dst, pos_index)

    def bad_of(s: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        bad = known.contains(s, d) if known is not None else torch.zeros_like(s, dtype=torch.bool)
        return bad | (d == s) if no_self else bad

    bad = bad_of(neg_src, neg_dst)
    for _ in range(max_rounds):
        idx = torch.nonzero(bad).squeeze(1)
        if idx.numel() == 0:
            break
        redraw = _randint(num_nodes, idx.numel(), generator, dev)
        neg_dst[idx] = redraw
        bad[idx] = bad_of(neg_src[idx], redraw)
    keep = ~bad
    return Negatives(neg_src[keep], neg_dst[keep], pos_index[keep])


def sample_negative_pairs(num: int, num_nodes: int, known: EdgeSet,
                          generator: Optional[torch.Generator] = None,
                          undirected: bool = True, max_rounds: int = 100) -> torch.Tensor:
    """``num`` distinct pairs ``(u, v)``, ``u != v``, none of them in ``known``.

    Args:
        num: pairs wanted.
        num_nodes: N.
        known: the edges to avoid (pass every edge of the graph).
        generator: random source.
        undirected: pairs are unordered: ``u < v`` in the result, and ``(v, u)`` counts as the
            same pair.
        max_rounds: drawing rounds before giving up.

    Returns:
        ``(2, num)`` int64.

    Raises:
        ValueError: when ``max_rounds`` rounds do not find ``num`` distinct non-edges (a graph
            too dense for the request).
    """
    dev = known.keys.device
    got = torch.empty(0, dtype=torch.int64, device=dev)
    for _ in range(max_rounds):
        if got.numel() >= num:
            break
        draw = max(2 * (num - got.numel()), 16)
        u = _randint(num_nodes, draw, generator, dev)
        v = _randint(num_nodes, draw, generator, dev)
        if undirected:
            u, v = torch.minimum(u, v), torch.maximum(u, v)
        ok = (u != v) & ~known.contains(u, v)
        keys = u[ok] * num_nodes + v[ok]
        # keep first occurrences, in draw order, of keys not yet taken
        keys = keys[~torch.isin(keys, got)]
        uniq, inverse = torch.unique(keys, return_inverse=True)
        first = torch.full((uniq.numel(),), keys.numel(), dtype=torch.int64, device=dev)
        first.scatter_reduce_(0, inverse, torch.arange(keys.numel(), device=dev), "amin")
        got = torch.cat([got, keys[first.sort().values]])
    if got.numel() < num:
        raise ValueError(f"found only {got.numel()} of {num} negative pairs among {num_nodes} "
                         f"vertices after {max_rounds} rounds (graph too dense)")
    got = got[:num]
    return torch.stack([got // num_nodes, got % num_nodes])
