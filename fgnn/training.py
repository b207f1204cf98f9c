"""The single-process training loop: sample -> extract -> train (the SET model, FGNN §2).

The pieces are separate so the runtime's Trainer executors reuse them:

* :func:`extract_features` -- gather the feature rows of ``sample.input_nodes`` (tensor or
  memory-mapped numpy array) onto the training device (the Extract stage);
* :func:`train_step` -- one forward/backward/step on one sample (the Train stage);
* :func:`evaluate` -- accuracy on a split with full-neighbour (default) or sampled inference;
* :func:`fit` -- epochs over the training split with validation, early stopping (patience), a
  final test evaluation with the best weights, and checkpoint/resume through
  :mod:`fgnn.checkpoint` that continues bitwise-identically on CPU.

No Ray is needed here. Any model following the contract of :mod:`fgnn.models` works.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fgnn import gpu
from fgnn.checkpoint import load_checkpoint, save_checkpoint
from fgnn.config import TrainConfig
from fgnn.data.dataset import Dataset, Features
from fgnn.graph import CSRGraph
from fgnn.models.step import forward_backward
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = [
    "FullNeighborSampler",
    "EpochRecord",
    "FitHistory",
    "extract_features",
    "FeatureBuffer",
    "gather_labels",
    "train_step",
    "evaluate",
    "fit",
    "CHECKPOINT_NAME",
]

#: File name of the rolling checkpoint :func:`fit` writes under ``TrainConfig.checkpoint_dir``.
CHECKPOINT_NAME = "last.pt"

#: What :func:`evaluate` accepts as its sampling strategy: a sampler, per-layer fanouts (handed
#: to :class:`fgnn.sampling.KHop`), a layer count for full-neighbour inference, or ``None`` for
#: full-neighbour inference with ``model.num_layers`` layers.
SamplerOrFanouts = Union[Sampler, Sequence[int], int, None]


class FullNeighborSampler(Sampler):
    """Every in-neighbour of every vertex, for ``num_layers`` hops (exact inference).

    Follows the :class:`~fgnn.sampling.Sample` conventions: input nodes are numbered seeds first,
    then each hop's newly discovered vertices in order of first appearance; ``blocks[0]`` is the
    input (outermost) layer and the last block has ``num_dst == len(seeds)``. Deterministic; the
    generator is ignored.

    Args:
        num_layers: number of hops / blocks.
    """

    def __init__(self, num_layers: int) -> None:
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got num_layers={num_layers!r}")
        self.num_layers = num_layers
        self._remap = Remapper()  # O(N) scratch allocated once, only touched entries reset

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        dev = graph.device
        seeds = seeds.to(dev, torch.int64)
        if seeds.numel() > 0 and bool((seeds < 0).any() | (seeds >= graph.num_nodes).any()):
            raise ValueError(f"seeds must lie in [0, {graph.num_nodes})")
        if torch.unique(seeds).numel() != seeds.numel():
            raise ValueError("seeds must not repeat")
        deg = graph.degrees()

        def select(nodes: torch.Tensor, layer: int):
            counts = deg[nodes]
            dst = torch.repeat_interleave(torch.arange(nodes.numel(), device=dev), counts)
            # Position of each edge inside the CSR arrays: row start + offset within the row.
            starts = torch.repeat_interleave(graph.indptr[nodes], counts)
            first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
            pos = starts + torch.arange(dst.numel(), device=dev) - first
            w = None if graph.weights is None else graph.weights[pos]
            return graph.indices[pos].long(), dst, w

        return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers, select)


# ---------------------------------------------------------------------------- stages
def extract_features(features: Features, input_nodes: torch.Tensor,
                     device: Union[str, torch.device] = "cpu") -> torch.Tensor:
    """Gather ``features[input_nodes]`` onto ``device`` (the Extract stage).

    Args:
        features: ``(N, F)`` tensor or (memory-mapped) numpy array.
        input_nodes: ``(M,)`` global ids.
        device: where the rows go.

    Returns:
        ``(M, F)`` floating-point rows (integer features are cast to float32).
    """
    if isinstance(features, torch.Tensor):
        rows = features[input_nodes.to(features.device)]
    elif isinstance(features, np.ndarray):
        rows = torch.from_numpy(np.ascontiguousarray(features[input_nodes.cpu().numpy()]))
    else:
        raise ValueError(f"features must be a torch.Tensor or numpy array, got "
                         f"{type(features).__name__}")
    if not rows.is_floating_point():
        rows = rows.float()
    return gpu.to_device(rows, device)


class FeatureBuffer:
    """The Extract stage into one persistent ``(N, F)`` buffer (used by
    :func:`fgnn.link.training.fit_link`).

    ``features[input_nodes]`` of a full-neighbourhood batch on Cora is ``~2700 x 1433`` floats
    (15 MB); a fresh tensor of that size per batch comes from ``mmap`` and is page-faulted in
    on first write, which on a CPU costs more than the copy itself (about two thirds of the
    stage on Cora). Gathering with ``index_select(..., out=)`` into rows ``[0, M)`` of a buffer
    allocated once removes that cost. The returned rows are a view of the buffer and are
    overwritten by the next :meth:`gather`, so they must not outlive the training step (in
    ``fit_link`` the backward pass is done before the next batch is gathered).

    Other features (a numpy array, an integer dtype) go through
    :func:`extract_features` unchanged.
    """

    def __init__(self, features: Features) -> None:
        self.features = features
        self.buffer: Optional[torch.Tensor] = None
        if isinstance(features, torch.Tensor) and features.is_floating_point() \
                and features.dim() == 2:
            self.buffer = torch.empty_like(features, memory_format=torch.contiguous_format)

    def gather(self, input_nodes: torch.Tensor) -> torch.Tensor:
        """``(M, F)`` rows ``features[input_nodes]``, valid until the next call."""
        if self.buffer is None or input_nodes.numel() > self.buffer.shape[0]:
            return extract_features(self.features, input_nodes)
        idx = input_nodes.to(self.features.device)
        return torch.index_select(self.features, 0, idx, out=self.buffer[:idx.numel()])


def gather_labels(labels: torch.Tensor, seeds: torch.Tensor,
                  device: Union[str, torch.device] = "cpu") -> torch.Tensor:
    """``labels[seeds]`` as int64 on ``device``."""
    return labels[seeds.to(labels.device)].to(device, torch.int64)


def _check_labels(labels: torch.Tensor, logits: torch.Tensor) -> None:
    if labels.dim() != 1 or labels.numel() != logits.shape[0]:
        raise ValueError(f"labels must have shape ({logits.shape[0]},) (one per seed), got "
                         f"{tuple(labels.shape)}")
    if labels.numel() > 0:
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= logits.shape[1]:
            raise ValueError(f"labels hold class {lo if lo < 0 else hi}, outside [0, "
                             f"{logits.shape[1]}) (the model's num_classes)")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, sample: Sample,
               x: torch.Tensor, labels: torch.Tensor) -> float:
    """One optimisation step on one sample with cross-entropy loss (the Train stage).

    Args:
        model: follows the :mod:`fgnn.models` contract.
        optimizer: steps the model's parameters.
        sample: on the model's device.
        x: features of ``sample.input_nodes``.
        labels: class id of each seed.

    Returns:
        The loss of this step.

    Raises:
        ValueError: when labels do not match the seeds or lie outside the model's classes.

    Shapes:
        x ``(M, F)``, labels ``(B,)`` with ``B = len(sample.seeds)``.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = forward_backward(model, _checked_cross_entropy, sample, x, labels)
    optimizer.step()
    return float(loss.detach())


def _checked_cross_entropy(model: nn.Module, logits: torch.Tensor, sample: Sample,
                           labels: torch.Tensor) -> torch.Tensor:
    """Node classification's loss (:class:`fgnn.tasks.node.NodeStep`'s), after checking the
    labels against the logits (one per seed, inside the model's classes)."""
    _check_labels(labels, logits)
    return F.cross_entropy(logits, labels)


def _resolve_eval_sampler(model: nn.Module, how: SamplerOrFanouts) -> Sampler:
    if isinstance(how, Sampler):
        return how
    if how is None:
        layers = getattr(model, "num_layers", None)
        if not isinstance(layers, int):
            raise ValueError("sampler_or_fanouts=None needs a model with an int num_layers "
                             "attribute; pass the layer count or a sampler instead")
        return FullNeighborSampler(layers)
    if isinstance(how, int):
        return FullNeighborSampler(how)
    if isinstance(how, (list, tuple)) and all(isinstance(f, int) for f in how):
        from fgnn.sampling import KHop  # the k-hop sampler lives with the other samplers

        return KHop(list(how))
    raise ValueError(f"sampler_or_fanouts must be a Sampler, a sequence of fanouts, a layer "
                     f"count or None, got {how!r}")


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, sampler_or_fanouts: SamplerOrFanouts = None,
             idx: Optional[torch.Tensor] = None, batch_size: int = 8000,
             device: Union[str, torch.device] = "cpu",
             generator: Optional[torch.Generator] = None) -> float:
    """Accuracy of ``model`` on the vertices ``idx``.

    Args:
        model: follows the :mod:`fgnn.models` contract.
        dataset: graph, features and labels.
        sampler_or_fanouts: ``None`` (full-neighbour inference over ``model.num_layers`` hops),
            an int layer count (full-neighbour), a fanout list (``fgnn.sampling.KHop``, e.g.
            large fanouts), or any sampler.
        idx: vertex ids to score; defaults to ``dataset.test_idx``.
        batch_size: seeds per inference mini-batch.
        device: where the model runs.
        generator: random source of a random sampler; defaults to a fresh one seeded with 0, so
            evaluation never draws from the training generator or torch's global RNG.

    Returns:
        The fraction of ``idx`` predicted correctly.

    Raises:
        ValueError: for an empty ``idx`` or a non-positive ``batch_size``.
    """
    idx = dataset.test_idx if idx is None else idx
    if idx.numel() == 0:
        raise ValueError("idx is empty: nothing to evaluate")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got batch_size={batch_size!r}")
    sampler = _resolve_eval_sampler(model, sampler_or_fanouts)
    graph = dataset.graph
    if generator is None:
        generator = torch.Generator(device=graph.device).manual_seed(0)
    was_training = model.training
    model.eval()
    correct = 0
    try:
        for chunk in torch.split(idx.to(graph.device), batch_size):
            sample = sampler.sample(graph, chunk, generator).to(device)
            x = extract_features(dataset.features, sample.input_nodes, device)
            logits = model(sample.blocks, x)
            labels = gather_labels(dataset.labels, sample.seeds, device)
            _check_labels(labels, logits)
            correct += int((logits.argmax(dim=-1) == labels).sum())
    finally:
        model.train(was_training)
    return correct / idx.numel()


# ---------------------------------------------------------------------------- fit
@dataclass
class EpochRecord:
    """One epoch of :func:`fit`.

    Attributes:
        epoch: 0-based epoch number.
        loss: mean training loss over the epoch's mini-batches.
        batches: number of mini-batches.
        val_acc: validation accuracy, ``None`` when not evaluated this epoch.
        sample_s, extract_s, train_s: seconds spent in each stage.
        time_s: wall time of the epoch, evaluation included.
    """

    epoch: int
    loss: float
    batches: int
    val_acc: Optional[float] = None
    sample_s: float = 0.0
    extract_s: float = 0.0
    train_s: float = 0.0
    time_s: float = 0.0


@dataclass
class FitHistory:
    """What :func:`fit` returns.

    Attributes:
        epochs: one record per finished epoch (including epochs before a resume).
        best_epoch: epoch of the best validation accuracy (``None`` without validation).
        best_val_acc: that accuracy.
        test_acc: test accuracy with the best weights (``None`` without a test split).
        stopped_early: True when patience ran out.
        resumed_from: the checkpoint epoch this run continued from, if any.
    """

    epochs: list[EpochRecord] = field(default_factory=list)
    best_epoch: Optional[int] = None
    best_val_acc: Optional[float] = None
    test_acc: Optional[float] = None
    stopped_early: bool = False
    resumed_from: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view."""
        return asdict(self)


def _check_fit_args(dataset: Dataset, model: nn.Module, sampler: Sampler) -> None:
    m_layers = getattr(model, "num_layers", None)
    s_layers = getattr(sampler, "num_layers", None)
    if isinstance(m_layers, int) and isinstance(s_layers, int) and m_layers != s_layers:
        raise ValueError(f"the sampler produces {s_layers} blocks (num_layers={s_layers}) but "
                         f"the model has num_layers={m_layers}")
    in_dim = getattr(model, "in_dim", None)
    if isinstance(in_dim, int) and in_dim != dataset.feat_dim:
        raise ValueError(f"input feature dim mismatch: the model expects in_dim={in_dim}, the "
                         f"dataset {dataset.name!r} has feat_dim={dataset.feat_dim}")
    num_classes = getattr(model, "num_classes", None)
    if isinstance(num_classes, int) and dataset.labels.numel() > 0:
        hi = int(dataset.labels.max())
        if hi >= num_classes or int(dataset.labels.min()) < 0:
            raise ValueError(f"dataset {dataset.name!r} labels reach class {hi}, outside the "
                             f"model's num_classes={num_classes}")
    if dataset.train_idx.numel() == 0:
        raise ValueError(f"dataset {dataset.name!r} has an empty train_idx")


def fit(dataset: Dataset, model: nn.Module, sampler: Sampler, train_cfg: TrainConfig,
        device: Union[str, torch.device] = "cpu", *,
        optimizer: Optional[torch.optim.Optimizer] = None,
        eval_sampler: SamplerOrFanouts = None,
        eval_batch_size: Optional[int] = None,
        restore_best: bool = True,
        on_epoch_end: Optional[Callable[[EpochRecord], None]] = None) -> FitHistory:
    """Train ``model`` on ``dataset.train_idx`` with mini-batches drawn by ``sampler``.

    Each epoch shuffles the training vertices, and for each mini-batch samples its neighbourhood
    (on the graph's device), extracts the features, and takes one optimiser step. Every
    ``train_cfg.eval_every`` epochs (and after the last) it measures validation accuracy (on the
    fixed seeded subset ``train_cfg.val_subset`` picks, :func:`fgnn.subsets.subset_ids`); after
    ``train_cfg.patience`` evaluations without improvement it stops. Finally the best weights are
    restored (``restore_best``) and scored on ``dataset.test_idx``.

    Randomness: torch's global RNG (dropout) is seeded with ``train_cfg.seed`` and the sampling
    and shuffling draw from a ``torch.Generator`` seeded with ``train_cfg.seed``; evaluation
    draws from neither. With ``train_cfg.checkpoint_dir`` a checkpoint (weights, optimiser, RNG
    states, history, best weights) is written atomically after every epoch; with
    ``train_cfg.resume`` the run continues after the stored epoch and, on CPU, ends with weights
    bitwise equal to an uninterrupted run.

    Args:
        dataset: graph, features, labels and splits.
        model: follows the :mod:`fgnn.models` contract; moved to ``device``.
        sampler: draws the training samples.
        train_cfg: epochs, batch size, lr, weight decay, seed, eval_every, patience, checkpoints.
        device: where the model trains.
        optimizer: defaults to Adam(lr, weight_decay) from ``train_cfg``.
        eval_sampler: how to sample for evaluation (see :func:`evaluate`); ``None`` is exact
            full-neighbour inference.
        eval_batch_size: seeds per evaluation batch; defaults to ``train_cfg.batch_size``.
        restore_best: load the best-validation weights before the test evaluation.
        on_epoch_end: called with each epoch's record after its checkpoint is written.

    Returns:
        The training history.

    Raises:
        ValueError: when the model and sampler disagree on the layer count, the feature dim does
            not match the model's ``in_dim``, labels exceed the model's classes, or a resume
            checkpoint belongs to another model.
    """
    run = _FitRun.start(dataset, model, sampler, train_cfg, device, optimizer,
                        eval_sampler, eval_batch_size)
    for epoch in range(run.resume(), train_cfg.epochs):
        rec = run.epoch(epoch)
        if on_epoch_end is not None:
            on_epoch_end(rec)
        if run.stop:
            break
    return run.finish(restore_best)


@dataclass
class _FitRun:
    """The moving parts of one :func:`fit`: what it trains, its generator and checkpoint, the
    history and the best weights so far."""

    dataset: Dataset
    model: nn.Module
    sampler: Sampler
    cfg: TrainConfig
    device: Union[str, torch.device]
    optimizer: torch.optim.Optimizer
    gen: torch.Generator
    eval_sampler: SamplerOrFanouts
    eval_bs: int
    ckpt_path: Optional[Path]
    history: FitHistory = field(default_factory=lambda: FitHistory())
    best_state: Optional[dict[str, torch.Tensor]] = None
    bad_evals: int = 0
    stop: bool = False

    @classmethod
    def start(cls, dataset: Dataset, model: nn.Module, sampler: Sampler, cfg: TrainConfig,
              device: Union[str, torch.device], optimizer: Optional[torch.optim.Optimizer],
              eval_sampler: SamplerOrFanouts, eval_batch_size: Optional[int]) -> "_FitRun":
        """Check the arguments, move the model, seed torch and the sampling generator."""
        _check_fit_args(dataset, model, sampler)
        cfg = cfg.with_batch_for(int(dataset.train_idx.numel()))  # an auto batch: the split's
        model.to(device)
        if optimizer is None:
            optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr,
                                         weight_decay=cfg.weight_decay)
        torch.manual_seed(cfg.seed)
        gen = torch.Generator(device=dataset.graph.device).manual_seed(cfg.seed)
        ckpt = Path(cfg.checkpoint_dir) / CHECKPOINT_NAME if cfg.checkpoint_dir else None
        return cls(dataset, model, sampler, cfg, device, optimizer, gen, eval_sampler,
                   eval_batch_size or cfg.batch_size, ckpt)

    def resume(self) -> int:
        """Load the checkpoint when resuming; returns the first epoch to run."""
        if not (self.cfg.resume and self.ckpt_path is not None and self.ckpt_path.exists()):
            return 0
        ckpt = load_checkpoint(self.ckpt_path, self.model, self.optimizer, generator=self.gen)
        state = ckpt.extra.get("fit", {})
        self.history = FitHistory(epochs=[EpochRecord(**r) for r in state.get("epochs", [])],
                                  best_epoch=state.get("best_epoch"),
                                  best_val_acc=state.get("best_val_acc"),
                                  resumed_from=ckpt.epoch)
        self.best_state = ckpt.extra.get("best_state")
        self.bad_evals = int(state.get("bad_evals", 0))
        self.history.stopped_early = bool(state.get("stopped_early", False))
        return self.cfg.epochs if self.history.stopped_early else ckpt.epoch + 1

    def epoch(self, epoch: int) -> EpochRecord:
        """Train, validate when due, record and checkpoint one epoch."""
        t_epoch = time.perf_counter()
        rec = self._train(epoch)
        last = epoch == self.cfg.epochs - 1
        ds = self.dataset
        if ds.val_idx.numel() > 0 and ((epoch + 1) % self.cfg.eval_every == 0 or last):
            self._validate(rec, epoch)
        rec.time_s = time.perf_counter() - t_epoch
        self.history.epochs.append(rec)
        self.stop = self.cfg.patience is not None and self.bad_evals >= self.cfg.patience
        self.history.stopped_early = self.stop and not last
        if self.ckpt_path is not None:
            self._save(epoch)
        return rec

    def _train(self, epoch: int) -> EpochRecord:
        """One pass over the shuffled training vertices, a step per mini-batch."""
        ds, graph, dev = self.dataset, self.dataset.graph, self.device
        rec = EpochRecord(epoch=epoch, loss=0.0, batches=0)
        train_idx = ds.train_idx.to(graph.device)
        perm = train_idx[torch.randperm(train_idx.numel(), generator=self.gen,
                                        device=graph.device)]
        total_loss = 0.0
        for seeds in torch.split(perm, self.cfg.batch_size):
            t0 = time.perf_counter()
            sample = self.sampler.sample(graph, seeds, self.gen).to(dev)
            t1 = time.perf_counter()
            x = extract_features(ds.features, sample.input_nodes, dev)
            labels = gather_labels(ds.labels, sample.seeds, dev)
            t2 = time.perf_counter()
            total_loss += train_step(self.model, self.optimizer, sample, x, labels)
            rec.sample_s += t1 - t0
            rec.extract_s += t2 - t1
            rec.train_s += time.perf_counter() - t2
            rec.batches += 1
        rec.loss = total_loss / max(rec.batches, 1)
        return rec

    def _validate(self, rec: EpochRecord, epoch: int) -> None:
        """Score validation; keep the best weights (patience counts the others)."""
        from fgnn.subsets import subset_ids, val_subset_size

        ds, h = self.dataset, self.history
        k = val_subset_size(self.cfg.val_subset, ds.val_idx.numel(), ds.train_idx.numel())
        rec.val_acc = evaluate(self.model, ds, self.eval_sampler,
                               subset_ids(ds.val_idx, k, self.cfg.seed, "val"), self.eval_bs,
                               self.device)
        if h.best_val_acc is None or rec.val_acc > h.best_val_acc:
            h.best_val_acc, h.best_epoch = rec.val_acc, epoch
            self.best_state = {k: v.detach().clone()
                               for k, v in self.model.state_dict().items()}
            self.bad_evals = 0
        else:
            self.bad_evals += 1

    def _save(self, epoch: int) -> None:
        """The rolling checkpoint: weights, optimiser, generator, history, best weights."""
        h = self.history
        fit_state = {"epochs": [asdict(r) for r in h.epochs], "best_epoch": h.best_epoch,
                     "best_val_acc": h.best_val_acc, "bad_evals": self.bad_evals,
                     "stopped_early": h.stopped_early}
        extra: dict[str, Any] = {"fit": fit_state}
        if self.best_state is not None:
            extra["best_state"] = self.best_state
        save_checkpoint(self.ckpt_path, self.model, self.optimizer, epoch, generator=self.gen,
                        extra=extra)

    def finish(self, restore_best: bool) -> FitHistory:
        """Restore the best weights (when asked) and score the test split."""
        if restore_best and self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        ds = self.dataset
        if ds.test_idx.numel() > 0:
            self.history.test_acc = evaluate(self.model, ds, self.eval_sampler, ds.test_idx,
                                             self.eval_bs, self.device)
        return self.history

