"""The path of one mini-batch through fgnn, from the global queue to the optimizer (issue 38).

A one-device job runs in this process (its executors are in-process actors) on a graph whose
training set fits in one batch, so each epoch trains exactly one mini-batch. A profiler
(:func:`sys.setprofile`, on every thread) records each call of a function defined under
``fgnn/`` from the moment the Trainer asks the queue for its task (``TrainerExecutor._take``)
to the moment the parameter server's optimizer step returns (``ParameterServer.step``), on the
threads that carry the mini-batch: the Trainer's, its prefetch thread's, the queue's and the
parameter server's.

A call is on the path when it is made in one of the runtime's rooms (``fgnn/runtime``,
``fgnn/executors``, ``fgnn/exchange``) or enters one: what a stage's library (the feature store,
the model) calls inside its stage belongs to that stage. The *path* is each hand-over from one
file to another (caller's file -> callee's file) once, in the order first taken; its files are
the files it crosses. A hand-over *returns* to a file already visited when it enters a file
already entered from another file (the reader comes back to it from elsewhere: a Trainer helper
in another worker's file), or a file up the calling stack (a callback into the caller's caller).
The transport that stands in for Ray's in a one-device job (``executors/host.py``,
``executors/inline.py``) is left out, as Ray's own code is in a Ray job: a call it carries
counts as the Trainer's.

Run ``PYTHONPATH=. python tests/minibatch_path.py`` to print the path; the test
``tests/test_minibatch_path.py`` holds its limits.
"""

from __future__ import annotations

import io
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "fgnn") + "/"
#: The in-process stand-in for Ray's transport: not a stop of the path.
TRANSPORT = ("fgnn/executors/host.py", "fgnn/executors/inline.py")
#: The runtime's rooms: a call is a stop when it is made in one of them (or enters one); what a
#: stage's library (cache/, models/, sampling/, ...) calls inside the stage is that stage's stop.
ROOMS = ("fgnn/runtime/", "fgnn/executors/", "fgnn/exchange/")
START = ("TrainerExecutor._take",)
START_FILE = "fgnn/executors/trainer.py"
#: The epoch whose mini-batch is followed: after the warm-up epoch, which also plans the cache.
TRACED_EPOCH = 1
END = "ParameterServer.step"
#: The Trainer's thread names (its actor's and its prefetch pool's).
TRAINERS = ("fgnn-trainer", "fgnn-standby")


@dataclass
class MinibatchPath:
    """The files one mini-batch crosses: each hand-over between two files once, in the order
    first taken, and the hand-overs that return to a file already visited."""

    steps: list[tuple[str, str, str]]  # (from file, to file, the function entered)
    returns: list[tuple[str, str, str]]

    @property
    def files(self) -> list[str]:
        out: list[str] = []
        for a, b, _ in self.steps:
            out += [f for f in (a, b) if f not in out]
        return out


@dataclass
class _Recorder:
    """The profiler: calls into fgnn/ between the start and the end of one mini-batch, on the
    Trainer's threads and on the actors' threads while they serve a call the Trainer made."""

    epoch: int
    calls: list[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=list)
    active: bool = False
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: the argument tuples of the actor calls a Trainer thread submitted (kept alive by id)
    submitted: dict[int, tuple] = field(default_factory=dict)
    #: actor thread -> whether the call it runs now was submitted by a Trainer thread
    serving: dict[str, bool] = field(default_factory=dict)

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return") or self.done:
            return
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return
        name = getattr(code, "co_qualname", code.co_name)
        thread = threading.current_thread().name
        trainer = thread.startswith(TRAINERS)
        if code.co_filename.endswith(TRANSPORT[1]):
            self._transport(frame, event, name, thread, trainer)
            return
        if event == "return":
            if self.active and name == END:
                self.done = True
            return
        with self.lock:
            if (not self.active and trainer and name in START
                    and frame.f_locals.get("epoch") == self.epoch):
                self.active = True
            if self.active and (trainer or self.serving.get(thread)):
                stack = _stack_files(frame.f_back)
                here = _rel(code.co_filename)
                if here.startswith(ROOMS) or (stack and stack[0].startswith(ROOMS)):
                    self.calls.append((thread, here, name, stack))

    def _transport(self, frame: Any, event: str, name: str, thread: str, trainer: bool) -> None:
        """Follow a Trainer's call onto the actor's thread (the in-process transport)."""
        if name == "InlineActor.call" and event == "call" and trainer:
            args = frame.f_locals["args"]
            self.submitted[id(args)] = args
        elif name == "InlineActor._submit.<locals>.call":  # each resume and suspension
            inner = frame.f_locals.get("args", ())
            ours = len(inner) == 3 and id(inner[1]) in self.submitted
            self.serving[thread] = event == "call" and ours


def _rel(filename: str) -> str:
    return str(Path(filename).relative_to(ROOT))


def _stack_files(frame: Any) -> tuple[str, ...]:
    out = []
    while frame is not None:
        if frame.f_code.co_filename.startswith(PACKAGE):
            out.append(_rel(frame.f_code.co_filename))
        frame = frame.f_back
    return tuple(out)


def path_of(calls: list[tuple[str, str, str, tuple[str, ...]]]) -> MinibatchPath:
    """The path of the recorded calls (see the module's docstring)."""
    steps: dict[tuple[str, str], str] = {}
    returns: list[tuple[str, str, str]] = []
    entered_from: dict[str, str] = {}
    for _thread, file, function, stack in calls:
        caller = next((s for s in stack if s not in TRANSPORT), START_FILE)
        if file in TRANSPORT or file == caller or (caller, file) in steps:
            continue
        steps[caller, file] = function
        if file in stack[1:] or entered_from.setdefault(file, caller) != caller:
            returns.append((caller, file, function))
    return MinibatchPath([(a, b, fn) for (a, b), fn in steps.items()], returns)


def _job_config(report: str) -> Any:
    from fgnn.config import JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, TrainConfig

    return JobConfig(model=ModelConfig("sage", hidden=16, dropout=0.0),
                     sampler=SamplerConfig(fanouts=(4, 4)),
                     runtime=RuntimeConfig(mode="single"),
                     train=TrainConfig(epochs=2, batch_size=4096, lr=0.02, seed=0,
                                       eval_mode="none"),
                     report=report)


def trace_one_minibatch(tmp: Path, dataset: Optional[Any] = None) -> MinibatchPath:
    """Run the one-device job and return the path of its last epoch's one mini-batch."""
    from fgnn.job import Job

    if dataset is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from test_training import toy_dataset

        dataset = toy_dataset()
    job = Job(_job_config(str(tmp / "r.json")), dataset=dataset, progress=False,
              out=io.StringIO())
    rec = _Recorder(epoch=TRACED_EPOCH)
    threading.setprofile(rec.profile)
    sys.setprofile(rec.profile)
    try:
        job.run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    if not rec.done:
        raise AssertionError(f"no mini-batch went from {START} to {END}")
    return path_of(rec.calls)


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = trace_one_minibatch(Path(tmp))
    for a, b, fn in path.steps:
        back = "  RETURN" if (a, b, fn) in path.returns else ""
        print(f"{a} -> {b}  ({fn}){back}")
    print(f"{len(path.files)} files, {len(path.returns)} returns to a file already visited:")
    print("  " + ", ".join(path.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
