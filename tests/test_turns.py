"""Calls handed to threads take turns: one at a time, but never held up for longer than
the grace by a call that does not end."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from hatp import _turns
from hatp._turns import in_turn

#: Long enough that no call of these tests outlives it, unless made to.
LONG = 60.0
#: How long a test waits for something it expects to happen (not a timing claim).
WAIT = 10.0


@pytest.fixture(autouse=True)
def _long_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of these tests keeps its turn until it ends, unless a test says less."""
    monkeypatch.setattr(_turns, "GRACE_SECONDS", LONG)


class Gated:
    """A blocking call that starts, says so, and ends when told."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self._log = log
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> str:
        self._log.append(f"{self.name} starts")
        self.started.set()
        if not self.go.wait(WAIT):
            raise TimeoutError(f"{self.name} was never let go")
        self._log.append(f"{self.name} ends")
        return self.name


async def _started(call: Gated) -> None:
    await asyncio.to_thread(call.started.wait, WAIT)
    assert call.started.is_set(), f"{call.name} never started"


def test_calls_start_one_at_a_time_in_the_order_they_came() -> None:
    """While a call runs within its grace, the next waits; each starts when the one
    before it ends, in the order they were made."""
    log: list[str] = []
    first, second, third = Gated("a", log), Gated("b", log), Gated("c", log)

    async def body() -> list[str]:
        runs = [
            asyncio.ensure_future(in_turn(lambda call=call: asyncio.to_thread(call)))
            for call in (first, second, third)
        ]
        await _started(first)
        await asyncio.sleep(0.05)
        assert not second.started.is_set() and not third.started.is_set()
        first.go.set()
        await _started(second)
        assert not third.started.is_set()
        second.go.set()
        await _started(third)
        third.go.set()
        return list(await asyncio.gather(*runs))

    assert asyncio.run(body()) == ["a", "b", "c"]
    assert log == ["a starts", "a ends", "b starts", "b ends", "c starts", "c ends"]


def test_a_call_that_does_not_end_holds_the_others_up_only_for_its_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stuck call (a database that stopped answering) lets the next start beside it once
    its grace has passed: the others run and end while it is still stuck."""
    monkeypatch.setattr(_turns, "GRACE_SECONDS", 0.05)
    log: list[str] = []
    stuck, after = Gated("stuck", log), Gated("after", log)
    after.go.set()

    async def body() -> None:
        held = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(stuck)))
        await _started(stuck)
        assert await asyncio.wait_for(in_turn(lambda: asyncio.to_thread(after)), WAIT) == "after"
        assert not held.done()
        stuck.go.set()
        assert await held == "stuck"

    asyncio.run(body())
    assert log == ["stuck starts", "after starts", "after ends", "stuck ends"]


def test_a_failing_call_passes_its_turn_on() -> None:
    """A call that raises ends its turn like any other: its error reaches its caller and
    the next call runs."""

    def fail() -> None:
        raise KeyError("no such branch")

    async def body() -> str:
        failing = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(fail)))
        following = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(lambda: "next")))
        with pytest.raises(KeyError, match="no such branch"):
            await failing
        return await asyncio.wait_for(following, WAIT)

    assert asyncio.run(body()) == "next"


def test_a_caller_that_stops_waiting_for_its_turn_loses_no_one_elses() -> None:
    """A caller cancelled while it waits never runs its call; the turn goes to the next
    caller still waiting, and later callers run as well."""
    log: list[str] = []
    first, dropped, kept = Gated("a", log), Gated("dropped", log), Gated("kept", log)
    kept.go.set()

    async def body() -> None:
        running = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(first)))
        await _started(first)
        waiting = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(dropped)))
        queued = asyncio.ensure_future(in_turn(lambda: asyncio.to_thread(kept)))
        await asyncio.sleep(0)
        waiting.cancel()
        first.go.set()
        assert await running == "a"
        assert await asyncio.wait_for(queued, WAIT) == "kept"
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await asyncio.wait_for(in_turn(lambda: asyncio.to_thread(lambda: "later")), WAIT)

    asyncio.run(body())
    assert log == ["a starts", "a ends", "kept starts", "kept ends"]


def test_a_caller_cancelled_as_its_turn_came_passes_it_on() -> None:
    """A caller handed the turn and cancelled before it could start gives the turn to the
    next caller instead of keeping it."""
    started: list[str] = []

    async def body() -> None:
        loop = asyncio.get_running_loop()
        release = loop.create_future()
        waiting: asyncio.Future[str]

        async def first() -> str:
            started.append("a")
            await release
            # Runs before the waiting caller resumes with the turn this call hands it.
            loop.call_soon(waiting.cancel)
            return "a"

        async def call(name: str) -> str:
            started.append(name)
            return name

        running = asyncio.ensure_future(in_turn(first))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(in_turn(lambda: call("handed")))
        queued = asyncio.ensure_future(in_turn(lambda: call("next")))
        await asyncio.sleep(0)
        release.set_result(None)
        assert await running == "a"
        assert await asyncio.wait_for(queued, WAIT) == "next"
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await asyncio.wait_for(in_turn(lambda: call("later")), WAIT) == "later"

    asyncio.run(body())
    assert started == ["a", "next", "later"]


def test_each_event_loop_has_turns_of_its_own() -> None:
    """A call stuck on one loop does not hold up the calls of another loop."""
    log: list[str] = []
    stuck = Gated("stuck", log)

    async def hold() -> str:
        return await in_turn(lambda: asyncio.to_thread(stuck))

    holder = threading.Thread(target=lambda: asyncio.run(hold()))
    holder.start()
    try:
        assert stuck.started.wait(WAIT)

        async def other() -> str:
            return await in_turn(lambda: asyncio.to_thread(lambda: "other loop"))

        assert asyncio.run(asyncio.wait_for(other(), WAIT)) == "other loop"
    finally:
        stuck.go.set()
        holder.join(WAIT)


def test_a_loop_that_ended_leaves_no_turns_behind() -> None:
    """The turns of a loop are dropped with the loop: a process that runs many loops
    (each asyncio.run) does not keep them all."""

    async def one() -> str:
        return await in_turn(lambda: asyncio.to_thread(lambda: "done"))

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(one()) == "done"
        assert loop in _turns._of_loop
    finally:
        loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None  # nothing of the turns kept the loop alive
