"""Execute: one transaction applies the corrections and writes their bookkeeping, or nothing.

Every test runs on SQLite and on PostgreSQL. "Nothing written" is checked
against the inventory rows, the journal, the key and the plan's status.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hatp import _checks
from hatp.clock import ManualClock
from hatp.errors import DriftDetected, VerificationFailed, WritePlanUnknown
from hatp.store import Store
from hatp.writes import (
    ExecutionStatus,
    KeyState,
    PlanStatus,
    Policy,
    RecordSet,
    Registry,
    Verdict,
    Writes,
    _book,
    derive_key,
)
from hatp.writes._tables import write_journal, write_key, write_plan
from writes.executor_world import (
    ADJUST,
    APPROVER,
    BOT,
    POLICY,
    ROWS,
    approved,
    journal_rows,
    key_row,
    make_writes,
    propose,
)
from writes.inventory import (
    INVENTORY,
    AdjustParams,
    AdjustStock,
    SetUnit,
    live,
    make_plan,
    registry,
    stock,
    touch,
)

START = {"SKU-1": (10, "each", 1), "SKU-2": (5, "box", 1)}


def nothing_written(store: Store) -> None:
    """The inventory is as stocked and no journal entry exists."""
    assert live(store) == START
    assert journal_rows(store) == []


def test_execute_applies_and_journals_in_one_transaction_WRITE_ONCE(
    writes: Writes, store: Store
) -> None:
    proposal = approved(writes, store)
    outcome = writes.execute("fix-1", 1, "worker-a")

    assert outcome.status is ExecutionStatus.EXECUTED
    assert outcome.key == derive_key("fix-1", 1)
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert outcome.result == {
        "planId": "fix-1",
        "version": 1,
        "digest": proposal.digest,
        "records": {"inventory/SKU-1": {"on_hand": 15, "unit": "each", "version": 2}},
    }
    # The journal, the key and the plan's status agree with the data.
    [entry] = writes.journal()
    assert entry.seq == outcome.journal_seq
    assert (entry.key, entry.plan_id, entry.version) == (outcome.key, "fix-1", 1)
    assert entry.digest == proposal.digest
    assert entry.approvers == (APPROVER.id,)
    assert entry.source == "direct"
    assert entry.result == outcome.result
    status = writes.status("fix-1", 1)
    assert status.plan.status is PlanStatus.EXECUTED
    assert status.key is not None
    assert status.key.state is KeyState.COMPLETED
    assert status.key.result == outcome.result
    assert status.key.owner is None
    assert status.journal_seq == outcome.journal_seq
    assert status.approval is not None
    assert status.approval.approvers == (APPROVER.id,)


def test_a_replay_of_a_completed_key_returns_the_stored_result_and_writes_nothing_WRITE_ONCE(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    first = writes.execute("fix-1", 1, "worker-a")
    clock.advance(3600)  # long after: no lease is involved in a replay
    again = writes.execute("fix-1", 1, "worker-b")

    assert again.status is ExecutionStatus.ALREADY_EXECUTED
    assert (again.key, again.result, again.journal_seq) == (
        first.key,
        first.result,
        first.journal_seq,
    )
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1


def test_the_key_is_derived_from_plan_id_and_version_only() -> None:
    assert derive_key("fix-1", 1) == derive_key("fix-1", 1)
    assert derive_key("fix-1", 1) != derive_key("fix-1", 2)
    assert derive_key("fix-1", 1) != derive_key("fix-2", 1)
    assert derive_key("fix-1", 1).startswith("sha256:")


def test_drift_between_approval_and_execution_writes_nothing_WRITE_DRIFT(
    writes: Writes, store: Store
) -> None:
    approved(writes, store, corrections=[("set_unit", {"sku": "SKU-1", "unit": "kg"})])
    touch(store, "SKU-1", unit="box")  # someone else's write, after the approval

    with pytest.raises(DriftDetected) as caught:
        writes.execute("fix-1", 1, "worker-a")

    assert caught.value.data["records"] == {
        "inventory/SKU-1": {
            "approved": {"on_hand": 10, "unit": "each", "version": 1},
            "live": {"on_hand": 10, "unit": "box", "version": 1},
        }
    }
    assert live(store)["SKU-1"] == (10, "box", 1)
    assert journal_rows(store) == []
    status = writes.status("fix-1", 1)
    assert status.plan.status is PlanStatus.FAILED
    assert status.plan.detail == "DRIFT_DETECTED"
    assert status.key is not None
    assert status.key.state is KeyState.FAILED  # released: may be reserved again


def test_a_failed_key_runs_again_once_the_records_are_back_to_the_snapshot(
    writes: Writes, store: Store
) -> None:
    approved(writes, store, corrections=[("set_unit", {"sku": "SKU-1", "unit": "kg"})])
    touch(store, "SKU-1", unit="box")
    with pytest.raises(DriftDetected):
        writes.execute("fix-1", 1, "worker-a")
    touch(store, "SKU-1", unit="each")

    outcome = writes.execute("fix-1", 1, "worker-a")

    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store)["SKU-1"] == (10, "kg", 2)
    assert writes.status("fix-1", 1).plan.status is PlanStatus.EXECUTED
    assert len(journal_rows(store)) == 1


def test_with_WRITE_DRIFT_off_the_drifted_record_is_overwritten(
    writes: Writes, store: Store
) -> None:
    approved(writes, store, corrections=[("set_unit", {"sku": "SKU-1", "unit": "kg"})])
    touch(store, "SKU-1", unit="box")

    with _checks.unsafe_switched_off("WRITE-DRIFT"):
        outcome = writes.execute("fix-1", 1, "worker-a")

    # The change someone made after the approval is silently lost.
    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store)["SKU-1"] == (10, "kg", 2)


class SloppyAdjust(AdjustStock):
    """Planted: expects on_hand + delta but writes on_hand + delta + 1."""

    name = "sloppy_adjust"

    def apply(
        self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: AdjustParams
    ) -> None:
        table = sets["inventory"].table
        conn.execute(
            table.update()
            .where(table.c.sku == params.sku)
            .values(on_hand=table.c.on_hand + params.delta + 1, version=table.c.version + 1)
        )


class Exploding(AdjustStock):
    """Planted: writes, then fails before the transaction can commit."""

    name = "exploding_adjust"

    def apply(
        self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: AdjustParams
    ) -> None:
        super().apply(conn, sets, params)
        raise RuntimeError("the correction's own code failed")


def sloppy_writes(store: Store, clock: ManualClock) -> Writes:
    planted = Registry([INVENTORY], [AdjustStock(), SetUnit(), SloppyAdjust(), Exploding()])
    return Writes(store, planted, Policy(), clock, lease_seconds=60)  # all need approval


def planted_plan(store: Store, kind: str) -> dict[str, Any]:
    # The agent drafts an ordinary adjust_stock plan; the planted type shares its expect.
    doc = make_plan(store, "fix-1", 1, [ADJUST])
    doc["corrections"][0]["type"] = kind
    return doc


@pytest.fixture
def sloppy(store: Store, clock: ManualClock) -> Writes:
    stock(store, ROWS)
    planted = sloppy_writes(store, clock)
    planted.propose(planted_plan(store, "sloppy_adjust"), BOT)
    planted.approve("fix-1", 1, APPROVER)
    return planted


def test_a_failed_postcondition_leaves_nothing_WRITE_VERIFY(sloppy: Writes, store: Store) -> None:
    with pytest.raises(VerificationFailed) as caught:
        sloppy.execute("fix-1", 1, "worker-a")

    assert caught.value.data["records"] == {
        "inventory/SKU-1": {
            "expected": {"on_hand": 15, "unit": "each", "version": 2},
            "live": {"on_hand": 16, "unit": "each", "version": 2},
        }
    }
    nothing_written(store)
    status = sloppy.status("fix-1", 1)
    assert status.plan.status is PlanStatus.FAILED
    assert status.plan.detail == "VERIFICATION_FAILED"
    assert status.key is not None
    assert status.key.state is KeyState.FAILED


def test_with_WRITE_VERIFY_off_the_wrong_write_commits(sloppy: Writes, store: Store) -> None:
    with _checks.unsafe_switched_off("WRITE-VERIFY"):
        outcome = sloppy.execute("fix-1", 1, "worker-a")

    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store)["SKU-1"] == (16, "each", 2)


def test_a_correction_that_raises_leaves_nothing_and_releases_the_key(
    store: Store, clock: ManualClock
) -> None:
    stock(store, ROWS)
    planted = sloppy_writes(store, clock)
    planted.propose(planted_plan(store, "exploding_adjust"), BOT)
    planted.approve("fix-1", 1, APPROVER)

    with pytest.raises(RuntimeError):
        planted.execute("fix-1", 1, "worker-a")

    nothing_written(store)
    status = planted.status("fix-1", 1)
    assert status.plan.status is PlanStatus.FAILED
    assert status.plan.detail == "RuntimeError"
    assert status.key is not None
    assert status.key.state is KeyState.FAILED


def test_a_plan_the_policy_allows_runs_without_an_approval(writes: Writes, store: Store) -> None:
    proposal = propose(
        writes, store, corrections=[("adjust_stock", {"sku": "SKU-2", "delta": -2, "reason": "x"})]
    )
    assert proposal.decision.verdict is Verdict.ALLOW

    outcome = writes.execute("fix-1", 1, "worker-a")

    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store)["SKU-2"] == (3, "box", 2)
    [entry] = writes.journal("fix-1")
    assert (entry.approvers, entry.source) == ((), "policy")


def test_an_unknown_plan_is_refused(writes: Writes, store: Store) -> None:
    with pytest.raises(WritePlanUnknown):
        writes.execute("nope", 1, "worker-a")
    with pytest.raises(WritePlanUnknown):
        writes.status("nope", 1)
    assert key_row(store, derive_key("nope", 1)) is None


class _RolledBack(Exception):
    pass


def test_reading_a_plan_for_execute_reserves_its_key_in_the_same_statement_on_postgresql(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    """One round trip reads the version and its approval and, on PostgreSQL, reserves the
    key; the commit is relaxed only when the reservation was made; SQLite tries nothing."""
    approved(writes, store)
    key = derive_key("fix-1", 1)
    until = 10**13
    postgres = store.dialect == "postgresql"

    def synchronous(conn: sa.Connection) -> str:
        return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar())

    with pytest.raises(_RolledBack), store.transaction() as conn:
        plan, approval, reserved = _book.get_plan_and_reserve_txn(
            conn, "fix-1", 1, key, "worker-a", until, clock.now()
        )
        assert plan is not None
        assert (plan.plan_id, plan.version) == ("fix-1", 1)
        assert approval is not None
        assert approval.approvers == (APPROVER.id,)
        assert reserved is (True if postgres else None)
        row = conn.execute(sa.select(write_key).where(write_key.c.key == key)).first()
        if postgres:
            assert synchronous(conn) == "off"
            assert row is not None
            assert (row.state, row.owner, row.fence, row.lease_until) == (
                "reserved",
                "worker-a",
                1,
                until,
            )
        else:
            assert row is None
        raise _RolledBack  # a refusal of step 1 rolls the reservation back
    assert key_row(store, key) is None

    # The key already reserved: nothing made, the commit stays durable.
    with store.transaction() as conn:
        assert _book.reserve_key_txn(conn, key, "fix-1", 1, "worker-b", until, clock.now())
    with store.transaction() as conn:
        _plan, _approval, reserved = _book.get_plan_and_reserve_txn(
            conn, "fix-1", 1, key, "worker-a", until, clock.now()
        )
        assert reserved is (False if postgres else None)
        if postgres:
            assert synchronous(conn) == "on"
    row = key_row(store, key)
    assert row is not None
    assert row.owner == "worker-b"

    # No such version: nothing read, nothing reserved.
    with store.transaction() as conn:
        missing = _book.get_plan_and_reserve_txn(
            conn, "fix-1", 2, derive_key("fix-1", 2), "worker-a", until, clock.now()
        )
        assert missing == (None, None, False if postgres else None)
    assert key_row(store, derive_key("fix-1", 2)) is None


def test_the_journal_lists_entries_of_one_plan_or_all(writes: Writes, store: Store) -> None:
    approved(writes, store, "fix-1")
    approved(writes, store, "fix-2", corrections=[("set_unit", {"sku": "SKU-2", "unit": "kg"})])
    writes.execute("fix-2", 1, "w")
    writes.execute("fix-1", 1, "w")

    assert [e.plan_id for e in writes.journal()] == ["fix-2", "fix-1"]
    assert [e.plan_id for e in writes.journal("fix-1")] == ["fix-1"]


def test_the_bookkeeping_tables_are_in_the_users_database(writes: Writes, store: Store) -> None:
    with store.transaction() as conn:
        names = set(sa.inspect(conn).get_table_names())
    assert {write_plan.name, write_key.name, write_journal.name, "inventory"} <= names
    # A second Writes on the same database finds them there.
    again = make_writes(store, ManualClock(writes._clock.now()))
    assert again.journal() == []


def test_a_lease_must_be_positive(store: Store, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="positive"):
        Writes(store, registry(), POLICY, clock, lease_seconds=0)


def test_every_executor_check_names_an_existing_switch_off_test() -> None:
    import writes.executor_world as world

    here = Path(__file__).parent
    for rule, tests in world.SWITCH_OFF_TESTS.items():
        for test in tests:
            module, name = test.split("::")
            assert f"def {name}(" in (here / module).read_text(), (rule, test)
    # Every check the package asks about is listed: here, or among the plan's planted cases.
    from writes.test_plan import PLANTED

    package = Path(world.__file__).parents[2] / "src/hatp/writes"
    asked = {
        rule
        for path in package.glob("*.py")
        for rule in re.findall(r'is_on\("([A-Z0-9-]+)"\)', path.read_text())
    }
    assert asked == set(world.SWITCH_OFF_TESTS) | {rule for rule, _ in PLANTED.values()}
