"""In-process participants' calls, handed to threads from one event loop, take turns.

An in-process participant (:class:`~hatp.participant.ParticipantServer`) runs
each call on a worker thread, so that its database cannot freeze the event
loop. But Python runs one thread at a time, and the database drivers let go
of that lock around every statement: the calls of a transaction's branches,
run side by side in several threads, trade it back and forth at each
statement, and every trade is a context switch that costs more than the
statement (docs/design-notes.md, "Issue 24, fifth part"). Started one at a
time, the same calls do the same work without the trades.

So a call waits for its turn: it starts once no other call of the loop is
running, or once the one running has run for :data:`GRACE_SECONDS`. A call that
is slow, or stuck on a database that stopped answering, holds the others up for
that long only; after it, they start beside it, as they would without turns.
Store calls do not take turns: much of what they wait for is the disk's flush
at commit, and the coordinator's log writes would then wait behind the
participants' flushes.

Written by hand: ``asyncio.Semaphore`` has no holder that stops counting after
a while.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["GRACE_SECONDS", "in_turn"]

_T = TypeVar("_T")

#: How long a running call keeps the others waiting before they start beside it.
GRACE_SECONDS = 0.003


class _Turns:
    """The turns of one event loop (which it does not hold: it is the key it is kept
    under, weakly)."""

    def __init__(self) -> None:
        # Calls holding a turn (started, not done, within their grace). Callers wait only
        # while one does, and the last to let go hands its turn on: so when none holds
        # one, none that is still waiting is left behind.
        self._running = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def run(self, loop: asyncio.AbstractEventLoop, start: Callable[[], Awaitable[_T]]) -> _T:
        if self._running:
            turn = loop.create_future()
            self._waiting.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._pass_on()  # handed the turn as it was cancelled: pass it on
                raise
        else:
            self._running += 1
        held = True

        def let_go() -> None:
            nonlocal held
            if held:
                held = False
                self._pass_on()

        grace = loop.call_later(GRACE_SECONDS, let_go)
        try:
            return await start()
        finally:
            grace.cancel()
            let_go()

    def _pass_on(self) -> None:
        """A turn ends: hand it to the first caller still waiting, if any."""
        self._running -= 1
        while self._waiting and not self._running:
            turn = self._waiting.popleft()
            if not turn.done():  # a waiter cancelled meanwhile is skipped
                self._running += 1
                turn.set_result(None)


_of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()


async def in_turn(start: Callable[[], Awaitable[_T]]) -> _T:
    """Await ``start()``, a call handed to a worker thread, in its turn among the
    running loop's calls (see the module's docstring); return what it returns.

    Raises:
        Exception: what ``start()`` raises.
    """
    loop = asyncio.get_running_loop()
    turns = _of_loop.get(loop)
    if turns is None:
        turns = _of_loop[loop] = _Turns()
    return await turns.run(loop, start)
