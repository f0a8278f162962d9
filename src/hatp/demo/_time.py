"""Simulated time: a manual clock moved on whenever everything that can run has run.

The scenarios about holds that lapse play out over half an hour of protocol
time. On the simulated clock they take a second of wall time, and every
part (coordinator, participants, gateway) still waits on the one clock,
exactly as it does on the real one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from hatp.clock import ManualClock

T = TypeVar("T")

#: How many times the event loop is given a turn before the clock moves.
_TURNS = 50


async def simulate(clock: ManualClock, run: Awaitable[T], step: float = 30.0) -> T:
    """Await ``run``, moving ``clock`` on ``step`` seconds whenever every coroutine that
    can run has run (and store work in worker threads has had a moment)."""
    task = asyncio.ensure_future(run)
    while not task.done():
        for _ in range(_TURNS):
            await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        if not task.done():
            clock.advance(step)
    return await task
