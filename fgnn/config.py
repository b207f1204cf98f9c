"""Validated dataclass configs, one per component; ``launch.py`` only maps flags onto these.

Each config checks itself in ``__post_init__`` and raises ``ValueError`` quoting the field and the
value it received. A field's ``launch.py`` flag is declared with it (:func:`fgnn.flags.flag`: the
help sentence, the flag's name, value parser, choices); :mod:`fgnn.cli` builds the parser from
these, so a new field with flag metadata is a new flag.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

from fgnn.fieldtypes import check_types
from fgnn.given import track_given
from fgnn.flags import (RelationFanouts, auto_count, fanout_list, flag, float_in, host_or_off,
                        int_at_least, k_list, relation_fanout, section, subset_count)

__all__ = [
    "SamplerConfig",
    "CacheConfig",
    "DiskConfig",
    "ModelConfig",
    "TrainConfig",
    "RuntimeConfig",
    "LinkConfig",
    "JobConfig",
    "auto_batch_size",
]

MODELS = ("gcn", "sage", "pinsage", "gat")
MODES = ("factored", "time-sharing", "single")
SAMPLER_KINDS = ("khop", "weighted", "random_walk", "locality")
EVAL_MODES = ("sampled", "layerwise", "none")
CACHE_POLICIES = ("presc", "wrpr", "degree", "random", "none")
SAMPLE_TRANSPORTS = ("auto", "object_store", "cuda_ipc")
#: Gradient exchange among Trainers (fgnn.exchange.collective, fgnn.exchange.ps).
EXCHANGES = ("server", "collective")
REORDERINGS = ("none", "hot-first")
FEATURE_TIERS = ("memory", "disk")
DISK_CACHES = ("window", "lru", "random")
DISK_IO = ("direct", "buffered")
PLACEMENTS = ("replicate", "algorithm1", "auto")
#: Where a Trainer reads the rows its peers cache (:mod:`fgnn.executors.peers`).
PEER_TIERS = ("auto", "host")
#: Feature rows across a cluster's nodes (:mod:`fgnn.cache.node_partition`).
FEATURE_PARTITIONS = ("replicate", "hotness", "hash")
#: k-hop frontiers: DGL blocks (every vertex so far samples) or PyG's NeighborLoader (new ones).
FRONTIERS = ("all", "new")
#: Named sets of defaults (:mod:`fgnn.recipes`): FGNN §7.1, Kipf & Welling's Planetoid GCN, GAE,
#: the PinSAGE recommender, Veličković et al.'s Planetoid GAT.
RECIPES = ("fgnn-7.1", "kipf-welling", "gae", "pinsage-rec", "velickovic")
#: ``JobConfig.recipe`` besides a recipe's name: ``auto`` (:class:`fgnn.Job` picks the recipe
#: of the dataset, model and task, as ``launch.py`` does) or ``off`` (none: the config as built).
RECIPE_CHOICES = ("auto", "off") + RECIPES
#: What a job learns: ``node`` classification or ``link`` prediction (:mod:`fgnn.tasks.link`).
TASKS = ("node", "link", "recsys")
_TASK_NAMES: list[str] = list(TASKS)


def task_names() -> tuple[str, ...]:
    """The tasks a job may name: the built-in :data:`TASKS` and those registered since."""
    return tuple(_TASK_NAMES)


def register_task_name(name: str) -> None:
    """Accept ``JobConfig.task=name`` from now on (:func:`fgnn.tasks.register_task` calls it)."""
    if name not in _TASK_NAMES:
        _TASK_NAMES.append(name)
#: Seed edges kept out of a link sample's neighbourhood (:data:`fgnn.link.sampler.EXCLUDE_MODES`).
LINK_EXCLUDE = ("none", "self", "reverse")
#: Link scorers (:data:`fgnn.link.decoders.DECODERS`).
LINK_DECODERS = ("dot", "mlp")

#: FGNN §7.1 defaults per model.
DEFAULT_FANOUTS = {"gcn": (15, 10, 5), "sage": (25, 10), "pinsage": (), "gat": (10, 10)}
_FANOUTS_PER_MODEL = ", ".join(f"{m} {','.join(map(str, f)) or '(random walks)'}"
                               for m, f in DEFAULT_FANOUTS.items())

_UNIT, _UNIT_OPEN = float_in(0.0, 1.0), float_in(0.0, 1.0, hi_open=True)
_SHARE = float_in(0.0, 1.0, lo_open=True, hi_open=True)


def _fail(cls: str, name: str, value: Any, why: str) -> None:
    raise ValueError(f"{cls}.{name}: {why}. Received {name}={value!r} instead.")


def _finite(obj: Any, *names: str) -> None:
    """Refuse NaN and ±inf in the float fields ``names`` of a config (``None`` is left to the
    field's own check): ``lr=inf`` would train to a NaN loss without a word."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and isinstance(value, (int, float)) and not math.isfinite(value):
            _fail(type(obj).__name__, name, value, "must be a finite number")


@track_given
@dataclass
class SamplerConfig:
    """How mini-batches are sampled."""

    kind: str = flag("khop", "sampling algorithm", name="--sampler", choices=SAMPLER_KINDS,
                     cli_default=None,
                     default_text="default: random_walk for pinsage, khop otherwise")
    """``khop`` (uniform), ``weighted`` (edge-weight proportional), ``random_walk`` (PinSAGE),
    or ``locality`` (Song & Jiang locality-aware k-hop)."""
    fanouts: tuple[int, ...] = flag((15, 10, 5), "neighbours per layer, seed hop first",
                                    type=fanout_list, metavar="F1,F2,...", cli_default=None,
                                    default_text=f"default per model: {_FANOUTS_PER_MODEL}")
    """Neighbours per vertex per layer, input layer last (the paper's order: seed hop first)."""
    relation_fanouts: Optional[dict[str, tuple[int, ...]]] = flag(
        None, "typed datasets: fanouts of one relation in place of --fanouts, named rel (when "
        "unique) or src:rel:dst, one fanout per layer (0 skips the relation at that hop), e.g. "
        "--relation-fanouts cites=10,5 written_by=5,0; relations left out use --fanouts",
        type=relation_fanout, nargs="+", action=RelationFanouts, metavar="REL=F1,F2",
        default_text="default: none")
    """Typed datasets: relation -> its own fanouts (one per layer, seed hop first) in place of
    ``fanouts``; a relation is named by ``rel`` when that is unique, else ``src:rel:dst``.
    Relations left out use ``fanouts``; a fanout of 0 skips the relation at that hop."""
    frontier: str = flag(
        "all", "k-hop samplers: which vertices draw neighbours at each hop: all of the sample so "
        "far (DGL blocks) or only the new ones, each layer reusing the edges before it (PyG's "
        "NeighborLoader)", choices=FRONTIERS)
    """k-hop samplers: which vertices draw neighbours at each hop. ``all`` vertices of the
    sample so far (DGL blocks, GNNLab) or only the ``new`` ones of the previous hop, every layer
    reusing the edges sampled before it (PyG's ``NeighborLoader``)."""
    num_walks: int = flag(4, "random walks per vertex, pinsage", type=int_at_least(1),
                          metavar="W")
    """Random walks per vertex (PinSAGE)."""
    walk_length: int = flag(3, "steps per random walk, pinsage", type=int_at_least(1),
                            metavar="L")
    """Steps per random walk (PinSAGE)."""
    top_k: int = flag(5, "most-visited neighbours kept per vertex, pinsage",
                      type=int_at_least(1), metavar="T")
    """Most-visited vertices kept per vertex (PinSAGE)."""
    num_layers: int = flag(3, "random-walk layers, pinsage", type=int_at_least(1), metavar="N")
    """Layers of random-walk neighbourhoods (PinSAGE)."""
    locality_lt: float = flag(
        0.15, "locality sampler, Algorithm 2: when the data-loading share of an epoch is below "
        "LT the scale s steps back", type=_UNIT, metavar="LT")
    """``lt`` of Song & Jiang Algorithm 2 (locality sampler): below it, ``s`` steps back."""
    locality_ut: float = flag(
        0.2, "locality sampler, Algorithm 2: when the share is above UT, s doubles",
        type=_UNIT, metavar="UT")
    """``ut`` of Algorithm 2: above it, ``s`` doubles."""
    locality_max_scale: float = flag(8.0, "locality sampler, Algorithm 2: the largest scale s",
                                     type=float_in(1.0, None), metavar="MAXS")
    """``MAXS`` of Algorithm 2: the largest scale factor ``s``."""

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "locality_lt", "locality_ut", "locality_max_scale")
        if self.kind not in SAMPLER_KINDS:
            _fail("SamplerConfig", "kind", self.kind,
                  "must be one of khop, weighted, random_walk, locality")
        if self.relation_fanouts is not None:
            self._check_relation_fanouts()
        if self.kind != "random_walk":
            if not self.fanouts:
                _fail("SamplerConfig", "fanouts", self.fanouts, "must not be empty")
            if any(f <= 0 for f in self.fanouts):
                _fail("SamplerConfig", "fanouts", self.fanouts, "must all be positive")
        for name in ("num_walks", "walk_length", "top_k", "num_layers"):
            if getattr(self, name) < 1:
                _fail("SamplerConfig", name, getattr(self, name), "must be >= 1")
        for name in ("locality_lt", "locality_ut"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                _fail("SamplerConfig", name, getattr(self, name), "must lie in [0, 1]")
        if self.locality_lt > self.locality_ut:
            _fail("SamplerConfig", "locality_lt", self.locality_lt,
                  f"must be <= locality_ut={self.locality_ut}")
        if not self.locality_max_scale >= 1.0:
            _fail("SamplerConfig", "locality_max_scale", self.locality_max_scale, "must be >= 1")
        if self.frontier not in FRONTIERS:
            _fail("SamplerConfig", "frontier", self.frontier,
                  f"must be one of {', '.join(FRONTIERS)}")
        if self.frontier == "new" and self.kind not in ("khop", "weighted"):
            _fail("SamplerConfig", "frontier", self.frontier,
                  f"'new' is for the k-hop samplers (khop, weighted), not kind={self.kind!r}")


    def _check_relation_fanouts(self) -> None:
        rf = self.relation_fanouts
        if not isinstance(rf, dict) or not rf:
            _fail("SamplerConfig", "relation_fanouts", rf, "must be a non-empty dict "
                  "relation -> fanouts (or None)")
        out = {}
        for k, v in rf.items():
            if not isinstance(k, str) or not k:
                _fail("SamplerConfig", "relation_fanouts", rf, f"names relation {k!r}; "
                      f"relations are rel or src:rel:dst strings")
            try:
                fan = tuple(operator.index(f) for f in v)  # 10.5 is no fanout
            except (TypeError, ValueError):
                fan = ()
            if len(fan) != len(self.fanouts) or any(f < 0 for f in fan):
                _fail("SamplerConfig", "relation_fanouts", rf,
                      f"gives {k!r} {v!r}; each relation needs {len(self.fanouts)} fanouts >= 0 "
                      f"(one per layer, as fanouts={list(self.fanouts)})")
            out[k] = fan
        self.relation_fanouts = out


@track_given
@dataclass
class CacheConfig:
    """The trainer-side feature cache (FGNN §6)."""

    policy: str = flag("presc", "feature-cache hotness: presc (PreSC#K pre-sampling), wrpr "
                       "(weighted reverse PageRank), degree, random, none", name="--cache-policy",
                       choices=CACHE_POLICIES)
    """Hotness policy: ``presc``, ``wrpr``, ``degree``, ``random`` or ``none``."""
    presample_epochs: int = flag(1, "K of PreSC#K", type=int_at_least(1), metavar="K")
    """K of PreSC#K."""
    cache_ratio: Optional[float] = flag(
        None, "cached share of vertices in [0, 1]; auto derives it from the device memory",
        type=float_in(0.0, 1.0, auto=True), cli_default="auto", metavar="auto|A")
    """α, the cached share of vertices; ``None`` chooses it from ``device_memory_gib``."""
    device_memory_gib: Optional[float] = flag(
        None, "device memory budget in GiB; auto uses the free device memory, on CPU a quarter "
        "of the host's memory (cgroup) over the Trainers, at most 1 GiB",
        name="--device-memory", type=float_in(0.0, None, lo_open=True, auto=True),
        cli_default="auto", metavar="GiB")
    """Device memory budget; ``None`` uses the device's free memory (on CPU, a quarter of the
    host's memory over the Trainers, at most 1 GiB: :func:`fgnn.cache.budget.logical_device_bytes`)."""
    placement: str = flag(
        "replicate", "cached rows across Trainers (Song & Jiang §3.2): replicate (Rule 1, every "
        "Trainer caches the hottest rows), algorithm1 (Rule 2, Algorithm 1 spreads them and "
        "Trainers read each other's rows as peers), auto (the lower expected cost of Eq. 3-4 "
        "for --peer-cost and the Trainer count)", choices=PLACEMENTS)
    """Cached rows across Trainers (Song & Jiang §3.2): ``replicate`` (Rule 1: every Trainer
    caches the hottest rows, FGNN's scheme), ``algorithm1`` (Rule 2: Algorithm 1 spreads them,
    reads from peers) or ``auto`` (the lower expected cost of Eq. 3–4 for ``peer_cost``)."""
    peer_cost: float = flag(
        0.2, "cost of a peer-device read relative to a host read, C_gpu/C_cpu (the alpha of "
        "Song & Jiang Eq. 7); >= 1 means no fast link", type=float_in(0.0, None), metavar="C")
    """``C_gpu / C_cpu``: the cost of a peer-device read relative to a host read (the ``α`` of
    Song & Jiang Eq. 7); ``>= 1`` means no fast link between devices."""
    peer_tier: str = flag(
        "auto", "where a Trainer reads the rows other Trainers cache: auto (their buffers, "
        "mapped from the Trainers on its Ray node: CUDA IPC between GPU processes, shared "
        "memory on CPU; host copy for the others) or host (the host copy for every peer)",
        choices=PEER_TIERS)
    """Peer rows: ``auto`` reads them from the peers' buffers mapped into the Trainer's process
    (CUDA IPC, shared memory) where the peer runs on the same Ray node, ``host`` from the host
    copy of the features (:mod:`fgnn.executors.peers`)."""
    reorder: str = flag(
        "none", "hot-first: renumber graph, features, labels and splits by descending hotness "
        "of the cache policy at load (DataTiering Algorithm 2), so the cached rows are the "
        "first ids", choices=REORDERINGS)
    """``hot-first``: renumber graph, features, labels and splits by descending hotness at load
    (DataTiering Algorithm 2), so the cached rows are the ids ``[0, C)``; ``none`` keeps ids."""
    feature_partition: str = flag(
        "replicate", "feature rows across the cluster's nodes (named by fgnn_node<m> resources, "
        "docs/cluster.md): replicate (every row on every node), hotness (the "
        "--feature-replicate-ratio hottest rows of the cache policy on every node, every other "
        "row on the node whose Trainers read it most in the warm-up), hash (row mod M on one node each, as WholeGraph)",
        choices=FEATURE_PARTITIONS)
    """``replicate`` (every node holds every row), ``hotness`` or ``hash``: one feature server
    per node holds its partition and Trainers read other nodes' rows from theirs."""
    feature_replicate_ratio: float = flag(
        0.05, "with --feature-partition hotness: share of rows replicated on every node",
        type=float_in(0.0, 1.0), metavar="R")
    """Rows replicated on every node under ``hotness``, as a share of all rows."""

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "cache_ratio", "device_memory_gib", "peer_cost", "feature_replicate_ratio")
        if self.feature_partition not in FEATURE_PARTITIONS:
            _fail("CacheConfig", "feature_partition", self.feature_partition,
                  f"must be one of {', '.join(FEATURE_PARTITIONS)}")
        if not 0.0 <= self.feature_replicate_ratio <= 1.0:
            _fail("CacheConfig", "feature_replicate_ratio", self.feature_replicate_ratio,
                  "must lie in [0, 1]")
        if self.feature_partition == "hotness" and self.policy == "none":
            _fail("CacheConfig", "feature_partition", self.feature_partition,
                  "replicates the hottest rows by the cache policy's hotness, so it needs a "
                  "cache policy other than none")
        if self.policy not in CACHE_POLICIES:
            _fail("CacheConfig", "policy", self.policy, f"must be one of {', '.join(CACHE_POLICIES)}")
        if self.reorder not in REORDERINGS:
            _fail("CacheConfig", "reorder", self.reorder, f"must be one of {', '.join(REORDERINGS)}")
        if self.reorder != "none" and self.policy == "none":
            _fail("CacheConfig", "reorder", self.reorder,
                  "orders vertices by the cache policy's hotness, so it needs a policy other "
                  "than none")
        if self.presample_epochs < 1:
            _fail("CacheConfig", "presample_epochs", self.presample_epochs, "must be >= 1")
        if self.cache_ratio is not None and not 0.0 <= self.cache_ratio <= 1.0:
            _fail("CacheConfig", "cache_ratio", self.cache_ratio, "must lie in [0, 1]")
        if self.device_memory_gib is not None and self.device_memory_gib <= 0:
            _fail("CacheConfig", "device_memory_gib", self.device_memory_gib, "must be > 0")
        if self.placement not in PLACEMENTS:
            _fail("CacheConfig", "placement", self.placement,
                  f"must be one of {', '.join(PLACEMENTS)}")
        if not self.peer_cost >= 0.0:
            _fail("CacheConfig", "peer_cost", self.peer_cost, "must be >= 0")
        if self.peer_tier not in PEER_TIERS:
            _fail("CacheConfig", "peer_tier", self.peer_tier,
                  f"must be one of {', '.join(PEER_TIERS)}")


@track_given
@dataclass
class DiskConfig:
    """Where Trainers read feature rows that miss their device cache (GIDS, Park et al.)."""

    feature_tier: str = flag(
        "memory", "where Trainers read rows that miss the device cache: memory (the host "
        "matrix; an ondisk: file is memory-mapped) or disk (ondisk: datasets only: device "
        "software cache, constant CPU buffer, 4 KiB page reads of features.npy)",
        choices=FEATURE_TIERS)
    """``memory``: the host feature matrix (an ``ondisk:`` file is memory-mapped, the OS page
    cache serves repeats); ``disk``: the GIDS tiers of an ``ondisk:`` dataset -- a device software
    cache of the cache budget, a constant CPU buffer of hot rows, and 4 KiB-page reads of
    ``features.npy``."""
    cpu_buffer: float = flag(0.0, "disk tier: share of rows in the constant CPU buffer, by "
                             "hotness", type=_UNIT, metavar="A")
    """Share of the rows kept in the constant CPU buffer by hotness (GIDS §3.3)."""
    cache: str = flag("window", "disk tier: eviction of the device software cache (window "
                      "buffering, LRU, random)", name="--disk-cache", choices=DISK_CACHES)
    """Eviction of the device software cache: ``window`` (window buffering, GIDS §3.4), ``lru``
    or ``random`` (BaM's default)."""
    window: int = flag(8, "disk tier: mini-batches a Trainer leases ahead for window buffering",
                       type=int_at_least(0), metavar="W")
    """W: mini-batches a Trainer leases ahead from the queue and registers with the cache's
    future-reuse counters (``window`` eviction)."""
    accumulator: bool = flag(False, "disk tier: merge storage reads of leased mini-batches up "
                             "to the GIDS access accumulator's threshold")
    """Merge the storage reads of several leased mini-batches until the GIDS access accumulator's
    threshold (§3.2, Eq. 2-3)."""
    io: str = flag("direct", "disk tier: direct (O_DIRECT, bypasses the OS page cache; fails on "
                   "a file system without it) or buffered", name="--disk-io", choices=DISK_IO)
    """``direct``: ``O_DIRECT`` reads that bypass the OS page cache (the tiers are the only cache);
    ``buffered``: plain reads, the page cache may serve repeats."""
    threads: int = flag(4, "disk tier: reads in flight per Trainer", name="--disk-threads",
                        type=int_at_least(1), metavar="T")
    """Reads in flight per Trainer (page-run reads spread over a thread pool)."""

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "cpu_buffer")
        for name, allowed in (("feature_tier", FEATURE_TIERS), ("cache", DISK_CACHES),
                              ("io", DISK_IO)):
            if getattr(self, name) not in allowed:
                _fail("DiskConfig", name, getattr(self, name),
                      f"must be one of {', '.join(allowed)}")
        if not 0.0 <= self.cpu_buffer <= 1.0:
            _fail("DiskConfig", "cpu_buffer", self.cpu_buffer, "must lie in [0, 1]")
        if self.window < 0:
            _fail("DiskConfig", "window", self.window, "must be >= 0")
        if self.threads < 1:
            _fail("DiskConfig", "threads", self.threads, "must be >= 1")


@track_given
@dataclass
class ModelConfig:
    """The GNN model (FGNN §7.1 defaults)."""

    name: str = flag("gcn", "GNN model (gat: multi-head attention, Velickovic et al.); with "
                     "--task link the encoder (gcn, sage or gat)", name="--model", choices=MODELS)
    """``gcn``, ``sage``, ``pinsage`` or ``gat``."""
    hidden: int = flag(256, "hidden size", type=int_at_least(1), metavar="H")
    """Hidden size."""
    dropout: float = flag(0.5, "dropout between layers, in [0, 1)", type=_UNIT_OPEN, metavar="P")
    """Dropout probability between layers."""
    input_dropout: float = flag(0.0, "dropout on the input features, in [0, 1)",
                                type=_UNIT_OPEN, metavar="P")
    """Dropout on the raw input features (PyG's and DGL's models use none; Kipf & Welling's
    Cora recipe 0.5)."""
    heads: int = flag(8, "gat: attention heads of each hidden layer (concatenated; --hidden "
                      "features each)", type=int_at_least(1), metavar="H")
    """GAT: attention heads of each hidden layer, ``hidden`` features each (the output layer
    has one head)."""

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "dropout", "input_dropout")
        if self.name not in MODELS:
            _fail("ModelConfig", "name", self.name, f"must be one of {', '.join(MODELS)}")
        if self.hidden < 1:
            _fail("ModelConfig", "hidden", self.hidden, "must be >= 1")
        if self.heads < 1:
            _fail("ModelConfig", "heads", self.heads, "must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            _fail("ModelConfig", "dropout", self.dropout, "must lie in [0, 1)")
        if not 0.0 <= self.input_dropout < 1.0:
            _fail("ModelConfig", "input_dropout", self.input_dropout, "must lie in [0, 1)")


#: ``TrainConfig.batch_size=None`` (auto): about this many optimizer steps per epoch, in
#: batches of at least :data:`AUTO_BATCH_MIN` and at most :data:`AUTO_BATCH_MAX` (FGNN §7.1's
#: 8000) items (docs/benchmarks.md, issue 31: GraphSAGE on Cora and CiteSeer).
AUTO_BATCH_STEPS = 10
AUTO_BATCH_MIN = 8
AUTO_BATCH_MAX = 8000


def auto_batch_size(num_train: int) -> int:
    """The batch of ``TrainConfig.batch_size=None`` for ``num_train`` training items:
    ``min(8000, max(8, ceil(num_train / 10)))`` -- about ten steps per epoch on a small
    training split (140 Cora vertices: 14), FGNN §7.1's 8000 on a large one.

    Raises:
        ValueError: for a negative ``num_train``.
    """
    if num_train < 0:
        raise ValueError(f"num_train must be >= 0, got num_train={num_train!r}")
    return min(AUTO_BATCH_MAX, max(AUTO_BATCH_MIN, -(-int(num_train) // AUTO_BATCH_STEPS)))


#: The seeds ``TrainConfig.seed`` may be: the streams derived from it (``seed * 1_000_003 +
#: layer`` and the like) must fit torch's 64-bit generators and tensors.
SEED_RANGE = (0, (1 << 32) - 1)


@track_given
@dataclass
class TrainConfig:
    """The optimisation loop."""

    batch_size: Optional[int] = flag(
        None, "seed vertices (training edges with --task link) per mini-batch = per optimizer "
        "step at any device count; each mini-batch is cut into one task per device; auto: "
        "about 10 steps per epoch, min(8000, max(8, ceil(training items / 10)))",
        type=auto_count, cli_default="auto", metavar="auto|B")
    """Seeds per mini-batch; ``None`` (auto) settles it from the training split when the job
    starts (:meth:`with_batch_for`, :func:`auto_batch_size`)."""
    epochs: int = flag(10, "training epochs", type=int_at_least(1), metavar="E")
    lr: float = flag(0.003, "learning rate", type=float_in(0.0, None, lo_open=True), metavar="LR")
    weight_decay: float = flag(0.0, "weight decay", type=float_in(0.0, None), metavar="WD")
    seed: int = flag(0, "random seed")
    deterministic: bool = flag(
        False, "torch's deterministic algorithms in every executor: a single-mode CUDA run "
        "repeats exactly with its seed, at some speed; a single-mode CPU run repeats without it; "
        "with several Trainers a run repeats only statistically")
    """Executors use torch's deterministic algorithms (``torch.use_deterministic_algorithms``):
    on CUDA, ``index_add_`` adds in a fixed order, so a single-mode GPU run repeats exactly with
    its seed (slower; a single-mode CPU run repeats exactly without it). A factored run with
    several Trainers repeats only statistically either way (docs/concepts.md, Seeds)."""
    steps_per_epoch: Optional[int] = flag(
        None, "train at most S mini-batches per epoch, the first S of its shuffle (a bounded "
        "run of a large graph); default all", type=int_at_least(1), metavar="S")
    """Mini-batches (optimizer steps) per epoch; ``None``: every mini-batch of the training
    split. The epoch's shuffle is unchanged; only its first S mini-batches are handed out."""
    eval_every: int = flag(1, "validate every E epochs", type=int_at_least(1), metavar="E")
    """Evaluate on the validation split every this many epochs."""
    val_subset: Optional[int] = flag(
        None, "score each epoch's validation on a fixed seeded subset of V ids (the same every "
        "epoch; the final scores use the whole split); auto: max(4096, training ids); all: "
        "the whole split", type=subset_count, cli_default="auto", metavar="auto|all|V")
    """Ids of the validation split each epoch's validation scores, a fixed seeded subset
    (:func:`fgnn.subsets.subset_ids`) that picks the best epoch and drives ``patience``; the
    final scores use the whole split. ``None``: ``max(4096, training ids)``; ``0``: the whole
    split. Node classification only (link and recommender jobs score every pair)."""
    eval_batch_size: Optional[int] = flag(
        None, "seeds per evaluation chunk; auto uses max(--batch-size, min(4096, 2 MiB / "
        "feature row bytes))", type=auto_count, cli_default="auto", metavar="auto|B")
    """Seeds per evaluation chunk; ``None``: the runtime sets it from the feature width
    (:func:`fgnn.evaluation.default_eval_chunk`: ``max(batch_size, min(4096, 2 MiB / row
    bytes))``)."""
    eval_mode: str = flag(
        "sampled", "sampled: score chunks with the training sampler on the Samplers and "
        "Trainers; layerwise: every neighbour, layer by layer, on the Trainers; none: no "
        "validation and no final scores (a throughput run)",
        choices=EVAL_MODES)
    """How validation and the final scores are computed: ``sampled`` (chunks through the
    Samplers and Trainers with the training sampler, in parallel) or ``layerwise`` (every
    neighbour, layer by layer, on the Trainers: one split per Trainer) or ``none`` (nothing
    is scored: a bounded throughput run of a large graph)."""
    patience: Optional[int] = flag(
        None, "stop after P validations without improvement; unset trains all epochs",
        type=int_at_least(1), metavar="P")
    """Early stopping: stop after this many evaluations without a better validation accuracy."""
    checkpoint_dir: Optional[str] = flag(None, "write a checkpoint here after every epoch",
                                         metavar="DIR")
    resume: bool = flag(False, "resume from the latest checkpoint in --checkpoint-dir")

    def __post_init__(self) -> None:
        check_types(self, paths=("checkpoint_dir",), ranges={"seed": SEED_RANGE})
        _finite(self, "lr", "weight_decay")
        if self.batch_size is not None and self.batch_size < 1:
            _fail("TrainConfig", "batch_size", self.batch_size, "must be >= 1 (or None: auto)")
        for name in ("epochs", "eval_every"):
            if getattr(self, name) < 1:
                _fail("TrainConfig", name, getattr(self, name), "must be >= 1")
        if self.eval_mode not in EVAL_MODES:
            _fail("TrainConfig", "eval_mode", self.eval_mode, "must be sampled or layerwise")
        if self.val_subset is not None and self.val_subset < 0:
            _fail("TrainConfig", "val_subset", self.val_subset, "must be >= 0 (0: every id)")
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            _fail("TrainConfig", "eval_batch_size", self.eval_batch_size, "must be >= 1")
        if self.lr <= 0:
            _fail("TrainConfig", "lr", self.lr, "must be > 0")
        if self.weight_decay < 0:
            _fail("TrainConfig", "weight_decay", self.weight_decay, "must be >= 0")
        if self.patience is not None and self.patience < 1:
            _fail("TrainConfig", "patience", self.patience, "must be >= 1")
        if self.resume and not self.checkpoint_dir:
            _fail("TrainConfig", "resume", self.resume, "needs checkpoint_dir")

    def with_batch_for(self, num_train: int) -> "TrainConfig":
        """This config with an auto ``batch_size`` (``None``) settled for ``num_train``
        training items (:func:`auto_batch_size`); itself when the batch size is set."""
        if self.batch_size is not None:
            return self
        return replace(self, batch_size=auto_batch_size(num_train))


@track_given
@dataclass
class RuntimeConfig:
    """How devices are laid out (FGNN §5)."""

    devices: int = flag(1, "devices N_g: N GPUs when present, N Ray logical GPUs on CPU "
                        "otherwise; 1 runs in this process, without Ray",
                        type=int_at_least(1), metavar="N")
    """N_g: GPUs when present, Ray logical devices on CPU otherwise."""
    samplers: Optional[int] = flag(
        None, "sampler devices N_s; auto sets N_s = ceil(N_g / (K + 1)) from the profiling "
        "epoch; must be < --devices in factored mode", type=auto_count, cli_default="auto",
        metavar="auto|K")
    """N_s; ``None`` sets it from the profiling epoch, N_s = ceil(N_g / (K + 1))."""
    mode: str = flag(
        "factored", "factored: separate sampler and trainer devices with switching; "
        "time-sharing: every device samples and trains; single: one device alternates, in this "
        "process, without Ray",
        choices=MODES)
    """``factored``, ``time-sharing`` or ``single``."""
    queue_size: int = flag(64, "mini-batches in flight in the global queue",
                           type=int_at_least(1), metavar="Q")
    """Bound of the global queue (mini-batches in flight)."""
    switching: bool = flag(True, "disable standby trainers on sampler devices (dynamic "
                           "switching)", name="--no-switching", negate=True)
    """Standby trainers on sampler devices (dynamic switching, §5.3)."""
    address: Optional[str] = flag(
        None, "join an existing Ray cluster (HOST:PORT of the head, ray://HOST:PORT or auto) "
        "instead of starting one", metavar="RAY_ADDRESS")
    """Ray cluster address to join; ``None`` starts a local Ray instance (when Ray runs)."""
    ray: bool = flag(False, "run on Ray even when one process serves: without it a one-device "
                     "layout (--mode single, --devices 1) runs its executors in this process "
                     "and Ray (and its dashboard) start only for more devices or --address")
    """Run on Ray even for a one-device layout, which otherwise runs its executors in the
    driver process without Ray (:func:`fgnn.executors.host.uses_ray`)."""
    dashboard_host: Optional[str] = flag(
        "127.0.0.1", "interface the Ray dashboard binds to when this job starts Ray; 0.0.0.0 "
        "exposes it, off disables it", type=host_or_off, metavar="HOST")
    """Interface the Ray dashboard binds to when this job starts Ray; ``None`` disables it."""
    gpus_per_device: float = flag(
        1.0, "GPU share of one device; 0.5 puts two devices on each GPU, e.g. --devices 2 "
        "--gpus-per-device 0.5 runs the factored layout on one GPU",
        type=float_in(0.0, 1.0, lo_open=True), metavar="G")
    """GPU share of one device: 0.5 lays two devices on each physical GPU (e.g. factored mode,
    one Sampler device and one Trainer device, on a single GPU); each device's memory budget is
    that share of its GPU."""
    sample_transport: str = flag(
        "auto", "how samples reach Trainers: object_store (host memory), cuda_ipc (the sample "
        "stays on its Sampler's GPU; only when every Trainer is on that GPU: --mode single, or "
        "a job on one GPU), auto (object_store)", choices=SAMPLE_TRANSPORTS)
    """How samples reach Trainers: ``object_store`` (host memory), ``cuda_ipc`` (Ray Direct
    Transport: the sample stays in its Sampler's GPU memory; Ray's receiver only reads it on that
    GPU, so only when every Trainer is there: ``single`` mode, or a job on one GPU), or ``auto``
    (``object_store``)."""
    exchange: str = flag(
        "server", "gradient exchange among Trainers: server (a parameter-server actor takes "
        "each step on the CPU) or collective (weights and optimizer on every Trainer's device, "
        "one gloo/NCCL all-reduce of the gradients per step; experimental)", choices=EXCHANGES)
    """How Trainers exchange gradients: ``server`` (the default: a parameter-server actor holds
    the weights and takes the Adam step, :mod:`fgnn.exchange.ps`) or ``collective`` (weights
    and optimizer on every Trainer's device, one all-reduce of the gradients per step over gloo
    or NCCL, :mod:`fgnn.exchange.collective`; experimental: it has not run on CUDA/NCCL yet,
    and on CPU it is not cheaper than the server). Both take the steps of the single-process
    loop, train every task exactly once and survive a killed Trainer."""
    stall_timeout_s: float = flag(
        600.0, "stop with an error when no task finishes for S seconds (a hung executor)",
        name="--stall-timeout", type=float_in(0.0, None, lo_open=True), metavar="S")
    """Stop with :class:`~fgnn.runtime.RuntimeFailure` when no task of an epoch or evaluation
    pass finishes for this many seconds: a hung executor or parameter server becomes an error
    naming the epoch instead of a job that never ends (the last end-of-epoch checkpoint of
    ``train.checkpoint_dir`` resumes it)."""

    @property
    def devices_used(self) -> int:
        """Devices the layout occupies: ``single`` mode runs on one whatever ``devices`` says."""
        return 1 if self.mode == "single" else self.devices

    @property
    def gpus_needed(self) -> int:
        """Whole GPUs (or logical GPUs) the layout needs: ``ceil(devices_used ·
        gpus_per_device)``."""
        return max(1, math.ceil(self.devices_used * self.gpus_per_device - 1e-9))

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "gpus_per_device", "stall_timeout_s")
        if self.mode not in MODES:
            _fail("RuntimeConfig", "mode", self.mode, f"must be one of {', '.join(MODES)}")
        if self.devices < 1:
            _fail("RuntimeConfig", "devices", self.devices, "must be >= 1")
        if self.samplers is not None:
            if self.samplers < 1:
                _fail("RuntimeConfig", "samplers", self.samplers, "must be >= 1")
            if self.mode == "factored" and self.samplers >= self.devices:
                _fail("RuntimeConfig", "samplers", self.samplers,
                      f"must be < devices={self.devices} in factored mode")
        if self.queue_size < 1:
            _fail("RuntimeConfig", "queue_size", self.queue_size, "must be >= 1")
        if not self.stall_timeout_s > 0:
            _fail("RuntimeConfig", "stall_timeout_s", self.stall_timeout_s, "must be > 0")
        if not 0.0 < self.gpus_per_device <= 1.0:
            _fail("RuntimeConfig", "gpus_per_device", self.gpus_per_device, "must lie in (0, 1]")
        if self.sample_transport not in SAMPLE_TRANSPORTS:
            _fail("RuntimeConfig", "sample_transport", self.sample_transport,
                  f"must be one of {', '.join(SAMPLE_TRANSPORTS)}")
        if self.exchange not in EXCHANGES:
            _fail("RuntimeConfig", "exchange", self.exchange,
                  f"must be one of {', '.join(EXCHANGES)}")


@track_given
@dataclass
class LinkConfig:
    """Link prediction (``JobConfig.task="link"``): the edge split, the training negatives, the
    exclusion of seed edges, the decoder and the ranking metrics (:mod:`fgnn.tasks.link`)."""

    neg_ratio: int = flag(1, "link: uniform negatives per training edge, the destination "
                          "replaced", type=int_at_least(1), metavar="K")
    """k: uniform negatives per training positive, the destination replaced (filtered: never a
    known training edge), drawn on the Samplers."""
    eval_neg_ratio: int = flag(1, "link: fixed negatives per validation/test edge",
                               type=int_at_least(1), metavar="K")
    """Fixed negatives per validation and test positive (non-edges of the whole graph)."""
    exclude: str = flag(
        "reverse", "link: seed edges removed from their own sampled neighbourhood: reverse "
        "(both directions), self (src->dst only), none (the target leaks into its input)",
        name="--exclude-seed-edges", choices=LINK_EXCLUDE)
    """Seed edges removed from their own sampled neighbourhood: ``reverse`` (both directions),
    ``self`` (``src -> dst`` only) or ``none`` (the target leaks into its input)."""
    decoder: str = flag("dot", "link: pair scorer, dot product or an MLP on h_src*h_dst",
                        choices=LINK_DECODERS)
    """Pair scorer on the embeddings: ``dot`` (GAE) or ``mlp`` (an MLP on ``h_src * h_dst``)."""
    embed_dim: int = flag(16, "link: width of the encoder's output embeddings",
                          type=int_at_least(1), metavar="D")
    """Width of the encoder's output embeddings."""
    val: float = flag(0.05, "link: share of edges held out for validation", name="--link-val",
                      type=_SHARE, metavar="V")
    """Share of the graph's (undirected) edges held out for validation."""
    test: float = flag(0.10, "link: share of edges held out for test", name="--link-test",
                       type=_SHARE, metavar="T")
    """Share held out for test (PyG's ``RandomLinkSplit`` semantics, the GAE 85/5/10 split)."""
    hits_k: tuple[int, ...] = flag(
        (), "link: also report MRR and Hits@K, each validation/test edge ranked against its "
        "own --eval-neg-ratio negatives", type=k_list, metavar="K1,K2,...",
        default_text="default: none")
    """Also report MRR and Hits@K for these K: each validation/test positive ranked against its
    own ``eval_neg_ratio`` negatives. Empty: AUC and AP only."""
    edge_type: Optional[str] = flag(
        None, "link on a typed dataset: the relation whose edges are predicted (REL alone when "
        "unique); negatives replace the destination by a node of type DST, and the reverse "
        "relation's twins of the seed and held-out edges are excluded too",
        name="--link-edge-type", metavar="SRC,REL,DST",
        default_text="default: the dataset's own, e.g. author,writes,paper on hetero:, or its "
                     "only relation")
    """Typed datasets: the relation whose edges are predicted, ``SRC,REL,DST`` (or ``REL``
    alone when unique; :func:`fgnn.link.hetero.resolve_edge_type`). None: the dataset's own
    (the synthetic ``hetero:`` graph predicts ``author,writes,paper``) or its only relation."""

    def __post_init__(self) -> None:
        check_types(self)
        _finite(self, "val", "test")
        for name in ("val", "test"):
            if not 0.0 < getattr(self, name) < 1.0:
                _fail("LinkConfig", name, getattr(self, name), "must lie in (0, 1)")
        if self.val + self.test >= 1.0:
            _fail("LinkConfig", "test", self.test, f"with val={self.val} must leave training "
                                                   f"edges (val + test < 1)")
        for name in ("neg_ratio", "eval_neg_ratio", "embed_dim"):
            if getattr(self, name) < 1:
                _fail("LinkConfig", name, getattr(self, name), "must be >= 1")
        if self.exclude not in LINK_EXCLUDE:
            _fail("LinkConfig", "exclude", self.exclude,
                  f"must be one of {', '.join(LINK_EXCLUDE)}")
        if self.decoder not in LINK_DECODERS:
            _fail("LinkConfig", "decoder", self.decoder,
                  f"must be one of {', '.join(LINK_DECODERS)}")
        if any(k < 1 for k in self.hits_k):
            _fail("LinkConfig", "hits_k", self.hits_k, "must all be >= 1")


@track_given
@dataclass
class JobConfig:
    """A whole training job."""

    dataset: str = flag(
        "rmat:scale=12,edge_factor=8,feat_dim=32,num_classes=4,train_frac=0.5,seed=0",
        "dataset spec: cora|citeseer|pubmed (files under --data-root), "
        "ogbn-arxiv|ogbn-products (under --data-root, the folder OGB downloads into), "
        "ogb:DIR, ondisk:DIR "
        "(homogeneous or typed), rmat:key=value,..., uniform:key=value,..., hetero:key=value,... "
        "(a typed synthetic graph; typed datasets train with --model sage), "
        "useritem:key=value,... (a planted user-item graph for --task recsys)",
        metavar="SPEC", group="data")
    """Dataset spec string (see :func:`fgnn.data.load_dataset`)."""
    data_root: Optional[str] = flag(
        None, "directory holding the dataset files; relative DIRs in the spec are resolved "
        "against it", metavar="DIR", group="data")
    sampler: SamplerConfig = section(SamplerConfig, "sampling")
    cache: CacheConfig = section(CacheConfig, "cache")
    disk: DiskConfig = section(DiskConfig, "disk tier (GIDS)")
    model: ModelConfig = section(ModelConfig, "model")
    train: TrainConfig = section(TrainConfig, "training")
    runtime: RuntimeConfig = section(RuntimeConfig, "devices and runtime")
    report: Optional[str] = flag(
        None, "write the JSON run report here and its plot beside it (OUT.png); unset writes "
        "none", metavar="OUT.json", group="output")
    """Path of the JSON run report (a PNG is written beside it)."""
    save_model: Optional[str] = flag(
        None, "write the best-validation weights with the model, sampler and dataset metadata "
        "and the final scores here; fgnn.load_model(PATH) reads it", metavar="PATH",
        group="output")
    """Path of the model file written after the run (best-validation weights and metadata,
    read by :func:`fgnn.load_model`)."""
    recipe: str = flag(
        "auto", "auto: the recipe of --dataset, --model and --task fills every flag not given "
        "(docs/cli.md, Recipes); off: no recipe, the defaults below", choices=("auto", "off"),
        group="task")
    """Which recipe's defaults the job uses (:mod:`fgnn.recipes`): ``auto`` lets
    :class:`fgnn.Job` pick the recipe of the dataset, model and task and fill it into the fields
    left at their defaults (:func:`fgnn.recipes.resolve_recipe`, as ``launch.py`` does);
    ``off`` runs the config as built; a recipe's name records the recipe already applied (the
    resolver writes it; the report carries it) and changes nothing."""
    task: str = flag(
        "node", "node: node classification; link: link prediction on the graph's edges (an edge "
        "split; seeds are training edges with uniform negatives, sampled on the Samplers with "
        "the seed edges excluded from their own neighbourhood; BCE on the decoder's pair scores; "
        "validation and test AUC and AP; on a typed dataset the edges of one relation, "
        "--link-edge-type); recsys: PinSAGE as a recommender on a user-item dataset (--dataset "
        "useritem:..., --model pinsage): Samplers draw each user's (query items, positive) "
        "example and item -> user -> item walks, Trainers the max-margin loss with hard "
        "negatives; validation and test recall@10 (= Hits@10) beside the planted ceiling and "
        "popularity", choices=TASKS, group="task")
    """``node`` classification, or ``link`` prediction on the graph's edges (``link``)."""
    link: LinkConfig = section(LinkConfig, "task")

    def __post_init__(self) -> None:
        check_types(self, paths=("data_root", "report", "save_model"))
        if self.recipe not in RECIPE_CHOICES:
            _fail("JobConfig", "recipe", self.recipe,
                  f"must be one of {', '.join(RECIPE_CHOICES)}")
        if self.task not in _TASK_NAMES:
            _fail("JobConfig", "task", self.task, f"must be one of {', '.join(_TASK_NAMES)}")
        if self.task == "link":
            self._check_link()
        d = self.disk
        if (d.feature_tier == "disk" and d.cpu_buffer > 0 and self.cache.policy == "none"
                and self.runtime.mode != "time-sharing"):
            _fail("DiskConfig", "cpu_buffer", d.cpu_buffer,
                  "keeps the hottest rows by the cache policy's hotness, so it needs a cache "
                  "policy other than none")
        if self.cache.feature_partition != "replicate":
            self._check_partition()
        if (self.sampler.kind == "locality" and self.cache.policy == "none"
                and self.runtime.mode != "time-sharing"):
            _fail("SamplerConfig", "kind", self.sampler.kind,
                  "needs a feature cache: its local set is the vertices the Trainers cache "
                  "(set a cache policy other than none)")

    def _check_partition(self) -> None:
        """What a partitioned feature store does not support (yet): one line naming the field."""
        why = f"is not supported with cache.feature_partition={self.cache.feature_partition!r}"
        if self.disk.feature_tier != "memory":
            _fail("DiskConfig", "feature_tier", self.disk.feature_tier, why)
        if self.train.eval_mode != "sampled":
            _fail("TrainConfig", "eval_mode", self.train.eval_mode, why)
        if self.runtime.mode == "time-sharing":
            _fail("RuntimeConfig", "mode", self.runtime.mode, why)
        if self.task != "node":
            _fail("JobConfig", "task", self.task, why)
        if self.runtime.address is None:  # nodes are a cluster's (fgnn_node<m> resources)
            _fail("RuntimeConfig", "address", None,
                  f"cache.feature_partition={self.cache.feature_partition!r} partitions the "
                  f"features over the nodes of a Ray cluster: join one with --address "
                  f"(docs/cluster.md)")

    def _check_link(self) -> None:
        """What link prediction does not support (yet): one line naming the field."""
        why = "is not supported with task='link'"
        if self.model.name == "pinsage":
            _fail("ModelConfig", "name", self.model.name, f"{why} (use gcn or sage)")
        if self.sampler.kind != "khop":
            _fail("SamplerConfig", "kind", self.sampler.kind,
                  f"{why} (link samples use the uniform k-hop sampler)")
        if self.cache.reorder != "none":
            _fail("CacheConfig", "reorder", self.cache.reorder, why)
        if self.train.eval_mode != "sampled":
            _fail("TrainConfig", "eval_mode", self.train.eval_mode, why)
        if self.save_model is not None:
            _fail("JobConfig", "save_model", self.save_model,
                  f"{why} (fgnn.load_model reads node classifiers)")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (for the report)."""
        return asdict(self)
