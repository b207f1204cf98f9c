"""A recording fake GPU for CPU tests: swaps in for :mod:`fgnn.gpu` and enforces CUDA's rules.

A test double, never a runtime path. Fake GPU ``k`` is the torch device ``cpu:k``: its memory is
host memory, so every torch op runs, but a tensor "on" it is a :class:`FakeTensor` that knows
its GPU, the stream that made it and when. The fake raises :class:`CudaRuleError` where real CUDA
would crash, hang or silently corrupt data, for the rules fgnn depends on:

* a pinned host buffer written while a non-blocking copy out of it is still in flight (checked
  when the copy completes: an event or stream synchronise, or :meth:`FakeCuda.check`);
* a tensor used on a stream other than the one that made it, without that stream waiting for
  it (``wait_event``, or the host having synchronised) and without ``record_stream``;
* one op mixing tensors of two GPUs (a tensor from another device needs an explicit copy);
* two ranks of one NCCL group on one GPU, or a rank's GPU not the thread's current device;
* a CUDA IPC handle opened in the process that exported it; an event timed before it completed.

Host reads of device values (``item``, ``float``, ``.cpu()``, ``tolist``...) and host
synchronisations are counted in :attr:`FakeCuda.syncs`. Install with the ``fake_cuda`` fixture
(``tests/conftest.py``) or :func:`install`.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map

from fgnn import gpu

__all__ = ["CudaRuleError", "FakeCuda", "FakeEvent", "FakeStream", "FakeTensor", "install"]

_ACTIVE: list["FakeCuda"] = []
_HOST_READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__,
               torch.Tensor.__int__, torch.Tensor.__bool__, torch.Tensor.__index__,
               torch.Tensor.numpy, torch.Tensor.cpu}


class CudaRuleError(AssertionError):
    """fgnn broke a CUDA rule that real hardware would punish."""


class FakeStream:
    """A stream of one fake GPU: ops queue on it in order; the host completes them."""

    def __init__(self, fake: "FakeCuda", index: int, name: str) -> None:
        self.fake, self.index, self.name = fake, index, name
        self.completed = -1            # ops up to this sequence number are done
        self.waited: dict[int, int] = {}   # id(other stream) -> its seq this stream waits for

    def __repr__(self) -> str:
        return f"FakeStream(cuda:{self.index} {self.name})"

    def synchronize(self) -> None:
        """Block the host until every op queued on this stream is done."""
        self.fake.complete(self, self.fake.seq)

    def wait_event(self, event: "FakeEvent") -> None:
        """Order this stream after ``event``."""
        if event.stream is None:
            raise CudaRuleError("wait_event on an event that was never recorded")
        key = id(event.stream)
        self.waited[key] = max(self.waited.get(key, -1), event.seq)

    def query(self) -> bool:
        return self.completed >= self.fake.seq


class FakeEvent:
    """A CUDA event: marks a point of a stream; the host may wait for it."""

    def __init__(self, fake: "FakeCuda", timing: bool) -> None:
        self.fake, self.timing = fake, timing
        self.stream: Optional[FakeStream] = None
        self.seq, self.at = -1, 0.0

    def record(self, stream: Optional[FakeStream] = None) -> None:
        self.stream = stream if stream is not None else \
            self.fake.current_stream(self.fake.device(self.fake.current_device()))
        self.seq, self.at = self.fake.tick(), time.perf_counter()

    def done(self) -> bool:
        return self.stream is not None and self.stream.completed >= self.seq

    def synchronize(self) -> None:
        if self.stream is None:
            raise CudaRuleError("synchronize on an event that was never recorded")
        self.fake.complete(self.stream, self.seq)

    def query(self) -> bool:
        return self.done()

    def elapsed_time(self, end: "FakeEvent") -> float:
        """Milliseconds from this event to ``end``; both must be timing events, ``end`` done."""
        if not (self.timing and end.timing):
            raise CudaRuleError("elapsed_time needs events made with enable_timing=True")
        if not end.done():
            raise CudaRuleError("elapsed_time before the end event completed "
                                "(cudaErrorNotReady): synchronize it first")
        return (end.at - self.at) * 1000.0


class FakeTensor(torch.Tensor):
    """A tensor in a fake GPU's memory; ops on it stay on that GPU."""

    _fake_index: int
    _stream: FakeStream
    _seq: int
    _recorded: set

    @classmethod
    def __torch_function__(cls, func: Any, types_: Any, args: Sequence = (),
                           kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        fake = _ACTIVE[-1] if _ACTIVE else None
        with torch._C.DisableTorchFunctionSubclass():
            if fake is None or getattr(func, "__name__", "") in ("__get__", "__repr__"):
                return func(*args, **kwargs)
            return fake.dispatch(func, args, kwargs)


@dataclass
class Copy:
    """One copy the fake saw."""

    src: str
    dst: str
    non_blocking: bool
    pinned: bool
    nbytes: int


@dataclass(eq=False)
class _InFlight:
    src: torch.Tensor
    version: int
    stream: FakeStream
    seq: int
    what: str


@dataclass
class FakeCuda:
    """The fake device: ``gpus`` fake GPUs of ``total`` bytes each, and what it recorded."""

    gpus: int = 2
    total: int = 16 << 30
    pid: int = field(default_factory=os.getpid)
    seq: int = 0
    syncs: int = 0
    copies: list = field(default_factory=list)
    host_reads: list = field(default_factory=list)
    peak: dict = field(default_factory=dict)
    allocated: dict = field(default_factory=dict)
    reserved: dict = field(default_factory=dict)
    free: dict = field(default_factory=dict)
    resets: list = field(default_factory=list)
    nvml_bytes: Optional[int] = None
    rng: list = field(default_factory=list)
    nccl: list = field(default_factory=list)
    exports: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._pinned: dict[int, int] = {}       # storage data_ptr -> its bytes
        self._in_flight: list[_InFlight] = []
        self._streams = {k: FakeStream(self, k, "default") for k in range(self.gpus)}
        self._current: dict[tuple[int, int], FakeStream] = {}
        self._thread_device: dict[int, int] = {}
        self._lock = threading.RLock()
        self._ids = itertools.count()
        self.rng = [torch.tensor([k], dtype=torch.uint8) for k in range(self.gpus)]

    # -- identity ------------------------------------------------------------------------------
    def device(self, k: int = 0) -> torch.device:
        """The torch device that stands for fake GPU ``k``."""
        return torch.device("cpu", k)

    def index(self, device: torch.device) -> int:
        if not self.is_cuda(device):
            raise CudaRuleError(f"{device} is not a fake GPU")
        return int(device.index)

    def is_cuda(self, device: torch.device) -> bool:
        return device.type == "cpu" and device.index is not None and device.index < self.gpus

    def is_host(self, device: torch.device) -> bool:
        return device.type == "cpu" and device.index is None

    def device_of(self, t: torch.Tensor) -> torch.device:
        return self.device(t._fake_index) if isinstance(t, FakeTensor) else t.device

    def on_cuda(self, t: torch.Tensor) -> bool:
        return isinstance(t, FakeTensor)

    def tick(self) -> int:
        with self._lock:
            self.seq += 1
            return self.seq

    def tensor(self, t: torch.Tensor, k: int = 0) -> FakeTensor:
        """``t`` placed on fake GPU ``k`` (made on its current stream now)."""
        return self._wrap(t.detach().clone(), k)

    def _wrap(self, t: torch.Tensor, k: int) -> FakeTensor:
        out = t.as_subclass(FakeTensor)
        out._fake_index = k
        out._stream = self.current_stream(self.device(k))
        out._seq = self.tick()
        out._recorded = set()
        return out

    # -- the op hook ---------------------------------------------------------------------------
    def dispatch(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        flat = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, FakeTensor)]
        gpus = {a._fake_index for a in flat}
        if len(gpus) > 1:
            raise CudaRuleError(f"{getattr(func, '__name__', func)} mixes tensors of GPUs "
                                f"{sorted(gpus)}: a tensor from another device needs an "
                                f"explicit copy")
        if not flat:
            return func(*args, **kwargs)
        k = gpus.pop()
        stream = self.current_stream(self.device(k))
        host_read = func in _HOST_READS or (func is torch.Tensor.to and _to_host(args, kwargs))
        for a in flat:
            self._check_use(a, stream, host_read)
        if host_read:  # the host waits for the stream's work so far
            self.complete(stream, self.seq)
            self.host_reads.append(stream)
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor):  # a host copy: plain host memory
                out = out.as_subclass(torch.Tensor).clone()
            return out
        target = _to_device(args, kwargs) if func is torch.Tensor.to else None
        out = func(*args, **kwargs)
        if target is not None and self.is_cuda(target):
            self.copies.append(Copy(f"cuda:{k}", f"cuda:{target.index}", True, False,
                                    args[0].numel() * args[0].element_size()))
            k = int(target.index)
        ids = {id(a) for a in tree_flatten((args, kwargs))[0]}
        return tree_map(lambda o: o if not isinstance(o, torch.Tensor) or id(o) in ids
                        else self._wrap(o, k), out)

    def _check_use(self, t: FakeTensor, stream: FakeStream, host_read: bool) -> None:
        """Using ``t`` on ``stream``: ordered after its producer, and (a device use) known to the
        allocator through ``record_stream``."""
        if t._stream is stream:
            return
        ordered = t._stream.completed >= t._seq or stream.waited.get(id(t._stream), -1) >= t._seq
        if not ordered:
            raise CudaRuleError(f"a tensor made on {t._stream} used on {stream} before that "
                                f"stream waited for it (wait_event) or the host synchronised")
        if not host_read and id(stream) not in t._recorded and t._stream.name != "default":
            raise CudaRuleError(f"a tensor made on {t._stream} used on {stream} without "
                                f"record_stream: the allocator may reuse its memory")

    # -- pinned memory and copies --------------------------------------------------------------
    def _register_pinned(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        self._pinned[st.data_ptr()] = st.nbytes()
        return t

    def is_pinned(self, t: torch.Tensor) -> bool:
        """Whether ``t`` lies in a buffer the fake pinned."""
        if isinstance(t, FakeTensor) or t.numel() == 0:
            return False
        p = t.untyped_storage().data_ptr()
        return any(b <= p < b + n for b, n in self._pinned.items())

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor):
            raise CudaRuleError("pin_memory of a tensor on a GPU")
        return t if self.is_pinned(t) else self._register_pinned(t.clone())

    def empty_pinned(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return self._register_pinned(torch.empty(tuple(shape), dtype=dtype))

    def empty_host(self, shape: Sequence[int], dtype: torch.dtype, pinned: bool) -> torch.Tensor:
        return self.empty_pinned(shape, dtype) if pinned else torch.empty(tuple(shape),
                                                                          dtype=dtype)

    def to_device(self, t: torch.Tensor, device: torch.device,
                  non_blocking: bool = True) -> torch.Tensor:
        src = self.device_of(t)
        if not self.is_cuda(device):
            return t.to(device) if not isinstance(t, FakeTensor) else t.cpu()
        k = self.index(device)
        pinned = not isinstance(t, FakeTensor) and self.is_pinned(t)
        self.copies.append(Copy(str(src) if self.is_host(src) else f"cuda:{src.index}",
                                f"cuda:{k}", non_blocking, pinned,
                                t.numel() * t.element_size()))
        with torch._C.DisableTorchFunctionSubclass():
            data = t.detach().clone()
        out = self._wrap(data, k)
        if not isinstance(t, FakeTensor) and non_blocking and pinned:
            self._in_flight.append(_InFlight(t, t._version, out._stream, out._seq,
                                             "a host->device copy"))
        elif isinstance(t, FakeTensor):
            self._check_use(t, self.current_stream(self.device(t._fake_index)), False)
        return out

    def copy_into(self, dst: torch.Tensor, src: torch.Tensor,
                  non_blocking: bool = True) -> torch.Tensor:
        if isinstance(src, FakeTensor) and not isinstance(dst, FakeTensor):
            stream = self.current_stream(self.device(src._fake_index))
            self._check_use(src, stream, True)
            with torch._C.DisableTorchFunctionSubclass():
                dst.copy_(src)
            pinned = self.is_pinned(dst)
            self.copies.append(Copy(f"cuda:{src._fake_index}", "cpu", non_blocking, pinned,
                                    dst.numel() * dst.element_size()))
            if non_blocking and pinned:  # the host may not read dst before a sync
                self._in_flight.append(_InFlight(dst, dst._version, stream, self.tick(),
                                                 "a device->host copy"))
            else:
                self.syncs += 1
            return dst
        return dst.copy_(src)

    def in_flight(self) -> list[str]:
        """The copies not yet completed, as words."""
        return [f"{f.what} on {f.stream}" for f in self._in_flight]

    def complete(self, stream: FakeStream, upto: int) -> None:
        """The host waits until ``stream`` ran its ops up to ``upto`` (a sync)."""
        self.syncs += 1
        stream.completed = max(stream.completed, upto)
        done = [f for f in self._in_flight if f.stream is stream and f.seq <= upto]
        self._in_flight = [f for f in self._in_flight if f not in done]
        for f in done:
            self._check_untouched(f)

    def _check_untouched(self, f: _InFlight) -> None:
        if f.what == "a host->device copy" and f.src._version != f.version:
            raise CudaRuleError("a pinned buffer was written while a non-blocking copy out of "
                                "it was in flight: the device may read the new rows")

    def check(self) -> None:
        """At the end of a test: no pinned source was overwritten under an in-flight copy."""
        for f in self._in_flight:
            self._check_untouched(f)

    # -- streams, events -----------------------------------------------------------------------
    def new_stream(self, device: torch.device) -> FakeStream:
        return FakeStream(self, self.index(device), f"side-{next(self._ids)}")

    def current_stream(self, device: torch.device) -> FakeStream:
        k = self.index(device)
        return self._current.get((threading.get_ident(), k), self._streams[k])

    def default_stream(self, k: int = 0) -> FakeStream:
        return self._streams[k]

    @contextlib.contextmanager
    def use_stream(self, stream: FakeStream) -> Iterator[None]:
        key = (threading.get_ident(), stream.index)
        before = self._current.get(key)
        self._current[key] = stream
        try:
            yield
        finally:
            if before is None:
                self._current.pop(key, None)
            else:
                self._current[key] = before

    def record_stream(self, t: torch.Tensor, stream: FakeStream) -> None:
        if not isinstance(t, FakeTensor):
            raise CudaRuleError("record_stream of a tensor not on a GPU")
        t._recorded.add(id(stream))

    def event(self, timing: bool = False) -> FakeEvent:
        return FakeEvent(self, timing)

    def synchronize(self, device: torch.device) -> None:
        k = self.index(device)
        streams = {id(s): s for s in [self._streams[k], *self._current.values(),
                                      *(f.stream for f in self._in_flight)] if s.index == k}
        for s in streams.values():
            self.complete(s, self.seq)

    # -- process, memory, RNG ------------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.gpus

    def current_device(self) -> int:
        return self._thread_device.get(threading.get_ident(), 0)

    def set_device(self, device: torch.device) -> None:
        self._thread_device[threading.get_ident()] = self.index(device)

    def reset_peak(self, device: torch.device) -> None:
        k = self.index(device)
        self.resets.append(k)
        self.peak[k] = self.allocated.get(k, 0)

    def max_memory_allocated(self, device: torch.device) -> int:
        return int(self.peak.get(self.index(device), 0))

    def max_memory_reserved(self, device: torch.device) -> int:
        return int(self.reserved.get(self.index(device), 0))

    def memory_allocated(self, device: torch.device) -> int:
        return int(self.allocated.get(self.index(device), 0))

    def memory_reserved(self, device: torch.device) -> int:
        return int(self.reserved.get(self.index(device), 0))

    def mem_get_info(self, device: torch.device) -> tuple[int, int]:
        k = self.index(device)
        return int(self.free.get(k, self.total)), int(self.total)

    def total_memory(self, device: torch.device) -> int:
        self.index(device)
        return int(self.total)

    def device_uuid(self, device: torch.device) -> str:
        return f"GPU-fake-{self.index(device)}"

    def nvml_process_bytes(self, device: torch.device) -> Optional[int]:
        self.index(device)
        return self.nvml_bytes

    def rng_state_all(self) -> list[torch.Tensor]:
        return [s.clone() for s in self.rng]

    def set_rng_state_all(self, states: Sequence[torch.Tensor]) -> None:
        if len(states) != self.gpus:
            raise CudaRuleError(f"{len(states)} CUDA RNG states for {self.gpus} GPUs")
        self.rng = [s.clone() for s in states]

    # -- IPC and NCCL --------------------------------------------------------------------------
    def _rebuild(self, *args: Any) -> torch.Tensor:  # stands for torch's rebuild_cuda_tensor
        return self.ipc_open(args)

    def ipc_export(self, t: torch.Tensor) -> tuple[Any, tuple]:
        if not isinstance(t, FakeTensor):
            raise RuntimeError("CUDA IPC exports GPU tensors only")
        key = f"h{next(self._ids)}"
        self.exports[key] = (t, self.pid)
        args = (FakeTensor, tuple(t.shape), t.stride(), t.storage_offset(), None, t.dtype,
                t._fake_index, key, t.numel() * t.element_size(), 0, False, None, 0, None,
                False)
        return self._rebuild, args

    def ipc_is_cuda(self, fn: Any) -> bool:
        return getattr(fn, "__func__", None) is FakeCuda._rebuild

    def ipc_open(self, args: Sequence[Any]) -> torch.Tensor:
        t, exporter = self.exports[args[7]]
        if exporter == self.pid:
            raise RuntimeError("cudaIpcOpenMemHandle: a handle cannot be opened in the process "
                               "that exported it (invalid device context)")
        k = int(args[6])
        if not 0 <= k < self.gpus:
            raise RuntimeError(f"invalid device ordinal {k}")
        with torch._C.DisableTorchFunctionSubclass():
            view = t.as_subclass(torch.Tensor)  # the exporter's memory, mapped here
        return self._wrap(view, k)

    def nccl_options(self) -> Any:
        return types.SimpleNamespace(_timeout=None)

    def nccl_process_group(self, store: Any, rank: int, size: int, opts: Any,
                           device: torch.device) -> Any:
        """A fake NCCL group member, checked: one rank per GPU, on the thread's current GPU, a
        timeout in the options."""
        k = self.index(device)
        if k != self.current_device():
            raise CudaRuleError(f"rank {rank} builds its NCCL group for cuda:{k} while the "
                                f"thread's current device is cuda:{self.current_device()}")
        if not isinstance(getattr(opts, "_timeout", None), datetime.timedelta):
            raise CudaRuleError("ProcessGroupNCCL options without a timeout")
        key = id(getattr(store, "underlying_store", store))
        with self._lock:
            peers = [m for m in self.nccl if m["store"] == key and m["size"] == size]
            clash = [m for m in peers if m["gpu"] == k and m["rank"] != rank]
            if clash:
                raise CudaRuleError(f"Duplicate GPU detected: rank {rank} and rank "
                                    f"{clash[0]['rank']} both on cuda:{k} (ncclInvalidUsage)")
            member = {"store": key, "rank": rank, "size": size, "gpu": k,
                      "timeout": opts._timeout,
                      "async_error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")}
            self.nccl.append(member)
        return types.SimpleNamespace(name=lambda: "NCCL", member=member)


#: the seam's functions the fake replaces (every public function of :mod:`fgnn.gpu`)
SEAM = [n for n in gpu.__all__ if callable(getattr(gpu, n))]


def _to_device(args: Sequence, kwargs: dict) -> Optional[torch.device]:
    """The device a ``Tensor.to`` call moves to, if it names one."""
    for a in [*args[1:], kwargs.get("device")]:
        if isinstance(a, (torch.device, str)) and not isinstance(a, torch.dtype):
            try:
                return torch.device(a)
            except RuntimeError:
                continue
    return None


def _to_host(args: Sequence, kwargs: dict) -> bool:
    d = _to_device(args, kwargs)
    return d is not None and d.type == "cpu" and d.index is None


@contextlib.contextmanager
def install(fake: Optional[FakeCuda] = None, monkeypatch: Any = None) -> Iterator[FakeCuda]:
    """Swap ``fake`` in for :mod:`fgnn.gpu` (every seam function) for the enclosed block."""
    fake = fake if fake is not None else FakeCuda()
    saved = {n: getattr(gpu, n) for n in SEAM}
    missing = [n for n in SEAM if not hasattr(fake, n)]
    if missing:
        raise AttributeError(f"the fake lacks seam functions {missing}")
    for n in SEAM:
        setattr(gpu, n, getattr(fake, n))
    _ACTIVE.append(fake)
    try:
        yield fake
    finally:
        _ACTIVE.remove(fake)
        for n, f in saved.items():
            setattr(gpu, n, f)
