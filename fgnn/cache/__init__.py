"""Feature caching (FGNN §6): hotness maps, cache ratio, multi-device placement, reordering and
the tiered feature store (device cache, peer devices, host), the node-level partition of the
feature rows across a cluster with its traffic by tier, and the GIDS disk tier (CPU buffer,
window-buffered device cache, storage access accumulator).
"""

from fgnn.cache.budget import (CacheBudget, CudaPeakMeter, PeakMeter, TensorAllocationMeter,
                               choose_cache_ratio, measure_step_peak, resident_bytes)
from fgnn.cache.disk import (EVICTION_POLICIES, PAGE_SIZE, AccessAccumulator, CacheStats,
                             CPUBufferedSource, CPUBufferStats, DeviceSoftwareCache,
                             DiskFeatureLoader, DiskFeatureSource, DiskStats, DiskTiers,
                             StorageAccessModel, direct_io_supported, eq2_num_accesses,
                             eq3_steady_time, read_npy_layout)
from fgnn.cache.feature_store import (FeatureCache, FeatureStore, TensorSource, TierStats,
                                      as_source, load_cache, num_cached_rows)
from fgnn.cache.hotness import (POLICIES, compute_hotness, degree_hotness, parse_policy,
                                presample_counts, presc_hotness, random_hotness, wrpr_hotness)
from fgnn.cache.node_counts import ReadCounter, node_access_counts
from fgnn.cache.node_partition import (NODE_PARTITIONS, NodePartition, hash_partition,
                                       hotness_partition, partition_rows, replicate_partition)
from fgnn.cache.node_traffic import TIERS, TrafficMeter
from fgnn.cache.partitioned_source import PartitionedSource, RemoteFetch
from fgnn.cache.placement import (PLACEMENTS, Placement, choose_placement, clique_placement,
                                  expected_cost, hot_order, interleaved_placement,
                                  job_placement, replicate_placement)
from fgnn.cache.reorder import (Reordering, hot_first_permutation, reorder, reorder_dataset,
                                reorder_graph, reorder_rows)
from fgnn.cache.source import FeatureSource

__all__ = [
    "CacheBudget", "CudaPeakMeter", "PeakMeter", "TensorAllocationMeter", "choose_cache_ratio",
    "measure_step_peak", "resident_bytes",
    "FeatureCache", "FeatureStore", "TensorSource", "TierStats", "as_source", "load_cache",
    "num_cached_rows",
    "POLICIES", "compute_hotness", "degree_hotness", "parse_policy", "presample_counts",
    "presc_hotness", "random_hotness", "wrpr_hotness",
    "PLACEMENTS", "Placement", "choose_placement", "clique_placement", "expected_cost",
    "hot_order", "interleaved_placement", "job_placement", "replicate_placement",
    "NODE_PARTITIONS", "NodePartition", "hash_partition", "hotness_partition", "partition_rows",
    "replicate_partition", "ReadCounter", "node_access_counts", "TIERS", "TrafficMeter",
    "PartitionedSource", "RemoteFetch",
    "Reordering", "hot_first_permutation", "reorder", "reorder_dataset", "reorder_graph",
    "reorder_rows",
    "FeatureSource",
    "AccessAccumulator", "CacheStats", "CPUBufferStats", "CPUBufferedSource",
    "DeviceSoftwareCache", "DiskFeatureLoader", "DiskFeatureSource", "DiskStats", "DiskTiers",
    "EVICTION_POLICIES", "PAGE_SIZE", "StorageAccessModel", "eq2_num_accesses",
    "eq3_steady_time", "direct_io_supported", "read_npy_layout",
]
