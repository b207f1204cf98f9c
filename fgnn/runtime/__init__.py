"""The driver of the factored runtime (FGNN §5): :class:`Runtime` starts the executors, runs the
epochs, handles faults, writes checkpoints to resume from, plans the caches and the feature
partition, and reports. Imported on first use (PEP 562), so the package itself is light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fgnn._lazy import lazy_exports

#: public name -> the module that defines it
_EXPORTS = {
    "Runtime": "fgnn.runtime.driver", "RuntimeFailure": "fgnn.runtime.faults",
    "CHECKPOINT_NAME": "fgnn.runtime.resume", "RunFinished": "fgnn.runtime.resume",
}

__all__ = ["Runtime", "RuntimeFailure", "RunFinished", "CHECKPOINT_NAME"]

if TYPE_CHECKING:
    from fgnn.runtime.driver import Runtime
    from fgnn.runtime.faults import RuntimeFailure
    from fgnn.runtime.resume import CHECKPOINT_NAME, RunFinished


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
