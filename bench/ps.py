"""Cost of the gradient exchange per step, as a share of epoch time: the parameter server
against the collective exchange, in one run (issues 12 and 18).

Runs the factored runtime at the paper's batch size (FGNN §7.1: 8000, GraphSAGE hidden 256,
fanouts 25, 10) once per design (``runtime.exchange``) and reads each Trainer's records. Per task,
``sync_s`` is the exchange as the Trainer's training thread sees it, by one rule for both designs
(since 2026-11-25): the time on the task's path spent moving gradients, slots and weights and
taking the step, and not the time spent waiting for other Trainers' work. A claim that has to
wait for the current step to close waits for other Trainers' work until that step's last
gradient was ready (its Trainer stamps the wall time on the push or delivery); the rest of its
wait is exchange (:func:`fgnn.exchange.ps.step_wait`). With the server the exchange is then: the
claim's reply (with the weights when they changed; after a close, the last push's transit, the
server's sum and Adam step) and the push of the gradient. With the collective: the wait for the
slot's grant (requested while the previous task computed; granted in the ledger's events, which
the Trainer's reducer reads from the store, most often the closing step's ``reduce``), the wait
for the previous step's sum over the group (from the members' gradient rings in shared memory,
CPU members on one host) and Adam step on the Trainer's own device, any wait for a free row of
its ring, and handing the delivery to the sender thread. Waiting for other Trainers' work (``step_wait_s``) is
reported on its own, and so is every attempt that found no slot within the server's 1 s wait.
Ratios are taken over executor-time: the sum over tasks divided by the sum over training executors of the
epoch time. The goal of issue 18: the collective's share at most half the server's (``ratio`` <=
0.5). The epoch times are printed beside the shares, because a share also falls when the epoch
gets slower; the exchange's parts per task (``x_*`` fields of the records) are printed per epoch.

Example::

    .venv/bin/python bench/ps.py --dataset rmat:scale=17,edge_factor=16,feat_dim=128,\\
train_frac=0.25,seed=0 --devices 4 --epochs 3 --json runs/bench_ps.json

Prints one line per epoch and a JSON object (``--json`` also writes it, atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fgnn.config import (EXCHANGES, CacheConfig, JobConfig, ModelConfig,  # noqa: E402
                         RuntimeConfig, SamplerConfig, TrainConfig)
from fgnn.data import load_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime  # noqa: E402

__all__ = ["exchange_shares", "main", "run_design"]

#: The issue-12 goal: exchange below this share of epoch time.
GOAL = 0.05
#: The issue-18 goal: the collective's share over the server's, at most this.
RATIO_GOAL = 0.5


def exchange_shares(stats: Any, detail: dict[str, Any]) -> dict[str, Any]:
    """Exchange and step-wait shares of one epoch's executor-time.

    Args:
        stats: the epoch's :class:`~fgnn.monitor.stats.EpochStats`.
        detail: the epoch's entry of ``Runtime.details``.
    """
    trainers = max(1, len(detail["batches_by"]))
    executor_s = trainers * stats.time_s
    parts = detail.get("exchange_parts", {})
    return {"epoch": stats.epoch, "time_s": stats.time_s, "tasks": stats.batches,
            "steps": detail["steps"], "trainers": trainers,
            "sync_s": detail["sync_s"], "step_wait_s": detail["step_wait_s"],
            "ps_busy_s": detail["ps_busy_s"],
            "sync_per_task_ms": 1e3 * detail["sync_s"] / max(1, stats.batches),
            "parts_per_task_ms": {k[2:-2]: 1e3 * v / max(1, stats.batches)
                                  for k, v in sorted(parts.items())},
            "exchange_share": detail["sync_s"] / executor_s,
            "step_wait_share": detail["step_wait_s"] / executor_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset",
                    default="rmat:scale=17,edge_factor=16,feat_dim=128,train_frac=0.25,seed=0")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--samplers", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--model", default="sage")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--exchange", default="both", choices=("both",) + EXCHANGES,
                    help="the design(s) to measure (default: both, in one run)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the designs this many times, alternating (server, collective, "
                         "server, ...), and compare the means: load on a shared machine drifts "
                         "within minutes")
    ap.add_argument("--json", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    ds = load_dataset(args.dataset)
    designs = EXCHANGES if args.exchange == "both" else (args.exchange,)
    out: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "json"},
                           "goal": GOAL, "ratio_goal": RATIO_GOAL}
    runs: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    for _ in range(max(1, args.rounds)):
        for design in designs:
            runs[design].append(run_design(args, ds, design))
    for design in designs:
        out[design] = _mean_of(runs[design])
        print(f"{design}: exchange {100 * out[design]['exchange_share']:.2f}% of epoch time, "
              f"{out[design]['sync_per_task_ms']:.1f} ms per task, epoch "
              f"{out[design]['epoch_time_s']:.2f} s (mean of {len(runs[design])} run(s), after "
              f"the warm-up)")
    if len(designs) == 2:
        ratio = out["collective"]["exchange_share"] / max(out["server"]["exchange_share"], 1e-12)
        out.update(ratio=ratio, meets_ratio_goal=ratio <= RATIO_GOAL,
                   epoch_time_ratio=out["collective"]["epoch_time_s"]
                   / max(out["server"]["epoch_time_s"], 1e-12))
        print(f"collective / server exchange share: {ratio:.2f} (goal <= {RATIO_GOAL}); "
              f"epoch time {out['epoch_time_ratio']:.2f}")
    print(json.dumps(out, default=str))
    if args.json:
        from fgnn.atomic import atomic_open

        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return out


def run_design(args: argparse.Namespace, ds: Any, exchange: str) -> dict[str, Any]:
    """Train with ``runtime.exchange=exchange``; per-epoch rows and the mean shares after the
    uncached warm-up."""
    cfg = JobConfig(
        dataset=args.dataset,
        model=ModelConfig(args.model, hidden=args.hidden),
        sampler=SamplerConfig(fanouts=(25, 10) if args.model == "sage" else (15, 10, 5)),
        cache=CacheConfig(policy="degree", cache_ratio=0.2),
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=0.003, seed=0),
        runtime=RuntimeConfig(mode="factored", devices=args.devices, samplers=args.samplers,
                              exchange=exchange))
    rt = Runtime(cfg, ds, evaluate=False)
    result = rt.run()
    rows = [exchange_shares(s, d) for s, d in zip(result.epochs, rt.details)]
    for r in rows:
        print(f"{exchange} epoch {r['epoch']}: {r['time_s']:.2f} s, {r['tasks']} tasks / "
              f"{r['steps']} steps on {r['trainers']} trainers; exchange "
              f"{r['sync_per_task_ms']:.1f} ms per task = {100 * r['exchange_share']:.2f}% of "
              f"executor-time; waiting for steps {100 * r['step_wait_share']:.2f}%; per task "
              + ", ".join(f"{k} {v:.1f}" for k, v in r["parts_per_task_ms"].items()) + " ms")
    warm = {d["epoch"] for d in rt.details if d["warmup"]}
    later = [r for r in rows if r["epoch"] not in warm] or rows  # after the uncached warm-up
    share = sum(r["exchange_share"] for r in later) / len(later)
    print(f"{exchange}: gradient exchange {100 * share:.2f}% of epoch time (goal < "
          f"{100 * GOAL:.0f}%), epochs {[r['epoch'] for r in later]}")
    parts = {k: sum(r["parts_per_task_ms"].get(k, 0.0) for r in later) / len(later)
             for k in later[0]["parts_per_task_ms"]}
    return {"allocation": result.allocation, "epochs": rows, "exchange_share": share,
            "parts_per_task_ms": parts,
            "meets_goal": share < GOAL,
            "step_wait_share": sum(r["step_wait_share"] for r in later) / len(later),
            "sync_per_task_ms": sum(r["sync_per_task_ms"] for r in later) / len(later),
            "epoch_time_s": sum(r["time_s"] for r in later) / len(later)}


def _mean_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One design's result over its runs: the mean shares, per-task time and epoch time; the
    runs themselves under ``runs`` (one run: that run's result as it is)."""
    if len(runs) == 1:
        return runs[0]
    keys = ("exchange_share", "step_wait_share", "sync_per_task_ms",
            "epoch_time_s")
    mean = {k: sum(r[k] for r in runs) / len(runs) for k in keys}
    return {**mean, "meets_goal": mean["exchange_share"] < GOAL, "runs": runs}


if __name__ == "__main__":
    main()
