"""Smoke test of bench/sampling.py on a tiny R-MAT graph (no PyG)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_bench_sampling_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_sampling", REPO / "bench" / "sampling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "s.json"
    res = mod.main(["--dataset", "rmat:scale=9,edge_factor=4,feat_dim=1", "--fanouts", "3,2",
                    "--batch-size", "64", "--num-seeds", "256", "--rounds", "1", "--no-pyg",
                    "--threads", "1", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["fgnn"]["edges"] == res["fgnn"]["edges"] > 0
    assert saved["pyg"] is None and saved["ratio_fgnn_over_pyg"] is None
    assert saved["random_reads_per_s"] > 0 and saved["fanouts"] == [3, 2]
    assert saved["threads"] == 1
    counts = saved["dispatch"]
    assert counts["hops"] == 2 and 0 < counts["syncs"] <= 2 * 2 + 1 and counts["ops"] > 0
    assert saved["fanout_1000_hop_s"] > 0 and saved["fanout_1000_hop_over_budget"] > 0
    huge = saved["huge_fanout"]
    assert huge["fanouts"] == [100_000, 100_000] and huge["seeds"] == 140
    assert huge["edges"] > 0 and huge["seconds"] > 0 and saved["huge_fanout_rate_over_fgnn"] > 0
    # issue 28: the CPU twin at 1 and 2 threads, the CUDA twin on the CPU, both twins' counts
    assert set(saved["fgnn_thread_curve"]) == {"1", "2"}
    assert saved["fgnn_thread_curve"]["1"]["edges"] == saved["fgnn"]["edges"]
    assert saved["fgnn_cuda_twin"]["edges"] > 0 and saved["cpu_twin_over_cuda_twin"] > 0
    assert saved["cpu_twin_over_cuda_twin_cpu_s"] > 0
    assert saved["fgnn_vectorised_twin"]["edges"] > 0 and saved["fgnn_over_vectorised_twin"] > 0
    assert saved["fgnn_kernel"] in ("compiled", "cpu")
    assert saved["dispatch_cpu_twin"]["hops"] == 2 and saved["dispatch_cpu_twin"]["ops"] > 0
    # the weighted selection alone, compiled twin against the vectorised one (same edge count)
    ws = saved["weighted_selection"]
    if saved["weighted_selection_skipped"] is None:
        assert ws["hops"] == 2 * 4 and ws["compiled_over_vectorised"] > 0
        assert ws["compiled"]["edges"] == ws["vectorised"]["edges"] > 0
    else:
        assert ws is None and "numba" in saved["weighted_selection_skipped"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sampling", REPO / "bench" / "sampling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["weighted", "walk", "locality"])
def test_bench_sampling_measures_every_fgnn_sampler(tmp_path, kind):
    res = _bench().main(["--dataset", "rmat:scale=9,edge_factor=4,feat_dim=1", "--fanouts", "3,2",
                         "--batch-size", "64", "--num-seeds", "256", "--rounds", "1",
                         "--no-pyg", "--sampler", kind])
    assert res["sampler"] == kind and res["fgnn"]["edges"] > 0 and res["pyg"] is None
    assert {"weighted": "KHop", "walk": "RandomWalk",
            "locality": "LocalityAwareKHop"}[kind] in res["sampler_repr"]


def test_bench_sampling_stops_when_pyg_is_missing_instead_of_leaving_it_out(monkeypatch):
    mod = _bench()
    monkeypatch.setattr(mod, "pyg_backend", lambda: (None, "no backend here"))
    with pytest.raises(SystemExit) as info:
        mod.main(["--dataset", "rmat:scale=8,edge_factor=4,feat_dim=1", "--num-seeds", "64",
                  "--batch-size", "32", "--rounds", "1"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):  # PyG compares k-hop only
        mod.main(["--dataset", "rmat:scale=8,edge_factor=4,feat_dim=1", "--sampler", "walk"])
