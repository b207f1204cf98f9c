"""Training recipes: the settings a dataset and model get when the user sets nothing else.

Five recipes exist:

* ``fgnn-7.1`` -- the FGNN §7.1 defaults of :mod:`fgnn.config` (3-layer GCN with fanouts
  15, 10, 5, hidden 256, ...), for every dataset without a published recipe.
* ``kipf-welling`` -- Kipf & Welling's GCN recipe (ICLR 2017, §5.2), for the Planetoid
  datasets (``cora``, ``citeseer``, ``pubmed``) with ``--model gcn``: 2 layers, hidden 64
  (the paper uses 16; fgnn's weight decay covers both layers, and 64 holds the published
  accuracy more steadily over seeds), dropout 0.5 on the input features and between layers,
  Adam with lr 0.01 and weight decay 5e-4, 200 epochs, fanouts above every Planetoid vertex's
  degree (the full neighbourhood, the paper's full-graph propagation) and one mini-batch of the
  whole training split (a batch of 8000 holds the 140 / 120 / 60 training vertices). The
  features are row-normalised by the Planetoid loader; the test score is that of the best
  validation epoch.
* ``gae`` -- the GAE link-prediction setting (Kipf & Welling, 2016) for ``task="link"`` on the
  Planetoid datasets with ``--model gcn`` (or ``sage``, as the encoder): the raw binary bag of
  words as features (GAE's own code does not row-normalise them; the recipe adds
  ``:normalize_features=false`` to the dataset spec unless the spec sets it, and on CiteSeer the
  row-normalised rows cost 3 points of AUC), an 85/5/10 edge split,
  a 2-layer encoder with hidden 32 and 16-wide embeddings, no dropout, a dot-product decoder, Adam
  with lr 0.01 and no weight decay, 200 epochs, batches of 512 training edges with one uniform
  negative each, the full neighbourhood (fanouts 1000,1000) with the batch's seed edges
  excluded in both directions (``bench/link_gae.py``, which reaches the paper's AUC with these),
  drawn with frontier ``new`` (PyG's): at these fanouts the same GCN as ``all``, with a shorter
  Sample stage and only the seeds' hop checked for seed edges.
* ``velickovic`` -- Veličković et al.'s GAT recipe (ICLR 2018, §3.3, Cora) for the Planetoid
  datasets with ``--model gat``: 2 layers, 8 heads of 8 features (concatenated, ELU) and one
  output head, dropout 0.6 on every layer's input (the features too) and on the attention
  coefficients, Adam with lr 0.005 and weight decay 5e-4, 200 epochs (PyG's example; the test
  score is that of the best validation epoch), the full neighbourhood and one batch of the
  training split, as Kipf & Welling's.
* ``pinsage-rec`` -- ``task="recsys"`` with ``--model pinsage`` (any dataset; the job refuses
  one that is not a user-item graph): the single-process recommender recipe of
  :mod:`fgnn.tasks.recsys_inprocess` through the runtime (:mod:`fgnn.tasks.recsys`).

A recipe is a set of values for dotted :class:`~fgnn.config.JobConfig` fields (and options of the
dataset spec). :func:`apply_recipe` writes them into a config except for the fields the user set, so
a flag always wins over the recipe, and records the recipe's name in ``JobConfig.recipe`` (the
report carries it).

:func:`resolve_recipe` is the one way a recipe reaches a job, from ``launch.py`` (which knows the
flags typed) and from Python (:class:`fgnn.Job` resolves a config whose ``recipe`` is ``auto``,
the default; the fields the configs' constructors were not given are the ones not given,
:mod:`fgnn.given`: ``TrainConfig(epochs=200)`` keeps 200 even where 200 is the default). It also fills the
per-model sampler defaults (:func:`model_sampler`). ``recipe="off"`` (``--recipe off``) applies
no recipe. Independently of the recipe, ``train.batch_size=None`` (the default) adapts the batch
to the training split (:func:`fgnn.config.auto_batch_size`) when the job starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional

from fgnn.config import DEFAULT_FANOUTS, JobConfig
from fgnn.given import given_of

__all__ = ["Recipe", "FGNN_RECIPE", "KIPF_RECIPE", "GAE_RECIPE", "PINSAGE_REC_RECIPE",
           "VELICKOVIC_RECIPE",
           "FULL_FANOUT", "FULL_BATCH", "recipe_for", "apply_recipe", "resolve_recipe",
           "given_fields", "model_sampler", "with_spec_options"]

#: A fanout above the largest degree of Cora (168), CiteSeer (99) and PubMed (171): the k-hop
#: sampler keeps every neighbour of a vertex whose degree is at most its fanout.
FULL_FANOUT = 1000
#: Kipf & Welling's one batch of the training split: above the 140 / 120 / 60 training vertices
#: of Cora, CiteSeer and PubMed (FGNN §7.1's batch).
FULL_BATCH = 8000


@dataclass(frozen=True)
class Recipe:
    """A named set of defaults.

    Attributes:
        name: one of :data:`fgnn.config.RECIPES` (validated by ``JobConfig.recipe``).
        summary: one line for ``--help``, the job's output and the docs.
        values: dotted :class:`~fgnn.config.JobConfig` field -> value.
        spec_options: dataset-spec key -> value, added to the job's dataset spec unless the
            spec gives that key (``cora`` -> ``cora:normalize_features=false``).
    """

    name: str
    summary: str
    values: Mapping[str, Any]
    spec_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Dataset-spec options (``key=value`` of :func:`fgnn.data.load_dataset`) the recipe adds
    to ``JobConfig.dataset`` unless the spec names them itself."""


FGNN_RECIPE = Recipe("fgnn-7.1", "FGNN §7.1 defaults", {})

KIPF_RECIPE = Recipe(
    "kipf-welling",
    f"Kipf & Welling's GCN: 2 layers, hidden 64, dropout 0.5 (input too), lr 0.01, weight "
    f"decay 5e-4, 200 epochs, full neighbourhood (fanouts {FULL_FANOUT},{FULL_FANOUT}), one "
    f"batch of the training split",
    {
        "model.hidden": 64,
        "model.dropout": 0.5,
        "model.input_dropout": 0.5,
        "train.lr": 0.01,
        "train.weight_decay": 5e-4,
        "train.epochs": 200,
        "train.batch_size": FULL_BATCH,
        "sampler.fanouts": (FULL_FANOUT, FULL_FANOUT),
    },
)

GAE_RECIPE = Recipe(
    "gae",
    f"GAE link prediction: raw (not row-normalised) features, 85/5/10 edge split, 2 layers, "
    f"hidden 32, embeddings 16, no dropout, dot decoder, lr 0.01, 200 epochs, batches of 512 "
    f"edges with 1 negative each, full neighbourhood (fanouts {FULL_FANOUT},{FULL_FANOUT}, "
    f"frontier new) without the batch's edges",
    {
        "model.hidden": 32,
        "model.dropout": 0.0,
        "model.input_dropout": 0.0,
        "link.embed_dim": 16,
        "link.val": 0.05,
        "link.test": 0.10,
        "link.decoder": "dot",
        "train.lr": 0.01,
        "train.weight_decay": 0.0,
        "train.epochs": 200,
        "train.batch_size": 512,
        "sampler.fanouts": (FULL_FANOUT, FULL_FANOUT),
        # PyG's frontier: at full fanouts the same GCN as "all" (tests/test_link.py::
        # test_link_frontiers_give_the_same_embeddings_at_full_fanouts), with only the seeds'
        # hop drawn and checked for seed edges (docs/benchmarks.md, issue 20).
        "sampler.frontier": "new",
    },
    # GAE's encoder reads the raw binary bag of words (tkipf/gae does not row-normalise the
    # features): on CiteSeer row-normalised rows lose 3 points of AUC (docs/benchmarks.md).
    spec_options={"normalize_features": False},
)

VELICKOVIC_RECIPE = Recipe(
    "velickovic",
    f"Velickovic et al.'s GAT: 2 layers, 8 heads x 8 features, 1 output head, dropout 0.6 "
    f"(input and attention too), lr 0.005, weight decay 5e-4, 200 epochs, full neighbourhood "
    f"(fanouts {FULL_FANOUT},{FULL_FANOUT}), one batch of the training split",
    {
        "model.hidden": 8,
        "model.heads": 8,
        "model.dropout": 0.6,
        "model.input_dropout": 0.6,
        "train.lr": 0.005,
        "train.weight_decay": 5e-4,
        "train.epochs": 200,
        "train.batch_size": FULL_BATCH,
        "sampler.fanouts": (FULL_FANOUT, FULL_FANOUT),
    },
)

PINSAGE_REC_RECIPE = Recipe(
    "pinsage-rec",
    "PinSAGE as a recommender (Ying et al. 2018, fgnn.tasks.recsys_inprocess's recipe): 2 "
    "layers of importance pooling over the top 10 of 20 item -> user -> item walks of 2 hops, hidden "
    "128, no dropout, lr 3e-3, no weight decay, batches of 512 users, 13 epochs",
    {
        "model.hidden": 128,
        "model.dropout": 0.0,
        "model.input_dropout": 0.0,
        "train.lr": 3e-3,
        "train.weight_decay": 0.0,
        "train.batch_size": 512,
        # 13 epochs of 2^16 users in batches of 512: about the 1600 steps of the
        # single-process recipe at the size (docs/benchmarks.md)
        "train.epochs": 13,
        "sampler.num_walks": 20,
        "sampler.walk_length": 4,
        "sampler.top_k": 10,
        "sampler.num_layers": 2,
    },
)

#: Datasets (spec kinds) whose GCN gets :data:`KIPF_RECIPE` (and link prediction
#: :data:`GAE_RECIPE`).
_PLANETOID = ("cora", "citeseer", "pubmed")


def recipe_for(dataset: str, model: str, task: str = "node") -> Recipe:
    """The recipe of a dataset spec, a model name and a task: on a Planetoid spec (``cora``,
    ``citeseer``, ``pubmed``, with or without ``:key=value`` options) Kipf & Welling's for GCN
    node classification and GAE's for link prediction with a GCN or GraphSAGE encoder; the
    FGNN §7.1 defaults otherwise."""
    kind = dataset.strip().partition(":")[0].strip().lower() if isinstance(dataset, str) else ""
    if task == "recsys":
        return PINSAGE_REC_RECIPE if model == "pinsage" else FGNN_RECIPE
    if kind not in _PLANETOID:
        return FGNN_RECIPE
    if task == "link":
        return GAE_RECIPE if model in ("gcn", "sage") else FGNN_RECIPE
    return {"gcn": KIPF_RECIPE, "gat": VELICKOVIC_RECIPE}.get(model, FGNN_RECIPE)


def apply_recipe(config: JobConfig, recipe: Recipe, given: Collection[str] = ()) -> JobConfig:
    """``config`` with ``recipe``'s values in every field not in ``given``.

    Args:
        config: the job as built from flags or by hand.
        recipe: the recipe to apply (see :func:`recipe_for`).
        given: dotted fields the user set (``"model.hidden"``, ...); they keep their values.

    Returns:
        A new :class:`JobConfig` (each changed sub-config is rebuilt, so it validates itself)
        whose ``recipe`` names ``recipe``.
    """
    parts: dict[str, dict[str, Any]] = {}
    for field, value in recipe.values.items():
        if field in given:
            continue
        section, _, name = field.partition(".")
        parts.setdefault(section, {})[name] = value
    changes: dict[str, Any] = {s: dataclasses.replace(getattr(config, s), **v)
                               for s, v in parts.items()}
    if recipe.spec_options:
        changes["dataset"] = with_spec_options(config.dataset, recipe.spec_options)
    return dataclasses.replace(config, recipe=recipe.name, **changes)


def resolve_recipe(config: JobConfig, given: Optional[Collection[str]] = None) -> JobConfig:
    """The job ``config`` describes once its recipe is applied: the one resolver of
    ``launch.py`` and :class:`fgnn.Job`.

    With ``config.recipe == "auto"``: the per-model sampler defaults (:func:`model_sampler`)
    and the recipe of the dataset, model and task (:func:`recipe_for`) fill every field not in
    ``given``, and ``recipe`` records the recipe's name. With ``"off"`` or a recipe's name (a
    config already resolved), ``config`` itself.

    Args:
        config: the job as built from flags or in Python.
        given: dotted fields the user set (``launch.py``: the flags typed); ``None``: the fields
            the configs' constructors were given (:func:`given_fields`), so a field set to its
            default value keeps it and only a field left out takes the recipe's value.

    Raises:
        ValueError: as the configs' own validation, or :func:`with_spec_options`.
    """
    if config.recipe != "auto":
        return config
    given = given_fields(config) if given is None else frozenset(given)
    kind, fanouts = model_sampler(
        config.model.name, config.sampler.kind if "sampler.kind" in given else None,
        config.sampler.fanouts if "sampler.fanouts" in given else None)
    if (kind, fanouts) != (config.sampler.kind, config.sampler.fanouts):
        config = dataclasses.replace(config, sampler=dataclasses.replace(
            config.sampler, kind=kind, fanouts=fanouts))
    return apply_recipe(config, recipe_for(config.dataset, config.model.name, config.task),
                        given)


def given_fields(config: JobConfig) -> frozenset[str]:
    """The dotted fields (``"model.hidden"``, ``"dataset"``) a config built in Python sets: those
    its constructors were given (:func:`fgnn.given.given_of`), a value equal to the default
    included; for an object that records none (built without its ``__init__``), the fields whose
    values differ from those of ``JobConfig()``."""
    default, out = JobConfig(), set()
    top = given_of(config)
    for f in dataclasses.fields(JobConfig):
        value, ref = getattr(config, f.name), getattr(default, f.name)
        if dataclasses.is_dataclass(value):
            names = given_of(value)
            if names is None:
                names = {g.name for g in dataclasses.fields(value)
                         if getattr(value, g.name) != getattr(ref, g.name)}
            out |= {f"{f.name}.{n}" for n in names}
        elif (f.name in top) if top is not None else value != ref:
            out.add(f.name)
    return frozenset(out)


def model_sampler(model: str, kind: Optional[str], fanouts: Optional[tuple[int, ...]]
                  ) -> tuple[str, tuple[int, ...]]:
    """``(sampler kind, fanouts)`` for ``model`` where ``kind`` or ``fanouts`` is not given
    (``None``): random walks for pinsage, k-hop otherwise, with the model's FGNN §7.1 fanouts
    (:data:`~fgnn.config.DEFAULT_FANOUTS`; GCN's for a k-hop pinsage)."""
    kind = kind or ("random_walk" if model == "pinsage" else "khop")
    if fanouts is None:
        fanouts = DEFAULT_FANOUTS[model]
    if kind != "random_walk" and not fanouts:
        fanouts = DEFAULT_FANOUTS["gcn"]
    return kind, tuple(int(f) for f in fanouts)


def with_spec_options(spec: str, options: Mapping[str, Any]) -> str:
    """``spec`` with ``key=value`` appended for every key of ``options`` it does not name
    (booleans written ``true``/``false``): the spec's own values win.

    Raises:
        ValueError: as :func:`fgnn.data.spec.parse_spec` on a malformed spec.
    """
    from fgnn.data.spec import parse_spec  # here: fgnn.data imports torch, --help must not

    params = parse_spec(spec)[1]
    extra = [f"{k}={str(v).lower() if isinstance(v, bool) else v}"
             for k, v in options.items() if k not in params]
    if not extra:
        return spec
    kind, _, rest = spec.strip().partition(":")
    return f"{kind}:{','.join(filter(None, [rest.strip(' ,')] + extra))}"
