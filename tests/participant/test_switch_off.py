"""Planted violations of the participant rules: each refused by its check, and by it alone.

Each case breaks one rule and says what it leads to. With every check on it
is refused with the error (and reason) its rule names; with its own check
switched off (``hatp._checks.unsafe_switched_off``) the participant does
what a participant without that check would do, and the harm the rule
prevents shows in its ledger (a seat ticketed after its lease, a card
charged after an abort); with any other check off it is refused as before.
Proof that the named check is what refuses it, and what it prevents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import HatpError
from hatp.evidence import digest
from hatp.model import Preconditions
from hatp.participant import ParticipantServer
from hatp.store import Store, open_store
from participant.ops import (
    branch,
    calendar,
    charges,
    plan,
    run,
    seats,
    seen,
    server,
    setup_ledgers,
)

#: A case runs against the airline and its store, and says what it left behind.
Case = Callable[[ParticipantServer, ManualClock, Store], str]
DIGEST = digest(plan().to_wire())


def _seat(store: Store, seat: str = "12A") -> str:
    with store.transaction() as conn:
        row = conn.execute(sa.select(seats).where(seats.c.seat == seat)).one()
    return f"seat {seat} {row.status}" + (f" for {row.holder}" if row.holder else "")


def _slot(store: Store) -> str:
    with store.transaction() as conn:
        title = conn.execute(sa.select(calendar.c.title)).scalar_one()
    return f"slot mon-9 {title or 'empty'}"


def _charged(store: Store) -> str:
    with store.transaction() as conn:
        count = len(conn.execute(sa.select(charges)).all())
    return f"{count} charge(s)"


def _stale_fence(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    run(airline.prepare(plan(), "seat", 2))  # a newer coordinator (fence 2) holds the seat
    run(airline.abort("txn-1", "seat", 1))  # the superseded one (fence 1) releases it
    return _seat(store)


def _tier_mismatch(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    # The plan calls the hold a final step: its coordinator releases nothing on abort.
    run(airline.prepare(plan("txn-1", branch("seat", tier="final")), "seat", 1))
    return _seat(store)


def _understated_cost(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    receipt = run(airline.prepare(plan("txn-1", branch("seat", amount=None)), "seat", 1))
    code = str(receipt["reason"]).split(":")[0]  # the stable code before the prose
    return f"voted {receipt['vote']} {code}; {_seat(store)}"


def _commit_after_lease(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(600)  # the lease ended at 09:10
    run(airline.commit("txn-1", "seat", 1, DIGEST, None))
    return _seat(store)


def _renew_after_lease(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(600)
    renewed = run(airline.renew("txn-1", "seat", 1))
    return f"renewed until {renewed['leaseExpiresAt']}; {_seat(store)}"


def _changed_preconditions(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    run(airline.prepare(plan(), "event", 1))
    changed = Preconditions(versions={"calendar/mon-9": "9"}, scope="calendar.write")
    run(airline.commit("txn-1", "event", 1, DIGEST, changed))
    return _slot(store)


def _wrong_undo_token(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    voted = run(airline.prepare(plan(), "event", 1))
    run(airline.commit("txn-1", "event", 1, DIGEST, seen(voted)))
    run(airline.compensate("txn-1", "event", 1, "guessed"))
    return _slot(store)


def _commit_after_abort(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    voted = run(airline.prepare(plan(), "charge", 1))
    run(airline.abort("txn-1", "charge", 1))
    run(airline.commit("txn-1", "charge", 1, DIGEST, seen(voted)))
    return _charged(store)


def _replace_live_hold(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    first = run(airline.prepare(plan(), "seat", 1))  # leased to 09:10, horizon 09:15
    clock.advance(300)  # the lease runs to 09:10: the hold is not lost
    again = run(airline.replace(plan(), "seat", 1, 2))
    return f"horizon {first['holdHorizon']} moved to {again['holdHorizon']}"


def _replace_after_coordinator_abort(
    airline: ParticipantServer, clock: ManualClock, store: Store
) -> str:
    run(airline.prepare(plan(), "seat", 1))
    run(airline.abort("txn-1", "seat", 1))  # released on purpose, not lost
    run(airline.replace(plan(), "seat", 1, 2))
    return _seat(store)


def _quote_with_effect(airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    careless = plan("txn-1", branch("seat", args={"seat": "12A", "write_in_quote": True}))
    run(airline.quote(careless, "seat", 1))
    return f"after the quote, {_seat(store)}"


@dataclass(frozen=True)
class Planted:
    """One violation: its check, how it is refused, and the harm with the check off."""

    check: str
    case: Case
    refused: str
    harm: str


HELD = "seat 12A held for txn-1/seat"
CASES: dict[str, Planted] = {
    "stale-fence": Planted("PART-FENCE", _stale_fence, "STALE_FENCE", "seat 12A free"),
    "tier-mismatch": Planted("PART-PLAN", _tier_mismatch, "PLAN_INVALID TIER_MISMATCH", HELD),
    "understated-cost": Planted(
        "PART-COST",
        _understated_cost,
        "voted no COST_UNDERSTATED; seat 12A free",
        f"voted yes None; {HELD}",
    ),
    "commit-after-lease": Planted(
        "PART-HOLD", _commit_after_lease, "HOLD_EXPIRED", "seat 12A ticketed for txn-1/seat"
    ),
    "renew-after-lease": Planted(
        "PART-RENEW",
        _renew_after_lease,
        "HOLD_EXPIRED",
        f"renewed until 2026-12-02T09:15:00.000Z; {HELD}",
    ),
    "replace-live-hold": Planted(
        "PART-REPLACE",
        _replace_live_hold,
        "NOT_REPLACEABLE",
        "horizon 2026-12-02T09:15:00.000Z moved to 2026-12-02T09:20:00.000Z",
    ),
    "replace-after-coordinator-abort": Planted(
        "PART-REPLACE", _replace_after_coordinator_abort, "NOT_REPLACEABLE", HELD
    ),
    "quote-with-effect": Planted(
        "PART-QUOTE",
        _quote_with_effect,
        "after the quote, seat 12A free",
        f"after the quote, {HELD}",
    ),
    "changed-preconditions": Planted(
        "PART-PRECONDITION",
        _changed_preconditions,
        "PRECONDITION_CHANGED",
        "slot mon-9 Flight to Berlin",
    ),
    "wrong-undo-token": Planted("PART-UNDO", _wrong_undo_token, "UNDO_INVALID", "slot mon-9 empty"),
    "commit-after-abort": Planted(
        "PART-ORDER", _commit_after_abort, "OUTCOME_CONFLICT", "1 charge(s)"
    ),
}
CHECKS = sorted({planted.check for planted in CASES.values()})


def _outcome(planted: Planted, airline: ParticipantServer, clock: ManualClock, store: Store) -> str:
    """What the case left behind, or the refusal: its code, and its reason if it has one."""
    try:
        return planted.case(airline, clock, store)
    except HatpError as exc:
        reason = exc.data.get("reason")
        return f"{exc.code} {reason}" if reason else exc.code


@pytest.mark.parametrize("name", sorted(CASES))
def test_planted_participant_violation_is_refused(
    name: str, ledgers: Store, airline: ParticipantServer, clock: ManualClock
) -> None:
    """[PART-FENCE] [PART-PLAN] [PART-COST] [PART-HOLD] [PART-RENEW] [PART-REPLACE]
    [PART-QUOTE] [PART-PRECONDITION] [PART-UNDO] [PART-ORDER]"""
    planted = CASES[name]
    assert _outcome(planted, airline, clock, ledgers) == planted.refused


@pytest.mark.parametrize("name", sorted(CASES))
def test_switching_its_check_off_lets_the_harm_happen(
    name: str, ledgers: Store, airline: ParticipantServer, clock: ManualClock
) -> None:
    planted = CASES[name]
    with unsafe_switched_off(planted.check):
        assert _outcome(planted, airline, clock, ledgers) == planted.harm


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_check_off_leaves_every_other_case_refused(
    check: str, tmp_path: Path, clock: ManualClock
) -> None:
    """Every check refuses its own cases only (SQLite, a store per case)."""
    with unsafe_switched_off(check):
        for name, planted in sorted(CASES.items()):
            if planted.check == check:
                continue
            store = open_store(f"sqlite:///{tmp_path / check}-{name}.db")
            try:
                setup_ledgers(store)
                own = ManualClock(clock.now())
                outcome = _outcome(planted, server(store, own), own, store)
                assert outcome == planted.refused, f"{name} without {check}: {outcome}"
            finally:
                store.close()
