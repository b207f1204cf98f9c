"""bench/soak.py (issue 40): the slope per 100 epochs and the process names it samples."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import load_bench


@pytest.fixture(scope="module")
def soak():
    return load_bench("soak")


def test_the_slope_is_mib_per_100_epochs(soak):
    mib = 1 << 20
    assert soak.slope_per_100([(100, 50 * mib), (200, 52 * mib), (300, 54 * mib)]) == \
        pytest.approx(2.0)
    assert soak.slope_per_100([(100, 50 * mib)]) is None
    assert soak.slope_per_100([(100, 50 * mib), (100, 51 * mib)]) is None


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_the_sample_names_the_driver_and_its_children(soak):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        got = soak.sample(os.getpid())
        assert got[os.getpid()][0] == "driver" and got[os.getpid()][1] > 0
        assert got[child.pid][0] == "python -c"
    finally:
        child.kill()
        child.wait()
