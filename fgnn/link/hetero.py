"""Typed link prediction: the target relation, its reverse, the edge split and the negatives.

A typed link job predicts the edges of one relation ``R = (S, r, D)`` of a
:class:`~fgnn.graph.hetero.HeteroGraph` (``--link-edge-type S,r,D``):

* :func:`resolve_edge_type` -- the relation a spec names (``S,r,D``, ``S:r:D``, ``S-r->D`` or
  ``r`` alone when unique); without a spec the graph's own (``meta["link_edge_type"]``) or its
  only relation (with its reverse).
* :func:`reverse_of` -- the relation ``R' = (D, r', S)`` holding exactly the transposed edges of
  ``R`` (``writes`` / ``written_by``), if any: it carries the same information, so a target's
  twin there is excluded and split along with it.
* :func:`typed_link_split` -- PyG's ``RandomLinkSplit`` per edge type: ``R``'s distinct edges
  shuffled with a fixed seed and cut into train / validation / test; every training edge is a
  message and a supervision edge (the GAE setting, leakage is stopped by excluding the seed
  edges while sampling), and no validation or test edge is in the training message graph, nor
  its reverse twin in ``R'`` (:meth:`TypedLinkSplit.message_graph`). A symmetric relation
  (``S == D``, every edge's reverse an edge, no separate reverse relation) is its own reverse:
  it is split as unordered pairs and its message graph holds both directions of each. Test
  propagates over the training and the validation edges, as PyG.
* :func:`typed_negatives` -- uniform negatives per edge type with ratio ``k``: each positive
  ``(s, d)`` gets ``k`` pairs ``(s, d')``, ``d'`` uniform over the nodes of type ``D``
  (the destination replaced); with ``known`` the false negatives (a known edge of ``R``) are
  redrawn. Validation and test get ``eval_neg_ratio`` such negatives per positive, none an edge
  of ``R`` in the whole graph, positive-major (so MRR / Hits@K rank each positive against its
  own negatives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type
from fgnn.link.edges import EdgeSet
from fgnn.link.negatives import Negatives, uniform_negatives

__all__ = ["resolve_edge_type", "reverse_of", "TypedLinkSplit", "typed_link_split",
           "typed_negatives", "with_relation"]


def _names(graph: HeteroGraph) -> str:
    return "; ".join(",".join(et) for et in graph.edge_types)


def resolve_edge_type(graph: HeteroGraph, spec: Optional[str], dataset: str = "") -> EdgeType:
    """The relation ``spec`` names (module docstring); ``None``: the graph's default.

    Raises:
        ValueError: one line naming the spec and listing the relations when it names none, or
            several, or when ``spec`` is None and the graph has no single obvious relation.
    """
    rels = graph.edge_types
    where = f"dataset {dataset!r}" if dataset else "the typed graph"
    if spec is None:
        meta = graph.meta.get("link_edge_type")
        if meta is not None:
            return resolve_edge_type(graph, ",".join(meta) if not isinstance(meta, str)
                                     else meta, dataset)
        if len(rels) == 1 or (len(rels) == 2 and reverse_of(graph, rels[0]) == rels[1]):
            return rels[0]
        raise ValueError(f"{where} has {len(rels)} relations, name the one to predict "
                         f"(SRC,REL,DST; relations: {_names(graph)})")
    s = str(spec).strip()
    if "->" in s:  # src-rel->dst, as errors print relations
        left, dst = s.rsplit("->", 1)
        src, _, rel = left.partition("-")
        parts = [src, rel, dst]
    else:
        parts = s.replace(":", ",").split(",")
    parts = [p.strip() for p in parts]
    if len(parts) == 3:
        hits = [et for et in rels if et == tuple(parts)]
    elif len(parts) == 1:
        hits = [et for et in rels if et[1] == parts[0]]
    else:
        hits = []
    if len(hits) != 1:
        why = "is ambiguous (use SRC,REL,DST)" if hits else "is not a relation"
        raise ValueError(f"{s!r} {why} of {where} (relations: {_names(graph)})")
    return hits[0]


def _keys(graph: HeteroGraph, et: EdgeType) -> torch.Tensor:
    """Sorted distinct ``src * N_dst + dst`` keys of relation ``et``."""
    ei = graph.edge_index(et)
    return torch.unique(ei[0] * graph.num_nodes[et[2]] + ei[1])


def reverse_of(graph: HeteroGraph, et: EdgeType) -> Optional[EdgeType]:
    """The first other relation ``(D, r', S)`` whose edges are exactly those of ``et``
    reversed; else ``et`` itself when it is symmetric (``S == D`` and every edge's reverse is
    an edge: an undirected relation, split as unordered pairs); else None."""
    s, _, d = et
    want = _keys(graph, et)

    def transposed(cand: EdgeType) -> torch.Tensor:
        ei = graph.edge_index(cand)
        return torch.unique(ei[1] * graph.num_nodes[d] + ei[0])

    for cand in graph.edge_types:
        if cand != et and cand[0] == d and cand[2] == s and torch.equal(transposed(cand), want):
            return cand
    if s == d and want.numel() and torch.equal(transposed(et), want):
        return et
    return None


def with_relation(graph: HeteroGraph, et: EdgeType, rev: Optional[EdgeType],
                  edges: torch.Tensor) -> HeteroGraph:
    """``graph`` with relation ``et`` holding exactly ``edges`` (``(2, E)`` ``[src, dst]``)
    and ``rev`` (when given) their reverses (``rev == et``: ``et`` holds both directions);
    features, labels and the rest unchanged."""
    rels = dict(graph.relations)
    size = max(graph.num_nodes[et[0]], graph.num_nodes[et[2]])
    dtype = graph.relations[et].indices.dtype
    if rev == et:  # a symmetric relation: both directions of every pair
        edges = torch.cat([edges, edges[:, edges[0] != edges[1]].flip(0)], dim=1)
        rev = None
    rels[et] = CSRGraph.from_edge_index(edges, num_nodes=size, index_dtype=dtype)
    if rev is not None:
        rels[rev] = CSRGraph.from_edge_index(edges.flip(0), num_nodes=size, index_dtype=dtype)
    return HeteroGraph(graph.num_nodes, rels, graph.features, graph.labels, graph.target_type,
                       graph.meta)


def typed_negatives(src: torch.Tensor, num_dst: int, k: int = 1,
                    generator: Optional[torch.Generator] = None,
                    known: Optional[EdgeSet] = None, no_self: bool = False,
                    max_rounds: int = 10) -> Negatives:
    """``k`` negatives ``(s, d')`` per positive source ``s``, ``d'`` uniform in
    ``[0, num_dst)`` (nodes of the relation's destination type), positive-major.

    Args:
        src: ``(P,)`` sources of the positives.
        num_dst: nodes of the destination type.
        k: the ratio, >= 1.
        generator: random source.
        known: edges of the relation a negative must not be (``None``: unfiltered); a draw
            still known after ``max_rounds`` redraws is dropped.
        no_self: also redraw ``d' == s`` (a relation whose two ends are one node type).

    Raises:
        ValueError: on ``k < 1`` or ``num_dst < 1``.
    """
    return uniform_negatives(src, num_dst, k, generator, known, max_rounds, no_self=no_self)


@dataclass
class TypedLinkSplit:
    """The edge split of one relation (module docstring). Attribute names follow
    :class:`fgnn.link.split.LinkSplit`, so :class:`fgnn.tasks.link.LinkTask`'s scoring applies.

    Attributes:
        edge_type: the relation ``(S, r, D)`` split.
        reverse: its reverse relation, or None.
        num_nodes: node type -> count.
        train_pos: ``(2, E_tr)`` training supervision edges ``[s, d]``.
        train_message: ``(2, E_tr)`` training message edges of ``R`` (the same edges).
        val_pos, val_neg: ``(2, E_va)``, ``(2, eval_neg_ratio * E_va)``.
        test_pos, test_neg: likewise for test.
    """

    edge_type: EdgeType
    reverse: Optional[EdgeType]
    num_nodes: dict[str, int]
    train_pos: torch.Tensor
    train_message: torch.Tensor
    val_pos: torch.Tensor
    val_neg: torch.Tensor
    test_pos: torch.Tensor
    test_neg: torch.Tensor
    undirected = False

    def message_edges(self, stage: str) -> torch.Tensor:
        """``(2, M)`` edges of ``R`` messages pass over in ``stage`` (``train``, ``val``:
        the training edges; ``test``: plus the validation edges)."""
        if stage in ("train", "val"):
            return self.train_message
        if stage == "test":
            return torch.cat([self.train_message, self.val_pos], dim=1)
        raise ValueError(f"stage must be train, val or test, got {stage!r}")

    def message_graph(self, graph: HeteroGraph, stage: str) -> HeteroGraph:
        """``graph`` with ``R`` (and its reverse) cut down to ``stage``'s message edges."""
        return with_relation(graph, self.edge_type, self.reverse, self.message_edges(stage))


def typed_link_split(graph: HeteroGraph, et: EdgeType, *, val: float = 0.05,
                     test: float = 0.1, eval_neg_ratio: int = 1, seed: int = 0,
                     reverse: Optional[EdgeType] = None) -> TypedLinkSplit:
    """Split relation ``et``'s distinct edges (module docstring); the same seed gives the
    same split and negatives.

    Raises:
        ValueError: naming the relation on a share out of range or a graph too dense for the
            fixed negatives.
    """
    name = format_edge_type(et)
    if not (0.0 <= val < 1.0 and 0.0 <= test < 1.0 and val + test < 1.0):
        raise ValueError(f"typed_link_split({name}): need 0 <= val, test and val + test < 1, "
                         f"got val={val!r}, test={test!r}")
    n_dst = graph.num_nodes[et[2]]
    gen = torch.Generator().manual_seed(int(seed))
    keys = _keys(graph, et)
    every = EdgeSet(torch.stack([keys // n_dst, keys % n_dst]),
                    max(graph.num_nodes[et[0]], n_dst))
    if reverse == et:  # symmetric: one unordered pair (u <= v) is one edge
        keys = keys[keys // n_dst <= keys % n_dst]
    keys = keys[torch.randperm(keys.numel(), generator=gen)]
    pairs = torch.stack([keys // n_dst, keys % n_dst])
    e = pairs.shape[1]
    n_val, n_test = int(val * e), int(test * e)
    n_train = e - n_val - n_test
    train, val_pos, test_pos = (pairs[:, :n_train], pairs[:, n_train:n_train + n_val],
                                pairs[:, n_train + n_val:])
    negs = []
    for pos in (val_pos, test_pos):
        neg = typed_negatives(pos[0], n_dst, eval_neg_ratio, gen, every,
                              no_self=et[0] == et[2], max_rounds=100)
        if neg.src.numel() != pos.shape[1] * eval_neg_ratio:
            raise ValueError(f"typed_link_split({name}): too few non-edges for "
                             f"{eval_neg_ratio} negatives per positive")
        negs.append(torch.stack([neg.src, neg.dst]))
    return TypedLinkSplit(et, reverse, dict(graph.num_nodes), train, train, val_pos, negs[0],
                          test_pos, negs[1])
