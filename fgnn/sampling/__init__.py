"""Samplers: the Sample stage of the SET model (FGNN §2, §5.1)."""

from __future__ import annotations

from typing import Any

from fgnn.config import SamplerConfig
from fgnn.sampling.base import Block, Sample, Sampler
from fgnn.sampling.khop import KHop
from fgnn.sampling.locality import LocalityAwareKHop, ScaleController, neighbour_sets
from fgnn.sampling.random_walk import RandomWalk
from fgnn.sampling.remap import Remapper

__all__ = [
    "Block",
    "Sample",
    "Sampler",
    "KHop",
    "RandomWalk",
    "LocalityAwareKHop",
    "ScaleController",
    "neighbour_sets",
    "Remapper",
    "build_sampler",
]


def build_sampler(cfg: SamplerConfig, **kw: Any) -> Sampler:
    """The sampler ``cfg.kind`` names, built from ``cfg``.

    Args:
        cfg: ``kind`` is ``khop`` (uniform), ``weighted``, ``random_walk`` or ``locality``.
        **kw: extra keyword arguments for the sampler class (e.g. ``local=mask`` for
            ``locality``, whose Algorithm 2 controller takes ``cfg.locality_*``;
            ``replace=True`` for ``khop``).

    Raises:
        ValueError: on an unknown kind or a keyword the sampler does not take.
    """
    if not isinstance(cfg, SamplerConfig):
        raise ValueError(f"build_sampler expects a SamplerConfig, got {type(cfg).__name__}")
    try:
        if cfg.kind == "khop":
            return KHop(cfg.fanouts, frontier=cfg.frontier, **kw)
        if cfg.kind == "weighted":
            return KHop(cfg.fanouts, weighted=True, frontier=cfg.frontier, **kw)
        if cfg.kind == "random_walk":
            return RandomWalk(cfg.num_walks, cfg.walk_length, cfg.top_k, cfg.num_layers, **kw)
        if cfg.kind == "locality":
            ctl = ScaleController(cfg.locality_lt, cfg.locality_ut, cfg.locality_max_scale)
            return LocalityAwareKHop(cfg.fanouts, controller=ctl, **kw)
    except TypeError as err:
        raise ValueError(f"build_sampler(kind={cfg.kind!r}): bad keyword arguments {kw}: "
                         f"{err}") from err
    raise ValueError(f"build_sampler: unknown SamplerConfig.kind={cfg.kind!r}")
