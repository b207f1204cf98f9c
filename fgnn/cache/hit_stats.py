"""Hit/miss counters shared by the cache tiers' statistics records."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["HitStats"]


@dataclass
class HitStats:
    """Rows found (``hits``) and not found (``misses``) in one tier; subclasses add fields."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses), 0 when nothing was read."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def as_dict(self) -> dict:
        """A JSON-serialisable copy (with ``hit_rate``)."""
        return {**asdict(self), "hit_rate": self.hit_rate}
