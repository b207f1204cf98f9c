"""What a Trainer's training step costs on its own device, measured in the warm-up epoch.

FGNN §6.1 sizes the feature cache by "simulat[ing] one-time model training for a mini-batch and
record[ing] the peak memory usage"; fgnn measures it where it matters, on each Trainer's device
during the first epoch of the run (which trains without the cache):

* CUDA: the allocator's peak over the whole measured epoch above what was allocated when it
  started (model, lookup arrays), so the batch being prefetched while another trains is in it;
* CPU (Ray logical devices): one step under :class:`~fgnn.cache.budget.TensorAllocationMeter`,
  the batch's features, labels and sample tensors resident from its start (the prefetch
  thread's allocations are not seen by it, so one batch's bytes are added for the batch in
  flight, and the rows ``gather`` holds beside its output are reported apart, as
  ``gather_bytes``).

The runtime turns the reports into each device's sizing terms (:mod:`fgnn.cache.sizing`: the
evaluation chunk, the gather, fragmentation and CUDA contexts are added there) and cache plan
(:func:`fgnn.cache.budget.plan_device_cache`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn import gpu
from fgnn.cache.budget import TensorAllocationMeter, resident_bytes
from fgnn.sampling.base import per_type_tensors

__all__ = ["StepMemoryMeter", "batch_bytes", "context_bytes"]


def context_bytes(device: torch.device) -> Optional[int]:
    """This process's CUDA context on ``device``, measured: the device memory the driver
    counts for this process (NVML) less what torch's allocator reserved. None where NVML is
    not installed or does not list this process (e.g. another PID namespace): the sizing then
    assumes :data:`~fgnn.cache.sizing.CUDA_CONTEXT_BYTES`."""
    used = gpu.nvml_process_bytes(device)
    if used is None:
        return None
    return max(0, used - gpu.memory_reserved(device))


def batch_bytes(batch: Any) -> int:
    """Bytes of a fetched batch on the device: features, labels and the sample's tensors."""
    return int(resident_bytes(*_inputs(batch), batch.labels) + batch.sample.nbytes())


def _inputs(batch: Any) -> list[Any]:
    """The batch's input tensors: ``x``, or a typed batch's per node type."""
    return per_type_tensors(batch.x)


class StepMemoryMeter:
    """Measures the training step of one Trainer on its device.

    Args:
        model: the Trainer's model (its weights are resident, not part of the step).
        device: the Trainer's device.
        pipelined: whether a second batch is fetched while one trains.
    """

    def __init__(self, model: nn.Module, device: torch.device, pipelined: bool) -> None:
        self.model, self.device, self.pipelined = model, torch.device(device), pipelined
        self.step_peak: Optional[int] = None
        self.gather_bytes = 0
        self._base = 0
        self.cuda = gpu.is_cuda(self.device)
        if self.cuda:
            gpu.synchronize(self.device)
            gpu.reset_peak(self.device)
            self._base = gpu.memory_allocated(self.device)

    def run(self, step: Callable[[Any], Optional[dict]], batch: Any) -> Optional[dict]:
        """Run ``step(batch)``; the first call on CPU is measured."""
        if self.cuda or self.step_peak is not None:
            return step(batch)
        meter = TensorAllocationMeter([self.model, *_inputs(batch), batch.labels,
                                       batch.sample.tensors()])
        out: list = []
        peak = meter.measure(lambda: out.append(step(batch)))
        if out[0] is not None:  # None: the Trainer stopped before it trained
            in_flight = batch_bytes(batch) if self.pipelined else 0
            self.step_peak = max(0, int(peak) - resident_bytes(self.model)) + in_flight
            # gather's temporary of local-cache rows: at most the batch's input rows
            self.gather_bytes = int(resident_bytes(*_inputs(batch)))
        return out[0]

    def report(self) -> dict[str, Any]:
        """``{"model_bytes", "step_peak_bytes", "gather_bytes", "device_total_bytes",
        "device_free_bytes", "process_bytes", "context_bytes"}``: ``gather_bytes`` is what
        ``gather`` holds beside its output outside the measured peak (0 on CUDA, whose peak
        covers the prefetch thread's gathers); on CUDA the GPU's total and free memory now,
        what this process holds of it (reserved bytes and context) and its context as measured
        (:func:`context_bytes`, None when not measurable); the four are None on CPU, where the
        budget is simulated."""
        out: dict[str, Any] = {"device_total_bytes": None, "device_free_bytes": None,
                               "process_bytes": None, "context_bytes": None}
        peak = self.step_peak
        if self.cuda:
            from fgnn.cache.sizing import CUDA_CONTEXT_BYTES

            gpu.synchronize(self.device)
            peak = gpu.max_memory_allocated(self.device) - self._base
            free, total = gpu.mem_get_info(self.device)
            ctx = context_bytes(self.device)
            reserved = gpu.memory_reserved(self.device)
            out = {"device_total_bytes": total, "device_free_bytes": free,
                   "process_bytes": reserved + (CUDA_CONTEXT_BYTES if ctx is None else ctx),
                   "context_bytes": ctx}
        return {"model_bytes": int(resident_bytes(self.model)), "step_peak_bytes": peak,
                "gather_bytes": 0 if self.cuda else self.gather_bytes, **out}
