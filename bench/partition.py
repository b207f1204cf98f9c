"""Remote feature traffic of node-level partitions: hotness vs hash vs full replication.

Example::

    python bench/partition.py \\
        --dataset rmat:scale=20,edge_factor=16,feat_dim=128,train_frac=0.01,seed=0 \\
        --nodes 2,4 --trainers-per-node 2 --replicate-ratio 0.05 --cache-ratio 0.01 \\
        --seeds uniform,partitioned --json out.json

A cluster of ``M`` nodes is simulated on one machine: ``--trainers-per-node`` Trainers per node,
each extracting the input rows of the mini-batches it trains (the real k-hop sampler, fanouts
``--fanouts``, ``--batch-size`` seeds per batch). Two ways to hand seeds to Trainers:

* ``uniform`` -- every epoch shuffles the whole training set and deals its batches round-robin
  to all Trainers (FGNN's global queue: any Trainer takes any batch);
* ``partitioned`` -- the training set is split once into ``M`` random parts; each node's
  Trainers train only on their node's part (partitioned training seeds, the precondition of
  Song & Jiang's locality: a node's Trainers keep reading the same neighbourhoods).

PreSC#K (FGNN §6.3) pre-samples ``--presc-epochs`` epochs with the same seed dealing and counts
each node's visits (its Trainers' counts summed); those ``(M, N)`` counts give the ``hotness``
partition (:func:`fgnn.cache.hotness_partition`: the ``--replicate-ratio`` N globally hottest
rows on every node, every other row owned by its top reader, owned rows capped at
``ceil((N - R) / M)``). ``hash`` is ``row % M`` (WholeGraph), ``hash+hot`` is hash with the same
replicated rows (to separate what replication and ownership each buy), ``replicate`` is every row
on every node. Every Trainer's device cache holds the top ``--cache-ratio`` N rows of the summed
PreSC hotness. The ``--epochs`` measured epochs use a generator independent of the pre-sampling;
each input row is counted in one tier -- device cache, local host, remote node
(:class:`fgnn.cache.TrafficMeter`) -- per node per epoch.

Reported per ``M`` and seed mode: remote bytes per epoch (all nodes), each strategy's ratio to
hash, and each node's host memory against the bound ``N / M + R`` rows.

``--locality-scale s`` (> 1) samples the measured epochs with Song & Jiang's locality-aware k-hop
(§4, Eq. 8; :class:`fgnn.sampling.LocalityAwareKHop`): each node draws the neighbours it holds
under the layout being measured ``s`` times more often, so every layout gets its own samples
(and the rows read differ between layouts). The sampling distribution changes (the aggregation
stays unbiased through ``1/q`` weights), so this is a trade-off against accuracy, not a free
saving.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.cache import (ReadCounter, TrafficMeter, node_access_counts,  # noqa: E402
                        partition_rows)
from fgnn.data import load_dataset  # noqa: E402
from fgnn.sampling import KHop, LocalityAwareKHop  # noqa: E402

STRATEGIES = ("hotness", "hash", "hash+hot", "replicate")


def deal(train, num_nodes, tpn, mode, parts, batch_size, gen):
    """One epoch's ``(trainer, node, seeds)`` in order: uniform deals the shuffled training set
    to every Trainer; partitioned shuffles each node's own part for its Trainers."""
    out = []
    if mode == "uniform":
        order = train[torch.randperm(train.numel(), generator=gen)]
        for b, seeds in enumerate(torch.split(order, batch_size)):
            t = b % (num_nodes * tpn)
            out.append((t, t // tpn, seeds))
        return out
    for node, part in enumerate(parts):
        order = part[torch.randperm(part.numel(), generator=gen)]
        for b, seeds in enumerate(torch.split(order, batch_size)):
            out.append((node * tpn + b % tpn, node, seeds))
    return out


def presc_counts(graph, train, sampler, args, num_nodes, mode, parts, gen):
    """``(M, N)`` PreSC visit counts per node per epoch over ``--presc-epochs`` epochs: each
    Trainer counts its reads (:class:`fgnn.cache.ReadCounter`) and the counts are summed per
    node (:func:`fgnn.cache.node_access_counts`), as the runtime does in its warm-up epochs."""
    trainers = num_nodes * args.trainers_per_node
    counters = [ReadCounter(graph.num_nodes) for _ in range(trainers)]
    for _ in range(args.presc_epochs):
        for t, _, seeds in deal(train, num_nodes, args.trainers_per_node, mode, parts,
                                args.batch_size, gen):
            counters[t].record(sampler.sample(graph, seeds, gen).input_nodes)
    return node_access_counts({t: c.take() for t, c in enumerate(counters)},
                              {t: t // args.trainers_per_node for t in range(trainers)},
                              num_nodes, graph.num_nodes, args.presc_epochs)


def build_meters(counts, n, num_nodes, args, row_bytes):
    """One :class:`TrafficMeter` per strategy, all with the same device cache."""
    total = counts.sum(0)
    budget = int(args.replicate_ratio * n)
    cached = torch.zeros(n, dtype=torch.bool)
    cache_rows = int(args.cache_ratio * n)
    cached[torch.argsort(-total, stable=True)[:cache_rows]] = True
    hot = partition_rows("hotness", n, num_nodes, counts=counts, budget=budget)
    hash_hot = partition_rows("hash", n, num_nodes)
    hash_hot.replicated = hot.replicated.clone()
    hash_hot.strategy = "hash+hot"
    parts = {"hotness": hot, "hash": partition_rows("hash", n, num_nodes),
             "hash+hot": hash_hot, "replicate": partition_rows("replicate", n, num_nodes)}
    return {k: TrafficMeter(p, row_bytes, cached) for k, p in parts.items()}, budget, cache_rows


def run_case(ds, sampler, args, num_nodes, mode):
    """One ``(M, seed mode)``: PreSC, the partitions, the measured epochs."""
    graph, train, n, row = ds.graph, ds.train_idx.long(), ds.num_nodes, ds.feature_row_bytes
    split = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(
        args.seed + 11))]
    parts = list(torch.tensor_split(split, num_nodes))
    t0 = time.perf_counter()
    counts = presc_counts(graph, train, sampler, args, num_nodes, mode, parts,
                          torch.Generator().manual_seed(args.seed + 2))
    presc_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    meters, budget, cache_rows = build_meters(counts, n, num_nodes, args, row)
    plan_s = time.perf_counter() - t0
    if args.locality_scale > 1:
        epochs = {k: measure_local(graph, train, args, num_nodes, mode, parts, {k: meter})[k]
                  for k, meter in meters.items()}
    else:
        epochs = measure(graph, train, args, num_nodes, mode, parts, meters,
                         [sampler] * num_nodes)
    return summarize(meters, epochs, n, row, num_nodes, budget, cache_rows, presc_s, plan_s)


def measure(graph, train, args, num_nodes, mode, parts, meters, samplers):
    """The measured epochs: each node samples with its own sampler; every meter records every
    batch. Returns each meter's per-epoch, per-node counts."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    epochs = {k: [] for k in meters}
    for _ in range(args.epochs):
        for _, node, seeds in deal(train, num_nodes, args.trainers_per_node, mode, parts,
                                   args.batch_size, gen):
            ids = samplers[node].sample(graph, seeds, gen).input_nodes
            for m in meters.values():
                m.record(node, ids)
        for k, m in meters.items():
            epochs[k].append(m.take())
    return epochs


def measure_local(graph, train, args, num_nodes, mode, parts, meters):
    """:func:`measure` with Song & Jiang's locality-aware sampling: node ``m`` draws the
    neighbours it holds under the (single) layout of ``meters`` ``--locality-scale`` times more
    often (Eq. 8, importance-weighted so the aggregation stays unbiased)."""
    [meter] = meters.values()
    samplers = [LocalityAwareKHop(args.fanouts, local=meter.partition.holds(m),
                                  scale=args.locality_scale) for m in range(num_nodes)]
    return measure(graph, train, args, num_nodes, mode, parts, meters, samplers)


def summarize(meters, epochs, n, row, num_nodes, budget, cache_rows, presc_s, plan_s):
    """Remote bytes per epoch, ratios to hash, host memory against ``N / M + R`` rows."""
    bound = (n / num_nodes + budget) * row
    out = {"replicated_rows": budget, "device_cache_rows": cache_rows,
           "host_bound_bytes": bound, "presc_seconds": presc_s, "plan_seconds": plan_s,
           "strategies": {}}
    for k, meter in meters.items():
        per_epoch = [sum(nd["bytes"]["remote"] for nd in ep) for ep in epochs[k]]
        tiers = {t: sum(nd["rows"][t] for ep in epochs[k] for nd in ep) / len(epochs[k])
                 for t in ("device", "local", "remote")}
        host = [r * row for r in meter.partition.host_rows()]
        out["strategies"][k] = {
            "remote_bytes_per_epoch": sum(per_epoch) / len(per_epoch),
            "rows_per_epoch": tiers, "host_bytes": host,
            "host_over_bound": max(host) / bound, "owned_rows": meter.partition.owned_rows(),
            "epochs": epochs[k]}
    hash_b = out["strategies"]["hash"]["remote_bytes_per_epoch"]
    for s in out["strategies"].values():
        s["remote_vs_hash"] = s["remote_bytes_per_epoch"] / hash_b if hash_b else None
    return out


def run(args) -> dict:
    t0 = time.perf_counter()
    ds = load_dataset(args.dataset)
    load_s = time.perf_counter() - t0
    sampler = KHop(args.fanouts)
    cases = {}
    for m in args.nodes:
        for mode in args.seeds:
            cases[f"M={m} {mode}"] = dict(num_nodes=m, seeds=mode,
                                          **run_case(ds, sampler, args, m, mode))
    return {"dataset": args.dataset, "num_nodes": ds.num_nodes, "num_edges": ds.graph.num_edges,
            "num_train": int(ds.train_idx.numel()), "row_bytes": ds.feature_row_bytes,
            "feature_bytes": ds.num_nodes * ds.feature_row_bytes,
            "fanouts": list(args.fanouts), "batch_size": args.batch_size,
            "trainers_per_node": args.trainers_per_node, "presc_epochs": args.presc_epochs,
            "epochs": args.epochs, "replicate_ratio": args.replicate_ratio,
            "cache_ratio": args.cache_ratio, "locality_scale": args.locality_scale,
            "load_seconds": load_s, "cases": cases}


def print_table(rep: dict) -> None:
    print(f"{rep['dataset']}  N={rep['num_nodes']} train={rep['num_train']} "
          f"features={rep['feature_bytes'] / 2**20:.0f} MiB  replicate={rep['replicate_ratio']} "
          f"device cache={rep['cache_ratio']}  batch={rep['batch_size']} "
          f"trainers/node={rep['trainers_per_node']}")
    print(f"{'case':<16}{'strategy':<11}{'remote MiB/ep':>14}{'vs hash':>9}{'local rows':>12}"
          f"{'device rows':>12}{'host/bound':>11}")
    for name, c in rep["cases"].items():
        for k, s in c["strategies"].items():
            r = s["rows_per_epoch"]
            vs = "-" if s["remote_vs_hash"] is None else f"{s['remote_vs_hash']:.3f}"
            print(f"{name:<16}{k:<11}{s['remote_bytes_per_epoch'] / 2**20:>14.1f}{vs:>9}"
                  f"{r['local']:>12.0f}{r['device']:>12.0f}{s['host_over_bound']:>11.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset spec (fgnn.data.load_dataset)")
    ap.add_argument("--nodes", default="2,4", help="simulated cluster sizes M")
    ap.add_argument("--trainers-per-node", type=int, default=2)
    ap.add_argument("--seeds", default="uniform,partitioned",
                    help="how Trainers get seeds: uniform (global queue), partitioned (per node)")
    ap.add_argument("--replicate-ratio", type=float, default=0.05,
                    help="rows replicated on every node, as a fraction of N")
    ap.add_argument("--cache-ratio", type=float, default=0.01,
                    help="each Trainer's device cache, as a fraction of N")
    ap.add_argument("--presc-epochs", type=int, default=1, help="PreSC#K pre-sampling epochs")
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs")
    ap.add_argument("--batch-size", type=int, default=256, help="seeds per mini-batch")
    ap.add_argument("--fanouts", default="15,10,5", help="k-hop fanouts, seed hop first")
    ap.add_argument("--locality-scale", type=float, default=1.0,
                    help="> 1: measured epochs sample with Song & Jiang's locality-aware k-hop, "
                         "each node favouring the rows it holds under each layout by this factor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args(argv)
    args.nodes = [int(m) for m in args.nodes.split(",")]
    args.seeds = [s.strip() for s in args.seeds.split(",") if s.strip()]
    args.fanouts = tuple(int(f) for f in args.fanouts.split(","))
    for name in ("replicate_ratio", "cache_ratio"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            ap.error(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(args, name)}")
    if any(m < 1 for m in args.nodes) or args.trainers_per_node < 1:
        ap.error("--nodes and --trainers-per-node must be positive")
    if any(s not in ("uniform", "partitioned") for s in args.seeds):
        ap.error(f"--seeds takes uniform and/or partitioned, got {args.seeds}")
    if not args.locality_scale >= 1:
        ap.error(f"--locality-scale must be >= 1, got {args.locality_scale}")
    if args.epochs < 1 or args.presc_epochs < 1:
        ap.error("--epochs and --presc-epochs must be >= 1")
    rep = run(args)
    print_table(rep)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
