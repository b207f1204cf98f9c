"""The single-process link-prediction loop: the counterpart of :func:`fgnn.training.fit`.

Per epoch the training supervision edges are shuffled and cut into mini-batches of
``batch_size`` edges. Each batch draws its negatives and samples the endpoints' neighbourhood
with the batch's edges excluded (:class:`~fgnn.link.sampler.LinkNeighborSampler`); the encoder
embeds the endpoints, the decoder scores the pairs, and the loss steps the optimiser.
Validation scores the fixed validation pairs with full-neighbour embeddings over the validation
message graph; the best validation AUC selects the weights the test is scored with.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from fgnn.config import TrainConfig
from fgnn.data.dataset import Features
from fgnn.graph import CSRGraph
from fgnn.models.step import forward_backward
from fgnn.models.losses import LOSSES, bce_loss, max_margin_loss
from fgnn.link.metrics import average_precision, roc_auc
from fgnn.link.sampler import LinkNeighborSampler
from fgnn.link.split import LinkSplit
from fgnn.training import FeatureBuffer, FullNeighborSampler, extract_features

__all__ = ["LinkHistory", "embed_all", "evaluate_link", "fit_link"]


@dataclass
class LinkHistory:
    """What :func:`fit_link` did.

    Attributes:
        loss: mean training loss per epoch.
        val_auc, val_ap: validation scores per evaluated epoch.
        best_epoch: epoch of the best validation AUC.
        test_auc, test_ap: test scores with the best weights.
        epoch_time_s: wall seconds of each epoch's training steps (sampling, negatives,
            features, forward, backward, step; the evaluation after it excluded).
        epoch_cpu_s: the same in CPU time of the calling thread (steadier on a shared machine;
            it misses the work of other threads, e.g. intra-op threads).
    """

    loss: list[float] = field(default_factory=list)
    val_auc: list[float] = field(default_factory=list)
    val_ap: list[float] = field(default_factory=list)
    best_epoch: Optional[int] = None
    test_auc: Optional[float] = None
    test_ap: Optional[float] = None
    epoch_time_s: list[float] = field(default_factory=list)
    epoch_cpu_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view."""
        return asdict(self)


@torch.no_grad()
def embed_all(encoder: nn.Module, features: Features, graph: CSRGraph,
              chunk: int = 4096) -> torch.Tensor:
    """``(N, D)`` full-neighbour embeddings of every vertex of ``graph`` (``encoder.num_layers``
    hops), ``chunk`` seeds at a time."""
    encoder.eval()
    sampler = FullNeighborSampler(encoder.num_layers)
    out = []
    for start in range(0, graph.num_nodes, chunk):
        seeds = torch.arange(start, min(start + chunk, graph.num_nodes))
        sample = sampler.sample(graph, seeds)
        out.append(encoder(sample.blocks, extract_features(features, sample.input_nodes)))
    return torch.cat(out)


@torch.no_grad()
def evaluate_link(encoder: nn.Module, decoder: nn.Module, features: Features, split: LinkSplit,
                  stage: str) -> dict[str, float]:
    """``{"auc", "ap"}`` of the fixed ``stage`` (``val`` or ``test``) pairs of ``split``, with
    full-neighbour embeddings over that stage's message graph."""
    if stage not in ("val", "test"):
        raise ValueError(f"stage must be val or test, got {stage!r}")
    pos, neg = getattr(split, f"{stage}_pos"), getattr(split, f"{stage}_neg")
    h = embed_all(encoder, features, split.graph(stage))
    decoder.eval()
    s_pos = decoder(h[pos[0]], h[pos[1]])
    s_neg = decoder(h[neg[0]], h[neg[1]])
    return {"auc": roc_auc(s_pos, s_neg), "ap": average_precision(s_pos, s_neg)}


def _pair_loss(decoder: nn.Module, ls: Any, kind: str, margin: float) -> Any:
    """The loss of one link sample's scored pairs for :func:`forward_backward`: BCE, or the
    max-margin loss of each positive against its negatives."""
    def loss(encoder: nn.Module, h: torch.Tensor, sample: Any,
             labels: torch.Tensor) -> torch.Tensor:
        score = decoder(h[ls.src], h[ls.dst])
        if kind == "bce":
            return bce_loss(score, labels)
        return max_margin_loss(score[:ls.num_pos], score[ls.num_pos:], ls.neg_pos_index, margin)
    return loss


def fit_link(features: Features, split: LinkSplit, encoder: nn.Module, decoder: nn.Module,
             sampler: LinkNeighborSampler, train_cfg: TrainConfig, *, loss: str = "bce",
             filter_negatives: bool = True, margin: float = 0.1) -> LinkHistory:
    """Train ``encoder`` and ``decoder`` on the training edges of ``split``.

    Args:
        features: ``(N, F)`` vertex features.
        split: the edge split (:func:`fgnn.link.split.random_link_split`).
        encoder: a model of :mod:`fgnn.models` whose output width is the embedding size.
        decoder: pair scorer (:mod:`fgnn.link.decoders`).
        sampler: edge-seed sampler; its layer count must be the encoder's.
        train_cfg: epochs, batch size (edges per step), lr, weight decay, seed, eval_every,
            patience (in evaluations without a better validation AUC).
        loss: ``bce`` or ``margin`` (:mod:`fgnn.models.losses`).
        filter_negatives: never draw a known training edge as a negative.
        margin: Δ of the max-margin loss.

    Returns:
        :class:`LinkHistory`; the encoder and decoder end with the best validation weights.

    Raises:
        ValueError: on another ``loss``, a layer-count mismatch or features of another size.
    """
    _check_fit_link(features, split, encoder, sampler, loss)
    torch.manual_seed(train_cfg.seed)
    params = list(encoder.parameters()) + list(decoder.parameters())
    run = _LinkRun(features, split, encoder, decoder, sampler, train_cfg, loss, margin,
                   torch.optim.Adam(params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay),
                   split.known_edges("train") if filter_negatives else None)
    for epoch in range(train_cfg.epochs):
        run.epoch(epoch)
        if (epoch + 1) % train_cfg.eval_every and epoch + 1 < train_cfg.epochs:
            continue
        if run.validate(epoch):
            break
    if run.best is not None:
        encoder.load_state_dict(run.best[0])
        decoder.load_state_dict(run.best[1])
    test = evaluate_link(encoder, decoder, features, split, "test")
    run.hist.test_auc, run.hist.test_ap = test["auc"], test["ap"]
    return run.hist


def _check_fit_link(features: Features, split: LinkSplit, encoder: nn.Module,
                    sampler: LinkNeighborSampler, loss: str) -> None:
    """:func:`fit_link`'s argument checks (loss, layer counts, feature rows)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if sampler.num_layers != encoder.num_layers:
        raise ValueError(f"the sampler has {sampler.num_layers} layers but the encoder "
                         f"{encoder.num_layers}")
    if features.shape[0] != split.num_nodes:
        raise ValueError(f"features have {features.shape[0]} rows but the split has "
                         f"{split.num_nodes} vertices")


class _LinkRun:
    """The moving parts of one :func:`fit_link`: the training graph, its seed edges' CSR slots,
    the feature rows, the history and the best weights so far."""

    def __init__(self, features: Features, split: LinkSplit, encoder: nn.Module,
                 decoder: nn.Module, sampler: LinkNeighborSampler, cfg: TrainConfig, loss: str,
                 margin: float, opt: torch.optim.Optimizer, known: Any) -> None:
        self.features, self.split, self.encoder, self.decoder = features, split, encoder, decoder
        cfg = cfg.with_batch_for(int(split.train_pos.shape[1]))  # an auto batch: the split's
        self.sampler, self.cfg, self.loss, self.margin = sampler, cfg, loss, margin
        self.opt, self.known = opt, known
        self.graph = split.graph("train")
        self.rows = FeatureBuffer(features)
        self.slots = sampler.slots(self.graph, split.train_pos)  # the seed edges', once
        self.hist = LinkHistory()
        self.best: Optional[tuple[dict, dict]] = None
        self.best_auc, self.bad = -1.0, 0

    def epoch(self, epoch: int) -> None:
        """One pass over the shuffled training edges, a step per mini-batch."""
        tick, tick_cpu = time.perf_counter(), time.thread_time()
        gen = torch.Generator().manual_seed(self.cfg.seed * 100_003 + epoch)
        pos = self.split.train_pos
        order = torch.randperm(pos.shape[1], generator=gen)
        self.encoder.train()
        self.decoder.train()
        total, steps = 0.0, 0
        for start in range(0, order.numel(), self.cfg.batch_size):
            ids = order[start:start + self.cfg.batch_size]
            ls = self.sampler.sample(self.graph, pos[:, ids], gen, self.known,
                                     None if self.slots is None
                                     else self.slots.index_select(0, ids))
            x = self.rows.gather(ls.sample.input_nodes)
            self.opt.zero_grad(set_to_none=True)
            value = forward_backward(self.encoder, _pair_loss(self.decoder, ls, self.loss,
                                                              self.margin), ls.sample, x, ls.label)
            self.opt.step()
            total, steps = total + float(value.detach()), steps + 1
        self.hist.epoch_time_s.append(time.perf_counter() - tick)
        self.hist.epoch_cpu_s.append(time.thread_time() - tick_cpu)
        self.hist.loss.append(total / max(steps, 1))

    def validate(self, epoch: int) -> bool:
        """Score validation, keep the best weights; True when patience is spent."""
        scores = evaluate_link(self.encoder, self.decoder, self.features, self.split, "val")
        self.hist.val_auc.append(scores["auc"])
        self.hist.val_ap.append(scores["ap"])
        if scores["auc"] > self.best_auc:
            self.best_auc, self.bad, self.hist.best_epoch = scores["auc"], 0, epoch
            self.best = (copy.deepcopy(self.encoder.state_dict()),
                         copy.deepcopy(self.decoder.state_dict()))
            return False
        self.bad += 1
        return self.cfg.patience is not None and self.bad >= self.cfg.patience
