"""The trainer's feature store: device cache, peer devices and host memory behind one ``gather``.

FGNN §6.1: ``load_cache(hotness_map, α)`` "identifies and loads the features of the top-ranked
``α|V|`` vertices w.r.t. ``h_v`` into the GPU memory. It also builds a hash table to indicate the
location in feature cache of a given vertex" — here a dense ``(N,)`` slot array, ``-1`` when not
cached.

With several devices the store follows a :class:`~fgnn.cache.placement.Placement`: each device
reads a vertex from its own buffer, else from the peer named by ``dev_num`` (Song & Jiang §3.2),
else from the host. On CPU the "devices" are just tensors; with CUDA, host misses are staged
through pinned memory and copied asynchronously.

The M step (FGNN Table 5): since the caches are static, the Sample stage marks each input
vertex with the devices that hold it (:meth:`Placement.holder_bits
<fgnn.cache.placement.Placement.holder_bits>`, one bit per device). :meth:`FeatureStore.gather`
takes those marks and splits the batch from them alone: a row whose mark has this device's bit
is local, one with only other bits comes from the lowest-numbered of those peers, one marked 0 is
read from the host without any lookup. Only the rows marked cached are looked up (their buffer
position), and that lookup also checks the marks against this store's own placement, so a
consumer with a smaller cache (a standby Trainer) splits correctly from the same marks.

Peers served from the host copy: a store built with ``peers_from_host=True`` keeps only its own
buffer; a row it would read from a peer is read from the host source instead (the same bytes;
the Ray executors of fgnn are separate processes, and on CPU the "peer device" is host memory
anyway) and is still counted in the ``peer`` tier, so the counters give the traffic per tier of
the placement.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from fgnn.cache.placement import Placement, bits_dtype, hot_order
from fgnn.cache.source import FeatureSource
from fgnn.sampling.base import Sample

__all__ = ["FeatureCache", "FeatureStore", "TensorSource", "TierStats", "load_cache",
           "num_cached_rows", "as_source"]

HostLike = Union[FeatureSource, torch.Tensor, np.ndarray]


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

    def _read_unchecked(self, idx: torch.Tensor, out: Optional[torch.Tensor] = None
                        ) -> torch.Tensor:
        """:meth:`read` for int64 CPU ``idx`` already known to be in range (the store validated
        them once at its entry point); writes into ``out`` (``(len(idx), F)``) when given."""
        if self._t is not None:
            if out is None:
                return self._t.index_select(0, idx)
            return torch.index_select(self._t, 0, idx, out=out)
        if out is None:
            return torch.from_numpy(np.ascontiguousarray(self._np[idx.numpy()]))
        np.take(self._np, idx.numpy(), axis=0, out=out.numpy(), mode="clip")  # ids in range
        return out


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
    """A static device cache: the rows of ``ids`` on ``device`` and the id → slot lookup.

    Attributes:
        ids: ``(C,)`` int64 cached vertex ids, hottest first; slot ``i`` holds ``ids[i]``.
        rows: ``(C, F)`` feature rows on the device.
        slot: ``(N,)`` int64, ``slot[v]`` = cache row of ``v`` or ``-1`` (on the device).
    """

    ids: torch.Tensor
    rows: torch.Tensor
    slot: torch.Tensor

    @property
    def num_cached(self) -> int:
        """C."""
        return int(self.ids.numel())

    @property
    def nbytes(self) -> int:
        """Bytes of the cached rows."""
        return int(self.rows.numel() * self.rows.element_size())


def load_cache(hotness: torch.Tensor, alpha: float, host: HostLike,
               device: torch.device | str = "cpu") -> FeatureCache:
    """FGNN §6.1 ``load_cache(hotness_map, α)``: cache the top ``⌊α|V|⌋`` rows on ``device``.

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
    rows = src.read(ids).to(device)
    slot = torch.full((n,), -1, dtype=torch.int64)
    slot[ids] = torch.arange(c, dtype=torch.int64)
    return FeatureCache(ids.to(device), rows, slot.to(device))


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
                "bytes": dict(self.bytes)}


class FeatureStore:
    """Gathers a batch's input feature rows from device cache, peer devices and host memory.

    Build it with :meth:`single` (one device, a :class:`FeatureCache`) or :meth:`from_placement`
    (a device of a group sharing a :class:`Placement`).

    Args:
        host: the full ``(N, F)`` feature matrix off the device.
        buffers: one ``(C_d, F)`` row tensor per device of the group (``[]`` for no cache);
            ``None`` for a peer whose rows are read from ``host`` (counted as ``peer``).
        dev_num: ``(N,)`` device to read each vertex from, ``-1`` = host.
        buf_pos: ``(N,)`` row of each vertex in its ``dev_num`` buffer.
        local: this store's device index within the group.
        device: where gathered rows are returned.
    """

    def __init__(self, host: HostLike, buffers: Sequence[Optional[torch.Tensor]],
                 dev_num: torch.Tensor, buf_pos: torch.Tensor, local: int = 0,
                 device: torch.device | str = "cpu"):
        self.host = as_source(host)
        n = self.host.num_rows
        if dev_num.shape != (n,) or buf_pos.shape != (n,):
            raise ValueError(f"dev_num/buf_pos must have shape ({n},), got "
                             f"{tuple(dev_num.shape)} and {tuple(buf_pos.shape)}")
        if buffers and not 0 <= local < len(buffers):
            raise ValueError(f"local must be in [0, {len(buffers)}), got {local}")
        if buffers and buffers[local] is None:
            raise ValueError(f"buffers[{local}] (this store's own device) must be a tensor")
        for i, b in enumerate(buffers):
            if b is not None and (b.dim() != 2 or b.shape[1] != self.host.dim):
                raise ValueError(f"buffers[{i}] has shape {tuple(b.shape)}, expected "
                                 f"(C, {self.host.dim})")
        self.device = torch.device(device)
        self.buffers = list(buffers)
        self.local = local
        self._bits = bits_dtype(len(self.buffers))  # one mark bit per device (<= 63)
        self.dev_num = dev_num.to(self.device, torch.int8)  # 1 byte per vertex
        self.buf_pos = buf_pos.to(self.device, torch.int64)
        self.row_bytes = _row_bytes(self.host)
        self.stats = TierStats()
        # CPU copies of the lookup: gather splits host/cache on the host, so only gathered rows
        # and slot ids cross to the device (no device->host sync per batch). Same tensors on CPU.
        on_cpu = self.device.type == "cpu"
        self._dev_num_h = self.dev_num if on_cpu else self.dev_num.cpu()
        self._buf_pos_h = self.buf_pos if on_cpu else self.buf_pos.cpu()
        self._pin = self.device.type == "cuda" and torch.cuda.is_available()
        # CUDA only: one pinned staging buffer for host rows, grown as needed, reused per batch
        # once the previous batch's asynchronous copy out of it has finished.
        self._staging: Optional[torch.Tensor] = None
        self._staging_done: Any = None
        self._staging_lock = threading.Lock()

    @staticmethod
    def lookup_nbytes(num_nodes: int) -> int:
        """Device bytes of the per-vertex lookup every store keeps (``dev_num`` int8 and
        ``buf_pos`` int64: 9 bytes a vertex), which the cache budget must leave room for."""
        return 9 * int(num_nodes)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def single(cls, host: HostLike, cache: Optional[FeatureCache] = None,
               device: torch.device | str = "cpu") -> "FeatureStore":
        """A one-device store over ``cache`` (``None``: every row comes from the host)."""
        src = as_source(host)
        n = src.num_rows
        if cache is None:
            return cls(src, [], torch.full((n,), -1, dtype=torch.int64), torch.arange(n),
                       0, device)
        if cache.slot.shape != (n,):
            raise ValueError(f"cache.slot has shape {tuple(cache.slot.shape)}, expected ({n},)")
        slot = cache.slot.cpu()
        dev_num = torch.where(slot >= 0, 0, -1).to(torch.int64)
        buf_pos = torch.where(slot >= 0, slot, torch.arange(n))
        return cls(src, [cache.rows.to(device)], dev_num, buf_pos, 0, device)

    @classmethod
    def from_placement(cls, host: HostLike, placement: Placement, local: int,
                       buffers: Optional[Sequence[torch.Tensor]] = None,
                       device: torch.device | str = "cpu",
                       peers_from_host: bool = False) -> "FeatureStore":
        """The store of device ``local`` in a group sharing ``placement``.

        Args:
            host: full feature matrix.
            placement: ids per device (:mod:`fgnn.cache.placement`).
            local: this device's index.
            buffers: the devices' row tensors (shared between the group's stores); ``None``
                reads them from ``host`` (each on ``device``; on CPU peers are plain tensors).
            device: this store's device.
            peers_from_host: keep only this device's buffer and read peer rows from ``host``
                (same bytes, counted in the ``peer`` tier); ignores ``buffers``.
        """
        src = as_source(host)
        if placement.num_nodes != src.num_rows:
            raise ValueError(f"placement covers {placement.num_nodes} vertices, host has "
                             f"{src.num_rows} rows")
        if peers_from_host:
            if not isinstance(local, int) or not 0 <= local < placement.num_devices:
                raise ValueError(f"local must be in [0, {placement.num_devices}), got {local!r}")
            buffers = [src.read(b).to(device) if d == local else None
                       for d, b in enumerate(placement.buffers)]
        elif buffers is None:
            buffers = [src.read(b).to(device) for b in placement.buffers]
        if len(buffers) != placement.num_devices:
            raise ValueError(f"got {len(buffers)} buffers for {placement.num_devices} devices")
        dev_num, buf_pos = placement.lookup(local)
        return cls(src, buffers, dev_num, buf_pos, local, device)

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
        """``(M,)`` bool: True where ``ids`` are in this device's own cache."""
        idx = self._check_ids(ids)
        return (self.dev_num[idx.to(self.device)] == self.local).to(idx.device)

    def mark(self, sample: Sample) -> Sample:
        """Fill ``sample.cached`` (FGNN Table 5 "M") with holder bits as this store sees them:
        bit ``d`` for the device this store reads the vertex from (its own or the peer
        ``dev_num`` names), 0 for host rows. :meth:`gather` splits a batch from these marks.

        Returns the same sample, for chaining.
        """
        idx = self._check_ids(torch.as_tensor(sample.input_nodes).cpu())
        dev = self._dev_num_h.index_select(0, idx).long()
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
        buffer (or the host copy, ``peers_from_host``), and the rest are read from the host
        source (through pinned memory with CUDA). Counters in :attr:`stats` advance per tier.

        Args:
            input_nodes: ``(M,)`` global ids.
            marks: ``(M,)`` holder bits of the M step (``Sample.cached``), or ``None`` to look
                every row up in this store's ``dev_num``.

        Raises:
            ValueError: on ids outside ``[0, N)``, or marks that disagree with this store's
                placement for a row marked cached (a sample marked against another cache map).
        """
        # Validated once here; the host split is computed on CPU copies of the lookup (ids on a
        # device are copied to the host once, a no-op for the usual CPU sample).
        idx = self._check_ids(torch.as_tensor(input_nodes).cpu())
        m = idx.numel()
        if not m:
            return torch.empty(0, self.dim, dtype=self.host.dtype, device=self.device)
        dev = self._tiers(idx, marks)
        host_sel = torch.nonzero(dev < 0).flatten()
        n_host = int(host_sel.numel())
        if n_host == m:  # every row is a miss: the gathered rows are the result
            self._count(0, 0, m)
            return self._read_host(idx)
        out = torch.empty(m, self.dim, dtype=self.host.dtype, device=self.device)
        if n_host:
            rows = self._read_host(idx.index_select(0, host_sel))
            out.index_copy_(0, host_sel.to(self.device, non_blocking=self._pin), rows)
        n_local = n_peer = 0
        for d, buf in enumerate(self.buffers):  # a handful of devices, not nodes
            sel = torch.nonzero(dev == d).flatten()
            k = int(sel.numel())
            if not k:
                continue
            ids = idx.index_select(0, sel)
            sel = sel.to(self.device, non_blocking=self._pin)
            if buf is None:  # a peer served from the host copy: same bytes, peer tier
                out.index_copy_(0, sel, self._read_host(ids))
                n_peer += k
                continue
            p = self._buf_pos_h.index_select(0, ids)
            if d == self.local:
                rows = buf.index_select(0, p.to(buf.device, non_blocking=self._pin))
                out.index_copy_(0, sel, rows.to(out.dtype))
                n_local += k
            else:
                rows = buf.index_select(0, p.to(buf.device)).to(self.device, out.dtype)
                out.index_copy_(0, sel, rows)
                n_peer += k
        self._count(n_local, n_peer, n_host)
        return out

    def _tiers(self, idx: torch.Tensor, marks: Optional[torch.Tensor]) -> torch.Tensor:
        """``(M,)`` int64 device each row is read from (``-1`` = host), from the M-step marks
        when given, else from ``dev_num``. Marked-cached rows are checked against ``dev_num``."""
        if marks is None or not self.buffers:
            if not self.buffers:
                return torch.full((idx.numel(),), -1, dtype=torch.int64)
            return self._dev_num_h.index_select(0, idx).long()
        bits = torch.as_tensor(marks).cpu()
        if bits.shape != idx.shape or bits.is_floating_point() or bits.dtype == torch.bool:
            raise ValueError(f"marks must be the (M,) integer holder bits of the M step "
                             f"(Placement.holder_bits), got dtype {bits.dtype} and shape "
                             f"{tuple(bits.shape)} for {idx.numel()} input nodes")
        bits = bits.long()
        dev = torch.full_like(bits, -1)
        others = bits & ~(1 << self.local)
        for d in range(len(self.buffers) - 1, -1, -1):  # the lowest-numbered peer wins
            dev[((others >> d) & 1).bool()] = d
        dev[((bits >> self.local) & 1).bool()] = self.local
        cached = torch.nonzero(dev >= 0).flatten()
        if cached.numel():
            want = self._dev_num_h.index_select(0, idx.index_select(0, cached)).long()
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
        """Host rows of in-range CPU ``ids`` on this store's device (through the pinned staging
        buffer with CUDA)."""
        if not self._pin:
            if isinstance(self.host, TensorSource):
                rows = self.host._read_unchecked(ids)
            else:
                rows = self.host.read(ids)
            return rows.to(self.device, self.host.dtype)
        k = int(ids.numel())
        with self._staging_lock:
            if self._staging_done is not None:
                self._staging_done.synchronize()  # last batch's copy out of the buffer is done
            if self._staging is None or self._staging.shape[0] < k:
                self._staging = torch.empty(max(k, 1), self.dim, dtype=self.host.dtype,
                                            pin_memory=True)
            stage = self._staging[:k]
            if isinstance(self.host, TensorSource):
                self.host._read_unchecked(ids, out=stage)
            else:
                stage.copy_(self.host.read(ids))
            rows = stage.to(self.device, non_blocking=True)
            self._staging_done = torch.cuda.Event()
            self._staging_done.record()
        return rows

    def _count(self, n_local: int, n_peer: int, n_host: int) -> None:
        s = self.stats
        s.hits += n_local
        s.peer += n_peer
        s.misses += n_host
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
        self._count(n_local, idx.numel() - n_host - n_local, n_host)

    def reset_stats(self) -> TierStats:
        """Start a new epoch's counters; returns the finished ones."""
        done, self.stats = self.stats, TierStats()
        return done
