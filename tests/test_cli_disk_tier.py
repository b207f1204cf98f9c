"""launch.py --feature-tier disk: Trainers read ondisk: features through the GIDS tiers.

Out of core: the feature file is twice the memory limit of every process of the job. The limit is
``RLIMIT_DATA`` (``prlimit --data``), set on launch.py and inherited by Ray's processes and every
executor. It caps a process's private writable memory -- heap, anonymous maps, torch tensors:
where rows copied out of the file would have to live -- while leaving out file pages (the page
cache, reclaimable and shared) and the virtual reservations that make ``RLIMIT_AS`` unusable with
Ray and torch. A control shows the limit binds: loading the file whole fails under it. A cgroup
``memory.max`` would bound the same memory plus the page cache, but needs a writable cgroup tree,
which a CI container does not have; ``RLIMIT_DATA`` needs no privilege.

Reads go through ``O_DIRECT`` where the file system supports it (the tiers are then the only
cache); the test says which I/O it measured. Only the runs under the limit are ``launch.py``
processes; the others call its ``main`` in this process, on the suite's shared Ray cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fgnn.cache.disk_source import direct_io_supported
from fgnn.data import rmat_dataset, save_dataset
from fgnn.data.dataset import Dataset

REPO = Path(__file__).resolve().parents[1]
LIMIT = 768 << 20                       # RLIMIT_DATA of every process of the job
WIDTH = 768                             # float32 features: 3 KiB rows
SCALE = 19                              # 2**19 rows * 3 KiB = 1.5 GiB = 2 * LIMIT


class _WideRows:
    """``(N, WIDTH)`` float32 rows made a chunk at a time (never whole in memory): the R-MAT
    dataset's own features, which plant its labels, then zeros."""

    def __init__(self, small: np.ndarray, width: int) -> None:
        self.small = small
        self.shape, self.ndim, self.dtype = (small.shape[0], width), 2, np.dtype(np.float32)

    def __getitem__(self, rows: slice) -> np.ndarray:
        part = self.small[rows]
        block = np.zeros((part.shape[0], self.shape[1]), dtype=np.float32)
        block[:, :part.shape[1]] = part
        return block


def _launch(args: list[str], limit: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "launch.py", *args]
    if limit is not None:
        cmd = ["prlimit", f"--data={limit}", *cmd]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def _io(path: Path) -> str:
    io = "direct" if direct_io_supported(path) else "buffered"
    print(f"disk I/O measured: {io} ({'O_DIRECT' if io == 'direct' else 'page cache in play'})")
    return io


def _disk_totals(report: dict) -> dict:
    tot: dict = {}
    for e in report["epochs"]:
        for k, v in e["disk"].items():
            tot[k] = tot.get(k, 0) + v
    return tot


@pytest.fixture(scope="module")
def big_ondisk(tmp_path_factory):
    # a milder skew than R-MAT's default (a=0.57): the driver's full-neighbour evaluation
    # gathers whole 2-hop neighbourhoods in memory, and hubs would make those chunks large
    base = rmat_dataset(scale=SCALE, edge_factor=4, a=0.45, b=0.1833, c=0.1833, feat_dim=8,
                        num_classes=4, train_frac=0.004, val_frac=0.001, test_frac=0.001, seed=0,
                        weighted=False)
    wide = Dataset(base.name, base.graph, _WideRows(base.features.numpy(), WIDTH), base.labels,
                   base.train_idx, base.val_idx, base.test_idx, base.num_classes)
    path = save_dataset(wide, tmp_path_factory.mktemp("big") / "ds")
    yield path
    (path / "features.npy").unlink()


@pytest.mark.slow
def test_features_twice_the_memory_limit_train_through_the_disk_tier(big_ondisk, tmp_path):
    feats = big_ondisk / "features.npy"
    assert feats.stat().st_size >= 2 * LIMIT
    # control: under the same limit, a process that loads the file whole runs out of memory
    ctl = subprocess.run(["prlimit", f"--data={LIMIT}", sys.executable, "-c",
                          f"import numpy as np; np.fromfile({str(feats)!r}, dtype=np.uint8)"],
                         capture_output=True, text=True, timeout=300)
    assert ctl.returncode != 0 and "MemoryError" in ctl.stderr, ctl.stderr[-2000:]
    io = _io(feats)
    common = ["--dataset", f"ondisk:{big_ondisk}", "--model", "sage", "--hidden", "32",
              "--fanouts", "4,4", "--batch-size", "128", "--epochs", "2", "--lr", "0.01",
              "--devices", "2", "--samplers", "1", "--no-switching", "--cache-policy", "degree",
              "--cache-ratio", "0.02", "--feature-tier", "disk", "--window", "8",
              "--disk-io", io, "--dashboard-host", "off", "--no-progress"]
    reports = {}
    for cache in ("window", "lru"):
        out = tmp_path / f"{cache}.json"
        proc = _launch([*common, "--disk-cache", cache, "--report", str(out)], limit=LIMIT)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
        reports[cache] = json.loads(out.read_text())
    win, lru = reports["window"], reports["lru"]
    assert win["allocation"]["disk"]["file_bytes"] >= 2 * LIMIT
    assert win["allocation"]["disk"]["io"] == io
    assert win["final"]["train_acc"] > 0.4  # it trains (4 classes)
    w, ll = _disk_totals(win), _disk_totals(lru)
    for t in (w, ll):
        assert t["device_rows"] + t["cpu_rows"] + t["storage_rows"] == t["node_accesses"]
        assert t["bytes_read"] >= t["storage_rows"] * WIDTH * 4 // 2  # whole pages were read
    # the same mini-batches in the same order; window buffering reads fewer bytes than LRU
    assert w["node_accesses"] == ll["node_accesses"]
    print(f"disk bytes over 2 epochs: window {w['bytes_read']}, lru {ll['bytes_read']}, "
          f"ratio {w['bytes_read'] / ll['bytes_read']:.3f}; device hits {w['device_rows']} vs "
          f"{ll['device_rows']}")
    assert w["bytes_read"] < ll["bytes_read"]


@pytest.fixture(scope="module")
def small_ondisk(tmp_path_factory):
    ds = rmat_dataset(scale=11, edge_factor=8, feat_dim=256, num_classes=4, train_frac=0.3,
                      seed=0)
    return save_dataset(ds, tmp_path_factory.mktemp("small") / "ds")


def test_report_gives_disk_bytes_and_hits_per_tier(small_ondisk, ray_cluster, tmp_path):
    from fgnn.cli import main

    out = tmp_path / "r.json"
    io = _io(small_ondisk / "features.npy")
    # launch.py's main in this process (no memory limit to set): the job joins the shared cluster
    assert main(["--dataset", f"ondisk:{small_ondisk}", "--model", "sage", "--hidden", "16",
                 "--fanouts", "5,5", "--batch-size", "64", "--epochs", "3", "--devices", "2",
                 "--samplers", "1", "--no-switching", "--cache-ratio", "0.05",
                 "--feature-tier", "disk", "--cpu-buffer", "0.05", "--window", "4",
                 "--accumulator", "--disk-io", io, "--dashboard-host", "off",
                 "--no-progress", "--report", str(out)]) == 0
    rep = json.loads(out.read_text())
    alloc = rep["allocation"]["disk"]
    assert (alloc["cache"], alloc["window"], alloc["accumulator"], alloc["io"]) == \
        ("window", 4, True, io)
    assert alloc["cpu_buffer_rows"] == int(0.05 * 2048) and alloc["cache_rows"] > 0
    row = alloc["row_bytes"]
    for e in rep["epochs"]:
        d = e["disk"]
        assert d["batches"] == e["batches"]
        assert d["device_rows"] + d["cpu_rows"] + d["storage_rows"] == d["node_accesses"]
        assert d["storage_rows"] > 0 and d["bytes_read"] > 0
        # the warm-up epoch runs before the hotness is known: no CPU buffer, no device cache
        assert (d["cpu_rows"] == 0 and d["device_rows"] == 0) if e["warmup"] else d["cpu_rows"] > 0
        assert d["groups"] <= d["batches"]
        # rows that cross to the device: CPU buffer and storage (and the samples); hits: the
        # device cache
        assert e["bytes_host_to_device"] == \
            (d["cpu_rows"] + d["storage_rows"]) * row + e["sample_bytes"]
        assert e["hit_rate"] == pytest.approx(d["device_rows"] / d["node_accesses"])
    assert [e["warmup"] for e in rep["epochs"]] == [True, False, False]
    assert sum(e["disk"]["device_rows"] for e in rep["epochs"]) > 0


def test_disk_tier_needs_an_ondisk_dataset(cli_error):
    line = cli_error(["--feature-tier", "disk"])  # exit 2, one line on stderr
    assert "--feature-tier" in line and "ondisk" in line, line


@pytest.mark.parametrize("argv, flag", [
    (["--feature-tier", "disk", "--cpu-buffer", "0.1", "--cache-policy", "none"], "--cpu-buffer"),
    (["--cpu-buffer", "1.5"], "--cpu-buffer"),
    (["--window", "-1"], "--window"),
    (["--disk-io", "mmap"], "--disk-io"),
])
def test_bad_disk_tier_flags_exit_2_with_one_line(argv, flag, capsys):
    from fgnn.cli import main

    with pytest.raises(SystemExit) as info:
        main([*argv, "--dataset", "ondisk:/nonexistent"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err
