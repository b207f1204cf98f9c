"""Typed feature cache: one byte budget by visits per byte against the budget split evenly per
type, side by side, on the planted user-item graph (power-law item popularity).

Example::

    PYTHONPATH=. python bench/hetero_cache.py --users-log2 16 --items-log2 14 \\
        --interactions-log2 20 --user-feat-dim 64 --budgets 0.02,0.05,0.1,0.2 --json out.json

The graph is :func:`fgnn.data.bipartite.user_item_graph` (items carry ``--item-feat-dim``
float32 features); users get ``--user-feat-dim`` random float32 features (0: none, learned
embeddings), so the two types have different row widths. Seeds are items (the item side of
PinSAGE-style training), sampled by :class:`~fgnn.HeteroKHop` with ``--fanouts`` per
relation. PreSC#K (:func:`~fgnn.cache.hetero.hetero_presc_hotness`) pre-samples ``--presc``
epochs with one generator; the hit rate is then measured over ``--epochs`` other epochs (an
independent generator) through :class:`~fgnn.cache.hetero.HeteroFeatureStore` counters, for each
budget (a fraction of all feature bytes) and each split: ``global`` (all rows ranked by visits
per byte, one budget), ``global-bytes`` (all rows ranked by visits, one budget) and ``even``
(budget / types bytes per type, hottest rows within each).
Both policies see the same hotness and the same measured samples. Each is also scored with the
``oracle`` hotness, the visit counts of the measured epochs themselves (FGNN §3 footnote 5), which
separates the policy from the noise of the PreSC estimate. ``hit`` is the share of rows served by
the cache (what ``global`` maximises), ``bytes`` the share of bytes (what ``global-bytes``
maximises); ``g/e`` and ``gb/e`` are the ratios to ``even`` of each one's own objective.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn import HeteroGraph, HeteroKHop  # noqa: E402
from fgnn.data.bipartite import ITEM, USER, user_item_graph  # noqa: E402
from fgnn.cache.hetero import (SPLITS, HeteroFeatureStore, feature_bytes,  # noqa: E402
                               hetero_presc_hotness, row_bytes_of)


def build_graph(args: argparse.Namespace) -> HeteroGraph:
    """The planted graph, with user features of ``--user-feat-dim`` added."""
    data = user_item_graph(1 << args.users_log2, 1 << args.items_log2,
                           1 << args.interactions_log2, feat_dim=args.item_feat_dim,
                           popularity_exponent=args.popularity_exponent, seed=args.seed)
    g = data.graph
    feats = dict(g.features)
    if args.user_feat_dim:
        gen = torch.Generator().manual_seed(args.seed + 1)
        feats[USER] = torch.randn(g.num_nodes[USER], args.user_feat_dim, generator=gen)
    return HeteroGraph(g.num_nodes, g.relations, feats, meta=g.meta)


def record(g: HeteroGraph, sampler: HeteroKHop, epochs: int, batch: int, seed: int) -> list:
    """The measured epochs' samples (all item seeds, shuffled per epoch)."""
    gen = torch.Generator().manual_seed(seed)
    seeds = torch.arange(g.num_nodes[ITEM])
    out = []
    for _ in range(epochs):
        order = seeds[torch.randperm(seeds.numel(), generator=gen)]
        out += [sampler.sample(g, ITEM, s, gen) for s in torch.split(order, batch)]
    return out


def oracle_hotness(g: HeteroGraph, samples: list) -> dict:
    """Visits per (type, id) in the measured samples themselves."""
    out = {t: torch.zeros(n) for t, n in g.num_nodes.items()}
    for s in samples:
        for t, ids in s.input_nodes.items():
            out[t].index_add_(0, ids, torch.ones(ids.numel()))
    return out


def score(g: HeteroGraph, hot: dict, budget: int, split: str, samples: list) -> dict:
    """Hit rate and host bytes of one policy over the recorded samples."""
    store = HeteroFeatureStore.build(g, hot, budget, split=split)
    for s in samples:
        store.count(s)
    per = {t: st.as_dict() for t, st in store.stats().items()}
    tot = store.total_stats()
    byte_hit = tot.bytes["device"] / max(1, tot.bytes["device"] + tot.bytes["host"])
    return {"hit_rate": tot.hit_rate, "byte_hit_rate": byte_hit, "hits": tot.hits,
            "rows": tot.lookups,
            "host_bytes": tot.bytes["host"], "cache_bytes": store.cache_bytes(),
            "per_type": {t: {"hit_rate": d["hit_rate"], "hits": d["hits"],
                             "misses": d["misses"]} for t, d in per.items()}}


def print_table(rep: dict) -> None:
    types = [t for t, b in rep["row_bytes"].items() if b]
    print(f"user-item graph: {rep['num_nodes']}, row bytes {rep['row_bytes']}, "
          f"feature bytes {rep['feature_bytes'] / 2**20:.1f} MiB, "
          f"{rep['samples']} measured mini-batches")
    short = {"global": "g", "global-bytes": "gb", "even": "e"}
    hits = "".join(f"{f'hit {short[s]}':>9}" for s in SPLITS)
    bhits = "".join(f"{f'bytes {short[s]}':>9}" for s in SPLITS)
    per = "".join(f"{f'{short[s]}:{t}':>9}" for s in SPLITS for t in types)
    print(f"{'hotness':>8}{'budget':>7}{hits}{'g/e':>7}{bhits}{'gb/e':>7}  per type: {per}")
    for r in rep["rows"]:
        ratio = _ratio(r["global"]["hit_rate"], r["even"]["hit_rate"])
        bratio = _ratio(r["global-bytes"]["byte_hit_rate"], r["even"]["byte_hit_rate"])
        cells = "".join(f"{r[s]['hit_rate']:>9.4f}" for s in SPLITS)
        bcells = "".join(f"{r[s]['byte_hit_rate']:>9.4f}" for s in SPLITS)
        per = "".join(f"{r[s]['per_type'][t]['hit_rate']:>9.3f}" for s in SPLITS for t in types)
        print(f"{r['hotness']:>8}{r['budget_frac']:>7.3f}{cells}{ratio:>6.2f}x{bcells}"
              f"{bratio:>6.2f}x  per type: {per}")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users-log2", type=int, default=14)
    ap.add_argument("--items-log2", type=int, default=12)
    ap.add_argument("--interactions-log2", type=int, default=18)
    ap.add_argument("--item-feat-dim", type=int, default=32)
    ap.add_argument("--user-feat-dim", type=int, default=64, help="0: users have no features")
    ap.add_argument("--popularity-exponent", type=float, default=0.8)
    ap.add_argument("--fanouts", default="10,5", help="per hop, for every relation")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--presc", type=int, default=1, help="PreSC pre-sampling epochs K")
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs")
    ap.add_argument("--budgets", default="0.02,0.05,0.1,0.2",
                    help="cache budgets as fractions of all feature bytes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    g = build_graph(args)
    t_gen = time.perf_counter() - t0
    sampler = HeteroKHop([int(f) for f in args.fanouts.split(",")])
    t0 = time.perf_counter()
    hot = hetero_presc_hotness(g, sampler, ITEM, torch.arange(g.num_nodes[ITEM]),
                               epochs=args.presc, batch_size=args.batch_size,
                               generator=torch.Generator().manual_seed(args.seed + 100))
    t_presc = time.perf_counter() - t0
    samples = record(g, sampler, args.epochs, args.batch_size, args.seed + 200)
    rb, total = row_bytes_of(g), feature_bytes(g)
    rows = []
    for name, h in (("presc", hot), ("oracle", oracle_hotness(g, samples))):
        for frac in (float(b) for b in args.budgets.split(",")):
            budget = int(frac * total)
            rows.append({"hotness": name, "budget_frac": frac, "budget_bytes": budget,
                         **{s: score(g, h, budget, s, samples) for s in SPLITS}})
    rep = {"date": time.strftime("%Y-%m-%d"), "args": vars(args), "num_nodes": g.num_nodes,
           "row_bytes": rb, "feature_bytes": total, "samples": len(samples),
           "generate_s": round(t_gen, 2), "presc_s": round(t_presc, 2), "rows": rows}
    print_table(rep)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2))
    return rep


if __name__ == "__main__":
    main()
