"""PyG's standard training script on an fgnn ``ondisk:`` directory, the PyG side of
``bench/scale.py``: the graph as one ``edge_index`` and the features loaded whole into a
``torch_geometric.data.Data``, ``NeighborLoader`` and ``torch_geometric.nn.GraphSAGE`` with
Adam, the test split scored at the end with the training fanouts. Needs nothing from fgnn.
Prints and writes one JSON object (per-epoch times, steps, accuracy, phases).

Usage: ``python bench/scale_pyg.py DIR --fanouts 25,10 --batch-size 8000 --epochs 3 --json OUT``
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--batch-size", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="steps per epoch (0: all)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    d = args.directory
    t0 = time.perf_counter()
    indptr = torch.from_numpy(np.load(f"{d}/indptr.npy"))
    indices = torch.from_numpy(np.load(f"{d}/indices.npy")).long()
    dst = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    x = torch.from_numpy(np.load(f"{d}/features.npy")).float()
    y = torch.from_numpy(np.load(f"{d}/labels.npy")).long()
    train_idx = torch.from_numpy(np.load(f"{d}/train_idx.npy"))
    test_idx = torch.from_numpy(np.load(f"{d}/test_idx.npy"))
    data = Data(x=x, y=y, edge_index=torch.stack([indices, dst]))  # row v: edges into v
    del indices, dst
    load_s = time.perf_counter() - t0
    fan = [int(f) for f in args.fanouts.split(",")]
    torch.manual_seed(0)
    classes = int(y.max()) + 1
    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(fan),
                      out_channels=classes, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    epochs, steps = [], 0
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        n = 0
        loader = NeighborLoader(data, num_neighbors=fan, batch_size=args.batch_size,
                                input_nodes=train_idx, shuffle=True)
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
            n += 1
            if args.steps and n >= args.steps:
                break
        steps += n
        epochs.append({"time_s": time.perf_counter() - t0, "steps": n})
    t0 = time.perf_counter()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in NeighborLoader(data, num_neighbors=fan, batch_size=args.batch_size,
                                    input_nodes=test_idx, shuffle=False):
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    train_s = sum(e["time_s"] for e in epochs)
    out = {"load_s": load_s, "epochs": epochs, "steps": steps, "train_s": train_s,
           "steps_per_s": steps / train_s if train_s else None,
           "epoch_s": train_s / len(epochs) if not args.steps else None,
           "test_acc": correct / max(1, total), "final_eval_s": time.perf_counter() - t0,
           "wall_in_script_s": time.perf_counter() - t_start}
    print(json.dumps(out), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    sys.exit(main())
