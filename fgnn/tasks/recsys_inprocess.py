"""Train PinSAGE item embeddings for recommendation and score them on held-out interactions.

The recipe of Ying et al. (KDD 2018, §3.3), single-process on CPU, with the query taken the way
it is used at evaluation:

* **Examples.** A uniformly drawn user's positive item ``p`` and a query. With
  ``query_items == 1`` the query is one other item of the user (the paper's item-to-item
  pairs, "engaged with q, then with p", :func:`cooccurrence_pairs`); with ``query_items = k > 1``
  it is the (re-normalised) mean embedding of ``k`` other items of the user
  (:func:`history_queries`), which is how a user is represented at evaluation.
* **Negatives.** ``easy_negatives`` uniform random items shared by the mini-batch (by default
  a quarter of the items, :meth:`RecConfig.negatives_for`); with
  ``hardest > 0`` each query's hinge runs on its ``hardest`` highest-scoring ones (the model's
  own hard negatives, chosen afresh each step). Optionally, random-walk hard negatives: one item
  per query ranked between ``hard_ranks[0]`` and ``hard_ranks[1]`` by walk visits from the
  (first) query item, used after ``hard_after`` of the steps (the paper's curriculum; off by
  default: on the planted graph, whose 4096 items leave no "related but not relevant" ranks as
  the paper's 2000-5000 of billions do, they lowered recall, see docs/benchmarks.md).
* **Loss.** :func:`~fgnn.models.pinsage_rec.max_margin_loss` on the score
  ``<z_q, z_i> + b_i``.
* **Item bias** ``b_i`` (:class:`~fgnn.models.pinsage_rec.ItemBias`, ``item_bias``; our
  addition, not the paper's, whose score is the cosine alone): by default a learned scale of
  the item's standardised log degree. A user's next item is drawn in proportion to its
  popularity; the unit-norm embeddings have little room to carry that (docs/benchmarks.md:
  0.789x of the planted ceiling without it, 0.824x with it, small graph). ``"none"`` is the
  paper's score.
* **Inputs.** The item features plus the standardised log item degree, which is observable from
  the training interactions (optionally a learned id embedding, ``id_dim``).

Evaluation (:func:`recall_at_k`): a user's query embedding is the (normalised) mean of the
embeddings of the items in their history; all items not in the history are ranked by dot
product with it plus the item bias, and
recall@K (= Hits@K, one held-out item per user) counts the users whose held-out item is in the
top K. :func:`popularity_recall` ranks by training degree instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.nn import functional as F

from fgnn.graph.hetero import EdgeType, HeteroGraph
from fgnn.sampling.walks_hetero import ItemWalkSampler
from fgnn.models.pinsage_rec import ITEM_BIASES, ItemBias, PinSAGEEmbedder, max_margin_loss
from fgnn.models.step import forward_backward

__all__ = ["RecConfig", "PinSAGERecommender", "train_pinsage", "recall_at_k",
           "popularity_recall", "recall_of_scores", "cooccurrence_pairs", "history_queries",
           "hard_negatives"]

_EVAL_USERS = 4096  # users scored per chunk


@dataclass
class RecConfig:
    """Hyper-parameters of :func:`train_pinsage` (defaults: the measured bench recipe).

    ``easy_negatives = 0`` (the default) scales the shared uniform negatives with the item
    count: a quarter of the items, at least 512 (:meth:`negatives_for`); 4096 at the issue's
    2^14 items, where 512 left the hinge almost always 0 (docs/benchmarks.md).
    """

    num_walks: int = 20
    hops: int = 2
    top_k: int = 10
    num_layers: int = 2
    hidden: int = 128
    out_dim: int = 64
    batch_size: int = 512
    steps: int = 1600
    lr: float = 3e-3
    margin: float = 0.1
    easy_negatives: int = 0
    hard_ranks: tuple[int, int] = (10, 50)
    hard_walks: int = 40
    hard_after: float = 1.0
    id_dim: int = 0
    normalize: bool = True
    query_items: int = 8
    hardest: int = 10
    item_bias: str = "degree"
    bias_lr: float = 3e-2
    seed: int = 0

    def negatives_for(self, num_items: int) -> int:
        """Shared uniform negatives per mini-batch on a graph with ``num_items`` items:
        ``easy_negatives`` when positive, else ``max(512, num_items // 4)``, never more than
        the items."""
        e = self.easy_negatives if self.easy_negatives > 0 else max(512, num_items // 4)
        return max(1, min(e, num_items))


@dataclass
class PinSAGERecommender:
    """A trained model with what it needs to embed items.

    Attributes:
        model: the embedder.
        sampler: its random-walk neighbourhoods.
        inputs: ``(I, F + 1)`` item inputs (features and standardised log degree).
        losses: training loss per step.
        seconds: training wall time.
        bias: the learned popularity term of the score (``RecConfig.item_bias``), or None.
    """

    model: PinSAGEEmbedder
    sampler: ItemWalkSampler
    inputs: torch.Tensor
    losses: list[float]
    seconds: float
    bias: Optional[ItemBias] = None

    @torch.no_grad()
    def item_bias(self) -> Optional[torch.Tensor]:
        """``(I,)`` the learned bias of every item's score, or None without one."""
        if self.bias is None:
            return None
        return self.bias(torch.arange(self.sampler.num_items))

    @torch.no_grad()
    def embed(self, items: Optional[torch.Tensor] = None, chunk: int = 4096,
              seed: int = 0) -> torch.Tensor:
        """``(len(items), out_dim)`` embeddings (all items by default), sampled with a fixed
        generator."""
        self.model.eval()
        if items is None:
            items = torch.arange(self.sampler.num_items)
        gen = torch.Generator().manual_seed(seed)
        out = []
        for lo in range(0, items.numel(), chunk):
            s = self.sampler.sample(items[lo:lo + chunk], gen)
            out.append(self.model(s.blocks, self.inputs[s.input_nodes], s.input_nodes))
        return torch.cat(out)


def _log_degree(graph: HeteroGraph, item_type: str, to_other: EdgeType) -> torch.Tensor:
    """``(I,)`` standardised log(1 + degree) of each item in the training interactions."""
    deg = torch.log1p(graph.relations[to_other].in_degrees()[:graph.num_nodes[item_type]]
                      .float())
    return (deg - deg.mean()) / deg.std().clamp_min(1e-6)


def _item_inputs(graph: HeteroGraph, item_type: str, to_other: EdgeType) -> torch.Tensor:
    x = graph.features.get(item_type)
    if x is None:
        raise ValueError(f"train_pinsage: item type {item_type!r} has no features")
    deg = _log_degree(graph, item_type, to_other)
    return torch.cat([x.float(), deg.unsqueeze(1)], 1)


def _draw_users(graph: HeteroGraph, to_other: EdgeType, batch: int,
                generator: Optional[torch.Generator], who: str
                ) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """``(csr, users, degrees)``: ``batch`` users drawn uniformly (with replacement) among those
    with at least two items, the user -> item CSR ``to_other`` and their item counts.

    Raises:
        ValueError: naming ``who`` when no user interacted with two items.
    """
    csr = graph.relations[to_other]
    deg = csr.degrees()[:graph.num_nodes[to_other[2]]]
    users = torch.nonzero(deg >= 2).squeeze(1)
    if users.numel() == 0:
        raise ValueError(f"{who}: no user interacted with two items")
    u = users[torch.randint(users.numel(), (batch,), generator=generator)]
    return csr, u, deg[u]


def cooccurrence_pairs(graph: HeteroGraph, to_other: EdgeType, batch: int,
                       generator: Optional[torch.Generator] = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` (query, positive) pairs: two distinct items of a uniformly drawn user.

    Args:
        graph: the bipartite graph.
        to_other: relation item -> user (rows: users, listing their items).
        batch: pairs to draw.

    Raises:
        ValueError: when no user has two items.
    """
    csr, u, d = _draw_users(graph, to_other, batch, generator, "cooccurrence_pairs")
    a = (torch.rand(batch, generator=generator) * d).long().clamp_max(d - 1)
    b = (torch.rand(batch, generator=generator) * (d - 1)).long().clamp_max(d - 2)
    b = b + (b >= a).long()
    start = csr.indptr[u]
    return csr.indices[start + a].long(), csr.indices[start + b].long()


def history_queries(graph: HeteroGraph, to_other: EdgeType, batch: int, k: int,
                    generator: Optional[torch.Generator] = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` (query items, positive) examples: a uniformly drawn user's positive item and
    ``k`` other items of theirs (drawn with replacement among the others), whose mean
    embedding is the query, as a user's history is at evaluation.

    Returns:
        ``(queries (batch, k), positives (batch,))`` item ids.

    Raises:
        ValueError: when no user interacted with two items.
    """
    csr, u, d = _draw_users(graph, to_other, batch, generator, "history_queries")
    d = d.unsqueeze(1)
    b = (torch.rand(batch, 1, generator=generator) * d).long().clamp_max(d - 1)
    a = (torch.rand(batch, k, generator=generator) * (d - 1)).long().clamp_max(d - 2)
    a = a + (a >= b).long()
    start = csr.indptr[u].unsqueeze(1)
    return csr.indices[start + a].long(), csr.indices[start + b].squeeze(1).long()


def hard_negatives(sampler: ItemWalkSampler, queries: torch.Tensor, ranks: tuple[int, int],
                   num_walks: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """One item per query ranked in ``[ranks[0], ranks[1])`` by walk visits from it, uniform
    among those; a uniform random item for a query whose walks found too few items."""
    lo, hi = ranks
    nbr, row, _ = sampler.walk_counts(queries, hi, num_walks, generator)
    n = queries.numel()
    counts = torch.bincount(row, minlength=n)
    start = torch.cumsum(counts, 0) - counts
    avail = counts - lo
    pick = lo + (torch.rand(n, generator=generator) * avail.clamp_min(1)).long()
    pos = (start + pick.clamp_max(counts - 1)).clamp(0, max(nbr.numel() - 1, 0))
    rand_items = torch.randint(sampler.num_items, (n,), generator=generator)
    if nbr.numel() == 0:
        return rand_items
    return torch.where(avail > 0, nbr[pos], rand_items)


@dataclass
class _Batch:
    """One recommender mini-batch: the sample of every item involved and where each example's
    items sit in it (module docstring)."""

    sample: Any
    inv: torch.Tensor
    b: int
    k: int
    e: int
    p: torch.Tensor
    easy: torch.Tensor
    hard: torch.Tensor
    use_hard: bool


def _draw_batch(cfg: RecConfig, sampler: ItemWalkSampler, graph: HeteroGraph,
                to_other: EdgeType, use_hard: bool, gen: torch.Generator) -> _Batch:
    """Queries, positives, shared (and hard) negatives, and the walk sample of their items."""
    b, e, k = cfg.batch_size, cfg.negatives_for(sampler.num_items), cfg.query_items
    if k == 1:
        q, p = cooccurrence_pairs(graph, to_other, b, gen)
        q = q.unsqueeze(1)
    else:
        q, p = history_queries(graph, to_other, b, k, gen)
    easy = torch.randint(sampler.num_items, (e,), generator=gen)
    hard = (hard_negatives(sampler, q[:, 0], cfg.hard_ranks, cfg.hard_walks, gen)
            if use_hard else p.new_empty(0))
    seeds, inv = torch.unique(torch.cat([q.reshape(-1), p, easy, hard]), return_inverse=True)
    return _Batch(sampler.sample(seeds, gen), inv, b, k, e, p, easy, hard, use_hard)


def _batch_loss(cfg: RecConfig, bias: Optional[ItemBias], batch: _Batch,
                out: torch.Tensor) -> torch.Tensor:
    """The max-margin loss of one mini-batch from the sample's embeddings ``out``."""
    b, k, e, p, easy, hard = batch.b, batch.k, batch.e, batch.p, batch.easy, batch.hard
    z = out[batch.inv]
    zq = z[:b * k].view(b, k, -1).mean(1)
    if k > 1 and cfg.normalize:
        zq = F.normalize(zq, dim=-1)
    zp, ze = z[b * k:b * k + b], z[b * k + b:b * k + b + e]
    bp = be = bh = None
    if bias is not None:
        bp, be, bh = bias(p), bias(easy), bias(hard).unsqueeze(1)
    if cfg.hardest:  # each query's highest-scoring shared negatives only
        scores = zq @ ze.t() + (be if be is not None else 0.0)
        top = scores.detach().topk(min(cfg.hardest, e), dim=1).indices
        loss = max_margin_loss(zq, zp, ze[top], cfg.margin, bp,
                               be[top] if be is not None else None)
    else:
        loss = max_margin_loss(zq, zp, ze, cfg.margin, bp, be)
    if batch.use_hard:
        loss = loss + max_margin_loss(zq, zp, z[b * k + b + e:].unsqueeze(1), cfg.margin,
                                      bp, bh)
    return loss


def train_pinsage(graph: HeteroGraph, to_other: EdgeType, to_item: EdgeType,
                  cfg: Optional[RecConfig] = None,
                  log: Optional[Callable[[int, float], None]] = None) -> PinSAGERecommender:
    """Train PinSAGE item embeddings with the max-margin loss (module docstring).

    Args:
        graph: bipartite typed graph with item features.
        to_other: relation item -> other type (e.g. ``("item", "interacted_by", "user")``).
        to_item: the reverse relation.
        cfg: hyper-parameters.
        log: called as ``log(step, loss)`` every 50 steps.

    Raises:
        ValueError: on a graph the sampler or pairs cannot use (naming the relation or type),
            or an unknown ``cfg.item_bias``.
    """
    cfg = cfg or RecConfig()
    if cfg.item_bias not in ITEM_BIASES:
        raise ValueError(f"train_pinsage: item_bias must be one of {ITEM_BIASES}, "
                         f"got {cfg.item_bias!r}")
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler = ItemWalkSampler(graph, to_other, to_item, cfg.num_walks, cfg.hops, cfg.top_k,
                              cfg.num_layers)
    inputs = _item_inputs(graph, sampler.item_type, to_other)
    model = PinSAGEEmbedder(inputs.shape[1], cfg.out_dim, cfg.num_layers, cfg.hidden,
                            sampler.num_items if cfg.id_dim else 0, cfg.id_dim, cfg.normalize)
    groups: list[dict[str, Any]] = [{"params": list(model.parameters()), "lr": cfg.lr}]
    bias = None
    if cfg.item_bias != "none":
        bias = ItemBias(cfg.item_bias, _log_degree(graph, sampler.item_type, to_other))
        groups.append({"params": list(bias.parameters()), "lr": cfg.bias_lr})
    opt = torch.optim.Adam(groups)
    losses: list[float] = []
    t0 = time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        use_hard = step >= cfg.hard_after * cfg.steps
        batch = _draw_batch(cfg, sampler, graph, to_other, use_hard, gen)
        opt.zero_grad()
        loss = forward_backward(model, lambda m, out, s, lab: _batch_loss(cfg, bias, batch, out),
                                batch.sample, inputs[batch.sample.input_nodes], None,
                                forward=lambda m, s, x: m(s.blocks, x, s.input_nodes))
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None and (step % 50 == 0 or step == cfg.steps - 1):
            log(step, losses[-1])
    return PinSAGERecommender(model, sampler, inputs, losses, time.perf_counter() - t0, bias)


def _hits(scores_of: Callable[[torch.Tensor], torch.Tensor], history: torch.Tensor,
          heldout: torch.Tensor, k: int) -> float:
    hits = 0
    n = history.shape[0]
    for lo in range(0, n, _EVAL_USERS):
        users = torch.arange(lo, min(lo + _EVAL_USERS, n))
        s = scores_of(users)
        s.scatter_(1, history[users], float("-inf"))  # never recommend a seen item
        top = s.topk(k, dim=1).indices
        hits += int((top == heldout[users].unsqueeze(1)).any(1).sum())
    return hits / max(n, 1)


def recall_of_scores(scores_of: Callable[[torch.Tensor], torch.Tensor], history: torch.Tensor,
                     heldout: torch.Tensor, k: int = 10) -> float:
    """Recall@k (= Hits@k) of any ranking: ``scores_of(users)`` gives ``(len(users), I)``
    scores; the history's items are never recommended (``history``, ``heldout`` as in
    :func:`recall_at_k`)."""
    return _hits(scores_of, history, heldout, k)


def recall_at_k(item_emb: torch.Tensor, history: torch.Tensor, heldout: torch.Tensor,
                k: int = 10, item_bias: Optional[torch.Tensor] = None,
                normalize_query: bool = False) -> float:
    """Recall@k (= Hits@k) of ranking unseen items by ``<mean history embedding, item>``
    (``+ item_bias[item]`` when given).

    Args:
        item_emb: ``(I, D)`` item embeddings.
        history: ``(U, H)`` int64 items each user interacted with (excluded from the ranking).
        heldout: ``(U,)`` int64 held-out item per user.
        item_bias: ``(I,)`` a score added per item (:meth:`PinSAGERecommender.item_bias`).
        normalize_query: L2-normalise the mean history embedding, as training does; it
            changes the ranking only when there is a bias to weigh it against.
    """
    def scores(u: torch.Tensor) -> torch.Tensor:
        q = item_emb[history[u]].mean(1)
        if normalize_query:
            q = F.normalize(q, dim=-1)
        s = q @ item_emb.t()
        return s + item_bias if item_bias is not None else s

    return _hits(scores, history, heldout, k)


def popularity_recall(history: torch.Tensor, heldout: torch.Tensor, num_items: int,
                      k: int = 10) -> float:
    """Recall@k of recommending the most interacted-with unseen items to every user."""
    deg = torch.bincount(history.reshape(-1), minlength=num_items).float()
    return _hits(lambda u: deg.expand(u.numel(), -1).clone(), history, heldout, k)
