"""`hatp serve --demo`: the scripted approver is told through the gateway's outbox, a
webhook the demo's receiver refuses (gone), then an e-mail its mail server keeps, which
the approver reads and approves with a vote signed by their own key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp.demo.serve import demo_services
from hatp.demo.trip import trip_plan
from hatp.model import TxnState
from hatp.store import OutboxState

BOUND = 60.0


def test_the_served_demos_approver_is_told_by_webhook_then_mail_and_approves_OUTBOX(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """[OUTBOX] [GW-CHANNEL-NEXT] [WEBHOOK-SIGN] a trip begun on the served demo commits:
    its approver's webhook was verified and refused 410, the e-mail kept under mail/, the
    vote signed by their key; the outbox holds the failed webhook and the delivered mails
    (the ask, then the outcome)."""
    caplog.set_level(logging.INFO, logger="hatp.demo.notices")

    async def go() -> tuple[TxnState, list[tuple[str, str, OutboxState]]]:
        async with demo_services(tmp_path / "demo") as services:
            assert services.coordinator is not None and services.gateway is not None
            gateway = services.gateway
            plan = trip_plan(
                "trip-serve-notices", decide_by=gateway.clock.now() + timedelta(minutes=15)
            )
            outcome = await asyncio.wait_for(services.coordinator.run(plan), BOUND)
            (ask_id,) = set(_ask_ids(outcome.record))
            outbox = gateway.outbox.outbox
            while True:  # the outcome's mail goes out after the decision
                rows = [(r.channel, r.event, r.state) for r in outbox.for_ask(ask_id)]
                if len(rows) == 3 and all(s is not OutboxState.PENDING for *_, s in rows):
                    return outcome.state, rows
                await asyncio.sleep(0.05)

    state, rows = asyncio.run(asyncio.wait_for(go(), BOUND))
    assert state is TxnState.COMMITTED
    assert ("webhook", "ask", OutboxState.FAILED) in rows
    assert ("email", "ask", OutboxState.DELIVERED) in rows
    assert ("email", "outcome", OutboxState.DELIVERED) in rows
    lines = [r.getMessage() for r in caplog.records if r.name == "hatp.demo.notices"]
    assert any(
        "webhook to human://acme.com/bob: ask" in line and "-> 410" in line for line in lines
    )
    assert any(line.startswith("e-mail to bob@acme.example") for line in lines)
    assert any("read the mail and approved" in line for line in lines)
    assert sorted(p.name for p in (tmp_path / "demo" / "mail").iterdir())[:2] == [
        "001.eml",
        "002.eml",
    ]


def _ask_ids(value: Any) -> Iterator[str]:
    """Every ``askId`` anywhere in ``value`` (a record: the approval names its ask)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "askId" and isinstance(item, str):
                yield item
            else:
                yield from _ask_ids(item)
    elif isinstance(value, list):
        for item in value:
            yield from _ask_ids(item)
