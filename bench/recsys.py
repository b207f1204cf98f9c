"""PinSAGE as a recommender on the planted user-item graph: ours vs popularity vs the ceiling.

Example::

    python bench/recsys.py --users-log2 16 --items-log2 14 --interactions-log2 20 \\
        --json out.json

Generates :func:`fgnn.data.bipartite.user_item_graph` (one held-out item per user), trains
PinSAGE item embeddings single-process on CPU with the max-margin loss and hard negatives
(:func:`fgnn.tasks.recsys_inprocess.train_pinsage`), and reports recall@K (= Hits@K) of ranking each
user's unseen items against the mean embedding of their history plus the learned item bias
(``--item-bias``; the row "embeddings alone" leaves it out). Next to it: the popularity
baseline (most interacted-with unseen items), the planted ceiling (expected recall@K of ranking
by the planted probabilities, the best any ranking can do), and, as a reference for what a
history-mean recommender can reach at all, the same history-mean ranking on the *planted* item
latents. Prints a table, the ratios and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.data.bipartite import IU, UI, user_item_graph  # noqa: E402
from fgnn.tasks.recsys_inprocess import (RecConfig, popularity_recall, recall_at_k,  # noqa: E402
                                recall_of_scores, train_pinsage)
from fgnn.models.pinsage_rec import ITEM_BIASES  # noqa: E402


def planted_history_recall(data, scale: float, k: int) -> float:
    """Recall@k of ranking by ``scale * affinity / sqrt(dim) * <mean planted latent of the
    history, item latent> + planted log popularity``: the planted model with the user's latent
    replaced by the mean of their history's (a reference for history-mean recommenders)."""
    a = scale * data.affinity / math.sqrt(data.item_latent.shape[1])
    z = data.item_latent
    return recall_of_scores(lambda u: a * z[data.history[u]].mean(1) @ z.t()
                            + data.log_popularity, data.history, data.heldout, k)


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
    p.add_argument("--lr", type=float, default=RecConfig.lr)
    p.add_argument("--easy-negatives", type=int, default=RecConfig.easy_negatives,
                   help="uniform random negatives shared by each mini-batch (0: a quarter of the "
                        "items, at least 512)")
    p.add_argument("--id-dim", type=int, default=RecConfig.id_dim,
                   help="learned id embedding per item, concatenated to its features (0: none)")
    p.add_argument("--query-items", type=int, default=RecConfig.query_items,
                   help="training query = mean embedding of this many items of the positive's "
                        "user (1: one item, the paper's item-to-item pairs)")
    p.add_argument("--hardest", type=int, default=RecConfig.hardest,
                   help="hinge on each query's this many highest-scoring shared negatives "
                        "(0: all of them)")
    p.add_argument("--hard-after", type=float, default=RecConfig.hard_after,
                   help="share of the steps before random-walk hard negatives join (1: never)")
    p.add_argument("--item-bias", choices=ITEM_BIASES, default=RecConfig.item_bias,
                   help="popularity term added to each item's score (our addition, not in the "
                        "paper): degree = learned scale of the log degree, item = learned scalar "
                        "per item, both = their sum, none = the cosine alone")
    p.add_argument("--bias-lr", type=float, default=RecConfig.bias_lr,
                   help="Adam learning rate of the item bias")
    p.add_argument("--no-normalize", action="store_true",
                   help="leave the final embeddings unnormalised")
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
    latent_pop = max(planted_history_recall(data, s, args.k) for s in (0.25, 0.5, 1.0, 2.0))
    cfg = RecConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                    easy_negatives=args.easy_negatives,
                    id_dim=args.id_dim, normalize=not args.no_normalize,
                    query_items=args.query_items, hardest=args.hardest,
                    hard_after=args.hard_after, item_bias=args.item_bias,
                    bias_lr=args.bias_lr, seed=args.seed)
    rec = train_pinsage(data.graph, IU, UI, cfg,
                        log=lambda s, loss: print(f"  step {s:5d}  loss {loss:.4f}", flush=True))
    t1 = time.perf_counter()
    emb, bias = rec.embed(), rec.item_bias()
    norm_q = cfg.normalize and cfg.query_items > 1
    ours = recall_at_k(emb, data.history, data.heldout, args.k, bias, norm_q)
    ours_cos = (recall_at_k(emb, data.history, data.heldout, args.k) if bias is not None
                else ours)
    eval_s = time.perf_counter() - t1

    k = args.k
    print(f"users {data.num_users}  items {data.num_items}  interactions "
          f"{data.graph.num_edges(UI)}  (generated in {gen_s:.1f} s)")
    print(f"{'ranking':<34}{'recall@' + str(k):>10}{'/ ceiling':>11}")
    for name, val in (("PinSAGE (ours)", ours), ("  embeddings alone (no item bias)", ours_cos),
                      ("popularity", pop),
                      ("history mean of planted latents", latent),
                      ("  + planted log popularity", latent_pop), ("planted ceiling", ceiling)):
        print(f"{name:<34}{val:>10.4f}{val / ceiling:>11.3f}")
    print(f"ours / popularity = {ours / max(pop, 1e-12):.2f}x   train {rec.seconds:.1f} s "
          f"({cfg.steps} steps)   embed + score {eval_s:.1f} s")
    result = {"bench": "recsys", "users": data.num_users, "items": data.num_items,
              "interactions": data.graph.num_edges(UI), "k": k, "ours": ours,
              "ours_embeddings_alone": ours_cos,
              "popularity": pop, "latent_history_mean": latent,
              "latent_history_mean_plus_popularity": latent_pop, "ceiling": ceiling,
              "ours_over_ceiling": ours / ceiling, "ours_over_popularity": ours / max(pop, 1e-12),
              "easy_negatives": cfg.negatives_for(data.num_items), "train_s": rec.seconds,
              "eval_s": eval_s, "generate_s": gen_s,
              "generator": data.graph.meta, "config": asdict(cfg)}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
