"""Effect previews in approval-first [COORD-PREVIEW] [COORD-PREVIEW-MIN], and how auto chooses.

Approval-first asks people before anything is prepared, so what they approve
of each step is its participant's signed quote: its price and its preview.
The coordinator states the quotes' previews as ``txn.terms`` (no holds: none
is placed yet) before it asks, and the approval binds the terms' digest; a
step whose prepare then previews another change is not committed. A plan
whose policy (its own, or an approval group's) demands previews runs
approval-first in ``auto`` (``basis`` ``"previews"``), and nobody is asked
about a step whose quote says less than the policy asks.

The participants here are the real ones; where one says something else than
the demo's (a predicted charge, another seat, no preview), its answer is
re-signed with its own key by :class:`Resigned` or
:class:`~coordinator.test_effects.Reports`: the participant speaking, not an
attacker. Every record is verified offline [TXN-MODE] [TXN-PREVIEW].
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from coordinator.test_effects import CARD, Reports, bodies
from coordinator.test_modes import AT_ONCE
from coordinator.trips import ALL_NONE, ALL_WHOLE, Trip, failed_findings, types
from hatp._checks import unsafe_switched_off
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE, CALENDAR, PAYMENTS
from hatp.errors import PlanInvalid
from hatp.evidence import sign
from hatp.model import Amount, Certainty, TxnState
from hatp.participant import Participant, Relay, change, preview

#: Each check switched off here, and the tests that show the harm it prevents.
SWITCH_OFF_TESTS = {
    "COORD-PREVIEW": ("test_switched_off_a_prepare_unlike_its_quote_is_committed",),
    "COORD-PREVIEW-MIN": ("test_switched_off_people_approve_a_quote_below_the_policy",),
}
T = TypeVar("T")

#: The card's charge as :class:`Reports` previews it at prepare: 730.00, at most 760.00.
PREDICTED_CHARGE = preview(
    Certainty.PREDICTED,
    [change(CARD, "charge", amount=Amount(value="730.00", currency="USD"))],
    bound=Amount(value="760.00", currency="USD"),
)
#: Another seat than the plan's: what the airline would preview if its inventory moved.
ANOTHER_SEAT = preview(Certainty.EXACT, [change("flight LH400 seat 31F", "ticket")])


class Resigned(Relay):
    """A participant's answers to ``method`` with ``members`` changed, signed again with
    the participant's own key: what the participant itself would say."""

    def __init__(self, inner: Participant, trip: Trip, method: str, **members: Any) -> None:
        super().__init__(inner)
        self._key = trip.world.keys[inner.participant_id]
        self._method = method
        self._members = members

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        answer = await call()
        if method != self._method or not isinstance(answer, dict):
            return answer
        unsigned = {k: v for k, v in answer.items() if k != "signature"}
        return sign({**unsigned, **self._members}, self._key)  # type: ignore[return-value]


def predicted_charge(trip: Trip, charged: str = "730.00") -> dict[str, Participant]:
    """The payments link: the charge quoted and prepared as :data:`PREDICTED_CHARGE`, the
    capture observing ``charged`` USD."""
    reports = Reports(trip.links[PAYMENTS], trip, charged)
    return {PAYMENTS: Resigned(reports, trip, "quote", preview=PREDICTED_CHARGE.to_wire())}


def mode_of(outcome: Outcome) -> dict[str, Any]:
    (mode,) = bodies(outcome, "txn.mode")
    return mode


def test_approval_first_terms_show_people_each_quotes_preview_COORD_PREVIEW(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW] [COORD-QUOTE] approval-first: after the mode and before the ask, one
    ``txn.terms`` states every step's preview exactly as its quote signed it, no hold and
    the approval deadline in force; the ask carries that deadline and the approval binds
    the terms' digest; COMMITTED, and the record verifies [TXN-MODE] [TXN-PREVIEW]."""
    plan = trip.plan(mode="approval-first")
    outcome = trip.run(plan, AT_ONCE)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    kinds = types(outcome.record)
    assert kinds.count("txn.terms") == 1
    assert kinds.index("txn.mode") < kinds.index("txn.terms") < kinds.index("txn.pending")
    assert kinds.index("txn.terms") < kinds.index("txn.prepared")
    quoted = {q["branchId"]: q["preview"] for q in mode_of(outcome)["quotes"]}
    assert list(quoted) == ["seat", "room", "calendar", "charge"]
    assert {p["certainty"] for p in quoted.values()} == {"exact"}
    (stated,) = bodies(outcome, "txn.terms")
    terms = stated["terms"]
    assert terms["previews"] == quoted
    assert terms["holds"] == []
    assert terms["approveBy"] == plan["deadlines"]["decideBy"]
    (pending,) = bodies(outcome, "txn.pending")
    assert pending["pending"]["decideBy"] == terms["approveBy"]
    (approval,) = bodies(outcome, "txn.approval")
    assert approval["approval"]["termsDigest"] == stated["termsDigest"]
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


@pytest.mark.parametrize("policy", [{"final": "bounded"}, {"final": "exact", "hold": "exact"}])
def test_auto_with_a_plan_requiring_previews_runs_approval_first_on_previews_COORD_MODE(
    trip: Trip, policy: dict[str, str]
) -> None:
    """[COORD-MODE] [PLAN-PREVIEWS] auto, the plan asking previews of its steps (the demo's
    are all exact): parallel would ask people before any step previewed, so the mode is
    approval-first on basis ``previews``, with no chain estimate asked; every step is
    quoted; COMMITTED, and the record verifies [TXN-MODE]."""
    outcome = trip.run(trip.plan(mode="auto", previews=policy), AT_ONCE)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    mode = mode_of(outcome)
    assert (mode["requested"], mode["chosen"], mode["basis"]) == (
        "auto",
        "approval-first",
        "previews",
    )
    assert mode["estimates"] == []
    assert [q["branchId"] for q in mode["quotes"]] == ["seat", "room", "calendar", "charge"]
    assert failed_findings(outcome, trip.world) == []


def test_a_predicted_charge_with_a_bound_meets_a_bounded_policy_COORD_PREVIEW_MIN(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW-MIN] [COORD-EFFECT] the card's charge is quoted and prepared as
    predicted, at most 760.00: that is ``bounded``, so people are asked; the prepare
    previews what was quoted, so it commits; 750.00 captured is within the bound."""
    plan = trip.plan(mode="auto", previews={"final": "bounded"})
    outcome = trip.run(plan, AT_ONCE, links=predicted_charge(trip, "750.00"))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (stated,) = bodies(outcome, "txn.terms")
    assert stated["terms"]["previews"]["charge"] == PREDICTED_CHARGE.to_wire()
    effects = {body["branchId"]: body["verdict"] for body in bodies(outcome, "txn.effect")}
    assert effects["charge"] == "within-bounds"
    assert failed_findings(outcome, trip.world) == []


def prepared_unlike_quote(trip: Trip) -> Outcome:
    """Approval-first; the airline quotes the plan's seat, but its prepare previews another
    (signed with its own key: its inventory moved between the quote and the prepare)."""
    links = {
        AIRLINE: Resigned(trip.links[AIRLINE], trip, "prepare", preview=ANOTHER_SEAT.to_wire())
    }
    return trip.run(trip.plan(mode="approval-first"), AT_ONCE, links=links)


def test_a_prepare_previewing_another_change_than_its_quote_is_not_committed_COORD_PREVIEW(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW] people approved the seat its quote previewed; the prepare previews
    another at the same fare: the coordinator decides abort, naming the step; nothing is
    committed, every step is released; the record verifies [TXN-PREVIEW]."""
    outcome = prepared_unlike_quote(trip)
    assert outcome.state is TxnState.ABORTED, outcome.reason
    assert outcome.reason.startswith("seat now previews 'ticket flight LH400 seat 31F'")
    assert "not what people approved" in outcome.reason
    assert not bodies(outcome, "txn.committed")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_a_prepare_unlike_its_quote_is_committed(trip: Trip) -> None:
    """[COORD-PREVIEW] planted: without the check people approve terms without the
    previews and the changed seat is committed; the verifier finds it [TXN-PREVIEW]."""
    with unsafe_switched_off("COORD-PREVIEW"):
        outcome = prepared_unlike_quote(trip)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert "seat" in {body["branchId"] for body in bodies(outcome, "txn.committed")}
    (stated,) = bodies(outcome, "txn.terms")
    assert stated["terms"]["previews"] == {}
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert failed == {"TXN-PREVIEW"}


def test_a_calendar_edited_after_its_quote_is_not_committed_COORD_PREVIEW(trip: Trip) -> None:
    """[COORD-PREVIEW] the calendar's quote previews the event added to the calendar as it
    was; the owner adds another event while bob decides, so the prepare previews the
    calendar at its new version: not what bob approved, ABORTED; the record verifies."""
    plan = trip.plan(mode="approval-first")
    outcome = trip.run(plan, AT_ONCE, meanwhile=trip.world.edit_calendar)
    assert outcome.state is TxnState.ABORTED, outcome.reason
    assert outcome.reason.startswith("calendar now previews ")
    assert "not what people approved" in outcome.reason
    (stated,) = bodies(outcome, "txn.terms")
    prepared = {b["branchId"]: b["receipt"]["preview"] for b in bodies(outcome, "txn.prepared")}
    approved = stated["terms"]["previews"]["calendar"]
    assert prepared["calendar"] != approved
    assert prepared["calendar"]["summary"] == approved["summary"]  # only the version moved
    assert (
        "with other changes (calendar human://acme.com/alice version: approved update 0 -> 1, "
        "now update 1 -> 2)"
    ) in outcome.reason
    assert not bodies(outcome, "txn.committed")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


@pytest.mark.parametrize(
    "quoted",
    [None, preview(Certainty.NONE, [], summary="add_event gives no preview").to_wire()],
    ids=["no-preview", "certainty-none"],
)
def test_a_step_quoted_without_a_preview_is_held_to_nothing_COORD_PREVIEW(
    trip: Trip, quoted: dict[str, Any] | None
) -> None:
    """[COORD-PREVIEW] the calendar's quote says nothing of what it will change (no preview,
    or certainty ``none``); its prepare then previews the event exactly. People approved
    it as saying nothing, so there is nothing to hold it to: COMMITTED, and the record
    verifies [TXN-PREVIEW]."""
    links = {CALENDAR: Resigned(trip.links[CALENDAR], trip, "quote", preview=quoted)}
    outcome = trip.run(trip.plan(mode="approval-first"), AT_ONCE, links=links)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (stated,) = bodies(outcome, "txn.terms")
    assert stated["terms"]["previews"].get("calendar") == quoted
    prepared = {b["branchId"]: b["receipt"]["preview"] for b in bodies(outcome, "txn.prepared")}
    assert prepared["calendar"]["certainty"] == "exact"
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


def test_a_groups_policy_the_quote_falls_short_of_aborts_before_anyone_is_asked_PLAN_PREVIEWS(
    trip: Trip,
) -> None:
    """[PLAN-PREVIEWS] [COORD-PREVIEW-MIN] the plan sets no policy, but finance asks an exact
    preview of the final step; the charge's quote is only predicted. Auto runs
    approval-first on previews, and nobody is asked: ABORTED before any ask, terms or
    prepare; the record verifies [TXN-MODE]."""
    plan = trip.plan(mode="auto")
    assert "previews" not in plan
    (finance,) = plan["approvals"]
    finance["previews"] = {"minimum": {"final": "exact"}}
    outcome = trip.run(plan, AT_ONCE, links=predicted_charge(trip))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == (
        "charge gives a predicted preview; approval group 'finance' asks at least exact of a "
        "final step, so nobody was asked"
    )
    assert (mode_of(outcome)["chosen"], mode_of(outcome)["basis"]) == ("approval-first", "previews")
    for kind in ("txn.terms", "txn.pending", "txn.approval", "txn.prepared"):
        assert not bodies(outcome, kind), kind
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_a_group_requiring_previews_refuses_a_parallel_plan_PLAN_PREVIEWS(trip: Trip) -> None:
    """[PLAN-PREVIEWS] finance asks previews of every final step: parallel would ask before
    any step previewed, so the plan is refused (``PREVIEW_MODE``) and nothing is logged."""
    plan = trip.plan(mode="parallel")
    plan["approvals"][0]["previews"] = {"minimum": {"final": "predicted"}}
    with pytest.raises(PlanInvalid) as caught:
        trip.run(plan, AT_ONCE)
    assert (caught.value.data["reason"], caught.value.data["where"]) == ("PREVIEW_MODE", "/mode")
    assert trip.log.list() == []
    assert trip.world.effects(plan["txnId"]) == ALL_NONE


def quoted_below_policy(trip: Trip) -> Outcome:
    """Approval-first, the plan asking an exact preview of its final step; the charge is
    quoted (and prepared) only as predicted, at most 760.00."""
    plan = trip.plan(mode="approval-first", previews={"final": "exact"})
    return trip.run(plan, AT_ONCE, links=predicted_charge(trip))


def test_a_quote_below_the_policy_aborts_before_anyone_is_asked_COORD_PREVIEW_MIN(
    trip: Trip,
) -> None:
    """[COORD-PREVIEW-MIN] approval-first: the quotes are what people would be shown, and
    the charge's says less than the plan asks, so nobody is asked and nothing prepared;
    the record verifies."""
    outcome = quoted_below_policy(trip)
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == (
        "charge gives a predicted preview; the plan asks at least exact of a final step, "
        "so nobody was asked"
    )
    for kind in ("txn.terms", "txn.pending", "txn.prepared"):
        assert not bodies(outcome, kind), kind
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_switched_off_people_approve_a_quote_below_the_policy(trip: Trip) -> None:
    """[COORD-PREVIEW-MIN] planted: without the check people approve a charge quoted only
    as predicted, against the plan; it commits, and the verifier finds it [TXN-PREVIEW]."""
    with unsafe_switched_off("COORD-PREVIEW-MIN"):
        outcome = quoted_below_policy(trip)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    failed = {finding.split(":")[0] for finding in failed_findings(outcome, trip.world)}
    assert failed == {"TXN-PREVIEW"}
