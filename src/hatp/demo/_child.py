"""A coordinator process for crash tests and the demo's ``crash`` scenario.

``python -m hatp.demo._child FOLDER PLAN.json`` opens the trip world in
FOLDER, the decision log in ``FOLDER/coordinator.db`` (or the URL in
``HATP_LOG_URL``), and runs the plan through acme's Human Gateway, whose
people approve as scripted. With
``HATP_CRASH_AT`` set it kills itself at that fault point (``HATP_PAUSE_AT``:
freezes itself there); a parent process then starts a new coordinator on the
same folder and recovers.

``python -m hatp.demo._child --recover FOLDER`` is such a new coordinator in
a process of its own: it waits (at most :data:`RECOVER_WAIT_SECONDS`) until an
open transaction's lease has ended, then recovers every claimable one. Two of
them started together race for the same transaction.

Test switches: ``HATP_CHILD_DECISION=reject`` makes the finance approver
reject; ``HATP_CHILD_EDIT_CARD=AMOUNT`` has the card's bank set the card's
available credit to AMOUNT just before the first capture, so the final step is
refused (``PRECONDITION_CHANGED``) and the transaction unwinds. (A sold-out
hotel needs no switch: stock the world with ``rooms=0`` before the child runs.)

Prints one JSON line per outcome: ``{"txnId", "state", "fenced", "reason"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from hatp.clock import SystemClock
from hatp.coordinator import Coordinator, Outcome
from hatp.demo.trip import CARD, PAYMENTS, TripWorld
from hatp.gateway import HumanGateway
from hatp.participant import Participant, Relay
from hatp.store import DecisionLog, open_store

T = TypeVar("T")

LOG_URL_ENV = "HATP_LOG_URL"
DECISION_ENV = "HATP_CHILD_DECISION"
EDIT_CARD_ENV = "HATP_CHILD_EDIT_CARD"
#: The child's ownership lease: short, so a successor need not wait long after a kill.
CHILD_LEASE_SECONDS = 2.0
#: How long ``--recover`` waits for a lease to end before giving up.
RECOVER_WAIT_SECONDS = 10.0


class _CardEditedBeforeCapture(Relay):
    """Payments, except that the bank edits the card just before the first capture."""

    def __init__(self, world: TripWorld, available: str) -> None:
        super().__init__(world.participants[PAYMENTS])
        self._world, self._available = world, available

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "commit" and self._available:
            self._world.edit_card(CARD, self._available)
            self._available = ""
        return await call()


def _coordinator(folder: Path, clock: SystemClock) -> tuple[Coordinator, DecisionLog, HumanGateway]:
    world = TripWorld.open(folder, clock)
    log = DecisionLog(open_store(os.environ.get(LOG_URL_ENV) or folder / "coordinator.db"))
    decision = os.environ.get(DECISION_ENV) or "approve"
    if decision not in ("approve", "reject"):
        raise SystemExit(f"{DECISION_ENV} is approve or reject, not {decision!r}")
    gateway = world.gateway(world.scripted_people(decision))
    links: dict[str, Participant] = {}
    if available := os.environ.get(EDIT_CARD_ENV):
        links[PAYMENTS] = _CardEditedBeforeCapture(world, available)
    coordinator = world.coordinator(
        log, gateway, links=links, lease_seconds=CHILD_LEASE_SECONDS, poll_seconds=1.0
    )
    return coordinator, log, gateway


async def _recover(coordinator: Coordinator, log: DecisionLog, clock: SystemClock) -> list[Outcome]:
    give_up = clock.now() + timedelta(seconds=RECOVER_WAIT_SECONDS)
    # Stop waiting once nothing is open: a rival recovered it first.
    while log.open_transactions() and not log.claimable(clock.now()) and clock.now() < give_up:
        await asyncio.sleep(0.02)
    return await coordinator.recover()


async def _main(args: list[str]) -> int:
    clock = SystemClock()
    recovering = args[0] == "--recover"
    coordinator, log, gateway = _coordinator(Path(args[1 if recovering else 0]), clock)
    gateway.start()
    try:
        if recovering:
            outcomes = await _recover(coordinator, log, clock)
        else:
            plan = json.loads(Path(args[1]).read_text(encoding="utf-8"))
            outcomes = [await coordinator.run(plan)]
    finally:
        await gateway.stop()
    for outcome in outcomes:
        line = {"txnId": outcome.txn_id, "state": outcome.state.value}
        print(json.dumps({**line, "fenced": outcome.fenced, "reason": outcome.reason}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
