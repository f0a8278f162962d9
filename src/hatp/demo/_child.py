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
refused (``PRECONDITION_CHANGED``) and the transaction unwinds;
``HATP_CHILD_FAULTS=hotel.abort=store-full,...`` puts participant-side faults
in front of the named participants (:mod:`hatp.demo._faulty`: a store full or
unreachable, a participant silent, a reply lost), and
``HATP_CHILD_MAX_ATTEMPTS=N`` makes the child give up on a silent participant
after N sends (leaving the transaction open for recovery). (A sold-out hotel
needs no switch: stock the world with ``rooms=0`` before the child runs.)

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
from typing import Any, TypeVar

from hatp.clock import SystemClock
from hatp.coordinator import Coordinator, Outcome
from hatp.demo._faulty import FaultyParticipant, parse_faults
from hatp.demo.trip import CARD, PARTICIPANT_IDS, PAYMENTS, TripWorld
from hatp.gateway import HumanGateway
from hatp.participant import Participant, Relay
from hatp.store import DecisionLog, open_store

T = TypeVar("T")

LOG_URL_ENV = "HATP_LOG_URL"
DECISION_ENV = "HATP_CHILD_DECISION"
EDIT_CARD_ENV = "HATP_CHILD_EDIT_CARD"
FAULTS_ENV = "HATP_CHILD_FAULTS"
ATTEMPTS_ENV = "HATP_CHILD_MAX_ATTEMPTS"
#: Each trip participant's service name (``hotel``), as a fault spec names it.
SERVICES = {pid.removeprefix("mcp://").split(".")[0]: pid for pid in PARTICIPANT_IDS}
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
    decision = os.environ.get(DECISION_ENV) or "approve"
    if decision not in ("approve", "reject"):
        raise SystemExit(f"{DECISION_ENV} is approve or reject, not {decision!r}")
    attempts = os.environ.get(ATTEMPTS_ENV) or "20"
    if not attempts.isdigit() or int(attempts) < 1:
        raise SystemExit(f"{ATTEMPTS_ENV} is a whole number above 0, not {attempts!r}")
    return open_coordinator(
        folder,
        clock,
        log_url=os.environ.get(LOG_URL_ENV) or str(folder / "coordinator.db"),
        decision=decision,
        edit_card=os.environ.get(EDIT_CARD_ENV) or "",
        faults=os.environ.get(FAULTS_ENV) or "",
        lease_seconds=CHILD_LEASE_SECONDS,
        poll_seconds=1.0,
        max_attempts=int(attempts),
    )


def open_coordinator(
    folder: Path,
    clock: SystemClock,
    *,
    log_url: str,
    decision: str,
    edit_card: str = "",
    faults: str = "",
    **options: Any,
) -> tuple[Coordinator, DecisionLog, HumanGateway]:
    """A coordinator on the trip world in ``folder`` and the decision log at ``log_url``,
    acme's people answering ``decision``; the card edited to ``edit_card`` before the
    first capture (if given) and the participant ``faults`` (a spec, :mod:`hatp.demo._faulty`)
    in front; ``options`` go to :meth:`TripWorld.coordinator`.

    Raises:
        SystemExit: the fault spec is malformed.
        StoreUnavailable: a store cannot be opened.
    """
    world = TripWorld.open(folder, clock)
    log = DecisionLog(open_store(log_url))
    gateway = world.gateway(world.scripted_people(decision))
    links: dict[str, Participant] = {}
    if edit_card:
        links[PAYMENTS] = _CardEditedBeforeCapture(world, edit_card)
    links.update(faulty_links(world, faults, links))
    return world.coordinator(log, gateway, links=links, **options), log, gateway


def faulty_links(
    world: TripWorld, spec: str, links: dict[str, Participant]
) -> dict[str, Participant]:
    """The links that fail as the fault ``spec`` says, each in front of ``links``' own
    link to its participant (else the world's participant); none for an empty spec.

    Raises:
        SystemExit: the spec is malformed (the message says how).
    """
    try:
        faults = parse_faults(spec, tuple(SERVICES))
    except ValueError as bad:
        raise SystemExit(f"{FAULTS_ENV}: {bad}") from None
    out: dict[str, Participant] = {}
    for service, pid in SERVICES.items():
        mine = [f for f in faults if f.service == service]
        if mine:
            inner = links.get(pid) or world.participants[pid]
            out[pid] = FaultyParticipant(inner, world.stores[pid], mine)
    return out


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
