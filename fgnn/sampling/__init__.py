"""Samplers: the Sample stage of the SET model."""

from fgnn.sampling.base import Block, Sample, Sampler

__all__ = ["Block", "Sample", "Sampler"]
