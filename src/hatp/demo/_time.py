"""Simulated time: a manual clock moved on only when everything is waiting on it.

The scenarios about holds that lapse play out over half an hour of protocol
time. On the simulated clock they take a second of wall time, and every
part (coordinator, participants, gateway) still waits on the one clock,
exactly as it does on the real one. The clock moves only when no coroutine
can run and no store work is in flight in a worker thread, so a slow
machine makes the run slower, never different.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from hatp.clock import ManualClock
from hatp.store import calls_in_flight

T = TypeVar("T")

#: How many times the event loop is given a turn before the clock may move.
_TURNS = 50


class _CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor (``asyncio.to_thread``), counting work in flight."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="hatp-simulated")
        self._lock = threading.Lock()
        self._busy = 0

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._busy > 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self._busy += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._busy -= 1


async def simulate(clock: ManualClock, run: Awaitable[T], step: float = 30.0) -> T:
    """Await ``run``, moving ``clock`` on ``step`` seconds whenever every coroutine that
    can run has run and no worker thread is busy."""
    loop = asyncio.get_running_loop()
    executor = _CountingExecutor()
    loop.set_default_executor(executor)
    task = asyncio.ensure_future(run)
    while not task.done():
        if executor.busy or calls_in_flight():  # the loop's executor, or Store.call's
            await asyncio.sleep(0.001)
            continue
        for _ in range(_TURNS):  # what the finished work woke runs, and may start more
            await asyncio.sleep(0)
        if not task.done() and not executor.busy and not calls_in_flight():
            clock.advance(step)
    return await task
