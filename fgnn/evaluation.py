"""Deterministic scoring of a split: the one definition of a reported accuracy.

Every accuracy fgnn reports -- validation after an epoch, the final train/val/test scores, and a
saved model scored again after :func:`fgnn.load_model` -- is the result of the same recipe, so a
number printed by ``launch.py`` is reproduced exactly by re-scoring the saved weights:

* the split's vertices are cut **in order** into chunks of ``batch_size``
  (:func:`eval_batches`), never shuffled;
* chunk ``i`` of split ``s`` is sampled with its own generator, :func:`eval_generator`
  ``(seed, s, i)``, whichever process samples it (a Sampler executor, or this module);
* the model scores the chunk in eval mode (:func:`score_logits`): correct predictions, count and
  summed cross-entropy.

Per-epoch validation may score a fixed subset of the split (``train.val_subset``): the ids at
:func:`~fgnn.subsets.subset_positions` ``(n, k, seed, split)`` -- k positions drawn once from
the job seed, kept in split order, the same every epoch and in every process -- cut into chunks
the same way.
The final scores always use the whole split.

The runtime runs the chunks as tasks through its Samplers and Trainers in parallel
(:mod:`fgnn.executors`); :func:`evaluate_split` runs them in one process. Both add the same
integers, so they agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from fgnn.subsets import SPLITS, VAL_SUBSET_FLOOR, subset_ids, subset_positions, val_subset_size

if TYPE_CHECKING:
    from fgnn.config import TrainConfig
    from fgnn.data.dataset import Dataset
    from fgnn.graph import CSRGraph
    from fgnn.sampling.base import Sampler

__all__ = ["SPLITS", "EVAL_MODES", "default_eval_chunk", "eval_chunk", "SplitScore", "EvalPlan",
           "eval_batches", "eval_generator", "score_logits", "evaluate_split",
           "evaluate_layerwise", "subset_positions", "subset_ids", "VAL_SUBSET_FLOOR",
           "val_subset_size"]

#: How a split is scored: ``sampled`` (the chunk recipe below, the job's sampler) or
#: ``layerwise`` (every neighbour, layer by layer: :func:`fgnn.inference.layerwise_inference`).
EVAL_MODES = ("sampled", "layerwise")



@dataclass
class SplitScore:
    """Summed scores of one split (or of some of its chunks; scores add up).

    Attributes:
        correct: vertices predicted correctly.
        count: vertices scored.
        loss_sum: summed cross-entropy over the scored vertices.
    """

    correct: int = 0
    count: int = 0
    loss_sum: float = 0.0

    def add(self, other: "SplitScore") -> "SplitScore":
        """Accumulate ``other`` into this score (returns self)."""
        self.correct += int(other.correct)
        self.count += int(other.count)
        self.loss_sum += float(other.loss_sum)
        return self

    @property
    def accuracy(self) -> float:
        """``correct / count`` (NaN when nothing was scored)."""
        return self.correct / self.count if self.count else float("nan")

    @property
    def loss(self) -> float:
        """Mean cross-entropy (NaN when nothing was scored)."""
        return self.loss_sum / self.count if self.count else float("nan")


#: Seeds of a default evaluation chunk for narrow features.
EVAL_CHUNK_SEEDS = 4096
#: Seed-row bytes of a default chunk: 4096 seeds of 128 float32 features. Wider rows get fewer
#: seeds, so a chunk's gathered input features (seeds x fan-out x row bytes) stay as bounded as
#: for narrow ones (a 4096-seed chunk of 768-wide rows with fanouts 4,4 gathered 258 MiB).
EVAL_CHUNK_ROW_BYTES = EVAL_CHUNK_SEEDS * 128 * 4


def default_eval_chunk(batch_size: int, row_bytes: int) -> int:
    """Seeds per evaluation chunk when none is given: ``max(batch_size, min(4096, 2 MiB /
    row_bytes))``. Larger chunks share sampled neighbours (a 4096-seed chunk of the rmat scale-18
    validation split reads 3.4x fewer input vertices per seed than a 512-seed one); wide feature
    rows get fewer seeds so evaluation needs no more memory than a training step of a few
    mini-batches."""
    by_width = EVAL_CHUNK_ROW_BYTES // max(1, int(row_bytes))
    return max(int(batch_size), min(EVAL_CHUNK_SEEDS, max(1, by_width)))


def eval_chunk(train: "TrainConfig", row_bytes: int) -> int:
    """Seeds per evaluation chunk in force: ``train.eval_batch_size``, else
    :func:`default_eval_chunk` of the training batch and the feature row bytes (an auto batch
    not yet settled for a training split, ``None``, adds nothing to the width's rule; the
    runtime settles it first)."""
    return int(train.eval_batch_size or default_eval_chunk(train.batch_size or 1, row_bytes))


def eval_batches(idx: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """The split's vertices in order, cut into chunks of ``batch_size`` (the last may be short).

    Raises:
        ValueError: for a non-positive ``batch_size``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got batch_size={batch_size!r}")
    return list(torch.split(idx.to(torch.int64), int(batch_size)))


def eval_generator(seed: int, split: str, batch: int,
                   device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """The random source of chunk ``batch`` of ``split``: the same in every process.

    Kept apart from the training tasks' generators, so scoring never changes what training
    draws.

    Raises:
        ValueError: for a split not in :data:`SPLITS`.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got split={split!r}")
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 7_919 + SPLITS[split] * 1_000_003 + int(batch) * 104_729 + 17)
                  % (2 ** 63))
    return g


@torch.no_grad()
def score_logits(logits: torch.Tensor, labels: torch.Tensor) -> SplitScore:
    """Correct predictions, count and summed cross-entropy of one chunk.

    Shapes:
        logits ``(B, C)``, labels ``(B,)``.
    """
    labels = labels.to(logits.device, torch.int64)
    correct = int((logits.argmax(dim=-1) == labels).sum())
    loss = float(F.cross_entropy(logits.float(), labels, reduction="sum"))
    return SplitScore(correct, int(labels.numel()), loss)


@torch.no_grad()
def evaluate_split(model: nn.Module, dataset: "Dataset", split: str, sampler: "Sampler",
                   batch_size: int, seed: int = 0,
                   device: Union[str, torch.device] = "cpu",
                   idx: Optional[torch.Tensor] = None) -> SplitScore:
    """Score ``model`` on a split of ``dataset`` in this process (the reference recipe).

    Args:
        model: follows the :mod:`fgnn.models` contract.
        dataset: graph, features, labels and splits.
        split: ``train``, ``val`` or ``test``.
        sampler: how chunks are sampled (the job's training sampler by default in the runtime;
            a :class:`~fgnn.training.FullNeighborSampler` for exact scores).
        batch_size: seeds per chunk.
        seed: the job seed.
        device: where the model runs.
        idx: the vertices to score; defaults to the split's own ids.

    Returns:
        The split's :class:`SplitScore`.
    """
    from fgnn.training import extract_features, gather_labels

    if idx is None:
        idx = getattr(dataset, f"{split}_idx")
    graph = dataset.graph
    was_training = model.training
    model.eval()
    total = SplitScore()
    try:
        for i, chunk in enumerate(eval_batches(idx, batch_size)):
            sample = sampler.sample(graph, chunk.to(graph.device),
                                    eval_generator(seed, split, i, graph.device)).to(device)
            x = extract_features(dataset.features, sample.input_nodes, device)
            logits = model(sample.blocks, x)
            total.add(score_logits(logits, gather_labels(dataset.labels, sample.seeds, device)))
    finally:
        model.train(was_training)
    return total


@dataclass(frozen=True)
class EvalPlan:
    """The tasks of one evaluation pass through the executors: every chunk of each split.

    Task ids number the chunks split by split, in the order of ``splits``; task ``t`` is chunk
    :meth:`task` ``(t)`` and is sampled with :func:`eval_generator` -- the same recipe as
    :func:`evaluate_split`, so the executors' scores add up to exactly its result. With
    ``subset`` each split's chunks cut only its :func:`~fgnn.subsets.subset_ids` (per-epoch
    validation).

    Attributes:
        splits: split names, e.g. ``("val",)`` or ``("train", "val", "test")``.
        sizes: vertices in each split (same order).
        batch_size: seeds per chunk.
        seed: the job seed.
        subset: score at most this many ids of each split, a fixed seeded subset
            (:func:`~fgnn.subsets.subset_ids`); None: every id.
    """

    splits: tuple[str, ...]
    sizes: tuple[int, ...]
    batch_size: int
    seed: int = 0
    subset: Optional[int] = None

    def __post_init__(self) -> None:
        for s in self.splits:
            if s not in SPLITS:
                raise ValueError(f"EvalPlan.splits: unknown split {s!r}; use {', '.join(SPLITS)}")
        if len(self.sizes) != len(self.splits):
            raise ValueError(f"EvalPlan.sizes: {len(self.sizes)} sizes for "
                             f"{len(self.splits)} splits")
        if self.batch_size < 1:
            raise ValueError(f"EvalPlan.batch_size must be >= 1, got {self.batch_size!r}")
        if self.subset is not None and self.subset < 1:
            raise ValueError(f"EvalPlan.subset must be >= 1 or None, got {self.subset!r}")

    def scored(self, split: str) -> int:
        """Ids of ``split`` the pass scores (its size, or the subset's)."""
        n = self.sizes[self.splits.index(split)]
        return n if self.subset is None else min(n, self.subset)

    def chunks(self, split: str) -> int:
        """Number of chunks of ``split``."""
        return -(-self.scored(split) // self.batch_size)

    @property
    def num_tasks(self) -> int:
        """Tasks of the pass (chunks over all splits)."""
        return sum(self.chunks(s) for s in self.splits)

    def task(self, task_id: int) -> tuple[str, int]:
        """``(split, chunk index)`` of task ``task_id``.

        Raises:
            ValueError: for an id outside ``[0, num_tasks)``.
        """
        t = int(task_id)
        if t >= 0:
            for s in self.splits:
                n = self.chunks(s)
                if t < n:
                    return s, t
                t -= n
        raise ValueError(f"task_id must be in [0, {self.num_tasks}), got {task_id!r}")

    def seeds(self, idx: torch.Tensor, task_id: int) -> torch.Tensor:
        """The seeds of task ``task_id``, given its split's ids ``idx`` (all of them, also with
        ``subset``: the plan picks the subset)."""
        split, i = self.task(task_id)
        ids = subset_ids(idx, self.subset, self.seed, split)
        return ids[i * self.batch_size:(i + 1) * self.batch_size].to(torch.int64)


@torch.no_grad()
def evaluate_layerwise(model: nn.Module, graph: "CSRGraph", features: Any, labels: torch.Tensor,
                       idx: torch.Tensor, device: Union[str, torch.device] = "cpu") -> SplitScore:
    """Score the vertices ``idx`` with every neighbour (layer-wise full-graph inference,
    :func:`fgnn.inference.layerwise_inference`): deterministic, no sampling.

    Shapes:
        idx ``(K,)`` distinct ids; labels ``(N,)``.
    """
    from fgnn.inference import layerwise_inference

    if idx.numel() == 0:
        return SplitScore()
    logits = layerwise_inference(model.to(device), graph, features, nodes=idx.to(torch.int64),
                                 device=device)
    return score_logits(logits, labels[idx.to(labels.device)])
