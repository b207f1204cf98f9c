"""Monitoring: run statistics, Ray custom metrics, progress display and report plots.

``plot`` and ``progress`` are imported lazily by their users (matplotlib and tqdm are only needed
on the driver), so importing this package inside an actor stays cheap.
"""

from fgnn.monitor.metrics import STAGES, RuntimeMetrics
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes

__all__ = ["EpochStats", "RunResult", "SampleTimes", "RuntimeMetrics", "STAGES"]
