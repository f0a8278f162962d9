"""Store work off the event loop, and a bound on every wait a store makes.

A store call blocks its thread until the database answers; a database that
stops answering (frozen, partitioned) would block an event loop with it, and
every request the loop serves. So async code calls the store through
:meth:`~hatp.store.Store.call`, which runs the call on one of the store's few
worker threads and waits for it at most :attr:`StoreLimits.call_seconds`,
then raises :class:`~hatp.errors.StoreUnavailable` while the loop goes on.

A call its caller gave up on is not run if it has not started; if it has,
the store refuses to begin or commit a transaction for it
(:func:`caller_gave_up`), so what the caller was told ("nothing of it was
recorded") holds unless the commit was already on its way to the database
when the caller gave up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Lane", "StoreLimits", "Workers", "caller_gave_up", "calls_in_flight"]

_T = TypeVar("_T")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreLimits:
    """How long a store waits for each thing, in seconds, and how many threads it uses.

    - ``call_seconds``: an async caller's wait for one :meth:`Store.call`, queueing
      for a worker included; past it the call fails ``STORE_UNAVAILABLE``.
    - ``statement_seconds``, ``lock_seconds``, ``idle_in_transaction_seconds``:
      PostgreSQL's ``statement_timeout``, ``lock_timeout`` and
      ``idle_in_transaction_session_timeout`` for every session.
    - ``checkout_seconds``: the wait for a connection from the pool.
    - ``connect_seconds``: the wait for a PostgreSQL server to answer a connection
      attempt (a URL's own ``connect_timeout`` takes precedence).
    - ``busy_seconds``: SQLite's ``busy_timeout``, the wait for another connection's
      write lock.
    - ``workers``: the threads that run :meth:`Store.call`.

    Raises:
        ValueError: a time that is not a positive finite number, or fewer than one
            worker.
    """

    call_seconds: float = 10.0
    statement_seconds: float = 5.0
    lock_seconds: float = 5.0
    idle_in_transaction_seconds: float = 30.0
    checkout_seconds: float = 5.0
    connect_seconds: float = 10.0
    busy_seconds: float = 15.0
    workers: int = 8

    def __post_init__(self) -> None:
        for name in (
            "call_seconds",
            "statement_seconds",
            "lock_seconds",
            "idle_in_transaction_seconds",
            "checkout_seconds",
            "connect_seconds",
            "busy_seconds",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} is a number of seconds, not {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be an integer of at least 1, not {self.workers!r}")


class _Call:
    """One call handed to a worker; ``abandoned`` once its caller stopped waiting."""

    __slots__ = ("abandoned",)

    def __init__(self) -> None:
        self.abandoned = False


_current = threading.local()
# Calls handed to a worker and not finished, across every store of the process.
_in_flight = 0
_in_flight_lock = threading.Lock()


def calls_in_flight() -> int:
    """How many :meth:`Store.call` calls of this process a worker has yet to finish
    (queued or running): a simulated clock moves only when there are none."""
    return _in_flight


def _count(step: int) -> None:
    global _in_flight
    with _in_flight_lock:
        _in_flight += step


def caller_gave_up() -> bool:
    """Whether the async caller the current worker thread runs a call for stopped
    waiting for it (``False`` on any other thread)."""
    call: _Call | None = getattr(_current, "call", None)
    return call is not None and call.abandoned


class Workers:
    """A fixed number of daemon threads running store calls for async callers.

    Daemon threads: one stuck on a database that stopped answering does not
    keep the process from exiting.
    """

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    async def call(
        self,
        seconds: float,
        lane: Lane | None,
        fn: Callable[..., _T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> _T | _TimedOut:
        """Run ``fn(*args, **kwargs)`` on a worker (after the calls made before it in
        ``lane``); return what it returns, or :data:`TIMED_OUT` when ``seconds`` pass
        first. Raises what ``fn`` raises."""
        scope = asyncio.timeout(seconds)
        try:
            async with scope:
                if lane is None:
                    return await self._run(fn, args, kwargs)
                async with lane.lock():
                    return await self._run(fn, args, kwargs)
        except TimeoutError:
            if not scope.expired():
                raise  # fn's own TimeoutError
            return TIMED_OUT

    async def _run(
        self, fn: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _T:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()
        call = _Call()

        def job() -> None:
            try:
                if call.abandoned:
                    return
                _current.call = call
                try:
                    result = fn(*args, **kwargs)
                except Exception as error:
                    _settle(loop, done, None, error)
                else:
                    _settle(loop, done, result, None)
                finally:
                    _current.call = None
            finally:
                _count(-1)

        _count(1)
        try:
            self._submit(job)
        except BaseException:
            _count(-1)
            raise
        try:
            return await done
        finally:
            if not done.done() or done.cancelled():
                call.abandoned = True

    def close(self, wait_seconds: float = 0.0) -> None:
        """Let the workers end once the calls queued so far are done (or given up), and
        wait up to ``wait_seconds`` for them to: a call whose caller gave up on it may
        still hold a connection, which must be back before the pool is disposed."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            for _ in threads:
                self._jobs.put(None)
        deadline = time.monotonic() + wait_seconds
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            if not self._threads:
                for number in range(self._count):
                    thread = threading.Thread(
                        target=self._work, name=f"{self._name}-{number}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
            self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException:  # a job settles its own future; this is a bug in job
                _log.exception("a store worker's job failed outside its call")


class Lane:
    """Store calls that run one at a time, in the order they were made (see
    :meth:`Store.lane`)."""

    def __init__(self) -> None:
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def lock(self) -> asyncio.Lock:
        """This lane's lock on the running loop (a lane may outlive a loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._locks:
            self._locks = {loop: asyncio.Lock()}  # an ended loop's lock is dropped
        return self._locks[loop]


class _TimedOut:
    """What :meth:`Workers.call` returns when its caller stopped waiting."""


TIMED_OUT = _TimedOut()


def _settle(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[_T],
    result: _T | None,
    error: Exception | None,
) -> None:
    def settle() -> None:
        if done.done():  # the caller gave up
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(settle)
