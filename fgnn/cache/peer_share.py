"""A cache buffer of one process read by another on the same host, without a copy.

The peer tier of the feature store (Song & Jiang §3.2: a vertex another device of the group
caches is read from that device's buffer) across executor processes. The process that owns a
buffer exports it (:func:`export_buffer`: a small picklable :class:`BufferHandle`); another
process on the same host opens the handle (:func:`open_buffer`: a tensor that *is* the owner's
memory, mapped into this process). Two twins behind one API:

* **CUDA** (``kind="ipc"``): torch's own CUDA IPC (:func:`torch.multiprocessing.reductions.
  reduce_tensor` and the ``rebuild_cuda_tensor`` it names). The handle is opened on this
  process's current device: the same GPU (two processes sharing one GPU), or another one that
  peer access reaches (NVLink, P2P over PCIe), whose rows a gather kernel on this device then
  reads directly; CUDA refuses the open where no peer access exists.
* **CPU** (``kind="shm"``): a POSIX shared-memory segment by name (a file of ``/dev/shm``).
  :func:`shared_empty` allocates the owner's buffer there, so exporting it copies nothing, and
  :func:`open_buffer` maps the segment (``torch.from_file(shared=True)``). The mapping stays
  valid after the owner removes the name or exits; only the name goes.

Contract (torch's, for CUDA): the exporter keeps the tensor alive while others read it. This
module does that: an exported tensor stays referenced until :func:`release` (the store is
rebuilt) or :func:`release_all` (the process exits normally, ``atexit``). A segment's name holds
its owner's pid (``fgnn-peer-<pid>-<random>``); :func:`sweep_stale` removes the segments of
owners that are gone (killed processes run no ``atexit``), and runs before every new segment.

Every refusal to open is a :class:`PeerShareError` naming why (another host, a segment that is
gone, no CUDA here, CUDA IPC refused), which the caller turns into host reads.
"""

from __future__ import annotations

import atexit
import glob
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from fgnn import gpu

__all__ = ["BufferHandle", "PeerShareError", "SEGMENT_STEM", "discard", "export_buffer",
           "exporter_alive", "host_key", "open_buffer", "release", "release_all", "segments",
           "shared_empty", "shm_dir", "sweep_stale"]

#: Names of the segments of this module: ``fgnn-peer-<owner pid>-<random>``.
SEGMENT_STEM = "fgnn-peer"

#: name -> the exported (or shareable) tensor, kept alive until released.
_OWNED: dict[str, torch.Tensor] = {}
#: storage pointer -> segment name of the tensors :func:`shared_empty` made.
_SEGMENT_OF: dict[int, str] = {}
_LOCK = threading.Lock()


class PeerShareError(RuntimeError):
    """A buffer cannot be shared or opened; the message says why."""


@dataclass(frozen=True)
class BufferHandle:
    """What another process needs to open an exported buffer (small; picklable).

    Attributes:
        kind: ``"shm"`` (a shared-memory segment), ``"ipc"`` (CUDA IPC) or ``"empty"`` (no
            rows: nothing to map).
        shape: the tensor's shape.
        dtype: its element type's name (``"float32"``).
        host: :func:`host_key` of the exporter's host.
        pid: the exporter's process id.
        name: the segment's name (``shm``), else this export's key in the exporter.
        ipc: ``ipc``: the arguments of torch's ``rebuild_cuda_tensor``.
        gpu: ``ipc``: the UUID of the exporter's GPU.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: str
    host: str
    pid: int
    name: str = ""
    ipc: tuple = ()
    gpu: str = ""

    @property
    def torch_dtype(self) -> torch.dtype:
        """The element type."""
        return getattr(torch, self.dtype)

    @property
    def numel(self) -> int:
        """Elements of the buffer."""
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer."""
        return self.numel * torch.empty(0, dtype=self.torch_dtype).element_size()


def host_key() -> str:
    """This host's identity (name and boot id): processes with the same key share ``/dev/shm``
    and the host's GPUs."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def shm_dir() -> Optional[str]:
    """``/dev/shm`` when it exists and is writable (Linux), else None."""
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


def _gpu_uuid(device: torch.device) -> str:
    try:
        return gpu.device_uuid(device)
    except (AttributeError, RuntimeError, AssertionError):
        return ""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


# ------------------------------------------------------------------ the owner's side
def shared_empty(shape: tuple[int, ...], dtype: torch.dtype = torch.float32,
                 device: Union[torch.device, str] = "cpu") -> torch.Tensor:
    """An uninitialised tensor that :func:`export_buffer` can share: on CUDA a plain device
    tensor (CUDA IPC shares any), on the CPU a new shared-memory segment of ``/dev/shm`` (its
    space reserved up front: a full ``/dev/shm`` refuses here, not with ``SIGBUS`` later).

    Raises:
        PeerShareError: on the CPU without ``/dev/shm``, or when it has no room.
    """
    dev = torch.device(device)
    if dev.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=dev)
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    root = shm_dir()
    if root is None:
        raise PeerShareError("no writable /dev/shm on this host")
    sweep_stale()
    name = f"{SEGMENT_STEM}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    path = os.path.join(root, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as err:
        os.close(fd)
        os.unlink(path)
        raise PeerShareError(f"/dev/shm has no room for {nbytes} bytes ({err})") from err
    os.close(fd)
    try:
        t = torch.from_file(path, shared=True, size=numel, dtype=dtype).view(shape)
    except RuntimeError:
        os.unlink(path)
        raise
    with _LOCK:
        _OWNED[name] = t
        _SEGMENT_OF[t.untyped_storage().data_ptr()] = name
    return t


def export_buffer(tensor: torch.Tensor) -> BufferHandle:
    """A handle another process on this host opens with :func:`open_buffer` to read
    ``tensor`` in place. The tensor stays referenced here until :func:`release`.

    Raises:
        PeerShareError: for a CPU tensor not made by :func:`shared_empty` (or released), or
            a CUDA tensor torch cannot share.
    """
    t = tensor
    base = dict(shape=tuple(int(s) for s in t.shape), dtype=_dtype_name(t.dtype),
                host=host_key(), pid=os.getpid())
    if t.numel() == 0:
        return BufferHandle("empty", **base)
    if gpu.on_cuda(t):
        try:
            fn, args = gpu.ipc_export(t)
        except RuntimeError as err:
            raise PeerShareError(f"CUDA IPC cannot share this tensor: {err}") from err
        if not gpu.ipc_is_cuda(fn):
            raise PeerShareError(f"torch shares this tensor with {fn.__name__}, not CUDA IPC")
        name = f"ipc-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        with _LOCK:
            _OWNED[name] = t
        return BufferHandle("ipc", name=name, ipc=tuple(args), gpu=_gpu_uuid(gpu.device_of(t)),
                            **base)
    if not gpu.is_host(gpu.device_of(t)):
        raise PeerShareError(f"cannot share a tensor on {t.device}")
    with _LOCK:
        name = _SEGMENT_OF.get(t.untyped_storage().data_ptr())
        whole = name is not None and _OWNED[name].data_ptr() == t.data_ptr() \
            and _OWNED[name].numel() == t.numel()
    if not whole:
        raise PeerShareError("a CPU tensor is shared only as a whole tensor of shared_empty "
                             "(this one is not, or its segment was released)")
    return BufferHandle("shm", name=name, **base)


def release(what: Union[torch.Tensor, BufferHandle, str]) -> None:
    """Stop sharing a tensor of this process (a tensor, its handle or its name): drop the
    reference kept for its readers and remove its segment's name (mappings already open stay
    valid). Unknown or already released: nothing happens."""
    if isinstance(what, torch.Tensor):
        with _LOCK:
            names = [n for n, t in _OWNED.items() if t.data_ptr() == what.data_ptr()]
    else:
        names = [what.name if isinstance(what, BufferHandle) else what]
    for name in names:
        with _LOCK:
            t = _OWNED.pop(name, None)
            if t is not None:
                _SEGMENT_OF.pop(t.untyped_storage().data_ptr(), None)
        if t is not None and name.startswith(SEGMENT_STEM):
            _unlink(name)


def release_all() -> None:
    """:func:`release` every tensor this process shares (at exit, ``atexit``)."""
    with _LOCK:
        names = list(_OWNED)
    for name in names:
        release(name)


atexit.register(release_all)


def discard(handle: BufferHandle) -> None:
    """Remove the segment of ``handle`` by name, from any process on its host (the job's
    driver, after the executors are gone); a handle of another kind or host is ignored."""
    if handle.kind == "shm" and handle.host == host_key():
        _unlink(handle.name)


def _unlink(name: str) -> None:
    root = shm_dir()
    if root is not None:
        try:
            os.unlink(os.path.join(root, name))
        except FileNotFoundError:
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def segments(pid: Optional[int] = None) -> list[str]:
    """Names of this module's segments in ``/dev/shm`` (of owner ``pid`` only, when given)."""
    root = shm_dir()
    if root is None:
        return []
    stem = f"{SEGMENT_STEM}-{pid}-" if pid is not None else f"{SEGMENT_STEM}-"
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, stem + "*")))


def sweep_stale() -> list[str]:
    """Remove the segments whose owner (the pid in the name) is gone; returns their names."""
    gone = []
    for name in segments():
        owner = name[len(SEGMENT_STEM) + 1:].split("-", 1)[0]
        if owner.isdigit() and not _pid_alive(int(owner)):
            _unlink(name)
            gone.append(name)
    return gone


# ------------------------------------------------------------------ the reader's side
def exporter_alive(handle: BufferHandle) -> bool:
    """Whether the process that exported ``handle`` still runs (a CUDA IPC mapping of a dead
    exporter must not be read; a shared-memory mapping stays valid)."""
    return handle.pid == os.getpid() or _pid_alive(handle.pid)


def open_buffer(handle: BufferHandle,
                device: Optional[Union[torch.device, str]] = None) -> torch.Tensor:
    """The exported tensor of ``handle``, mapped into this process (no copy): a shared-memory
    segment on the CPU, a CUDA IPC mapping on ``device`` (default: this process's current
    CUDA device; the tensor is labelled with that device, its memory may be a peer GPU's). In
    the exporting process itself, the exported tensor.

    Raises:
        PeerShareError: with the reason: another host, a released or missing segment, a
            segment smaller than the handle says, no CUDA in this process, CUDA IPC refused.
    """
    h = handle
    if not isinstance(h, BufferHandle):
        raise PeerShareError(f"not a BufferHandle: {type(h).__name__}")
    here = host_key()
    if h.host != here:
        raise PeerShareError(f"exported on host {h.host!r}, this process runs on {here!r}")
    if h.kind == "empty":
        return torch.empty(h.shape, dtype=h.torch_dtype)
    if h.pid == os.getpid():
        with _LOCK:
            t = _OWNED.get(h.name)
        if t is None:
            raise PeerShareError(f"{h.name} was released by this process")
        return t
    if h.kind == "shm":
        return _open_segment(h)
    if h.kind == "ipc":
        return _open_ipc(h, device)
    raise PeerShareError(f"unknown handle kind {h.kind!r}")


def _open_segment(h: BufferHandle) -> torch.Tensor:
    root = shm_dir()
    if root is None:
        raise PeerShareError("no /dev/shm in this process")
    path = os.path.join(root, h.name)
    try:
        size = os.stat(path).st_size
    except FileNotFoundError as err:
        raise PeerShareError(f"segment {h.name} is gone (its owner released it or "
                             f"exited)") from err
    if size < h.nbytes:
        raise PeerShareError(f"segment {h.name} holds {size} bytes, the handle says "
                             f"{h.nbytes}")
    try:
        return torch.from_file(path, shared=True, size=h.numel,
                               dtype=h.torch_dtype).view(h.shape)
    except RuntimeError as err:
        raise PeerShareError(f"cannot map segment {h.name}: {err}") from err


def _open_ipc(h: BufferHandle, device: Optional[Union[torch.device, str]]) -> torch.Tensor:
    if not gpu.is_available():
        raise PeerShareError(f"a CUDA IPC handle, and CUDA is not available in this process "
                             f"(torch {torch.__version__})")
    dev = torch.device(device) if device is not None else None
    if dev is not None and not gpu.is_cuda(dev):
        raise PeerShareError(f"a CUDA IPC handle cannot be mapped on {dev}")
    args = list(h.ipc)
    # storage_device: map it on this device (the exporter's index means another GPU here)
    args[6] = dev.index if dev is not None and dev.index is not None else \
        gpu.current_device()
    try:
        return gpu.ipc_open(args)
    except Exception as err:  # noqa: BLE001 - every refusal becomes a host read, with why
        raise PeerShareError(f"CUDA IPC refused the handle of GPU {h.gpu or '?'} on "
                             f"cuda:{args[6]}: {type(err).__name__}: {err}") from err
