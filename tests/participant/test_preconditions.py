"""Commit fails closed when what the dry run saw has changed [PART-PRECONDITION]."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hatp.clock import ManualClock
from hatp.errors import PreconditionChanged
from hatp.evidence import digest
from hatp.model import BranchState, Preconditions
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import calendar, charge_count, plan, run, slot

SEEN = Preconditions(versions={"calendar/mon-9": "1"}, scope="calendar.write")


def _prepared(airline: ParticipantServer) -> str:
    p = plan()
    run(airline.prepare(p, "event", 1))
    run(airline.prepare(p, "charge", 1))
    return digest(p.to_wire())


def test_commit_with_the_preconditions_seen_succeeds_PART_PRECONDITION(
    airline: ParticipantServer, ledgers: Store
) -> None:
    plan_digest = _prepared(airline)
    receipt = run(airline.commit("txn-1", "event", 1, plan_digest, SEEN))
    assert receipt["outcome"] == "committed"
    assert slot(ledgers) == (2, "Flight to Berlin")


@pytest.mark.parametrize(
    ("sent", "changed", "scope"),
    [
        (
            Preconditions(versions={"calendar/mon-9": "7"}, scope="calendar.write"),
            {"calendar/mon-9": {"prepared": "1", "now": "7"}},
            None,
        ),
        (
            Preconditions(versions={"calendar/mon-9": "1"}, scope="calendar.admin"),
            {},
            {"prepared": "calendar.write", "now": "calendar.admin"},
        ),
        (
            None,
            {"calendar/mon-9": {"prepared": "1", "now": None}},
            {"prepared": "calendar.write", "now": None},
        ),
    ],
)
def test_preconditions_sent_back_differently_are_refused_PART_PRECONDITION(
    airline: ParticipantServer,
    ledgers: Store,
    sent: Preconditions | None,
    changed: dict[str, object],
    scope: dict[str, object] | None,
) -> None:
    plan_digest = _prepared(airline)
    with pytest.raises(PreconditionChanged) as caught:
        run(airline.commit("txn-1", "event", 1, plan_digest, sent))
    assert caught.value.data["source"] == "request"
    assert caught.value.data["changed"] == changed
    assert caught.value.data.get("scope") == scope
    assert slot(ledgers) == (1, None)
    assert run(airline.status("txn-1", "event")).state is BranchState.PREPARED


def test_target_changed_since_the_dry_run_is_refused_PART_PRECONDITION(
    airline: ParticipantServer, ledgers: Store
) -> None:
    plan_digest = _prepared(airline)
    with ledgers.transaction() as conn:  # someone else edits the slot while the human decides
        conn.execute(calendar.update().values(version=5, title="Dentist"))
    with pytest.raises(PreconditionChanged) as caught:
        run(airline.commit("txn-1", "event", 1, plan_digest, SEEN))
    assert caught.value.data["source"] == "target"
    assert caught.value.data["changed"] == {"calendar/mon-9": {"prepared": "1", "now": "5"}}
    assert slot(ledgers) == (5, "Dentist")


def test_final_commit_with_changed_scope_charges_nothing_PART_PRECONDITION(
    airline: ParticipantServer, ledgers: Store
) -> None:
    plan_digest = _prepared(airline)
    wrong = Preconditions(versions={}, scope="card:refund")
    with pytest.raises(PreconditionChanged):
        run(airline.commit("txn-1", "charge", 1, plan_digest, wrong))
    assert charge_count(ledgers) == 0
    right = Preconditions(versions={}, scope="card:charge")
    run(airline.commit("txn-1", "charge", 1, plan_digest, right))
    assert charge_count(ledgers) == 1


def test_refused_commit_can_still_be_aborted(
    airline: ParticipantServer, ledgers: Store, clock: ManualClock
) -> None:
    plan_digest = _prepared(airline)
    with pytest.raises(PreconditionChanged):
        run(airline.commit("txn-1", "event", 1, plan_digest, None))
    receipt = run(airline.abort("txn-1", "event", 1))
    assert receipt["outcome"] == "aborted"
    with ledgers.transaction() as conn:
        assert conn.execute(sa.select(calendar.c.title)).scalar_one() is None
