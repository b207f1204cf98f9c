"""End to end against PyG: epoch time, whole-run wall time and the learning curve, in one run.

Same graph, splits and hyper-parameters on both sides (defaults from issue 11: R-MAT scale 17,
128 features, 10% train, GraphSAGE hidden 256, fanouts 25, 10, batch 1024, Adam lr 0.003,
dropout 0.5):

* **fgnn**: the runtime (:class:`~fgnn.executors.runtime.Runtime`, ``--mode``/``--devices``,
  single by default) on a Ray instance this script starts once (its start-up is reported apart).
  After every epoch the driver scores the validation split with the training fanouts
  (:func:`fgnn.evaluation.evaluate_split`), and the test split after the last epoch.
* **PyG**: its standard loop, ``NeighborLoader`` + ``torch_geometric.nn.GraphSAGE`` + Adam
  (``bench/e2e_pyg.py``), validation and test scored the same way, run as a subprocess of the
  interpreter given by ``--pyg-python`` (default: ``$FGNN_PYG_PYTHON``, else this one) on the
  same graph saved to a temporary file. Without an importable PyG the script stops with exit
  status 2 and one line saying so; it never substitutes anything.

Per seed and side: loss and validation accuracy per epoch, training time per epoch (fgnn: the
runtime's epoch; PyG: the loop over its loader), and the whole run's wall time (fgnn:
``Runtime.run`` with its per-epoch validation, then the test score; PyG: the subprocess's own
clock from graph load to test score). Prints a table, the ratios and one JSON object.

Example::

    .venv/bin/python bench/e2e.py --pyg-python /path/to/pyg/venv/bin/python --seeds 0,1,2 \\
        --json runs/e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from fgnn.config import (CacheConfig, JobConfig, ModelConfig,  # noqa: E402
                         RuntimeConfig, SamplerConfig, TrainConfig)
from fgnn.data import load_dataset  # noqa: E402

__all__ = ["check_pyg", "run_fgnn", "run_pyg", "main"]

PYG_SIDE = Path(__file__).resolve().parent / "e2e_pyg.py"
#: Issue 11's goals: fgnn's validation accuracy within this of PyG's after every epoch (mean of
#: the seeds), and fgnn's whole-run wall time below PyG's.
VAL_TOLERANCE = 0.02


class PyGMissing(RuntimeError):
    """PyG cannot be imported by the interpreter meant to run it."""


def check_pyg(python: str) -> str:
    """``torch_geometric`` version under ``python`` with a ``NeighborLoader`` backend.

    Raises:
        PyGMissing: naming the interpreter and what failed.
    """
    code = ("import torch_geometric, importlib.util as u; "
            "assert u.find_spec('torch_sparse') or u.find_spec('pyg_lib'), "
            "'NeighborLoader needs torch-sparse or pyg-lib'; print(torch_geometric.__version__)")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except OSError as err:
        raise PyGMissing(f"cannot run {python}: {err}") from err
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise PyGMissing(f"PyG is not usable by {python}: {last}")
    return out.stdout.strip()


def _job(args: argparse.Namespace, seed: int) -> JobConfig:
    return JobConfig(
        dataset=args.dataset,
        model=ModelConfig("sage", hidden=args.hidden, dropout=args.dropout),
        sampler=SamplerConfig(fanouts=tuple(args.fanouts)),
        cache=CacheConfig(policy="degree", cache_ratio=args.cache_ratio),
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                          seed=seed),
        runtime=RuntimeConfig(mode=args.mode, devices=args.devices))


def run_fgnn(args: argparse.Namespace, ds: Any, seed: int) -> dict[str, Any]:
    """One fgnn run on the already started Ray instance."""
    from fgnn.evaluation import evaluate_split
    from fgnn.executors.runtime import Runtime
    from fgnn.sampling import KHop

    eval_sampler = KHop(list(args.fanouts))
    epochs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    rt = Runtime(_job(args, seed), ds, evaluate=False)

    def on_epoch(stats: Any) -> None:  # rt.model holds the server's weights of this epoch
        t = time.perf_counter()
        val = evaluate_split(rt.model, ds, "val", eval_sampler, args.eval_batch_size, seed)
        epochs.append({"epoch": stats.epoch, "loss": stats.loss, "train_s": stats.time_s,
                       "eval_s": time.perf_counter() - t, "val_acc": val.accuracy})

    rt.on_epoch = on_epoch
    result = rt.run()
    test = evaluate_split(rt.model, ds, "test", eval_sampler, args.eval_batch_size, seed)
    return {"seed": seed, "epochs": epochs, "test_acc": test.accuracy,
            "wall_s": time.perf_counter() - t0, "allocation": result.allocation}


def run_pyg(args: argparse.Namespace, graph_file: str, seed: int) -> dict[str, Any]:
    """One PyG run in a subprocess of ``args.pyg_python``."""
    out = subprocess.run([args.pyg_python, str(PYG_SIDE), graph_file, str(seed)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the PyG side failed (exit {out.returncode}): "
                           f"{out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _save_graph(ds: Any, args: argparse.Namespace, path: str) -> None:
    hp = {"hidden": args.hidden, "fanouts": list(args.fanouts), "num_classes": ds.num_classes,
          "dropout": args.dropout, "lr": args.lr, "batch_size": args.batch_size,
          "eval_batch_size": args.eval_batch_size, "epochs": args.epochs,
          "threads": args.pyg_threads}
    torch.save({"indptr": ds.graph.indptr, "indices": ds.graph.indices,
                "features": ds.features, "labels": ds.labels, "train_idx": ds.train_idx,
                "val_idx": ds.val_idx, "test_idx": ds.test_idx, "hparams": hp}, path)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def summarize(fg: list[dict[str, Any]], pg: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-epoch means over seeds and the ratios (fgnn / PyG)."""
    curve = []
    for e in range(len(fg[0]["epochs"])):
        f_val = _mean([r["epochs"][e]["val_acc"] for r in fg])
        p_val = _mean([r["epochs"][e]["val_acc"] for r in pg])
        curve.append({"epoch": e, "fgnn_val": f_val, "pyg_val": p_val, "diff": f_val - p_val,
                      "fgnn_loss": _mean([r["epochs"][e]["loss"] for r in fg]),
                      "pyg_loss": _mean([r["epochs"][e]["loss"] for r in pg])})
    f_epoch = _mean([x["train_s"] for r in fg for x in r["epochs"][1:] or r["epochs"]])
    p_epoch = _mean([x["train_s"] for r in pg for x in r["epochs"][1:] or r["epochs"]])
    f_wall, p_wall = _mean([r["wall_s"] for r in fg]), _mean([r["wall_s"] for r in pg])
    worst = max(abs(c["diff"]) for c in curve)
    return {"curve": curve, "max_abs_val_diff": worst,
            "val_within_tolerance": worst <= VAL_TOLERANCE,
            "fgnn_test": _mean([r["test_acc"] for r in fg]),
            "pyg_test": _mean([r["test_acc"] for r in pg]),
            "fgnn_epoch_s": f_epoch, "pyg_epoch_s": p_epoch, "epoch_ratio": f_epoch / p_epoch,
            "fgnn_wall_s": f_wall, "pyg_wall_s": p_wall, "wall_ratio": f_wall / p_wall,
            "fgnn_faster_whole_run": f_wall < p_wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="rmat:scale=17,feat_dim=128,train_frac=0.1,seed=0")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--eval-batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--fanouts", type=lambda s: [int(x) for x in s.split(",")], default=[25, 10])
    ap.add_argument("--mode", default="single")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--cache-ratio", type=float, default=0.2)
    ap.add_argument("--pyg-python", default=os.environ.get("FGNN_PYG_PYTHON", sys.executable),
                    help="interpreter with PyG (default: $FGNN_PYG_PYTHON, else this one)")
    ap.add_argument("--pyg-threads", type=int, default=None,
                    help="torch threads of the PyG side (default: torch's own choice)")
    ap.add_argument("--json", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    try:
        pyg_version = check_pyg(args.pyg_python)
    except PyGMissing as err:
        print(f"bench/e2e.py: {err}; install PyG there or pass --pyg-python", file=sys.stderr)
        return 2

    import ray

    ds = load_dataset(args.dataset)
    fg, pg = [], []
    with tempfile.TemporaryDirectory(prefix="fgnn-e2e-") as tmp:
        graph_file = str(Path(tmp) / "graph.pt")
        _save_graph(ds, args, graph_file)
        t0 = time.perf_counter()
        ray.init(address="local", num_gpus=max(args.devices, 1), include_dashboard=False,
                 log_to_driver=False)
        ray_start_s = time.perf_counter() - t0
        try:
            for seed in seeds:
                fg.append(run_fgnn(args, ds, seed))
                pg.append(run_pyg(args, graph_file, seed))
                print(f"seed {seed}: fgnn val {[round(e['val_acc'], 3) for e in fg[-1]['epochs']]}"
                      f" wall {fg[-1]['wall_s']:.1f}s; PyG val "
                      f"{[round(e['val_acc'], 3) for e in pg[-1]['epochs']]} wall "
                      f"{pg[-1]['wall_s']:.1f}s", flush=True)
        finally:
            ray.shutdown()
    s = summarize(fg, pg)
    print(f"\n{'epoch':>5} {'fgnn val':>9} {'PyG val':>8} {'diff':>7} {'fgnn loss':>10} "
          f"{'PyG loss':>9}")
    for c in s["curve"]:
        print(f"{c['epoch']:>5} {c['fgnn_val']:>9.4f} {c['pyg_val']:>8.4f} {c['diff']:>+7.4f} "
              f"{c['fgnn_loss']:>10.4f} {c['pyg_loss']:>9.4f}")
    print(f"test: fgnn {s['fgnn_test']:.4f}, PyG {s['pyg_test']:.4f}")
    print(f"epoch time: fgnn {s['fgnn_epoch_s']:.2f}s, PyG {s['pyg_epoch_s']:.2f}s, ratio "
          f"{s['epoch_ratio']:.3f}")
    print(f"whole run: fgnn {s['fgnn_wall_s']:.1f}s (+ Ray start {ray_start_s:.1f}s once), PyG "
          f"{s['pyg_wall_s']:.1f}s, ratio {s['wall_ratio']:.3f}")
    print(f"validation within {VAL_TOLERANCE} of PyG after every epoch: "
          f"{s['val_within_tolerance']} (max |diff| {s['max_abs_val_diff']:.4f})")
    out = {"config": {k: v for k, v in vars(args).items() if k != "json"},
           "pyg_version": pyg_version, "torch": torch.__version__, "ray_start_s": ray_start_s,
           "summary": s, "fgnn": fg, "pyg": pg}
    print(json.dumps(out, default=str))
    if args.json:
        from fgnn.atomic import atomic_open

        with atomic_open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
