"""Planted violations of the participant rules: each refused by its check, and by it alone.

Each case breaks one rule. With every check on it is refused; with its own
check switched off (``hatp._checks.unsafe_switched_off``) the participant
does what a participant without that check would do, and the violation goes
through: proof that the named check is what refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import HatpError
from hatp.evidence import digest
from hatp.model import Preconditions
from hatp.participant import ParticipantServer
from hatp.store import open_store
from participant.ops import branch, plan, run, seen, server, setup_ledgers

Case = Callable[[ParticipantServer, ManualClock], None]
DIGEST = digest(plan().to_wire())


def _stale_fence(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "seat", 2))
    run(airline.abort("txn-1", "seat", 1))


def _tier_mismatch(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan("txn-1", branch("seat", tier="final")), "seat", 1))


def _understated_cost(airline: ParticipantServer, clock: ManualClock) -> None:
    receipt = run(airline.prepare(plan("txn-1", branch("seat", amount=None)), "seat", 1))
    if receipt["vote"] == "no":
        raise HatpError(receipt["reason"])


def _commit_after_lease(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(600)
    run(airline.commit("txn-1", "seat", 1, DIGEST, None))


def _renew_after_lease(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(600)
    run(airline.renew("txn-1", "seat", 1))


def _changed_preconditions(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "event", 1))
    changed = Preconditions(versions={"calendar/mon-9": "9"}, scope="calendar.write")
    run(airline.commit("txn-1", "event", 1, DIGEST, changed))


def _wrong_undo_token(airline: ParticipantServer, clock: ManualClock) -> None:
    voted = run(airline.prepare(plan(), "event", 1))
    run(airline.commit("txn-1", "event", 1, DIGEST, seen(voted)))
    run(airline.compensate("txn-1", "event", 1, "guessed"))


def _commit_after_abort(airline: ParticipantServer, clock: ManualClock) -> None:
    voted = run(airline.prepare(plan(), "charge", 1))
    run(airline.abort("txn-1", "charge", 1))
    run(airline.commit("txn-1", "charge", 1, DIGEST, seen(voted)))


def _replace_live_hold(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(300)  # the lease runs to 09:10: the hold is not lost
    run(airline.replace(plan(), "seat", 1, 2))


def _replace_after_coordinator_abort(airline: ParticipantServer, clock: ManualClock) -> None:
    run(airline.prepare(plan(), "seat", 1))
    run(airline.abort("txn-1", "seat", 1))  # released on purpose, not lost
    run(airline.replace(plan(), "seat", 1, 2))


def _quote_with_effect(airline: ParticipantServer, clock: ManualClock) -> None:
    careless = plan("txn-1", branch("seat", args={"seat": "12A", "write_in_quote": True}))
    run(airline.quote(careless, "seat", 1))
    # Another transaction finds the seat free only if the quote's write was undone.
    if run(airline.prepare(plan("txn-2"), "seat", 1))["vote"] == "yes":
        raise HatpError("the quote's write was rolled back: the seat stayed free")


CASES: dict[str, tuple[str, Case]] = {
    "stale-fence": ("PART-FENCE", _stale_fence),
    "tier-mismatch": ("PART-PLAN", _tier_mismatch),
    "understated-cost": ("PART-COST", _understated_cost),
    "commit-after-lease": ("PART-HOLD", _commit_after_lease),
    "renew-after-lease": ("PART-RENEW", _renew_after_lease),
    "replace-live-hold": ("PART-REPLACE", _replace_live_hold),
    "replace-after-coordinator-abort": ("PART-REPLACE", _replace_after_coordinator_abort),
    "quote-with-effect": ("PART-QUOTE", _quote_with_effect),
    "changed-preconditions": ("PART-PRECONDITION", _changed_preconditions),
    "wrong-undo-token": ("PART-UNDO", _wrong_undo_token),
    "commit-after-abort": ("PART-ORDER", _commit_after_abort),
}


def _refused(case: Case, airline: ParticipantServer, clock: ManualClock) -> bool:
    try:
        case(airline, clock)
    except HatpError:
        return True
    return False


@pytest.mark.parametrize("name", sorted(CASES))
def test_planted_participant_violation_is_refused(
    name: str, airline: ParticipantServer, clock: ManualClock
) -> None:
    """[PART-FENCE] [PART-PLAN] [PART-COST] [PART-HOLD] [PART-RENEW] [PART-REPLACE]
    [PART-QUOTE] [PART-PRECONDITION] [PART-UNDO] [PART-ORDER]"""
    _, case = CASES[name]
    assert _refused(case, airline, clock)


@pytest.mark.parametrize("name", sorted(CASES))
def test_switching_its_check_off_lets_the_violation_through(
    name: str, airline: ParticipantServer, clock: ManualClock
) -> None:
    check, case = CASES[name]
    with unsafe_switched_off(check):
        assert not _refused(case, airline, clock), f"{name} is still refused without {check}"


@pytest.mark.parametrize("check", ["PART-QUOTE", "PART-REPLACE"])
def test_switching_a_new_check_off_leaves_every_other_case_refused(
    check: str, tmp_path: Path, clock: ManualClock
) -> None:
    """The quote and replace checks refuse their own cases only (SQLite, a store per case)."""
    with unsafe_switched_off(check):
        for name, (owner, case) in sorted(CASES.items()):
            if owner == check:
                continue
            store = open_store(f"sqlite:///{tmp_path / name}.db")
            try:
                setup_ledgers(store)
                own = ManualClock(clock.now())
                assert _refused(case, server(store, own), own), f"{name} passed without {check}"
            finally:
                store.close()
