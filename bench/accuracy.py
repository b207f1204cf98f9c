"""Test accuracy of a model on a Planetoid graph with the single-process loop, over seeds.

The recipe of ``tests/test_models_cora.py`` with every knob a flag: the standard split, one
mini-batch of all training vertices per epoch sampled by :class:`fgnn.sampling.KHop`, Adam,
validation picks the epoch, and the test score is exact full-neighbour inference
(:func:`fgnn.training.fit`). One intra-op thread, so results do not depend on the core count.

Example (the FGNN §7.1 3-layer GCN on Cora)::

    PYTHONPATH=. python bench/accuracy.py --dataset cora --data-root ../shared/data/planetoid \\
        --model gcn --fanouts 15,10,5 --hidden 64 --lr 0.01 --epochs 100 --seeds 0,1,2,3,4 \\
        --json out.json
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
from fgnn.models import GCN, GraphSAGE  # noqa: E402
from fgnn.sampling import KHop  # noqa: E402
from fgnn.training import fit  # noqa: E402

MODELS = {"gcn": GCN, "sage": GraphSAGE}


def run(args: argparse.Namespace) -> dict:
    """Train once per seed; the JSON report (per-seed test accuracy and the mean)."""
    ds = load_dataset(args.dataset, args.data_root)
    batch = args.batch_size or int(ds.train_idx.numel())
    accs, times = [], []
    for seed in args.seeds:
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        model = MODELS[args.model](ds.feat_dim, ds.num_classes, num_layers=len(args.fanouts),
                                   hidden=args.hidden, dropout=args.dropout)
        cfg = TrainConfig(epochs=args.epochs, batch_size=batch, lr=args.lr,
                          weight_decay=args.weight_decay, seed=seed)
        hist = fit(ds, model, KHop(args.fanouts), cfg)
        accs.append(float(hist.test_acc))
        times.append(time.perf_counter() - t0)
        print(f"seed {seed}: test accuracy {accs[-1]:.4f} ({times[-1]:.1f} s)", flush=True)
    mean = sum(accs) / len(accs)
    print(f"{args.model} fanouts {','.join(map(str, args.fanouts))} hidden {args.hidden} lr "
          f"{args.lr} epochs {args.epochs}: mean test accuracy {mean:.4f} over "
          f"{len(accs)} seeds")
    return {"dataset": args.dataset, "model": args.model, "fanouts": list(args.fanouts),
            "hidden": args.hidden, "dropout": args.dropout, "lr": args.lr,
            "weight_decay": args.weight_decay, "epochs": args.epochs, "batch_size": batch,
            "seeds": list(args.seeds), "test_acc": accs, "mean_test_acc": mean,
            "seconds": times}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="cora", help="dataset spec (fgnn.data.load_dataset)")
    p.add_argument("--data-root", default=None, help="directory of the Planetoid files")
    p.add_argument("--model", choices=sorted(MODELS), default="gcn")
    p.add_argument("--fanouts", default="15,10", help="comma-separated, seeds' hop first")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=None,
                   help="seeds per mini-batch (default: the whole training split)")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    p.add_argument("--json", default=None, help="write the report here")
    args = p.parse_args(argv)
    try:
        args.fanouts = tuple(int(f) for f in args.fanouts.split(","))
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--fanouts and --seeds must be comma-separated integers, got "
                f"{args.fanouts!r} and {args.seeds!r}")
    if not args.seeds or any(f < 1 for f in args.fanouts):
        p.error("--seeds must not be empty and --fanouts must be positive")
    torch.set_num_threads(1)
    rep = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
