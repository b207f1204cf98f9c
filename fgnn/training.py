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
    return rows.to(device, non_blocking=True)


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
    ``train_cfg.eval_every`` epochs (and after the last) it measures validation accuracy; after
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
    _check_fit_args(dataset, model, sampler)
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=train_cfg.lr,
                                     weight_decay=train_cfg.weight_decay)
    graph = dataset.graph
    torch.manual_seed(train_cfg.seed)
    gen = torch.Generator(device=graph.device).manual_seed(train_cfg.seed)
    eval_bs = eval_batch_size or train_cfg.batch_size
    train_idx = dataset.train_idx.to(graph.device)

    history = FitHistory()
    best_state: Optional[dict[str, torch.Tensor]] = None
    bad_evals = 0
    start = 0
    ckpt_path = (Path(train_cfg.checkpoint_dir) / CHECKPOINT_NAME
                 if train_cfg.checkpoint_dir else None)
    if train_cfg.resume and ckpt_path is not None and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path, model, optimizer, generator=gen)
        state = ckpt.extra.get("fit", {})
        history = FitHistory(epochs=[EpochRecord(**r) for r in state.get("epochs", [])],
                             best_epoch=state.get("best_epoch"),
                             best_val_acc=state.get("best_val_acc"),
                             resumed_from=ckpt.epoch)
        best_state = ckpt.extra.get("best_state")
        bad_evals = int(state.get("bad_evals", 0))
        history.stopped_early = bool(state.get("stopped_early", False))
        start = train_cfg.epochs if history.stopped_early else ckpt.epoch + 1

    for epoch in range(start, train_cfg.epochs):
        t_epoch = time.perf_counter()
        rec = EpochRecord(epoch=epoch, loss=0.0, batches=0)
        perm = train_idx[torch.randperm(train_idx.numel(), generator=gen, device=graph.device)]
        total_loss = 0.0
        for seeds in torch.split(perm, train_cfg.batch_size):
            t0 = time.perf_counter()
            sample = sampler.sample(graph, seeds, gen).to(device)
            t1 = time.perf_counter()
            x = extract_features(dataset.features, sample.input_nodes, device)
            labels = gather_labels(dataset.labels, sample.seeds, device)
            t2 = time.perf_counter()
            total_loss += train_step(model, optimizer, sample, x, labels)
            t3 = time.perf_counter()
            rec.sample_s += t1 - t0
            rec.extract_s += t2 - t1
            rec.train_s += t3 - t2
            rec.batches += 1
        rec.loss = total_loss / max(rec.batches, 1)

        last = epoch == train_cfg.epochs - 1
        if dataset.val_idx.numel() > 0 and ((epoch + 1) % train_cfg.eval_every == 0 or last):
            rec.val_acc = evaluate(model, dataset, eval_sampler, dataset.val_idx, eval_bs, device)
            if history.best_val_acc is None or rec.val_acc > history.best_val_acc:
                history.best_val_acc, history.best_epoch = rec.val_acc, epoch
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                bad_evals = 0
            else:
                bad_evals += 1
        rec.time_s = time.perf_counter() - t_epoch
        history.epochs.append(rec)
        stop = train_cfg.patience is not None and bad_evals >= train_cfg.patience
        history.stopped_early = stop and not last

        if ckpt_path is not None:
            fit_state = {"epochs": [asdict(r) for r in history.epochs],
                         "best_epoch": history.best_epoch, "best_val_acc": history.best_val_acc,
                         "bad_evals": bad_evals, "stopped_early": history.stopped_early}
            extra: dict[str, Any] = {"fit": fit_state}
            if best_state is not None:
                extra["best_state"] = best_state
            save_checkpoint(ckpt_path, model, optimizer, epoch, generator=gen, extra=extra)
        if on_epoch_end is not None:
            on_epoch_end(rec)
        if stop:
            break

    if restore_best and best_state is not None:
        model.load_state_dict(best_state)
    if dataset.test_idx.numel() > 0:
        history.test_acc = evaluate(model, dataset, eval_sampler, dataset.test_idx, eval_bs,
                                    device)
    return history

