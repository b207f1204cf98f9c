"""Link prediction through the factored runtime (``JobConfig.task="link"``, ``--task link``).

The runtime's parts do what they do for node classification; this module supplies what differs:

* **Driver** (:class:`LinkTask`): the edge split of the dataset's graph
  (:func:`~fgnn.link.split.random_link_split`, seeded by ``train.seed``), the training message
  graph the Samplers sample from, the number of items of each split (training supervision
  edges; validation and test *pairs*, positives then their fixed negatives) and the scores of an
  evaluation pass (:meth:`LinkTask.metrics`: AUC, AP and optionally MRR / Hits@K).
* **Samplers** (:class:`LinkSampling`): a training task's items are edge ids of the training
  supervision split. Each task draws ``neg_ratio`` filtered uniform negatives per positive (the
  destination replaced) and samples the endpoints' neighbourhood with the task's seed edges
  (and their reverse) excluded (:class:`~fgnn.link.sampler.LinkNeighborSampler`). An
  evaluation chunk is a slice of the split's pairs, sampled on the split's message graph (the
  training message edges for validation; plus the validation edges for test) with the job's
  k-hop sampler and the chunk's own generator. Either way the
  :class:`~fgnn.sampling.base.Sample` carries the pairs (``Sample.pairs``: local source,
  local destination, label).
* **Trainers** (:class:`LinkModel`, :func:`pair_loss`, :func:`pair_scores`): the encoder (GCN or
  GraphSAGE of :mod:`fgnn.models`, ``link.embed_dim`` outputs) embeds the sample's seeds, the
  decoder scores the pairs, BCE is the loss. Encoder and decoder are one ``nn.Module``, so the
  parameter server, the collective exchange and checkpoints treat them as any model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import nn

from fgnn.graph import CSRGraph
from fgnn.link.decoders import build_decoder
from fgnn.link.edges import EdgeSet
from fgnn.models.losses import bce_loss
from fgnn.link.metrics import average_precision, hits_at_k, mrr, roc_auc
from fgnn.link.sampler import LinkNeighborSampler
from fgnn.link.split import LinkSplit, random_link_split
from fgnn.sampling.base import Sample
from fgnn.sampling.task_sampling import SamplingSpec

if TYPE_CHECKING:
    from fgnn.config import JobConfig
    from fgnn.data.dataset import Dataset
    from fgnn.sampling.base import Sampler

__all__ = ["LinkModel", "build_link_model", "pair_loss", "pair_scores", "PairStep", "PAIR_STEP",
           "LinkTask",
           "LinkSampling", "EVAL_SPLITS"]

#: Splits an evaluation pass of a link job scores (``train`` has no fixed negatives).
EVAL_SPLITS = ("val", "test")


class LinkModel(nn.Module):
    """An encoder (``encoder(blocks, x)`` -> ``(B, D)`` embeddings) and a pair decoder as one
    module, so the runtime exchanges, checkpoints and restores both together.

    Attributes:
        num_layers, hidden, in_dim: the encoder's.
        num_classes: the embedding width D (the encoder's output width).
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.num_layers = getattr(encoder, "num_layers", None)
        self.hidden = getattr(encoder, "hidden", None)
        self.in_dim = getattr(encoder, "in_dim", None)
        self.num_classes = getattr(encoder, "num_classes", None)

    def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(B, D)`` of the sample's seeds."""
        return self.encoder(blocks, x)

    def pair_logits(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """``(P,)`` logits of the pairs ``pairs[0] -> pairs[1]`` (local ids into ``h``)."""
        return self.decoder(h.index_select(0, pairs[0]), h.index_select(0, pairs[1]))


def build_link_model(config: "JobConfig", feat_dim: int, num_layers: int) -> LinkModel:
    """The encoder ``config.model`` names with ``config.link.embed_dim`` outputs and the decoder
    ``config.link.decoder``."""
    from fgnn.models import build_model

    encoder = build_model(config.model, feat_dim, config.link.embed_dim, num_layers)
    return LinkModel(encoder, build_decoder(config.link.decoder, config.link.embed_dim))


def pair_loss(model: nn.Module, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Mean BCE of the sample's pairs (``pairs[2]`` the 0/1 labels); a model with its own
    ``pairs_loss`` (a recommender, :class:`~fgnn.models.pinsage_rec.PinSAGERecModel`) scores
    them itself."""
    if callable(getattr(model, "pairs_loss", None)):
        return model.pairs_loss(h, pairs)
    return bce_loss(model.pair_logits(h, pairs), pairs[2])


@torch.no_grad()
def pair_scores(model: nn.Module, h: torch.Tensor, pairs: torch.Tensor) -> dict[str, Any]:
    """An evaluation chunk's record: the pairs' logits (float32, in pair order), their labels,
    and ``correct`` / ``count`` / ``loss_sum`` (logit > 0 predicts an edge; summed BCE); a model
    with its own ``pairs_record`` (a recommender) makes the record itself."""
    if callable(getattr(model, "pairs_record", None)):
        return model.pairs_record(h, pairs)
    logits = model.pair_logits(h, pairs).float()
    label = pairs[2].to(logits.dtype)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, label, reduction="sum")
    return {"pair_scores": logits.cpu().numpy(), "pair_labels": pairs[2].cpu().numpy(),
            "correct": int(((logits > 0) == (label > 0.5)).sum()), "count": int(label.numel()),
            "loss_sum": float(loss)}


class PairStep:
    """The Trainers' rule of a pair task (link prediction, recommendation): the labels are the
    sample's pairs', the loss :func:`pair_loss`, an evaluation record :func:`pair_scores`."""

    def labels(self, sample: Sample, labels: torch.Tensor) -> torch.Tensor:
        """The pairs' labels (``pairs[2]``)."""
        return sample.pairs[2]

    def loss(self, model: nn.Module, out: Any, sample: Sample,
             labels: torch.Tensor) -> torch.Tensor:
        """:func:`pair_loss` of the sample's pairs."""
        return pair_loss(model, out, sample.pairs)

    def score(self, model: nn.Module, out: Any, sample: Sample,
              labels: torch.Tensor) -> dict[str, Any]:
        """:func:`pair_scores` of the sample's pairs."""
        return pair_scores(model, out, sample.pairs)


#: The pair step rule (stateless).
PAIR_STEP = PairStep()


def _eval_pairs(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """``(3, P + K)``: the positives, then the negatives, with their labels."""
    label = torch.cat([torch.ones(pos.shape[1], dtype=torch.int64),
                       torch.zeros(neg.shape[1], dtype=torch.int64)])
    return torch.cat([torch.cat([pos, neg], dim=1).long(), label.unsqueeze(0)])


@dataclass
class LinkTask:
    """The driver's side of a link job: the split and the scores of evaluation passes.

    Attributes:
        split: the edge split (:func:`~fgnn.link.split.random_link_split`).
        neg_ratio: training negatives per positive.
        eval_neg_ratio: fixed negatives per validation/test positive.
        exclude: seed-edge exclusion mode.
        hits_k: K of the ranking metrics (empty: AUC and AP only).
    """

    split: LinkSplit
    neg_ratio: int = 1
    eval_neg_ratio: int = 1
    exclude: str = "reverse"
    hits_k: tuple[int, ...] = ()

    @classmethod
    def build(cls, config: "JobConfig", dataset: "Dataset") -> "LinkTask":
        """Split ``dataset.graph``'s edges as ``config.link`` says, seeded by ``train.seed``.

        Raises:
            ValueError: naming the dataset when its graph has too few edges to split.
        """
        lc = config.link
        split = random_link_split(dataset.graph, val=lc.val, test=lc.test,
                                  neg_ratio=lc.eval_neg_ratio, seed=config.train.seed)
        if split.train_pos.shape[1] == 0 or split.val_pos.shape[1] == 0 \
                or split.test_pos.shape[1] == 0:
            raise ValueError(f"dataset {dataset.name!r}: too few edges for a {lc.val}/{lc.test} "
                             f"validation/test edge split")
        return cls(split, lc.neg_ratio, lc.eval_neg_ratio, lc.exclude, lc.hits_k)

    def training_dataset(self, dataset: "Dataset") -> "Dataset":
        """``dataset`` with its graph replaced by the training message graph: what the Samplers
        sample and the cache's hotness is computed on (no validation or test edge in it)."""
        return dataclasses.replace(dataset, graph=self.split.graph("train"),
                                   check_features=False)

    def size(self, split: str) -> int:
        """Items of ``split``: training supervision edges, or validation / test pairs."""
        if split == "train":
            return int(self.split.train_pos.shape[1])
        return int(self.pairs(split).shape[1])

    def pairs(self, split: str) -> torch.Tensor:
        """``(3, P + K)`` global source, destination and label of ``split``'s scored pairs."""
        if split not in EVAL_SPLITS:
            raise ValueError(f"split must be one of {', '.join(EVAL_SPLITS)}, got {split!r}")
        s = self.split
        return _eval_pairs(getattr(s, f"{split}_pos"), getattr(s, f"{split}_neg"))

    def payload(self) -> dict[str, Any]:
        """What every Sampler needs beside the training graph, as numpy arrays."""
        s = self.split
        return {"num_nodes": int(s.num_nodes), "undirected": bool(s.undirected),
                "train_pos": s.train_pos.numpy(), "train_message": s.train_message.numpy(),
                "val_pos": s.val_pos.numpy(),
                "pairs": {k: self.pairs(k).numpy() for k in EVAL_SPLITS},
                "neg_ratio": self.neg_ratio, "exclude": self.exclude}

    name = "link"
    #: The validation score that picks the weights, as plots and tables name it.
    metric = "AUC"
    step = PAIR_STEP

    def items(self, split: str, dataset: Any = None) -> torch.Tensor:
        """Ids of ``split``'s items: training supervision edges, or validation / test pairs."""
        return torch.arange(self.size(split), dtype=torch.int64)

    def sampling(self) -> SamplingSpec:
        """Every Sampler's :class:`LinkSampling` over :meth:`payload`."""
        return SamplingSpec(LinkSampling, self.payload())

    def build_model(self, config: "JobConfig", dataset: "Dataset", num_layers: int) -> nn.Module:
        """The :class:`LinkModel` of ``config``."""
        return build_link_model(config, dataset.feat_dim, num_layers)

    def validation(self, scored: Any) -> tuple[float, dict[str, float]]:
        """The validation AUC picks the weights; AUC and AP go in the epoch's record."""
        m = self.metrics("val", *scored.pairs["val"])
        return m["auc"], {"val_auc": m["auc"], "val_ap": m["ap"]}

    def final_splits(self, known_val: Optional[float]) -> tuple[str, ...]:
        """Validation and test pairs (``train`` has no fixed negatives)."""
        return EVAL_SPLITS

    def final_scores(self, scored: Any, known_val: Optional[float]) -> dict[str, float]:
        """``{val,test}_{auc,ap}`` (and ``_mrr``, ``_hits@K``)."""
        return {f"{s}_{k}": v for s in EVAL_SPLITS
                for k, v in self.metrics(s, *scored.pairs[s]).items()}

    def identity(self) -> dict[str, Any]:
        """A homogeneous link job records no relation."""
        return {"task": self.name, "link": {"edge_type": None}}

    def metrics(self, split: str, scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """``{"auc", "ap"}`` (plus ``"mrr"`` and ``"hits@K"``) of ``split``'s pair ``scores`` in
        pair order (positives, then each positive's negatives in turn).

        Raises:
            ValueError: when the scores do not cover the split's pairs.
        """
        want = self.pairs(split)
        if len(scores) != want.shape[1] or not np.array_equal(labels, want[2].numpy()):
            raise ValueError(f"{split}: {len(scores)} pair scores for {want.shape[1]} pairs")
        s = torch.from_numpy(np.asarray(scores, dtype=np.float64))
        n_pos = int(want[2].sum())
        pos, neg = s[:n_pos], s[n_pos:]
        out = {"auc": roc_auc(pos, neg), "ap": average_precision(pos, neg)}
        if self.hits_k:
            grouped = neg.view(n_pos, self.eval_neg_ratio)
            out["mrr"] = mrr(pos, grouped)
            out.update({f"hits@{k}": hits_at_k(pos, grouped, k) for k in self.hits_k})
        return out


class LinkSampling:
    """A Sampler's link samples (training edges with negatives, evaluation pairs).

    Args:
        payload: :meth:`LinkTask.payload`.
        sampler: the job's k-hop sampler (its fanouts and frontier; it samples evaluation
            chunks, which exclude nothing: their pairs are in no message graph).
        device: the sampling device.

    Raises:
        ValueError: when ``sampler`` is not a k-hop sampler.
    """

    def __init__(self, payload: dict[str, Any], sampler: "Sampler",
                 device: torch.device | str = "cpu") -> None:
        fanouts = getattr(sampler, "fanouts", None)
        if fanouts is None:
            raise ValueError(f"link prediction samples with a k-hop sampler, got "
                             f"{type(sampler).__name__}")
        self.device = torch.device(device)
        t = lambda a: torch.as_tensor(np.asarray(a)).to(self.device)  # noqa: E731
        self.num_nodes, self.undirected = int(payload["num_nodes"]), bool(payload["undirected"])
        self.train_pos, self.train_message = t(payload["train_pos"]), t(payload["train_message"])
        self.val_pos = t(payload["val_pos"])
        self.pairs = {k: t(v) for k, v in payload["pairs"].items()}
        self.eval_sampler = sampler
        self.train_sampler = LinkNeighborSampler(
            fanouts, neg_ratio=int(payload["neg_ratio"]), exclude=str(payload["exclude"]),
            frontier=getattr(sampler, "frontier", "all"))
        self.known = EdgeSet(torch.cat([self.train_message, self.train_pos], dim=1),
                             self.num_nodes, undirected=self.undirected)
        self._test_graph: Optional[CSRGraph] = None
        #: the training edges' CSR slots in the training graph (computed on first use)
        self._slots: Optional[tuple[CSRGraph, Optional[torch.Tensor]]] = None

    def graph(self, split: str, train_graph: CSRGraph) -> CSRGraph:
        """The message graph of ``split``: the training graph for training and validation, the
        training message and validation edges for test (built once)."""
        if split != "test":
            return train_graph
        if self._test_graph is None:
            edges = torch.cat([self.train_message, self.val_pos], dim=1)
            self._test_graph = CSRGraph.from_edge_index(
                edges.cpu(), num_nodes=self.num_nodes, symmetrize=self.undirected,
                dedup=True).to(train_graph.device)
        return self._test_graph

    def train_sample(self, graph: CSRGraph, edge_ids: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of training supervision edges ``edge_ids``: their negatives and the
        endpoints' neighbourhood without the seed edges."""
        ids = edge_ids.to(self.device).long()
        if self._slots is None or self._slots[0] is not graph:
            self._slots = (graph, self.train_sampler.slots(graph, self.train_pos))
        slots = self._slots[1]
        ls = self.train_sampler.sample(graph, self.train_pos.index_select(1, ids), generator,
                                       self.known,
                                       None if slots is None else slots.index_select(0, ids))
        sample = ls.sample
        dev = sample.seeds.device
        sample.pairs = torch.stack([ls.src.to(dev), ls.dst.to(dev), ls.label.to(dev).long()])
        return sample

    def eval_sample(self, train_graph: CSRGraph, split: str, pair_ids: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of ``split``'s pairs ``pair_ids`` on the split's message graph."""
        if split not in self.pairs:
            raise ValueError(f"link evaluation scores {', '.join(self.pairs)}, not {split!r}")
        p = self.pairs[split].index_select(1, pair_ids.to(self.device).long())
        seeds = torch.unique(p[:2].reshape(-1))  # sorted: a seed's local id is its position
        sample = self.eval_sampler.sample(self.graph(split, train_graph), seeds, generator)
        sample.pairs = torch.stack([torch.searchsorted(seeds, p[0]),
                                    torch.searchsorted(seeds, p[1]), p[2]])
        return sample
