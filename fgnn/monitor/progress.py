"""Console progress: one tqdm bar per epoch (on a terminal) and one summary line per epoch.

:class:`Progress` supplies the runtime's two callbacks::

    progress = Progress(epochs=30, batch_size=8000, num_train=140)
    Runtime(config, dataset, on_batch=progress.on_batch, on_epoch=progress.on_epoch).run()
    progress.close()

The bar shows batches done / total, samples/s and the last loss; the summary line shows the epoch's
Sample (S+M+C) / Extract / Train seconds, cache hit rate, samplers/trainers and switches.

Bars are drawn only when their stream is a terminal: in a log file or a pipe (``launch.py > log``,
``2>&1 | tee``) the carriage returns of a bar would leave fragments, so there each epoch is
just its one summary line.
"""

from __future__ import annotations

import math
import sys
import time
from typing import IO, Optional

from tqdm.auto import tqdm

from fgnn.monitor.stats import EpochStats
from fgnn.monitor.summary import plural

__all__ = ["Progress", "format_epoch"]


def format_epoch(stats: EpochStats, epochs: Optional[int] = None) -> str:
    """One summary line for a finished epoch (numbered from 1; ``EpochStats.epoch`` is 0-based).

    Example:
        ``epoch  3/30  1.21s | sample 0.40s (S 0.31 M 0.05 C 0.04) extract 0.10s train 0.70s |
        hit 87.5% | 1 sampler 3 trainers 2 switches | loss 0.5120 val 0.7100 (eval 0.05s)``

    ``1.21s`` is the epoch's training wall time; the stage seconds are summed over executors;
    ``eval`` is the wall time of the validation after the epoch.
    """
    of = f"/{epochs}" if epochs else ""
    width = len(str(epochs)) if epochs else 1
    s = stats.sample
    loss = "-" if stats.loss is None or math.isnan(stats.loss) else f"{stats.loss:.4f}"
    line = (f"epoch {stats.epoch + 1:>{width}}{of}  {stats.time_s:.2f}s | "
            f"sample {s.total:.2f}s (S {s.S:.2f} M {s.M:.2f} C {s.C:.2f}) "
            f"extract {stats.extract_s:.2f}s train {stats.train_s:.2f}s | "
            f"hit {100 * stats.hit_rate:.1f}% | "
            f"{_roles(stats)} | loss {loss}")
    if stats.val_acc is not None:
        line += f" val {stats.val_acc:.4f} (eval {stats.eval_s:.2f}s)"
    elif stats.val_auc is not None:
        line += (f" val AUC {stats.val_auc:.4f} AP {stats.val_ap:.4f} "
                 f"(eval {stats.eval_s:.2f}s)")
    return line


def _roles(stats: EpochStats) -> str:
    """``1 sampler 3 trainers 2 switches``: the executors and how often a Sampler's standby
    switched to training; with no Trainer (one device), ``1 sampler, then its standby trains
    (1 switch)``."""
    switches = plural(stats.switches, "switch", "switches")
    if stats.trainers == 0:
        standby = "its standby trains" if stats.samplers == 1 else "their standbys train"
        return f"{plural(stats.samplers, 'sampler')}, then {standby} ({switches})"
    return f"{plural(stats.samplers, 'sampler')} {plural(stats.trainers, 'trainer')} {switches}"


class Progress:
    """The runtime's ``on_batch`` / ``on_epoch`` callbacks, drawing to the console.

    Args:
        epochs: total epochs (for the bar description and summary lines).
        batch_size: mini-batch size, to turn batches into samples/s.
        num_train: training vertices per epoch (the last batch may be short); ``None`` if unknown.
        enabled: draw bars and lines; when False the callbacks only record.
        file: stream for bars and lines (default stderr for bars, stdout for summaries).
        mininterval: least seconds between bar redraws (tqdm's ``mininterval``).
        bars: draw tqdm bars; ``None`` (default) draws them only when the bar stream is a
            terminal (``isatty()``), so a log file or pipe gets one line per epoch.
    """

    def __init__(self, epochs: int, batch_size: int, num_train: Optional[int] = None, *,
                 enabled: bool = True, file: Optional[IO[str]] = None,
                 mininterval: float = 0.1, bars: Optional[bool] = None) -> None:
        self.mininterval = mininterval
        self.bars = _is_tty(file or sys.stderr) if bars is None else bool(bars)
        self.epochs = epochs
        self.batch_size = batch_size
        self.num_train = num_train
        self.enabled = enabled
        self.file = file
        self.lines: list[str] = []
        """Summary lines printed so far."""
        self._bar: Optional[tqdm] = None
        self._bar_epoch: Optional[object] = None  # the epoch, or the splits being scored
        self._t0 = 0.0

    def on_batch(self, epoch: int, batches_done: int, batches_total: int, loss: float) -> None:
        """Runtime callback after each trained mini-batch."""
        if not (self.enabled and self.bars):
            return
        if self._bar is None or self._bar_epoch != epoch:
            self._close_bar()
            self._bar = tqdm(total=batches_total, desc=f"epoch {epoch + 1}/{self.epochs}",
                             unit="batch", leave=False, dynamic_ncols=True,
                             mininterval=self.mininterval,
                             file=self.file or sys.stderr)
            self._bar_epoch = epoch
            self._t0 = time.perf_counter()
        bar = self._bar
        if batches_total and bar.total != batches_total:
            bar.total = batches_total
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        samples = batches_done * self.batch_size
        if self.num_train is not None:
            samples = min(samples, self.num_train)
        loss_s = "nan" if loss is None or math.isnan(loss) else f"{loss:.4f}"
        bar.set_postfix_str(f"{samples / elapsed:,.0f} samples/s, loss {loss_s}", refresh=False)
        bar.update(max(0, batches_done - bar.n))  # redraws (throttled) with the new postfix

    def on_eval(self, splits: tuple[str, ...], chunks_done: int, chunks_total: int) -> None:
        """Runtime callback as evaluation chunks complete (a bar on a terminal, nothing in a
        log: the epoch line carries the evaluation's seconds)."""
        if not (self.enabled and self.bars):
            return
        desc = "scoring " + "/".join(splits)
        if self._bar is None or self._bar_epoch != desc or chunks_done < self._bar.n:
            self._close_bar()
            self._bar = tqdm(total=chunks_total, desc=desc, unit="chunk", leave=False,
                             dynamic_ncols=True, mininterval=self.mininterval,
                             file=self.file or sys.stderr)
            self._bar_epoch = desc
        self._bar.update(max(0, chunks_done - self._bar.n))
        if chunks_done >= chunks_total:
            self._close_bar()

    def on_epoch(self, stats: EpochStats) -> None:
        """Runtime callback after each epoch: closes the bar and prints the summary line."""
        self._close_bar()
        line = format_epoch(stats, self.epochs)
        self.lines.append(line)
        if self.enabled:
            tqdm.write(line, file=self.file or sys.stdout)

    def close(self) -> None:
        """Close any open bar (after the run, or when it failed)."""
        self._close_bar()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._bar_epoch = None


def _is_tty(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal (a closed or fake stream counts as not one)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or the stream is closed
        return False
