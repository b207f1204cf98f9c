"""The checks of a job's task against its dataset and settings, before anything starts: what
each task and graph kind refuses, one line naming the field (:func:`check_job`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from fgnn.cache.hotness import parse_policy
from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.link.hetero import resolve_edge_type
from fgnn.data.useritem import is_recsys

__all__ = ["TypedJobError", "POLICIES", "check_job", "check_typed", "check_homogeneous",
           "check_recsys", "check_link", "resolved_config"]

#: Cache policies a typed job takes.
POLICIES = ("presc", "degree", "random", "none")


class TypedJobError(ValueError):
    """A setting a typed job cannot use: ``field`` (dotted, ``sampler.relation_fanouts``), its
    ``value`` and ``why`` (:class:`fgnn.job.Job` turns it into a ``JobConfigError``, the CLI
    into ``argument --flag: ...``)."""

    def __init__(self, field: str, value: Any, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        super().__init__(f"JobConfig.{field}: {why}")


def check_job(config: JobConfig, dataset: Dataset) -> None:
    """Refuse what the job's task or graph kind does not support (the typed checks on a typed
    dataset, else the homogeneous and recommender ones).

    Raises:
        TypedJobError: naming the field and value.
    """
    if isinstance(dataset, HeteroDataset):
        check_typed(config, dataset)
    else:
        check_homogeneous(config, dataset)
        check_recsys(config, dataset)


def check_typed(config: JobConfig, dataset: HeteroDataset) -> None:
    """Refuse what a typed job does not support, in one line naming the field.

    Raises:
        TypedJobError: naming the field, e.g. ``JobConfig.model.name: 'gcn' is not supported on
            the typed dataset ...``, or an unknown relation in ``sampler.relation_fanouts``.
    """
    c = config
    bad = [("task", c.task, c.task not in ("node", "link"), "(node or link)"),
           ("sampler.kind", c.sampler.kind, c.sampler.kind != "khop",
            "(typed samples are uniform k-hop, per relation)"),
           ("sampler.frontier", c.sampler.frontier, c.sampler.frontier != "all", "(use all)"),
           ("runtime.mode", c.runtime.mode, c.runtime.mode == "time-sharing",
            "(use factored or single)"),
           ("runtime.sample_transport", c.runtime.sample_transport,
            c.runtime.sample_transport == "cuda_ipc", "(use object_store)"),
           ("cache.reorder", c.cache.reorder, c.cache.reorder != "none", ""),
           ("disk.feature_tier", c.disk.feature_tier, c.disk.feature_tier != "memory", ""),
           ("train.eval_mode", c.train.eval_mode, c.train.eval_mode != "sampled", ""),
           ("cache.policy", c.cache.policy,
            c.cache.policy != "none" and parse_policy(c.cache.policy)[0] not in POLICIES,
            f"(typed caches rank by {', '.join(POLICIES)})"),
           ("save_model", c.save_model, c.save_model is not None,
            "(fgnn.load_model rebuilds homogeneous models)"),
           ("model.name", c.model.name, c.model.name != "sage",
            "(typed graphs train the relational GraphSAGE of fgnn.models.hetero_sage: "
            "--model sage)")]
    for field, value, wrong, hint in bad:
        if wrong:
            raise TypedJobError(field, value, f"{value!r} is not supported on the typed dataset "
                                              f"{dataset.name!r} {hint}".rstrip())
    if c.task == "node" and not dataset.labelled:
        root = dataset.meta.get("root") if dataset.meta.get("source") == "ondisk" else None
        where = f" ({Path(root) / 'manifest.json'}: \"target\" is null)" if root else ""
        raise TypedJobError("task", c.task, f"'node' needs labels, and no node type of the typed "
                                            f"dataset {dataset.name!r} has any{where} (task='link' "
                                            f"predicts one of its relations; for node "
                                            f"classification give one type labels and "
                                            f"target_type=)")
    try:
        dataset.resolve_fanouts(c.sampler.fanouts, c.sampler.relation_fanouts)
    except ValueError as exc:
        why = str(exc).split(": ", 1)[-1]
        raise TypedJobError("sampler.relation_fanouts", c.sampler.relation_fanouts,
                            why) from None
    if c.task == "link":
        check_link(c, dataset)


def check_homogeneous(config: JobConfig, dataset: Dataset) -> None:
    """Per-relation fanouts need relations.

    Raises:
        TypedJobError: ``relation_fanouts`` set for a homogeneous dataset.
    """
    if config.sampler.relation_fanouts:
        raise TypedJobError("sampler.relation_fanouts", config.sampler.relation_fanouts,
                            f"needs a typed dataset; {dataset.name!r} has one relation (use "
                            f"--fanouts)")


def check_recsys(config: JobConfig, dataset: Any) -> None:
    """A recommender job on a user-item dataset, and nothing else, in one line.

    Raises:
        TypedJobError: naming the field, e.g. ``JobConfig.task: 'recsys' needs a user-item
            dataset (useritem:...), got 'cora'``.
    """
    c = config
    if c.task != "recsys":
        if is_recsys(dataset):
            raise TypedJobError("task", c.task, f"{c.task!r} is not supported on the "
                                f"user-item dataset {dataset.name!r} (use --task recsys)")
        return
    if not is_recsys(dataset):
        raise TypedJobError("task", c.task, f"'recsys' needs a user-item dataset "
                            f"(useritem:...), got {getattr(dataset, 'name', dataset)!r}")
    bad = [("model.name", c.model.name, c.model.name != "pinsage", "(use --model pinsage)"),
           ("sampler.kind", c.sampler.kind, c.sampler.kind != "random_walk",
            "(PinSAGE's item -> user -> item walks: random_walk)"),
           ("cache.reorder", c.cache.reorder, c.cache.reorder != "none", ""),
           ("disk.feature_tier", c.disk.feature_tier, c.disk.feature_tier != "memory", ""),
           ("train.eval_mode", c.train.eval_mode, c.train.eval_mode != "sampled", ""),
           ("save_model", c.save_model, c.save_model is not None,
            "(fgnn.load_model rebuilds classifiers)")]
    for field, value, wrong, hint in bad:
        if wrong:
            raise TypedJobError(field, value, f"{value!r} is not supported with task "
                                              f"'recsys' {hint}".rstrip())


def check_link(config: JobConfig, dataset: HeteroDataset) -> None:
    """The relation ``link.edge_type`` names must be one of the dataset's (or the dataset must
    have a default one).

    Raises:
        TypedJobError: on ``link.edge_type``, listing the relations.
    """
    try:
        resolve_edge_type(dataset.graph, config.link.edge_type, dataset.name)
    except ValueError as exc:
        raise TypedJobError("link.edge_type", config.link.edge_type, str(exc)) from None


def resolved_config(config: JobConfig, dataset: HeteroDataset) -> JobConfig:
    """``config`` with ``link.edge_type`` spelled out as ``SRC,REL,DST`` (the dataset's default
    when it was None)."""
    et = resolve_edge_type(dataset.graph, config.link.edge_type, dataset.name)
    return replace(config, link=replace(config.link, edge_type=",".join(et)))
