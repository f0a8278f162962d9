"""The one injectable clock.

Protocol code never reads the system time itself: it takes a :class:`Clock`,
so deadlines, leases and record times are testable without sleeping.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Protocol

from hatp.errors import TimeInvalid

__all__ = [
    "EARLIEST_WIRE_TIME",
    "LATEST_WIRE_TIME",
    "WIRE_TIME_PATTERN",
    "Clock",
    "ManualClock",
    "SystemClock",
    "format_time",
    "parse_time",
]

#: The wire time, RFC 3339 in UTC with milliseconds (ASCII digits only, so text
#: order is time order). Unanchored; match it whole.
WIRE_TIME_PATTERN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z"
_TIME_RE = re.compile(WIRE_TIME_PATTERN)
#: The first instant a wire time may name (docs/spec.md, [TIME-REAL]).
EARLIEST_WIRE_TIME = datetime(1970, 1, 1, tzinfo=UTC)
#: The first instant after the last one a wire time may name. Every duration hatp
#: adds to or takes from a wire time is at most a year, so with a millennium to
#: spare on either side no deadline, lease or horizon arithmetic leaves the
#: calendar (``datetime`` ends at 9999-12-31).
LATEST_WIRE_TIME = datetime(9000, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    """Where protocol code gets the time from."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...

    async def sleep_until(self, moment: datetime) -> None:
        """Return once the clock reads ``moment`` or later."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, moment: datetime) -> None:
        while (left := (moment - datetime.now(UTC)).total_seconds()) > 0:
            await asyncio.sleep(left)


class ManualClock:
    """A clock that moves only when told to; for tests and replays."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, moment: datetime) -> None:
        """Return once :meth:`advance` has moved the clock to ``moment`` or later."""
        if moment <= self._now:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((moment, future))
        try:
            await future
        finally:
            self._sleepers = [(m, f) for m, f in self._sleepers if f is not future]

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backward)."""
        if seconds < 0:
            raise ValueError("a clock never moves backward")
        self._now += timedelta(seconds=seconds)
        # Wake sleepers whose time has come (call from the event loop's thread).
        for moment, future in self._sleepers:
            if moment <= self._now and not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many coroutines are waiting on this clock (lets tests wait for a waiter)."""
        return sum(1 for _, f in self._sleepers if not f.done())


def format_time(moment: datetime) -> str:
    """Return the wire form of a time: RFC 3339, UTC, milliseconds, ``Z``."""
    if moment.tzinfo is None:
        raise ValueError("wire times must be timezone-aware")
    # isoformat truncates to milliseconds as the wire form does, and is twice as fast
    # as strftime (a record event, an ask and a vote each format a few times).
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_time(text: str) -> datetime:
    """Parse the wire form written by :func:`format_time`: a real instant in range.

    Raises:
        TimeInvalid: (a ``ValueError``) ``text`` is not exactly of the form
            ``YYYY-MM-DDTHH:MM:SS.mmmZ``, names no real instant (30 February,
            hour 24, year 0), or lies outside
            [:data:`EARLIEST_WIRE_TIME`, :data:`LATEST_WIRE_TIME`).
    """
    if type(text) is not str or not _TIME_RE.fullmatch(text):
        shown = repr(text)[:60]
        raise TimeInvalid(f"{shown} is not a wire time (YYYY-MM-DDTHH:MM:SS.mmmZ)")
    # The shape is fixed above; fromisoformat checks the calendar (and is
    # ten times faster than strptime, which matters per record event).
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TimeInvalid(f"{text} is not a real instant (no such day or hour)") from None
    if not EARLIEST_WIRE_TIME <= moment < LATEST_WIRE_TIME:
        raise TimeInvalid(
            f"{text} is outside the wire time range "
            f"[{format_time(EARLIEST_WIRE_TIME)}, {format_time(LATEST_WIRE_TIME)})"
        )
    return moment
