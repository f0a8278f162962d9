"""Planted violations of the coordinator rules: each refused by its check, and by it alone.

Each case plants one violation in a real run (a forged receipt or approval, a
late approval, a lapsed hold, lost answers). With every check on the
coordinator refuses it; with its check switched off
(``hatp._checks.unsafe_switched_off``) it does what a coordinator without that
check would do, and the violation goes through; switching off any other
coordinator check changes nothing. Proof that the named check is what refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from coordinator.test_modes import quote_changed
from coordinator.trips import (
    APPROVER,
    REJECT,
    Forge,
    ForgeApproval,
    ForgeEstimate,
    Late,
    NoRenew,
    ScriptedAnswer,
    Trip,
    approve_after,
    down,
    failed_findings,
)
from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE, CALENDAR, HOTEL, PAYMENTS
from hatp.demo._lossy import LossyLink
from hatp.evidence import digest
from hatp.model import ApprovalDecision, TxnState

COMMITTED, ABORTED, ABORTING = TxnState.COMMITTED, TxnState.ABORTED, TxnState.ABORTING
RULES = (
    "COORD-SIGNER",
    "COORD-DIGEST",
    "COORD-DEADLINE",
    "COORD-LEASE",
    "COORD-IN-DOUBT",
    "COORD-EVIDENCE",
    "COORD-QUOTE",
    "COORD-SETTLE",
    "COORD-PREPARE-RETRY",
)
OTHER_PLAN = digest({"another": "plan"})


@dataclass(frozen=True)
class Planted:
    """One violation: the check that refuses it, and the outcome with the check on and off."""

    name: str
    check: str
    run: Callable[[Trip], Outcome]
    refused: TxnState
    through: TxnState
    #: The offline verifier's rule that still catches the record once the coordinator let it by.
    offline: str | None
    #: Checks that also refuse the case (defence in depth): off too when letting it by.
    also: tuple[str, ...] = ()


def _signer(trip: Trip) -> Outcome:
    return trip.run(links={HOTEL: Forge(trip.links[HOTEL], trip.world.keys[AIRLINE])})


def _digest(trip: Trip) -> Outcome:
    forged = Forge(trip.links[HOTEL], trip.world.keys[HOTEL], planDigest=OTHER_PLAN)
    return trip.run(links={HOTEL: forged})


def _approval_signer(trip: Trip) -> Outcome:
    return trip.run(forge=lambda gateway: ForgeApproval(gateway, trip.world.keys[AIRLINE]))


def _approval_digest(trip: Trip) -> Outcome:
    key = trip.world.keys["gateway"]
    return trip.run(forge=lambda gateway: ForgeApproval(gateway, key, planDigest=OTHER_PLAN))


def _late_approval(trip: Trip) -> Outcome:
    late = format_time(trip.clock.now() + timedelta(minutes=16))
    key = trip.world.keys["gateway"]
    plan = trip.plan(decide_in=15 * 60)
    return trip.run(plan, forge=lambda g: ForgeApproval(g, key, decidedAt=late))


def _stripped_evidence(trip: Trip) -> Outcome:
    """The gateway's own key signs an approval that names bob but carries no vote of his."""
    key = trip.world.keys["gateway"]
    return trip.run(forge=lambda gateway: ForgeApproval(gateway, key, votes=[], cards=[]))


def _lapsed_lease(trip: Trip) -> Outcome:
    """The seat's renewals are lost on the way: its 20-minute lease ends before the approval."""
    lost = {AIRLINE: NoRenew(trip.links[AIRLINE])}
    plan = trip.plan(decide_in=40 * 60)
    return asyncio.run(approve_after(trip, plan, 25 * 60, links=lost, renewals=1, keepers_after=1))


def _lapsed_before_final(trip: Trip) -> Outcome:
    return trip.run(links={CALENDAR: Late(trip.links[CALENDAR], trip.clock, 21 * 60)})


def _abort_store_down(trip: Trip) -> Outcome:
    """The seat's participant cannot reach its store at abort, for longer than the retries."""
    store_down = down(trip, AIRLINE, "abort", times=1000)
    return trip.run(answer=REJECT, links={AIRLINE: store_down}, max_attempts=3)


def _prepare_store_blip(trip: Trip) -> Outcome:
    """The hotel's first prepare meets a stale database connection."""
    return trip.run(links={HOTEL: down(trip, HOTEL, "prepare", times=1)})


def _forged_estimate(trip: Trip) -> Outcome:
    """The airline signs bob's chain estimate: auto mode may not rest on it."""
    key = trip.world.keys[AIRLINE]
    plan = trip.plan(mode="auto")
    answer = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_votes=False)
    return trip.run(plan, answer, forge=lambda gateway: ForgeEstimate(gateway, key))


def _lost_answers(trip: Trip) -> Outcome:
    return trip.run(links={PAYMENTS: LossyLink(trip.links[PAYMENTS], {"commit": 2})})


CASES = [
    Planted("forged-vote-signer", "COORD-SIGNER", _signer, ABORTED, COMMITTED, "TXN-SIGNER"),
    Planted("vote-for-other-plan", "COORD-DIGEST", _digest, ABORTED, COMMITTED, "TXN-DIGEST"),
    Planted(
        "forged-approval-signer",
        "COORD-SIGNER",
        _approval_signer,
        ABORTED,
        COMMITTED,
        "TXN-SIGNER",
        also=("COORD-EVIDENCE",),
    ),
    Planted(
        "approval-for-other-plan",
        "COORD-DIGEST",
        _approval_digest,
        ABORTED,
        COMMITTED,
        "TXN-DIGEST",
        also=("COORD-EVIDENCE",),
    ),
    Planted(
        "approval-without-votes",
        "COORD-EVIDENCE",
        _stripped_evidence,
        ABORTED,
        COMMITTED,
        "TXN-APPROVERS",
    ),
    Planted("late-approval", "COORD-DEADLINE", _late_approval, ABORTED, COMMITTED, "TXN-VOTES"),
    Planted("lapsed-lease", "COORD-LEASE", _lapsed_lease, ABORTED, COMMITTED, "TXN-OUTCOME"),
    Planted(
        "lease-lapsed-before-final",
        "COORD-LEASE",
        _lapsed_before_final,
        ABORTED,
        COMMITTED,
        "TXN-OUTCOME",
    ),
    Planted(
        "lost-answers", "COORD-IN-DOUBT", _lost_answers, COMMITTED, TxnState.NEEDS_ATTENTION, None
    ),
    Planted("quote-changed", "COORD-QUOTE", quote_changed, ABORTED, COMMITTED, "TXN-MODE"),
    Planted("forged-estimate", "COORD-SIGNER", _forged_estimate, ABORTED, COMMITTED, "TXN-SIGNER"),
    Planted(
        "abort-store-down", "COORD-SETTLE", _abort_store_down, ABORTING, ABORTED, "TXN-SETTLED"
    ),
    Planted(
        "prepare-store-blip", "COORD-PREPARE-RETRY", _prepare_store_blip, COMMITTED, ABORTED, None
    ),
]


def test_every_coordinator_rule_has_a_planted_case() -> None:
    assert {case.check for case in CASES} == set(RULES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_planted_case_is_refused_and_goes_through_with_its_check_off(
    trip: Trip, case: Planted
) -> None:
    """[COORD-SIGNER] [COORD-DIGEST] [COORD-DEADLINE] [COORD-LEASE] [COORD-IN-DOUBT]
    [COORD-EVIDENCE] [COORD-QUOTE] [COORD-SETTLE] [COORD-PREPARE-RETRY]."""
    assert case.run(trip).state is case.refused
    with unsafe_switched_off(case.check, *case.also):
        let_by = case.run(trip)
    assert let_by.state is case.through
    if case.offline is not None:
        failed = {finding.split(":")[0] for finding in failed_findings(let_by, trip.world)}
        assert case.offline in failed, failed


@pytest.mark.parametrize(
    ("case", "other"),
    [
        pytest.param(case, other, id=f"{case.name}-{other}")
        for case in CASES
        for other in RULES
        if other != case.check
    ],
)
def test_switching_off_another_check_changes_nothing(trip: Trip, case: Planted, other: str) -> None:
    """Each planted case depends on its own check only (each pair in a fresh world: the
    card's limit would run out over many committed trips)."""
    with unsafe_switched_off(other):
        assert case.run(trip).state is case.refused, other


def test_without_the_lease_check_the_card_is_charged_for_a_lost_seat_COORD_LEASE(
    trip: Trip,
) -> None:
    """[COORD-LEASE] what the check prevents: capture runs, then the lapsed holds fail."""
    with unsafe_switched_off("COORD-LEASE"):
        outcome = _lapsed_lease(trip)
    assert outcome.state is COMMITTED
    assert outcome.reason.startswith("seat: ")
    assert trip.world.effects(outcome.txn_id) == {
        AIRLINE: "none",
        HOTEL: "whole",  # renewed; only the seat's renewals were lost
        CALENDAR: "whole",
        PAYMENTS: "whole",
    }


def test_without_the_in_doubt_check_a_capture_survives_an_abort_COORD_IN_DOUBT(
    trip: Trip,
) -> None:
    """[COORD-IN-DOUBT] what the check prevents: silence read as failure, money taken anyway
    (the payments participant then refuses to release a captured charge: needs-attention)."""
    with unsafe_switched_off("COORD-IN-DOUBT"):
        outcome = _lost_answers(trip)
    assert outcome.state is TxnState.NEEDS_ATTENTION
    assert trip.world.effects(outcome.txn_id) == {
        AIRLINE: "none",
        HOTEL: "none",
        CALENDAR: "none",
        PAYMENTS: "whole",
    }
