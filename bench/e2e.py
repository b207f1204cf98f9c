"""End to end against PyG: the whole run as a user waits for it, the epoch time, and the learning
curve, in one run.

Same graph, splits and hyper-parameters on both sides (defaults from issue 11: R-MAT scale 17,
128 features, 10% train, GraphSAGE hidden 256, fanouts 25, 10, batch 1024, Adam lr 0.003,
dropout 0.5; ``--train-frac 0.05`` gives the graph with 5% training vertices):

* **fgnn**: the ``launch.py`` command a user types (``--mode``/``--devices`` from each entry of
  ``--layouts``: ``single:1`` by default, ``single:1,factored:2`` for both), run as a subprocess;
  its whole run is the subprocess's wall time from the command to its exit (imports, data load,
  Ray and the workers when it starts them, training, validation, final scores, shutdown). The
  per-epoch loss, validation accuracy (``--val-subset``, fgnn's own default ``auto`` unless
  given: each epoch's validation scores a fixed subset of a large split) and training time come
  from its ``--report`` JSON; the test score is the report's final one.
* **PyG**: its standard loop, ``NeighborLoader`` + ``torch_geometric.nn.GraphSAGE`` + Adam
  (``bench/e2e_pyg.py``), validation and test scored with the training fanouts, run as a
  subprocess of the interpreter given by ``--pyg-python`` (default: ``$FGNN_PYG_PYTHON``, else
  this one) on the same graph saved to a temporary file; its whole run is that subprocess's
  wall time from the script's start to its exit. Without an importable PyG the script says so in
  one line and runs fgnn's side alone; it never substitutes anything.

The primary figure is the whole run; the epoch time (fgnn: the report's training wall per epoch;
PyG: the loop over its loader) is the second column.

**Paired seeds** (the default; ``--unpaired`` turns it off). The learning curves of one seed
differ by up to 9 points between seeds of the *same* library (weight init and batch order), so
three independent seeds cannot resolve a 2-point difference. Per seed, PyG therefore starts from
fgnn's initial weights (the model ``launch.py`` builds from the same flags, mapped name by name:
fgnn's ``lin_self`` is PyG's root weight ``lin_r`` plus the bias, which PyG keeps on ``lin_l``;
the function is the same) and visits the training vertices in fgnn's batch order of every epoch
(:func:`fgnn.executors.scheduler.epoch_batches`). What still differs is each library's own
randomness: neighbour sampling and dropout masks. This is common random numbers, a
variance reduction: it does not move either side's mean.

**Noise floor** (``--noise-floor``): per seed, PyG runs a second time with the same pairing and
another random seed for its sampling and dropout. The gap between PyG and itself is the smallest
fgnn-vs-PyG gap the comparison can resolve; the summary gives both.

Prints a table per layout, the ratios and one JSON object.

Example::

    .venv/bin/python bench/e2e.py --pyg-python /path/to/pyg/venv/bin/python --seeds 0,1,2 \\
        --train-frac 0.05 --layouts single:1,factored:2 --json runs/e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from fgnn.config import FRONTIERS, JobConfig  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402

__all__ = ["check_pyg", "fgnn_argv", "parse_layouts", "with_train_frac", "run_fgnn", "run_pyg",
           "summarize", "main"]

PYG_SIDE = Path(__file__).resolve().parent / "e2e_pyg.py"
LAUNCH = REPO / "launch.py"
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


def with_train_frac(spec: str, frac: Optional[float]) -> str:
    """The dataset spec with ``train_frac`` set to ``frac`` (unchanged when None)."""
    if frac is None:
        return spec
    if not 0 < frac < 1:
        raise ValueError(f"--train-frac must be in (0, 1), got {frac!r}")
    if re.search(r"(?:^|[:,])train_frac=", spec):
        return re.sub(r"((?:^|[:,])train_frac=)[^,]*", rf"\g<1>{frac:g}", spec)
    return f"{spec}{',' if ':' in spec else ':'}train_frac={frac:g}"


def parse_layouts(text: str) -> list[tuple[str, int]]:
    """``single:1,factored:2`` -> ``[("single", 1), ("factored", 2)]``."""
    out = []
    for part in text.split(","):
        mode, _, n = part.strip().partition(":")
        if mode not in ("single", "factored", "time-sharing") or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--layouts: expected MODE:DEVICES such as single:1 or factored:2, "
                             f"got {part!r}")
        out.append((mode, int(n)))
    return out


def fgnn_argv(args: argparse.Namespace, layout: tuple[str, int], seed: int,
              report: Optional[str] = None) -> list[str]:
    """The ``launch.py`` flags of one fgnn run (the command a user would type)."""
    mode, devices = layout
    argv = ["--dataset", args.dataset, "--model", "sage", "--hidden", str(args.hidden),
            "--dropout", str(args.dropout), "--fanouts", ",".join(map(str, args.fanouts)),
            "--frontier", args.frontier, "--cache-policy", "degree",
            "--cache-ratio", str(args.cache_ratio), "--epochs", str(args.epochs),
            "--batch-size", str(args.batch_size), "--eval-batch-size", str(args.eval_batch_size),
            "--lr", str(args.lr), "--weight-decay", "0", "--seed", str(seed),
            "--mode", mode, "--devices", str(devices), "--no-progress"]
    if args.val_subset is not None:
        argv += ["--val-subset", args.val_subset]
    return argv + (["--report", report] if report else [])


def _job(args: argparse.Namespace, layout: tuple[str, int], seed: int) -> JobConfig:
    """The :class:`JobConfig` ``launch.py`` builds from :func:`fgnn_argv`."""
    from fgnn.cli import build_parser, config_from_args

    return config_from_args(build_parser().parse_args(fgnn_argv(args, layout, seed)))


#: fgnn's GraphSAGE parameter -> PyG's ``GraphSAGE`` parameter (layer index substituted).
PYG_NAMES = {"lin_self.weight": "lin_r.weight", "lin_self.bias": "lin_l.bias",
             "lin_neigh.weight": "lin_l.weight"}


def pyg_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s (fgnn ``GraphSAGE``) weights under PyG ``GraphSAGE``'s parameter names."""
    out = {}
    for name, value in model.state_dict().items():
        layer, _, rest = name.removeprefix("layers.").partition(".")
        if rest not in PYG_NAMES:
            raise KeyError(f"no PyG name for fgnn parameter {name!r}")
        out[f"convs.{layer}.{PYG_NAMES[rest]}"] = value.detach().clone()
    return out


def pairing(args: argparse.Namespace, ds: Any, seed: int) -> dict[str, Any]:
    """What the PyG side of a paired seed shares with fgnn: the initial weights ``launch.py``
    builds (the same config, seed and dataset; no Ray starts), the batch orders."""
    from fgnn.runtime.driver import Runtime
    from fgnn.executors.scheduler import epoch_batches

    model = Runtime(_job(args, ("single", 1), seed), ds).model
    orders = [torch.cat(epoch_batches(ds.train_idx, args.batch_size, seed, e))
              for e in range(args.epochs)]
    return {"state": pyg_state(model), "orders": orders}


def run_fgnn(args: argparse.Namespace, layout: tuple[str, int], seed: int,
             tmp: str) -> dict[str, Any]:
    """One ``launch.py`` run in a subprocess: its wall time from the command to its exit, and
    the epochs and final scores of its report."""
    report = str(Path(tmp) / f"fgnn-{layout[0]}{layout[1]}-{seed}.json")
    cmd = [sys.executable, str(LAUNCH), *fgnn_argv(args, layout, seed, report)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"launch.py failed (exit {out.returncode}): "
                           f"{out.stderr.strip()[-2000:]}")
    rep = json.loads(Path(report).read_text())
    epochs = [{"epoch": e["epoch"], "loss": e["loss"], "train_s": e["time_s"],
               "eval_s": e.get("eval_s", 0.0), "val_acc": e["val_acc"]} for e in rep["epochs"]]
    return {"seed": seed, "layout": f"{layout[0]}:{layout[1]}", "epochs": epochs,
            "test_acc": rep["final"]["test_acc"], "wall_s": wall,
            "time_line": [ln for ln in out.stdout.splitlines() if ln.startswith("fgnn: time")],
            "allocation": rep.get("allocation")}


#: Offset of the PyG replicate's random seed in a ``--noise-floor`` run.
REPLICATE_SEED = 1000


def run_pyg(args: argparse.Namespace, graph_file: str, seed: int,
            pair_file: str | None = None) -> dict[str, Any]:
    """One PyG run in a subprocess of ``args.pyg_python`` (paired when ``pair_file`` is given;
    ``seed`` seeds PyG's sampling and dropout, and its weights when unpaired); ``wall_s`` is
    the subprocess's wall time from its start to its exit."""
    cmd = [args.pyg_python, str(PYG_SIDE), graph_file, str(seed)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd + ([pair_file] if pair_file else []), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"the PyG side failed (exit {out.returncode}): "
                           f"{out.stderr.strip()[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["script_s"] = res.pop("wall_s")  # its own clock, from after the interpreter started
    res["wall_s"] = wall
    return res


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


def noise_floor(pg: list[dict[str, Any]], rep: list[dict[str, Any]]) -> dict[str, Any]:
    """PyG against its replicate: per-epoch mean validation gap and the largest one."""
    gaps = [_mean([r["epochs"][e]["val_acc"] for r in rep])
            - _mean([r["epochs"][e]["val_acc"] for r in pg]) for e in range(len(pg[0]["epochs"]))]
    return {"pyg_replicate_diff": gaps, "max_abs_val_diff": max(abs(g) for g in gaps)}


def _epoch_s(runs: list[dict[str, Any]]) -> float:
    """Mean training seconds per epoch, the first (warm-up) left out when there are others."""
    return _mean([x["train_s"] for r in runs for x in r["epochs"][1:] or r["epochs"]])


def summarize(fg: list[dict[str, Any]], pg: list[dict[str, Any]]) -> dict[str, Any]:
    """Whole run and epoch time of one fgnn layout (and the ratios fgnn / PyG when ``pg``);
    per-epoch mean validation over the seeds."""
    out: dict[str, Any] = {"fgnn_wall_s": _mean([r["wall_s"] for r in fg]),
                           "fgnn_epoch_s": _epoch_s(fg),
                           "fgnn_test": _mean([r["test_acc"] for r in fg])}
    curve = []
    for e in range(len(fg[0]["epochs"])):
        c = {"epoch": e, "fgnn_val": _mean([r["epochs"][e]["val_acc"] for r in fg]),
             "fgnn_loss": _mean([r["epochs"][e]["loss"] for r in fg])}
        if pg:
            c["pyg_val"] = _mean([r["epochs"][e]["val_acc"] for r in pg])
            c["pyg_loss"] = _mean([r["epochs"][e]["loss"] for r in pg])
            c["diff"] = c["fgnn_val"] - c["pyg_val"]
        curve.append(c)
    out["curve"] = curve
    if not pg:
        return out
    worst = max(abs(c["diff"]) for c in curve)
    p_wall, p_epoch = _mean([r["wall_s"] for r in pg]), _epoch_s(pg)
    out.update({"max_abs_val_diff": worst, "val_within_tolerance": worst <= VAL_TOLERANCE,
                "pyg_test": _mean([r["test_acc"] for r in pg]), "pyg_wall_s": p_wall,
                "pyg_epoch_s": p_epoch, "wall_ratio": out["fgnn_wall_s"] / p_wall,
                "epoch_ratio": out["fgnn_epoch_s"] / p_epoch,
                "fgnn_faster_whole_run": out["fgnn_wall_s"] < p_wall})
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="rmat:scale=17,feat_dim=128,train_frac=0.1,seed=0")
    ap.add_argument("--train-frac", type=float, default=None,
                    help="set the dataset spec's train_frac (e.g. 0.05: 5%% training vertices)")
    ap.add_argument("--layouts", type=parse_layouts, default=parse_layouts("single:1"),
                    help="fgnn's MODE:DEVICES runs, e.g. single:1,factored:2 (default single:1)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--eval-batch-size", type=int, default=1024)
    ap.add_argument("--val-subset", default=None,
                    help="fgnn's --val-subset (default: fgnn's own default, auto)")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--fanouts", type=lambda s: [int(x) for x in s.split(",")], default=[25, 10])
    ap.add_argument("--frontier", choices=FRONTIERS, default="all",
                    help="fgnn's k-hop frontier: all (DGL blocks) or new (PyG's NeighborLoader)")
    ap.add_argument("--cache-ratio", type=float, default=0.2)
    ap.add_argument("--pyg-python", default=os.environ.get("FGNN_PYG_PYTHON", sys.executable),
                    help="interpreter with PyG (default: $FGNN_PYG_PYTHON, else this one)")
    ap.add_argument("--pyg-threads", type=int, default=None,
                    help="torch threads of the PyG side (default: torch's own choice)")
    ap.add_argument("--unpaired", action="store_true",
                    help="independent initial weights and batch orders on the two sides "
                         "(default: paired seeds, see the module docstring)")
    ap.add_argument("--noise-floor", action="store_true",
                    help="also run PyG a second time per seed (same pairing, another random "
                         "seed) and report its gap to itself")
    ap.add_argument("--json", default=None, help="also write the JSON here")
    return ap


def _runs(args: argparse.Namespace, seeds: list[int], with_pyg: bool
          ) -> tuple[dict[str, list], list, list]:
    """Every seed: each fgnn layout, then PyG (and its replicate), interleaved."""
    ds = load_dataset(args.dataset)
    fg: dict[str, list] = {f"{m}:{n}": [] for m, n in args.layouts}
    pg: list = []
    rep: list = []
    with tempfile.TemporaryDirectory(prefix="fgnn-e2e-") as tmp:
        graph_file = str(Path(tmp) / "graph.pt")
        if with_pyg:
            _save_graph(ds, args, graph_file)
        for seed in seeds:
            for layout in args.layouts:
                r = run_fgnn(args, layout, seed, tmp)
                fg[r["layout"]].append(r)
                print(f"seed {seed}: fgnn {r['layout']} wall {r['wall_s']:.1f}s, epochs "
                      f"{sum(e['train_s'] for e in r['epochs']):.1f}s", flush=True)
            if not with_pyg:
                continue
            pair = None
            if not args.unpaired:
                pair = str(Path(tmp) / f"pair{seed}.pt")
                torch.save(pairing(args, ds, seed), pair)
            pg.append(run_pyg(args, graph_file, seed, pair))
            print(f"seed {seed}: PyG wall {pg[-1]['wall_s']:.1f}s", flush=True)
            if args.noise_floor:
                rep.append(run_pyg(args, graph_file, seed + REPLICATE_SEED, pair))
    return fg, pg, rep


def _print(name: str, s: dict[str, Any]) -> None:
    pyg = "pyg_wall_s" in s
    print(f"\nfgnn {name}" + (" against PyG" if pyg else ""))
    print(f"{'epoch':>5} {'fgnn val':>9} {'fgnn loss':>10}"
          + (f" {'PyG val':>8} {'PyG loss':>9} {'diff':>7}" if pyg else ""))
    for c in s["curve"]:
        print(f"{c['epoch']:>5} {c['fgnn_val']:>9.4f} {c['fgnn_loss']:>10.4f}"
              + (f" {c['pyg_val']:>8.4f} {c['pyg_loss']:>9.4f} {c['diff']:>+7.4f}" if pyg
                 else ""))
    print(f"{'':>12} {'whole run':>10} {'epoch':>8} {'test':>7}")
    print(f"{'fgnn':>12} {s['fgnn_wall_s']:>9.1f}s {s['fgnn_epoch_s']:>7.2f}s "
          f"{s['fgnn_test']:>7.4f}")
    if pyg:
        print(f"{'PyG':>12} {s['pyg_wall_s']:>9.1f}s {s['pyg_epoch_s']:>7.2f}s "
              f"{s['pyg_test']:>7.4f}")
        print(f"{'fgnn / PyG':>12} {s['wall_ratio']:>10.3f} {s['epoch_ratio']:>8.3f}")
        print(f"validation within {VAL_TOLERANCE} of PyG after every epoch: "
              f"{s['val_within_tolerance']} (max |diff| {s['max_abs_val_diff']:.4f})")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.dataset = with_train_frac(args.dataset, args.train_frac)
    seeds = [int(s) for s in args.seeds.split(",")]
    pyg_version: Optional[str] = None
    try:
        pyg_version = check_pyg(args.pyg_python)
    except PyGMissing as err:
        print(f"bench/e2e.py: {err}; running fgnn's side alone (install PyG there or pass "
              f"--pyg-python)", file=sys.stderr, flush=True)
    fg, pg, rep = _runs(args, seeds, pyg_version is not None)
    summary = {name: summarize(runs, pg) for name, runs in fg.items()}
    for name, s in summary.items():
        _print(name, s)
    out: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "json"},
                           "pyg_version": pyg_version, "torch": torch.__version__,
                           "summary": summary, "fgnn": fg, "pyg": pg}
    if rep:
        out["noise_floor"] = noise_floor(pg, rep)
        gaps = out["noise_floor"]["pyg_replicate_diff"]
        print(f"noise floor, PyG replicate - PyG per epoch: {' '.join(f'{g:+.4f}' for g in gaps)}"
              f" (max |diff| {out['noise_floor']['max_abs_val_diff']:.4f})")
    print(json.dumps(out, default=str))
    if args.json:
        from fgnn.atomic import atomic_open

        with atomic_open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
