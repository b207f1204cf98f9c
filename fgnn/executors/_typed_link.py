"""Typed link prediction inside the executors (internal): the hooks the runtime, the Samplers
and :func:`fgnn.executors._hetero.check_job` call for ``task="link"`` on a
:class:`~fgnn.hetero.dataset.HeteroDataset`. What they build is :mod:`fgnn.hetero.link_task`:
the driver's :class:`~fgnn.hetero.link_task.TypedLinkTask` (split of one relation, metrics),
the Samplers' :class:`~fgnn.hetero.link_task.TypedLinkSampling` (negatives of the
destination's type, seeds of both endpoint types, seed edges and their reverse twins excluded)
and the Trainers' :class:`~fgnn.hetero.link_task.HeteroLinkModel`. Everything else (typed
extraction through the typed cache, the gradient exchange, evaluation chunks, the report) is
the typed node job's and the homogeneous link job's."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fgnn.config import JobConfig
from fgnn.hetero.dataset import HeteroDataset

__all__ = ["check_link", "resolved_config", "link_task", "build_model", "link_sampling"]


def check_link(config: JobConfig, dataset: HeteroDataset) -> None:
    """The relation ``link.edge_type`` names must be one of the dataset's (or the dataset must
    have a default one).

    Raises:
        fgnn.executors._hetero.TypedJobError: on ``link.edge_type``, listing the relations.
    """
    from fgnn.executors._hetero import TypedJobError
    from fgnn.hetero.link import resolve_edge_type

    try:
        resolve_edge_type(dataset.graph, config.link.edge_type, dataset.name)
    except ValueError as exc:
        raise TypedJobError("link.edge_type", config.link.edge_type, str(exc)) from None


def resolved_config(config: JobConfig, dataset: HeteroDataset) -> JobConfig:
    """``config`` with ``link.edge_type`` spelled out as ``SRC,REL,DST`` (the dataset's default
    when it was None)."""
    from dataclasses import replace

    from fgnn.hetero.link import resolve_edge_type

    et = resolve_edge_type(dataset.graph, config.link.edge_type, dataset.name)
    return replace(config, link=replace(config.link, edge_type=",".join(et)))


def link_task(config: JobConfig, dataset: HeteroDataset) -> Any:
    """The driver's :class:`~fgnn.hetero.link_task.TypedLinkTask`."""
    from fgnn.hetero.link_task import TypedLinkTask

    return TypedLinkTask.build(config, dataset)


def build_model(config: JobConfig, dataset: HeteroDataset, num_layers: int) -> nn.Module:
    """The :class:`~fgnn.hetero.link_task.HeteroLinkModel` of the job's relation."""
    from fgnn.hetero.link import resolve_edge_type
    from fgnn.hetero.link_task import build_typed_link_model

    et = resolve_edge_type(dataset.graph, config.link.edge_type, dataset.name)
    return build_typed_link_model(config, dataset, et, num_layers)


def link_sampling(payload: dict[str, Any], sampler: Any, device: torch.device) -> Any:
    """A Sampler's :class:`~fgnn.hetero.link_task.TypedLinkSampling` over ``payload``."""
    from fgnn.hetero.link_task import TypedLinkSampling

    return TypedLinkSampling(payload, sampler, device)
