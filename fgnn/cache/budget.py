"""The cache ratio α from a device-memory budget (FGNN §6.1, the PaGraph method).

"To determine GPU memory capacity allocated for caching, we adopt the method proposed in PaGraph,
where we simulate one-time model training for a mini-batch and record the peak memory usage for
model training. Then the rest of the available GPU memory is allocated for feature cache." (§6.1)

So::

    α = min(1, (budget − peak − margin − graph_bytes) / (N · row_bytes))

where ``peak`` is the measured peak of one real training step. On CUDA the peak is
``torch.cuda.max_memory_allocated`` around the step (it already counts whatever lives on the
device). On CPU there is no device allocator to ask, so a simulated device budget is checked
against a pluggable meter; the default, :class:`TensorAllocationMeter`, records every tensor
storage the step allocates through torch's dispatcher (forward, backward, optimizer) and drops it
when the storage dies, giving the step's true peak of live tensor bytes; the tensors resident
before the step (model parameters, gradients, optimizer state, the batch) count from the start
until the step frees them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fgnn import gpu
from fgnn.data.memory import MemoryLimit

#: The most memory a Ray logical device (CPU) simulates when ``--device-memory`` is not given.
LOGICAL_DEVICE_MAX_BYTES = 1 << 30
#: The share of the host's memory (a cgroup's whole limit, where there is one) that the caches
#: of a job's logical devices may take together when ``--device-memory`` is not given.
LOGICAL_CACHE_SHARE = 0.25


def logical_device_bytes(trainers: int, limit: Optional[MemoryLimit],
                         cap: int = LOGICAL_DEVICE_MAX_BYTES) -> int:
    """The automatic memory of one logical device: :data:`LOGICAL_CACHE_SHARE` of what the
    host can give (the cgroup's whole limit where known, else what is free now) split over the
    ``trainers`` that hold a cache, at most ``cap``. A logical device's "device memory" is host
    memory, so the Trainers of one host share it, and the memory plan counts what they will
    hold.

    Args:
        trainers: the Trainers holding a cache (at least 1 is assumed).
        limit: :func:`~fgnn.data.memory.host_memory_limit` (None: unknown, ``cap``).
        cap: the most a device gets (:data:`LOGICAL_DEVICE_MAX_BYTES`).
    """
    if limit is None:
        return int(cap)
    whole = limit.total if limit.total is not None else limit.bytes
    return max(0, min(int(cap), int(LOGICAL_CACHE_SHARE * whole) // max(1, int(trainers))))

__all__ = [
    "LOGICAL_CACHE_SHARE",
    "LOGICAL_DEVICE_MAX_BYTES",
    "logical_device_bytes",
    "CacheBudget",
    "DeviceCachePlan",
    "SIZING_MARGIN_FRACTION",
    "SIZING_MARGIN_MIN_BYTES",
    "plan_device_cache",
    "CudaPeakMeter",
    "PeakMeter",
    "TensorAllocationMeter",
    "alpha_from_peak",
    "choose_cache_ratio",
    "measure_step_peak",
    "resident_bytes",
]


class PeakMeter(Protocol):
    """Measures the peak device memory (bytes) of running ``step`` once."""

    def measure(self, step: Callable[[], Any]) -> int:
        """Run ``step`` and return its peak bytes."""


class _AllocTracker(TorchDispatchMode):
    """Live bytes of the storages that ops produce while the mode is active.

    Storages are keyed by data pointer and dropped when their Python storage object dies (torch
    preserves that object for as long as the storage lives), so the count follows frees as well
    as allocations. :meth:`seed` adds storages that exist before the step.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0
        self._finalizers: list[weakref.finalize] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Keep torch from wrapping __torch_dispatch__ in a dynamo guard: the guard imports
        # torch._dynamo on first use (seconds), and this mode never runs under torch.compile.
        return False

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def _track(self, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        st = t.untyped_storage()
        nbytes, key = st.nbytes(), st.data_ptr()
        if nbytes == 0 or key == 0 or key in self.live:
            return
        self.live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        self._finalizers.append(weakref.finalize(st, self._free, key))

    def seed(self, tensors: Iterable[torch.Tensor]) -> int:
        """Count ``tensors`` (resident before the step) as live; returns their bytes."""
        for t in tensors:
            self._track(t)
        return self.current

    def detach(self) -> None:
        """Stop listening for frees (storages outliving the measurement)."""
        for f in self._finalizers:
            f.detach()
        self._finalizers.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


class TensorAllocationMeter:
    """CPU meter: peak live tensor bytes while a step runs, resident tensors included.

    Args:
        resident: objects whose tensors live on the device before the step (modules,
            optimizers, tensors). They count as live from the start and stop counting when the
            step frees them (e.g. ``zero_grad()`` dropping ``.grad``); tensors the step writes in
            place are counted once.

    Attributes:
        resident_peak: bytes of the resident tensors when the step started.
        step_peak: how far the step rose above that.
    """

    def __init__(self, resident: Iterable[Any] = ()):
        self.resident = list(resident)
        self.step_peak = 0
        self.resident_peak = 0

    def measure(self, step: Callable[[], Any]) -> int:
        """Run ``step`` once under the tracker and return the peak live bytes."""
        tracker = _AllocTracker()
        self.resident_peak = tracker.seed(_tensors_of(self.resident))
        tracker.peak = tracker.current
        try:
            with tracker:
                out = step()
            del out
        finally:
            tracker.detach()
        self.step_peak = tracker.peak - self.resident_peak
        return tracker.peak


class CudaPeakMeter:
    """CUDA meter: ``torch.cuda.max_memory_allocated`` over one step (absolute, like PaGraph)."""

    def __init__(self, device: torch.device | str = "cuda"):
        self.device = torch.device(device)

    def measure(self, step: Callable[[], Any]) -> int:
        """Reset the peak counter, run ``step``, synchronise and read the peak."""
        gpu.synchronize(self.device)
        gpu.reset_peak(self.device)
        step()
        gpu.synchronize(self.device)
        return gpu.max_memory_allocated(self.device)


def _tensors_of(objs: Iterable[Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                out.append(p)
                if p.grad is not None:
                    out.append(p.grad)
            out.extend(obj.buffers())
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                out.extend(v for v in state.values() if isinstance(v, torch.Tensor))
        elif isinstance(obj, torch.Tensor):
            out.append(obj)
        elif isinstance(obj, (list, tuple)):
            out.extend(_tensors_of(obj))
        elif obj is not None:
            raise ValueError(f"resident objects must be modules, optimizers or tensors, got "
                             f"{type(obj).__name__}")
    return [t for t in out if t.device.type != "meta"]


def resident_bytes(*objs: Any) -> int:
    """Bytes of the distinct tensor storages held by modules (parameters, gradients, buffers),
    optimizers (state) and tensors."""
    seen: dict[int, int] = {}
    for t in _tensors_of(objs):
        st = t.untyped_storage()
        if st.nbytes():
            seen[st.data_ptr()] = st.nbytes()
    return int(sum(seen.values()))


def measure_step_peak(step: Callable[[], Any], device: torch.device | str = "cpu",
                      meter: Optional[PeakMeter] = None, resident: Iterable[Any] = ()) -> int:
    """Peak device bytes of one training step (PaGraph's "simulate one-time model training").

    Args:
        step: runs one real training step (forward, backward, optimizer) on ``device``.
        device: the trainer's device; picks :class:`CudaPeakMeter` or
            :class:`TensorAllocationMeter` when ``meter`` is ``None``.
        meter: a custom :class:`PeakMeter`.
        resident: for the CPU meter, objects resident before the step (see
            :class:`TensorAllocationMeter`).
    """
    if not callable(step):
        raise ValueError(f"step must be callable, got {type(step).__name__}")
    if meter is None:
        dev = torch.device(device)
        meter = CudaPeakMeter(dev) if gpu.is_cuda(dev) else TensorAllocationMeter(resident)
    return int(meter.measure(step))


@dataclass
class CacheBudget:
    """How the device budget is split.

    Attributes:
        alpha: the cache ratio α in ``[0, 1]``.
        num_cached: ``⌊α·N⌋`` rows.
        cache_bytes: bytes of those rows.
        peak_bytes: measured peak of one training step.
        margin_bytes: reserve kept free on top of the peak.
        graph_bytes: topology kept resident on the device (0 if not).
        budget_bytes: the device budget.
    """

    alpha: float
    num_cached: int
    cache_bytes: int
    peak_bytes: int
    margin_bytes: int
    graph_bytes: int
    budget_bytes: int

    @property
    def free_bytes(self) -> int:
        """What the budget leaves after step peak, margin, graph and cache."""
        return (self.budget_bytes - self.peak_bytes - self.margin_bytes - self.graph_bytes
                - self.cache_bytes)


def alpha_from_peak(peak_bytes: int, *, budget_bytes: int, num_nodes: int, row_bytes: int,
                    margin_bytes: int = 0, graph_bytes: int = 0) -> CacheBudget:
    """α from an already measured step peak (no step is run): the split of
    :func:`choose_cache_ratio`, so one measurement can price several layouts (a Trainer with the
    whole budget, a device that also holds the topology).

    ``α = min(1, (budget − peak − margin − graph_bytes) / (N · row_bytes))``, whole rows.

    Raises:
        ValueError: when the budget cannot hold the peak plus margin and graph, or on a
            non-positive ``num_nodes``/``row_bytes``/``budget_bytes`` or a negative
            ``peak_bytes``/``margin_bytes``/``graph_bytes``.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    if row_bytes < 1:
        raise ValueError(f"row_bytes must be >= 1, got {row_bytes}")
    if margin_bytes < 0:
        raise ValueError(f"margin_bytes must be >= 0, got {margin_bytes}")
    if graph_bytes < 0:
        raise ValueError(f"graph_bytes must be >= 0, got {graph_bytes}")
    if peak_bytes < 0:
        raise ValueError(f"peak_bytes must be >= 0, got {peak_bytes}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
    peak = int(peak_bytes)
    free = budget_bytes - peak - margin_bytes - graph_bytes
    if free < 0:
        raise ValueError(
            f"budget_bytes={budget_bytes} is smaller than one training step: peak {peak} + "
            f"margin {margin_bytes} + graph {graph_bytes} = {peak + margin_bytes + graph_bytes} "
            f"bytes")
    num_cached = min(num_nodes, free // row_bytes)
    alpha = num_cached / num_nodes
    return CacheBudget(alpha, int(num_cached), int(num_cached * row_bytes), int(peak),
                       int(margin_bytes), int(graph_bytes), int(budget_bytes))


def choose_cache_ratio(step: Optional[Callable[[], Any]] = None, *,
                       budget_bytes: Optional[int] = None,
                       num_nodes: int, row_bytes: int, margin_bytes: int = 0,
                       graph_bytes: int = 0, device: torch.device | str = "cpu",
                       meter: Optional[PeakMeter] = None,
                       resident: Iterable[Any] = (),
                       peak_bytes: Optional[int] = None) -> CacheBudget:
    """Choose α so that one training step's peak, a margin and the graph still fit (FGNN §6.1).

    ``α = min(1, (budget − peak − margin − graph_bytes) / (N · row_bytes))``, rounded down to
    whole rows.

    Args:
        step: callable running one real training step (e.g. a closure over the model, a sample
            and its features); it is run once. Not needed (and not run) when ``peak_bytes`` is
            given.
        budget_bytes: device memory for the whole job; ``None`` on CUDA uses the device's total
            memory (a simulated budget is required on CPU).
        num_nodes: N.
        row_bytes: bytes of one feature row (``F × element size``).
        margin_bytes: extra reserve (fragmentation, the next batch in flight).
        graph_bytes: topology that will be resident on the device but is not while the step is
            measured (pass 0 when it already is, as CUDA's peak then includes it).
        device: the trainer's device.
        meter: custom peak meter.
        resident: CPU meter only: modules/optimizers/tensors resident before the step.
        peak_bytes: a peak already measured with :func:`measure_step_peak`: reuse it instead of
            running ``step`` again (see :func:`alpha_from_peak`).

    Raises:
        ValueError: when the budget cannot hold one training step (plus margin and graph), or on
            a non-positive ``num_nodes``/``row_bytes``, a negative margin, or neither ``step``
            nor ``peak_bytes``.
    """
    dev = torch.device(device)
    if budget_bytes is None:
        if not gpu.is_cuda(dev):
            raise ValueError("budget_bytes is required on CPU (a simulated device budget)")
        budget_bytes = gpu.total_memory(dev)
    if peak_bytes is None:
        if step is None:
            raise ValueError("choose_cache_ratio needs step (to measure) or peak_bytes")
        peak_bytes = measure_step_peak(step, dev, meter, resident)
    return alpha_from_peak(peak_bytes, budget_bytes=budget_bytes, num_nodes=num_nodes,
                           row_bytes=row_bytes, margin_bytes=margin_bytes,
                           graph_bytes=graph_bytes)


#: Share of a device's budget kept free beyond everything measured or counted (allocator
#: fragmentation, a batch larger than the ones measured)...
SIZING_MARGIN_FRACTION = 0.05
#: ...and at least this many bytes.
SIZING_MARGIN_MIN_BYTES = 32 << 20


@dataclass
class DeviceCachePlan:
    """How one executor's device budget is spent, item by item (FGNN §6.1, measured in the
    warm-up epoch on that executor's own device).

    Attributes:
        budget_bytes: the device's memory for this executor.
        resident: named bytes that live on the device besides the cache: ``model`` (weights),
            ``step_peak`` (the measured rise of one training step, prefetched batch included),
            ``lookup`` (the feature store's per-vertex arrays), ``graph`` and ``sampler`` (the
            topology and the sampling working set, on devices that also sample).
        margin_bytes: kept free on top.
        num_cached: feature rows the cache gets.
        row_bytes: bytes of one feature row.
        num_nodes: N.
    """

    budget_bytes: int
    resident: dict[str, int]
    margin_bytes: int
    num_cached: int
    row_bytes: int
    num_nodes: int

    @property
    def alpha(self) -> float:
        """The cache ratio α = cached rows / N."""
        return self.num_cached / self.num_nodes if self.num_nodes else 0.0

    @property
    def cache_bytes(self) -> int:
        """Bytes of the cached rows."""
        return self.num_cached * self.row_bytes

    @property
    def free_bytes(self) -> int:
        """What is left: ``budget - resident - margin - cache`` (negative: over-committed)."""
        return (self.budget_bytes - sum(self.resident.values()) - self.margin_bytes
                - self.cache_bytes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON view for the report."""
        return {"budget_bytes": self.budget_bytes, "resident": dict(self.resident),
                "margin_bytes": self.margin_bytes, "cache_bytes": self.cache_bytes,
                "alpha": self.alpha, "free_bytes": self.free_bytes}


def plan_device_cache(budget_bytes: int, resident: dict[str, int], *, num_nodes: int,
                      row_bytes: int, margin_bytes: Optional[int] = None,
                      max_alpha: Optional[float] = None) -> DeviceCachePlan:
    """Rows of feature cache that fit one device:
    ``⌊(budget − Σ resident − margin) / row_bytes⌋``, at most ``N`` (and ``⌊max_alpha·N⌋``),
    never negative.

    Args:
        budget_bytes: the device's memory for this executor.
        resident: named bytes on the device besides the cache (see :class:`DeviceCachePlan`).
        num_nodes: N.
        row_bytes: bytes of one feature row.
        margin_bytes: reserve; ``None`` uses ``max(SIZING_MARGIN_MIN_BYTES,
            SIZING_MARGIN_FRACTION · budget)``.
        max_alpha: an upper bound on α (``CacheConfig.cache_ratio``).

    Raises:
        ValueError: on a non-positive budget, ``num_nodes`` or ``row_bytes``, or a negative
            resident item.
    """
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be > 0, got {budget_bytes}")
    if num_nodes < 1 or row_bytes < 1:
        raise ValueError(f"num_nodes and row_bytes must be >= 1, got {num_nodes}, {row_bytes}")
    bad = {k: v for k, v in resident.items() if v < 0}
    if bad:
        raise ValueError(f"resident bytes must be >= 0, got {bad}")
    if margin_bytes is None:
        margin_bytes = max(SIZING_MARGIN_MIN_BYTES, int(SIZING_MARGIN_FRACTION * budget_bytes))
    free = int(budget_bytes) - sum(int(v) for v in resident.values()) - int(margin_bytes)
    rows = max(0, min(int(num_nodes), free // int(row_bytes)))
    if max_alpha is not None:
        rows = min(rows, int(max_alpha * num_nodes))
    return DeviceCachePlan(int(budget_bytes), {k: int(v) for k, v in resident.items()},
                           int(margin_bytes), rows, int(row_bytes), int(num_nodes))
