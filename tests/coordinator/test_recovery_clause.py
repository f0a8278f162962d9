"""The plan's recovery clause decides whether recovering lapsed holds needs the payer
[COORD-RECOVERY-OFFER]: only consent to off-session re-authorization, under its cap and
in its currency, lets a recovery go ahead without them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hatp.coordinator._escalation import payer_present
from hatp.demo import trip_plan
from hatp.model import parse_plan

SEAT_AND_ROOM = ["seat", "room"]  # 420.00 + 310.00 USD


def _plan(recovery: dict[str, Any] | None) -> Any:
    plan = trip_plan("trip-r", decide_by=datetime(2026, 12, 2, 10, tzinfo=UTC))
    plan["recovery"] = recovery
    return parse_plan(plan)


def _consent(value: str, currency: str = "USD") -> dict[str, Any]:
    return {
        "offSessionReauth": {
            "consented": True,
            "upTo": {"value": value, "currency": currency},
            "mandate": "pm_saved_1",
        }
    }


@pytest.mark.parametrize(
    ("recovery", "lapsed", "present"),
    [
        (None, SEAT_AND_ROOM, True),
        ({"offSessionReauth": {"consented": False}}, SEAT_AND_ROOM, True),
        (_consent("800.00"), SEAT_AND_ROOM, False),
        (_consent("730.00"), SEAT_AND_ROOM, False),
        (_consent("729.99"), SEAT_AND_ROOM, True),
        (_consent("500.00"), ["seat"], False),
        (_consent("800.00", "EUR"), ["seat"], True),
    ],
    ids=["no-clause", "no-consent", "under-cap", "at-cap", "over-cap", "one-hold", "currency"],
)
def test_the_payer_must_be_present_unless_consent_covers_the_recovery(
    recovery: dict[str, Any] | None, lapsed: list[str], present: bool
) -> None:
    """[COORD-RECOVERY-OFFER]"""
    assert payer_present(_plan(recovery), lapsed) is present
