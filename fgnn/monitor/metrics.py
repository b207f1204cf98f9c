"""Ray custom metrics for the executors: queue depth, batches/s, stage seconds, cache traffic.

Each executor (sampler, trainer, standby trainer) owns one :class:`RuntimeMetrics` tagged with its
``role`` and ``device``; the numbers reach the Ray dashboard's Metrics view (and Prometheus) through
``ray.util.metrics``. Outside Ray (``ray.is_initialized()`` false, unit tests, in-process debugging)
every call is a cheap no-op apart from the local running totals in :meth:`RuntimeMetrics.snapshot`.

Exported series (all tagged ``role``, ``device``; stage series also ``stage``). Ray exports every
``ray.util.metrics`` series with its ``ray_`` prefix, so Prometheus (and the fgnn Grafana
dashboard, :mod:`fgnn.monitor.dashboard`) knows ``fgnn_queue_depth`` as ``ray_fgnn_queue_depth``:

========================================  =========  ============================================
``fgnn_batches_total``                    Counter    mini-batches finished
``fgnn_batch_seconds``                    Histogram  seconds per mini-batch
``fgnn_batches_per_second``               Gauge      recent throughput of the executor
``fgnn_stage_seconds_total``              Counter    seconds per stage (sample, mark, copy,
                                                     extract, train; FGNN Table 5)
``fgnn_queue_depth``                      Gauge      mini-batches waiting in the global queue
``fgnn_cache_hits_total``                 Counter    feature rows served from the device cache
``fgnn_cache_misses_total``               Counter    feature rows gathered from host / disk
``fgnn_cache_hit_rate``                   Gauge      hits / (hits + misses), cumulative
``fgnn_bytes_host_to_device_total``       Counter    feature bytes copied host → device
========================================  =========  ============================================
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["RuntimeMetrics", "STAGES", "METRIC_NAMES", "EXPORT_PREFIX"]

#: Name Prometheus knows a series by: Ray's prefix + the name created here.
EXPORT_PREFIX = "ray_"

#: Stages accepted by :meth:`RuntimeMetrics.stage_seconds` (Sample = S+M+C, Extract, Train).
STAGES = ("sample", "mark", "copy", "extract", "train")

METRIC_NAMES = (
    "fgnn_batches_total",
    "fgnn_batch_seconds",
    "fgnn_batches_per_second",
    "fgnn_stage_seconds_total",
    "fgnn_queue_depth",
    "fgnn_cache_hits_total",
    "fgnn_cache_misses_total",
    "fgnn_cache_hit_rate",
    "fgnn_bytes_host_to_device_total",
)

_TAGS = ("role", "device")
_BATCH_BOUNDARIES = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
#: Throughput gauge is refreshed after at least this many seconds of batches.
_RATE_WINDOW_S = 1.0

_lock = threading.Lock()
_series: dict[str, Any] | None = None


def _ray_series() -> dict[str, Any] | None:
    """The process-wide Ray metric objects, created once; ``None`` outside Ray."""
    global _series
    try:
        import ray
        if not ray.is_initialized():
            return None
    except Exception:  # pragma: no cover - ray always installed, but never fail a training run
        return None
    with _lock:
        if _series is None:
            from ray.util.metrics import Counter, Gauge, Histogram
            _series = {
                "batches": Counter("fgnn_batches_total", "Mini-batches finished", _TAGS),
                "batch_s": Histogram("fgnn_batch_seconds", "Seconds per mini-batch",
                                     _BATCH_BOUNDARIES, _TAGS),
                "rate": Gauge("fgnn_batches_per_second", "Recent mini-batches per second", _TAGS),
                "stage": Counter("fgnn_stage_seconds_total",
                                 "Seconds spent per stage (sample, mark, copy, extract, train)",
                                 _TAGS + ("stage",)),
                "queue": Gauge("fgnn_queue_depth", "Mini-batches waiting in the global queue",
                               _TAGS),
                "hits": Counter("fgnn_cache_hits_total", "Feature rows served from the cache",
                                _TAGS),
                "misses": Counter("fgnn_cache_misses_total",
                                  "Feature rows gathered from host or disk", _TAGS),
                "hit_rate": Gauge("fgnn_cache_hit_rate", "Cumulative cache hit rate", _TAGS),
                "bytes": Counter("fgnn_bytes_host_to_device_total",
                                 "Feature bytes copied host to device", _TAGS),
            }
        return _series


class RuntimeMetrics:
    """Metrics of one executor, exported through ``ray.util.metrics``.

    Safe to construct and call anywhere: outside Ray it only keeps local totals. A failure inside
    Ray's metric machinery disables export for this instance instead of failing training.

    Args:
        role: executor role, e.g. ``sampler``, ``trainer``, ``standby``.
        device: device label, e.g. ``cuda:0`` or ``logical:3``.

    Example:
        >>> m = RuntimeMetrics("trainer", "cuda:1")
        >>> m.stage_seconds("extract", 0.012)
        >>> m.cache(hits=900, misses=100, bytes_host_to_device=100 * 600 * 4)
        >>> m.batch_done(0.05)
    """

    def __init__(self, role: str, device: str) -> None:
        if not isinstance(role, str) or not role:
            raise ValueError(f"RuntimeMetrics: role must be a non-empty str. Received role={role!r}.")
        self.role = role
        self.device = str(device)
        self._tags = {"role": self.role, "device": self.device}
        self._export = True
        self._batches = 0
        self._batch_seconds = 0.0
        self._stages = {s: 0.0 for s in STAGES}
        self._hits = 0
        self._misses = 0
        self._bytes = 0
        self._queue_depth = 0
        self._rate = 0.0
        self._win_start: float | None = None
        self._win_batches = 0

    # ------------------------------------------------------------------ recording
    def batch_done(self, seconds: float) -> None:
        """Record one finished mini-batch that took ``seconds``."""
        seconds = max(float(seconds), 0.0)
        self._batches += 1
        self._batch_seconds += seconds
        now = time.monotonic()
        if self._win_start is None:
            self._win_start = now - seconds
        self._win_batches += 1
        elapsed = now - self._win_start
        rate_ready = elapsed >= _RATE_WINDOW_S
        if rate_ready:
            self._rate = self._win_batches / elapsed
            self._win_start, self._win_batches = now, 0
        self._emit("batches", "inc", 1)
        self._emit("batch_s", "observe", seconds)
        if rate_ready:
            self._emit("rate", "set", self._rate)

    def stage_seconds(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` to ``stage`` (one of :data:`STAGES`)."""
        if stage not in self._stages:
            raise ValueError(f"RuntimeMetrics.stage_seconds: stage must be one of "
                             f"{', '.join(STAGES)}. Received stage={stage!r}.")
        seconds = float(seconds)
        if seconds <= 0:
            return
        self._stages[stage] += seconds
        self._emit("stage", "inc", seconds, {"stage": stage})

    def queue_depth(self, depth: int) -> None:
        """Set the current depth of the global queue as seen by this executor."""
        self._queue_depth = int(depth)
        self._emit("queue", "set", self._queue_depth)

    def cache(self, hits: int, misses: int, bytes_host_to_device: int) -> None:
        """Add one mini-batch's cache lookups and host→device feature bytes."""
        hits, misses, nbytes = int(hits), int(misses), int(bytes_host_to_device)
        self._hits += hits
        self._misses += misses
        self._bytes += nbytes
        if hits > 0:
            self._emit("hits", "inc", hits)
        if misses > 0:
            self._emit("misses", "inc", misses)
        if nbytes > 0:
            self._emit("bytes", "inc", nbytes)
        if self._hits + self._misses > 0:
            self._emit("hit_rate", "set", self.hit_rate)

    # ------------------------------------------------------------------ reading
    @property
    def hit_rate(self) -> float:
        """Cumulative hits / (hits + misses); 0.0 before any lookup."""
        total = self._hits + self._misses
        return self._hits / total if total else 0.0

    def snapshot(self) -> dict[str, Any]:
        """Local running totals (recorded even outside Ray)."""
        return {
            "role": self.role,
            "device": self.device,
            "batches": self._batches,
            "batch_seconds": self._batch_seconds,
            "batches_per_second": self._rate,
            "stage_seconds": dict(self._stages),
            "queue_depth": self._queue_depth,
            "hits": self._hits,
            "misses": self._misses,
            "hit_rate": self.hit_rate,
            "bytes_host_to_device": self._bytes,
        }

    @property
    def exporting(self) -> bool:
        """Whether records currently reach Ray (inside Ray and no export failure so far)."""
        return self._export and _ray_series() is not None

    # ------------------------------------------------------------------ internals
    def _emit(self, key: str, method: str, value: float,
              extra: dict[str, str] | None = None) -> None:
        if not self._export:
            return
        series = _ray_series()
        if series is None:
            return
        tags = {**self._tags, **extra} if extra else self._tags
        try:
            getattr(series[key], method)(value, tags=tags)
        except Exception:  # never let monitoring break training
            self._export = False

    def __repr__(self) -> str:
        return f"RuntimeMetrics(role={self.role!r}, device={self.device!r})"
