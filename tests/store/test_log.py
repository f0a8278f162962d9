"""The decision log: transactions, their record events, and the lease with its fence.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from hatp.errors import OutcomeConflict, RecordInvalid, StaleFence, TransactionUnknown
from hatp.evidence import canonicalize, digest
from hatp.model.txn import Decision, TxnState
from hatp.store import DecisionLog, Store, TxnRow, open_store

NewTxn = Callable[..., Any]


def test_create_logs_the_row_and_first_event_durably_STORE_DURABLE(
    store_url: str, log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-DURABLE] what create logged is there for a store opened afterwards."""
    txn = new_txn("txn-1")
    assert txn.create(log, owner="coord-a", lease_seconds=30) == 1
    reopened = open_store(store_url)
    try:
        row = DecisionLog(reopened).get("txn-1")
        events = DecisionLog(reopened).events("txn-1")
    finally:
        reopened.close()
    assert row == TxnRow(
        txn_id="txn-1",
        plan=txn.plan,
        plan_digest=txn.plan_digest,
        state=TxnState.ACTIVE,
        decision=None,
        owner="coord-a",
        fence=1,
        lease_until=txn.start + timedelta(seconds=30),
        head=txn.writer.head,
        created_at=txn.start,
        updated_at=txn.start,
    )
    assert events == txn.writer.events()


def test_append_adds_events_state_decision_and_moves_the_head(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    txn = new_txn("txn-1")
    fence = txn.create(log)
    prepared = txn.event("txn.prepared", branchId="flight", receipt=None, problem=None)
    decided = txn.event("txn.decided", decision="commit", reason="all voted yes")
    log.append(
        "txn-1", fence, [prepared, decided], state=TxnState.COMMITTING, decision=Decision.COMMIT
    )
    row = log.get("txn-1")
    assert (row.state, row.decision) == (TxnState.COMMITTING, Decision.COMMIT)
    assert row.head == digest(decided) == txn.writer.head
    assert row.updated_at == txn.clock.now()  # the last event's time: the store reads no clock
    assert log.events("txn-1") == txn.writer.events()
    assert log.record("txn-1") == txn.writer.to_json()


def test_events_as_their_writer_signed_them_are_stored_as_dicts_would_be(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """create and append take a writer's WrittenEvents (and create the plan's canonical
    bytes): stored as they were signed, they read back as the same record, head and time
    as the same events given as dicts."""
    txn = new_txn("txn-w")
    txn.event("txn.planned", plan=txn.plan, coordinator="coord-a", fence=1)
    fence = log.create(
        "txn-w", canonicalize(txn.plan), txn.plan_digest, "coord-a", txn.clock.now(), 30,
        txn.writer.written_since(0),
    )  # fmt: skip
    txn.event("txn.prepared", branchId="flight", note="caf\u00e9")
    txn.event("txn.decided", decision="commit", reason="all voted yes")
    log.append("txn-w", fence, txn.writer.written_since(1), state=TxnState.COMMITTING)
    row = log.get("txn-w")
    assert row.plan == txn.plan
    assert (row.head, row.updated_at, row.state) == (
        txn.writer.head,
        txn.clock.now(),
        TxnState.COMMITTING,
    )
    assert log.record("txn-w") == txn.writer.to_json()


def test_append_without_events_changes_only_the_state(log: DecisionLog, new_txn: NewTxn) -> None:
    txn = new_txn("txn-1")
    fence = txn.create(log)
    before = log.get("txn-1")
    log.append("txn-1", fence, [], state=TxnState.ABORTING)
    after = log.get("txn-1")
    assert after.state is TxnState.ABORTING
    assert (after.head, after.updated_at, after.decision) == (before.head, before.updated_at, None)


def test_create_of_a_logged_transaction_is_refused(log: DecisionLog, new_txn: NewTxn) -> None:
    txn = new_txn("txn-1")
    txn.create(log)
    again = new_txn("txn-1")
    with pytest.raises(OutcomeConflict, match="already in the log") as caught:
        again.create(log, owner="coord-b")
    assert caught.value.data["txnId"] == "txn-1"
    assert log.get("txn-1").owner == "coord-a"
    assert log.events("txn-1") == txn.writer.events()


def test_append_with_a_stale_fence_is_refused_and_writes_nothing_STORE_FENCE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-FENCE] after a takeover the old holder's fence writes nothing at all."""
    txn = new_txn("txn-1")
    old = txn.create(log, owner="coord-a", lease_seconds=10)
    new = log.acquire("txn-1", "coord-b", txn.start + timedelta(seconds=11), 30)
    assert new == old + 1
    before = log.get("txn-1")
    late = txn.event("txn.decided", decision="commit", reason="late")
    with pytest.raises(StaleFence) as caught:
        log.append("txn-1", old, [late], state=TxnState.COMMITTING, decision=Decision.COMMIT)
    assert caught.value.data == {"txnId": "txn-1", "fence": old, "current": new}
    assert log.get("txn-1") == before
    assert len(log.events("txn-1")) == 1


def test_a_fence_from_the_future_is_refused_too_STORE_FENCE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-FENCE] only the current fence writes; a higher one was never granted."""
    txn = new_txn("txn-1")
    fence = txn.create(log)
    with pytest.raises(StaleFence):
        log.append("txn-1", fence + 1, [txn.event()])
    assert len(log.events("txn-1")) == 1


def test_a_duplicate_seq_is_refused_as_stale_and_writes_nothing_STORE_FENCE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-FENCE] [STORE-ATOMIC] a seq already logged means another writer got there
    first: the whole append (its new events and its state) is refused."""
    txn = new_txn("txn-1")
    fence = txn.create(log)
    first = log.events("txn-1")[0]
    fresh = txn.event()
    with pytest.raises(StaleFence, match="already has an event"):
        log.append("txn-1", fence, [fresh, first], state=TxnState.ABORTING)
    row = log.get("txn-1")
    assert (row.state, row.head) == (TxnState.ACTIVE, digest(first))
    assert log.events("txn-1") == [first]


def test_an_event_without_an_integer_seq_is_refused(log: DecisionLog, new_txn: NewTxn) -> None:
    txn = new_txn("txn-1")
    fence = txn.create(log)
    with pytest.raises(RecordInvalid, match="integer seq"):
        log.append("txn-1", fence, [{**txn.event(), "seq": "1"}])
    assert len(log.events("txn-1")) == 1


UNKNOWN_CALLS: dict[str, Callable[[DecisionLog, Any], object]] = {
    "get": lambda log, now: log.get("nope"),
    "events": lambda log, now: log.events("nope"),
    "record": lambda log, now: log.record("nope"),
    "append": lambda log, now: log.append("nope", 1, []),
    "acquire": lambda log, now: log.acquire("nope", "coord-a", now, 30),
    "renew": lambda log, now: log.renew("nope", "coord-a", 1, now, 30),
    "release": lambda log, now: log.release("nope", "coord-a", 1),
}


@pytest.mark.parametrize("call", UNKNOWN_CALLS.values(), ids=UNKNOWN_CALLS.keys())
def test_an_unknown_transaction_is_refused_by_name(
    log: DecisionLog, new_txn: NewTxn, call: Callable[[DecisionLog, Any], object]
) -> None:
    new_txn("txn-1").create(log)
    with pytest.raises(TransactionUnknown, match="nope") as caught:
        call(log, new_txn("x").start)
    assert caught.value.data == {"txnId": "nope"}


def test_a_transaction_with_no_events_is_known(log: DecisionLog, new_txn: NewTxn) -> None:
    start = new_txn("x").start
    log.create("txn-0", {"p": 1}, "sha256:x", "coord-a", start, 30, [])
    assert log.events("txn-0") == []
    assert log.record("txn-0")["head"] is None


# -- the lease ------------------------------------------------------------------------


def test_acquire_is_refused_while_a_live_lease_is_held_STORE_LEASE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-LEASE] a live lease is not taken, not even by its own holder."""
    txn = new_txn("txn-1")
    txn.create(log, owner="coord-a", lease_seconds=30)
    almost = txn.start + timedelta(seconds=29.999)
    assert log.acquire("txn-1", "coord-b", almost, 30) is None
    assert log.acquire("txn-1", "coord-a", almost, 30) is None
    row = log.get("txn-1")
    assert (row.owner, row.fence) == ("coord-a", 1)


def test_acquire_after_the_lease_ends_moves_the_fence_up_STORE_LEASE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-LEASE] at the lease's end (inclusive) it is granted, with fence + 1."""
    txn = new_txn("txn-1")
    txn.create(log, owner="coord-a", lease_seconds=30)
    expiry = txn.start + timedelta(seconds=30)
    assert log.acquire("txn-1", "coord-b", expiry, 60) == 2
    row = log.get("txn-1")
    assert (row.owner, row.fence, row.lease_until) == (
        "coord-b",
        2,
        expiry + timedelta(seconds=60),
    )
    assert log.acquire("txn-1", "coord-c", expiry + timedelta(seconds=59), 60) is None
    assert log.acquire("txn-1", "coord-c", expiry + timedelta(seconds=60), 60) == 3


def test_renew_extends_the_lease_for_the_holder_only_STORE_LEASE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-LEASE] [STORE-FENCE] the holder renews; anyone else is refused."""
    txn = new_txn("txn-1")
    fence = txn.create(log, owner="coord-a", lease_seconds=30)
    later = txn.start + timedelta(seconds=20)
    log.renew("txn-1", "coord-a", fence, later, 30)
    assert log.get("txn-1").lease_until == later + timedelta(seconds=30)
    assert log.acquire("txn-1", "coord-b", txn.start + timedelta(seconds=31), 30) is None
    with pytest.raises(StaleFence, match="held by coord-a"):
        log.renew("txn-1", "coord-b", fence, later, 30)
    with pytest.raises(StaleFence):
        log.renew("txn-1", "coord-a", fence + 1, later, 30)
    assert log.get("txn-1").lease_until == later + timedelta(seconds=30)


def test_renew_after_a_takeover_is_refused_STORE_FENCE(log: DecisionLog, new_txn: NewTxn) -> None:
    """[STORE-FENCE] the old holder learns it lost the transaction when it renews."""
    txn = new_txn("txn-1")
    fence = txn.create(log, owner="coord-a", lease_seconds=10)
    taken = txn.start + timedelta(seconds=10)
    assert log.acquire("txn-1", "coord-b", taken, 30) == fence + 1
    with pytest.raises(StaleFence, match="taken it over") as caught:
        log.renew("txn-1", "coord-a", fence, taken, 30)
    assert caught.value.data["current"] == fence + 1


def test_release_frees_the_transaction_at_once_STORE_LEASE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-LEASE] a released transaction is claimable before its lease would have ended."""
    txn = new_txn("txn-1")
    fence = txn.create(log, owner="coord-a", lease_seconds=30)
    log.release("txn-1", "coord-a", fence)
    log.release("txn-1", "coord-a", fence)  # twice is harmless
    row = log.get("txn-1")
    assert (row.owner, row.lease_until, row.fence) == (None, None, fence)
    assert log.claimable(txn.start) == ["txn-1"]
    assert log.acquire("txn-1", "coord-b", txn.start, 30) == fence + 1


def test_the_last_append_can_give_the_lease_up_in_the_same_write_STORE_LEASE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-LEASE] append(release=True): the outcome and the release are one write."""
    txn = new_txn("txn-1")
    fence = txn.create(log, owner="coord-a", lease_seconds=30)
    outcome = txn.event("txn.outcome", state="committed")
    log.append("txn-1", fence, [outcome], state=TxnState.COMMITTED, release=True)
    row = log.get("txn-1")
    assert (row.state, row.owner, row.lease_until, row.fence) == (
        TxnState.COMMITTED,
        None,
        None,
        fence,
    )
    # A stale holder cannot release through append either: the fence is checked first.
    with pytest.raises(StaleFence):
        log.append("txn-1", fence - 1, [], release=True)


def test_release_by_a_stale_holder_is_refused_STORE_FENCE(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-FENCE] a fenced-out coordinator cannot drop its successor's lease."""
    txn = new_txn("txn-1")
    fence = txn.create(log, owner="coord-a", lease_seconds=10)
    log.acquire("txn-1", "coord-b", txn.start + timedelta(seconds=10), 30)
    with pytest.raises(StaleFence):
        log.release("txn-1", "coord-a", fence)
    with pytest.raises(StaleFence):
        log.release("txn-1", "coord-a", fence + 1)
    assert log.get("txn-1").owner == "coord-b"


# -- listing --------------------------------------------------------------------------


def test_open_and_claimable_transactions_oldest_first(log: DecisionLog, new_txn: NewTxn) -> None:
    """[STORE-LEASE] claimable: open, and no live lease on it."""
    base = new_txn("x").start
    fences = {}
    for minute, txn_id in enumerate(["t-c", "t-a", "t-b", "t-done"]):
        txn = new_txn(txn_id, start=base + timedelta(minutes=minute))
        fences[txn_id] = txn.create(log, owner="coord-a", lease_seconds=90)
    log.append("t-done", fences["t-done"], [], state=TxnState.COMMITTED)
    assert log.open_transactions() == ["t-c", "t-a", "t-b"]
    # At +2.5 min: t-c's and t-a's leases (to +1.5 and +2.5 min) are over, t-b's is not.
    assert log.claimable(base + timedelta(minutes=2.5)) == ["t-c", "t-a"]
    log.release("t-b", "coord-a", fences["t-b"])
    assert log.claimable(base) == ["t-b"]


def test_list_is_newest_first_and_filters_by_state(log: DecisionLog, new_txn: NewTxn) -> None:
    base = new_txn("x").start
    for minute, txn_id in enumerate(["t-1", "t-2", "t-3"]):
        new_txn(txn_id, start=base + timedelta(minutes=minute)).create(log)
    log.append("t-2", 1, [], state=TxnState.ABORTED)
    assert [r.txn_id for r in log.list()] == ["t-3", "t-2", "t-1"]
    assert [r.txn_id for r in log.list(limit=2)] == ["t-3", "t-2"]
    assert [r.txn_id for r in log.list(state=TxnState.ABORTED)] == ["t-2"]
    with pytest.raises(ValueError, match="at least 1"):
        log.list(limit=0)


def test_naive_times_and_empty_leases_are_refused(log: DecisionLog, new_txn: NewTxn) -> None:
    txn = new_txn("txn-1")
    txn.create(log)
    with pytest.raises(ValueError, match="timezone-aware"):
        log.acquire("txn-1", "coord-b", txn.start.replace(tzinfo=None), 30)
    with pytest.raises(ValueError, match="positive"):
        log.acquire("txn-1", "coord-b", txn.start, 0)


def test_each_store_keeps_its_own_log(store: Store, log: DecisionLog, new_txn: NewTxn) -> None:
    """The store_url fixture gives every test an empty database."""
    assert log.open_transactions() == []
    assert store.dialect in ("sqlite", "postgresql")


def test_list_by_initiator_names_only_plans_whose_own_initiator_it_is(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """Only the plan's top-level initiator counts: the same text nested in another plan
    (a step's argument) does not make that plan the agent's, however many such come
    first; a name with LIKE's wildcards matches only itself."""
    bot, other = "agent://acme.com/bot_1", "agent://acme.com/other"
    base = new_txn("x").start
    plans = {
        "t-own-1": {"initiator": bot},
        "t-other": {"initiator": other},
        "t-wild": {"initiator": "agent://acme.com/botX1"},
        **{f"t-nested-{i}": {"initiator": other, "args": {"initiator": bot}} for i in range(3)},
        "t-own-2": {"initiator": bot},
    }
    for minute, (txn_id, members) in enumerate(plans.items()):
        plan = {"hatpVersion": "0.1", "planId": txn_id, **members}
        log.create(txn_id, plan, digest(plan), "coord-a", base + timedelta(minutes=minute), 30, [])
    assert [r.txn_id for r in log.list(initiator=bot)] == ["t-own-2", "t-own-1"]
    assert [r.txn_id for r in log.list(initiator=bot, limit=1)] == ["t-own-2"]
    assert [r.txn_id for r in log.list(initiator=bot, limit=2)] == ["t-own-2", "t-own-1"]
    assert [r.txn_id for r in log.list(initiator=other, limit=2)] == ["t-nested-2", "t-nested-1"]
    assert log.list(initiator="agent://nobody") == []
