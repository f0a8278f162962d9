"""Quoting a branch: what a prepare would give now, with nothing placed [PART-QUOTE]."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from hatp.clock import ManualClock
from hatp.errors import PlanInvalid, SignatureInvalid, StaleFence
from hatp.evidence import digest, verify
from hatp.model import BranchState, Quote, Tier
from hatp.participant import (
    Committed,
    Operation,
    ParticipantServer,
    Prepared,
    Quoted,
    Relay,
    Work,
)
from hatp.store import Store
from participant.ops import AIRLINE, HoldSeat, branch, keyring, plan, run, seat, seen, server

DIGEST = digest(plan().to_wire())
T = TypeVar("T")


class LongLease(HoldSeat):
    """A hold whose longest lease would pass its horizon."""

    max_lease_seconds = 3600.0
    max_hold_seconds = 900.0


class Counting(Relay):
    def __init__(self, inner: ParticipantServer) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        self.calls.append(method)
        return await call()


def test_a_hold_quote_is_signed_and_states_cost_validity_lease_and_horizon_PART_QUOTE(
    airline: ParticipantServer,
) -> None:
    quote = run(airline.quote(plan(), "seat", 3))
    verify(quote, keyring())
    assert quote["signature"]["kid"] == "mcp://airline.example#key-1"
    assert quote == {
        "hatpVersion": "0.1",
        "kind": "quote",
        "txnId": "txn-1",
        "branchId": "seat",
        "participant": AIRLINE,
        "planDigest": DIGEST,
        "fence": 3,
        "tier": "hold",
        "cost": {"value": "420.00", "currency": "USD"},
        "validUntil": "2026-12-02T09:05:00.000Z",  # HoldSeat quotes for 300 s
        "leaseSeconds": 600.0,
        "holdSeconds": 900.0,
        "preview": {  # HoldSeat gives none: certainty none, never a made-up one
            "certainty": "none",
            "summary": "hold_seat gives no preview of what it will change",
            "changes": [],
            "bound": None,
        },
        "time": "2026-12-02T09:00:00.000Z",
        "signature": quote["signature"],
    }
    parsed = Quote.model_validate(json.loads(json.dumps(quote)))  # 600.0 arrives as 600
    assert (parsed.tier, parsed.lease_seconds, parsed.hold_seconds) == (Tier.HOLD, 600, 900)
    with pytest.raises(SignatureInvalid):
        verify({**quote, "holdSeconds": 3600}, keyring())


def test_a_quote_places_nothing_and_changes_no_state_but_the_fence_PART_QUOTE_PART_FENCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    run(airline.quote(plan(), "seat", 4))
    assert seat(ledgers) == ("free", None)
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.fence, status.receipt, status.flags) == (
        BranchState.UNKNOWN,
        4,
        None,
        [],
    )
    with pytest.raises(StaleFence) as caught:
        run(airline.prepare(plan(), "seat", 3))
    assert caught.value.data["current"] == 4
    assert run(airline.prepare(plan(), "seat", 4))["vote"] == "yes"


def test_whatever_the_operation_writes_while_quoting_is_rolled_back_PART_QUOTE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    careless = plan("txn-1", branch("seat", args={"seat": "12A", "write_in_quote": True}))
    assert run(airline.quote(careless, "seat", 1))["cost"] == {"value": "420.00", "currency": "USD"}
    assert seat(ledgers) == ("free", None)
    assert run(airline.prepare(plan("txn-2"), "seat", 1))["vote"] == "yes"


def test_a_quote_with_a_stale_fence_is_refused_PART_FENCE(airline: ParticipantServer) -> None:
    run(airline.prepare(plan(), "seat", 2))
    with pytest.raises(StaleFence) as caught:
        run(airline.quote(plan(), "seat", 1))
    assert (caught.value.data["requested"], caught.value.data["current"]) == ("quote", 2)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"operation": "teleport"}, "UNKNOWN_OPERATION"),
        ({"tier": "final"}, "TIER_MISMATCH"),
        ({"participant": "mcp://other.example"}, "UNKNOWN_PARTICIPANT"),
    ],
)
def test_a_quote_of_a_branch_the_participant_cannot_prepare_is_plan_invalid_PART_PLAN(
    airline: ParticipantServer, overrides: dict[str, str], reason: str
) -> None:
    with pytest.raises(PlanInvalid) as caught:
        run(airline.quote(plan("txn-1", branch("seat", **overrides)), "seat", 5))
    assert caught.value.data["reason"] == reason
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.fence) == (BranchState.UNKNOWN, 0)


def test_a_quote_of_a_branch_not_in_the_plan_is_plan_invalid(airline: ParticipantServer) -> None:
    with pytest.raises(PlanInvalid) as caught:
        run(airline.quote(plan(), "hotel", 1))
    assert caught.value.data["reason"] == "SHAPE"


def test_dry_runs_quote_no_lease_and_an_operation_may_quote_nothing_PART_QUOTE(
    airline: ParticipantServer,
) -> None:
    final = run(airline.quote(plan(), "charge", 1))
    assert (final["tier"], final["cost"], final["validUntil"]) == (
        "final",
        {"value": "420.00", "currency": "USD"},
        None,
    )
    assert (final["leaseSeconds"], final["holdSeconds"]) == (None, None)
    silent = run(airline.quote(plan(), "event", 1))  # AddEvent does not override quote
    assert (silent["tier"], silent["cost"], silent["validUntil"]) == ("compensate", None, None)
    assert (silent["leaseSeconds"], silent["holdSeconds"]) == (None, None)
    verify(silent, keyring())


def test_a_quote_never_votes_a_refusal_quotes_no_cost_PART_QUOTE(
    airline: ParticipantServer,
) -> None:
    quote = run(airline.quote(plan("txn-1", branch("seat", args={"seat": "99Z"})), "seat", 1))
    assert (quote["cost"], quote["validUntil"], quote["holdSeconds"]) == (None, None, 900.0)
    assert run(airline.status("txn-1", "seat")).state is BranchState.UNKNOWN


def test_a_cost_above_the_branch_amount_is_quoted_as_it_is_PART_QUOTE_PART_COST(
    airline: ParticipantServer,
) -> None:
    cheap = plan("txn-1", branch("seat", amount={"value": "100.00", "currency": "USD"}))
    quote = run(airline.quote(cheap, "seat", 1))
    assert quote["cost"] == {"value": "420.00", "currency": "USD"}
    assert run(airline.prepare(cheap, "seat", 1))["reason"].startswith("COST_UNDERSTATED")


def test_the_quoted_lease_never_passes_the_horizon_PART_QUOTE(
    ledgers: Store, clock: ManualClock
) -> None:
    long = server(ledgers, clock, LongLease())
    quote = run(long.quote(plan("txn-1", branch("seat")), "seat", 1))
    assert (quote["leaseSeconds"], quote["holdSeconds"]) == (900.0, 900.0)
    voted = run(long.prepare(plan("txn-1", branch("seat")), "seat", 1))
    assert voted["leaseExpiresAt"] == voted["holdHorizon"] == "2026-12-02T09:15:00.000Z"


def test_a_quote_after_prepare_or_commit_is_answered_and_changes_nothing_PART_QUOTE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    voted = run(airline.prepare(plan(), "seat", 1))
    clock.advance(60)
    quote = run(airline.quote(plan(), "seat", 1))
    assert (quote["time"], quote["validUntil"]) == (
        "2026-12-02T09:01:00.000Z",
        "2026-12-02T09:06:00.000Z",
    )
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.receipt) == (BranchState.PREPARED, voted)
    assert seat(ledgers) == ("held", "txn-1/seat")
    run(airline.commit("txn-1", "seat", 1, DIGEST, seen(voted)))
    assert run(airline.quote(plan(), "seat", 2))["fence"] == 2
    after = run(airline.status("txn-1", "seat"))
    assert (after.state, after.fence, after.flags) == (BranchState.COMMITTED, 2, [])
    assert seat(ledgers) == ("ticketed", "txn-1/seat")


def test_a_quote_is_not_stored_a_repeat_is_a_fresh_quote_PART_QUOTE(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    first = run(airline.quote(plan(), "seat", 1))
    clock.advance(10)
    again = run(airline.quote(plan(), "seat", 1))
    assert again["time"] == "2026-12-02T09:00:10.000Z" != first["time"]
    assert again["validUntil"] == "2026-12-02T09:05:10.000Z"


def test_quoted_validity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="valid_seconds"):
        Quoted(valid_seconds=0)
    assert Quoted() == Quoted(cost=None, valid_seconds=None)


def test_the_default_operation_quote_says_nothing(ledgers: Store, clock: ManualClock) -> None:
    class Bare(Operation):
        name = "bare"
        tier = Tier.FINAL

        def prepare(self, work: Work) -> Prepared:
            return Prepared()

        def commit(self, work: Work) -> Committed:
            return Committed()

        def abort(self, work: Work) -> None:
            pass

    bare = server(ledgers, clock, Bare())
    quote = run(bare.quote(plan("txn-1", branch("charge", operation="bare")), "charge", 1))
    assert (quote["cost"], quote["validUntil"], quote["tier"]) == (None, None, "final")


def test_a_relay_forwards_quote_and_replace(airline: ParticipantServer, clock: ManualClock) -> None:
    relay = Counting(airline)
    assert run(relay.quote(plan(), "seat", 1))["kind"] == "quote"
    run(relay.prepare(plan(), "seat", 1))
    clock.advance(600)
    assert run(relay.replace(plan(), "seat", 1, 2))["attempt"] == 2
    assert relay.calls == ["quote", "prepare", "replace"]
