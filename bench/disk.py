"""Disk tier (GIDS §3.2-3.4): bytes read from disk and extract time per technique, side by side.

Example::

    python bench/disk.py \\
        --dataset rmat:scale=17,edge_factor=8,feat_dim=256,train_frac=0.05,seed=0 \\
        --cpu-buffer 0.1 --window 8 --cache-ratio 0.05 --json out.json

The dataset is saved to a temporary on-disk directory first unless the spec is ``ondisk:DIR``;
features are then only ever read from ``features.npy`` with page-coalesced ``pread``. Every
configuration runs the same mini-batches (same seeds, same sampler generator state):

==============  =============================================================================
none            every input row read from disk
lru             device cache of ``--cache-ratio`` of the rows, LRU eviction
random          the same cache, random eviction (BaM's default)
window          the same cache with window buffering, depth ``--window`` (§3.4)
cpu             constant CPU buffer of ``--cpu-buffer`` of the rows by hotness (§3.3)
cpu+X           CPU buffer and the cache X (the cache admits only rows read from storage)
cpu+window+acc  + the dynamic storage access accumulator (§3.2, Eq. 2-3)
==============  =============================================================================

Storage reads bypass the OS page cache: the file is opened with ``O_DIRECT`` (``--io direct``,
the default), so every byte counted was read from the device and the tiers are the only cache;
a file system without direct I/O stops the bench with a message (nothing is substituted). With
``--io buffered`` the file's pages are dropped from the page cache before each configuration
(``posix_fadvise(DONTNEED)``) unless ``--warm``, and read-ahead is off, but pages read twice
within a configuration may come from the page cache (times are then optimistic; byte counts are
what the tiers asked storage for either way). The sampler (fgnn ``KHop``) and the CPU buffer's
hotness (``--hotness``, weighted reverse PageRank by default, as in GIDS §3.3) are exactly the ones
named; any failure stops the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.cache.disk_accumulator import AccessAccumulator, StorageAccessModel  # noqa: E402
from fgnn.cache.disk_cpu_buffer import CPUBufferedSource  # noqa: E402
from fgnn.cache.disk_loader import DiskFeatureLoader  # noqa: E402
from fgnn.cache.disk_source import DiskFeatureSource  # noqa: E402
from fgnn.cache.disk_window_cache import DeviceSoftwareCache  # noqa: E402
from fgnn.cache.hotness import compute_hotness  # noqa: E402
from fgnn.data import load_dataset, save_dataset  # noqa: E402
from fgnn.graph import CSRGraph  # noqa: E402
from fgnn.sampling import KHop  # noqa: E402
from fgnn.sampling.base import Sampler  # noqa: E402

CONFIGS = ("none", "lru", "random", "window", "cpu", "cpu+lru", "cpu+random", "cpu+window",
           "cpu+window+acc")


def _drop_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run(args: argparse.Namespace) -> dict:
    """Run every configuration; return the JSON report."""
    tmp = None
    if args.dataset.startswith("ondisk:"):
        directory = Path(args.dataset.split(":", 1)[1])
        ds = load_dataset(args.dataset)
    else:
        ds = load_dataset(args.dataset)
        tmp = tempfile.TemporaryDirectory(prefix="fgnn-disk-bench-")
        directory = Path(tmp.name) / "ds"
        save_dataset(ds, directory)
    graph, train_idx = ds.graph, ds.train_idx
    fanouts = [int(f) for f in args.fanouts.split(",")]
    sampler, sampler_name = KHop(fanouts), "KHop"
    hot, hot_name = compute_hotness(args.hotness, graph, train_idx).float(), args.hotness
    perm = torch.randperm(train_idx.numel(), generator=torch.Generator().manual_seed(args.seed))
    batches = list(train_idx[perm].split(args.batch_size)) * args.epochs
    n = graph.num_nodes
    report = {"dataset": args.dataset, "num_nodes": n, "sampler": sampler_name,
              "hotness": hot_name, "fanouts": fanouts, "batch_size": args.batch_size,
              "epochs": args.epochs, "cpu_buffer": args.cpu_buffer, "window": args.window,
              "cache_ratio": args.cache_ratio, "threads": args.threads, "io": args.io,
              "page_cache": ("bypassed (O_DIRECT)" if args.io == "direct" else
                             "dropped before each config (POSIX_FADV_DONTNEED)" if not args.warm
                             else "warm"),
              "configs": {}}
    for name in args.configs.split(","):
        if name not in CONFIGS:
            raise ValueError(f"bench/disk.py: --configs holds {name!r}, expected {CONFIGS}")
        times, walls = [], []
        for _ in range(args.repeats):  # bytes are deterministic; times are noisy
            rep, disk, wall = _run_config(name, directory, graph, sampler, batches, hot, args)
            times.append(rep["extract_s"] / args.epochs)
            walls.append(wall)
        times.sort()
        rep.update(wall_s=sorted(walls)[len(walls) // 2],
                   disk_bytes_per_epoch=disk.stats.bytes_read / args.epochs,
                   disk_reads_per_epoch=disk.stats.read_calls / args.epochs,
                   extract_s_per_epoch=times[len(times) // 2], extract_s_all=times,
                   n_access=(StorageAccessModel().required_accesses() if name.endswith("acc")
                             else None))
        report["configs"][name] = rep
        print(f"{name:>15}: disk {rep['disk_bytes_per_epoch'] / 2**20:9.1f} MiB/epoch  "
              f"reads {rep['disk_reads_per_epoch']:9.0f}  extract {rep['extract_s_per_epoch']:7.3f}"
              f" s  device hit {rep['device_hit_rate']:.3f}  cpu hit "
              f"{rep['cpu_hit_rate']:.3f}  groups {rep['groups']}", flush=True)
    _ratios(report)
    if tmp is not None:
        tmp.cleanup()
    return report


#: (config, baseline) pairs whose ratios are printed: each technique against what it adds to.
_PAIRS = (("lru", "none"), ("random", "none"), ("window", "none"), ("window", "lru"),
          ("window", "random"), ("cpu", "none"), ("cpu+lru", "cpu"), ("cpu+window", "cpu+lru"),
          ("cpu+window", "cpu+random"), ("cpu+window+acc", "cpu+window"),
          ("cpu+window+acc", "none"))


def _run_config(name: str, directory: Path, graph: CSRGraph, sampler: Sampler,
                batches: list[torch.Tensor], hot: torch.Tensor, args: argparse.Namespace):
    """One epoch set through fresh tiers of configuration ``name``; (report, disk, wall)."""
    n = graph.num_nodes
    disk = DiskFeatureSource.from_ondisk(directory, num_threads=args.threads,
                                         direct=args.io == "direct")
    if args.io == "buffered" and not args.warm:
        _drop_page_cache(disk.path)
    parts = set(name.split("+"))
    source = disk
    if "cpu" in parts:
        source = CPUBufferedSource(disk, hot, ratio=args.cpu_buffer)
        disk.reset_stats()  # the one-time fill is preprocessing, not per-epoch traffic
    cache = None
    policy = next((p for p in ("lru", "random", "window") if p in parts), None)
    if policy is not None:
        cache = DeviceSoftwareCache(n, int(args.cache_ratio * n), disk.dim, disk.dtype,
                                    policy=policy, seed=args.seed)
    window = args.window if policy == "window" else 0
    acc = (AccessAccumulator.from_model(StorageAccessModel(), disk.row_bytes, disk.page_size)
           if "acc" in parts else None)
    loader = DiskFeatureLoader(sampler, graph, batches, source=source, cache=cache,
                               window=window, accumulator=acc, max_merge=args.max_merge,
                               generator=torch.Generator().manual_seed(args.seed))
    t0 = time.perf_counter()
    for _sample, _feats in loader:
        pass
    wall = time.perf_counter() - t0
    disk.close()
    return loader.report(), disk, wall


def _ratios(report: dict) -> None:
    cfg = report["configs"]
    report["ratios"] = {}
    print("\nratios (config / baseline): disk bytes, disk read calls, extract time")
    for name, base in _PAIRS:
        if name not in cfg or base not in cfg:
            continue
        a, b = cfg[name], cfg[base]
        r = {k: a[k] / b[k] if b[k] else float("nan")
             for k in ("disk_bytes_per_epoch", "disk_reads_per_epoch", "extract_s_per_epoch")}
        report["ratios"][f"{name} / {base}"] = r
        print(f"{name:>15} / {base:<11} bytes x{r['disk_bytes_per_epoch']:.3f}  reads "
              f"x{r['disk_reads_per_epoch']:.3f}  time x{r['extract_s_per_epoch']:.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="rmat:scale=16,edge_factor=8,feat_dim=256,"
                                        "train_frac=0.05,seed=0")
    p.add_argument("--cpu-buffer", type=float, default=0.1, help="share of rows in the CPU buffer")
    p.add_argument("--window", type=int, default=8, help="window depth W")
    p.add_argument("--cache-ratio", type=float, default=0.05, help="device cache share of rows")
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--max-merge", type=int, default=16)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--repeats", type=int, default=3, help="runs per config (median time)")
    p.add_argument("--io", choices=("direct", "buffered"), default="direct",
                   help="direct: O_DIRECT reads that bypass the OS page cache (default); "
                        "buffered: page cache dropped before each config unless --warm")
    p.add_argument("--warm", action="store_true",
                   help="with --io buffered: keep the OS page cache (no DONTNEED)")
    p.add_argument("--hotness", default="wrpr",
                   help="hotness policy of the CPU buffer (default wrpr, GIDS §3.3)")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads (1 avoids OpenMP spinning on a shared host)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for name in ("cpu_buffer", "cache_ratio"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(args, name)}")
    if args.window < 0:
        p.error(f"--window must be >= 0, got {args.window}")
    if args.warm and args.io == "direct":
        p.error("--warm only applies to --io buffered (direct I/O has no page cache to keep)")
    torch.set_num_threads(args.torch_threads)
    report = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
