"""Smoke test of bench/disk.py: every configuration through the tiers, nothing substituted."""

from __future__ import annotations

import json

import pytest

from conftest import load_bench
from fgnn.cache.disk_source import direct_io_supported

SPEC = "rmat:scale=10,edge_factor=8,feat_dim=64,train_frac=0.1,seed=0"


def _load():
    return load_bench("disk")


def test_bench_disk_reports_each_config_and_its_io(tmp_path):
    probe = tmp_path / "probe.npy"
    probe.write_bytes(b"\0" * 8192)
    io = "direct" if direct_io_supported(probe) else "buffered"
    out = tmp_path / "r.json"
    assert _load().main(["--dataset", SPEC, "--batch-size", "32", "--fanouts", "4,3",
                         "--configs", "none,lru,window,cpu+window+acc", "--repeats", "1",
                         "--io", io, "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["io"] == io and rep["sampler"] == "KHop" and rep["hotness"] == "wrpr"
    cfg = rep["configs"]
    assert set(cfg) == {"none", "lru", "window", "cpu+window+acc"}
    assert cfg["lru"]["disk_bytes_per_epoch"] < cfg["none"]["disk_bytes_per_epoch"]
    assert cfg["cpu+window+acc"]["cpu_hit_rate"] > 0


def test_bench_disk_fails_loudly_instead_of_substituting(tmp_path):
    with pytest.raises(ValueError, match="bogus"):
        _load().main(["--dataset", SPEC, "--configs", "cpu", "--repeats", "1",
                      "--hotness", "bogus", "--json", str(tmp_path / "r.json")])
