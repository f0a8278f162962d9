"""Calling a participant: a bounded wait, and telling "no" apart from "no answer".

A refusal (a typed :class:`~hatp.errors.HatpError`) is a definite answer. A
timeout, a lost connection, a crash inside the participant, or an
:class:`~hatp.errors.Unavailable` refusal (its store failed, a peer did not
answer) is not: the request may or may not have taken effect, so calls are
retried with the same idempotency key (txnId + branchId), which doubles as a
status query, and nothing that depends on them counts as settled meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hatp import _checks
from hatp.errors import HatpError, ParticipantUnavailable, StaleFence, Unavailable

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Answer:
    """What one call came back with: a receipt, a refusal, or nothing definite."""

    receipt: dict[str, Any] | None = None
    refusal: HatpError | None = None
    silence: str | None = None


async def call_once(call: Callable[[], Awaitable[dict[str, Any]]], timeout: float) -> Answer:
    """Make one call, waiting at most ``timeout`` seconds.

    Raises:
        StaleFence: the participant has seen a newer owner; the caller must stop.
    """
    try:
        return Answer(receipt=await bounded(call(), timeout))
    except StaleFence:
        raise
    except Unavailable as exc:  # its store, or the way to it, failed: no answer
        if not _checks.is_on("COORD-SETTLE") and not isinstance(exc, ParticipantUnavailable):
            return Answer(refusal=exc)  # the naive reading: a refusal is an answer
        return Answer(silence=f"{exc.code}: {exc.message}")
    except HatpError as exc:
        return Answer(refusal=exc)
    except TimeoutError:
        return Answer(silence=f"no answer within {timeout:g} s")
    except Exception as exc:  # a participant's own bug is not an answer either
        _log.warning("a participant call failed, taken as no answer", exc_info=True)
        return Answer(silence=f"{type(exc).__name__}: {exc}")


async def bounded(call: Awaitable[_T], timeout: float) -> _T:
    """Await ``call`` for at most ``timeout`` seconds, in the calling task.

    Raises:
        TimeoutError: no answer in time (``call`` is cancelled), or what ``call`` raises.
    """
    # asyncio.wait_for on Python 3.11 runs the call in a task of its own: a task,
    # and a turn of the loop, more per participant call than this (3.12's wait_for
    # is this).
    async with asyncio.timeout(timeout):
        return await call


def backoff(attempt: int, base: float, cap: float = 2.0) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, …): doubling from ``base`` up to ``cap``."""
    return min(cap, base * 2 ** (attempt - 1)) if base > 0 else 0.0
