"""The trip world's participants say what their commits will change, and what they changed.

Each participant's prepare receipt (and quote) carries a preview computed from its
own tables in its dry run, and its commit receipt the observed effect in the same
structure: the default trip commits every branch as previewed. A card whose bank
adds a fee at capture (:class:`CaptureFee`) makes the charge's preview ``predicted``,
with a bound: a fee within it commits ``within-bounds``, one above it ``differs``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from hatp.clock import ManualClock
from hatp.demo import PARTICIPANT_IDS, PAYMENTS, TripWorld, trip_plan
from hatp.demo._payments import balance
from hatp.demo.scenarios import SCENARIOS
from hatp.demo.trip import CARD, TRAVELLER, CaptureFee
from hatp.evidence import digest
from hatp.model import (
    Amount,
    Certainty,
    EffectPreview,
    EffectVerdict,
    ObservedEffect,
    Plan,
    Preconditions,
    effect_verdict,
    parse_plan,
)

USD = "USD"


@pytest.fixture
def urls(store_url: str) -> dict[str, str] | None:
    """Where the stores live: a SQLite file each (the default), or one PostgreSQL schema."""
    return None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)


@pytest.fixture
def world(tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None) -> Iterator[TripWorld]:
    with TripWorld.open(tmp_path / "trip", clock, store_urls=urls) as opened:
        yield opened


def plan_of(world: TripWorld, txn_id: str, **args: Any) -> Plan:
    decide_by = world.clock.now() + timedelta(hours=1)
    doc = trip_plan(txn_id, decide_by=decide_by)
    for branch in doc["branches"]:
        branch["args"] = {**branch["args"], **args.get(branch["branchId"], {})}
    return parse_plan(doc)


def prepare(world: TripWorld, plan: Plan, branch_id: str) -> dict[str, Any]:
    server = world.participants[plan.branch(branch_id).participant]
    return dict(asyncio.run(server.prepare(plan, branch_id, 1)))


def commit(
    world: TripWorld, plan: Plan, branch_id: str, prepared: dict[str, Any]
) -> dict[str, Any]:
    server = world.participants[plan.branch(branch_id).participant]
    seen = prepared.get("preconditions")
    return dict(
        asyncio.run(
            server.commit(
                plan.txn_id,
                branch_id,
                1,
                digest(plan.to_wire()),
                None if seen is None else Preconditions.model_validate(seen),
            )
        )
    )


def quote(world: TripWorld, plan: Plan, branch_id: str) -> dict[str, Any]:
    server = world.participants[plan.branch(branch_id).participant]
    return dict(asyncio.run(server.quote(plan, branch_id, 1)))


def preview_of(receipt: dict[str, Any]) -> EffectPreview:
    return EffectPreview.model_validate(receipt["preview"])


def observed_of(receipt: dict[str, Any]) -> ObservedEffect:
    return ObservedEffect.model_validate(receipt["observed"])


def changes(effect: EffectPreview | ObservedEffect) -> list[tuple[Any, ...]]:
    return [
        (
            c.resource,
            c.kind,
            c.field,
            c.before,
            c.after,
            None if c.amount is None else str(c.amount),
        )
        for c in effect.changes
    ]


def committed_as(
    world: TripWorld, plan: Plan, branch_id: str
) -> tuple[EffectPreview, EffectVerdict]:
    """Prepare and commit one branch; its preview and how its commit compares with it."""
    prepared = prepare(world, plan, branch_id)
    assert prepared["vote"] == "yes", prepared.get("reason")
    done = commit(world, plan, branch_id, prepared)
    assert done["outcome"] == "committed"
    said = preview_of(prepared)
    return said, effect_verdict(said, observed_of(done))


# -- the default trip: every branch exactly as previewed ---------------------------------------


def test_the_airline_previews_the_seat_ticketed_to_the_traveller_at_its_fare(
    world: TripWorld,
) -> None:
    """Exact: the hold keeps the seat for this branch; commit tickets exactly it."""
    plan = plan_of(world, "txn-seat")
    said, verdict = committed_as(world, plan, "seat")
    assert said.certainty is Certainty.EXACT
    assert changes(said) == [
        ("flight LH400 seat 14C", "ticket", "traveller", None, TRAVELLER, "420.00 USD")
    ]
    assert verdict is EffectVerdict.AS_PREVIEWED
    business = plan_of(world, "txn-2a", seat={"seat": "2A"})
    assert changes(preview_of(quote(world, business, "seat")))[0][-1] == "2140.00 USD"


def test_the_hotel_previews_the_room_booked_for_the_traveller_for_the_nights(
    world: TripWorld,
) -> None:
    plan = plan_of(world, "txn-room")
    said, verdict = committed_as(world, plan, "room")
    assert said.certainty is Certainty.EXACT
    assert changes(said) == [
        (
            "hotel midtown-lodge, 1 room, 2 nights from 2026-12-14",
            "book",
            "guest",
            None,
            TRAVELLER,
            "310.00 USD",
        )
    ]
    assert verdict is EffectVerdict.AS_PREVIEWED


def test_the_calendar_previews_the_event_at_its_time_and_the_version_it_bumps(
    world: TripWorld,
) -> None:
    """Exact: the commit is refused unless the calendar is at the version the dry run saw."""
    world.edit_calendar(TRAVELLER)  # the calendar is at version 1
    plan = plan_of(world, "txn-cal")
    said, verdict = committed_as(world, plan, "calendar")
    assert said.certainty is Certainty.EXACT
    event = {
        "title": "Acme customer visit, New York",
        "start": "2026-12-14T13:00:00.000Z",
        "end": "2026-12-16T22:00:00.000Z",
        "attendees": [TRAVELLER],
    }
    calendar = f"calendar {TRAVELLER}"
    assert changes(said) == [
        (calendar, "create", "event", None, event, None),
        (calendar, "update", "version", 1, 2, None),
    ]
    assert said.changes[0].at == "2026-12-14T13:00:00.000Z"
    assert said.summary.startswith("add 'Acme customer visit, New York' to the calendar of ")
    assert verdict is EffectVerdict.AS_PREVIEWED


def test_an_event_whose_times_are_not_wire_times_is_refused(world: TripWorld) -> None:
    plan = plan_of(world, "txn-when", calendar={"start": "tomorrow at two"})
    receipt = prepare(world, plan, "calendar")
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("BAD_ARGS: add_event needs start as a time like ")


def test_payments_previews_the_charge_exactly_when_the_amount_is_known(
    world: TripWorld,
) -> None:
    plan = plan_of(world, "txn-charge")
    quoted = preview_of(quote(world, plan, "charge"))
    said, verdict = committed_as(world, plan, "charge")
    assert said.certainty is Certainty.EXACT
    assert said.bound is None
    assert changes(said) == [(f"card {CARD}", "charge", "payee", None, "Acme Travel", "730.00 USD")]
    assert quoted == said
    assert verdict is EffectVerdict.AS_PREVIEWED


# -- a fee the bank sets at capture --------------------------------------------------------------


@pytest.mark.parametrize(
    ("added", "captured", "verdict"),
    [
        ("12.50", "742.50 USD", EffectVerdict.WITHIN_BOUNDS),
        ("20.00", "750.00 USD", EffectVerdict.WITHIN_BOUNDS),
        ("35.00", "765.00 USD", EffectVerdict.DIFFERS),
    ],
    ids=["within", "at-the-bound", "outside"],
)
def test_a_capture_fee_makes_the_charge_predicted_within_its_bound_or_not(
    added: str,
    captured: str,
    verdict: EffectVerdict,
    tmp_path: Path,
    clock: ManualClock,
    urls: dict[str, str] | None,
) -> None:
    """Predicted, bounded by the amount plus the most the bank may add; the capture is
    what the bank really charged, on the authorization and the card's credit alike."""
    fee = CaptureFee(up_to=Decimal("20.00"), added=Decimal(added))
    with TripWorld.open(tmp_path / "fee", clock, capture_fee=fee, store_urls=urls) as world:
        plan = plan_of(world, "txn-fee")
        quoted = preview_of(quote(world, plan, "charge"))
        prepared = prepare(world, plan, "charge")
        assert prepared["cost"] == {"value": "730.00", "currency": USD}
        done = commit(world, plan, "charge", prepared)
        said, seen = preview_of(prepared), observed_of(done)
        assert (said.certainty, said.bound) == (
            Certainty.PREDICTED,
            Amount(value="750.00", currency=USD),
        )
        assert said.summary.endswith(
            "plus a fee the bank sets at capture (at most 750.00 USD in all)"
        )
        assert quoted == said
        assert changes(seen) == [(f"card {CARD}", "charge", "payee", None, "Acme Travel", captured)]
        assert done["effect"]["amount"] == captured
        assert effect_verdict(said, seen) is verdict
        left = Decimal("5000.00") - Decimal(captured.split()[0])
        assert world_balance(world) == Amount(value=f"{left:.2f}", currency=USD)
        assert world.effects("txn-fee")[PAYMENTS] == "whole"


def world_balance(world: TripWorld) -> Amount | None:
    with world.stores[PAYMENTS].transaction() as conn:
        return balance(conn, CARD)


@pytest.mark.parametrize(
    ("up_to", "added"),
    [(Decimal("-1"), Decimal("0")), (Decimal("1"), Decimal("NaN")), (Decimal("1"), 2)],
)
def test_a_fee_that_is_not_a_non_negative_decimal_is_refused(up_to: Any, added: Any) -> None:
    with pytest.raises(ValueError, match="non-negative Decimal"):
        CaptureFee(up_to=up_to, added=added)


def test_the_price_changed_scenario_captures_above_the_bound_and_the_default_trip_has_no_fee() -> (
    None
):
    fee = SCENARIOS["price-changed"].capture_fee
    assert fee is not None and fee.added > fee.up_to
    assert all(s.capture_fee is None for name, s in SCENARIOS.items() if name != "price-changed")
