"""Train / validation / test edge splits with PyG's ``RandomLinkSplit`` semantics.

The edges of a graph are shuffled with a fixed seed and cut into train, validation and test
*supervision* edges (what a model is asked to score). The *message* edges (what the encoder
propagates over) never hold a validation or test edge:

* training propagates over the training edges (minus the ``disjoint_train_ratio`` share held out
  as supervision only, PyG's option of the same name);
* validation propagates over the training message edges;
* test propagates over the training message edges and the validation edges (as PyG).

Undirected graphs (``undirected=True``) split unordered pairs: each pair is one supervision
edge ``(u, v)`` with ``u < v``, and both directions go into the message graph. Validation and
test get fixed negatives, ``neg_ratio`` per positive, drawn from the pairs that are no edge of
the whole graph (so never a positive of any split).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fgnn.graph import CSRGraph
from fgnn.link.edges import EdgeSet
from fgnn.link.negatives import sample_negative_pairs

__all__ = ["LinkSplit", "random_link_split"]


@dataclass
class LinkSplit:
    """Edge splits of one graph (see the module docstring).

    Attributes:
        num_nodes: N.
        undirected: pairs are unordered; message graphs hold both directions.
        train_pos: ``(2, E_tr)`` training supervision edges.
        train_message: ``(2, M)`` training message edges (one direction per pair when
            ``undirected``; :meth:`graph` adds the reverse).
        val_pos, val_neg: ``(2, E_va)``, ``(2, neg_ratio * E_va)`` validation edges.
        test_pos, test_neg: ``(2, E_te)``, ``(2, neg_ratio * E_te)`` test edges.
    """

    num_nodes: int
    undirected: bool
    train_pos: torch.Tensor
    train_message: torch.Tensor
    val_pos: torch.Tensor
    val_neg: torch.Tensor
    test_pos: torch.Tensor
    test_neg: torch.Tensor

    def message_edges(self, stage: str) -> torch.Tensor:
        """``(2, M)`` message edges of ``stage`` (``train``, ``val`` or ``test``), one direction
        per pair when ``undirected``."""
        if stage in ("train", "val"):
            return self.train_message
        if stage == "test":
            return torch.cat([self.train_message, self.val_pos], dim=1)
        raise ValueError(f"stage must be train, val or test, got {stage!r}")

    def graph(self, stage: str) -> CSRGraph:
        """The message graph of ``stage`` as a deduplicated CSR graph (symmetric when
        ``undirected``)."""
        return CSRGraph.from_edge_index(self.message_edges(stage), num_nodes=self.num_nodes,
                                        symmetrize=self.undirected, dedup=True)

    def known_edges(self, stage: str) -> EdgeSet:
        """Edges a training negative must not be: the message and supervision edges of
        ``stage`` (both directions when ``undirected``)."""
        sup = {"train": self.train_pos, "val": self.val_pos, "test": self.test_pos}[stage]
        return EdgeSet(torch.cat([self.message_edges(stage), sup], dim=1), self.num_nodes,
                       undirected=self.undirected)


def _input_pairs(edges: torch.Tensor | CSRGraph, num_nodes: int | None
                 ) -> tuple[torch.Tensor, int]:
    """``(int64 (2, E) pairs, N)`` of :func:`random_link_split`'s ``edges``."""
    if isinstance(edges, CSRGraph):
        return edges.edge_index(), edges.num_nodes
    pairs = torch.as_tensor(edges).long()
    if pairs.dim() != 2 or pairs.shape[0] != 2:
        raise ValueError(f"edges must have shape (2, E), got {tuple(pairs.shape)}")
    if num_nodes is None:
        num_nodes = int(pairs.max()) + 1 if pairs.numel() else 0
    return pairs, num_nodes


def _check_shares(val: float, test: float, disjoint_train_ratio: float, neg_ratio: int) -> None:
    """:func:`random_link_split`'s shares and negative ratio in range."""
    for name, v in (("val", val), ("test", test), ("disjoint_train_ratio", disjoint_train_ratio)):
        if not 0.0 <= v < 1.0:
            raise ValueError(f"random_link_split: {name} must lie in [0, 1), got {name}={v!r}")
    if val + test >= 1.0:
        raise ValueError(f"random_link_split: val + test must be < 1, got {val} + {test}")
    if neg_ratio < 1:
        raise ValueError(f"random_link_split: neg_ratio must be >= 1, got {neg_ratio!r}")


def _shuffled_pairs(pairs: torch.Tensor, num_nodes: int, undirected: bool,
                    gen: torch.Generator) -> torch.Tensor:
    """The distinct pairs without self-loops (``(min, max)`` when ``undirected``), shuffled.

    Raises:
        ValueError: when no pair is left.
    """
    pairs = pairs[:, pairs[0] != pairs[1]]
    if undirected:
        pairs = torch.stack([pairs.min(0).values, pairs.max(0).values])
    keys = torch.unique(pairs[0] * num_nodes + pairs[1])
    if keys.numel() == 0:
        raise ValueError("random_link_split: the graph has no edges (self-loops excluded)")
    keys = keys[torch.randperm(keys.numel(), generator=gen)]
    return torch.stack([keys // num_nodes, keys % num_nodes])


def random_link_split(edges: torch.Tensor | CSRGraph, num_nodes: int | None = None, *,
                      val: float = 0.05, test: float = 0.1, disjoint_train_ratio: float = 0.0,
                      neg_ratio: int = 1, undirected: bool = True, seed: int = 0) -> LinkSplit:
    """Split the edges of a graph into train / validation / test (PyG ``RandomLinkSplit``).

    Args:
        edges: a :class:`CSRGraph` or ``(2, E)`` integer pairs. Self-loops are dropped; with
            ``undirected`` each unordered pair counts once whatever directions it is given in.
        num_nodes: N (taken from the graph; for pairs, ``max id + 1`` when omitted).
        val: share of the edges (pairs) held out for validation, in ``[0, 1)``.
        test: share held out for test; ``val + test < 1``.
        disjoint_train_ratio: share of the training edges used only as supervision, not as
            messages, in ``[0, 1)`` (0: every training edge is both, the GAE setting).
        neg_ratio: fixed negatives per validation / test positive, >= 1.
        undirected: treat ``(u, v)`` and ``(v, u)`` as one pair.
        seed: seed of the shuffle and the negatives (same seed, same split).

    Returns:
        A :class:`LinkSplit`; the split sizes are ``floor(val * E)``, ``floor(test * E)`` and
        the rest, as PyG.

    Raises:
        ValueError: naming the argument on a share outside its range, a ratio below 1, or a
            graph without edges.
    """
    pairs, num_nodes = _input_pairs(edges, num_nodes)
    _check_shares(val, test, disjoint_train_ratio, neg_ratio)
    gen = torch.Generator().manual_seed(seed)
    pairs = _shuffled_pairs(pairs, num_nodes, undirected, gen)
    e = pairs.shape[1]
    n_val, n_test = int(val * e), int(test * e)
    n_train = e - n_val - n_test
    train, val_pos, test_pos = pairs[:, :n_train], pairs[:, n_train:n_train + n_val], \
        pairs[:, n_train + n_val:]
    n_sup = int(disjoint_train_ratio * n_train)
    train_pos = train[:, :n_sup] if n_sup else train
    train_message = train[:, n_sup:]
    known = EdgeSet(pairs, num_nodes, undirected=undirected)
    neg = sample_negative_pairs(neg_ratio * (n_val + n_test), num_nodes, known, gen,
                                undirected=undirected)
    return LinkSplit(num_nodes=num_nodes, undirected=undirected, train_pos=train_pos,
                     train_message=train_message, val_pos=val_pos,
                     val_neg=neg[:, :neg_ratio * n_val], test_pos=test_pos,
                     test_neg=neg[:, neg_ratio * n_val:])
