"""Waiting for the first of several things, without losing a cancellation.

Written by hand: ``asyncio.wait(..., return_when=FIRST_COMPLETED)`` leaves the
others running, and awaiting them after cancelling under
``suppress(CancelledError)`` also swallows a cancellation of the waiter
itself; ``gather(..., return_exceptions=True)`` does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["first_of"]


async def first_of(*awaitables: Awaitable[Any]) -> None:
    """Return once the first of ``awaitables`` is done; cancel the others and wait for
    them to end. A cancellation of the caller propagates, whenever it comes."""
    waits = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
