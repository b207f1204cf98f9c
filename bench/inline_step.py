"""The in-process gradient exchange: one step's round trip to the parameter server.

A one-device job runs its parameter server as an in-process actor (fgnn/executors/inline.py).
Each step a Trainer claims a slot (the reply brings the new weights) and pushes its gradient;
this bench times that round trip, ``claim`` then ``step``, over ``--steps`` steps of a model of
the sizes given (default: the GCN of ``launch.py --mode single --dataset rmat:scale=16``, 128
features, hidden 256, 3 layers, 16 classes), and beside it what a copy of the gradient and of
the weights costs (the copies the in-process calls made before they passed values uncopied),
as a share of the round trip.

Usage::

    PYTHONPATH=. python bench/inline_step.py [--in-dim 128 --hidden 256 --layers 3
        --classes 16 --steps 300] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from typing import Any, Optional

import torch
from torch import nn

from fgnn.executors.inline import InlineActor, get
from fgnn.exchange.ps import ParameterServer


def _model(in_dim: int, hidden: int, layers: int, classes: int) -> nn.Module:
    dims = [in_dim] + [hidden] * (layers - 1) + [classes]
    return nn.Sequential(*(nn.Linear(a, b) for a, b in zip(dims, dims[1:])))


def _stats(seconds: list[float]) -> dict[str, float]:
    s = sorted(seconds)
    return {"best_ms": s[0] * 1e3, "median_ms": s[len(s) // 2] * 1e3}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--in-dim", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    for name in ("in_dim", "hidden", "layers", "classes", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")

    threads = torch.get_num_threads()
    torch.manual_seed(0)
    model = _model(args.in_dim, args.hidden, args.layers, args.classes)
    params = sum(q.numel() for q in model.parameters())
    ps = InlineActor(ParameterServer, "fgnn-ps", model, 0.003)
    try:
        get(ps.begin_epoch.remote(0, args.steps, 1))
        grad = torch.randn(params) * 1e-3
        trips, copies = [], []
        for task in range(args.steps):
            t = time.perf_counter()
            claim = get(ps.claim.remote("trainer", -1))  # -1: the reply brings the weights
            get(ps.step.remote(0, task, grad, "trainer"))
            trips.append(time.perf_counter() - t)
            t = time.perf_counter()
            copy.deepcopy(grad), copy.deepcopy(claim.weights)
            copies.append(time.perf_counter() - t)
    finally:
        ps.kill()
        torch.set_num_threads(threads)  # the server sets one thread for the process
    trip, cost = _stats(trips), _stats(copies)
    result = {"bench": "inline_step", "params": params, "steps": args.steps,
              "round_trip": trip, "copies": cost,
              "copies_over_round_trip": cost["best_ms"] / trip["best_ms"],
              "machine": {"python": platform.python_version(), "torch": torch.__version__,
                          "platform": platform.platform()}}
    print(f"{params} parameters: claim + push {trip['best_ms']:.3f} ms best, "
          f"{trip['median_ms']:.3f} ms median over {args.steps} steps; copying the gradient and "
          f"the weights {cost['best_ms']:.3f} ms best "
          f"({result['copies_over_round_trip']:.2f}x the round trip)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
