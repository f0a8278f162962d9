"""The SDK's own types refuse what could not work, when they are built."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.model import Tier
from hatp.participant import (
    Committed,
    Operation,
    Participant,
    ParticipantServer,
    Prepared,
    Refuse,
    Work,
)
from hatp.store import Store
from participant.ops import HoldSeat, server


def test_prepared_refuses_a_non_positive_lease() -> None:
    with pytest.raises(ValueError, match="positive"):
        Prepared(lease_seconds=0)


def test_prepared_and_committed_refuse_data_that_is_not_json() -> None:
    with pytest.raises(ValueError, match=r"Prepared\.data must be JSON"):
        Prepared(data={"when": object()})
    with pytest.raises(ValueError, match=r"Committed\.effect must be JSON"):
        Committed(effect={"x": float("nan")})


def test_refuse_carries_reason_and_message() -> None:
    refusal = Refuse("SOLD_OUT", "seat 12A is taken")
    assert (refusal.reason, refusal.message, str(refusal)) == (
        "SOLD_OUT",
        "seat 12A is taken",
        "SOLD_OUT: seat 12A is taken",
    )


def test_two_operations_with_one_name_are_refused(ledgers: Store, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="two operations"):
        server(ledgers, clock, HoldSeat(), HoldSeat())


class _NoUndo(Operation):
    name = "no_undo"
    tier = Tier.COMPENSATE

    def prepare(self, work: Work) -> Prepared:
        return Prepared()

    def commit(self, work: Work) -> Committed:
        return Committed()

    def abort(self, work: Work) -> None:
        pass


def test_compensate_tier_without_compensate_is_refused(ledgers: Store, clock: ManualClock) -> None:
    with pytest.raises(TypeError, match="must override compensate"):
        server(ledgers, clock, _NoUndo())


def test_server_is_a_participant(airline: ParticipantServer) -> None:
    assert isinstance(airline, Participant)
    assert airline.participant_id == "mcp://airline.example"
