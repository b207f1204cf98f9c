"""PinSAGE as a recommender on the planted user-item graph: ours vs popularity vs the ceiling.

Example::

    python bench/recsys.py --users-log2 16 --items-log2 14 --interactions-log2 20 \\
        --json out.json

Generates :func:`fgnn.hetero.bipartite.user_item_graph` (one held-out item per user), trains
PinSAGE item embeddings single-process on CPU with the max-margin loss and hard negatives
(:func:`fgnn.hetero.recsys.train_pinsage`), and reports recall@K (= Hits@K) of ranking each
user's unseen items against the mean embedding of their history. Next to it: the popularity
baseline (most interacted-with unseen items), the planted ceiling (expected recall@K of ranking
by the planted probabilities, the best any ranking can do), and, as a reference for what a
history-mean recommender can reach at all, the same history-mean ranking on the *planted* item
latents. Prints a table, the ratios and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.hetero.bipartite import IU, UI, user_item_graph  # noqa: E402
from fgnn.hetero.recsys import (RecConfig, popularity_recall, recall_at_k,  # noqa: E402
                                train_pinsage)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users-log2", type=int, default=16)
    p.add_argument("--items-log2", type=int, default=14)
    p.add_argument("--interactions-log2", type=int, default=20)
    p.add_argument("--dim", type=int, default=4, help="planted latent size")
    p.add_argument("--affinity", type=float, default=8.0, help="planted affinity scale")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=10, help="recall@K")
    p.add_argument("--steps", type=int, default=RecConfig.steps)
    p.add_argument("--batch-size", type=int, default=RecConfig.batch_size)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    data = user_item_graph(1 << args.users_log2, 1 << args.items_log2,
                           1 << args.interactions_log2, dim=args.dim, affinity=args.affinity,
                           seed=args.seed)
    gen_s = time.perf_counter() - t0
    ceiling = data.recall_ceiling(args.k)
    pop = popularity_recall(data.history, data.heldout, data.num_items, args.k)
    latent = recall_at_k(data.item_latent, data.history, data.heldout, args.k)
    cfg = RecConfig(steps=args.steps, batch_size=args.batch_size, seed=args.seed)
    rec = train_pinsage(data.graph, IU, UI, cfg,
                        log=lambda s, loss: print(f"  step {s:5d}  loss {loss:.4f}", flush=True))
    t1 = time.perf_counter()
    ours = recall_at_k(rec.embed(), data.history, data.heldout, args.k)
    eval_s = time.perf_counter() - t1

    k = args.k
    print(f"users {data.num_users}  items {data.num_items}  interactions "
          f"{data.graph.num_edges(UI)}  (generated in {gen_s:.1f} s)")
    print(f"{'ranking':<34}{'recall@' + str(k):>10}{'/ ceiling':>11}")
    for name, val in (("PinSAGE (ours)", ours), ("popularity", pop),
                      ("history mean of planted latents", latent), ("planted ceiling", ceiling)):
        print(f"{name:<34}{val:>10.4f}{val / ceiling:>11.3f}")
    print(f"ours / popularity = {ours / max(pop, 1e-12):.2f}x   train {rec.seconds:.1f} s "
          f"({cfg.steps} steps)   embed + score {eval_s:.1f} s")
    result = {"bench": "recsys", "users": data.num_users, "items": data.num_items,
              "interactions": data.graph.num_edges(UI), "k": k, "ours": ours,
              "popularity": pop, "latent_history_mean": latent, "ceiling": ceiling,
              "ours_over_ceiling": ours / ceiling, "ours_over_popularity": ours / max(pop, 1e-12),
              "train_s": rec.seconds, "eval_s": eval_s, "generate_s": gen_s,
              "generator": data.graph.meta, "config": asdict(cfg)}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
