"""A synthetic bipartite user-item graph with planted latent preferences (a recommender test bed).

Generative model (all draws from one seed):

* every user ``u`` and item ``i`` has a latent vector (``dim`` entries, standard normal);
* item popularity follows a power law: a random permutation gives item ``i`` the rank ``r_i`` and
  the weight ``r_i ** -popularity_exponent``;
* user ``u`` picks items with probability ``p(i | u) ∝ exp(affinity * <z_u, z_i> / sqrt(dim)) *
  r_i ** -alpha``, *without replacement*: ``history + 1`` successive draws (Plackett-Luce,
  drawn as the top of Gumbel-perturbed log-probabilities). The first ``history`` draws are the
  training interactions, the last one is the user's held-out item;
* items carry features, a fixed random projection of their latent vector plus Gaussian noise
  (``feat_noise`` times the signal's scale), so an encoder has input.

The held-out item is a draw from ``p(. | u)`` restricted to the items the user has not seen and
renormalised, so the best any ranking can do is to rank the unseen items by ``p(i | u)``: its
expected recall@K (= Hits@K with one held-out item) is ``sum of the K largest unseen p(i | u) /
(1 - p(seen | u))``, averaged over users (:meth:`UserItemData.recall_ceiling`). The graph has
the relations ``("user", "interacts", "item")`` and ``("item", "interacted_by", "user")``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fgnn.graph.hetero import HeteroGraph

__all__ = ["UserItemData", "user_item_graph", "USER", "ITEM", "UI", "IU"]

USER, ITEM = "user", "item"
UI = (USER, "interacts", ITEM)
IU = (ITEM, "interacted_by", USER)
_CHUNK_ELEMS = 1 << 24  # user x item logits scored per chunk


@dataclass
class UserItemData:
    """The generated graph, its held-out items and the planted model.

    Attributes:
        graph: the typed graph (training interactions only) with item features.
        history: ``(U, H)`` int64 training items of each user, in draw order.
        heldout: ``(U,)`` int64 held-out item of each user.
        user_latent: ``(U, dim)`` planted user vectors.
        item_latent: ``(I, dim)`` planted item vectors.
        log_popularity: ``(I,)`` planted log popularity weights.
        affinity: scale of the planted affinity.
    """

    graph: HeteroGraph
    history: torch.Tensor
    heldout: torch.Tensor
    user_latent: torch.Tensor
    item_latent: torch.Tensor
    log_popularity: torch.Tensor
    affinity: float

    @property
    def num_users(self) -> int:
        return int(self.history.shape[0])

    @property
    def num_items(self) -> int:
        return int(self.item_latent.shape[0])

    def planted_logits(self, users: torch.Tensor) -> torch.Tensor:
        """``(len(users), I)`` planted log-probabilities up to a per-user constant."""
        d = self.user_latent.shape[1]
        return (self.affinity / math.sqrt(d)) * (self.user_latent[users] @ self.item_latent.t()) \
            + self.log_popularity

    def recall_ceiling(self, k: int = 10) -> float:
        """Expected recall@k of the best ranking (the planted one) on the held-out draws.

        For each user: the sum of the ``k`` largest ``p(i | u)`` over unseen items divided by
        ``1 - p(seen | u)`` (a softmax over the unseen items' logits, in float64); averaged over
        users. Exact given the planted model (no sampling).
        """
        total = 0.0
        for users in _user_chunks(self.num_users, self.num_items):
            logits = self.planted_logits(users).double()
            logits.scatter_(1, self.history[users], float("-inf"))  # p restricted to unseen
            total += float(torch.softmax(logits, dim=1).topk(k, dim=1).values.sum())
        return total / self.num_users

    def true_topk(self, k: int = 10) -> torch.Tensor:
        """``(U, k)`` the planted best unseen items of each user (the ceiling's ranking)."""
        out = torch.empty(self.num_users, k, dtype=torch.int64)
        for users in _user_chunks(self.num_users, self.num_items):
            logits = self.planted_logits(users)
            logits.scatter_(1, self.history[users], float("-inf"))
            out[users] = logits.topk(k, dim=1).indices
        return out


def _user_chunks(num_users: int, num_items: int):
    step = max(1, _CHUNK_ELEMS // max(num_items, 1))
    for lo in range(0, num_users, step):
        yield torch.arange(lo, min(lo + step, num_users))


def user_item_graph(num_users: int = 1 << 16, num_items: int = 1 << 14,
                    num_interactions: int = 1 << 20, *, dim: int = 4, affinity: float = 8.0,
                    popularity_exponent: float = 0.8, feat_dim: int = 32,
                    feat_noise: float = 0.5, seed: int = 0) -> UserItemData:
    """Generate the planted user-item graph described in the module docstring.

    Args:
        num_users, num_items: node counts.
        num_interactions: training interactions; each user gets
            ``num_interactions // num_users`` distinct items (plus one held out).
        dim: latent size.
        affinity: scale of ``<z_u, z_i> / sqrt(dim)`` in the logits (higher: sharper tastes).
        popularity_exponent: power-law exponent of item popularity (0: none).
        feat_dim: item feature size.
        feat_noise: noise scale of the item features relative to their signal.
        seed: the only random source.

    Raises:
        ValueError: naming the argument when a count is too small or a scale negative.
    """
    for name, v in (("num_users", num_users), ("num_items", num_items), ("dim", dim),
                    ("feat_dim", feat_dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"user_item_graph: {name} must be a positive int, got {v!r}")
    history = num_interactions // num_users if isinstance(num_interactions, int) else 0
    if history < 1 or history + 1 > num_items:
        raise ValueError(f"user_item_graph: num_interactions={num_interactions!r} must give each "
                         f"of the {num_users} users between 1 and num_items - 1 items")
    for name, v in (("affinity", affinity), ("popularity_exponent", popularity_exponent),
                    ("feat_noise", feat_noise)):
        if not v >= 0:
            raise ValueError(f"user_item_graph: {name} must be >= 0, got {v!r}")
    gen = torch.Generator().manual_seed(seed)
    user_latent = torch.randn(num_users, dim, generator=gen)
    item_latent = torch.randn(num_items, dim, generator=gen)
    rank = torch.randperm(num_items, generator=gen).double() + 1.0
    log_pop = (-popularity_exponent * torch.log(rank)).float()
    proj = torch.randn(dim, feat_dim, generator=gen) / math.sqrt(dim)
    signal = item_latent @ proj
    features = signal + feat_noise * torch.randn(num_items, feat_dim, generator=gen)
    data = UserItemData(None, None, None, user_latent, item_latent, log_pop,  # type: ignore
                        float(affinity))
    draws = torch.empty(num_users, history + 1, dtype=torch.int64)
    for users in _user_chunks(num_users, num_items):
        logits = data.planted_logits(users)
        # + Gumbel noise (-log of an Exp(1) draw): the top order is a Plackett-Luce draw
        logits -= torch.empty_like(logits).exponential_(generator=gen).log_()
        draws[users] = logits.topk(history + 1, dim=1, sorted=True).indices
    data.history, data.heldout = draws[:, :history].contiguous(), draws[:, history].clone()
    users = torch.arange(num_users).repeat_interleave(history)
    ei = torch.stack([users, data.history.reshape(-1)])
    data.graph = HeteroGraph.from_edge_index(
        {USER: num_users, ITEM: num_items}, {UI: ei, IU: ei.flip(0)}, {ITEM: features},
        meta={"generator": "user_item_graph", "seed": seed, "dim": dim, "affinity": affinity,
              "popularity_exponent": popularity_exponent, "feat_noise": feat_noise})
    return data
