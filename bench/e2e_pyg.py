"""The PyG side of ``bench/e2e.py``: PyG's standard training loop on a graph saved by it.

Runs under an interpreter that has PyG (``torch_geometric`` with ``torch-sparse`` or ``pyg-lib``
for ``NeighborLoader``); needs nothing from fgnn. Reads the ``.pt`` file ``bench/e2e.py`` wrote
(CSR graph, features, labels, splits, hyper-parameters), trains
``torch_geometric.nn.GraphSAGE`` with ``NeighborLoader`` and Adam, scores the validation split
after every epoch and the test split at the end (sampled with the training fanouts, in order),
and prints one JSON line. Exit status 2 with one line when PyG cannot be imported.

With a third argument, the pairing file ``bench/e2e.py`` wrote for this seed: the model starts
from those weights (fgnn's, under PyG's names) and epoch ``e`` visits the training vertices in
the saved order ``orders[e]`` (batches of ``batch_size`` cut in turn, as fgnn cuts them).

Usage: ``python bench/e2e_pyg.py GRAPH.pt SEED [PAIR.pt]``
"""

from __future__ import annotations

import json
import sys
import time


def main(path: str, seed: int, pair_path: str | None = None) -> dict:
    t_start = time.perf_counter()
    try:
        import torch
        import torch.nn.functional as F
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.nn import GraphSAGE
    except ImportError as err:
        print(f"e2e_pyg: PyG is not importable by {sys.executable}: {err}", file=sys.stderr)
        sys.exit(2)
    blob = torch.load(path)
    hp = blob["hparams"]
    if hp.get("threads"):
        torch.set_num_threads(int(hp["threads"]))
    indptr, indices = blob["indptr"], blob["indices"].long()
    deg = indptr[1:] - indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(deg.numel()), deg)
    data = Data(x=blob["features"], y=blob["labels"],
                edge_index=torch.stack([indices, dst]))  # row v of the CSR = edges into v
    torch.manual_seed(seed)
    model = GraphSAGE(data.num_features, hp["hidden"], num_layers=len(hp["fanouts"]),
                      out_channels=hp["num_classes"], dropout=hp["dropout"])
    pair = torch.load(pair_path) if pair_path else None
    if pair is not None:
        model.load_state_dict(pair["state"])
    opt = torch.optim.Adam(model.parameters(), lr=hp["lr"])
    fan = list(hp["fanouts"])

    def train_loader(epoch: int) -> NeighborLoader:
        if pair is None:
            return NeighborLoader(data, num_neighbors=fan, batch_size=hp["batch_size"],
                                  input_nodes=blob["train_idx"], shuffle=True)
        return NeighborLoader(data, num_neighbors=fan, batch_size=hp["batch_size"],
                              input_nodes=pair["orders"][epoch], shuffle=False)

    @torch.no_grad()
    def score(idx: torch.Tensor) -> float:
        model.eval()
        loader = NeighborLoader(data, num_neighbors=fan, batch_size=hp["eval_batch_size"],
                                input_nodes=idx, shuffle=False)
        correct = 0
        for b in loader:
            out = model(b.x, b.edge_index)[:b.batch_size]
            correct += int((out.argmax(-1) == b.y[:b.batch_size]).sum())
        return correct / idx.numel()

    epochs = []
    t_setup = time.perf_counter() - t_start
    for epoch in range(hp["epochs"]):
        t0 = time.perf_counter()
        model.train()
        total, n = 0.0, 0
        for b in train_loader(epoch):
            opt.zero_grad()
            out = model(b.x, b.edge_index)[:b.batch_size]
            loss = F.cross_entropy(out, b.y[:b.batch_size])
            loss.backward()
            opt.step()
            total += float(loss) * b.batch_size
            n += b.batch_size
        t1 = time.perf_counter()
        val = score(blob["val_idx"])
        epochs.append({"epoch": epoch, "loss": total / n, "train_s": t1 - t0,
                       "eval_s": time.perf_counter() - t1, "val_acc": val})
    test = score(blob["test_idx"])
    return {"seed": seed, "paired": pair is not None, "setup_s": t_setup, "epochs": epochs,
            "test_acc": test,
            "wall_s": time.perf_counter() - t_start}


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print("usage: python bench/e2e_pyg.py GRAPH.pt SEED [PAIR.pt]", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), (sys.argv[3:] or [None])[0])))
