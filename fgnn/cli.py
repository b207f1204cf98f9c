"""The command line of ``launch.py``: flags → :class:`~fgnn.config.JobConfig` → :class:`fgnn.Job`.

Every flag maps onto one dataclass field (:data:`FLAG_FIELDS`); nothing deeper reads flags. A bad
value exits with status 2 and one line naming the flag and value, before Ray starts where it can,
and no report is written.

Defaults come from a recipe (:mod:`fgnn.recipes`): Kipf & Welling's for ``--model gcn`` on a
Planetoid dataset, FGNN §7.1's otherwise; a flag the user types always wins over the recipe.

``python -m fgnn.cli --markdown`` prints the flag table of ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import threading
import traceback
from typing import Any, NoReturn, Optional, Sequence

from fgnn.config import (
    CACHE_POLICIES,
    DEFAULT_FANOUTS,
    DISK_CACHES,
    DISK_IO,
    FEATURE_TIERS,
    FRONTIERS,
    MODELS,
    MODES,
    SAMPLE_TRANSPORTS,
    EXCHANGES,
    LINK_DECODERS,
    LINK_EXCLUDE,
    REORDERINGS,
    TASKS,
    PLACEMENTS,
    CacheConfig,
    DiskConfig,
    JobConfig,
    LinkConfig,
    ModelConfig,
    RuntimeConfig,
    SamplerConfig,
    TrainConfig,
)
from fgnn.recipes import (FGNN_RECIPE, GAE_RECIPE, KIPF_RECIPE, PINSAGE_REC_RECIPE,
                          apply_recipe, recipe_for)

__all__ = ["build_parser", "config_from_args", "main", "flags_markdown", "FLAG_FIELDS"]

PROG = "launch.py"

#: Flag → dotted JobConfig field it sets.
FLAG_FIELDS: dict[str, str] = {
    "--dataset": "dataset",
    "--data-root": "data_root",
    "--model": "model.name",
    "--hidden": "model.hidden",
    "--dropout": "model.dropout",
    "--input-dropout": "model.input_dropout",
    "--devices": "runtime.devices",
    "--samplers": "runtime.samplers",
    "--mode": "runtime.mode",
    "--queue-size": "runtime.queue_size",
    "--no-switching": "runtime.switching",
    "--address": "runtime.address",
    "--dashboard-host": "runtime.dashboard_host",
    "--gpus-per-device": "runtime.gpus_per_device",
    "--sample-transport": "runtime.sample_transport",
    "--exchange": "runtime.exchange",
    "--stall-timeout": "runtime.stall_timeout_s",
    "--cache-policy": "cache.policy",
    "--presample-epochs": "cache.presample_epochs",
    "--cache-ratio": "cache.cache_ratio",
    "--device-memory": "cache.device_memory_gib",
    "--reorder": "cache.reorder",
    "--feature-tier": "disk.feature_tier",
    "--cpu-buffer": "disk.cpu_buffer",
    "--disk-cache": "disk.cache",
    "--window": "disk.window",
    "--accumulator": "disk.accumulator",
    "--disk-io": "disk.io",
    "--disk-threads": "disk.threads",
    "--placement": "cache.placement",
    "--peer-cost": "cache.peer_cost",
    "--sampler": "sampler.kind",
    "--fanouts": "sampler.fanouts",
    "--relation-fanouts": "sampler.relation_fanouts",
    "--frontier": "sampler.frontier",
    "--num-walks": "sampler.num_walks",
    "--walk-length": "sampler.walk_length",
    "--top-k": "sampler.top_k",
    "--num-layers": "sampler.num_layers",
    "--locality-lt": "sampler.locality_lt",
    "--locality-ut": "sampler.locality_ut",
    "--locality-max-scale": "sampler.locality_max_scale",
    "--batch-size": "train.batch_size",
    "--epochs": "train.epochs",
    "--lr": "train.lr",
    "--weight-decay": "train.weight_decay",
    "--seed": "train.seed",
    "--deterministic": "train.deterministic",
    "--eval-every": "train.eval_every",
    "--eval-batch-size": "train.eval_batch_size",
    "--eval-mode": "train.eval_mode",
    "--patience": "train.patience",
    "--checkpoint-dir": "train.checkpoint_dir",
    "--resume": "train.resume",
    "--report": "report",
    "--save-model": "save_model",
    "--task": "task",
    "--neg-ratio": "link.neg_ratio",
    "--eval-neg-ratio": "link.eval_neg_ratio",
    "--exclude-seed-edges": "link.exclude",
    "--decoder": "link.decoder",
    "--embed-dim": "link.embed_dim",
    "--link-val": "link.val",
    "--link-test": "link.test",
    "--hits-k": "link.hits_k",
    "--link-edge-type": "link.edge_type",
}
_FIELD_FLAGS = {v: k for k, v in FLAG_FIELDS.items()}
_CLASS_PREFIX = {"SamplerConfig": "sampler", "CacheConfig": "cache", "DiskConfig": "disk",
                 "ModelConfig": "model",
                 "TrainConfig": "train", "RuntimeConfig": "runtime", "LinkConfig": "link",
                 "JobConfig": ""}
_SAMPLER_KINDS = ("khop", "weighted", "random_walk", "locality")


# ---------------------------------------------------------------------- value types
def _int_at_least(lo: int):
    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        return v
    parse.__name__ = f"int>={lo}"
    return parse


def _float_in(lo: float, hi: Optional[float], *, lo_open: bool = False, hi_open: bool = False,
              auto: bool = False):
    rng = f"{'(' if lo_open else '['}{lo:g}, {'inf' if hi is None else format(hi, 'g')}" \
          f"{')' if hi_open or hi is None else ']'}"
    what = f"'auto' or a number in {rng}" if auto else f"a number in {rng}"

    def parse(text: str) -> Optional[float]:
        if auto and text == "auto":
            return None
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if (not math.isfinite(v) or v < lo or (lo_open and v == lo) or (hi is not None and v > hi)
                or (hi is not None and hi_open and v == hi)):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    parse.__name__ = "float"
    return parse


def _auto_count(text: str) -> Optional[int]:
    if text == "auto":
        return None
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 1, got {text!r}")
    return int(text)


def _fanouts(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not text.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts) \
            or any(int(p) < 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be comma-separated positive integers such as 15,10,5, got {text!r}")
    return tuple(int(p) for p in parts)


def _relation_fanout(text: str) -> tuple[str, tuple[int, ...]]:
    rel, eq, fan = text.partition("=")
    parts = fan.split(",")
    if not eq or not rel.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be REL=F1,F2,... (a relation, rel or src:rel:dst, and one fanout >= 0 per "
            f"layer) such as cites=10,5, got {text!r}")
    return rel.strip(), tuple(int(p) for p in parts)


def _ks(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not text.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be comma-separated positive integers such as 10,50, got {text!r}")
    return tuple(int(p) for p in parts)


def _dashboard_host(text: str) -> Optional[str]:
    if text.lower() in ("off", "none", ""):
        return None
    return text


# ---------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``launch.py: error: argument --x: ...``.

    Its namespaces also carry ``given_dests``, the destinations of the flags the command line
    typed (a recipe fills only the others)."""

    _probe = False

    def error(self, message: str) -> NoReturn:  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        ns, extras = super().parse_known_args(args, namespace)
        if not self._probe:
            # A twin parser without defaults: what it returns is what the command line typed.
            probe = build_parser(self.prog)
            probe._probe = True
            for action in probe._actions:
                action.default = argparse.SUPPRESS
            ns.given_dests = frozenset(vars(probe.parse_known_args(args)[0]))
        return ns, extras


def _kipf(field: str) -> str:
    """``; kipf-welling: V`` for a help text's default, V the Kipf & Welling recipe's value."""
    value = KIPF_RECIPE.values[field]
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return f"; {KIPF_RECIPE.name}: {text}"


def _gae(field: str) -> str:
    """``; gae: V`` for a help text's default, V the GAE link-prediction recipe's value."""
    value = GAE_RECIPE.values[field]
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return f"; {GAE_RECIPE.name}: {text}"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The ``launch.py`` parser; every default shown in ``--help`` comes from the configs."""
    job, smp, cache, disk = JobConfig(), SamplerConfig(), CacheConfig(), DiskConfig()
    mdl, trn, rt, lnk = ModelConfig(), TrainConfig(), RuntimeConfig(), LinkConfig()
    fan = ", ".join(f"{m} {','.join(map(str, f)) or '(random walks)'}"
                    for m, f in DEFAULT_FANOUTS.items())
    p = _Parser(
        prog=prog,
        description="Train a GNN with the fgnn factored runtime (FGNN/GNNLab design) on Ray. "
                    "With no flags it trains on a small synthetic R-MAT graph. Recipes: "
                    f"--model gcn on cora|citeseer|pubmed uses {KIPF_RECIPE.name} "
                    f"({KIPF_RECIPE.summary}) for every flag not given, and --task link on them "
                    f"(with --model gcn or sage) uses {GAE_RECIPE.name} ({GAE_RECIPE.summary}); "
                    f"--task recsys --model pinsage uses {PINSAGE_REC_RECIPE.name} "
                    f"({PINSAGE_REC_RECIPE.summary}); "
                    f"other datasets and models use {FGNN_RECIPE.name} ({FGNN_RECIPE.summary}). "
                    "The defaults below say where those recipes differ; the run's output and "
                    "report name the recipe that applied.",
        epilog="Example: python launch.py --dataset cora --data-root ../shared/data/planetoid "
               "--model gcn --devices 4 --epochs 30 --report r.json",
    )
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default=job.dataset, metavar="SPEC",
                   help="dataset spec: cora|citeseer|pubmed (files under --data-root), ogb:DIR, "
                        "ondisk:DIR (homogeneous or typed), rmat:key=value,..., "
                        "uniform:key=value,..., hetero:key=value,... (a typed synthetic graph; "
                        "typed datasets train with --model sage), useritem:key=value,... (a "
                        "planted user-item graph for --task recsys) (default: %(default)s)")
    g.add_argument("--data-root", default=job.data_root, metavar="DIR",
                   help="directory holding the dataset files; relative DIRs in the spec are "
                        "resolved against it (default: %(default)s)")

    g = p.add_argument_group("model")
    g.add_argument("--model", default=mdl.name, choices=MODELS,
                   help="GNN model; with --task link the encoder (gcn or sage) "
                        "(default: %(default)s)")
    g.add_argument("--hidden", type=_int_at_least(1), default=mdl.hidden, metavar="H",
                   help=f"hidden size (default: %(default)s{_kipf('model.hidden')}"
                        f"{_gae('model.hidden')})")
    g.add_argument("--dropout", type=_float_in(0.0, 1.0, hi_open=True), default=mdl.dropout,
                   metavar="P", help=f"dropout between layers, in [0, 1) "
                                     f"(default: %(default)s{_kipf('model.dropout')}"
                                     f"{_gae('model.dropout')})")
    g.add_argument("--input-dropout", type=_float_in(0.0, 1.0, hi_open=True),
                   default=mdl.input_dropout, metavar="P",
                   help=f"dropout on the input features, in [0, 1) "
                        f"(default: %(default)s{_kipf('model.input_dropout')})")

    g = p.add_argument_group("task")
    g.add_argument("--task", default=job.task, choices=TASKS,
                   help="node: node classification; link: link prediction on the graph's edges "
                        "(an edge split; seeds are training edges with uniform negatives, "
                        "sampled on the Samplers with the seed edges excluded from their own "
                        "neighbourhood; BCE on the decoder's pair scores; validation and test "
                        "AUC and AP; on a typed dataset the edges of one relation, "
                        "--link-edge-type); recsys: PinSAGE as a recommender on a user-item dataset "
                        "(--dataset useritem:..., --model pinsage): Samplers draw each user's "
                        "(query items, positive) example and item -> user -> item walks, "
                        "Trainers the max-margin loss with hard negatives; validation and test "
                        "recall@10 (= Hits@10) beside the planted ceiling and popularity "
                        "(default: %(default)s)")
    g.add_argument("--neg-ratio", type=_int_at_least(1), default=lnk.neg_ratio, metavar="K",
                   help="link: uniform negatives per training edge, the destination replaced "
                        "(default: %(default)s)")
    g.add_argument("--eval-neg-ratio", type=_int_at_least(1), default=lnk.eval_neg_ratio,
                   metavar="K", help="link: fixed negatives per validation/test edge "
                                     "(default: %(default)s)")
    g.add_argument("--exclude-seed-edges", default=lnk.exclude, choices=LINK_EXCLUDE,
                   help="link: seed edges removed from their own sampled neighbourhood: "
                        "reverse (both directions), self (src->dst only), none (the target "
                        "leaks into its input) (default: %(default)s)")
    g.add_argument("--decoder", default=lnk.decoder, choices=LINK_DECODERS,
                   help="link: pair scorer, dot product or an MLP on h_src*h_dst "
                        "(default: %(default)s)")
    g.add_argument("--embed-dim", type=_int_at_least(1), default=lnk.embed_dim, metavar="D",
                   help=f"link: width of the encoder's output embeddings "
                        f"(default: %(default)s{_gae('link.embed_dim')})")
    g.add_argument("--link-val", type=_float_in(0.0, 1.0, lo_open=True, hi_open=True),
                   default=lnk.val, metavar="V",
                   help="link: share of edges held out for validation (default: %(default)s)")
    g.add_argument("--link-test", type=_float_in(0.0, 1.0, lo_open=True, hi_open=True),
                   default=lnk.test, metavar="T",
                   help="link: share of edges held out for test (default: %(default)s)")
    g.add_argument("--hits-k", type=_ks, default=lnk.hits_k, metavar="K1,K2,...",
                   help="link: also report MRR and Hits@K, each validation/test edge ranked "
                        "against its own --eval-neg-ratio negatives (default: none)")
    g.add_argument("--link-edge-type", default=lnk.edge_type, metavar="SRC,REL,DST",
                   help="link on a typed dataset: the relation whose edges are predicted "
                        "(REL alone when unique); negatives replace the destination by a node "
                        "of type DST, and the reverse relation's twins of the seed and held-out "
                        "edges are excluded too (default: the dataset's own, e.g. "
                        "author,writes,paper on hetero:, or its only relation)")

    g = p.add_argument_group("devices and runtime")
    g.add_argument("--devices", type=_int_at_least(1), default=rt.devices, metavar="N",
                   help="devices N_g: N GPUs when present, N Ray logical GPUs on CPU otherwise "
                        "(default: %(default)s)")
    g.add_argument("--samplers", type=_auto_count, default="auto", metavar="auto|K",
                   help="sampler devices N_s; auto sets N_s = ceil(N_g / (K + 1)) from the "
                        "profiling epoch; must be < --devices in factored mode "
                        "(default: %(default)s)")
    g.add_argument("--mode", default=rt.mode, choices=MODES,
                   help="factored: separate sampler and trainer devices with switching; "
                        "time-sharing: every device samples and trains; single: one device "
                        "alternates (default: %(default)s)")
    g.add_argument("--queue-size", type=_int_at_least(1), default=rt.queue_size, metavar="Q",
                   help="mini-batches in flight in the global queue (default: %(default)s)")
    g.add_argument("--no-switching", action="store_true", default=not rt.switching,
                   help="disable standby trainers on sampler devices (dynamic switching) "
                        "(default: %(default)s)")
    g.add_argument("--address", default=rt.address, metavar="RAY_ADDRESS",
                   help="join an existing Ray cluster (HOST:PORT of the head, ray://HOST:PORT "
                        "or auto) instead of starting one (default: %(default)s)")
    g.add_argument("--dashboard-host", type=_dashboard_host, default=rt.dashboard_host,
                   metavar="HOST",
                   help="interface the Ray dashboard binds to when this job starts Ray; "
                        "0.0.0.0 exposes it, off disables it (default: %(default)s)")

    g.add_argument("--gpus-per-device", type=_float_in(0.0, 1.0, lo_open=True),
                   default=rt.gpus_per_device, metavar="G",
                   help="GPU share of one device; 0.5 puts two devices on each GPU, e.g. "
                        "--devices 2 --gpus-per-device 0.5 runs the factored layout on one GPU "
                        "(default: %(default)s)")
    g.add_argument("--sample-transport", default=rt.sample_transport,
                   choices=SAMPLE_TRANSPORTS,
                   help="how samples reach Trainers: object_store (host memory), cuda_ipc (the "
                        "sample stays on its Sampler's GPU; only when every Trainer is on that "
                        "GPU: --mode single, or a job on one GPU), auto (object_store) "
                        "(default: %(default)s)")
    g.add_argument("--exchange", default=rt.exchange, choices=EXCHANGES,
                   help="gradient exchange among Trainers: server (a parameter-server actor "
                        "takes each step on the CPU) or collective (weights and optimizer on "
                        "every Trainer's device, one gloo/NCCL all-reduce of the gradients per "
                        "step; experimental) (default: %(default)s)")
    g.add_argument("--stall-timeout", type=_float_in(0.0, None, lo_open=True),
                   default=rt.stall_timeout_s, metavar="S",
                   help="stop with an error when no task finishes for S seconds (a hung "
                        "executor) (default: %(default)s)")

    g = p.add_argument_group("cache")
    g.add_argument("--cache-policy", default=cache.policy, choices=CACHE_POLICIES,
                   help="feature-cache hotness: presc (PreSC#K pre-sampling), wrpr (weighted "
                        "reverse PageRank), degree, random, none (default: %(default)s)")
    g.add_argument("--presample-epochs", type=_int_at_least(1), default=cache.presample_epochs,
                   metavar="K", help="K of PreSC#K (default: %(default)s)")
    g.add_argument("--cache-ratio", type=_float_in(0.0, 1.0, auto=True), default="auto",
                   metavar="auto|A",
                   help="cached share of vertices in [0, 1]; auto derives it from the device "
                        "memory (default: %(default)s)")
    g.add_argument("--device-memory", type=_float_in(0.0, None, lo_open=True, auto=True),
                   default="auto", metavar="GiB",
                   help="device memory budget in GiB; auto uses the free device memory, 1 GiB "
                        "on CPU (default: %(default)s)")
    g.add_argument("--placement", default=cache.placement, choices=PLACEMENTS,
                   help="cached rows across Trainers (Song & Jiang §3.2): replicate (Rule 1, "
                        "every Trainer caches the hottest rows), algorithm1 (Rule 2, Algorithm 1 "
                        "spreads them and Trainers read each other's rows as peers), auto (the "
                        "lower expected cost of Eq. 3-4 for --peer-cost and the Trainer count) "
                        "(default: %(default)s)")
    g.add_argument("--peer-cost", type=_float_in(0.0, None), default=cache.peer_cost,
                   metavar="C",
                   help="cost of a peer-device read relative to a host read, C_gpu/C_cpu (the "
                        "alpha of Song & Jiang Eq. 7); >= 1 means no fast link "
                        "(default: %(default)s)")

    g.add_argument("--reorder", default=cache.reorder, choices=REORDERINGS,
                   help="hot-first: renumber graph, features, labels and splits by descending "
                        "hotness of the cache policy at load (DataTiering Algorithm 2), so the "
                        "cached rows are the first ids (default: %(default)s)")

    g = p.add_argument_group("disk tier (GIDS)")
    g.add_argument("--feature-tier", default=disk.feature_tier, choices=FEATURE_TIERS,
                   help="where Trainers read rows that miss the device cache: memory (the host "
                        "matrix; an ondisk: file is memory-mapped) or disk (ondisk: datasets "
                        "only: device software cache, constant CPU buffer, 4 KiB page reads of "
                        "features.npy) (default: %(default)s)")
    g.add_argument("--cpu-buffer", type=_float_in(0.0, 1.0), default=disk.cpu_buffer,
                   metavar="A", help="disk tier: share of rows in the constant CPU buffer, by "
                                     "hotness (default: %(default)s)")
    g.add_argument("--disk-cache", default=disk.cache, choices=DISK_CACHES,
                   help="disk tier: eviction of the device software cache (window buffering, "
                        "LRU, random) (default: %(default)s)")
    g.add_argument("--window", type=_int_at_least(0), default=disk.window, metavar="W",
                   help="disk tier: mini-batches a Trainer leases ahead for window buffering "
                        "(default: %(default)s)")
    g.add_argument("--accumulator", action="store_true", default=disk.accumulator,
                   help="disk tier: merge storage reads of leased mini-batches up to the GIDS "
                        "access accumulator's threshold (default: %(default)s)")
    g.add_argument("--disk-io", default=disk.io, choices=DISK_IO,
                   help="disk tier: direct (O_DIRECT, bypasses the OS page cache; fails on a "
                        "file system without it) or buffered (default: %(default)s)")
    g.add_argument("--disk-threads", type=_int_at_least(1), default=disk.threads, metavar="T",
                   help="disk tier: reads in flight per Trainer (default: %(default)s)")

    g = p.add_argument_group("sampling")
    g.add_argument("--sampler", default=None, choices=_SAMPLER_KINDS,
                   help="sampling algorithm (default: random_walk for pinsage, khop otherwise)")
    g.add_argument("--fanouts", type=_fanouts, default=None, metavar="F1,F2,...",
                   help=f"neighbours per layer, seed hop first (default per model: {fan}"
                        f"{_kipf('sampler.fanouts')}{_gae('sampler.fanouts')})")
    g.add_argument("--relation-fanouts", type=_relation_fanout, nargs="+", default=None,
                   metavar="REL=F1,F2", help="typed datasets: fanouts of one relation in place "
                   "of --fanouts, named rel (when unique) or src:rel:dst, one fanout per layer "
                   "(0 skips the relation at that hop), e.g. --relation-fanouts cites=10,5 "
                   "written_by=5,0; relations left out use --fanouts (default: none)")
    g.add_argument("--frontier", choices=FRONTIERS, default=smp.frontier,
                   help="k-hop samplers: which vertices draw neighbours at each hop: all of the "
                        "sample so far (DGL blocks) or only the new ones, each layer reusing "
                        "the edges before it (PyG's NeighborLoader) (default: %(default)s"
                        f"{_gae('sampler.frontier')})")
    g.add_argument("--num-walks", type=_int_at_least(1), default=smp.num_walks, metavar="W",
                   help="random walks per vertex, pinsage (default: %(default)s)")
    g.add_argument("--walk-length", type=_int_at_least(1), default=smp.walk_length, metavar="L",
                   help="steps per random walk, pinsage (default: %(default)s)")
    g.add_argument("--top-k", type=_int_at_least(1), default=smp.top_k, metavar="T",
                   help="most-visited neighbours kept per vertex, pinsage (default: %(default)s)")
    g.add_argument("--num-layers", type=_int_at_least(1), default=smp.num_layers, metavar="N",
                   help="random-walk layers, pinsage (default: %(default)s)")
    g.add_argument("--locality-lt", type=_float_in(0.0, 1.0), default=smp.locality_lt,
                   metavar="LT",
                   help="locality sampler, Algorithm 2: when the data-loading share of an epoch "
                        "is below LT the scale s steps back (default: %(default)s)")
    g.add_argument("--locality-ut", type=_float_in(0.0, 1.0), default=smp.locality_ut,
                   metavar="UT",
                   help="locality sampler, Algorithm 2: when the share is above UT, s doubles "
                        "(default: %(default)s)")
    g.add_argument("--locality-max-scale", type=_float_in(1.0, None),
                   default=smp.locality_max_scale, metavar="MAXS",
                   help="locality sampler, Algorithm 2: the largest scale s "
                        "(default: %(default)s)")

    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=_int_at_least(1), default=trn.batch_size, metavar="B",
                   help=f"seed vertices (training edges with --task link) per mini-batch = per "
                        f"optimizer step at any device count; each mini-batch is cut into one "
                        f"task per device (default: %(default)s{_gae('train.batch_size')})")
    g.add_argument("--epochs", type=_int_at_least(1), default=trn.epochs, metavar="E",
                   help=f"training epochs (default: %(default)s{_kipf('train.epochs')}"
                        f"{_gae('train.epochs')})")
    g.add_argument("--lr", type=_float_in(0.0, None, lo_open=True), default=trn.lr,
                   metavar="LR", help=f"learning rate (default: %(default)s{_kipf('train.lr')}"
                                      f"{_gae('train.lr')})")
    g.add_argument("--weight-decay", type=_float_in(0.0, None), default=trn.weight_decay,
                   metavar="WD",
                   help=f"weight decay (default: %(default)s{_kipf('train.weight_decay')}"
                        f"{_gae('train.weight_decay')})")
    g.add_argument("--seed", type=int, default=trn.seed, help="random seed (default: %(default)s)")
    g.add_argument("--deterministic", action="store_true", default=trn.deterministic,
                   help="torch's deterministic algorithms in every executor: a single-mode CUDA "
                        "run repeats exactly with its seed, at some speed; a single-mode CPU run "
                        "repeats without it; with several Trainers a run repeats only "
                        "statistically (default: %(default)s)")
    g.add_argument("--eval-every", type=_int_at_least(1), default=trn.eval_every, metavar="E",
                   help="validate every E epochs (default: %(default)s)")
    g.add_argument("--eval-batch-size", type=_auto_count, default="auto", metavar="auto|B",
                   help="seeds per evaluation chunk; auto uses max(--batch-size, min(4096, "
                        "2 MiB / feature row bytes)) (default: %(default)s)")
    g.add_argument("--eval-mode", default=trn.eval_mode, choices=("sampled", "layerwise"),
                   help="sampled: score chunks with the training sampler on the Samplers and "
                        "Trainers; layerwise: every neighbour, layer by layer, on the Trainers "
                        "(default: %(default)s)")
    g.add_argument("--patience", type=_int_at_least(1), default=trn.patience, metavar="P",
                   help="stop after P validations without improvement; unset trains all epochs "
                        "(default: %(default)s)")
    g.add_argument("--checkpoint-dir", default=trn.checkpoint_dir, metavar="DIR",
                   help="write a checkpoint here after every epoch (default: %(default)s)")
    g.add_argument("--resume", action="store_true", default=trn.resume,
                   help="resume from the latest checkpoint in --checkpoint-dir "
                        "(default: %(default)s)")

    g = p.add_argument_group("output")
    g.add_argument("--report", default=job.report, metavar="OUT.json",
                   help="write the JSON run report here and its plot beside it (OUT.png); "
                        "unset writes none (default: %(default)s)")
    g.add_argument("--save-model", default=job.save_model, metavar="PATH",
                   help="write the best-validation weights with the model, sampler and dataset "
                        "metadata and the final scores here; fgnn.load_model(PATH) reads it "
                        "(default: %(default)s)")
    g.add_argument("--no-progress", action="store_true", default=False,
                   help="no progress bars or per-epoch lines (default: %(default)s)")
    g.add_argument("--debug", action="store_true", default=False,
                   help="on a failure, print the Python traceback after the one-line error "
                        "(default: %(default)s)")
    return p


# ---------------------------------------------------------------------- flags → config
def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Map parsed flags onto a :class:`JobConfig`, then fill the recipe of the dataset and model
    (:func:`fgnn.recipes.recipe_for`) into the fields whose flags ``args.given_dests`` does not
    name (a namespace without ``given_dests``, built by hand, gets no recipe).

    Raises:
        ValueError: from a config's own validation (e.g. ``--samplers`` >= ``--devices``).
    """
    kind = args.sampler or ("random_walk" if args.model == "pinsage" else "khop")
    if kind == "random_walk" and args.fanouts is not None:
        raise ValueError(f"SamplerConfig.fanouts: not used by random-walk sampling (PinSAGE); "
                         f"set --num-layers, --num-walks, --walk-length, --top-k instead. "
                         f"Received fanouts={','.join(map(str, args.fanouts))} instead.")
    fanouts = args.fanouts if args.fanouts is not None else DEFAULT_FANOUTS[args.model]
    if kind != "random_walk" and not fanouts:
        fanouts = DEFAULT_FANOUTS["gcn"]
    config = JobConfig(
        dataset=args.dataset,
        data_root=args.data_root,
        sampler=SamplerConfig(kind=kind, fanouts=tuple(fanouts), num_walks=args.num_walks,
                              walk_length=args.walk_length, top_k=args.top_k,
                              num_layers=args.num_layers, locality_lt=args.locality_lt,
                              locality_ut=args.locality_ut,
                              locality_max_scale=args.locality_max_scale,
                              frontier=args.frontier,
                              relation_fanouts=_relation_fanouts(
                                  getattr(args, "relation_fanouts", None))),
        cache=CacheConfig(policy=args.cache_policy, presample_epochs=args.presample_epochs,
                          cache_ratio=_auto(args.cache_ratio),
                          device_memory_gib=_auto(args.device_memory), reorder=args.reorder,
                          placement=args.placement, peer_cost=args.peer_cost),
        disk=DiskConfig(feature_tier=args.feature_tier, cpu_buffer=args.cpu_buffer,
                        cache=args.disk_cache, window=args.window, accumulator=args.accumulator,
                        io=args.disk_io, threads=args.disk_threads),
        model=ModelConfig(name=args.model, hidden=args.hidden, dropout=args.dropout,
                          input_dropout=args.input_dropout),
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                          weight_decay=args.weight_decay, seed=args.seed,
                          deterministic=args.deterministic, eval_every=args.eval_every,
                          eval_batch_size=_auto(args.eval_batch_size),
                          eval_mode=args.eval_mode, patience=args.patience,
                          checkpoint_dir=args.checkpoint_dir, resume=args.resume),
        runtime=RuntimeConfig(mode=args.mode, devices=args.devices,
                              samplers=_auto(args.samplers), queue_size=args.queue_size,
                              switching=not args.no_switching, address=args.address,
                              dashboard_host=args.dashboard_host,
                              gpus_per_device=args.gpus_per_device,
                              sample_transport=args.sample_transport,
                              exchange=args.exchange,
                              stall_timeout_s=args.stall_timeout),
        report=args.report,
        save_model=args.save_model,
        task=args.task,
        link=LinkConfig(val=args.link_val, test=args.link_test, neg_ratio=args.neg_ratio,
                        eval_neg_ratio=args.eval_neg_ratio, exclude=args.exclude_seed_edges,
                        decoder=args.decoder, embed_dim=args.embed_dim, hits_k=args.hits_k,
                        edge_type=getattr(args, "link_edge_type", None)),
    )
    given = getattr(args, "given_dests", None)
    if given is None:
        return config
    fields = {FLAG_FIELDS[flag] for flag in (f"--{d.replace('_', '-')}" for d in given)
              if flag in FLAG_FIELDS}
    return apply_recipe(config, recipe_for(args.dataset, args.model, args.task), fields)


def _relation_fanouts(pairs: Optional[list[tuple[str, tuple[int, ...]]]]
                      ) -> Optional[dict[str, tuple[int, ...]]]:
    """``--relation-fanouts`` as ``SamplerConfig.relation_fanouts`` (a relation named twice is
    refused)."""
    if not pairs:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for rel, fan in pairs:
        if rel in out:
            raise ValueError(f"SamplerConfig.relation_fanouts: relation {rel!r} is given twice")
        out[rel] = fan
    return out


def _auto(v: Any) -> Any:
    return None if v == "auto" else v


def flag_for_error(err: ValueError) -> str:
    """Rewrite a config or job error as ``argument --flag: ...`` (the flag the user typed)."""
    from fgnn.job import JobConfigError
    if isinstance(err, JobConfigError):
        flag = _FIELD_FLAGS.get(err.field)
        if flag:
            return f"argument {flag}: {err.why}. Received {flag}={err.value!r}."
        return str(err)
    m = re.match(r"^(\w+)\.(\w+): (.*)$", str(err), re.S)
    if m and m.group(1) in _CLASS_PREFIX:
        prefix = _CLASS_PREFIX[m.group(1)]
        field = f"{prefix}.{m.group(2)}" if prefix else m.group(2)
        flag = _FIELD_FLAGS.get(field)
        if flag:
            return f"argument {flag}: {m.group(3)}"
    return str(err)


# ---------------------------------------------------------------------- docs
def flags_markdown(parser: Optional[argparse.ArgumentParser] = None) -> str:
    """The flag table of ``docs/cli.md``, generated from the parser (a test keeps them equal)."""
    parser = parser or build_parser()
    rows = ["| flag | value | default | sets | description |",
            "|---|---|---|---|---|"]
    for action in parser._actions:  # argparse has no public iterator over actions
        if not action.option_strings or action.dest == "help":
            continue
        flag = max(action.option_strings, key=len)
        if action.choices:
            value = "{" + ",".join(map(str, action.choices)) + "}"
        elif action.nargs == 0:
            value = ""
        else:
            value = action.metavar or action.dest.upper()
        help_text = (action.help or "").replace("%(default)s", str(action.default))
        m = re.search(r"\s*\(default:? ?(.*)\)$", help_text)
        default = m.group(1) if m else str(action.default)
        desc = help_text[:m.start()] if m else help_text
        field = FLAG_FIELDS.get(flag, "")
        sets = f"`{field}`" if field else "-"
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        rows.append(f"| `{flag}` | {cell(f'`{value}`' if value else '')} | "
                    f"{cell(f'`{default}`')} | {sets} | {cell(desc)} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------- entry point
def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Parse flags, validate, run the job; returns the exit status (bad input exits 2)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as e:
        parser.error(flag_for_error(e))

    from fgnn.atomic import WriteError
    from fgnn.executors._epoch import RuntimeFailure
    from fgnn.executors._resume import RunFinished
    from fgnn.job import Job, JobConfigError
    from fgnn.outputs import OutputsError
    job = Job(config, progress=not args.no_progress)
    said = threading.Lock()  # held by whoever prints the failure line: this thread or the watcher
    job.on_node_death = lambda failure: _exit_at_once(parser.prog, str(failure), said)
    try:
        job.run()  # validates first: fast checks before any data is loaded or Ray starts
    except JobConfigError as e:
        if args.debug:
            traceback.print_exc()
        parser.error(flag_for_error(e))
    except OutputsError as e:  # the run finished; some outputs were written, some not
        return _fail_line(parser.prog, e.describe(_output_name), args.debug)
    except RunFinished as e:  # --resume of a finished run: its result, nothing to do
        print(f"fgnn: {e}", flush=True)
        return 0
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; no report written", file=sys.stderr)
        return 130
    except (WriteError, RuntimeFailure) as e:  # a full disk; a death or hang (with checkpoint)
        return _fail_line(parser.prog, str(e), args.debug, said)
    except Exception as e:  # anything else: one line too, the traceback with --debug
        return _fail_line(parser.prog, f"{type(e).__name__}: {_first_line(e)} (--debug prints "
                                       f"the traceback)", args.debug, said)
    return 0


def _output_name(field: str, what: str) -> str:
    """How the CLI calls an output in a message: the flag, or ``plot`` for the report's PNG."""
    return _FIELD_FLAGS[field] if what in ("model", "report") else what


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


def _fail_line(prog: str, message: str, debug: bool,
               said: Optional[threading.Lock] = None) -> int:
    """Print ``PROG: error: MESSAGE`` (after the traceback with ``--debug``); returns 1.

    ``said``: taken before printing; when the raylet watcher holds it, its line is the job's
    and it is ending the process (:func:`_exit_at_once`), so this one is not printed.
    """
    if said is not None and not said.acquire(blocking=False):
        said.acquire(timeout=_WATCHER_EXIT_S)  # the watcher exits the process meanwhile
        return 1
    if debug:
        traceback.print_exc()
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return 1


#: Most seconds the main thread waits for the raylet watcher to end the process.
_WATCHER_EXIT_S = 30.0


def _exit_at_once(prog: str, message: str, said: threading.Lock) -> None:
    """The raylet died (:attr:`fgnn.job.Job.on_node_death`): print the job's one line and end
    the process with status 1 now, before Ray's core worker ends it without a word. The node's
    other processes share the driver's fate (Ray starts them with ``PR_SET_PDEATHSIG``); the
    checkpoint in the line is already written. Does nothing when the main thread is printing
    its own failure line."""
    if not said.acquire(blocking=False):
        return
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def _module_main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fgnn.cli",
                                 description="Print the CLI flag table of docs/cli.md.")
    ap.add_argument("--markdown", action="store_true", help="print the markdown flag table")
    a = ap.parse_args(argv)
    if a.markdown:
        sys.stdout.write(flags_markdown())
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(_module_main())
