"""Lazy package attributes (PEP 562), so importing a light module does not import torch."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module ``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports``
    (public name -> defining module) is imported on first use and then kept on the package.

    Usage, at the end of a package's ``__init__``::

        __getattr__, __dir__ = lazy_exports(__name__, {"Runtime": "fgnn.runtime.driver"})
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
