"""The gradient exchange among Trainers: a parameter server (:mod:`fgnn.exchange.ps`) or a
collective (:mod:`fgnn.exchange.collective`), the two behind one interface
(:mod:`fgnn.exchange.api`), both keeping one exactly-once ledger of an epoch's tasks
(:mod:`fgnn.exchange.exactly_once`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fgnn._lazy import lazy_exports

_EXPORTS = {"ParameterServer": "fgnn.exchange.ps"}

__all__ = ["ParameterServer"]

if TYPE_CHECKING:
    from fgnn.exchange.ps import ParameterServer


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
