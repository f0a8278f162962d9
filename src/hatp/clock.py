"""The one injectable clock.

Protocol code never reads the system time itself: it takes a :class:`Clock`,
so deadlines, leases and record times are testable without sleeping.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = [
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


class Clock(Protocol):
    """Where protocol code gets the time from."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to; for tests and replays."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backward)."""
        if seconds < 0:
            raise ValueError("a clock never moves backward")
        self._now += timedelta(seconds=seconds)


def format_time(moment: datetime) -> str:
    """Return the wire form of a time: RFC 3339, UTC, milliseconds, ``Z``."""
    if moment.tzinfo is None:
        raise ValueError("wire times must be timezone-aware")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Parse the wire form written by :func:`format_time`.

    Raises:
        ValueError: ``text`` is not exactly of the form ``YYYY-MM-DDTHH:MM:SS.mmmZ``.
    """
    if not _TIME_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a wire time (YYYY-MM-DDTHH:MM:SS.mmmZ)")
    # The shape is fixed above; fromisoformat checks the calendar (and is
    # ten times faster than strptime, which matters per record event).
    return datetime.fromisoformat(text)
