"""Smoke test of bench/cache.py on a tiny R-MAT graph."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "cache.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_cache", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("extra", [[], ["--weighted"], ["--walk", "--no-gather"]])
def test_bench_cache_reports_every_policy(tmp_path, capsys, extra):
    out = tmp_path / "r.json"
    rc = _load().main(["--dataset", "rmat:scale=9,edge_factor=8,feat_dim=8,train_frac=0.05,seed=0",
                       "--epochs", "2", "--batch-size", "8", "--cache-ratio", "0.1",
                       "--json", str(out), *extra])
    assert rc == 0
    rep = json.loads(out.read_text())
    pol = rep["policies"]
    assert set(pol) == {"degree", "random", "presc1", "presc2", "wrpr", "optimal"}
    assert pol["optimal"]["fraction_of_optimal"] == pytest.approx(1.0)
    for r in pol.values():
        assert 0.0 <= r["hit_rate"] <= pol["optimal"]["hit_rate"] + 1e-12
        assert len(r["epochs"]) == 2
        e = r["epochs"][0]
        assert e["bytes"]["host"] == e["misses"] * rep["row_bytes"]
    ext = rep["extract"]
    if "--no-gather" in extra:
        assert ext is None
    else:
        assert ext["rows"] > 0 and "1" in ext["threads"]
        assert all(v["gbps"] > 0 for v in ext["threads"].values())
    assert "presc1" in capsys.readouterr().out
