"""The injectable clock and the one wire time format."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.clock import (
    EARLIEST_WIRE_TIME,
    LATEST_WIRE_TIME,
    ManualClock,
    SystemClock,
    format_time,
    parse_time,
)
from hatp.errors import TimeInvalid


def test_wire_time_is_utc_with_milliseconds_and_round_trips() -> None:
    moment = datetime(2026, 12, 2, 16, 48, 8, 123456, tzinfo=timezone(timedelta(hours=2)))
    text = format_time(moment)
    assert text == "2026-12-02T14:48:08.123Z"
    assert parse_time(text) == moment.replace(microsecond=123000)


@given(
    st.datetimes(
        min_value=datetime(1000, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7, minutes=-30))]),
    )
)
def test_wire_time_is_the_strftime_form_truncated_to_milliseconds(moment: datetime) -> None:
    """format_time writes what RFC 3339 with ``strftime`` would: UTC, milliseconds cut
    (never rounded) and ``Z``, four-digit years."""
    utc = moment.astimezone(UTC)
    expected = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    assert format_time(moment) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-02T14:48:08Z",  # no milliseconds
        "2026-12-02T14:48:08.123+00:00",  # not Z
        "2026-12-02 14:48:08.123Z",
        "2026-02-30T00:00:00.000Z",  # no such day
        "٢٠٢٦-12-02T14:48:08.123Z",  # non-ASCII digits would break text order
        "2026-12-02T14:48:08.123Z\n",
        "2026-12-02T24:00:00.000Z",  # no hour 24
        "0000-01-01T00:00:00.000Z",  # no year 0
        "9999-12-31T23:59:59.999Z",  # real, but past the wire range
        "1969-12-31T23:59:59.999Z",
    ],
)
def test_parse_time_refuses_anything_but_the_wire_form(text: str) -> None:
    """[TIME-REAL] A typed refusal, and a ValueError for the models that read times."""
    with pytest.raises(TimeInvalid) as caught:
        parse_time(text)
    assert isinstance(caught.value, ValueError)
    assert caught.value.code == "TIME_INVALID"


def test_a_year_either_side_of_every_wire_time_is_still_a_time() -> None:
    """[TIME-REAL] No duration hatp allows (at most a year) overflows from a wire time."""
    first = parse_time(format_time(EARLIEST_WIRE_TIME))
    last = parse_time(format_time(LATEST_WIRE_TIME - timedelta(milliseconds=1)))
    year = timedelta(days=366)
    assert format_time(first - year) < format_time(first)
    assert format_time(last + year) > format_time(last)


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError):
        format_time(datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        ManualClock(datetime(2026, 1, 1))


def test_manual_clock_moves_only_forward_and_when_told() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    before = clock.now()
    assert clock.now() == before
    clock.advance(1.5)
    assert clock.now() - before == timedelta(seconds=1.5)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_system_clock_is_aware_utc() -> None:
    assert SystemClock().now().tzinfo is UTC


def test_manual_clock_sleepers_wake_only_when_the_clock_reaches_their_time() -> None:
    clock = ManualClock(datetime(2026, 12, 2, 9, 0, tzinfo=UTC))

    async def scenario() -> list[str]:
        woke: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=seconds))
            woke.append(name)

        tasks = [asyncio.create_task(sleeper("soon", 10)), asyncio.create_task(sleeper("late", 60))]
        await asyncio.sleep(0)
        assert clock.sleepers == 2
        clock.advance(30)
        await asyncio.sleep(0)
        assert woke == ["soon"] and clock.sleepers == 1
        clock.advance(30)
        await asyncio.gather(*tasks)
        assert clock.sleepers == 0
        await clock.sleep_until(clock.now() - timedelta(seconds=1))  # the past: at once
        return woke

    assert asyncio.run(scenario()) == ["soon", "late"]


def test_a_cancelled_sleeper_is_forgotten() -> None:
    clock = ManualClock(datetime(2026, 12, 2, 9, 0, tzinfo=UTC))

    async def scenario() -> int:
        task = asyncio.create_task(clock.sleep_until(clock.now() + timedelta(seconds=5)))
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return clock.sleepers

    assert asyncio.run(scenario()) == 0


def test_system_clock_sleep_until_returns_only_once_the_moment_has_come() -> None:
    clock = SystemClock()

    async def scenario() -> tuple[datetime, datetime, bool]:
        moment = clock.now() + timedelta(milliseconds=20)
        await asyncio.wait_for(clock.sleep_until(moment), 5)
        woke = clock.now()
        past = asyncio.ensure_future(clock.sleep_until(clock.now() - timedelta(seconds=5)))
        await asyncio.sleep(0)  # one turn of the loop: a moment in the past needs no more
        return moment, woke, past.done()

    moment, woke, past_done = asyncio.run(scenario())
    assert woke >= moment
    assert past_done
