"""The trainer's feature store: device cache, peer devices and host memory behind one ``gather``.

FGNN §6.1: ``load_cache(hotness_map, α)`` "identifies and loads the features of the top-ranked
``α|V|`` vertices w.r.t. ``h_v`` into the GPU memory. It also builds a hash table to indicate the
location in feature cache of a given vertex" — here the cache's ids sorted with their rows
beside one byte of holder bits a vertex (:class:`~fgnn.cache.lookup.CacheLookup`).

With several devices the store follows a :class:`~fgnn.cache.placement.Placement`: each device
reads a vertex from its own buffer, else from the peer named by ``dev_num`` (Song & Jiang §3.2,
held compactly by :class:`~fgnn.cache.lookup.CacheLookup`), else from the host. On CPU the "devices" are just tensors; with CUDA, host misses are staged
through pinned memory and copied asynchronously.

The M step (FGNN Table 5): since the caches are static, the Sample stage marks each input
vertex with the devices that hold it (:meth:`Placement.holder_bits
<fgnn.cache.placement.Placement.holder_bits>`, one bit per device). :meth:`FeatureStore.gather`
takes those marks and splits the batch from them alone: a row whose mark has this device's bit
is local, one with only other bits comes from the lowest-numbered of those peers, one marked 0 is
read from the host without any lookup. Only the rows marked cached are looked up (their buffer
position), and that lookup also checks the marks against this store's own placement, so a
consumer with a smaller cache (a standby Trainer) splits correctly from the same marks.

Peers of another process: a store built with ``peers_from_host=True`` keeps only its own buffer
(allocated by ``alloc``, e.g. :func:`fgnn.cache.peer_share.shared_empty` so that it can be
exported); a row it would read from a peer is read from the host source (the same bytes) until
:meth:`FeatureStore.set_peer` hands it that peer's buffer, mapped from the peer's process
(:mod:`fgnn.cache.peer_share`: CUDA IPC, or shared memory on the CPU). Either way the row is
counted in the ``peer`` tier, so the counters give the traffic per tier of the placement; the
peer rows read from the host copy are counted apart too (``TierStats.peer_host``).

Host-side extraction (what a GPU Trainer's prefetch thread does while the GPU trains): host rows
are gathered by a small pool of threads over row chunks (:func:`extract_threads`; ``np.take`` and
``index_select`` release the GIL), every upload to a CUDA device -- rows and the index tensors
alike -- goes from pinned memory without blocking (:func:`upload`, or the Trainer's copy stream),
the misses and the peers served from the host are read in one pass (no read waits for another's
copy), the cache is filled in bounded chunks (:data:`FILL_CHUNK_BYTES` of host memory, not the
whole cache), and the per-vertex lookup stays on the host, where ``gather`` reads it.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

from fgnn import gpu
from fgnn.cache.lookup import CacheLookup, read_from
from fgnn.cache.placement import Placement, bits_dtype, hot_order
from fgnn.cache.source import FeatureSource
from fgnn.sampling.base import Sample
from fgnn.threads import shared_pool

__all__ = ["FeatureCache", "FeatureStore", "TensorSource", "TierStats", "load_cache",
           "num_cached_rows", "as_source", "extract_threads", "fill_rows", "upload",
           "FILL_CHUNK_BYTES", "GATHER_CHUNK_BYTES"]

HostLike = Union[FeatureSource, torch.Tensor, np.ndarray]

#: Host bytes a gather thread is given at least (smaller gathers stay on the calling thread:
#: a pool hand-off costs tens of microseconds).
GATHER_CHUNK_BYTES = 1 << 20
#: Host bytes of one chunk of a cache fill: the fill reads, (pins) and copies this much at a
#: time, so filling a cache of any size needs one chunk of host memory in each Trainer.
FILL_CHUNK_BYTES = 64 << 20
#: Most threads a host gather uses.
MAX_EXTRACT_THREADS = 8


def extract_threads() -> int:
    """Threads for host-side gathers: the CPUs this process may use, at most
    :data:`MAX_EXTRACT_THREADS` (independent of ``torch.get_num_threads()``, which a CPU
    Trainer keeps at 1 for its compute)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_EXTRACT_THREADS, cpus))


def _row_chunks(k: int, row_bytes: int, threads: int) -> list[slice]:
    """``k`` rows cut into at most ``threads`` contiguous parts of at least
    :data:`GATHER_CHUNK_BYTES` each (one part for a small gather)."""
    parts = max(1, min(int(threads), k * int(row_bytes) // GATHER_CHUNK_BYTES))
    bounds = [k * i // parts for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _gather_rows(rows: torch.Tensor, pos: torch.Tensor, threads: int) -> torch.Tensor:
    """``rows[pos]`` of a CPU matrix; a large gather split into row chunks on the shared pool
    (``index_select`` releases the GIL)."""
    k = int(pos.numel())
    out = torch.empty(k, rows.shape[1], dtype=rows.dtype)
    parts = _row_chunks(k, rows.shape[1] * rows.element_size(), threads)
    if len(parts) == 1:
        torch.index_select(rows, 0, pos, out=out)
    else:
        list(shared_pool("gather", int(threads)).map(
            lambda s: torch.index_select(rows, 0, pos[s], out=out[s]), parts))
    return out


def upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``: from pinned memory and non-blocking when ``device`` is CUDA (the
    caching host allocator keeps a pinned copy alive until its transfer is done), a plain move
    elsewhere; a tensor already there is returned as is."""
    here = gpu.device_of(t)
    if here == device:
        return t
    if gpu.is_cuda(device) and gpu.is_host(here):
        return gpu.to_device(gpu.pin(t), device)
    return t.to(device)


class TensorSource:
    """A :class:`~fgnn.cache.source.FeatureSource` over an in-memory ``(N, F)`` matrix.

    Accepts a torch tensor (kept on CPU), a numpy array, or an ``np.memmap`` (only the requested
    rows are read from the file).
    """

    def __init__(self, data: Union[torch.Tensor, np.ndarray]):
        if isinstance(data, np.ndarray):
            if data.ndim != 2:
                raise ValueError(f"data must be 2-D (N, F), got shape {data.shape}")
            self._np: Optional[np.ndarray] = data
            self._t: Optional[torch.Tensor] = None
            self._dtype = torch.from_numpy(np.empty(0, dtype=data.dtype)).dtype
        elif isinstance(data, torch.Tensor):
            if data.dim() != 2:
                raise ValueError(f"data must be 2-D (N, F), got shape {tuple(data.shape)}")
            self._np, self._t = None, data.cpu()
            self._dtype = data.dtype
        else:
            raise ValueError(f"data must be a torch tensor or numpy array, got "
                             f"{type(data).__name__}")
        self._shape = tuple(data.shape)

    @property
    def num_rows(self) -> int:
        """N."""
        return int(self._shape[0])

    @property
    def dim(self) -> int:
        """F."""
        return int(self._shape[1])

    @property
    def dtype(self) -> torch.dtype:
        """Element type."""
        return self._dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dim * torch.empty(0, dtype=self._dtype).element_size()

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """``(len(ids), F)`` CPU rows for int64 global ``ids``.

        Raises:
            ValueError: if an id is outside ``[0, N)``.
        """
        idx = torch.as_tensor(ids).long().cpu()
        bad = _out_of_range(idx, self.num_rows)
        if bad is not None:
            raise ValueError(f"ids holds {bad}, outside [0, {self.num_rows})")
        return self._read_unchecked(idx)

    def _read_unchecked(self, idx: torch.Tensor, out: Optional[torch.Tensor] = None,
                        threads: int = 1) -> torch.Tensor:
        """:meth:`read` for int64 CPU ``idx`` already known to be in range (the store validated
        them once at its entry point); writes into ``out`` (``(len(idx), F)``) when given.
        With ``threads > 1`` a large read is split into row chunks gathered in parallel by the
        shared pool (``np.take``/``index_select`` release the GIL; a memmap's page faults then
        overlap too)."""
        k = int(idx.numel())
        if out is None:
            out = torch.empty(k, self.dim, dtype=self._dtype)
        parts = _row_chunks(k, self.row_bytes, threads)
        if len(parts) == 1:
            self._take(idx, out)
        else:
            list(shared_pool("gather", int(threads)).map(
                lambda s: self._take(idx[s], out[s]), parts))
        return out

    def _take(self, idx: torch.Tensor, out: torch.Tensor) -> None:
        """Rows ``idx`` (in range) into ``out``."""
        if self._t is not None:
            torch.index_select(self._t, 0, idx, out=out)
        else:
            np.take(self._np, idx.numpy(), axis=0, out=out.numpy(), mode="clip")  # in range


def _out_of_range(idx: torch.Tensor, n: int) -> Optional[int]:
    """An id of ``idx`` outside ``[0, n)`` (the smallest if negative, else the largest), or None.
    One pass over ``idx``."""
    if not idx.numel():
        return None
    lo, hi = (int(v) for v in torch.aminmax(idx))
    if lo < 0:
        return lo
    return hi if hi >= n else None


def as_source(host: HostLike) -> FeatureSource:
    """Wrap a tensor or numpy array as a :class:`TensorSource`; pass a FeatureSource through."""
    if isinstance(host, (torch.Tensor, np.ndarray)):
        return TensorSource(host)
    if isinstance(host, FeatureSource):
        return host
    raise ValueError(f"host must be a FeatureSource, tensor or numpy array, got "
                     f"{type(host).__name__}")


def _row_bytes(src: FeatureSource) -> int:
    return int(src.dim) * torch.empty(0, dtype=src.dtype).element_size()


def num_cached_rows(alpha: float, num_nodes: int) -> int:
    """``⌊α·N⌋``, the rows a cache ratio ``α`` holds (guarding against float round-off)."""
    if not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) <= 1.0 or \
            math.isnan(float(alpha)):
        raise ValueError(f"alpha (cache ratio) must lie in [0, 1], got {alpha!r}")
    return min(num_nodes, int(math.floor(float(alpha) * num_nodes + 1e-9)))


def _check_hotness_len(hotness: torch.Tensor, n: int) -> torch.Tensor:
    h = torch.as_tensor(hotness)
    if h.dim() != 1 or h.numel() != n:
        raise ValueError(f"hotness has shape {tuple(h.shape)}, expected ({n},) (one value per "
                         f"vertex)")
    return h


@dataclass
class FeatureCache:
    """A static device cache: the rows of ``ids`` on ``device``.

    Attributes:
        ids: ``(C,)`` int64 cached vertex ids, hottest first; slot ``i`` holds ``ids[i]`` (on
            the host).
        rows: ``(C, F)`` feature rows on the device.
    """

    ids: torch.Tensor
    rows: torch.Tensor

    @property
    def num_cached(self) -> int:
        """C."""
        return int(self.ids.numel())

    @property
    def nbytes(self) -> int:
        """Bytes of the cached rows."""
        return int(self.rows.numel() * self.rows.element_size())


def fill_rows(host: HostLike, ids: torch.Tensor, device: torch.device | str = "cpu",
              threads: int = 1, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(len(ids), F)`` rows of ``host`` on ``device``, filled in chunks of
    :data:`FILL_CHUNK_BYTES`: host memory beyond the result is one chunk (pinned with CUDA),
    never the whole cache. ``out``: the ``(len(ids), F)`` tensor on ``device`` to fill (e.g. a
    shareable buffer), else a new one.

    Raises:
        ValueError: if an id is outside ``[0, N)``, or ``out`` has another shape, dtype or
            device.
    """
    src, dev = as_source(host), torch.device(device)
    idx = torch.as_tensor(ids).long().cpu()
    bad = _out_of_range(idx, src.num_rows)
    if bad is not None:
        raise ValueError(f"ids holds {bad}, outside [0, {src.num_rows})")
    k, dense = int(idx.numel()), isinstance(src, TensorSource)
    if out is None:
        rows = torch.empty(k, src.dim, dtype=src.dtype, device=dev)
    elif (tuple(out.shape) != (k, src.dim) or out.dtype != src.dtype
          or out.device.type != dev.type):
        raise ValueError(f"out must be a ({k}, {src.dim}) {src.dtype} tensor on {dev}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        rows = out
    step = max(1, FILL_CHUNK_BYTES // _row_bytes(src))
    if gpu.is_host(dev) and dense:  # the result is host memory: read straight into it
        for a in range(0, k, step):
            src._read_unchecked(idx[a:a + step], out=rows[a:a + step], threads=threads)
        return rows
    stage = None
    if dense and k:
        shape = (min(step, k), src.dim)
        stage = gpu.empty_pinned(shape, src.dtype) if gpu.is_cuda(dev) else \
            torch.empty(shape, dtype=src.dtype)
    for a in range(0, k, step):
        part = idx[a:a + step]
        if stage is not None:
            chunk = src._read_unchecked(part, out=stage[:part.numel()], threads=threads)
        else:
            chunk = src.read(part)
        rows[a:a + part.numel()].copy_(chunk)  # blocking: the stage is reused next
    return rows


def load_cache(hotness: torch.Tensor, alpha: float, host: HostLike,
               device: torch.device | str = "cpu") -> FeatureCache:
    """FGNN §6.1 ``load_cache(hotness_map, α)``: cache the top ``⌊α|V|⌋`` rows on ``device``
    (filled in bounded chunks, :func:`fill_rows`).

    Args:
        hotness: ``(N,)`` hotness map (ties: smaller id first).
        alpha: cache ratio in ``[0, 1]``.
        host: the full feature matrix (FeatureSource, tensor or numpy array).
        device: the trainer's device.

    Raises:
        ValueError: if ``alpha`` is outside ``[0, 1]`` or ``hotness`` does not have N entries.
    """
    src = as_source(host)
    n = src.num_rows
    h = _check_hotness_len(hotness, n)
    c = num_cached_rows(alpha, n)
    ids = hot_order(h)[:c].cpu()
    return FeatureCache(ids, fill_rows(src, ids, device, extract_threads()))


def _own_rows(src: FeatureSource, ids: torch.Tensor, device: torch.device | str, threads: int,
              alloc: Optional[Callable[..., torch.Tensor]], own: Optional[torch.Tensor]
              ) -> torch.Tensor:
    """A store's own buffer: ``own`` (rows already filled) when it has the buffer's shape and
    dtype, else rows of ``ids`` filled into what ``alloc`` makes (or a new tensor)."""
    shape = (int(ids.numel()), src.dim)
    if own is not None:
        if tuple(own.shape) != shape or own.dtype != src.dtype:
            raise ValueError(f"own rows have shape {tuple(own.shape)} and dtype {own.dtype}, "
                             f"expected {shape} {src.dtype}")
        return own
    out = None if alloc is None else alloc(shape, src.dtype, torch.device(device))
    return fill_rows(src, ids, device, threads, out=out)


TIERS = ("device", "peer", "host")


@dataclass
class TierStats:
    """Counters of one store: rows and bytes served per tier since the last reset.

    ``hits`` are device-cache rows, ``peer`` rows come from other devices, ``misses`` from host.
    """

    hits: int = 0
    peer: int = 0
    misses: int = 0
    bytes: dict = field(default_factory=lambda: {t: 0 for t in TIERS})
    peer_host: int = 0
    """Rows of the ``peer`` tier read from the host copy (a peer whose buffer this store does
    not hold)."""

    @property
    def lookups(self) -> int:
        """All rows gathered."""
        return self.hits + self.peer + self.misses

    @property
    def hit_rate(self) -> float:
        """Share of rows served by the local device cache (0 when nothing was gathered)."""
        return self.hits / self.lookups if self.lookups else 0.0

    def as_dict(self) -> dict:
        """A JSON-serialisable view."""
        return {"hits": self.hits, "peer": self.peer, "misses": self.misses,
                "lookups": self.lookups, "hit_rate": self.hit_rate,
                "bytes": dict(self.bytes), "peer_host": self.peer_host}


class FeatureStore:
    """Gathers a batch's input feature rows from device cache, peer devices and host memory.

    Build it with :meth:`single` (one device, a :class:`FeatureCache`) or :meth:`from_placement`
    (a device of a group sharing a :class:`Placement`).

    Args:
        host: the full ``(N, F)`` feature matrix off the device.
        buffers: one ``(C_d, F)`` row tensor per device of the group (``[]`` for no cache);
            ``None`` for a peer whose rows are read from ``host`` (counted as ``peer``).
        lookup: where each vertex is read from (:class:`~fgnn.cache.lookup.CacheLookup`:
            the group's holder bits, maybe shared with other processes, and the buffers'
            rows).
        local: this store's device index within the group.
        device: where gathered rows are returned.
        h2d: moves a host tensor to ``device`` (e.g. the Trainer's
            :meth:`CopyStream.h2d <fgnn.executors._streams.CopyStream.h2d>`); every upload of
            :meth:`gather` goes through it. ``None``: :func:`upload` (pinned, non-blocking on
            CUDA).
        threads: threads of a host gather; ``None``: :func:`extract_threads`.

    Attributes:
        lookup: the lookup on the host (where :meth:`gather` splits a batch).
    """

    def __init__(self, host: HostLike, buffers: Sequence[Optional[torch.Tensor]],
                 lookup: CacheLookup, local: int = 0,
                 device: torch.device | str = "cpu",
                 h2d: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 threads: Optional[int] = None):
        self.host = as_source(host)
        n = self.host.num_rows
        if lookup.num_nodes != n:
            raise ValueError(f"the cache lookup covers {lookup.num_nodes} vertices, the host "
                             f"has {n} rows")
        if buffers and not 0 <= local < len(buffers):
            raise ValueError(f"local must be in [0, {len(buffers)}), got {local}")
        if buffers and buffers[local] is None:
            raise ValueError(f"buffers[{local}] (this store's own device) must be a tensor")
        for i, b in enumerate(buffers):
            if b is not None and (b.dim() != 2 or b.shape[1] != self.host.dim):
                raise ValueError(f"buffers[{i}] has shape {tuple(b.shape)}, expected "
                                 f"(C, {self.host.dim})")
        if threads is not None and int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads!r}")
        self.device = torch.device(device)
        self.buffers = list(buffers)
        self.local = local
        self._bits = bits_dtype(len(self.buffers))  # one mark bit per device (<= 63)
        # The lookup lives on the host: gather splits host/cache there, so only gathered
        # rows and positions cross to the device (no device->host sync per batch).
        if lookup.holders_device.type != "cpu":
            raise ValueError("the cache lookup must be on the host")
        self.lookup = lookup
        self.row_bytes = _row_bytes(self.host)
        self.stats = TierStats()
        self.threads = extract_threads() if threads is None else int(threads)
        self._h2d = h2d if h2d is not None else (lambda t: upload(t, self.device))
        #: split a batch whose ids are already on this store's device there (CUDA: samples
        #: that came over CUDA IPC or were sampled on the device); else on the host
        self.split_on_device = gpu.is_cuda(self.device)
        self._device_lookup: Optional[CacheLookup] = None
        self._pin = gpu.is_cuda(self.device) and gpu.is_available()
        # CUDA only: one pinned staging buffer for host rows, grown as needed, reused per batch
        # once the previous batch's asynchronous copy out of it has finished.
        self._staging: Optional[torch.Tensor] = None
        self._staging_done: Any = None
        self._staging_lock = threading.Lock()
        #: rows the placement gives each device (set by :meth:`from_placement`; checks
        #: :meth:`set_peer`)
        self.peer_rows: Optional[list[int]] = None
        self._peer_alive: dict[int, Callable[[], bool]] = {}
        #: peers dropped to host reads because their owner was gone (:meth:`set_peer`)
        self.peers_lost: list[int] = []

    # ------------------------------------------------------------------ constructors
    @classmethod
    def single(cls, host: HostLike, cache: Optional[FeatureCache] = None,
               device: torch.device | str = "cpu",
               h2d: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
               threads: Optional[int] = None) -> "FeatureStore":
        """A one-device store over ``cache`` (``None``: every row comes from the host)."""
        src = as_source(host)
        n = src.num_rows
        if cache is None:
            return cls(src, [], CacheLookup.host_only(n), 0, device, h2d, threads)
        if cache.ids.numel() and int(cache.ids.max()) >= n:
            raise ValueError(f"the cache holds vertex {int(cache.ids.max())}, outside [0, {n})")
        return cls(src, [cache.rows.to(device)], CacheLookup.of_cache(cache.ids.cpu(), n), 0,
                   device, h2d, threads)

    @classmethod
    def from_placement(cls, host: HostLike, placement: Placement, local: int,
                       buffers: Optional[Sequence[torch.Tensor]] = None,
                       device: torch.device | str = "cpu",
                       peers_from_host: bool = False,
                       h2d: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                       threads: Optional[int] = None,
                       alloc: Optional[Callable[..., torch.Tensor]] = None,
                       holders: Optional[torch.Tensor] = None,
                       own: Optional[torch.Tensor] = None) -> "FeatureStore":
        """The store of device ``local`` in a group sharing ``placement``.

        Args:
            host: full feature matrix.
            placement: ids per device (:mod:`fgnn.cache.placement`).
            local: this device's index.
            buffers: the devices' row tensors (shared between the group's stores); ``None``
                reads them from ``host`` (each on ``device``, filled in chunks,
                :func:`fill_rows`; on CPU peers are plain tensors).
            device: this store's device.
            peers_from_host: keep only this device's buffer and read peer rows from ``host``
                (same bytes, counted in the ``peer`` tier) until :meth:`set_peer` gives a peer's
                buffer; ignores ``buffers``.
            h2d, threads: see :class:`FeatureStore`.
            alloc: with ``peers_from_host``, ``alloc(shape, dtype, device)`` makes this
                device's buffer before it is filled (e.g.
                :func:`fgnn.cache.peer_share.shared_empty`, to export it); default a plain
                tensor.
            holders: the placement's holder bits (:meth:`Placement.holder_bits`) when at hand,
                e.g. a read-only view of the copy the processes of a host share; default
                computed here.
            own: with ``peers_from_host``, this device's rows already filled (e.g. mapped from
                another store holding the same ids), used instead of filling them.

        Raises:
            ValueError: on a placement of another size, or ``own`` of another shape or dtype.
        """
        src = as_source(host)
        if placement.num_nodes != src.num_rows:
            raise ValueError(f"placement covers {placement.num_nodes} vertices, host has "
                             f"{src.num_rows} rows")
        nthreads = extract_threads() if threads is None else int(threads)
        if peers_from_host:
            if not isinstance(local, int) or not 0 <= local < placement.num_devices:
                raise ValueError(f"local must be in [0, {placement.num_devices}), got {local!r}")
            buffers = [None] * placement.num_devices
            buffers[local] = _own_rows(src, placement.buffers[local], device, nthreads, alloc,
                                       own)
        elif buffers is None:
            buffers = [fill_rows(src, b, device, nthreads) for b in placement.buffers]
        if len(buffers) != placement.num_devices:
            raise ValueError(f"got {len(buffers)} buffers for {placement.num_devices} devices")
        lookup = CacheLookup.from_placement(placement, local, holders)
        store = cls(src, buffers, lookup, local, device, h2d, threads)
        store.peer_rows = [int(b.numel()) for b in placement.buffers]
        return store

    # ------------------------------------------------------------------ peers
    def set_peer(self, d: int, rows: Optional[torch.Tensor],
                 alive: Optional[Callable[[], bool]] = None) -> None:
        """Read the rows that peer device ``d`` caches from ``rows`` (its buffer, e.g. mapped
        from the peer's process), or from the host copy (``None``). ``alive``: checked before
        each :meth:`gather`; once it says False the peer's rows are read from the host again
        (a buffer that must not be read after its owner exits: CUDA IPC).

        Raises:
            ValueError: for ``d`` this store's own device or outside the group, or ``rows``
                not shaped ``(C_d, F)`` for the ``C_d`` rows the placement gives ``d``, of
                another dtype than the host's, or on another kind of device than the store.
        """
        if not isinstance(d, int) or not 0 <= d < len(self.buffers) or d == self.local:
            raise ValueError(f"peer must be another device of the group [0, "
                             f"{len(self.buffers)}) than {self.local}, got {d!r}")
        if rows is not None:
            want = (self.peer_rows[d] if self.peer_rows is not None else
                    int(rows.shape[0]), self.host.dim)
            if tuple(rows.shape) != want or rows.dtype != self.host.dtype:
                raise ValueError(f"peer {d}'s buffer is {tuple(rows.shape)} {rows.dtype}, the "
                                 f"placement gives it {want} {self.host.dtype}")
            if rows.device.type != self.device.type:
                raise ValueError(f"peer {d}'s buffer is on {rows.device}, this store on "
                                 f"{self.device}")
        self.buffers[d] = rows
        self._peer_alive.pop(d, None)
        if rows is not None and alive is not None:
            self._peer_alive[d] = alive

    def _check_peers(self) -> None:
        """Peers whose owner is gone go back to host reads."""
        for d, alive in list(self._peer_alive.items()):
            if not alive():
                self.buffers[d] = None
                del self._peer_alive[d]
                self.peers_lost.append(d)

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        """N."""
        return self.host.num_rows

    @property
    def dim(self) -> int:
        """F."""
        return self.host.dim

    def cached_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """``(M,)`` bool (on the host): True where ``ids`` are in this device's own cache."""
        idx = self._check_ids(torch.as_tensor(ids).cpu())
        return self.lookup.devices(idx) == self.local

    def mark(self, sample: Sample) -> Sample:
        """Fill ``sample.cached`` (FGNN Table 5 "M") with holder bits as this store sees them:
        bit ``d`` for the device this store reads the vertex from (its own or the peer its
        lookup names), 0 for host rows. :meth:`gather` splits a batch from these marks.

        Returns the same sample, for chaining.
        """
        idx = self._check_ids(torch.as_tensor(sample.input_nodes).cpu())
        dev = self.lookup.devices(idx)
        one = torch.ones((), dtype=torch.int64)
        bits = torch.where(dev >= 0, torch.bitwise_left_shift(one, dev.clamp(min=0)), 0)
        sample.cached = bits.to(self._bits)
        return sample

    def _check_ids(self, ids: torch.Tensor) -> torch.Tensor:
        idx = torch.as_tensor(ids)
        if idx.dim() != 1 or idx.is_floating_point() or idx.dtype == torch.bool:
            raise ValueError(f"input_nodes must be a 1-D integer tensor, got dtype {idx.dtype} "
                             f"and shape {tuple(idx.shape)}")
        idx = idx.long()
        bad = _out_of_range(idx, self.num_nodes)
        if bad is not None:
            raise ValueError(f"input_nodes holds {bad}, outside [0, {self.num_nodes})")
        return idx

    # ------------------------------------------------------------------ gather
    def gather(self, input_nodes: torch.Tensor, marks: Optional[torch.Tensor] = None
               ) -> torch.Tensor:
        """``(M, F)`` feature rows of ``input_nodes`` on this store's device, in order.

        Rows in the local cache are copied on the device, rows on peers are read from the peer
        buffer (or the host copy, for a peer without one: ``peers_from_host``, :meth:`set_peer`),
        and the rest are read from the host
        source (through pinned memory with CUDA). Counters in :attr:`stats` advance per tier.

        Args:
            input_nodes: ``(M,)`` global ids.
            marks: ``(M,)`` holder bits of the M step (``Sample.cached``), or ``None`` to look
                every row up in this store's lookup.

        Raises:
            ValueError: on ids outside ``[0, N)``, or marks that disagree with this store's
                placement for a row marked cached (a sample marked against another cache map).
        """
        # Validated once here. The split runs where the ids are: on the host for a sample that
        # came through host memory (ids on a device are copied once), on this store's device
        # for one that is already there (CUDA IPC, time-sharing: only the misses' ids cross).
        on_device = (self.split_on_device and torch.is_tensor(input_nodes)
                     and gpu.device_of(input_nodes) == self.device)
        where = self.device if on_device else torch.device("cpu")
        ids = torch.as_tensor(input_nodes)
        idx = self._check_ids(ids if on_device else ids.cpu())
        m = idx.numel()
        if not m:
            return torch.empty(0, self.dim, dtype=self.host.dtype, device=self.device)
        if self._peer_alive:
            self._check_peers()
        lookup = self._lookup(where)
        dev = self._tiers(idx, marks, lookup, on_device)
        # rows read from the host copy: the misses and the peers served from it, in one read
        from_host = dev < 0
        n_miss = int(from_host.sum())
        for d, buf in enumerate(self.buffers):
            if buf is None:
                from_host |= dev == d
        host_sel = torch.nonzero(from_host).flatten()
        n_host = int(host_sel.numel())
        n_peer = n_host - n_miss
        if n_host == m:  # every row comes from the host: the gathered rows are the result
            self._count(0, n_peer, n_miss, n_peer)
            return self._read_host(idx.cpu())
        to_out = self._h2d if gpu.is_host(where) else (lambda t: t)
        out = torch.empty(m, self.dim, dtype=self.host.dtype, device=self.device)
        if n_host:
            rows = self._read_host(idx.index_select(0, host_sel).cpu())
            out.index_copy_(0, to_out(host_sel), rows)
        n_local, from_peers = self._gather_buffers(out, idx, dev, lookup, to_out)
        self._count(n_local, n_peer + from_peers, n_miss, n_peer)
        return out

    def _gather_buffers(self, out: torch.Tensor, idx: torch.Tensor, dev: torch.Tensor,
                        lookup: CacheLookup, to_out: Callable[[torch.Tensor], torch.Tensor]
                        ) -> tuple[int, int]:
        """Copy the rows cached on devices (this one's and the peers' buffers) into ``out``;
        ``(local rows, peer rows)``."""
        n_local = n_peer = 0
        for d, buf in enumerate(self.buffers):  # a handful of devices, not nodes
            if buf is None:
                continue
            sel = torch.nonzero(dev == d).flatten()
            k = int(sel.numel())
            if not k:
                continue
            p = lookup.positions(d, idx.index_select(0, sel))
            where = gpu.device_of(buf)
            if where != self.device:  # a buffer on another device: gathered there, its
                # copy queued, not waited for (non-blocking)
                rows = gpu.to_device(buf.index_select(0, upload(p, where)), self.device)
            elif gpu.is_host(where):  # host memory (a CPU cache, a peer's shared-memory
                # segment): gathered by the pool, as host rows are
                rows = _gather_rows(buf, p, self.threads)
            else:  # this device: its own cache, or a peer's mapped over CUDA IPC
                rows = buf.index_select(0, to_out(p))
            if d == self.local:
                n_local += k
            else:
                n_peer += k
            out.index_copy_(0, to_out(sel), rows.to(out.dtype))
        return n_local, n_peer

    def _lookup(self, where: torch.device) -> CacheLookup:
        """The lookup on ``where``: the host's, or its copy on this store's device (made at
        the first batch split there)."""
        if where.type == "cpu":
            return self.lookup
        if self._device_lookup is None:
            self._device_lookup = self.lookup.to(where)
        return self._device_lookup

    def _tiers(self, idx: torch.Tensor, marks: Optional[torch.Tensor],
               lookup: Optional[CacheLookup] = None, on_device: bool = False
               ) -> torch.Tensor:
        """``(M,)`` int64 device each row is read from (``-1`` = host), on ``idx``'s device,
        from the M-step marks when given (``on_device``: left on this store's device, else
        copied to the host), else from ``lookup`` (:attr:`lookup` on the host by default).
        Marked-cached rows are checked against ``lookup``."""
        lookup = self.lookup if lookup is None else lookup
        if marks is None or not self.buffers:
            if not self.buffers:
                return torch.full((idx.numel(),), -1, dtype=torch.int64, device=idx.device)
            return lookup.devices(idx)
        bits = torch.as_tensor(marks)
        bits = bits.to(idx.device) if on_device else bits.cpu()
        if bits.shape != idx.shape or bits.is_floating_point() or bits.dtype == torch.bool:
            raise ValueError(f"marks must be the (M,) integer holder bits of the M step "
                             f"(Placement.holder_bits), got dtype {bits.dtype} and shape "
                             f"{tuple(bits.shape)} for {idx.numel()} input nodes")
        bits = bits.long()
        dev = read_from(bits, self.local, len(self.buffers))
        cached = torch.nonzero(dev >= 0).flatten()
        if cached.numel():
            want = lookup.devices(idx.index_select(0, cached))
            got = dev.index_select(0, cached)
            bad = torch.nonzero(want != got).flatten()
            if bad.numel():
                i = int(cached[bad[0]])
                raise ValueError(f"marks disagree with this store's placement: vertex "
                                 f"{int(idx[i])} is marked {int(bits[i])} (read from device "
                                 f"{int(got[bad[0]])}) but device {self.local} reads it from "
                                 f"{int(want[bad[0]])} (-1 = host); was the sample marked "
                                 f"against another cache map?")
        if int(bits.max()) >> len(self.buffers):
            raise ValueError(f"marks hold a bit above the {len(self.buffers)} devices of this "
                             f"store's placement (max mark {int(bits.max())})")
        return dev

    def _read_host(self, ids: torch.Tensor) -> torch.Tensor:
        """Host rows of in-range CPU ``ids`` on this store's device, gathered by
        :attr:`threads` threads (through the pinned staging buffer with CUDA)."""
        dense = isinstance(self.host, TensorSource)
        if not self._pin:
            if dense:
                rows = self.host._read_unchecked(ids, threads=self.threads)
            else:
                rows = self.host.read(ids)
            return self._h2d(rows.to(dtype=self.host.dtype))
        k = int(ids.numel())
        with self._staging_lock:
            if self._staging_done is not None:
                self._staging_done.synchronize()  # last batch's copy out of the buffer is done
            if self._staging is None or self._staging.shape[0] < k:
                self._staging = gpu.empty_pinned((max(k, 1), self.dim), self.host.dtype)
            stage = self._staging[:k]
            if dense:
                self.host._read_unchecked(ids, out=stage, threads=self.threads)
            else:
                stage.copy_(self.host.read(ids))
            rows = gpu.to_device(stage, self.device)
            self._staging_done = gpu.event()
            self._staging_done.record()
        return rows

    def _count(self, n_local: int, n_peer: int, n_host: int, n_peer_host: int = 0) -> None:
        s = self.stats
        s.hits += n_local
        s.peer += n_peer
        s.misses += n_host
        s.peer_host += n_peer_host
        s.bytes["device"] += n_local * self.row_bytes
        s.bytes["peer"] += n_peer * self.row_bytes
        s.bytes["host"] += n_host * self.row_bytes

    def count(self, input_nodes: torch.Tensor, marks: Optional[torch.Tensor] = None) -> None:
        """Advance the counters exactly as :meth:`gather` would, without moving any row
        (for hit-rate studies)."""
        idx = self._check_ids(torch.as_tensor(input_nodes).cpu())
        dev = self._tiers(idx, marks)
        n_host = int((dev < 0).sum())
        n_local = int((dev == self.local).sum()) if self.buffers else 0
        n_peer_host = sum(int((dev == d).sum()) for d, b in enumerate(self.buffers)
                          if b is None and d != self.local)
        self._count(n_local, idx.numel() - n_host - n_local, n_host, n_peer_host)

    def reset_stats(self) -> TierStats:
        """Start a new epoch's counters; returns the finished ones."""
        done, self.stats = self.stats, TierStats()
        return done
