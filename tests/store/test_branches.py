"""A participant's branch rows: lock, save, flag, get, and the expired holds.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from hatp.errors import OutcomeConflict
from hatp.model.plan import Tier
from hatp.model.txn import BranchState
from hatp.store import BranchRow, BranchStore, Store

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def branches(store: Store) -> BranchStore:
    return BranchStore(store)


def full_row() -> BranchRow:
    return BranchRow(
        participant_id="airline",
        txn_id="txn-1",
        branch_id="flight",
        state=BranchState.PREPARED,
        tier=Tier.HOLD,
        plan_digest="sha256:abc",
        fence=3,
        plan={"planId": "plan-1", "note": "é ünïcode", "n": [1, 2.5, None, True]},
        prepared={"seat": "12A"},
        prepare_receipt={"kind": "prepare", "vote": "yes"},
        outcome_receipt=None,
        undo_token="undo-1",
        lease_expires_at=NOW + timedelta(minutes=20),
        flags=("first note",),
    )


def test_lock_makes_a_blank_row_for_a_branch_never_seen(
    store: Store, branches: BranchStore
) -> None:
    with store.transaction() as conn:
        row = branches.lock(conn, "airline", "txn-1", "flight")
    assert row == BranchRow("airline", "txn-1", "flight")
    assert (row.state, row.fence, row.flags, row.tier) == (BranchState.UNKNOWN, 0, (), None)
    assert branches.get("airline", "txn-1", "flight") == row


def test_save_round_trips_every_field_STORE_DURABLE(store: Store, branches: BranchStore) -> None:
    """[STORE-DURABLE] a saved row reads back equal, JSON members and times included."""
    row = full_row()
    with store.transaction() as conn:
        branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, row)
    assert branches.get("airline", "txn-1", "flight") == row
    with store.transaction() as conn:
        locked = branches.lock(conn, "airline", "txn-1", "flight")
        assert locked == row  # lock of an existing row returns it unchanged
        branches.save(conn, replace(locked, state=BranchState.COMMITTED, lease_expires_at=None))
    got = branches.get("airline", "txn-1", "flight")
    assert got is not None
    assert (got.state, got.lease_expires_at) == (BranchState.COMMITTED, None)


def test_get_of_a_branch_never_written_is_none(branches: BranchStore) -> None:
    assert branches.get("airline", "txn-1", "flight") is None


def test_rows_are_kept_apart_by_participant_txn_and_branch(
    store: Store, branches: BranchStore
) -> None:
    keys = [("airline", "txn-1", "b"), ("hotel", "txn-1", "b"), ("airline", "txn-2", "b")]
    with store.transaction() as conn:
        for fence, (participant, txn_id, branch_id) in enumerate(keys, start=1):
            row = branches.lock(conn, participant, txn_id, branch_id)
            branches.save(conn, replace(row, fence=fence))
    got = [branches.get(*key) for key in keys]
    assert [r.fence if r else None for r in got] == [1, 2, 3]


def test_flag_appends_notes_in_their_own_transaction(branches: BranchStore) -> None:
    branches.flag("airline", "txn-1", "flight", "commit after abort refused")
    branches.flag("airline", "txn-1", "flight", "abort after commit refused")
    row = branches.get("airline", "txn-1", "flight")
    assert row is not None
    assert row.flags == ("commit after abort refused", "abort after commit refused")
    assert row.state is BranchState.UNKNOWN


def test_an_exception_rolls_the_whole_transaction_back_STORE_ATOMIC(
    store: Store, branches: BranchStore
) -> None:
    """[STORE-ATOMIC] nothing written in a transaction that raised is kept; the error
    comes out unchanged."""
    refusal = OutcomeConflict("commit after abort", state="aborted")
    with pytest.raises(OutcomeConflict) as caught, store.transaction() as conn:
        row = branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, replace(row, state=BranchState.PREPARED, fence=7))
        raise refusal
    assert caught.value is refusal
    assert branches.get("airline", "txn-1", "flight") is None
    with pytest.raises(KeyError), store.transaction() as conn:
        branches.lock(conn, "airline", "txn-1", "flight")
        raise KeyError("any exception")
    assert branches.get("airline", "txn-1", "flight") is None


def test_expired_holds_are_the_prepared_holds_whose_lease_ended(
    store: Store, branches: BranchStore
) -> None:
    hold = full_row()
    rows = {
        "late": replace(hold, branch_id="late", lease_expires_at=NOW - timedelta(seconds=1)),
        "now": replace(hold, branch_id="now", lease_expires_at=NOW),
        "live": replace(hold, branch_id="live", lease_expires_at=NOW + timedelta(seconds=1)),
        "dry-run": replace(
            hold, branch_id="dry-run", tier=Tier.COMPENSATE, lease_expires_at=NOW - timedelta(1)
        ),
        "done": replace(hold, branch_id="done", state=BranchState.COMMITTED, lease_expires_at=NOW),
        "other": replace(hold, participant_id="hotel", branch_id="other", lease_expires_at=NOW),
        "no-lease": replace(hold, branch_id="no-lease", lease_expires_at=None),
    }
    with store.transaction() as conn:
        for row in rows.values():
            branches.save(conn, row)
    with store.transaction() as conn:
        expired = branches.expired_holds(conn, "airline", NOW)
    assert expired == [rows["late"], rows["now"]]


def test_lock_serializes_writers_of_one_branch_STORE_ATOMIC(
    branches: BranchStore, open_more: Callable[[], Store]
) -> None:
    """[STORE-ATOMIC] two stores (as two processes) incrementing one branch's fence
    through lock/save lose no update."""
    rounds = 15
    start = threading.Barrier(2, timeout=30)

    def bump(store: Store) -> None:
        mine = BranchStore(store)
        start.wait()
        for _ in range(rounds):
            with store.transaction() as conn:
                row = mine.lock(conn, "airline", "txn-1", "flight")
                mine.save(conn, replace(row, fence=row.fence + 1))

    stores = [open_more(), open_more()]
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(bump, s) for s in stores]:
            done.result(timeout=60)
    row = branches.get("airline", "txn-1", "flight")
    assert row is not None
    assert row.fence == 2 * rounds


def test_save_given_the_locked_row_writes_only_the_columns_that_changed(
    store: Store, branches: BranchStore
) -> None:
    with store.transaction() as conn:
        branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, full_row())
    with store.transaction() as conn:
        locked = branches.lock(conn, "airline", "txn-1", "flight")
        # Another write in the same transaction, to a column the next save leaves alone.
        branches.save(conn, replace(locked, prepared={"seat": "14C"}))
        branches.save(conn, replace(locked, state=BranchState.COMMITTED, fence=4), locked=locked)
    got = branches.get("airline", "txn-1", "flight")
    assert got == replace(
        full_row(), state=BranchState.COMMITTED, fence=4, prepared={"seat": "14C"}
    )


def test_save_given_the_locked_row_with_no_change_writes_nothing(
    store: Store, branches: BranchStore
) -> None:
    with store.transaction() as conn:
        locked = branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, replace(locked, fence=2))
        branches.save(conn, locked, locked=locked)
    got = branches.get("airline", "txn-1", "flight")
    assert got is not None
    assert got.fence == 2


def test_save_rewrites_a_json_member_equal_in_python_but_not_in_json(
    store: Store, branches: BranchStore
) -> None:
    """1 == True in Python, but they are different JSON: a new object is always written."""
    with store.transaction() as conn:
        locked = branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, replace(locked, prepared={"n": 1}))
    with store.transaction() as conn:
        locked = branches.lock(conn, "airline", "txn-1", "flight")
        assert locked.prepared == {"n": True}  # equal, yet not the same document
        branches.save(conn, replace(locked, prepared={"n": True}), locked=locked)
    got = branches.get("airline", "txn-1", "flight")
    assert got is not None
    assert got.prepared is not None
    assert got.prepared["n"] is True


def test_save_given_another_branch_as_locked_writes_the_whole_row(
    store: Store, branches: BranchStore
) -> None:
    with store.transaction() as conn:
        other = branches.lock(conn, "airline", "txn-1", "other")
        branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, full_row(), locked=other)
    assert branches.get("airline", "txn-1", "flight") == full_row()
    assert branches.get("airline", "txn-1", "other") == other


def test_lock_of_an_existing_row_changes_nothing_in_it(store: Store, branches: BranchStore) -> None:
    with store.transaction() as conn:
        branches.lock(conn, "airline", "txn-1", "flight")
        branches.save(conn, full_row())
    for _ in range(2):
        with store.transaction() as conn:
            assert branches.lock(conn, "airline", "txn-1", "flight") == full_row()
    assert branches.get("airline", "txn-1", "flight") == full_row()
