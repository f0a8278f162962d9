"""A leased mutation as a compensate-tier participant: the undo it promises at prepare is real.

The ticket system of record keeps its tickets and leases on the ``store`` fixture
(SQLite or PostgreSQL); the ticket participant keeps its branch state on another
store of the same kind (``apart``). The last tests put it in a real coordinator
transaction beside the trip world's four participants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import Tap, Trip, events, failed_findings
from databases import fresh_schema_url
from hatp.clock import ManualClock
from hatp.demo import AIRLINE, PARTICIPANT_IDS, PAYMENTS, TripWorld
from hatp.demo._tickets import touch
from hatp.demo.trip import CARD
from hatp.errors import (
    LeaseRefused,
    PreconditionChanged,
    RecoveryRefused,
    RecoveryRequired,
)
from hatp.evidence import digest
from hatp.lease import (
    LeaseBinding,
    LeasedOperation,
    RecoveryMode,
    SystemOfRecord,
    verify_receipt,
)
from hatp.model import (
    BranchState,
    Certainty,
    EffectPreview,
    EffectVerdict,
    ObservedEffect,
    TxnState,
    effect_verdict,
)
from hatp.store import DecisionLog, LeaseStatus, Store, open_store
from lease.participant_world import (
    BRANCH,
    CLOSE,
    LEE,
    MAX_WINDOW_MS,
    OPERATION,
    RESOURCE,
    TICKET,
    TICKETS_ID,
    TICKETS_KEY,
    AfterPrepare,
    BeforePrepare,
    Desk,
    Meanwhile,
    lease_rows,
    named_lease,
    one_branch_plan,
    seen,
    ticket_branch,
    ticket_now,
    ticket_server,
    ticket_sor,
)
from participant.ops import run

CLOSED = {**TICKET, "status": "closed"}


@pytest.fixture
def apart(store_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """The participant's own store, of the same kind as ``store`` but apart from it."""
    if store_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'ticket-branches.db'}"
    else:
        url = fresh_schema_url(request.getfixturevalue("pg_database_url"))
    opened = open_store(url)
    yield opened
    opened.close()


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def sor(store: Store, clock: ManualClock, desk: Desk) -> SystemOfRecord:
    return ticket_sor(store, clock, desk)


def prepared(
    sor: SystemOfRecord,
    apart: Store,
    clock: ManualClock,
    mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION,
) -> tuple[Any, dict[str, Any]]:
    """A ticket server and its yes vote on closing the ticket."""
    server = ticket_server(apart, sor, clock, mode=mode)
    receipt = run(server.prepare(one_branch_plan(), BRANCH, 1))
    assert receipt["vote"] == "yes", receipt.get("reason")
    return server, receipt


def commit(server: Any, receipt: dict[str, Any]) -> dict[str, Any]:
    return run(server.commit("txn-1", BRANCH, 1, receipt["planDigest"], seen(receipt)))


# --- prepare: the lease the yes vote rests on ------------------------------------------------


def test_a_yes_vote_names_the_lease_its_undo_rests_on_LEASE_PARTICIPANT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT] prepare gets a bound, verified lease and names it in the receipt."""
    _, receipt = prepared(sor, apart, clock)
    assert (receipt["vote"], receipt["tier"]) == ("yes", "compensate")
    row = named_lease(sor, receipt)
    lease = row.lease
    assert receipt["preconditions"]["versions"] == {RESOURCE: lease["preImageStateHash"]}
    assert lease["preImageStateHash"] == digest(TICKET)
    assert lease["binding"] == {"txnId": "txn-1", "planDigest": receipt["planDigest"]}
    assert (lease["recoveryMode"], lease["tReqMs"]) == ("COMPENSATING_ACTION", 30 * 60 * 1000)
    assert lease["tGrantedMs"] >= lease["tReqMs"]
    assert lease["mutationDigest"] == digest(CLOSE)
    assert row.status is LeaseStatus.GRANTED
    assert ticket_now(sor) == TICKET  # a dry run: nothing written


@pytest.mark.parametrize(
    "args",
    [
        {"resource": RESOURCE},
        {"resource": RESOURCE, "mutation": CLOSE, "extra": 1},
        {"resource": "", "mutation": CLOSE},
        {"resource": 4711, "mutation": CLOSE},
        {"resource": RESOURCE, "mutation": "close it"},
        {"resource": RESOURCE, "mutation": {"action": "tickets.update"}},
        {"resource": RESOURCE, "mutation": {**CLOSE, "inverse": {}}},
        {"resource": RESOURCE, "mutation": {"action": "", "params": {}}},
        {"resource": RESOURCE, "mutation": {"action": "tickets.update", "params": [4711]}},
    ],
)
def test_a_branch_that_names_no_mutation_votes_no_LEASE_PARTICIPANT(
    args: dict[str, Any], sor: SystemOfRecord, apart: Store, store: Store, clock: ManualClock
) -> None:
    server = ticket_server(apart, sor, clock)
    receipt = run(server.prepare(one_branch_plan(**args), BRANCH, 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("BAD_ARGS: ")
    assert lease_rows(store) == []


@pytest.mark.parametrize(
    ("args", "mode", "reason"),
    [
        (
            {"resource": RESOURCE, "mutation": {"action": "tickets.delete", "params": {}}},
            RecoveryMode.COMPENSATING_ACTION,
            "MUTATION_INVALID: this system of record offers no action 'tickets.delete'",
        ),
        (
            {
                "resource": RESOURCE,
                "mutation": {"action": "tickets.update", "params": {"id": 4711, "status": "gone"}},
            },
            RecoveryMode.COMPENSATING_ACTION,
            "MUTATION_INVALID: tickets.update refused its params",
        ),
        (
            {"resource": "ticket/9999", "mutation": CLOSE},
            RecoveryMode.COMPENSATING_ACTION,
            "RESOURCE_UNKNOWN: ",
        ),
        (
            {
                "resource": RESOURCE,
                "mutation": {"action": "tickets.clear_notes", "params": {"id": 4711}},
            },
            RecoveryMode.COMPENSATING_ACTION,
            "LEASE_UNAVAILABLE: MODE_UNSUPPORTED: tickets.clear_notes has no compensating action",
        ),
    ],
    ids=["unknown-action", "refused-params", "unknown-resource", "mode-unsupported"],
)
def test_a_mutation_the_system_of_record_will_not_lease_votes_no_LEASE_PARTICIPANT(
    args: dict[str, Any],
    mode: RecoveryMode,
    reason: str,
    sor: SystemOfRecord,
    apart: Store,
    store: Store,
    clock: ManualClock,
) -> None:
    server = ticket_server(apart, sor, clock, mode=mode)
    receipt = run(server.prepare(one_branch_plan(**args), BRANCH, 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith(reason)
    assert lease_rows(store) == []
    assert ticket_now(sor) == TICKET


def test_a_mutation_with_no_inverse_can_still_be_leased_by_snapshot_LEASE_PARTICIPANT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    server = ticket_server(apart, sor, clock, mode=RecoveryMode.SNAPSHOT_RESTORE)
    clear = {"action": "tickets.clear_notes", "params": {"id": 4711}}
    receipt = run(server.prepare(one_branch_plan(resource=RESOURCE, mutation=clear), BRANCH, 1))
    assert receipt["vote"] == "yes", receipt.get("reason")
    done = commit(server, receipt)
    assert ticket_now(sor)["notes"] == ""
    run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    assert ticket_now(sor) == TICKET


def test_a_lease_granted_below_the_window_asked_votes_no_and_is_voided_LEASE_PARTICIPANT(
    sor: SystemOfRecord, apart: Store, store: Store, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT] tGrantedMs < tReqMs: the lease is refused, voided, and the vote no."""
    server = ticket_server(apart, sor, clock, t_req_ms=MAX_WINDOW_MS + 1)
    receipt = run(server.prepare(one_branch_plan(), BRANCH, 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("RECOVERY_WINDOW_INEQUALITY: ")
    assert "[LEASE-WINDOW]" in receipt["reason"]
    [(_, status)] = lease_rows(store)
    assert status == LeaseStatus.VOIDED.value  # a no vote leaves no live lease


def test_a_lease_that_ends_before_the_plan_is_decided_votes_no_LEASE_PARTICIPANT(
    sor: SystemOfRecord, apart: Store, store: Store, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT] a lease ending at or before decideBy cannot carry the undo."""
    server = ticket_server(apart, sor, clock)
    plan = one_branch_plan(decide_by="2026-12-02T09:30:00.000Z")  # the lease ends 09:30
    receipt = run(server.prepare(plan, BRANCH, 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("LEASE_TOO_SHORT: ")
    [(_, status)] = lease_rows(store)
    assert status == LeaseStatus.VOIDED.value


@pytest.mark.parametrize("t_req_ms", [0, -1, True, 1.5, 10**12 + 1])
def test_a_window_that_is_not_a_positive_integer_is_refused(
    t_req_ms: Any, sor: SystemOfRecord
) -> None:
    with pytest.raises(ValueError, match="t_req_ms"):
        LeasedOperation(sor, name=OPERATION, t_req_ms=t_req_ms)


def test_an_operation_without_a_name_is_refused(sor: SystemOfRecord) -> None:
    with pytest.raises(ValueError, match="name"):
        LeasedOperation(sor, name="", t_req_ms=1000)


# --- commit and compensate ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode",
    [
        RecoveryMode.COMPENSATING_ACTION,
        RecoveryMode.SNAPSHOT_RESTORE,
        RecoveryMode.DRY_RUN_SHADOW,
    ],
)
def test_a_commit_applies_under_the_lease_and_compensate_restores_it_LEASE_PARTICIPANT_UNDO(
    mode: RecoveryMode, sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT-UNDO] the undo token is the lease; compensate runs its recovery."""
    server, receipt = prepared(sor, apart, clock, mode)
    lease = named_lease(sor, receipt).lease
    done = commit(server, receipt)
    assert done["outcome"] == "committed"
    assert done["undoToken"] == lease["leaseId"]
    effect = done["effect"]
    assert effect["leaseId"] == lease["leaseId"]
    applied = verify_receipt(effect["receipt"], sor.keyring)
    assert (applied.kind, applied.epoch) == ("lease-commit", effect["epoch"]) == ("lease-commit", 1)
    assert effect["postImageStateHash"] == applied.post_image_state_hash == digest(CLOSED)
    assert applied.binding == LeaseBinding(txn_id="txn-1", plan_digest=receipt["planDigest"])
    assert ticket_now(sor) == CLOSED
    assert sor.lease(lease["leaseId"]).status is LeaseStatus.APPLIED
    # A repeat is the stored receipt; nothing runs twice [PART-IDEMPOTENT].
    assert commit(server, receipt) == done
    assert sor.state(RESOURCE)[1] == 1

    undone = run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    assert undone["outcome"] == "compensated"
    assert digest(ticket_now(sor)) == lease["preImageStateHash"]
    row = sor.lease(lease["leaseId"])
    assert row.status is LeaseStatus.RECOVERED
    assert row.recovery_receipt is not None
    recovery = verify_receipt(row.recovery_receipt, sor.keyring)
    assert (recovery.outcome.value, recovery.restored_state_hash) == (
        "restored",
        lease["preImageStateHash"],
    )


def test_an_escrowed_undo_is_recovery_required_until_a_person_restores_it_LEASE_PARTICIPANT_UNDO(
    sor: SystemOfRecord, apart: Store, clock: ManualClock, desk: Desk
) -> None:
    """[LEASE-PARTICIPANT-UNDO] HUMAN_ESCROW: handed to a person, not undone by the machine."""
    server, receipt = prepared(sor, apart, clock, RecoveryMode.HUMAN_ESCROW)
    lease_id = named_lease(sor, receipt).lease_id
    done = commit(server, receipt)
    with pytest.raises(RecoveryRequired) as caught:
        run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    assert caught.value.data["reason"] == "ESCROWED"
    assert caught.value.data["leaseId"] == lease_id
    assert caught.value.data["receipt"]["outcome"] == "escrowed"
    assert ticket_now(sor) == CLOSED
    assert run(server.status("txn-1", BRANCH)).state is BranchState.COMMITTED
    [case] = desk.cases
    assert case.lease_id == lease_id
    # Asked again before the person acted: the same answer, and no second case.
    with pytest.raises(RecoveryRequired):
        run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    sor.restore_by_hand(lease_id, case.pre_image, by=LEE)
    undone = run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    assert undone["outcome"] == "compensated"
    assert ticket_now(sor) == TICKET


def test_an_undo_after_the_ticket_moved_is_refused_and_the_branch_stays_committed(
    sor: SystemOfRecord, apart: Store, store: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    done = commit(server, receipt)
    touch(store, 4711, assignee="lee")  # someone worked the ticket after the close
    with pytest.raises(RecoveryRefused) as caught:
        run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
    assert caught.value.data["reason"] == "MOVED"
    assert ticket_now(sor) == {**CLOSED, "assignee": "lee"}  # never overwritten
    assert run(server.status("txn-1", BRANCH)).state is BranchState.COMMITTED


def test_drift_between_prepare_and_commit_is_refused_PART_PRECONDITION(
    sor: SystemOfRecord, apart: Store, store: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    touch(store, 4711, assignee="lee")
    with pytest.raises(PreconditionChanged) as caught:
        commit(server, receipt)
    assert set(caught.value.data["changed"]) == {RESOURCE}
    assert ticket_now(sor) == {**TICKET, "assignee": "lee"}
    assert named_lease(sor, receipt).status is LeaseStatus.GRANTED  # nothing applied


def test_a_commit_after_the_lease_ended_is_refused_and_writes_nothing(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    clock.advance(31 * 60)  # past the 30-minute window
    with pytest.raises(LeaseRefused) as caught:
        commit(server, receipt)
    assert caught.value.data["rule"] == "LEASE-WINDOW"
    assert ticket_now(sor) == TICKET
    assert run(server.status("txn-1", BRANCH)).state is BranchState.PREPARED
    run(server.abort("txn-1", BRANCH, 1))
    assert named_lease(sor, receipt).status is LeaseStatus.VOIDED


def test_an_abort_voids_the_lease_and_a_late_apply_is_refused_LEASE_PARTICIPANT_ABORT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT-ABORT] after abort no apply can run under the lease [LEASE-GRANTED]."""
    server, receipt = prepared(sor, apart, clock)
    row = named_lease(sor, receipt)
    assert run(server.abort("txn-1", BRANCH, 1))["outcome"] == "aborted"
    assert sor.lease(row.lease_id).status is LeaseStatus.VOIDED
    binding = LeaseBinding(txn_id="txn-1", plan_digest=receipt["planDigest"])
    with pytest.raises(LeaseRefused) as caught:
        sor.apply(row.lease, resource=RESOURCE, mutation=CLOSE, binding=binding)
    assert caught.value.data["rule"] == "LEASE-GRANTED"
    assert ticket_now(sor) == TICKET


def _applied_behind(sor: SystemOfRecord, receipt: dict[str, Any]) -> dict[str, Any]:
    """An earlier commit applied the lease, then the participant died before saving it."""
    row = named_lease(sor, receipt)
    binding = LeaseBinding(txn_id="txn-1", plan_digest=receipt["planDigest"])
    return sor.apply(row.lease, resource=RESOURCE, mutation=CLOSE, binding=binding).receipt


def test_a_commit_whose_branch_state_was_lost_finds_its_applied_lease(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    applied = _applied_behind(sor, receipt)
    done = commit(server, receipt)
    assert done["outcome"] == "committed"
    assert done["effect"]["receipt"] == applied
    assert ticket_now(sor) == CLOSED
    assert sor.state(RESOURCE)[1] == 1  # applied once


def test_an_abort_after_a_lost_commit_recovers_the_lease_LEASE_PARTICIPANT_ABORT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    _applied_behind(sor, receipt)
    run(server.abort("txn-1", BRANCH, 1))
    assert ticket_now(sor) == TICKET
    assert named_lease(sor, receipt).status is LeaseStatus.RECOVERED


# --- effect previews: what the commit will change, and what it changed --------------------


def _preview(receipt: dict[str, Any]) -> EffectPreview:
    return EffectPreview.model_validate(receipt["preview"])


def _observed(receipt: dict[str, Any]) -> ObservedEffect:
    return ObservedEffect.model_validate(receipt["observed"])


def test_a_yes_vote_previews_the_fields_its_mutation_changes_exactly(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    """From the state the lease was verified against to the state the action leaves."""
    _, receipt = prepared(sor, apart, clock)
    said = _preview(receipt)
    assert said.certainty is Certainty.EXACT
    assert [(c.resource, c.kind, c.field, c.before, c.after) for c in said.changes] == [
        (RESOURCE, "update", "status", "open", "closed")
    ]
    assert (said.bound, said.changes[0].amount) == (None, None)
    assert said.summary == "tickets.update: update ticket/4711: status open → closed"


def test_a_commit_observes_the_change_its_preview_said_TXN_EFFECT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    """Every field the mutation sets, in name order; the commit's
    observed effect is the preview's, from the pre-image the system of record kept."""
    server = ticket_server(apart, sor, clock)
    both = {
        "action": "tickets.update",
        "params": {"id": 4711, "assignee": "erin", "status": "closed"},
    }
    receipt = run(server.prepare(one_branch_plan(resource=RESOURCE, mutation=both), BRANCH, 1))
    assert [(c.field, c.before, c.after) for c in _preview(receipt).changes] == [
        ("assignee", "dana", "erin"),
        ("status", "open", "closed"),
    ]
    done = commit(server, receipt)
    assert done["outcome"] == "committed"
    assert effect_verdict(_preview(receipt), _observed(done)) is EffectVerdict.AS_PREVIEWED
    assert ticket_now(sor) == {**TICKET, "status": "closed", "assignee": "erin"}


def test_a_commit_that_finds_its_lease_applied_observes_the_same_change_TXN_EFFECT(
    sor: SystemOfRecord, apart: Store, clock: ManualClock
) -> None:
    server, receipt = prepared(sor, apart, clock)
    _applied_behind(sor, receipt)
    done = commit(server, receipt)
    assert effect_verdict(_preview(receipt), _observed(done)) is EffectVerdict.AS_PREVIEWED


# --- the system of record's database ---------------------------------------------------------


def test_the_system_of_record_on_the_participants_sqlite_file_is_refused_LEASE_PARTICIPANT_SAMEDB(
    tmp_path: Path, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT-SAMEDB] one SQLite file for both: a no vote, nothing granted."""
    (tmp_path / "sub").mkdir()
    shared = open_store(tmp_path / "shared.db")
    # The same file under another spelling of its path is the same database.
    again = open_store(f"sqlite:///{tmp_path / 'sub' / '..' / 'shared.db'}")
    try:
        sor = ticket_sor(shared, clock)
        for branches in (shared, again):
            server = ticket_server(branches, sor, clock)
            receipt = run(server.prepare(one_branch_plan(), BRANCH, 1))
            assert receipt["vote"] == "no"
            assert receipt["reason"].startswith("SAME_DATABASE: ")
            assert "its own database" in receipt["reason"]
        assert lease_rows(shared) == []
        assert ticket_now(sor) == TICKET
    finally:
        again.close()
        shared.close()


def test_a_postgresql_database_may_hold_both_LEASE_PARTICIPANT_SAMEDB(
    pg_database_url: str, clock: ManualClock
) -> None:
    """[LEASE-PARTICIPANT-SAMEDB] PostgreSQL locks rows, not the database: both may share it."""
    shared = open_store(fresh_schema_url(pg_database_url))
    try:
        sor = ticket_sor(shared, clock)
        server = ticket_server(shared, sor, clock)
        receipt = run(server.prepare(one_branch_plan(), BRANCH, 1))
        assert receipt["vote"] == "yes", receipt.get("reason")
        done = commit(server, receipt)
        assert ticket_now(sor) == CLOSED
        run(server.compensate("txn-1", BRANCH, 1, done["undoToken"]))
        assert ticket_now(sor) == TICKET
    finally:
        shared.close()


# --- in a coordinator's transaction -----------------------------------------------------------


@pytest.fixture
def trip(
    tmp_path: Path,
    clock: ManualClock,
    store: Store,
    store_url: str,
    apart: Store,
    sor: SystemOfRecord,
) -> Iterator[Trip]:
    """The trip world, the log on ``store``, and the ticket participant on ``apart``."""
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)
    world = TripWorld.open(tmp_path / "trip", clock, rooms=30, store_urls=urls)
    world.keyring.add(TICKETS_KEY.public, TICKETS_ID)
    world.keyring.trust(TICKETS_ID)
    found = Trip(world, DecisionLog(store), clock)
    found.links[TICKETS_ID] = Tap(ticket_server(apart, sor, clock), found.votes)
    yield found
    world.close()


def escrow_trip(trip: Trip, apart: Store, sor: SystemOfRecord, clock: ManualClock) -> None:
    server = ticket_server(apart, sor, clock, mode=RecoveryMode.HUMAN_ESCROW)
    trip.links[TICKETS_ID] = Tap(server, trip.votes)


def trip_with_ticket(trip: Trip, **options: Any) -> dict[str, Any]:
    """A trip plan with closing the ticket as a compensate branch before the calendar's."""
    plan = trip.plan(**options)
    at = [b["branchId"] for b in plan["branches"]].index("calendar")
    plan["branches"].insert(at, ticket_branch())
    return plan


def ticket_vote(outcome: Any) -> dict[str, Any]:
    [vote] = [
        e["body"]["receipt"]
        for e in events(outcome.record, "txn.prepared")
        if e["body"]["branchId"] == BRANCH
    ]
    return dict(vote)


def card_edit(trip: Trip) -> Meanwhile:
    """The bank changes the card just before the charge (the final step) commits."""
    return Meanwhile(trip.links[PAYMENTS], lambda: trip.world.edit_card(CARD, "4000.00"))


def test_a_transaction_with_a_leased_branch_commits_it_once_LEASE_PARTICIPANT(
    trip: Trip, sor: SystemOfRecord
) -> None:
    """[LEASE-PARTICIPANT] a leased ticket update, one branch of a coordinator's transaction."""
    outcome = trip.run(trip_with_ticket(trip))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert ticket_now(sor) == CLOSED
    row = named_lease(sor, ticket_vote(outcome))  # the signed vote names the lease
    assert row.status is LeaseStatus.APPLIED
    assert row.lease["binding"]["txnId"] == outcome.txn_id
    assert failed_findings(outcome, trip.world) == []


def test_a_refused_final_step_compensates_the_ticket_LEASE_PARTICIPANT_UNDO(
    trip: Trip, sor: SystemOfRecord
) -> None:
    """[LEASE-PARTICIPANT-UNDO] the compensate steps ran, then the final capture was refused."""
    outcome = trip.run(trip_with_ticket(trip), links={PAYMENTS: card_edit(trip)})
    assert outcome.state is TxnState.ABORTED
    assert "PRECONDITION_CHANGED" in outcome.reason
    row = named_lease(sor, ticket_vote(outcome))
    assert digest(ticket_now(sor)) == row.lease["preImageStateHash"]
    assert row.status is LeaseStatus.RECOVERED
    assert row.recovery_receipt is not None
    recovery = verify_receipt(row.recovery_receipt, sor.keyring)
    assert recovery.outcome.value == "restored"
    assert trip.world.effects(outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "none")
    assert failed_findings(outcome, trip.world) == []


def test_another_branch_voting_no_voids_the_lease_LEASE_PARTICIPANT_ABORT(
    trip: Trip, sor: SystemOfRecord
) -> None:
    # The airline's no (a business-class seat) comes once the ticket has voted, so the
    # ticket's lease was granted before the coordinator decides to abort.
    voted = asyncio.Event()
    links = {
        TICKETS_ID: AfterPrepare(trip.links[TICKETS_ID], voted.set),
        AIRLINE: BeforePrepare(trip.links[AIRLINE], voted),
    }
    outcome = trip.run(trip_with_ticket(trip, seat="2A"), links=links)
    assert outcome.state is TxnState.ABORTED
    row = named_lease(sor, ticket_vote(outcome))
    assert row.status is LeaseStatus.VOIDED
    binding = LeaseBinding(txn_id=outcome.txn_id, plan_digest=row.lease["binding"]["planDigest"])
    with pytest.raises(LeaseRefused) as caught:
        sor.apply(row.lease, resource=RESOURCE, mutation=CLOSE, binding=binding)
    assert caught.value.data["rule"] == "LEASE-GRANTED"
    assert ticket_now(sor) == TICKET


def test_drift_before_the_commit_aborts_the_transaction_PART_PRECONDITION(
    trip: Trip, sor: SystemOfRecord, store: Store
) -> None:
    tickets = Meanwhile(trip.links[TICKETS_ID], lambda: touch(store, 4711, assignee="lee"))
    outcome = trip.run(trip_with_ticket(trip), links={TICKETS_ID: tickets})
    assert outcome.state is TxnState.ABORTED
    assert "PRECONDITION_CHANGED" in outcome.reason
    assert ticket_now(sor) == {**TICKET, "assignee": "lee"}
    assert named_lease(sor, ticket_vote(outcome)).status is LeaseStatus.VOIDED
    assert trip.world.effects(outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "none")


def test_an_escrowed_undo_is_recorded_as_not_undone_LEASE_PARTICIPANT_UNDO(
    trip: Trip, sor: SystemOfRecord, apart: Store, clock: ManualClock, desk: Desk
) -> None:
    """[LEASE-PARTICIPANT-UNDO] [COORD-SETTLE] RECOVERY_REQUIRED reaches the record: the
    transaction ends needs-attention with the ticket held, never "aborted" while the
    ticket stays closed; the record verifies as saying exactly that."""
    escrow_trip(trip, apart, sor, clock)
    outcome = trip.run(trip_with_ticket(trip), links={PAYMENTS: card_edit(trip)})
    assert outcome.state is TxnState.NEEDS_ATTENTION
    assert f"{BRANCH}: txn.compensated refused: RECOVERY_REQUIRED" in outcome.reason
    compensated = [e["body"]["branchId"] for e in events(outcome.record, "txn.compensated")]
    assert BRANCH not in compensated and "calendar" in compensated
    [held] = events(outcome.record, "txn.held")
    assert held["body"]["branchId"] == BRANCH
    assert held["body"]["error"]["code"] == "RECOVERY_REQUIRED"
    [last] = events(outcome.record, "txn.outcome")
    assert last["body"]["held"] == [BRANCH]
    assert ticket_now(sor) == CLOSED  # a person undoes it, not the machine
    assert failed_findings(outcome, trip.world) == []
    [case] = desk.cases
    assert case.lease_id == named_lease(sor, ticket_vote(outcome)).lease_id
