"""The disk tier (GIDS, Park et al.): one import point for its parts.

* :class:`DiskFeatureSource` -- page-coalesced ``pread`` of rows from ``features.npy`` (§3, Fig. 1).
* :class:`CPUBufferedSource` -- the constant CPU buffer of the hottest rows (§3.3).
* :class:`DeviceSoftwareCache` -- device cache with window buffering, LRU or random eviction
  (§3.4).
* :class:`StorageAccessModel`, :class:`AccessAccumulator` -- the dynamic storage access
  accumulator (§3.2, Eq. 2-3).
* :class:`DiskTiers` -- one extract call through them: device cache -> CPU buffer -> disk.
* :class:`DiskFeatureLoader` -- a loader that samples ahead and extracts through the tiers.
"""

from fgnn.cache.disk_accumulator import (AccessAccumulator, StorageAccessModel, eq2_num_accesses,
                                         eq3_steady_time)
from fgnn.cache.disk_cpu_buffer import CPUBufferedSource, CPUBufferStats
from fgnn.cache.disk_loader import DiskFeatureLoader
from fgnn.cache.disk_source import (PAGE_SIZE, DiskFeatureSource, DiskStats,
                                    direct_io_supported, read_npy_layout)
from fgnn.cache.disk_tiers import DiskTiers
from fgnn.cache.disk_window_cache import EVICTION_POLICIES, CacheStats, DeviceSoftwareCache

__all__ = [
    "AccessAccumulator",
    "CacheStats",
    "CPUBufferStats",
    "CPUBufferedSource",
    "DeviceSoftwareCache",
    "DiskFeatureLoader",
    "DiskFeatureSource",
    "DiskStats",
    "DiskTiers",
    "EVICTION_POLICIES",
    "PAGE_SIZE",
    "StorageAccessModel",
    "eq2_num_accesses",
    "eq3_steady_time",
    "direct_io_supported",
    "read_npy_layout",
]
