"""Node classification (``JobConfig.task="node"``) on homogeneous and typed graphs.

The items of a split are its vertex ids (of the target type on a typed graph); a mini-batch is
the job's sampler around them; the loss is cross-entropy of the seeds' logits; an evaluation
pass scores accuracy (FGNN §7's recipe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from fgnn.evaluation import score_logits
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.models import build_model
from fgnn.models.hetero_sage import HeteroGraphSAGE
from fgnn.sampling.base import Sample
from fgnn.sampling.task_sampling import SamplingSpec
from fgnn.tasks.contracts import check_logits, check_sample, check_sample_layout

__all__ = ["NodeTask", "NodeSampling", "NodeStep", "NODE_STEP"]


class NodeSampling:
    """A Sampler's node samples: the job's sampler around the items (vertex ids), each checked
    against the sample contract (:mod:`fgnn.tasks.contracts`: every sample's seeds, the first
    training and the first evaluation sample's ids and blocks)."""

    def __init__(self, payload: Any, sampler: Any, device: torch.device) -> None:
        self.sampler = sampler
        self._laid_out: set[str] = set()  # "train" / "eval": the layout checked once

    def _checked(self, kind: str, graph: Any, items: torch.Tensor, sample: Any) -> Sample:
        check_sample(self.sampler, sample, items)
        if kind not in self._laid_out and isinstance(sample.input_nodes, torch.Tensor):
            check_sample_layout(self.sampler, sample, int(graph.num_nodes))  # homogeneous
            self._laid_out.add(kind)
        return sample

    def train_sample(self, graph: Any, items: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> Sample:
        """The sample around training vertices ``items``."""
        return self._checked("train", graph, items, self.sampler.sample(graph, items, generator))

    def eval_sample(self, graph: Any, split: str, items: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """The sample around ``split``'s vertices ``items``."""
        return self._checked("eval", graph, items, self.sampler.sample(graph, items, generator))


@dataclass(frozen=True)
class NodeStep:
    """Cross-entropy of the seeds' logits; accuracy of an evaluation chunk. Each output is
    checked to be ``(B, num_classes)`` floating-point logits first
    (:func:`~fgnn.tasks.contracts.check_logits`; ``num_classes`` None: any width)."""

    num_classes: Optional[int] = None

    def labels(self, sample: Sample, labels: torch.Tensor) -> torch.Tensor:
        """The seeds' class ids."""
        return labels[sample.seeds.to(labels.device)]

    def loss(self, model: nn.Module, out: torch.Tensor, sample: Sample,
             labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the seeds."""
        check_logits(model, out, int(labels.numel()), self.num_classes)
        return F.cross_entropy(out, labels)

    def score(self, model: nn.Module, out: torch.Tensor, sample: Sample,
              labels: torch.Tensor) -> dict[str, Any]:
        """``correct``, ``count`` and summed cross-entropy of the chunk."""
        check_logits(model, out, int(labels.numel()), self.num_classes)
        s = score_logits(out, labels)
        return {"correct": s.correct, "count": s.count, "loss_sum": s.loss_sum}


#: The node step rule (stateless).
NODE_STEP = NodeStep()


@dataclass
class NodeTask:
    """The driver's side of node classification (stateless: the items are the splits of the
    dataset the runtime passes)."""

    name: str = "node"
    #: per-epoch validation may score a subset of the vertices (``train.val_subset``)
    subset_validation: bool = True
    step: Any = NODE_STEP
    metric: str = "accuracy"
    """The validation score that picks the weights, as plots and tables name it."""

    @classmethod
    def build(cls, config: Any, dataset: Any, model: Optional[nn.Module] = None) -> "NodeTask":
        """The task over ``dataset``'s vertex splits."""
        return cls(step=NodeStep(int(dataset.num_classes)))

    def training_dataset(self, dataset: Any) -> Any:
        """Node classification samples the whole graph."""
        return dataset

    def items(self, split: str, dataset: Any) -> torch.Tensor:
        """The split's vertex ids in ``dataset`` (the job's, renumbered by a reordering)."""
        return getattr(dataset, f"{split}_idx").cpu()

    def sampling(self) -> SamplingSpec:
        """The job's sampler around the items."""
        return SamplingSpec(NodeSampling)

    def build_model(self, config: Any, dataset: Any, num_layers: int) -> nn.Module:
        """The classifier of ``config.model`` (the relational GraphSAGE on a typed graph)."""
        if isinstance(dataset, HeteroDataset):
            return HeteroGraphSAGE(dataset.graph, dataset.num_classes, dataset.target_type,
                                   num_layers=num_layers, hidden=config.model.hidden,
                                   dropout=config.model.dropout)
        return build_model(config.model, dataset.feat_dim, dataset.num_classes, num_layers)

    def validation(self, scored: Any) -> tuple[float, dict[str, float]]:
        """Validation accuracy."""
        acc = scored.accuracy("val")
        return acc, {"val_acc": acc}

    def final_splits(self, known_val: Optional[float]) -> tuple[str, ...]:
        """Train, validation (unless known) and test."""
        return tuple(s for s in ("train", "val", "test") if s != "val" or known_val is None)

    def final_scores(self, scored: Any, known_val: Optional[float]) -> dict[str, float]:
        """``{train,val,test}_acc`` (validation reused when the best epoch scored it)."""
        return {f"{s}_acc": known_val if s == "val" and known_val is not None
                else scored.accuracy(s) for s in ("train", "val", "test")}

    def identity(self) -> dict[str, Any]:
        """Node classification records no relation."""
        return {"task": self.name, "link": {"edge_type": None}}
