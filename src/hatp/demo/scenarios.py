"""The business-trip scenarios behind ``hatp demo``: one happy path and the ways it can go wrong.

Each scenario runs the real coordinator against the four trip participants
(their own keys, their own ledgers in their own SQLite files) and a gateway
whose finance approver is either a person at the terminal or a script. In the
``undo`` scenario the trip commits and is then cancelled: the coordinator builds
the undo plan from what each commit receipt offered, it is shown (each step, its
fee, the refund, what cannot be undone), the finance approver approves it, and it
runs as a transaction of its own whose record links to the trip's.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from hatp._faults import CRASH_ENV
from hatp.clock import Clock, ManualClock, SystemClock
from hatp.coordinator import Coordinator, Outcome
from hatp.demo._child import CHILD_LEASE_SECONDS
from hatp.demo._ledger import money
from hatp.demo._lossy import LossyLink, LostFor
from hatp.demo._time import simulate
from hatp.demo.trip import PAYMENTS, CaptureFee, TripWorld, trip_plan
from hatp.evidence import Keyring, verify_undo
from hatp.gateway import Channel, MemoryChannel
from hatp.model import Amount, OutcomeReceipt, Plan, TxnState, UndoOffer, VerificationReport
from hatp.participant import Participant
from hatp.store import DecisionLog, open_store

__all__ = ["APPROVER", "SCENARIOS", "DemoRun", "Scenario", "UndoRun", "run_scenario", "undo_lines"]

#: Who the finance ask reaches first (bob: available, and his limit covers the trip).
APPROVER = "human://acme.com/bob"


@dataclass(frozen=True)
class Scenario:
    """One way the trip can go, and what the scripted approver does in it."""

    name: str
    summary: str
    decision: str = "approve"
    rooms: int = 3
    approver_silent: bool = False
    decide_in_seconds: float = 900.0
    lose_commit_answers: int = 0
    crash_at: str | None = None
    person_may_answer: bool = True
    #: The plan's mode (``auto``: the clock decides).
    mode: str = "parallel"
    #: Every answer to the card capture is lost for this long after it is first sent.
    capture_silent_seconds: float = 0.0
    #: The plan's ``escalation.leadSeconds``, if it has an escalation clause.
    lead_seconds: int | None = None
    #: Run on a simulated clock: half an hour of protocol time in a second.
    simulated: bool = False
    #: The plan's preview policy: the least each tier's preview must say (not parallel).
    previews: Mapping[str, str] | None = None
    #: A fee the card's bank adds at capture (payments then previews the charge as predicted).
    capture_fee: CaptureFee | None = None
    #: Once the trip commits, it is cancelled: its undo plan is shown, approved and run.
    undo: bool = False


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "commit",
            "everyone says yes: each step quoted first, so finance approves every step's "
            "price and signed preview; then seat, room, calendar and card all go through",
            mode="approval-first",
        ),
        Scenario(
            "reject",
            "the finance approver rejects: every hold is released, nothing is charged",
            decision="reject",
        ),
        Scenario("sold-out", "the hotel is sold out and votes no: the whole trip aborts", rooms=0),
        Scenario(
            "deadline",
            "nobody approves before decideBy (3 s here): the trip aborts at the deadline",
            approver_silent=True,
            decide_in_seconds=3.0,
            person_may_answer=False,
        ),
        Scenario(
            "in-doubt",
            "the card capture's answer is lost twice: in doubt, retried, then resolved",
            lose_commit_answers=2,
        ),
        Scenario(
            "crash",
            "the coordinator is killed mid-commit; a new one finishes from the log",
            crash_at="commit.after:charge",
            person_may_answer=False,
        ),
        Scenario(
            "slow-approver",
            "bob may take his whole 15-minute SLA and carol 15 more: 30 minutes, the holds' "
            "whole horizon, so the clock picks approval-first: prices approved, then held",
            mode="auto",
            decide_in_seconds=2 * 3600.0,
        ),
        Scenario(
            "holds-first",
            "the seat and the room are held first; finance approves the plan together with "
            "the holds' end times and a deadline that fits inside them",
            mode="holds-first",
        ),
        Scenario(
            "late-answer",
            "the card is captured but its answer is lost for 35 minutes (simulated clock): "
            "alice is told 10 minutes before the holds end, they lapse, recovery is offered",
            capture_silent_seconds=35 * 60,
            lead_seconds=10 * 60,
            simulated=True,
            person_may_answer=False,
        ),
        Scenario(
            "price-changed",
            "holds first, the plan asking a bounded preview of the charge: finance approves "
            "each step's signed preview with the plan, the charge's predicted as 730.00 USD, "
            "at most 750.00 USD; the bank adds a fee at "
            "capture and takes 765.00 USD: the trip commits, and the record flags the charge "
            "as differing from what was approved",
            mode="holds-first",
            previews={"final": "bounded"},
            capture_fee=CaptureFee(up_to=Decimal("20.00"), added=Decimal("35.00")),
        ),
        Scenario(
            "undo",
            "the trip commits, then alice's trip is cancelled: the undo plan shows each "
            "step's fee, the refund and what cannot be undone; bob approves it, and seat, "
            "room, event and charge are taken back in a transaction of its own, its record "
            "linked to the trip's",
            person_may_answer=False,
            undo=True,
        ),
    )
}


@dataclass
class UndoRun:
    """The trip taken back: the undo plan and what people were shown of it before they
    approved, its outcome, and the offline check of its record against the trip's."""

    plan: Plan
    #: The plan as shown before anyone approved it (:func:`undo_lines`).
    shown: list[str]
    outcome: Outcome
    #: :func:`~hatp.evidence.verify_undo` of the undo record against the trip's.
    link: VerificationReport

    @property
    def record(self) -> dict[str, Any]:
        return self.outcome.record


@dataclass
class DemoRun:
    """What one scenario did: the outcome, its record, and the world it left behind."""

    scenario: Scenario
    folder: Path
    world: TripWorld
    outcome: Outcome
    notes: list[str] = field(default_factory=list)
    #: The ``undo`` scenario: the trip's undo (``None`` if the trip did not commit).
    undo: UndoRun | None = None

    @property
    def record(self) -> dict[str, Any]:
        return self.outcome.record


async def run_scenario(
    scenario: Scenario,
    folder: Path,
    *,
    channel: Callable[[TripWorld], Channel] | None = None,
    clock: Clock | None = None,
) -> DemoRun:
    """Run ``scenario`` with its world and log in ``folder``; return what happened.

    The finance ask goes through acme's Human Gateway to people on the
    channel ``channel(world)`` makes (a terminal, say); by default they
    follow the scenario's script.
    """
    if clock is None:
        clock = ManualClock(SystemClock().now()) if scenario.simulated else SystemClock()
    folder.mkdir(parents=True, exist_ok=True)
    world = TripWorld.open(folder, clock, rooms=scenario.rooms, capture_fee=scenario.capture_fee)
    log = DecisionLog(open_store(folder / "coordinator.db"))
    txn_id = f"trip-{clock.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    decide_by = clock.now() + timedelta(seconds=scenario.decide_in_seconds)
    plan = trip_plan(txn_id, decide_by=decide_by, mode=scenario.mode, previews=scenario.previews)
    if scenario.lead_seconds is not None:
        plan["escalation"] = {"address": None, "leadSeconds": scenario.lead_seconds}
    links: dict[str, Participant] = {}
    notes: list[str] = []
    options: dict[str, Any] = {"retry_delay": 0.2, "poll_seconds": 1.0}
    if scenario.lose_commit_answers:
        links[PAYMENTS] = LossyLink(
            world.participants[PAYMENTS], {"commit": scenario.lose_commit_answers}
        )
    if scenario.capture_silent_seconds:
        links[PAYMENTS] = LostFor(
            world.participants[PAYMENTS], clock, scenario.capture_silent_seconds
        )
        # Keep asking through the silence, a retry every 30 s at most.
        options.update(retry_cap=30.0, max_attempts=10_000)
    people: Channel
    if channel is None or not scenario.person_may_answer:
        decision = "never" if scenario.approver_silent else scenario.decision
        people = world.scripted_people(decision)
    else:
        people = channel(world)
    gateway = world.gateway(people)
    gateway.start()
    coordinator = world.coordinator(log, gateway, links=links, **options)
    undo = None
    try:
        running = _run(scenario, folder, world, coordinator, plan, notes)
        if isinstance(clock, ManualClock) and scenario.simulated:
            outcome = await simulate(clock, running)
            notes.append("time was simulated: the clock moved 30 s whenever all was waiting")
        else:
            outcome = await running
        if scenario.undo and outcome.state is TxnState.COMMITTED:
            undo = await _take_back(world.keyring, coordinator, outcome)
            notes.append(f"{outcome.txn_id} was then cancelled by {undo.outcome.txn_id}")
    finally:
        await gateway.stop()
        if isinstance(people, MemoryChannel):
            await people.close()
    if scenario.lose_commit_answers:
        notes.append(f"{scenario.lose_commit_answers} answers from {PAYMENTS} were lost")
    if isinstance(silent := links.get(PAYMENTS), LostFor):
        notes.append(f"{silent.lost} answers from {PAYMENTS} were lost")
    return DemoRun(scenario, folder, world, outcome, notes, undo)


async def _take_back(keyring: Keyring, coordinator: Coordinator, trip: Outcome) -> UndoRun:
    """Cancel the committed trip: build its undo plan, say what it does, and run it (the
    finance approver is asked, as for any plan); check its record against the trip's."""
    plan = await coordinator.plan_undo(trip.txn_id)
    shown = undo_lines(plan, trip.record)
    outcome = await coordinator.run(plan)
    link = verify_undo(outcome.record, trip.record, keyring, others=())
    return UndoRun(plan, shown, outcome, link)


def undo_lines(plan: Plan, original: Mapping[str, Any]) -> list[str]:
    """What an undo plan does, in lines for a person: each step it takes back, at what
    fee or with what refund, until when it could; what it cannot take back, and why;
    and the money in all. ``original`` is the record of the transaction it undoes."""
    offers = _offers(original)
    lines = [f"undo {plan.txn_id} takes back {plan.undoes.txn_id if plan.undoes else '?'}:"]
    fees, back, charged = Decimal(0), Decimal(0), None
    for branch in plan.branches:
        step = branch.undoes.branch_id if branch.undoes else branch.branch_id
        offer = offers.get(step)
        where = branch.participant.removeprefix("mcp://")
        until = "" if offer is None or offer.undo_by is None else f", offered until {offer.undo_by}"
        refund = branch.args.get("refund")
        if isinstance(refund, dict):
            amount = Amount.model_validate(refund)
            back += amount.decimal
            charged = None if offer is None else offer.refund
            of = "" if charged is None else f" of the {charged} charged"
            said = f"refunds {amount}{of}"
        elif branch.amount is not None:
            fees += branch.amount.decimal
            said = f"fee {branch.amount}, kept by {where}"
        else:
            said = "no fee"
        lines.append(f"  {step:<9} {branch.operation} at {where}: {said}{until}")
    kept = [] if plan.undoes is None else plan.undoes.kept
    if kept:
        lines.append("  cannot be undone:")
        lines += [f"    {k.branch_id}: {k.reason}" for k in kept]
    else:
        lines.append("  cannot be undone: nothing; every step of the trip can be taken back")
    if charged is not None:
        currency = charged.currency
        lines.append(
            f"  in all: {money(back)} {currency} of the {charged} comes back to the card; "
            f"{money(fees)} {currency} in fees is not refunded"
        )
    return lines


def _offers(record: Mapping[str, Any]) -> dict[str, UndoOffer]:
    """Each committed step's signed undo offer in ``record``, by branch id."""
    offers: dict[str, UndoOffer] = {}
    for event in record.get("events") or ():
        if event.get("type") != "txn.committed":
            continue
        receipt = OutcomeReceipt.model_validate(event["body"]["receipt"])
        if receipt.undo is not None:
            offers[receipt.branch_id] = receipt.undo
    return offers


async def _run(
    scenario: Scenario,
    folder: Path,
    world: TripWorld,
    coordinator: Coordinator,
    plan: dict[str, Any],
    notes: list[str],
) -> Outcome:
    clock = world.clock
    txn_id = plan["txnId"]
    if scenario.crash_at:
        code = _run_child(folder, plan, scenario.crash_at)
        notes.append(
            f"coordinator process killed at {scenario.crash_at!r} (exit {code}); a new one "
            f"takes over from the log once the dead one's {CHILD_LEASE_SECONDS:g} s lease ends"
        )
        await clock.sleep_until(clock.now() + timedelta(seconds=CHILD_LEASE_SECONDS))
        outcomes = await coordinator.recover()
        outcome = next(o for o in outcomes if o.txn_id == txn_id)
    else:
        outcome = await coordinator.run(plan)
    return outcome


def _run_child(folder: Path, plan: dict[str, Any], crash_at: str) -> int:
    """Run the coordinator in a child process that kills itself at ``crash_at``."""
    plan_file = folder / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    env = {**os.environ, CRASH_ENV: crash_at}
    done = subprocess.run(
        [sys.executable, "-m", "hatp.demo._child", str(folder), str(plan_file)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode >= 0:
        raise RuntimeError(
            f"the coordinator child was meant to be killed at {crash_at!r} but exited "
            f"{done.returncode}: {done.stderr.strip()[-500:]}"
        )
    return done.returncode
