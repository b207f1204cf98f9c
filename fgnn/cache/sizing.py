"""What the cache must leave free on a device: the sizing terms of FGNN §6.1, item by item.

FGNN sizes the cache from one measured training step. On a real device more lives beside the
cache than that step, and each item is a term of the plan
(:func:`~fgnn.cache.budget.plan_device_cache` subtracts them all, then a margin):

``model``
    The weights (measured).
``step_peak``
    The measured rise of one training step, the batch being prefetched included
    (:class:`~fgnn.executors._memory.StepMemoryMeter`).
``eval_chunk``
    An evaluation chunk's rise beyond the training step. Evaluation runs forward-only
    (``no_grad``) on chunks of ``train.eval_batch_size`` seeds, up to ``ratio`` =
    ``eval chunk / task seeds`` times a training task's (8000 against 1000 at 8 devices). A
    sample's vertices, edges and activations grow at most linearly with its seeds (larger chunks
    share neighbours), and forward-only holds no gradients, so ``ratio × step_peak`` bounds the
    chunk's rise; the term is the excess ``(ratio − 1) × step_peak``.
``gather``
    ``FeatureStore.gather`` briefly holds the local-cache rows it picked beside its output
    (``index_select`` into a temporary, then ``index_copy_``): at most the batch's input rows,
    for the largest (evaluation) batch: ``ratio × gather_bytes``. On CUDA the training batches'
    gathers are inside the measured peak already, and the meter reports 0.
``fragmentation``
    :data:`FRAGMENTATION_FRACTION` of the three terms above: the caching allocator rounds and
    splits blocks, so its reserved bytes exceed the allocated peak the meters read.
``context``
    Each process's CUDA context on the device (CUDA only), measured in the process where the
    driver reports its memory (:func:`fgnn.executors._memory.context_bytes`), else
    :data:`CUDA_CONTEXT_BYTES`: a Trainer's own device has one; a Sampler's device two (the
    Sampler and its standby Trainer).
``nccl``
    The collective exchange's NCCL buffers (CUDA, ``--exchange collective`` on distinct GPUs):
    :func:`nccl_buffer_bytes`.
``ipc_queue``
    With ``--sample-transport cuda_ipc``, the samples waiting in the queue stay in the
    Sampler's GPU memory: :func:`ipc_queue_bytes` on a device that samples.
``graph``, ``sampler``
    On a device that also samples: the topology, and the sampling working set -- measured as
    the Sampler's *reserved* peak on CUDA, else the remap scratch array plus four times the
    largest sample -- whose per-sample part grows with the evaluation chunk like the rest.

The budget of a device on a GPU is :func:`gpu_budget`: its share of the GPU, at most what was
free when the warm-up measured it plus what the measuring process held itself. What the budget
leaves after these terms and the margin (``max(32 MiB, 5 %)`` of the budget,
:data:`~fgnn.cache.budget.SIZING_MARGIN_FRACTION`) is the cache.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["CUDA_CONTEXT_BYTES", "FRAGMENTATION_FRACTION", "NCCL_CHANNELS", "device_terms",
           "eval_ratio", "gpu_budget", "ipc_queue_bytes", "nccl_buffer_bytes", "sampler_bytes"]

#: Device bytes one process's CUDA context takes outside the caching allocator (the driver's
#: context, torch's kernels, cuBLAS/cuDNN handles and workspaces): 300-600 MiB with CUDA 12 on
#: an H100, so 512 MiB each.
CUDA_CONTEXT_BYTES = 512 << 20
#: Channels NCCL may open per communicator (up to 32 on NVLink GPUs): with NCCL's default
#: ``NCCL_BUFFSIZE`` of 4 MiB and a send and a receive buffer per channel, the buffers of one
#: communicator are at most 256 MiB (an upper estimate until a GPU run measures it).
NCCL_CHANNELS = 32
#: NCCL's default buffer per channel and direction (``NCCL_BUFFSIZE``).
NCCL_BUFFSIZE = 4 << 20
#: Share of the measured working set (step, evaluation chunk, gather) added for the caching
#: allocator's fragmentation: its reserved bytes exceed the allocated bytes the meters read.
FRAGMENTATION_FRACTION = 0.10


def eval_ratio(eval_chunk: int, batch_size: int, step_tasks: int, evaluates: bool = True
               ) -> float:
    """How many times an evaluation chunk's seeds exceed a training task's:
    ``eval_chunk / ⌈batch_size / step_tasks⌉``, at least 1 (1 when nothing is evaluated in
    sampled chunks).

    Raises:
        ValueError: for a non-positive ``batch_size``, ``step_tasks`` or ``eval_chunk``.
    """
    if batch_size < 1 or step_tasks < 1 or eval_chunk < 1:
        raise ValueError(f"batch_size, step_tasks and eval_chunk must be >= 1, got "
                         f"{batch_size}, {step_tasks}, {eval_chunk}")
    if not evaluates:
        return 1.0
    return max(1.0, int(eval_chunk) / -(-int(batch_size) // int(step_tasks)))


def sampler_bytes(working_set: dict[str, Any], ratio: float = 1.0) -> int:
    """Device bytes sampling needs beside the topology, from a Sampler's
    :meth:`~fgnn.executors.sampler.SamplerExecutor.working_set`: the remap scratch array plus
    ``ratio`` times the per-sample part -- the *reserved* peak less topology and scratch on CUDA
    (what the allocator holds, fragmentation included), else four times the largest sample (its
    tensors and the candidate arrays of the hop that built it)."""
    scratch = int(working_set["scratch_bytes"])
    if working_set.get("cuda_reserved_bytes") is not None:
        per_sample = (int(working_set["cuda_reserved_bytes"]) - int(working_set["graph_bytes"])
                      - scratch)
    else:
        per_sample = 4 * int(working_set["max_sample_bytes"])
    return scratch + math.ceil(ratio * max(0, per_sample))


def gpu_budget(total_bytes: int, share: float, free_bytes: Optional[int] = None,
               process_bytes: int = 0) -> int:
    """The bytes one device may plan for on its GPU: ``share`` (``--gpus-per-device``) of the
    GPU's total memory, at most what the GPU had free when measured plus what the measuring
    process itself held then (``process_bytes``: its allocator's reserved bytes and its
    context, which the plan's terms count again). Free, not total, memory: other processes on
    the GPU (another device's executors on a shared GPU, another job) keep theirs.

    Raises:
        ValueError: for a non-positive total, a share outside ``(0, 1]`` or negative bytes.
    """
    if total_bytes <= 0 or not 0 < share <= 1:
        raise ValueError(f"total_bytes must be > 0 and share in (0, 1], got {total_bytes}, "
                         f"{share}")
    if (free_bytes is not None and free_bytes < 0) or process_bytes < 0:
        raise ValueError(f"free_bytes and process_bytes must be >= 0, got {free_bytes}, "
                         f"{process_bytes}")
    cap = int(total_bytes * share)
    if free_bytes is None:
        return cap
    return min(cap, int(free_bytes) + int(process_bytes))


def nccl_buffer_bytes(members: int, channels: int = NCCL_CHANNELS,
                      buffsize: int = NCCL_BUFFSIZE) -> int:
    """Device bytes of one NCCL communicator's buffers: a send and a receive buffer of
    ``buffsize`` per channel; 0 for a group of one (no peer connection).

    Raises:
        ValueError: for ``members < 1`` or non-positive ``channels``/``buffsize``.
    """
    if members < 1 or channels < 1 or buffsize < 1:
        raise ValueError(f"members, channels and buffsize must be >= 1, got {members}, "
                         f"{channels}, {buffsize}")
    return 0 if members == 1 else 2 * int(channels) * int(buffsize)


def ipc_queue_bytes(queued: int, max_sample_bytes: int) -> int:
    """GPU bytes of samples sent over CUDA IPC and not yet consumed: up to ``queued`` samples
    (the queue's bound; a whole epoch in ``single`` mode) of ``max_sample_bytes`` each, held
    on their Sampler's device.

    Raises:
        ValueError: for negative counts.
    """
    if queued < 0 or max_sample_bytes < 0:
        raise ValueError(f"queued and max_sample_bytes must be >= 0, got {queued}, "
                         f"{max_sample_bytes}")
    return int(queued) * int(max_sample_bytes)


def device_terms(report: dict[str, Any], *, ratio: float = 1.0, cuda: bool = False,
                 processes: int = 1, graph_bytes: int = 0,
                 sampler: Optional[int] = None, context_bytes: Optional[int] = None,
                 nccl: int = 0, ipc_queue: int = 0) -> dict[str, int]:
    """The named bytes a device holds besides its cache (see the module docstring).

    Args:
        report: a Trainer's memory report (``model_bytes``, ``step_peak_bytes`` and
            ``gather_bytes``, :meth:`StepMemoryMeter.report
            <fgnn.executors._memory.StepMemoryMeter.report>`; the largest over the Trainers).
        ratio: :func:`eval_ratio`.
        cuda: the device is a GPU (its processes' contexts count).
        processes: processes with a CUDA context on the device.
        graph_bytes: the topology, on a device that samples (else 0).
        sampler: the sampling working set (:func:`sampler_bytes`) on a device that samples,
            else None.
        context_bytes: one process's CUDA context as measured; None: :data:`CUDA_CONTEXT_BYTES`.
        nccl: NCCL buffers on the device (:func:`nccl_buffer_bytes`); a term when > 0.
        ipc_queue: queued CUDA IPC samples on the device (:func:`ipc_queue_bytes`); a term
            when > 0.

    Raises:
        ValueError: for ``ratio < 1``, ``processes < 1`` or a negative report item.
    """
    if ratio < 1.0 or processes < 1:
        raise ValueError(f"ratio must be >= 1 and processes >= 1, got {ratio}, {processes}")
    step = int(report.get("step_peak_bytes") or 0)
    gather_bytes = int(report.get("gather_bytes") or 0)
    model = int(report.get("model_bytes") or 0)
    if min(step, gather_bytes, model) < 0:
        raise ValueError(f"memory report items must be >= 0, got {report}")
    terms = {"model": model, "step_peak": step,
             "eval_chunk": math.ceil((ratio - 1.0) * step),
             "gather": math.ceil(ratio * gather_bytes)}
    terms["fragmentation"] = math.ceil(FRAGMENTATION_FRACTION * (
        terms["step_peak"] + terms["eval_chunk"] + terms["gather"]))
    context = CUDA_CONTEXT_BYTES if context_bytes is None else int(context_bytes)
    terms["context"] = context * int(processes) if cuda else 0
    if sampler is not None:
        terms["graph"] = int(graph_bytes)
        terms["sampler"] = int(sampler)
    if nccl > 0:
        terms["nccl"] = int(nccl)
    if ipc_queue > 0:
        terms["ipc_queue"] = int(ipc_queue)
    return terms
