"""[COORD-EFFECT] the coordinator compares each commit's observed effect with its preview.

The payments participant here is the real one, its receipts re-signed with its
own key by :class:`Reports` to say what it previews and what it observed (the
participant speaking, not an attacker): the card's charge is ``predicted``,
730.00 USD at most 760.00, and the capture observes another amount. The
coordinator records the verdict in a ``txn.effect`` event and flags a
difference in the outcome's ``effectDiffers``; it changes nothing because of
it. The offline verifier recomputes the verdict from the receipts [TXN-EFFECT].
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.trips import Trip, approve_after, failed_findings
from hatp._checks import unsafe_switched_off
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE, PAYMENTS
from hatp.errors import ParticipantUnavailable
from hatp.evidence import sign
from hatp.http import ServeMetrics
from hatp.model import Amount, Certainty, Plan, Preconditions, TxnState
from hatp.participant import Participant, Relay, change, observed, preview

#: Each check switched off here, and the tests that show the harm it prevents.
SWITCH_OFF_TESTS = {
    "COORD-EFFECT": ("test_switched_off_the_difference_is_not_flagged_and_the_record_fails",),
    "COORD-PREVIEW-MIN": ("test_switched_off_people_are_asked_about_a_step_below_the_policy",),
    "COORD-PREVIEW": (
        "test_switched_off_people_approve_terms_without_the_previews",
        "test_switched_off_a_changed_step_is_committed_though_people_approved_another",
    ),
}
CARD = "card corp-visa-4242"
T = TypeVar("T")


class Reports(Relay):
    """The payments participant, saying what its charge will be and what it was."""

    def __init__(self, inner: Participant, trip: Trip, charged: str) -> None:
        super().__init__(inner)
        self._key = trip.world.keys[PAYMENTS]
        self._charged = charged

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        receipt = await super().prepare(plan, branch_id, fence)
        cost = Amount.model_validate(receipt["cost"])
        said = preview(
            Certainty.PREDICTED,
            [change(CARD, "charge", amount=cost)],
            bound=Amount(value="760.00", currency=cost.currency),
        )
        return self._resigned(receipt, preview=said.to_wire())

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        receipt = await super().commit(txn_id, branch_id, fence, plan_digest, preconditions)
        charged = Amount(value=self._charged, currency="USD")
        return self._resigned(
            receipt, observed=observed([change(CARD, "charge", amount=charged)]).to_wire()
        )

    def _resigned(self, receipt: dict[str, Any], **members: Any) -> dict[str, Any]:
        unsigned = {k: v for k, v in receipt.items() if k != "signature"}
        return sign({**unsigned, **members}, self._key)


def charged(trip: Trip, value: str) -> Outcome:
    """The trip, its card charged ``value`` USD against a preview of the branch's amount."""
    return trip.run(links={PAYMENTS: Reports(trip.links[PAYMENTS], trip, value)})


def bodies(outcome: Outcome, event_type: str) -> list[dict[str, Any]]:
    return [e["body"] for e in outcome.record["events"] if e["type"] == event_type]


@pytest.mark.parametrize(
    ("value", "verdict", "flagged"),
    [
        ("730.00", "as-previewed", []),
        ("750.00", "within-bounds", []),
        ("790.00", "differs", ["charge"]),
    ],
)
def test_each_commit_is_compared_with_its_preview_and_a_difference_flagged(
    trip: Trip, value: str, verdict: str, flagged: list[str]
) -> None:
    """[COORD-EFFECT] [TXN-EFFECT] the verdict is in the record, a difference is flagged in
    the outcome, the transaction still commits (nothing is fixed automatically), and
    the record verifies offline."""
    outcome = charged(trip, value)
    assert outcome.state is TxnState.COMMITTED
    effects = {body["branchId"]: body for body in bodies(outcome, "txn.effect")}
    assert (effects["charge"]["certainty"], effects["charge"]["verdict"]) == (
        "predicted",
        verdict,
    )
    others = {bid: body["verdict"] for bid, body in effects.items() if bid != "charge"}
    assert set(others.values()) <= {"as-previewed"}  # the other steps did what they said
    (ended,) = bodies(outcome, "txn.outcome")
    assert ended.get("effectDiffers", []) == flagged
    assert failed_findings(outcome, trip.world) == []


def test_status_and_metrics_show_a_difference(trip: Trip) -> None:
    """[COORD-EFFECT] surfaced: the coordinator's status names the step, and an operator's
    metrics count it (``hatp_txn_effects_total`` by verdict)."""
    metrics = ServeMetrics()
    coordinator = trip.coordinator(links={PAYMENTS: Reports(trip.links[PAYMENTS], trip, "790.00")})
    coordinator.observe(metrics)
    outcome = asyncio.run(coordinator.run(trip.plan()))
    status = coordinator.status(outcome.txn_id)
    assert status == {"txnId": outcome.txn_id, "state": "committed", "effectDiffers": ["charge"]}
    counted = {
        sample.labels["verdict"]: sample.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for sample in family.samples
        if sample.name == "hatp_txn_effects_total"
    }
    assert counted["differs"] == 1
    assert counted["as-previewed"] >= 1  # the seat, the room and the event did as they said


def test_a_step_that_gives_no_preview_is_not_judged(trip: Trip) -> None:
    """[COORD-EFFECT] certainty none: nothing to compare, no txn.effect event."""
    outcome = trip.run(trip.plan())
    assert outcome.state is TxnState.COMMITTED
    judged = {body["branchId"] for body in bodies(outcome, "txn.effect")}
    previews = {
        e["body"]["branchId"]: e["body"]["receipt"]["preview"]["certainty"]
        for e in outcome.record["events"]
        if e["type"] == "txn.prepared"
    }
    assert judged == {bid for bid, certainty in previews.items() if certainty != "none"}
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_the_difference_is_not_flagged_and_the_record_fails(trip: Trip) -> None:
    """[COORD-EFFECT] planted: without the check the outcome hides the difference; the
    offline verifier still finds it [TXN-EFFECT]."""
    with unsafe_switched_off("COORD-EFFECT"):
        outcome = charged(trip, "790.00")
    assert outcome.state is TxnState.COMMITTED
    (ended,) = bodies(outcome, "txn.outcome")
    assert "effectDiffers" not in ended
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert failed == {"TXN-EFFECT"}


def holds_first(trip: Trip) -> Outcome:
    """The trip in holds-first mode: every step votes, then people approve the plan and
    its terms (the holds' ends, and each step's preview)."""
    return trip.run(trip.plan(decide_in=40 * 60, mode="holds-first"))


def test_holds_first_terms_show_people_each_steps_signed_preview_COORD_PREVIEW(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW] [TXN-PREVIEW] the terms people approve carry every step's preview
    exactly as its participant signed it; their votes and the approval bind the terms'
    digest; the record verifies."""
    outcome = holds_first(trip)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (terms,) = bodies(outcome, "txn.terms")
    signed = {
        body["branchId"]: body["receipt"]["preview"] for body in bodies(outcome, "txn.prepared")
    }
    assert terms["terms"]["previews"] == signed
    assert {p["certainty"] for p in signed.values()} == {"exact"}
    (approval,) = bodies(outcome, "txn.approval")
    assert approval["approval"]["termsDigest"] == terms["termsDigest"]
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_people_approve_terms_without_the_previews(trip: Trip) -> None:
    """[COORD-PREVIEW] planted: without the check the terms omit the previews, so people
    approve without seeing what each step will change; the verifier finds it."""
    with unsafe_switched_off("COORD-PREVIEW"):
        outcome = holds_first(trip)
    assert outcome.state is TxnState.COMMITTED
    (terms,) = bodies(outcome, "txn.terms")
    assert terms["terms"]["previews"] == {}
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert failed == {"TXN-PREVIEW"}


class LoseRenewalsThenPreviewAnother(Relay):
    """The airline: every renewal lost on the way (so the seat's lease ends and it is
    placed again), and the seat placed again previewing another change, signed with the
    airline's own key (what a participant whose inventory moved would say)."""

    def __init__(self, inner: Participant, trip: Trip) -> None:
        super().__init__(inner)
        self._key = trip.world.keys[AIRLINE]

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "renew":
            raise ParticipantUnavailable("the renew was lost", participant=self.participant_id)
        answer = await call()
        if method == "replace" and isinstance(answer, dict):
            moved = preview(Certainty.EXACT, [change("flight LH400 seat 31F", "ticket")])
            unsigned = {k: v for k, v in answer.items() if k != "signature"}
            return sign({**unsigned, "preview": moved.to_wire()}, self._key)  # type: ignore[return-value]
        return answer


def changed_after_approval(trip: Trip) -> Outcome:
    """Holds-first; bob approves the terms at 25 minutes, after the seat's lease ended; the
    seat is placed again, previewing another seat than people approved."""
    plan = trip.plan(decide_in=40 * 60, mode="holds-first")
    links = {AIRLINE: LoseRenewalsThenPreviewAnother(trip.links[AIRLINE], trip)}
    return asyncio.run(approve_after(trip, plan, 25 * 60, links=links, renewals=1, keepers_after=1))


def test_a_step_placed_again_previewing_another_change_is_not_committed_COORD_PREVIEW(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW] people approved the seat the terms showed; the seat placed again
    previews another: the coordinator decides abort, naming it; nothing is committed."""
    outcome = changed_after_approval(trip)
    assert outcome.state is TxnState.ABORTED, outcome.reason
    assert outcome.reason.startswith("seat now previews 'ticket flight LH400 seat 31F'")
    assert "nothing is committed on a changed step" in outcome.reason
    assert not bodies(outcome, "txn.committed")
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_a_changed_step_is_committed_though_people_approved_another(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW] planted: without the check the changed seat is committed; the
    verifier finds that the step committed is not the one people approved [TXN-PREVIEW]."""
    with unsafe_switched_off("COORD-PREVIEW"):
        outcome = changed_after_approval(trip)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert "TXN-PREVIEW" in failed


def below_policy(trip: Trip) -> Outcome:
    """Holds-first, the plan asking an exact preview of its final step; the card's charge
    previews only a predicted amount (at most 760.00)."""
    plan = trip.plan(decide_in=40 * 60, mode="holds-first")
    plan["previews"] = {"minimum": {"final": "exact", "hold": "exact"}}
    return trip.run(plan, links={PAYMENTS: Reports(trip.links[PAYMENTS], trip, "730.00")})


def test_a_step_whose_preview_says_less_than_the_policy_asks_aborts_before_anyone_is_asked(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW-MIN] [PLAN-PREVIEWS] nobody is asked about a step that cannot say
    what the plan requires; the holds are released; the record verifies."""
    outcome = below_policy(trip)
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == (
        "charge gives a predicted preview; the plan asks at least exact of a final step, "
        "so nobody was asked"
    )
    assert not bodies(outcome, "txn.pending") and not bodies(outcome, "txn.terms")
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_people_are_asked_about_a_step_below_the_policy(trip: Trip) -> None:
    """[COORD-PREVIEW-MIN] planted: without the check people approve a charge whose preview
    is only predicted, against the plan; the verifier finds it [TXN-PREVIEW]."""
    with unsafe_switched_off("COORD-PREVIEW-MIN"):
        outcome = below_policy(trip)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert failed == {"TXN-PREVIEW"}
