"""Typed link prediction through the factored runtime (``--task link`` on a typed dataset).

The pieces mirror :mod:`fgnn.tasks.link` (same interfaces, so the runtime's link path drives
them unchanged) on a :class:`~fgnn.data.dataset_hetero.HeteroDataset` and one relation
``R = (S, r, D)`` (:mod:`fgnn.link.hetero`):

* **Driver** (:class:`TypedLinkTask`): ``R``'s edge split, the training message graph (no
  validation or test edge of ``R``, nor its twin in the reverse relation), the item counts and
  the metrics (AUC, AP, MRR / Hits@K) of :class:`~fgnn.tasks.link.LinkTask`.
* **Samplers** (:class:`TypedLinkSampling`): a training task's items are ids of training edges
  of ``R``; each draws ``neg_ratio`` negatives per positive with a destination of type ``D``
  (filtered: never a known training edge of ``R``), then samples around the seeds of both types
  at once (:meth:`~fgnn.sampling.hetero.HeteroKHop.sample_seeds`: sources of type ``S``,
  destinations and negatives of type ``D``) with the seed edges dropped from ``R``'s draws and,
  with ``exclude="reverse"``, their twins from the reverse relation's. An evaluation chunk is a
  slice of the split's pairs sampled on the split's message graph. The
  :class:`~fgnn.sampling.base.Sample` carries the pairs (``pairs``: local id among the
  ``S`` seeds, local id among the ``D`` seeds, label).
* **Trainers** (:class:`HeteroLinkModel`): the relational GraphSAGE of
  :mod:`fgnn.models.hetero_sage` embeds the seeds of every type (its head maps them to
  ``link.embed_dim``), the decoder (dot or MLP) scores the pairs, BCE is the loss; typed
  extraction, the typed cache and the gradient exchange are those of any typed job.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import nn

from fgnn.graph.hetero import EdgeType, HeteroGraph
from fgnn.link.hetero import (TypedLinkSplit, resolve_edge_type, reverse_of, typed_link_split,
                              typed_negatives, with_relation)
from fgnn.sampling.hetero import EdgeFilter, HeteroKHop
from fgnn.sampling.base import Sample
from fgnn.link.edges import EdgeSet
from fgnn.tasks.link import LinkTask
from fgnn.sampling.task_sampling import SamplingSpec

if TYPE_CHECKING:
    from fgnn.config import JobConfig
    from fgnn.data.dataset_hetero import HeteroDataset

__all__ = ["TypedLinkTask", "TypedLinkSampling", "HeteroLinkModel", "build_typed_link_model",
           "seed_edge_filter"]


@dataclass
class TypedLinkTask(LinkTask):
    """The driver's side of a typed link job (module docstring); ``split`` is a
    :class:`~fgnn.link.hetero.TypedLinkSplit`."""

    split: TypedLinkSplit  # type: ignore[assignment]

    @classmethod
    def build(cls, config: "JobConfig", dataset: "HeteroDataset") -> "TypedLinkTask":
        """Split the relation ``config.link.edge_type`` names (else the dataset's default).

        Raises:
            ValueError: one line on an unknown relation or too few edges to split.
        """
        lc = config.link
        g = dataset.graph
        et = resolve_edge_type(g, lc.edge_type, dataset.name)
        split = typed_link_split(g, et, val=lc.val, test=lc.test,
                                 eval_neg_ratio=lc.eval_neg_ratio, seed=config.train.seed,
                                 reverse=reverse_of(g, et))
        if min(split.train_pos.shape[1], split.val_pos.shape[1], split.test_pos.shape[1]) == 0:
            raise ValueError(f"dataset {dataset.name!r}: relation {','.join(et)} has too few "
                             f"edges for a {lc.val}/{lc.test} validation/test edge split")
        return cls(split, lc.neg_ratio, lc.eval_neg_ratio, lc.exclude, lc.hits_k)

    @property
    def edge_type(self) -> EdgeType:
        """The relation predicted."""
        return self.split.edge_type

    def training_dataset(self, dataset: "HeteroDataset") -> "HeteroDataset":  # type: ignore
        """``dataset`` on the training message graph (what the Samplers sample and the typed
        cache ranks)."""
        return dataclasses.replace(dataset, graph=self.split.message_graph(dataset.graph,
                                                                           "train"),
                                   check_features=False)

    def sampling(self) -> SamplingSpec:
        """Every Sampler's :class:`TypedLinkSampling` over :meth:`payload`."""
        return SamplingSpec(TypedLinkSampling, self.payload())

    def build_model(self, config: "JobConfig", dataset: "HeteroDataset",  # type: ignore
                    num_layers: int) -> nn.Module:
        """The :class:`HeteroLinkModel` of the job's relation."""
        return build_typed_link_model(config, dataset, self.edge_type, num_layers)

    def identity(self) -> dict[str, Any]:
        """The task and the relation predicted (checked on resume)."""
        return {"task": self.name, "link": {"edge_type": ",".join(self.edge_type)}}

    def payload(self) -> dict[str, Any]:
        """What every Sampler needs beside the training graph."""
        s = self.split
        return {"edge_type": list(s.edge_type),
                "reverse": None if s.reverse is None else list(s.reverse),
                "train_pos": s.train_pos.numpy(), "train_message": s.train_message.numpy(),
                "val_pos": s.val_pos.numpy(),
                "pairs": {k: self.pairs(k).numpy() for k in ("val", "test")},
                "neg_ratio": self.neg_ratio, "exclude": self.exclude}


def seed_edge_filter(pos: torch.Tensor, et: EdgeType, rev: Optional[EdgeType],
                     num_nodes: dict[str, int], exclude: str) -> Optional[EdgeFilter]:
    """The :data:`~fgnn.sampling.hetero.EdgeFilter` dropping the seed edges ``pos`` (``(2, P)``
    ``[s, d]`` of ``et``) from ``et``'s draws and, with ``exclude="reverse"``, their twins
    ``d -> s`` from ``rev``'s; None for ``exclude="none"``."""
    if exclude == "none":
        return None
    size = max(num_nodes[et[0]], num_nodes[et[2]])
    both = exclude == "reverse"
    sets = {et: EdgeSet(pos, size, undirected=both and rev == et)}  # rev == et: symmetric
    if both and rev is not None and rev != et:
        sets[rev] = EdgeSet(pos.flip(0), size)

    def keep(rel: EdgeType, nbr: torch.Tensor, dst: torch.Tensor) -> Optional[torch.Tensor]:
        found = sets.get(rel)
        return None if found is None else ~found.contains(nbr, dst)
    return keep


class TypedLinkSampling:
    """A Sampler's typed link samples (training edges with negatives, evaluation pairs).

    Args:
        payload: :meth:`TypedLinkTask.payload`.
        sampler: the job's :class:`~fgnn.sampling.hetero.HeteroKHop`.
        device: the sampling device.
    """

    def __init__(self, payload: dict[str, Any], sampler: HeteroKHop,
                 device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        t = lambda a: torch.as_tensor(np.asarray(a)).to(self.device)  # noqa: E731
        self.et: EdgeType = tuple(payload["edge_type"])  # type: ignore[assignment]
        self.rev: Optional[EdgeType] = (None if payload["reverse"] is None
                                        else tuple(payload["reverse"]))  # type: ignore
        self.train_pos, self.train_message = t(payload["train_pos"]), t(payload["train_message"])
        self.val_pos = t(payload["val_pos"])
        self.pairs = {k: t(v) for k, v in payload["pairs"].items()}
        self.neg_ratio, self.exclude = int(payload["neg_ratio"]), str(payload["exclude"])
        self.sampler = sampler
        self._known: Optional[EdgeSet] = None
        self._test_graph: Optional[HeteroGraph] = None

    def graph(self, split: str, train_graph: HeteroGraph) -> HeteroGraph:
        """The message graph of ``split`` (test: plus the validation edges, built once)."""
        if split != "test":
            return train_graph
        if self._test_graph is None:
            edges = torch.cat([self.train_message, self.val_pos], dim=1)
            self._test_graph = with_relation(train_graph, self.et, self.rev, edges)
        return self._test_graph

    def _seeds(self, src: torch.Tensor, dst: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Seeds per type (sorted, distinct) and the pairs' local ids into them."""
        s_t, d_t = self.et[0], self.et[2]
        if s_t == d_t:
            seeds = {s_t: torch.unique(torch.cat([src, dst]))}
        else:
            seeds = {s_t: torch.unique(src), d_t: torch.unique(dst)}
        return (seeds, torch.searchsorted(seeds[s_t], src),
                torch.searchsorted(seeds[d_t], dst))

    def train_sample(self, graph: HeteroGraph, edge_ids: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of training edges ``edge_ids``: their negatives and the neighbourhood
        of both endpoint types without the seed edges (nor their reverse twins)."""
        pos = self.train_pos.index_select(1, edge_ids.to(self.device).long())
        n = graph.num_nodes
        if self._known is None:
            self._known = EdgeSet(self.train_message, max(n[self.et[0]], n[self.et[2]]),
                                  undirected=self.rev == self.et)
        neg = typed_negatives(pos[0], n[self.et[2]], self.neg_ratio, generator, self._known,
                              no_self=self.et[0] == self.et[2])
        src, dst = torch.cat([pos[0], neg.src]), torch.cat([pos[1], neg.dst])
        seeds, loc_src, loc_dst = self._seeds(src, dst)
        keep = seed_edge_filter(pos, self.et, self.rev, n, self.exclude)
        sample = self.sampler.sample_seeds(graph, seeds, generator, keep)
        label = torch.cat([torch.ones(pos.shape[1], dtype=torch.int64, device=src.device),
                           torch.zeros(neg.src.numel(), dtype=torch.int64, device=src.device)])
        sample.pairs = torch.stack([loc_src, loc_dst, label])
        return sample

    def eval_sample(self, train_graph: HeteroGraph, split: str, pair_ids: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of ``split``'s pairs ``pair_ids`` on the split's message graph."""
        if split not in self.pairs:
            raise ValueError(f"link evaluation scores {', '.join(self.pairs)}, not {split!r}")
        p = self.pairs[split].index_select(1, pair_ids.to(self.device).long())
        seeds, loc_src, loc_dst = self._seeds(p[0], p[1])
        sample = self.sampler.sample_seeds(self.graph(split, train_graph), seeds, generator)
        sample.pairs = torch.stack([loc_src, loc_dst, p[2]])
        return sample


class HeteroLinkModel(nn.Module):
    """Relational GraphSAGE embeddings of both endpoint types and a pair decoder, one module
    (the runtime exchanges and checkpoints both together).

    Args:
        encoder: a :class:`~fgnn.models.hetero_sage.HeteroGraphSAGE` whose head outputs the
            embedding width (applied to every type's last-layer rows).
        decoder: ``decoder(h_src, h_dst) -> (P,)`` logits.
        edge_type: the relation scored.
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module, edge_type: EdgeType) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_type, self.dst_type = edge_type[0], edge_type[2]
        self.num_layers = encoder.num_layers
        self.hidden = encoder.head.in_features
        self.num_classes = encoder.head.out_features

    def forward(self, blocks: list, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Node type -> ``(B_t, D)`` embeddings of the sample's seeds of the two endpoint
        types."""
        h = self.encoder.encode(blocks, x)
        types = dict.fromkeys((self.src_type, self.dst_type))  # one entry when S == D
        return {t: self.encoder.head(h[t]) for t in types if t in h}

    def pair_logits(self, h: dict[str, torch.Tensor], pairs: torch.Tensor) -> torch.Tensor:
        """``(P,)`` logits of the pairs (``pairs[0]`` local ids among the source type's seeds,
        ``pairs[1]`` among the destination type's)."""
        return self.decoder(h[self.src_type].index_select(0, pairs[0]),
                            h[self.dst_type].index_select(0, pairs[1]))


def build_typed_link_model(config: "JobConfig", dataset: "HeteroDataset", edge_type: EdgeType,
                           num_layers: int) -> HeteroLinkModel:
    """The typed link model of ``config`` (``model.hidden``, ``model.dropout``,
    ``link.embed_dim``, ``link.decoder``) on ``dataset``'s graph."""
    from fgnn.link.decoders import build_decoder
    from fgnn.models.hetero_sage import HeteroGraphSAGE

    enc = HeteroGraphSAGE(dataset.graph, config.link.embed_dim, edge_type[0],
                          num_layers=num_layers, hidden=config.model.hidden,
                          dropout=config.model.dropout)
    return HeteroLinkModel(enc, build_decoder(config.link.decoder, config.link.embed_dim),
                           edge_type)
