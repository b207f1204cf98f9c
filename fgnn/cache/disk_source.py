"""A disk-backed feature source: page-coalesced ``pread`` of rows from an on-disk ``.npy`` matrix.

This is the storage tier of the GIDS design (Park et al., "Accelerating Sampling and Aggregation
Operations in GNN Frameworks with GPU Initiated Direct Storage Accesses", §3, Fig. 1): the feature
table stays in storage and only the rows a mini-batch needs are read. GIDS reads through BaM with
4 KiB cache lines (§3.2, §4.2); here the host reads the same 4 KiB pages with ``os.preadv`` from a
thread pool, sorted by page and coalesced into runs of consecutive pages, with several runs in
flight. The whole matrix is never loaded: a read of ``M`` rows touches at most the pages those rows
cover.

With ``direct=True`` the file is opened with ``O_DIRECT``: every read goes to the device and the
OS page cache holds none of the file, so the tiers in front of this source (CPU buffer, device
cache) are the only caches and the bytes read are bytes that came from storage. Staging buffers
are then aligned to 4 KiB, as direct I/O requires. A buffered source asks the kernel for no
read-ahead (``POSIX_FADV_RANDOM``), but repeated pages may still come from the page cache.

The file is a standard C-order 2-D ``.npy`` (the ``features.npy`` of the fgnn on-disk format,
``fgnn/data/ondisk.py``). Its header is parsed with :mod:`numpy.lib.format` to find the data offset;
the file size, the header shape and (for :meth:`DiskFeatureSource.from_ondisk`) the manifest's
``num_nodes`` / ``feat_dim`` / ``feat_dtype`` are checked at open time.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from fgnn import gpu

__all__ = ["DiskStats", "DiskFeatureSource", "NpyLayout", "read_npy_layout", "PAGE_SIZE",
           "direct_io_supported"]

#: Storage access granularity: BaM's 4 KiB cache line (GIDS §3.2, §4.2).
PAGE_SIZE = 4096

_NP_TO_TORCH = {np.dtype("float32"): torch.float32, np.dtype("float16"): torch.float16,
                np.dtype("float64"): torch.float64}


@dataclass
class NpyLayout:
    """Where a 2-D ``.npy`` matrix lives inside its file.

    Attributes:
        path: the file.
        shape: ``(N, F)`` from the header.
        dtype: element type from the header.
        data_offset: byte offset of row 0.
        file_size: size of the file in bytes.
    """

    path: str
    shape: tuple[int, int]
    dtype: np.dtype
    data_offset: int
    file_size: int

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(self.shape[1]) * self.dtype.itemsize


def read_npy_layout(path: Union[str, os.PathLike]) -> NpyLayout:
    """Parse a ``.npy`` header and check the file holds exactly the matrix it declares.

    Args:
        path: a ``.npy`` file holding a C-order 2-D array of float16/32/64.

    Returns:
        The matrix layout.

    Raises:
        ValueError: naming the file when it is missing, not an ``.npy``, not 2-D, Fortran-ordered,
            of an unsupported dtype, or truncated / padded (size disagrees with the header).
    """
    path = str(path)
    if not os.path.isfile(path):
        raise ValueError(f"feature file {path!r} does not exist")
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        try:
            major, _minor = np.lib.format.read_magic(f)
            if major == 1:
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif major in (2, 3):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {major}")
        except ValueError as err:
            raise ValueError(f"feature file {path!r} is not a readable .npy file: {err}") from err
        data_offset = f.tell()
    if len(shape) != 2:
        raise ValueError(f"feature file {path!r} holds an array of shape {shape}, expected 2-D "
                         f"(N, F)")
    if fortran and shape[0] > 1 and shape[1] > 1:
        raise ValueError(f"feature file {path!r} is Fortran-ordered; rows must be contiguous "
                         f"(save a C-order array)")
    dtype = np.dtype(dtype)
    if dtype.newbyteorder("=") not in _NP_TO_TORCH or not dtype.isnative:
        raise ValueError(f"feature file {path!r} has dtype {dtype.str}, expected native "
                         f"float16, float32 or float64")
    if data_offset % dtype.itemsize:
        raise ValueError(f"feature file {path!r}: data offset {data_offset} is not a multiple of "
                         f"the element size {dtype.itemsize}")
    expected = data_offset + int(shape[0]) * int(shape[1]) * dtype.itemsize
    if file_size != expected:
        what = "truncated" if file_size < expected else "longer than its header says"
        raise ValueError(f"feature file {path!r} is {what}: {file_size} bytes on disk, header "
                         f"shape {tuple(shape)} {dtype} needs {expected} bytes")
    return NpyLayout(path, (int(shape[0]), int(shape[1])), dtype, int(data_offset), file_size)


@dataclass
class DiskStats:
    """Counters of one :class:`DiskFeatureSource`.

    Attributes:
        bytes_read: bytes returned by ``pread`` calls (whole pages, so >= rows * row bytes).
        read_calls: number of ``pread`` system calls.
        pages: 4 KiB pages read (the storage accesses of GIDS §3.2).
        rows: rows requested through :meth:`DiskFeatureSource.read`.
        requests: calls of :meth:`DiskFeatureSource.read`.
    """

    bytes_read: int = 0
    read_calls: int = 0
    pages: int = 0
    rows: int = 0
    requests: int = 0

    def as_dict(self) -> dict[str, int]:
        """A JSON-serialisable copy."""
        return asdict(self)


class DiskFeatureSource:
    """Rows of an on-disk ``(N, F)`` matrix read on demand (a :class:`FeatureSource`).

    ``read(ids)`` maps every row to the 4 KiB pages it covers, sorts and deduplicates the pages,
    merges consecutive pages into runs of at most ``max_run_pages`` pages, and reads each run with
    one ``os.preadv`` into a staging buffer; runs are spread over a thread pool so several reads
    are in flight (the concurrency GIDS §3.2 asks for). Rows are then gathered from the staging
    buffer with one vectorised index. The staging buffer holds at most ``max_staging_bytes`` of
    pages: a larger read goes in slices of rows sorted by id (a page shared by two slices is read
    by both), so a read costs its rows plus a bounded buffer. With CUDA present the returned rows
    are in pinned memory, ready for an asynchronous host-to-device copy.

    Args:
        path: the ``.npy`` feature file.
        num_threads: reads in flight (thread-pool size); 1 reads inline.
        page_size: storage access granularity in bytes (4096, GIDS §4.2).
        max_run_pages: longest coalesced read, in pages.
        max_staging_bytes: most page bytes staged at once by one read.
        pin_memory: return pinned rows; ``None`` pins when CUDA is available.
        direct: open with ``O_DIRECT`` (bypass the OS page cache); needs ``page_size`` a
            multiple of 4096 and a file system that supports it.

    Raises:
        ValueError: on a bad file (see :func:`read_npy_layout`), bad argument values, or a file
            that cannot be opened for direct I/O.
    """

    def __init__(self, path: Union[str, os.PathLike], *, num_threads: int = 4,
                 page_size: int = PAGE_SIZE, max_run_pages: int = 64,
                 max_staging_bytes: int = 16 << 20, pin_memory: Optional[bool] = None,
                 direct: bool = False) -> None:
        if num_threads < 1:
            raise ValueError(f"DiskFeatureSource: num_threads must be >= 1, got {num_threads}")
        if page_size < 512 or page_size & (page_size - 1):
            raise ValueError(f"DiskFeatureSource: page_size must be a power of two >= 512, got "
                             f"{page_size}")
        if max_run_pages < 1:
            raise ValueError(f"DiskFeatureSource: max_run_pages must be >= 1, got "
                             f"{max_run_pages}")
        self.layout = read_npy_layout(path)
        self.path = self.layout.path
        self.page_size = int(page_size)
        self.max_run_pages = int(max_run_pages)
        # at least one row's pages, so every slice makes progress
        self.max_staging_pages = max(int(max_staging_bytes) // self.page_size,
                                     -(-self.layout.row_bytes // self.page_size) + 1)
        self.num_threads = int(num_threads)
        self.pin = gpu.is_available() if pin_memory is None else bool(pin_memory)
        self.stats = DiskStats()
        self._lock = threading.Lock()
        self.direct = bool(direct)
        self._fd: Optional[int] = None  # set first: close() must work if opening fails
        self._pool: Optional[ThreadPoolExecutor] = None
        self._fd = _open(self.path, self.direct, self.page_size)
        self._pool = (ThreadPoolExecutor(max_workers=self.num_threads,
                                         thread_name_prefix="fgnn-disk")
                      if self.num_threads > 1 else None)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_ondisk(cls, directory: Union[str, os.PathLike], **kwargs) -> "DiskFeatureSource":
        """Open the ``features`` file of an fgnn on-disk dataset directory.

        Checks the manifest (``format``, ``files.features``, ``num_nodes``, ``feat_dim``,
        ``feat_dtype``) against the ``.npy`` header.

        Args:
            directory: dataset directory holding ``manifest.json``.
            **kwargs: forwarded to the constructor.

        Raises:
            ValueError: naming the manifest or feature file on any mismatch.
        """
        manifest_path = Path(directory) / "manifest.json"
        if not manifest_path.is_file():
            raise ValueError(f"on-disk dataset {str(directory)!r}: {manifest_path} not found")
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"manifest {str(manifest_path)!r} is not valid JSON: {err}") from err
        if manifest.get("format") != "fgnn-ondisk":
            raise ValueError(f"manifest {str(manifest_path)!r}: format must be 'fgnn-ondisk', got "
                             f"{manifest.get('format')!r}")
        fname = (manifest.get("files") or {}).get("features")
        if not fname:
            raise ValueError(f"manifest {str(manifest_path)!r}: files.features is missing")
        src = cls(Path(directory) / fname, **kwargs)
        n, f = src.layout.shape
        for field, want, got in (("num_nodes", manifest.get("num_nodes"), n),
                                 ("feat_dim", manifest.get("feat_dim"), f),
                                 ("feat_dtype", manifest.get("feat_dtype"), str(src.layout.dtype))):
            if want is not None and want != got:
                src.close()
                raise ValueError(f"manifest {str(manifest_path)!r}: {field}={want!r} but feature "
                                 f"file {src.path!r} header says {got!r}")
        return src

    # ------------------------------------------------------------------ FeatureSource protocol
    @property
    def num_rows(self) -> int:
        """N."""
        return self.layout.shape[0]

    @property
    def dim(self) -> int:
        """F."""
        return self.layout.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the rows."""
        return _NP_TO_TORCH[self.layout.dtype.newbyteorder("=")]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.layout.row_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of the whole matrix on disk."""
        return self.num_rows * self.row_bytes

    def pages_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Sorted unique page numbers the rows ``ids`` cover (the storage accesses they cost)."""
        ids_np = self._check_ids(ids)
        first, last = self._page_bounds(ids_np)
        return torch.from_numpy(_unique_pages(first, last))

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """Read rows ``ids`` from disk.

        Args:
            ids: ``(M,)`` int64 global row ids, any order, repeats allowed.

        Returns:
            ``(M, F)`` CPU tensor (pinned when CUDA is present), row ``i`` = row ``ids[i]``.

        Raises:
            ValueError: on ids outside ``[0, N)`` or not 1-D integers.
        """
        ids_np = self._check_ids(ids)
        m, f = ids_np.size, self.dim
        out = gpu.empty_host((m, f), self.dtype, self.pin)
        with self._lock:
            self.stats.requests += 1
            self.stats.rows += m
        if m == 0:
            return out
        first, last = self._page_bounds(ids_np)
        if int((last - first + 1).sum()) <= self.max_staging_pages:
            out.copy_(torch.from_numpy(self._read_rows(ids_np, first, last)))
            return out
        order = np.argsort(ids_np, kind="stable")
        first_s, last_s = first[order], last[order]
        # Pages a row adds to the rows before it (sorted ids: only its last page can be shared).
        prev_last = np.concatenate([[-1], last_s[:-1]])
        new_pages = np.maximum(last_s - np.maximum(first_s, prev_last + 1) + 1, 0)
        cum = np.cumsum(new_pages)
        lo = 0
        while lo < m:
            # the slice's first row also re-reads the page it shares with the slice before
            shared = int(last_s[lo] - first_s[lo] + 1 - new_pages[lo])
            base = (cum[lo - 1] if lo else 0) - shared
            hi = max(lo + 1, int(np.searchsorted(cum, base + self.max_staging_pages, "right")))
            sel = order[lo:hi]
            out[torch.from_numpy(sel)] = torch.from_numpy(
                self._read_rows(ids_np[sel], first_s[lo:hi], last_s[lo:hi]))
            lo = hi
        return out

    def _read_rows(self, ids_np: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        """``(len(ids_np), F)`` rows read through one staging buffer of their pages."""
        psz, f = self.page_size, self.dim
        pages = _unique_pages(first, last)
        # Runs of consecutive pages, split at max_run_pages.
        brk = np.flatnonzero(np.diff(pages) != 1) + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [pages.size]])
        if self.max_run_pages < np.max(ends - starts):
            cuts = [np.arange(s, e, self.max_run_pages) for s, e in zip(starts, ends)]
            starts = np.concatenate(cuts)
            ends = np.concatenate([starts[1:], [pages.size]])
        staging = _aligned_empty(pages.size * psz) if self.direct else \
            np.empty(pages.size * psz, dtype=np.uint8)
        run_starts, run_ends = starts.tolist(), ends.tolist()
        run_offsets = (pages[starts] * psz).tolist()
        file_size, fd, mv = self.layout.file_size, self._fd, memoryview(staging)

        def _read(lo: int, hi: int) -> int:
            # One task reads runs [lo, hi): a plain loop of preadv calls, no per-run task overhead.
            got_total = 0
            for s, e, offset in zip(run_starts[lo:hi], run_ends[lo:hi], run_offsets[lo:hi]):
                got = os.preadv(fd, [mv[s * psz:e * psz]], offset)
                if got < min((e - s) * psz, file_size - offset):
                    raise OSError(f"short read of {self.path!r} at offset {offset}: {got} bytes")
                got_total += got
            return got_total

        n_runs = len(run_starts)
        if self._pool is None or n_runs < 2 * self.num_threads:
            total = _read(0, n_runs)
        else:
            bounds = np.linspace(0, n_runs, self.num_threads * 2 + 1).astype(int).tolist()
            futures = [self._pool.submit(_read, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])
                       if hi > lo]
            total = sum(fut.result() for fut in futures)
        with self._lock:
            self.stats.bytes_read += total
            self.stats.read_calls += n_runs
            self.stats.pages += int(pages.size)
        # Byte offset of each row inside the staging buffer: its first page's slot + in-page offset.
        starts_b = self.layout.data_offset + ids_np * self.row_bytes
        slot = np.searchsorted(pages, first)
        elem = (slot * psz + (starts_b - first * psz)) // self.layout.dtype.itemsize
        flat = staging.view(self.layout.dtype)
        # A sliding-window view makes row starts indexable without an (M, F) index array.
        return np.lib.stride_tricks.sliding_window_view(flat, f)[elem]

    # ------------------------------------------------------------------ helpers
    def _check_ids(self, ids: torch.Tensor) -> np.ndarray:
        if not isinstance(ids, torch.Tensor):
            ids = torch.as_tensor(ids)
        if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"DiskFeatureSource.read: ids must be a 1-D integer tensor, got "
                             f"{ids.dtype} of shape {tuple(ids.shape)}")
        ids_np = ids.detach().cpu().to(torch.int64).numpy()
        if ids_np.size and (ids_np.min() < 0 or ids_np.max() >= self.num_rows):
            bad = int(ids_np.min()) if ids_np.min() < 0 else int(ids_np.max())
            raise ValueError(f"DiskFeatureSource.read: row id {bad} outside [0, {self.num_rows}) "
                             f"of {self.path!r}")
        return ids_np

    def _page_bounds(self, ids_np: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = self.layout.data_offset + ids_np * self.row_bytes
        return start // self.page_size, (start + self.row_bytes - 1) // self.page_size

    def reset_stats(self) -> None:
        """Zero the counters."""
        with self._lock:
            self.stats = DiskStats()

    def close(self) -> None:
        """Close the file and stop the thread pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DiskFeatureSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return (f"DiskFeatureSource({self.path!r}, shape={self.layout.shape}, "
                f"dtype={self.layout.dtype}, threads={self.num_threads}, direct={self.direct})")


#: Alignment of buffers, offsets and lengths for ``O_DIRECT`` (covers 512 B and 4 KiB sectors).
DIRECT_ALIGN = 4096


def _open(path: str, direct: bool, page_size: int) -> int:
    """A read-only descriptor of ``path``: ``O_DIRECT`` when ``direct``, else buffered reads
    with read-ahead off (``POSIX_FADV_RANDOM``)."""
    if not direct:
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd
    if not hasattr(os, "O_DIRECT"):
        raise ValueError(f"feature file {path!r}: direct I/O (O_DIRECT) is not available on "
                         f"this platform; read it buffered instead (io='buffered', "
                         f"--disk-io buffered)")
    if page_size % DIRECT_ALIGN:
        raise ValueError(f"DiskFeatureSource: direct I/O needs page_size a multiple of "
                         f"{DIRECT_ALIGN}, got {page_size}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        os.preadv(fd, [memoryview(_aligned_empty(DIRECT_ALIGN))], 0)  # some FS fail on read
    except OSError as err:
        if "fd" in locals():
            os.close(fd)
        raise ValueError(f"feature file {path!r} cannot be read with direct I/O (O_DIRECT: "
                         f"{err.strerror}); its file system may not support it. Read it "
                         f"buffered instead (io='buffered', --disk-io buffered)") from err
    return fd


def _aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised ``uint8`` buffer of ``nbytes`` starting at a DIRECT_ALIGN boundary."""
    raw = np.empty(nbytes + DIRECT_ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % DIRECT_ALIGN
    return raw[off:off + nbytes]


def direct_io_supported(path: Union[str, os.PathLike]) -> bool:
    """Whether ``path`` can be read with ``O_DIRECT`` here (for tests and benches that must
    say which I/O they measured)."""
    try:
        os.close(_open(str(path), True, PAGE_SIZE))
    except ValueError:
        return False
    return True


def _unique_pages(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Sorted unique pages covered by the page ranges ``[first[i], last[i]]`` (vectorised)."""
    span = last - first + 1
    if span.size == 0:
        return np.empty(0, dtype=np.int64)
    if int(span.max()) == 1:
        return np.unique(first)
    rep = np.repeat(first, span)
    offs = np.arange(rep.size, dtype=np.int64) - np.repeat(np.cumsum(span) - span, span)
    return np.unique(rep + offs)
