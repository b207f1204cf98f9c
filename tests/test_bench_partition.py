"""Smoke test of bench/partition.py (node-level feature partitions) on a tiny R-MAT graph."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "partition.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_partition", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_partition_reports_every_strategy(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = _load().main(["--dataset", "rmat:scale=10,edge_factor=8,feat_dim=8,train_frac=0.1,seed=0",
                       "--nodes", "2,3", "--batch-size", "24", "--fanouts", "5,5", "--replicate-ratio", "0.05",
                       "--cache-ratio", "0.01", "--json", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    n, row = rep["num_nodes"], rep["row_bytes"]
    assert set(rep["cases"]) == {"M=2 uniform", "M=2 partitioned", "M=3 uniform",
                                 "M=3 partitioned"}
    for case in rep["cases"].values():
        s, m = case["strategies"], case["num_nodes"]
        assert set(s) == {"hotness", "hash", "hash+hot", "replicate"}
        # every strategy sees the same rows; only their tier differs
        totals = {k: sum(v["rows_per_epoch"].values()) for k, v in s.items()}
        assert len(set(totals.values())) == 1
        assert len({v["rows_per_epoch"]["device"] for v in s.values()}) == 1
        assert s["replicate"]["remote_bytes_per_epoch"] == 0
        assert s["hash"]["remote_vs_hash"] == pytest.approx(1.0)
        assert s["replicate"]["host_bytes"] == [n * row] * m
        for k in ("hotness", "hash", "hash+hot"):  # within N/M plus the replicated rows
            assert max(s[k]["host_bytes"]) <= -(-n // m) * row + case["replicated_rows"] * row
        assert sum(s["hash"]["owned_rows"]) == n
        ep = s["hotness"]["epochs"][0]
        assert len(ep) == m and all(sum(nd["remote_from"]) == nd["rows"]["remote"] for nd in ep)
    assert "vs hash" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--seeds", "metis"], ["--replicate-ratio", "2"],
                                 ["--locality-scale", "0.5"],
                                 ["--nodes", "0"]])
def test_bench_partition_rejects_bad_flags(bad):
    with pytest.raises(SystemExit):
        _load().main(["--dataset", "rmat:scale=8", *bad])


def test_bench_partition_locality_sampling_samples_per_layout(tmp_path):
    out = tmp_path / "r.json"
    rc = _load().main(["--dataset", "rmat:scale=8,edge_factor=8,feat_dim=8,train_frac=0.1,seed=0",
                       "--nodes", "2", "--seeds", "partitioned", "--batch-size", "24",
                       "--fanouts", "5,5", "--epochs", "1", "--locality-scale", "4",
                       "--json", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["locality_scale"] == 4
    s = rep["cases"]["M=2 partitioned"]["strategies"]
    assert s["replicate"]["remote_bytes_per_epoch"] == 0
    assert s["hash"]["remote_vs_hash"] == pytest.approx(1.0)
    for v in s.values():
        assert len(v["epochs"]) == 1 and sum(v["rows_per_epoch"].values()) > 0


def test_the_bench_and_the_runtime_give_the_planner_the_same_input(monkeypatch):
    """bench/partition.py's PreSC counts (here its partitioned-seeds mode) reach the planner as
    the runtime's warm-up reads do: per-Trainer counts summed per node over the epochs, the
    replicated rows the hottest of their sum (PreSC's visits) -- the same partition."""
    import argparse

    import torch

    from fgnn.cache import partition_rows
    from fgnn.data import load_dataset
    from fgnn.runtime.partition import FeaturePartitioning
    from fgnn.sampling import KHop

    mod = _load()
    seen = {}
    real = mod.node_access_counts

    def spy(reads, node_of, num_nodes, num_rows, epochs):
        seen.update(reads=dict(reads), node_of=dict(node_of), epochs=epochs)
        return real(reads, node_of, num_nodes, num_rows, epochs)

    monkeypatch.setattr(mod, "node_access_counts", spy)
    ds = load_dataset("rmat:scale=9,edge_factor=8,feat_dim=4,train_frac=0.2,seed=0")
    args = argparse.Namespace(presc_epochs=2, trainers_per_node=2, batch_size=16)
    train, m, n = ds.train_idx.long(), 2, ds.num_nodes
    parts = list(torch.tensor_split(train, m))
    bench = mod.presc_counts(ds.graph, train, KHop((4, 4)), args, m, "partitioned", parts,
                             torch.Generator().manual_seed(0))
    assert seen["epochs"] == 2 and set(seen["node_of"].values()) == {0, 1}
    runtime = FeaturePartitioning("hotness", 0.05)
    first = {t: c // 2 for t, c in seen["reads"].items()}  # one warm-up epoch's reads, then
    runtime.add_reads(first)                                 # the other's
    runtime.add_reads({t: c - first[t] for t, c in seen["reads"].items()})
    got = runtime.planner_input(bench.sum(0), n, m, seen["node_of"])
    assert torch.equal(got, bench)
    budget = int(0.05 * n)
    a = partition_rows("hotness", n, m, counts=bench, budget=budget)  # the bench's call
    b = partition_rows("hotness", n, m, counts=got, budget=budget, hotness=bench.sum(0))
    assert torch.equal(a.owner, b.owner) and torch.equal(a.replicated, b.replicated)
