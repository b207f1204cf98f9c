"""Cache hit rate and bytes moved per hotness policy, side by side (FGNN §6.3, Fig. 10).

Example::

    python bench/cache.py \\
        --dataset rmat:scale=18,edge_factor=16,feat_dim=128,train_frac=0.01,seed=0 \\
        --policies degree,random,presc1,presc2,wrpr,optimal --cache-ratio 0.1 --epochs 3 \\
        --json out.json [--weighted] [--walk]

Every policy is scored on the same ``--epochs`` measured epochs (shuffled training set, real
sampler, mini-batches of ``--batch-size``): the input rows of each mini-batch go through a
:class:`~fgnn.cache.FeatureStore` holding the policy's top ``α|V|`` rows, whose counters give the
hit rate and the bytes moved from host per epoch. ``optimal`` caches the vertices most visited in
those very epochs (FGNN §3 footnote 5), so it bounds the others; each policy's hit rate is also
printed as a fraction of it. PreSC#K pre-samples K epochs with a generator independent of the
measured ones.

Samplers: 3-hop uniform k-hop (FGNN §7.1 fanouts 15,10,5; ``--fanouts``), ``--weighted`` k-hop
(edge weight = the neighbour's "registration year" 1..10, so newer neighbours are preferred, as
for Twitter in FGNN §3 Fig. 5b), or ``--walk`` (PinSAGE random walks, 4 walks of length 3, top 5,
3 layers).

With gathering on, the extract rate of the cache-miss path is measured too: every input row of
the measured epochs read from host memory by a store without a cache, with one host-gather thread
and with the default pool (``fgnn.cache.feature_store.extract_threads``), in GB/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.cache import FeatureStore, compute_hotness, load_cache, parse_policy  # noqa: E402
from fgnn.cache.feature_store import extract_threads  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.graph import CSRGraph  # noqa: E402
from fgnn.sampling import KHop, RandomWalk  # noqa: E402


def _vertex_year_weights(graph: CSRGraph, seed: int) -> CSRGraph:
    """Edge weight = the neighbour's year in 1..10 (newer = heavier, FGNN §3 on Twitter)."""
    g = torch.Generator().manual_seed(seed + 77)
    year = torch.randint(1, 11, (graph.num_nodes,), generator=g).to(torch.float32)
    return CSRGraph(graph.indptr, graph.indices, year[graph.indices.long()])


def record_epochs(graph, train, sampler, epochs, batch_size, seed):
    """The measured epochs: per epoch, the input ids of every mini-batch."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        order = train[torch.randperm(train.numel(), generator=gen)]
        out.append([sampler.sample(graph, seeds, gen).input_nodes
                    for seeds in torch.split(order, batch_size)])
    return out


def extract_rates(feats, batches, row_bytes: int) -> dict:
    """Host (cache-miss) extract GB/s over every input row of ``batches``, with one gather
    thread and with the default pool."""
    rows = sum(ids.numel() for ep in batches for ids in ep)
    out = {"rows": rows, "threads": {}}
    for threads in sorted({1, extract_threads()}):
        store = FeatureStore.single(feats, None, threads=threads)
        t0 = time.perf_counter()
        for ep in batches:
            for ids in ep:
                store.gather(ids)
        sec = time.perf_counter() - t0
        out["threads"][str(threads)] = {"seconds": sec, "gbps": rows * row_bytes / sec / 1e9}
    rates = [v["gbps"] for v in out["threads"].values()]
    out["speedup"] = rates[-1] / rates[0]
    return out


def run(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    ds = load_dataset(args.dataset)
    graph, train, feats = ds.graph, ds.train_idx.long(), ds.features
    if args.weighted:
        graph = _vertex_year_weights(graph, args.seed)
        sampler = KHop(args.fanouts, weighted=True)
        sampler_name = f"weighted {len(args.fanouts)}-hop {list(args.fanouts)}"
    elif args.walk:
        sampler = RandomWalk()
        sampler_name = "random walk (4 walks x 3 steps, top 5, 3 layers)"
    else:
        sampler = KHop(args.fanouts)
        sampler_name = f"uniform {len(args.fanouts)}-hop {list(args.fanouts)}"
    load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    batches = record_epochs(graph, train, sampler, args.epochs, args.batch_size, args.seed + 1)
    visits = torch.zeros(args.epochs, graph.num_nodes)
    for e, ep in enumerate(batches):
        for ids in ep:
            visits[e].index_add_(0, ids, torch.ones(ids.numel()))
    sample_s = time.perf_counter() - t0
    epoch_s = sample_s / args.epochs

    results = {}
    for policy in args.policies:
        name, k = parse_policy(policy)
        t0 = time.perf_counter()
        h = compute_hotness(policy, graph, train, sampler=sampler, batch_size=args.batch_size,
                            generator=torch.Generator().manual_seed(args.seed + 2),
                            visits=visits)
        hot_s = time.perf_counter() - t0
        store = FeatureStore.single(feats, load_cache(h, args.cache_ratio, feats))
        per_epoch = []
        for ep in batches:
            for ids in ep:
                if args.gather:
                    store.gather(ids)
                else:  # the same counters, without copying rows
                    store.count(ids)
            per_epoch.append(store.reset_stats().as_dict())
        hit_rate = sum(p["hits"] for p in per_epoch) / max(1, sum(p["lookups"] for p in per_epoch))
        results[policy] = {
            "hit_rate": hit_rate,
            "host_bytes_per_epoch": sum(p["bytes"]["host"] for p in per_epoch) / len(per_epoch),
            "epochs": per_epoch,
            "hotness_seconds": hot_s,
            "hotness_seconds_per_sampling_epoch": hot_s / epoch_s if name == "presc" else None,
        }
    if "optimal" in results:
        opt = results["optimal"]["hit_rate"]
        for r in results.values():
            r["fraction_of_optimal"] = r["hit_rate"] / opt if opt > 0 else None
    return {
        "dataset": args.dataset, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "num_train": int(train.numel()), "row_bytes": ds.feature_row_bytes,
        "sampler": sampler_name, "batch_size": args.batch_size, "cache_ratio": args.cache_ratio,
        "epochs": args.epochs, "accesses_per_epoch": float(visits.sum(1).mean()),
        "load_seconds": load_s, "sampling_seconds_per_epoch": epoch_s,
        "policies": results,
        "extract": extract_rates(feats, batches, ds.feature_row_bytes) if args.gather else None,
    }


def print_table(rep: dict) -> None:
    print(f"{rep['dataset']}  N={rep['num_nodes']} E={rep['num_edges']} "
          f"train={rep['num_train']}  sampler: {rep['sampler']}  batch={rep['batch_size']}  "
          f"alpha={rep['cache_ratio']}  epochs={rep['epochs']}  "
          f"rows/epoch={rep['accesses_per_epoch']:.0f}")
    print(f"{'policy':<10}{'hit rate':>10}{'of optimal':>12}{'host MiB/epoch':>16}"
          f"{'hotness s':>11}")
    for name, r in rep["policies"].items():
        frac = r.get("fraction_of_optimal")
        frac_s = f"{frac:.3f}" if frac is not None else "-"
        print(f"{name:<10}{r['hit_rate']:>10.4f}{frac_s:>12}"
              f"{r['host_bytes_per_epoch'] / 2**20:>16.1f}{r['hotness_seconds']:>11.2f}")
    ext = rep.get("extract")
    if ext:
        rates = ", ".join(f"{t} thread(s) {v['gbps']:.2f} GB/s"
                          for t, v in ext["threads"].items())
        print(f"host extract ({ext['rows']} rows): {rates}; speedup {ext['speedup']:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset spec (fgnn.data.load_dataset)")
    ap.add_argument("--policies", default="degree,random,presc1,presc2,wrpr,optimal")
    ap.add_argument("--cache-ratio", type=float, default=0.1, help="alpha in [0, 1]")
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs")
    ap.add_argument("--batch-size", type=int, default=64,
                    help="seeds per mini-batch (64 gives ~40 batches per epoch at scale 18 with a "
                         "1%% training set, the batches-per-epoch range of FGNN's datasets)")
    ap.add_argument("--fanouts", default="15,10,5", help="k-hop fanouts, seed hop first")
    ap.add_argument("--weighted", action="store_true", help="weighted k-hop sampling")
    ap.add_argument("--walk", action="store_true", help="PinSAGE random-walk sampling")
    ap.add_argument("--no-gather", dest="gather", action="store_false",
                    help="count hits without copying feature rows (same counters)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args(argv)
    if args.weighted and args.walk:
        ap.error("--weighted and --walk are exclusive")
    if not 0.0 <= args.cache_ratio <= 1.0:
        ap.error(f"--cache-ratio must lie in [0, 1], got {args.cache_ratio}")
    if args.epochs < 1:
        ap.error(f"--epochs must be >= 1, got {args.epochs}")
    args.fanouts = tuple(int(f) for f in args.fanouts.split(","))
    args.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in args.policies:
        try:
            parse_policy(p)
        except ValueError as err:
            ap.error(str(err))
    rep = run(args)
    print_table(rep)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
