"""The memory plan of a job: the host bytes each tier and each process will hold, from the
dataset's sizes, the cache ratio, the device count and the host's limit (its cgroup's
included), made before any process starts.

A term is one thing held (the topology, a device cache, a Trainer's mini-batch) with its bytes
per process and how many processes hold it; what the page cache holds of a memory-mapped file
is shown but not counted against the limit, as the kernel reclaims it. A plan over the limit is
refused in one line naming the largest term and the flag that shrinks it. Every figure is an
upper bound that the runs of docs/benchmarks.md check against each process's measured peak
(the report's ``memory.processes``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np

from fgnn.cache.budget import logical_device_bytes
from fgnn.data.memory import MemoryLimit, format_bytes, host_memory_limit
from fgnn.evaluation import eval_chunk

__all__ = ["Term", "MemoryPlan", "plan_job", "PROCESS_BYTES", "RAY_SYSTEM_BYTES"]

#: Resident bytes of a process with torch, numpy and fgnn loaded, before any data (an executor
#: or the in-process driver; measured 355-460 MiB on a small graph).
PROCESS_BYTES = 450 << 20
#: Ray's own processes on a local node (GCS, raylet, agents; measured about 300 MiB).
RAY_SYSTEM_BYTES = 400 << 20
#: The most device memory a logical device gets when ``--device-memory`` is not given (its
#: share of the host's memory may be less: :func:`~fgnn.cache.budget.logical_device_bytes`).
LOGICAL_DEVICE_BYTES = 1 << 30
#: Live copies of a layer's activations in one training step (output, its gradient, the
#: aggregation's, the nonlinearity's and dropout's masks).
ACTIVATION_COPIES = 6
#: Bytes a cached row of the group costs each Trainer's cache lookup: the placement's id, its
#: sorted copy and its buffer row (int64 each; :class:`~fgnn.cache.lookup.CacheLookup`).
LOOKUP_BYTES_PER_ROW = 24
#: Bytes a vertex of the cache's ranking on the driver: the hotness (float32), the visit
#: counts it sums (int32) and its descending order (int64, ``hot_order``).
RANKING_BYTES_PER_VERTEX = 16
#: Live copies of a mini-batch's input rows in the feature file's dtype: the gathered rows and
#: their staging; the model's float32 input comes beside them.
INPUT_COPIES = 2


@dataclass(frozen=True)
class Term:
    """One thing a job holds in host memory.

    Attributes:
        name: what it is (``"device cache (logical devices)"``).
        each: bytes per holder.
        count: holders (processes, or 1 for a per-host copy).
        counted: counted against the limit (False: reclaimable page cache, shown only).
        flag: the flag that shrinks it, or "" when none does.
        field: the config field of that flag (``"cache.cache_ratio"``), or "".
    """

    name: str
    each: int
    count: int
    counted: bool = True
    flag: str = ""
    field: str = ""

    @property
    def bytes(self) -> int:
        """``each * count``."""
        return int(self.each) * int(self.count)


@dataclass
class MemoryPlan:
    """The job's terms, their total and the host's limit.

    Attributes:
        terms: what is held.
        limit: what the host (cgroup included) can give, or None when unknown.
        layout: ``"single"`` (one process) or ``"factored"``, with its process counts.
    """

    terms: list[Term]
    limit: Optional[MemoryLimit]
    layout: dict[str, Any]

    @property
    def total(self) -> int:
        """Bytes of the counted terms."""
        return sum(t.bytes for t in self.terms if t.counted)

    def largest(self) -> Term:
        """The counted term of most bytes."""
        return max((t for t in self.terms if t.counted), key=lambda t: t.bytes)

    def table(self) -> str:
        """The plan as a table: one row a term, then the total against the limit."""
        rows = [f"  {'term':<44} {'each':>10} {'x':>3} {'bytes':>10}"]
        for t in self.terms:
            mark = "" if t.counted else "  (page cache, reclaimable: not counted)"
            rows.append(f"  {t.name:<44} {format_bytes(t.each):>10} {t.count:>3} "
                        f"{format_bytes(t.bytes):>10}{mark}")
        lim = "unknown" if self.limit is None else \
            f"{format_bytes(self.limit.bytes)} ({self.limit.source})"
        rows.append(f"  {'total':<44} {'':>10} {'':>3} {format_bytes(self.total):>10} "
                    f"of {lim}")
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``memory.plan``."""
        return {"terms": [{**asdict(t), "bytes": t.bytes} for t in self.terms],
                "total": self.total, "layout": self.layout,
                "limit": None if self.limit is None else
                {"bytes": self.limit.bytes, "source": self.limit.source}}

    def check(self) -> None:
        """Refuse a plan over the limit.

        Raises:
            ValueError: :meth:`refusal`.
        """
        why = self.refusal()
        if why is not None:
            raise ValueError(why)

    def refusal(self) -> Optional[str]:
        """None when the plan fits, else one line: the total, the limit, the largest term and
        the flag that shrinks it."""
        if self.limit is None or self.total <= self.limit.bytes:
            return None
        big = self.largest()
        hint = f"; {big.flag}" if big.flag else ""
        return (f"the memory plan needs {format_bytes(self.total)}, more than the "
                         f"{format_bytes(self.limit.bytes)} this machine can give "
                         f"({self.limit.source}); the largest term is {big.name} "
                f"({big.count} x {format_bytes(big.each)}){hint}")


def _hops(seeds: int, fanouts: tuple[int, ...], n: int, edges: int) -> tuple[list[int], int]:
    """Upper bounds of a sample's vertices per hop (seeds first) and of its edges: each hop
    adds ``fanout`` neighbours per vertex, never more than the graph's vertices and edges."""
    sizes, total_edges = [seeds], 0
    for f in fanouts:
        e = min(sizes[-1] * max(int(f), 0), edges)
        total_edges += e
        sizes.append(min(n, sizes[-1] + e))
    return sizes, total_edges


def _sample_bytes(sizes: list[int], edges: int) -> int:
    """A sample's tensors: vertex ids per hop and two int64 endpoints per block edge."""
    return 8 * sum(sizes) + 16 * edges


def _model_bytes(model: Any) -> int:
    return int(sum(p.numel() * p.element_size() for p in model.parameters())) if model else 0


def _step_bytes(seeds: int, config: Any, dataset: Any) -> tuple[int, int]:
    """``(working set of one training step, its sample's bytes)``: the input rows as float32,
    the activations of every layer (:data:`ACTIVATION_COPIES` copies of ``hidden`` floats per
    vertex) and the sample."""
    fan = tuple(config.sampler.fanouts)
    sizes, edges = _hops(max(1, seeds), fan, dataset.num_nodes, dataset.graph.num_edges)
    hidden = max(int(config.model.hidden), int(dataset.num_classes))
    inputs = sizes[-1] * dataset.feat_dim * (dataset.feature_row_bytes // dataset.feat_dim
                                             * INPUT_COPIES + 4)
    acts = sum(sizes[:-1]) * hidden * 4 * ACTIVATION_COPIES
    sample = _sample_bytes(sizes, edges)
    return inputs + acts + 2 * sample, sample


def _layout(config: Any) -> dict[str, Any]:
    rt = config.runtime
    if rt.mode == "single" or rt.devices_used <= 1:
        return {"mode": "single", "processes": 1, "executors": 0, "trainers": 1, "samplers": 1}
    d = int(rt.devices)
    n_s = int(rt.samplers) if rt.samplers else max(1, math.ceil(d / 4))
    standbys = n_s if (rt.switching and rt.mode != "time-sharing") else 0
    samplers = 0 if rt.mode == "time-sharing" else n_s
    trainers = d if rt.mode == "time-sharing" else d - n_s
    return {"mode": rt.mode, "samplers": samplers, "trainers": trainers, "standbys": standbys,
            "executors": samplers + trainers + standbys, "processes": 0}


def _data_terms(dataset: Any, copies: int) -> list[Term]:
    g = dataset.graph
    out = []
    if getattr(g, "files", None) is not None:
        out.append(Term("topology (mapped files: one copy a host)", g.nbytes(), 1,
                        flag="", field="dataset"))
    else:
        out.append(Term("topology (in memory)", g.nbytes(), copies,
                        flag="an ondisk:DIR dataset maps it once per host", field="dataset"))
    feats = dataset.features
    fbytes = int(np.prod(feats.shape)) * int(feats.dtype.itemsize if hasattr(feats.dtype,
                                                                               "itemsize")
                                              else feats.element_size())
    if isinstance(feats, np.memmap):
        out.append(Term("features (mapped file)", fbytes, 1, counted=False))
    else:
        out.append(Term("features (in memory)", fbytes, copies,
                        flag="an ondisk:DIR dataset keeps them on disk", field="dataset"))
    out.append(Term("labels and splits", 8 * dataset.num_nodes + 8 * sum(
        int(getattr(dataset, k).numel()) for k in ("train_idx", "val_idx", "test_idx")),
        copies, field="dataset"))
    return out


def _cache_each(config: Any, dataset: Any, logical: bool, trainers: int = 1,
                limit: Optional[MemoryLimit] = None) -> int:
    """Host bytes of one Trainer's cache on a logical device (0 on a GPU: device memory):
    without ``--device-memory``, its share of the host's ``limit`` over ``trainers``
    (:func:`~fgnn.cache.budget.logical_device_bytes`, at most :data:`LOGICAL_DEVICE_BYTES`)."""
    if not logical or config.cache.policy == "none":
        return 0
    fbytes = dataset.num_nodes * dataset.feature_row_bytes
    if config.cache.cache_ratio is not None:
        return int(config.cache.cache_ratio * fbytes)
    budget = (int(config.cache.device_memory_gib * 2 ** 30)
              if config.cache.device_memory_gib is not None else
              logical_device_bytes(trainers, limit, LOGICAL_DEVICE_BYTES))
    return min(budget, fbytes)


def _lookup_terms(config: Any, dataset: Any, lay: dict[str, Any], holders: int, cache: int,
                  single: bool) -> list[Term]:
    """Where every vertex is cached: its ranking, the holder bits (one copy a host, in the
    object store for a factored job), each Trainer's rows of the group's buffers and PreSC's
    visit counts."""
    from fgnn.cache.placement import bits_dtype
    import torch

    devices = 1 if single else int(config.runtime.devices)
    bits = torch.empty((), dtype=bits_dtype(min(devices, 63))).element_size()
    rows = cache // max(1, int(dataset.feature_row_bytes)) if cache else 0
    # Rule 1 replicates one set of ids (one table); other placements spread distinct ones
    spread = not single and config.cache.placement != "replicate"
    group_rows = rows * (lay["trainers"] if spread else 1) + rows * (lay.get("standbys", 0) > 0)
    out = [Term("cache ranking (hotness and its order, on the driver)",
                RANKING_BYTES_PER_VERTEX * dataset.num_nodes, 1),
           Term("cache map (holder bits, one copy a host)", bits * dataset.num_nodes, 1)]
    if config.cache.policy == "presc" and not single:
        out.append(Term("visit counts (PreSC's warm-up, each Sampler)", 4 * dataset.num_nodes,
                        lay["samplers"]))
    if group_rows:
        out.append(Term("cache lookup (the group's cached ids)",
                        LOOKUP_BYTES_PER_ROW * group_rows, holders,
                        flag=f"lower --cache-ratio ({config.cache.cache_ratio})"
                        if config.cache.cache_ratio is not None else "set --cache-ratio",
                        field="cache.cache_ratio"))
    return out


def _disk_tier_terms(config: Any, dataset: Any, holders: int) -> list[Term]:
    """The disk tier's constant CPU buffer (``--cpu-buffer``): host memory each Trainer fills
    with its hottest rows (:class:`~fgnn.cache.disk_cpu_buffer.CPUBufferedSource`), on a GPU
    too; none with the memory tier."""
    share = float(config.disk.cpu_buffer)
    if config.disk.feature_tier != "disk" or share <= 0:
        return []
    rows = int(share * dataset.num_nodes)
    return [Term("CPU buffer (disk tier, each Trainer)", rows * int(dataset.feature_row_bytes),
                 holders, flag=f"lower --cpu-buffer ({share:g})", field="disk.cpu_buffer")]


def _batch_terms(config: Any, dataset: Any, lay: dict[str, Any], holders: int, batch: int
                 ) -> list[Term]:
    """The working set of a training task or an evaluation chunk (the larger), and the
    samples in flight of a factored job."""
    tc, single, terms = config.train, lay["mode"] == "single", []
    seeds = batch if single else max(1, math.ceil(batch / max(1, int(config.runtime.devices))))
    step, sample = _step_bytes(seeds, config, dataset)
    # every Trainer scores whole evaluation chunks (no gradients: half the activations)
    eval_step = (0 if tc.eval_mode == "none" else
                 _step_bytes(eval_chunk(tc, dataset.feature_row_bytes), config, dataset)[0])
    if eval_step > step:
        chunk = eval_chunk(tc, dataset.feature_row_bytes)
        terms.append(Term("evaluation chunk working set", eval_step, holders,
                          flag=f"lower --eval-batch-size ({chunk})",
                          field="train.eval_batch_size"))
    else:
        terms.append(Term("mini-batch working set", step, holders,
                          flag=f"lower --batch-size ({batch}) or --fanouts",
                          field="train.batch_size"))
    if not single:
        in_flight = min(int(config.runtime.queue_size), 2 * holders + lay["samplers"])
        terms.append(Term("samples in flight (global queue)", sample, in_flight,
                          flag=f"lower --queue-size ({config.runtime.queue_size})",
                          field="runtime.queue_size"))
    return terms


def plan_job(config: Any, dataset: Any, model: Any = None, *,
             limit: Optional[MemoryLimit] = None, logical: Optional[bool] = None
             ) -> MemoryPlan:
    """The memory plan of ``config`` on ``dataset`` (a homogeneous node-classification or
    link job; the batch size settled).

    Args:
        config: the job's :class:`~fgnn.config.JobConfig`.
        dataset: the loaded dataset.
        model: the model (its parameters, gradients and Adam's two moments per holder).
        limit: the host's limit; default :func:`~fgnn.data.memory.host_memory_limit`.
        logical: devices are Ray logical devices on the CPU (the caches are host memory);
            default: no CUDA device.
    """
    from fgnn import gpu

    limit = limit if limit is not None else host_memory_limit()
    logical = (not gpu.is_available()) if logical is None else logical
    lay = _layout(config)
    tc = config.train
    batch = int(tc.batch_size or 1)
    single = lay["mode"] == "single"
    copies = 1 if single else 2                          # driver + object store
    terms = _data_terms(dataset, copies)
    if single:
        terms.insert(0, Term("process (torch, fgnn)", PROCESS_BYTES, 1))
    else:
        terms.insert(0, Term("processes (driver, executors, queue, server)",
                             PROCESS_BYTES, 3 + lay["executors"], flag="lower --devices",
                             field="runtime.devices"))
        terms.insert(1, Term("Ray's own processes", RAY_SYSTEM_BYTES, 1))
    holders = lay["trainers"] + lay.get("standbys", 0)
    cache = _cache_each(config, dataset, logical, lay["trainers"], limit)
    if cache:
        # Rule 1's Trainers on one host map one filled buffer (shared memory)
        shared = (config.cache.placement == "replicate" and config.cache.peer_tier != "host"
                  and config.runtime.mode != "time-sharing")
        terms.append(Term("device cache (logical device: host memory)", cache,
                          1 if single or shared else lay["trainers"],
                          flag=f"lower --cache-ratio ({config.cache.cache_ratio})"
                          if config.cache.cache_ratio is not None else "set --cache-ratio",
                          field="cache.cache_ratio"))
    terms += _disk_tier_terms(config, dataset, holders)
    if config.cache.policy != "none":
        # the lookup is host memory on a GPU too: its rows are the cache's, wherever it is
        terms += _lookup_terms(config, dataset, lay, holders,
                               _cache_each(config, dataset, True), single)
    terms += _batch_terms(config, dataset, lay, holders, batch)
    mb = _model_bytes(model)
    if mb:
        terms.append(Term("model, gradients, Adam moments", 4 * mb,
                          holders + (0 if single else 2),
                          flag=f"lower --hidden ({config.model.hidden})",
                          field="model.hidden"))
    return MemoryPlan(terms, limit, lay)
