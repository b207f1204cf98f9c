"""Link prediction in the GAE setting with the single-process loop (:func:`fgnn.link.fit_link`).

GAE (Kipf & Welling, 2016): an 85/5/10 edge split, one fixed negative per validation and test
edge, a 2-layer GCN encoder (hidden 32, embeddings 16, no dropout), a dot-product decoder, Adam
with lr 0.01, 200 epochs. Training batches of edges draw one filtered uniform negative each and
sample the endpoints' full neighbourhood with the batch's edges (both directions) excluded.
Validation AUC picks the epoch; the test is scored with full-neighbour embeddings over the
training and validation edges. The GAE paper reports AUC 91.0 and AP 92.0 on Cora. One intra-op
thread.

``--sample-cost`` times only the Sample stage of one training epoch with and without the
exclusion of seed edges (the exclusion's cost, a column of issue 20).

Examples::

    PYTHONPATH=. python bench/link_gae.py --dataset cora --data-root ../shared/data/planetoid \\
        --seeds 0,1,2,3,4 --json out.json
    PYTHONPATH=. python bench/link_gae.py --data-root ../shared/data/planetoid --sample-cost \\
        --fanouts 10,10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.config import TrainConfig  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.link import LinkNeighborSampler, build_decoder, fit_link, random_link_split  # noqa
from fgnn.models import GCN  # noqa: E402


def run(args: argparse.Namespace) -> dict:
    """Train once per seed (the split's seed too); the JSON report."""
    ds = load_dataset(args.dataset, args.data_root)
    rows = []
    for seed in args.seeds:
        start = time.perf_counter()
        split = random_link_split(ds.graph, val=0.05, test=0.10, seed=seed)
        torch.manual_seed(seed)
        enc = GCN(ds.feat_dim, args.dim, num_layers=2, hidden=args.hidden, dropout=0.0)
        hist = fit_link(ds.features, split, enc, build_decoder(args.decoder, args.dim),
                        LinkNeighborSampler(args.fanouts, exclude=args.exclude),
                        TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                    seed=seed))
        rows.append({"seed": seed, "test_auc": hist.test_auc, "test_ap": hist.test_ap,
                     "best_epoch": hist.best_epoch, "time_s": time.perf_counter() - start})
        print(f"seed {seed}: test AUC {hist.test_auc:.4f} AP {hist.test_ap:.4f} "
              f"(best epoch {hist.best_epoch}, {rows[-1]['time_s']:.0f} s)", flush=True)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("test_auc", "test_ap")}
    print(f"mean of {len(rows)} seeds: test AUC {mean['test_auc']:.4f} AP {mean['test_ap']:.4f}")
    return {"dataset": args.dataset, "args": {k: v for k, v in vars(args).items()
                                              if k != "json"}, "runs": rows, "mean": mean}


def sample_cost(args: argparse.Namespace) -> dict:
    """Seconds to sample one epoch of training batches (negatives included) with the seed edges
    excluded and without, interleaved over ``--reps`` rounds; the ratio is the exclusion's cost
    on the Sample stage."""
    ds = load_dataset(args.dataset, args.data_root)
    split = random_link_split(ds.graph, val=0.05, test=0.10, seed=0)
    graph, known = split.graph("train"), split.known_edges("train")
    samplers = {m: LinkNeighborSampler(args.fanouts, exclude=m) for m in ("reverse", "none")}
    best = {m: float("inf") for m in samplers}
    for _ in range(args.reps):
        for mode, sampler in samplers.items():
            gen = torch.Generator().manual_seed(0)
            start = time.perf_counter()
            for i in range(0, split.train_pos.shape[1], args.batch_size):
                sampler.sample(graph, split.train_pos[:, i:i + args.batch_size], gen, known)
            best[mode] = min(best[mode], time.perf_counter() - start)
    ratio = best["reverse"] / best["none"]
    print(f"sample one epoch, fanouts {','.join(map(str, args.fanouts))}: exclude "
          f"{best['reverse']:.4f} s, no exclusion {best['none']:.4f} s, ratio {ratio:.3f} "
          f"(best of {args.reps})")
    return {"dataset": args.dataset, "fanouts": list(args.fanouts), "exclude_s": best["reverse"],
            "none_s": best["none"], "ratio": ratio, "reps": args.reps}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--data-root", default=None)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=512, help="training edges per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--dim", type=int, default=16, help="embedding size")
    p.add_argument("--fanouts", type=lambda s: tuple(int(x) for x in s.split(",")),
                   default=(1000, 1000), help="default: the full neighbourhood of Planetoid")
    p.add_argument("--decoder", choices=("dot", "mlp"), default="dot")
    p.add_argument("--exclude", choices=("none", "self", "reverse"), default="reverse")
    p.add_argument("--sample-cost", action="store_true",
                   help="only time the Sample stage with and without seed-edge exclusion")
    p.add_argument("--reps", type=int, default=5, help="rounds of --sample-cost")
    p.add_argument("--json", default=None, help="write the report here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = sample_cost(args) if args.sample_cost else run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
