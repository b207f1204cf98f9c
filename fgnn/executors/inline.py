"""In-process actors (internal): the executors and services of a one-device job served by
threads of the driver, driven through the same handles and calls as Ray actors.

A job whose layout has one device (``--mode single``, ``--devices 1``) needs no second process:
:class:`InlineActor` builds the same class (a Sampler, a Trainer, the global queue, the
parameter server) on a thread of its own with its own asyncio loop, and ``handle.method.remote
(*args)`` submits the call there, returning an :class:`InlineRef` at once, as Ray returns an
``ObjectRef``. Calls of one actor run one at a time in submission order; coroutine methods
interleave on the actor's loop (a Ray async actor); a blocking method blocks its own actor only.

What Ray does to a call is kept where the executors can tell: top-level ref arguments are
resolved (waiting for them), and an exception inside a call comes out of :func:`get` as Ray's
``RayTaskError`` of its cause, so the runtime's fault handling reads it the same way. Arguments
and results are passed as they are, not copied as Ray's serialisation would (a gradient or the
weights each step). That is safe because no executor changes an argument or a result the
other side still holds; a value one side goes on changing is copied by its owner (the parameter
server's optimizer state, in :meth:`~fgnn.exchange.ps.ParameterServer.state` and its
constructor; the sampler each executor is built with, in :mod:`fgnn.runtime.workers`).

:func:`get`, :func:`wait` and :func:`put` are the in-process ``ray.get``, ``ray.wait`` and
``ray.put``; :mod:`fgnn.executors.host` picks between them and Ray's.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any, Optional, Sequence, Union

__all__ = ["InlineActor", "InlineRef", "get", "put", "wait"]

#: Seconds :meth:`InlineActor.kill` waits for the actor's thread to end (a call still running
#: keeps it: the thread is a daemon and ends with the process).
_JOIN_S = 5.0


class InlineRef:
    """The result of an in-process call or :func:`put`: a future, shared (not copied) when
    passed along, as an ``ObjectRef`` is."""

    __slots__ = ("future", "what")

    def __init__(self, future: Future, what: str = "put") -> None:
        self.future, self.what = future, what

    def __deepcopy__(self, memo: dict) -> "InlineRef":
        return self

    def __repr__(self) -> str:
        state = "done" if self.future.done() else "pending"
        return f"InlineRef({self.what}, {state})"


def put(value: Any) -> InlineRef:
    """An in-process ``ray.put``: a ref holding ``value`` itself (no copy)."""
    fut: Future = Future()
    fut.set_result(value)
    return InlineRef(fut)


def _resolve(arg: Any) -> Any:
    """A top-level ref argument's value (waiting for it), else the argument itself."""
    return get(arg) if isinstance(arg, InlineRef) else arg


class InlineActor:
    """``cls(*args, **kwargs)`` built and served on a thread of its own, called as a Ray actor.

    Args:
        cls: the class to serve (a plain or asyncio class).
        name: the actor's name (its thread's name).
        *args, **kwargs: the constructor's arguments (top-level refs resolved).
    """

    def __init__(self, cls: type, name: str, *args: Any, **kwargs: Any) -> None:
        self.name = name
        self._obj: Any = None
        self._build_error: Optional[BaseException] = None
        self._dead = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self._submit(self._build, cls, args, kwargs)  # the first call on the actor's loop

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _build(self, cls: type, args: tuple, kwargs: dict) -> None:
        try:
            args = tuple(_resolve(a) for a in args)
            kwargs = {k: _resolve(v) for k, v in kwargs.items()}
            self._obj = cls(*args, **kwargs)
        except BaseException as err:  # every call raises it, as a Ray actor that failed to start
            self._build_error = err
            raise

    def _submit(self, fn: Any, *args: Any) -> Future:
        async def call() -> Any:
            out = fn(*args)
            return await out if inspect.isawaitable(out) else out

        return asyncio.run_coroutine_threadsafe(call(), self._loop)

    def _invoke(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Run on the actor's thread: the call, after the constructor (whose error it raises;
        calls run in submission order, so the constructor has run)."""
        if self._build_error is not None:
            raise RuntimeError(f"in-process actor {self.name} failed to start: "
                               f"{self._build_error}") from self._build_error
        args = tuple(_resolve(a) for a in args)
        kwargs = {k: _resolve(v) for k, v in kwargs.items()}
        return getattr(self._obj, method)(*args, **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> InlineRef:
        """Submit ``method(*args, **kwargs)``; its ref at once."""
        if self._dead:
            fut: Future = Future()
            fut.set_exception(RuntimeError(f"in-process actor {self.name} was stopped"))
            return InlineRef(fut, f"{self.name}.{method}")
        return InlineRef(self._submit(self._invoke, method, args, kwargs),
                         f"{self.name}.{method}")

    def __getattr__(self, method: str) -> "_Method":
        if method.startswith("_"):
            raise AttributeError(method)
        return _Method(self, method)

    def __deepcopy__(self, memo: dict) -> "InlineActor":
        return self

    def kill(self) -> None:
        """Stop serving: the loop ends once the call it runs (if any) returns. A thread cannot
        be ended as Ray ends a process, so a served object with a ``stop()`` method (a Trainer)
        is asked to finish its running call first."""
        if self._dead:
            return
        self._dead = True
        stop = getattr(self._obj, "stop", None)
        if callable(stop) and not inspect.signature(stop).parameters:
            stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(_JOIN_S)


class _Method:
    """``handle.method``: ``.remote(*args, **kwargs)`` submits a call."""

    __slots__ = ("actor", "name")

    def __init__(self, actor: InlineActor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any, **kwargs: Any) -> InlineRef:
        """Submit the call; returns its :class:`InlineRef`."""
        return self.actor.call(self.name, *args, **kwargs)


def _task_error(ref: InlineRef, err: BaseException) -> BaseException:
    """Ray's ``RayTaskError`` of ``err`` (an instance of its cause's class too), as
    ``ray.get`` raises for an exception inside an actor call."""
    from ray.exceptions import RayTaskError

    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return RayTaskError(ref.what, text, err).as_instanceof_cause()


def _value(ref: InlineRef) -> Any:
    err = ref.future.exception()
    if err is not None:
        raise _task_error(ref, err) from err
    return ref.future.result()


def get(refs: Union[InlineRef, Sequence[InlineRef]], timeout: Optional[float] = None) -> Any:
    """An in-process ``ray.get``: the value(s), waiting up to ``timeout`` seconds in all.

    Raises:
        ray.exceptions.GetTimeoutError: not all done within ``timeout``.
        ray.exceptions.RayTaskError: a call raised (an instance of its cause's class too).
    """
    many = isinstance(refs, (list, tuple))
    items = list(refs) if many else [refs]
    _, pending = wait_futures([r.future for r in items], timeout=timeout)
    if pending:
        from ray.exceptions import GetTimeoutError

        raise GetTimeoutError(f"{len(pending)} in-process calls not done within {timeout}s")
    values = [_value(r) for r in items]
    return values if many else values[0]


def wait(refs: Sequence[InlineRef], num_returns: int = 1, timeout: Optional[float] = None
         ) -> tuple[list[InlineRef], list[InlineRef]]:
    """An in-process ``ray.wait``: ``(ready, pending)`` in the order given, at most
    ``num_returns`` ready, once that many are done or ``timeout`` seconds passed."""
    refs = list(refs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = [r for r in refs if r.future.done()]
        left = None if deadline is None else deadline - time.monotonic()
        if len(done) >= num_returns or (left is not None and left <= 0):
            break
        wait_futures([r.future for r in refs if not r.future.done()], timeout=left,
                     return_when=FIRST_COMPLETED)
    ready = done[:num_returns]
    chosen = {id(r) for r in ready}
    return ready, [r for r in refs if id(r) not in chosen]
