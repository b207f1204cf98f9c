"""Progress bars (on a terminal only) and per-epoch summary lines."""

from __future__ import annotations

import dataclasses

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fgnn.monitor.progress import Progress, format_epoch
from fgnn.monitor.stats import EpochStats, SampleTimes

REPO = Path(__file__).resolve().parents[1]


def _stats(epoch: int = 2) -> EpochStats:
    return EpochStats(epoch=epoch, time_s=1.5, sample=SampleTimes(0.3, 0.06, 0.04),
                      extract_s=0.2, train_s=0.7, hit_rate=0.875, switches=2, batches=5,
                      loss=0.512, samplers=1, trainers=3, val_acc=0.71, eval_s=0.12)


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_format_epoch_has_every_number():
    line = format_epoch(_stats(), epochs=30)  # EpochStats.epoch is 0-based, shown from 1
    for part in ("epoch  3/30", "1.50s", "sample 0.40s", "S 0.30", "M 0.06", "C 0.04",
                 "extract 0.20s", "train 0.70s", "hit 87.5%", "1 sampler 3 trainers 2 switches",
                 "loss 0.5120", "val 0.7100 (eval 0.12s)"):
        assert part in line, part
    nan = _stats()
    nan.loss, nan.val_acc = float("nan"), None
    assert "loss -" in format_epoch(nan) and "val" not in format_epoch(nan)
    one = _stats()
    one.samplers, one.trainers, one.switches = 2, 1, 1
    assert "2 samplers 1 trainer 1 switch |" in format_epoch(one)
    # one device: no Trainer; its Sampler's standby trains after each sampling turn
    alone = dataclasses.replace(one, samplers=1, trainers=0, switches=1)
    assert "| 1 sampler, then its standby trains (1 switch) |" in format_epoch(alone)
    assert "0 trainers" not in format_epoch(alone)


def test_progress_bar_and_lines_on_a_terminal():
    buf = _Terminal()
    p = Progress(epochs=2, batch_size=100, num_train=250, file=buf, mininterval=0)
    for epoch in (0, 1):
        for done in (1, 2, 3):
            p.on_batch(epoch, done, 3, 1.0 / done)
        p.on_epoch(_stats(epoch))
    p.close()
    text = buf.getvalue()
    assert "epoch 1/2" in text and "samples/s" in text and "loss" in text and "\r" in text
    assert len(p.lines) == 2 and p.lines[1].startswith("epoch 2/2")  # epochs 0, 1 shown as 1, 2


def test_progress_not_a_terminal_is_one_line_per_epoch():
    buf = io.StringIO()  # a log file: isatty() is False
    p = Progress(epochs=2, batch_size=100, num_train=250, file=buf, mininterval=0)
    assert p.bars is False
    for epoch in (0, 1):
        for done in (1, 2, 3):
            p.on_batch(epoch, done, 3, 1.0 / done)
        p.on_epoch(_stats(epoch))
    p.close()
    assert buf.getvalue() == "".join(line + "\n" for line in p.lines)
    assert len(p.lines) == 2


_PROGRESS_RUN = textwrap.dedent("""
    import sys
    from fgnn.monitor.progress import Progress
    from fgnn.monitor.stats import EpochStats
    p = Progress(epochs=3, batch_size=10, num_train=100, mininterval=0, bars={bars})
    for epoch in range(3):
        for done in range(1, 11):
            p.on_batch(epoch, done, 10, 0.5)
        p.on_epoch(EpochStats(epoch=epoch, loss=0.5, samplers=1, trainers=1))
    p.close()
""")


@pytest.mark.parametrize("bars", [None, True])
def test_progress_piped_from_a_process(bars):
    """stdout and stderr piped (``launch.py > log 2>&1``): the default gives three lines and no
    bar; forcing bars on (the old behaviour) leaves carriage-return fragments, which the checks
    below would catch."""
    proc = subprocess.run([sys.executable, "-c", _PROGRESS_RUN.format(bars=bars)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]
    quiet = "\r" not in proc.stdout + proc.stderr and proc.stderr == ""
    assert quiet is (bars is None), proc.stderr[:200]


def test_progress_disabled_records_only():
    buf = io.StringIO()
    p = Progress(epochs=1, batch_size=10, enabled=False, file=buf)
    p.on_batch(0, 1, 1, 0.3)
    p.on_epoch(_stats(0))
    assert buf.getvalue() == "" and len(p.lines) == 1


def test_eval_progress_bar_on_a_terminal_only():
    import io

    from fgnn.monitor.progress import Progress

    term = io.StringIO()
    p = Progress(2, 16, file=term, bars=True, mininterval=0)
    for done in (1, 2, 3):
        p.on_eval(("val",), done, 3)
    assert "scoring val" in term.getvalue() and p._bar is None  # closed at the last chunk
    log = io.StringIO()
    q = Progress(2, 16, file=log, bars=False)
    q.on_eval(("train", "val", "test"), 1, 5)
    assert log.getvalue() == ""
