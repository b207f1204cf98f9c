"""The process's shared thread pools (fgnn/threads.py): one per purpose and size, reused."""

from __future__ import annotations

import threading

import pytest

from fgnn.threads import shared_pool


def test_a_pool_is_made_once_per_purpose_and_size_and_names_its_threads():
    a = shared_pool("test-a", 2)
    assert shared_pool("test-a", 2) is a
    assert shared_pool("test-b", 2) is not a
    assert shared_pool("test-a", 3) is not a
    names = set(a.map(lambda _: threading.current_thread().name, range(8)))
    assert names and all(n.startswith("fgnn-pool-test-a") for n in names)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_size_is_refused(bad):
    with pytest.raises(ValueError, match="threads must be a positive int"):
        shared_pool("test-c", bad)
