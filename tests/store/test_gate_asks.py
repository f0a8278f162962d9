"""A tool server's asks to the Human Gateway for calls without an approval: at most one
open ask per call and requester, on every database, across threads and restarts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import TypeAdapter

from hatp.errors import StoreUnavailable
from hatp.evidence import canonicalize
from hatp.model.plan import Name
from hatp.store import GateAsk, GateAsks, Store, open_store
from racing import race

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
DECIDE_BY = NOW + timedelta(minutes=15)
SERVER = "https://payments.example"
CALL = {
    "server": SERVER,
    "call_digest": "sha256:call-1",
    "agent": "agent://acme.com/travel-bot",
    "on_behalf_of": "human://acme.com/dana",
}
RACERS = 8
NAMES = TypeAdapter(Name)


def key_hex(**changes: str) -> str:
    """The key a request id carries: hex SHA-256 of the call and requester's canonical JSON."""
    call = {**CALL, **changes}
    wire = {
        "server": call["server"],
        "callDigest": call["call_digest"],
        "agent": call["agent"],
        "onBehalfOf": call["on_behalf_of"],
    }
    return hashlib.sha256(canonicalize(wire)).hexdigest()


def start(asks: GateAsks, **changes: Any) -> GateAsk:
    """Start an ask for the payments server's ``pay`` call (or what ``changes`` say)."""
    call: dict[str, Any] = {**CALL, "tool": "pay", "decide_by": DECIDE_BY, "now": NOW}
    return asks.start(**{**call, **changes})


def current(asks: GateAsks, **changes: str) -> GateAsk | None:
    return asks.current(**{**CALL, **changes})


def test_start_opens_the_first_ask_with_a_deterministic_request_id_STORE_GATE_ASK_ONE(
    store: Store,
) -> None:
    """[STORE-GATE-ASK-ONE] the first ask of a call and requester is seq 1, its request id
    ``{tool}-{key[:20]}-1``; current() finds it, and only for that call and requester."""
    asks = GateAsks(store)
    assert current(asks) is None
    ask = start(asks)
    assert ask == GateAsk(
        request_id=f"pay-{key_hex()[:20]}-1",
        server=SERVER,
        tool="pay",
        call_digest="sha256:call-1",
        agent="agent://acme.com/travel-bot",
        on_behalf_of="human://acme.com/dana",
        seq=1,
        ask_id=None,
        asked_at=NOW,
        decide_by=DECIDE_BY,
    )
    assert ask.open
    assert current(asks) == ask
    assert asks.get(ask.request_id) == ask
    for other in (
        {"server": "https://other.example"},
        {"call_digest": "sha256:call-2"},
        {"agent": "agent://acme.com/other-bot"},
        {"on_behalf_of": "human://acme.com/erin"},
    ):
        assert current(asks, **other) is None, other


def test_start_while_an_ask_is_open_returns_it_unchanged_STORE_GATE_ASK_ONE(
    store: Store,
) -> None:
    """[STORE-GATE-ASK-ONE] a second start of the same call and requester opens nothing:
    it returns the open ask as stored, whatever tool, deadline and time it names."""
    asks = GateAsks(store)
    first = start(asks)
    later = NOW + timedelta(minutes=1)
    again = start(asks, tool="refund", decide_by=later + timedelta(hours=1), now=later)
    assert again == first
    assert current(asks) == first


def test_each_requester_has_its_own_ask_of_one_call_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] the same call made for another person, or by another agent, is
    another key: its own ask, its own request id."""
    asks = GateAsks(store)
    dana = start(asks)
    erin = start(asks, on_behalf_of="human://acme.com/erin")
    other_bot = start(asks, agent="agent://acme.com/other-bot")
    assert len({dana.request_id, erin.request_id, other_bot.request_id}) == 3
    assert erin.request_id == f"pay-{key_hex(on_behalf_of='human://acme.com/erin')[:20]}-1"
    assert (dana.seq, erin.seq, other_bot.seq) == (1, 1, 1)
    assert current(asks, on_behalf_of="human://acme.com/erin") == erin


def test_close_ends_the_ask_and_the_next_start_opens_the_next_seq_STORE_GATE_ASK_ONE(
    store: Store,
) -> None:
    """[STORE-GATE-ASK-ONE] closing says why and when; current() no longer finds it; the
    next identical call opens seq 2 under a new request id."""
    asks = GateAsks(store)
    first = start(asks)
    closed_at = NOW + timedelta(minutes=2)
    assert asks.close(first.request_id, "used", closed_at) is True
    assert current(asks) is None
    stored = asks.get(first.request_id)
    assert stored is not None and not stored.open
    assert (stored.closed_at, stored.closed_why) == (closed_at, "used")

    later = NOW + timedelta(minutes=3)
    second = start(asks, decide_by=later + timedelta(minutes=15), now=later)
    assert (second.seq, second.request_id) == (2, f"pay-{key_hex()[:20]}-2")
    assert (second.asked_at, second.open) == (later, True)
    assert current(asks) == second
    assert asks.close(second.request_id, "rejected", later) is True
    assert start(asks, now=later).seq == 3


def test_closing_twice_or_an_unknown_request_returns_false_STORE_GATE_ASK_ONE(
    store: Store,
) -> None:
    """[STORE-GATE-ASK-ONE] close() is True only for the call that closed the ask: the
    first reason and time stay; an unknown request id closes nothing."""
    asks = GateAsks(store)
    ask = start(asks)
    assert asks.close(ask.request_id, "TOOL_CHANGED", NOW) is True
    assert asks.close(ask.request_id, "used", NOW + timedelta(seconds=5)) is False
    stored = asks.get(ask.request_id)
    assert stored is not None
    assert (stored.closed_at, stored.closed_why) == (NOW, "TOOL_CHANGED")
    assert asks.close("pay-unknown-1", "used", NOW) is False
    assert asks.get("pay-unknown-1") is None


def test_a_close_needs_a_reason(store: Store) -> None:
    """close() with an empty reason is refused before anything is written."""
    asks = GateAsks(store)
    ask = start(asks)
    with pytest.raises(ValueError, match="why must not be empty"):
        asks.close(ask.request_id, "", NOW)
    assert current(asks) == ask


def test_asked_records_the_gateways_ask_id_once_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] asked() records the ask id (a retry with the same id is
    harmless); the open ask then carries it."""
    asks = GateAsks(store)
    ask = start(asks)
    asks.asked(ask.request_id, "ask-cmJQLEiKEqI8")
    asks.asked(ask.request_id, "ask-cmJQLEiKEqI8")
    found = current(asks)
    assert found is not None and found.ask_id == "ask-cmJQLEiKEqI8"
    assert start(asks) == found


def test_asked_with_another_ask_id_or_an_unknown_request_is_refused_STORE_GATE_ASK_ONE(
    store: Store,
) -> None:
    """[STORE-GATE-ASK-ONE] the gateway answers one request id with one ask: another ask
    id for the same request is a ValueError and changes nothing; so is an unknown one."""
    asks = GateAsks(store)
    ask = start(asks)
    asks.asked(ask.request_id, "ask-first")
    with pytest.raises(ValueError, match="has ask id ask-first recorded, not ask-second"):
        asks.asked(ask.request_id, "ask-second")
    found = current(asks)
    assert found is not None and found.ask_id == "ask-first"
    with pytest.raises(ValueError, match="no gate ask was started as request pay-none-1"):
        asks.asked("pay-none-1", "ask-first")
    assert asks.get("pay-none-1") is None


@pytest.mark.parametrize(
    ("tool", "head"),
    [
        ("send_payment", "send_payment"),
        ("t" * 128, "t" * (128 - len("--1") - 20)),
        ("9lives", "call-9lives"),
        ("_private.tool-x", "call-_private.tool-x"),
        ("-" + "x" * 127, ("call--" + "x" * 127)[: 128 - len("--1") - 20]),
    ],
)
def test_every_request_id_is_a_name_of_at_most_128_characters_STORE_GATE_ASK_ONE(
    store: Store, tool: str, head: str
) -> None:
    """[STORE-GATE-ASK-ONE] a request id is a CallRequest ``requestId`` (a Name): a tool
    part shortened to fit, prefixed ``call-`` when the tool does not start with a letter."""
    asks = GateAsks(store)
    ask = start(asks, tool=tool)
    assert ask.request_id == f"{head}-{key_hex()[:20]}-1"
    assert NAMES.validate_python(ask.request_id) == ask.request_id
    assert len(ask.request_id) <= 128
    assert ask.tool == tool


def test_a_long_tool_name_still_fits_as_seq_grows_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] with a 128-character tool, seq 10 shortens the tool part one
    more character: the id stays at 128."""
    asks = GateAsks(store)
    tool = "t" * 128
    for _ in range(9):
        ask = start(asks, tool=tool)
        assert asks.close(ask.request_id, "used", NOW)
    tenth = start(asks, tool=tool)
    assert tenth.seq == 10
    assert tenth.request_id == f"{'t' * (128 - 24)}-{key_hex()[:20]}-10"
    assert NAMES.validate_python(tenth.request_id) == tenth.request_id


@pytest.mark.parametrize("tool", ["", "pay money", "pay/now", "x" * 129, "café"])
def test_a_tool_that_is_not_an_mcp_tool_name_is_refused(store: Store, tool: str) -> None:
    """start() refuses a tool name no CallRequest could carry; nothing is written."""
    asks = GateAsks(store)
    with pytest.raises(ValueError, match="tool must be an MCP tool name"):
        start(asks, tool=tool)
    assert current(asks) is None


def test_a_request_id_taken_by_another_call_is_refused_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] a planted row of another key holding the request id this call
    would get (keys sharing 20 hex digits): start() raises instead of looping, and
    writes nothing."""
    planted = f"pay-{key_hex()[:20]}-1"
    with store.transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO hatp_gate_ask (call_key, seq, request_id, server, tool, "
                "call_digest, agent, on_behalf_of, asked_at, decide_by, open_key) VALUES "
                "('other', 1, :r, 's', 'pay', 'd', 'a', 'h', 0, 0, 'other')"
            ),
            {"r": planted},
        )
    asks = GateAsks(store)
    with pytest.raises(RuntimeError, match=f"the request id {planted} of this call is another"):
        start(asks)
    assert current(asks) is None


def test_prune_deletes_closed_asks_but_each_keys_newest_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] prune(closed_before) deletes the asks closed before the time
    and says how many; open asks stay, and so does each key's newest ask, so a later ask
    never gets a seq (a request id) the gateway has seen."""
    asks = GateAsks(store)
    cut = NOW + timedelta(hours=1)
    dana = [start(asks)]
    for closed in (cut - timedelta(minutes=30), cut - timedelta(milliseconds=1), cut):
        assert asks.close(dana[-1].request_id, "used", closed)
        dana.append(start(asks))
    # dana: seq 1 and 2 closed before the cut, seq 3 closed at it, seq 4 open.
    erin = start(asks, on_behalf_of="human://acme.com/erin")
    assert asks.close(erin.request_id, "rejected", cut - timedelta(hours=1))  # its newest

    assert asks.prune(closed_before=cut) == 2
    assert [asks.get(a.request_id) is not None for a in dana] == [False, False, True, True]
    assert asks.get(erin.request_id) is not None
    assert current(asks) == dana[-1]
    assert asks.prune(closed_before=cut) == 0

    after = start(asks, on_behalf_of="human://acme.com/erin")
    assert after.seq == 2
    assert asks.close(after.request_id, "used", cut)
    assert asks.close(dana[-1].request_id, "used", cut)
    assert asks.prune(closed_before=cut + timedelta(days=1)) == 2  # dana 3, erin 1
    assert start(asks).seq == 5
    assert start(asks, on_behalf_of="human://acme.com/erin").seq == 3


def test_naive_times_are_refused_and_nothing_is_written(store: Store) -> None:
    """A time without a zone is refused with ValueError naming it, before any write."""
    asks = GateAsks(store)
    naive = NOW.replace(tzinfo=None)
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        start(asks, now=naive)
    with pytest.raises(ValueError, match="decide_by must be timezone-aware"):
        start(asks, decide_by=naive)
    assert current(asks) is None
    ask = start(asks)
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        asks.close(ask.request_id, "used", naive)
    assert current(asks) == ask
    with pytest.raises(ValueError, match="closed_before must be timezone-aware"):
        asks.prune(closed_before=naive)


def test_an_ask_outlives_a_restart_STORE_GATE_ASK_ONE(store_url: str) -> None:
    """[STORE-GATE-ASK-ONE] an ask started and asked before the store was closed is the
    open ask when it is opened again: a restarted server sends the same request id."""
    first = open_store(store_url)
    try:
        asks = GateAsks(first)
        ask = start(asks)
        asks.asked(ask.request_id, "ask-1")
    finally:
        first.close()
    reopened = open_store(store_url)
    try:
        found = start(GateAsks(reopened), now=NOW + timedelta(minutes=5))
    finally:
        reopened.close()
    assert found.request_id == ask.request_id
    assert found.ask_id == "ask-1"


def test_racing_starts_on_separate_connections_make_one_ask_STORE_GATE_ASK_ONE(
    store: Store, open_more: Callable[[], Store]
) -> None:
    """[STORE-GATE-ASK-ONE] threads on separate stores (as separate server processes)
    start the same call at once, round after round with the ask closed in between:
    each round makes exactly one ask, and every racer gets it."""
    racers = [GateAsks(open_more()) for _ in range(RACERS)]
    asks = GateAsks(store)
    for round_ in range(1, 6):
        results = race([partial(start, mine) for mine in racers])
        assert {got.request_id for got in results} == {f"pay-{key_hex()[:20]}-{round_}"}
        assert all(got == results[0] for got in results), results
        assert current(asks) == results[0]
        assert asks.close(results[0].request_id, "used", NOW)
    with store.transaction() as conn:
        rows = conn.execute(sa.text("SELECT seq FROM hatp_gate_ask ORDER BY seq")).all()
    assert [row.seq for row in rows] == [1, 2, 3, 4, 5]


def test_racing_starts_on_one_store_make_one_ask_STORE_GATE_ASK_ONE(store: Store) -> None:
    """[STORE-GATE-ASK-ONE] threads sharing one store (one server's pool): one ask."""
    asks = GateAsks(store)
    for round_ in range(1, 4):
        results = race([partial(start, asks) for _ in range(RACERS)])
        assert {got.seq for got in results} == {round_}
        assert all(got == results[0] for got in results), results
        assert asks.close(results[0].request_id, "used", NOW)


def test_racing_closes_close_once_STORE_GATE_ASK_ONE(
    store: Store, open_more: Callable[[], Store]
) -> None:
    """[STORE-GATE-ASK-ONE] of several closes of one ask at once exactly one is True."""
    ask = start(GateAsks(store))
    racers = [GateAsks(open_more()) for _ in range(4)]
    results = race(
        [partial(mine.close, ask.request_id, f"why-{n}", NOW) for n, mine in enumerate(racers)]
    )
    assert results.count(True) == 1, results
    stored = GateAsks(store).get(ask.request_id)
    assert stored is not None and stored.closed_why == f"why-{results.index(True)}"


def test_a_database_failure_is_store_unavailable_STORE_ATOMIC(store: Store) -> None:
    """[STORE-ATOMIC] a database that refuses the statements (here: the table is gone)
    fails every method with STORE_UNAVAILABLE, nothing recorded."""
    asks = GateAsks(store)
    with store.transaction() as conn:
        conn.exec_driver_sql("DROP TABLE hatp_gate_ask")
    calls: list[Callable[[], object]] = [
        partial(current, asks),
        partial(start, asks),
        partial(asks.get, "pay-1"),
        partial(asks.asked, "pay-1", "ask-1"),
        partial(asks.close, "pay-1", "used", NOW),
        partial(asks.prune, closed_before=NOW),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailable, match="nothing of it was recorded"):
            call()
