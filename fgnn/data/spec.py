"""Dataset specs: one string names any dataset fgnn can load (``--dataset`` of ``launch.py``).

Grammar::

    cora | citeseer | pubmed [":normalize_features=true|false"]   Planetoid, files under root
    ogb:DIR                                                       OGB raw directory
    ogbn-arxiv | ogbn-products    an OGB node-property dataset by name, read from the folder OGB
                                  downloads into (``root/ogbn_arxiv/``), never downloaded here
    ondisk:DIR                fgnn on-disk directory, homogeneous or typed
                              (``fgnn-ondisk-hetero``, :mod:`fgnn.data.ondisk_hetero`)
    rmat[:key=value,...]      keys: scale, edge_factor, feat_dim, feat_dtype, num_classes,
                                    train_frac, val_frac, test_frac, seed, a, b, c,
                                    dedup, self_loops, weighted
    uniform[:key=value,...]   the same keys minus a, b, c
    hetero[:key=value,...]    typed synthetic graph with planted labels on ``paper``
                              (:mod:`fgnn.data.synthetic_hetero`); keys: papers, authors, fields,
                              classes, feat_dim, field_dim, authors_per_paper,
                              cites_per_paper, homophily, signal, train_frac, val_frac,
                              test_frac, seed
    pr-like | tw-like | pa-like | uk-like [:key=value,...]
                              synthetic twins of GNNLab's datasets (:mod:`fgnn.data.twins`),
                              built once on disk by the out-of-core builder and reused; keys:
                              feat_dtype, seed, train_frac, val_frac, test_frac, homophily,
                              signal, num_nodes, num_edges
    useritem[:key=value,...]  planted user-item graph for ``--task recsys``
                              (:mod:`fgnn.data.useritem`); keys: users_log2, items_log2,
                              interactions_log2, dim, affinity, popularity_exponent,
                              feat_noise, seed

A typed dataset (``hetero``, or an ``ondisk:DIR`` in the typed format) loads as a
:class:`~fgnn.data.dataset_hetero.HeteroDataset`, which the runtime trains with a relational model.

Example: ``rmat:scale=20,edge_factor=16,feat_dim=128,train_frac=0.01,seed=0``. Omitted keys take
the defaults of :func:`~fgnn.data.synthetic.rmat_dataset`. A relative ``DIR`` is resolved
against ``root`` when one is given.

A twin is built into ``root/<name>-<digest>`` when a root is given, else into the dataset cache
(``$FGNN_DATASET_CACHE``, default ``~/.cache/fgnn/datasets``), and loaded as ``ondisk:`` from
there. An ``rmat`` or ``uniform`` spec too large to generate in memory takes the same builder
(its graph is then drawn by the builder's streams: the same law, other bytes).

Every synthetic spec is sized before anything is generated: :func:`check_spec_memory` refuses one
whose estimated peak (:func:`~fgnn.data.synthetic.estimate_bytes`,
:func:`fgnn.data.synthetic_hetero.estimate_bytes`, :func:`fgnn.data.useritem.estimate_bytes`)
exceeds the host memory this
process can still allocate (:func:`~fgnn.data.memory.host_memory_limit`); :func:`load_dataset`
checks it first.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Optional

from fgnn.data.dataset import Dataset
from fgnn.data.memory import MemoryLimit, check_fits, host_memory_limit
from fgnn.data.ogb import load_ogb
from fgnn.data.ondisk import load_ondisk
from fgnn.data.planetoid import PLANETOID_FILES, PLANETOID_NAMES, load_planetoid
from fgnn.data.synthetic import estimate_bytes, rmat_dataset, uniform_dataset
from fgnn.data.outofcore import GraphRecipe, build_peak_bytes, default_memory_cap, ensure_built
from fgnn.data.twins import TWIN_KEYS, TWINS, twin_recipe

__all__ = ["load_dataset", "parse_spec", "builder_recipe", "planetoid_root", "input_paths", "estimate_spec_bytes",
           "check_spec_memory", "ogb_named_dir", "SPEC_KINDS", "OGB_NAMES"]

#: The OGB node-property datasets readable by name (their raw files are CSV): spec name -> the
#: folder OGB's loaders unpack them into under their ``root``.
OGB_NAMES = {"ogbn-arxiv": "ogbn_arxiv", "ogbn-products": "ogbn_products"}
SPEC_KINDS = PLANETOID_NAMES + tuple(OGB_NAMES) + ("ogb", "ondisk", "rmat", "uniform", "hetero",
                                                   "useritem") + tuple(TWINS)
PLANETOID_ENV = "FGNN_PLANETOID_ROOT"


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("not a boolean (true/false)")


def _int(text: str) -> int:
    return int(text, 10)


def _str(text: str) -> str:
    return text


def _float(text: str) -> float:
    """A finite float: ``nan`` and ``inf`` are no setting of any spec key."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


_SYNTH_KEYS: dict[str, Callable[[str], Any]] = {
    "scale": _int, "edge_factor": _int, "feat_dim": _int, "feat_dtype": _str,
    "num_classes": _int, "train_frac": _float, "val_frac": _float, "test_frac": _float,
    "seed": _int, "dedup": _bool, "self_loops": _bool, "weighted": _bool,
}
_KEYS: dict[str, dict[str, Callable[[str], Any]]] = {
    "rmat": {**_SYNTH_KEYS, "a": _float, "b": _float, "c": _float},
    "uniform": dict(_SYNTH_KEYS),
    "hetero": {**{k: _int for k in ("papers", "authors", "fields", "classes", "feat_dim",
                                    "field_dim", "authors_per_paper", "cites_per_paper",
                                    "seed")},
               **{k: _float for k in ("homophily", "signal", "train_frac", "val_frac",
                                      "test_frac")}},
    **{name: {"normalize_features": _bool} for name in PLANETOID_NAMES},
    **{name: {k: {int: _int, float: _float, str: _str}[t] for k, t in TWIN_KEYS.items()}
       for name in TWINS},
    "useritem": {**{k: _int for k in ("users_log2", "items_log2", "interactions_log2", "dim",
                                      "seed")},
                 **{k: _float for k in ("affinity", "popularity_exponent", "feat_noise")}},
}


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split a dataset spec into its kind and typed parameters (nothing is loaded).

    Args:
        spec: e.g. ``"cora"``, ``"ogb:/data/ogbn_products"``, ``"rmat:scale=20,seed=1"``.

    Returns:
        ``(kind, params)``: for ``ogb``/``ondisk`` ``params == {"path": DIR}``; otherwise the
        ``key=value`` pairs converted to int/float/bool/str.

    Raises:
        ValueError: naming the spec and key on an unknown kind, an unknown or repeated key, a
            missing ``=`` or a malformed value.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"dataset spec must be a non-empty string, got {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in SPEC_KINDS:
        raise ValueError(f"dataset spec {spec!r}: unknown kind {kind!r}, expected one of "
                         f"{', '.join(SPEC_KINDS)}")
    if kind in OGB_NAMES:
        if rest.strip():
            raise ValueError(f"dataset spec {spec!r}: {kind} takes no parameters")
        return kind, {}
    if kind in ("ogb", "ondisk"):
        if not rest.strip():
            raise ValueError(f"dataset spec {spec!r}: {kind} needs a directory, as "
                             f"'{kind}:DIR'")
        return kind, {"path": rest.strip()}
    allowed = _KEYS[kind]
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq:
            raise ValueError(f"dataset spec {spec!r}: item {item!r} is not key=value")
        if key not in allowed:
            raise ValueError(f"dataset spec {spec!r}: unknown key {key!r} for {kind}; known "
                             f"keys: {', '.join(sorted(allowed))}")
        if key in params:
            raise ValueError(f"dataset spec {spec!r}: key {key!r} given twice")
        try:
            params[key] = allowed[key](value)
        except ValueError as exc:
            raise ValueError(f"dataset spec {spec!r}: key {key!r} has malformed value "
                             f"{value!r} ({exc})") from None
    return kind, params


def planetoid_root(spec: str, root: Optional[str | os.PathLike] = None) -> str | os.PathLike:
    """The directory a Planetoid spec loads from: ``root``, else ``$FGNN_PLANETOID_ROOT``.

    Raises:
        ValueError: neither is set; the message says how to give one from the CLI and the API.
    """
    base = root if root is not None else os.environ.get(PLANETOID_ENV)
    if not base:
        name = parse_spec(spec)[0]
        raise ValueError(f"dataset spec {spec!r}: no Planetoid data directory given; pass "
                         f"--data-root DIR to launch.py or data_root=DIR in JobConfig (root=DIR "
                         f"of load_dataset), where DIR holds ind.{name}.*, or set "
                         f"{PLANETOID_ENV}=DIR")
    return base


def ogb_named_dir(name: str, root: Optional[str | os.PathLike]) -> Path:
    """The directory of an OGB dataset given by name: ``root/<folder>`` as OGB's loaders
    (``NodePropPredDataset(name, root)``, PyG's ``PygNodePropPredDataset``) unpack it.

    Raises:
        ValueError: no root given, or the directory or its edge file is missing; the message
            says where the files are expected (datasets are never downloaded by fgnn).
    """
    folder = OGB_NAMES[name]
    layout = (f"{folder}/raw/edge.csv.gz, raw/node-feat.csv.gz, raw/node-label.csv.gz and "
              f"split/<type>/train|valid|test.csv.gz, as OGB's download unpacks them; fgnn "
              f"never downloads a dataset")
    if root is None:
        raise ValueError(f"dataset spec {name!r}: no data directory given; pass --data-root DIR "
                         f"to launch.py or data_root=DIR in JobConfig, where DIR holds {layout}")
    path = Path(root).expanduser() / folder
    raw = path / "raw"
    if not ((raw / "edge.csv.gz").is_file() or (raw / "edge.csv").is_file()):
        raise ValueError(f"dataset spec {name!r}: OGB files not found under {path}; expected "
                         f"{Path(root).expanduser()}/{layout}")
    return path


def _spec_dir(path: str, root: Optional[str | os.PathLike]) -> Path:
    """The directory of an ``ogb:``/``ondisk:`` spec: ``~`` expanded, a relative one under
    ``root`` when one is given (as :func:`load_dataset` reads it)."""
    p = Path(path).expanduser()
    return Path(root) / p if (not p.is_absolute() and root is not None) else p


def input_paths(spec: str, root: Optional[str | os.PathLike] = None) -> list[Path]:
    """The files and directories a spec reads, resolved (symlinks, ``..``), for refusing outputs
    that would overwrite them.

    Args:
        spec: dataset spec.
        root: as for :func:`load_dataset`.

    Returns:
        ``[DIR]`` for ``ondisk:DIR`` and ``ogb:DIR`` (every file they read lies inside it), the
        ``root/ind.<name>.*`` files for a Planetoid spec (the standard ones and any other present),
        ``[]`` for a synthetic spec or a Planetoid spec without a data directory.

    Raises:
        ValueError: a malformed spec (see :func:`parse_spec`).
    """
    kind, params = parse_spec(spec)
    if kind in ("ogb", "ondisk"):
        return [_spec_dir(params["path"], root).resolve()]
    if kind in OGB_NAMES:
        return [] if root is None else [(Path(root).expanduser() / OGB_NAMES[kind]).resolve()]
    if kind not in PLANETOID_NAMES:
        return []
    base = root if root is not None else os.environ.get(PLANETOID_ENV)
    if not base:
        return []
    files = {Path(base) / f"ind.{kind}.{s}" for s in PLANETOID_FILES}
    try:
        files.update(Path(base).glob(f"ind.{kind}.*"))
    except OSError:
        pass
    return sorted({f.resolve() for f in files})


#: The keys that size each synthetic kind, with their defaults (``*_log2``: a power of two).
_SIZE_KEYS: dict[str, dict[str, int]] = {
    "rmat": {"scale": 20, "edge_factor": 16, "feat_dim": 128},
    "uniform": {"scale": 20, "edge_factor": 16, "feat_dim": 128},
    "hetero": {"papers": 2000, "feat_dim": 16, "authors_per_paper": 3, "cites_per_paper": 4,
               "authors": 600, "fields": 16, "field_dim": 8},
    "useritem": {"users_log2": 16, "items_log2": 14, "interactions_log2": 20},
}


def _estimator(kind: str) -> Optional[Callable[..., int]]:
    if kind in ("rmat", "uniform"):
        return estimate_bytes
    if kind == "hetero":
        from fgnn.data.synthetic_hetero import estimate_bytes as hetero_bytes
        return hetero_bytes
    if kind == "useritem":
        from fgnn.data.useritem import estimate_bytes as useritem_bytes
        return useritem_bytes
    return None


def _size_field(kind: str, params: dict[str, Any]) -> str:
    """``key=value`` of the size key furthest above its default (``papers=2000000000``):
    the one to lower when the spec does not fit."""
    sizes = _SIZE_KEYS[kind]

    def ratio(key: str) -> float:
        v, d = params.get(key, sizes[key]), sizes[key]
        return 2.0 ** (v - d) if key.endswith(("_log2", "scale")) else v / max(d, 1)

    key = max(sizes, key=ratio)
    return f"{key}={params.get(key, sizes[key])}"


def estimate_spec_bytes(spec: str, limit: Optional[MemoryLimit] = None) -> Optional[int]:
    """Peak host bytes that generating a synthetic spec (``rmat``, ``uniform``, ``hetero``,
    ``useritem``, a twin) allocates: the out-of-core builder's peak for a spec it builds
    (:func:`builder_recipe`), else the in-memory generator's; ``None`` for the file-backed kinds
    (Planetoid, ``ogb:``, ``ondisk:``), which are not estimated.

    Raises:
        ValueError: naming the spec on a malformed spec or out-of-range parameter.
    """
    recipe = builder_recipe(spec, limit)
    if recipe is not None:
        limit = limit if limit is not None else host_memory_limit()
        return build_peak_bytes(recipe, default_memory_cap(limit))
    return _in_memory_bytes(spec)


def _in_memory_bytes(spec: str) -> Optional[int]:
    kind, params = parse_spec(spec)
    estimate = _estimator(kind)
    if estimate is None:
        return None
    try:
        return estimate(**params)
    except ValueError as exc:
        raise ValueError(f"dataset spec {spec!r}: {exc}") from exc


def builder_recipe(spec: str, limit: Optional[MemoryLimit] = None) -> Optional[GraphRecipe]:
    """The out-of-core builder's recipe for ``spec``: always for a twin; for an ``rmat`` or
    ``uniform`` spec whose in-memory generation would exceed ``limit`` (default
    :func:`~fgnn.data.memory.host_memory_limit`); ``None`` otherwise.

    Raises:
        ValueError: naming the spec on a malformed spec, or on ``dedup=true`` /
            ``self_loops=false`` for a graph that only the builder can make (it keeps
            multi-edges and self-loops).
    """
    kind, params = parse_spec(spec)
    try:
        if kind in TWINS:
            return twin_recipe(kind, **params)
        if kind not in ("rmat", "uniform"):
            return None
        need = _in_memory_bytes(spec)
        limit = limit if limit is not None else host_memory_limit()
        if limit is None or need is None or need <= limit.bytes:
            return None
        return _synthetic_recipe(kind, params)
    except ValueError as exc:
        if str(exc).startswith("dataset spec"):
            raise
        raise ValueError(f"dataset spec {spec!r}: {exc}") from exc


def _synthetic_recipe(kind: str, params: dict[str, Any]) -> Optional[GraphRecipe]:
    """An ``rmat``/``uniform`` spec as the builder's recipe (the in-memory defaults); None for
    one of 2^31 vertices or more (int32 ids), which no path can build."""
    p = dict(params)
    if p.get("scale", 20) >= 31:
        return None
    if p.pop("dedup", False) or not p.pop("self_loops", True):
        raise ValueError("this graph is too large to generate in memory, and the out-of-core "
                         "builder keeps multi-edges and self-loops; drop dedup=true and "
                         "self_loops=false, or lower scale")
    scale, factor = p.pop("scale", 20), p.pop("edge_factor", 16)
    abc = tuple(p.pop(k, d) for k, d in (("a", 0.57), ("b", 0.19), ("c", 0.19)))
    fields = {**dict(feat_dim=128, num_classes=16, train_frac=0.01, val_frac=0.05,
                     test_frac=0.05, weighted=True), **p}
    if kind == "rmat":
        fields.update(law="rmat", rmat_abc=abc)
    else:
        fields.update(skew=0.0, homophily=0.0)
    return GraphRecipe(name=f"{kind}-{scale}", num_nodes=1 << scale, num_edges=factor << scale,
                       **fields)


def check_spec_memory(spec: str, limit: Optional[MemoryLimit] = None) -> None:
    """Refuse a synthetic spec whose estimated peak exceeds the host memory limit, before
    anything is generated.

    Args:
        spec: dataset spec.
        limit: the limit; default :func:`~fgnn.data.memory.host_memory_limit`.

    Raises:
        ValueError: ``"dataset spec '...' needs about X GiB of host memory, more than the Y GiB
            this machine can give (<source>); lower its size field papers=2000000000"`` (the
            size key furthest above its default), or a malformed spec.
    """
    need = estimate_spec_bytes(spec, limit)
    if need is not None:
        kind, params = parse_spec(spec)
        why = ("; the out-of-core build keeps indptr (8 bytes a vertex) in memory: lower "
               "num_nodes" if kind in TWINS else
               f"; lower its size field {_size_field(kind, params)}")
        check_fits(need, f"dataset spec {spec!r}", limit, why=why)


def load_dataset(spec: str, root: Optional[str | os.PathLike] = None,
                 say: Optional[Callable[[str], None]] = None) -> Dataset:
    """Load the dataset a spec names (see the module docstring for the grammar).

    Args:
        spec: dataset spec.
        root: Planetoid data directory (holding ``ind.<name>.*``; default the environment
            variable ``FGNN_PLANETOID_ROOT``), the folder OGB downloads into for an
            ``ogbn-*`` name, the base of a relative ``ogb:``/``ondisk:`` directory, or where
            the out-of-core builder keeps its builds (default the dataset cache).
        say: where a build says it starts or is reused (one line each); its progress bar
            goes to stderr.

    Returns:
        The loaded :class:`~fgnn.data.Dataset`.

    Raises:
        ValueError: on a bad spec (naming spec and key), a missing root, a synthetic spec too
            large for this machine (:func:`check_spec_memory`), or any loader error.
    """
    kind, params = parse_spec(spec)
    if kind in PLANETOID_NAMES:
        return load_planetoid(kind, planetoid_root(spec, root), **params)
    if kind in ("ogb", "ondisk"):
        path = _spec_dir(params["path"], root)
        return load_ogb(path) if kind == "ogb" else _load_ondisk_any(path)
    if kind in OGB_NAMES:
        return load_ogb(ogb_named_dir(kind, root))
    check_spec_memory(spec)
    recipe = builder_recipe(spec)
    if recipe is not None:
        where = None if root is None else Path(root).expanduser() / \
            f"{recipe.name}-{recipe.digest()}"
        built = ensure_built(recipe, where, log=say)
        return load_ondisk(built.path, check_nan=False)  # drawn finite, checksummed
    if kind == "hetero":
        from fgnn.data.synthetic_hetero import typed_synthetic

        try:
            return typed_synthetic(**params)
        except ValueError as exc:
            raise ValueError(f"dataset spec {spec!r}: {exc}") from exc
    if kind == "useritem":
        from fgnn.data.useritem import useritem_dataset

        try:
            return useritem_dataset(**params)
        except ValueError as exc:
            raise ValueError(f"dataset spec {spec!r}: {exc}") from exc
    make = rmat_dataset if kind == "rmat" else uniform_dataset
    try:
        return make(**params)
    except ValueError as exc:
        raise ValueError(f"dataset spec {spec!r}: {exc}") from exc


def _load_ondisk_any(path: Path) -> Dataset:
    """``ondisk:DIR``: the homogeneous format, or the typed one as a
    :class:`~fgnn.data.dataset_hetero.HeteroDataset` (its manifest's ``format`` decides). A
    typed manifest without a ``target`` (no labels: a link prediction graph) loads as
    :meth:`HeteroDataset.unlabelled <fgnn.data.dataset_hetero.HeteroDataset.unlabelled>`; a node
    job refuses it in one line naming the manifest (:func:`fgnn.tasks.checks.check_typed`)."""
    from fgnn.data.ondisk import HETERO_FORMAT, read_manifest

    _, manifest = read_manifest(path)
    if manifest.get("format") != HETERO_FORMAT:
        return load_ondisk(path)
    from fgnn.data.ondisk_hetero import load_ondisk_hetero
    from fgnn.data.dataset_hetero import HeteroDataset

    graph = load_ondisk_hetero(path)
    if graph.target_type is None or graph.labels is None:
        return HeteroDataset.unlabelled(graph, check_features=False)
    return HeteroDataset.from_graph(graph, check_features=False)  # the loader scanned them
