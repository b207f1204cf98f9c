"""The path of one mini-batch from the global queue to the optimizer (issue 38): how many files
it crosses and how often it returns to one already visited (``tests/minibatch_path.py`` defines
both and prints the path). The limits are today's; the issue's goal is 10 files and none."""

from __future__ import annotations

import ray

from minibatch_path import MinibatchPath, path_of, trace_one_minibatch

#: Files the path may cross, and returns it may make (docs/architecture.md lists the path).
MAX_FILES = 13
MAX_RETURNS = 5

T, S, Q, B = ("fgnn/executors/trainer.py", "fgnn/executors/_streams.py",
              "fgnn/executors/queue.py", "fgnn/sampling/base.py")


def test_one_minibatch_crosses_at_most_the_files_allowed(tmp_path):
    if ray.is_initialized():
        ray.shutdown()  # the in-process job needs no Ray; one another module left up
    path = trace_one_minibatch(tmp_path)
    assert path.files[0] == T and "fgnn/exchange/ps.py" in path.files, path.files
    assert len(path.files) <= MAX_FILES, f"{len(path.files)} files: {path.files}"
    assert len(path.returns) <= MAX_RETURNS, f"returns: {path.returns}"


def test_a_file_entered_again_from_elsewhere_or_called_back_is_a_return():
    calls = [("t", Q, "GlobalQueue.get", (T,)),
             ("t", S, "CopyStream.h2d", (T,)),
             ("t", B, "Sample.map", (T,)),
             ("t", S, "CopyStream.h2d", (B, T)),          # entered again, from another file
             ("t", T, "lambda", (B, T)),                  # a callback up the stack
             ("t", Q, "GlobalQueue.get", (T,))]           # the same hand-over again: once
    path = path_of(calls)
    assert isinstance(path, MinibatchPath)
    assert path.files == [T, Q, S, B]
    assert [r[:2] for r in path.returns] == [(B, S), (B, T)]
