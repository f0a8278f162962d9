"""Planted transactions: each file in ``planted_txns/`` is built to break one rule.

Each runs for real: the trip world's participants, acme's Human Gateway and
directory, a coordinator and its decision log, people who approve whatever
they are asked. What a case must leave behind is its ``evidence``: lines
that must appear among what the run produced (refusals, the outcome and its
reason, every problem the record notes, every routing result). With every
check on, every case leaves its evidence. With one check switched off (a
test-only switch), exactly the cases whose ``checks`` name it lose theirs,
and every other case still leaves all of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import ForgeApproval, Tap, Votes
from hatp._checks import unsafe_switched_off
from hatp.clock import SystemClock, format_time
from hatp.coordinator import Gateway
from hatp.demo import TripWorld, trip_plan
from hatp.directory import Directory, sign_card
from hatp.errors import HatpError
from hatp.evidence import Keyring, SigningKey, digest
from hatp.gateway import HumanGateway, Notice, Responder, route, sign_vote
from hatp.model import parse_plan
from hatp.store import DecisionLog, open_store

FOLDER = Path(__file__).parent / "planted_txns"
DIRECTORY = "https://directory.acme.com"
#: Seconds each planted plan gives its people: a case that waits for the deadline ends then.
DECIDE_IN = 3.0


@dataclass(frozen=True)
class Case:
    """One planted transaction, read from its file."""

    name: str
    doc: dict[str, Any]
    checks: frozenset[str] = field(default_factory=frozenset)
    evidence: tuple[str, ...] = ()


def _cases() -> list[Case]:
    cases = []
    for path in sorted(FOLDER.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        cases.append(Case(path.stem, doc, frozenset(doc["checks"]), tuple(doc["evidence"])))
    return cases


CASES = _cases()
CHECKS = sorted({check for case in CASES for check in case.checks})


def _plan(case: Case, world: TripWorld, n: int) -> dict[str, Any]:
    doc = case.doc
    plan = trip_plan(
        f"planted-{case.name}-{n}",
        decide_by=world.clock.now() + timedelta(seconds=DECIDE_IN),
        traveller=doc.get("traveller", "human://acme.com/alice"),
        seat=doc.get("seat", "14C"),
    )
    for edit in doc.get("planEdits", []):
        *parents, last = edit["path"].strip("/").split("/")
        target: Any = plan
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = copy.deepcopy(edit["value"])
    return plan


def _directory(case: Case, world: TripWorld) -> tuple[Directory, dict[str, SigningKey]]:
    """Acme's cards with the case's edits, re-signed by acme's directory; plus a forged one."""
    people = dict(world.people)
    key = SigningKey.load(world.folder / "keys" / "directory.jwk")
    cards = []
    for signed in world.directory.to_json()["cards"]:
        body = {k: v for k, v in signed.items() if k != "signature"}
        edits = case.doc.get("cardEdits", {})
        body.update(edits.get("*", {}))
        body.update(edits.get(body["id"], {}))
        cards.append(sign_card(body, key))
    if name := case.doc.get("forgedCard"):
        person = f"human://acme.com/{name}"
        people[person] = SigningKey.from_seed(bytes([66]) * 32, f"{person}#key-1")
        evil = SigningKey.from_seed(bytes([99]) * 32, "evil-directory-1")
        forged = {**cards[0], "id": person, "displayName": name.title(), "delegates": []}
        forged.pop("signature")
        forged["keys"] = [people[person].public.to_jwk()]
        forged["authority"] = [
            {"action": "approve.spend", "maxAmount": {"value": "1000000", "currency": "USD"}}
        ]
        cards.append(sign_card(forged, evil))
    trusting = Keyring(
        [
            (key.public, DIRECTORY),
            (SigningKey.from_seed(bytes([99]) * 32, "evil-directory-1").public, "https://evil"),
        ],
        trusted_issuers=[DIRECTORY],
    )
    return Directory(DIRECTORY, cards, trusting), people


async def _run(case: Case, folder: Path) -> list[str]:
    """Run the case; return every line of evidence it left."""
    lines: list[str] = []
    world = TripWorld.open(folder, SystemClock())
    try:
        try:
            directory, people = _directory(case, world)
        except HatpError as exc:
            return [f"directory refused: {exc.code} {exc.data.get('reason', '')}".strip()]
        plan = _plan(case, world, len(list(folder.iterdir())))
        lines += _gateway_refusals(plan, directory, world)
        votes = Votes()
        channel = _Approvers(people, votes, world)
        human = HumanGateway(
            "https://gateway.acme.com",
            world.keys["gateway"],
            directory,
            world.asks,
            [channel],
            world.clock,
        )
        gateway: Gateway = human
        if forge := case.doc.get("gatewayForge"):
            changes = dict(forge)
            if changes.get("decidedAt") == "+60s":
                changes["decidedAt"] = format_time(world.clock.now() + timedelta(seconds=60))
            gateway = ForgeApproval(human, world.keys["gateway"], **changes)
        log = DecisionLog(open_store(folder / "coordinator.db"))
        taps = {pid: Tap(server, votes) for pid, server in world.participants.items()}
        coordinator = world.coordinator(log, gateway, links=taps, retry_delay=0.0, poll_seconds=0.5)
        human.start()
        try:
            outcome = await coordinator.run(plan)
        except HatpError as exc:
            return [*lines, f"coordinator refused: {exc.code} {exc.data.get('reason', '')}"]
        finally:
            await human.stop()
            await channel.close()
        lines += [outcome.state.value, outcome.reason]
        lines += _record_lines(outcome.record)
    finally:
        world.close()
    return lines


class _Approvers:
    """A ``terminal``-type channel: whoever is asked approves, once every branch has voted
    (so a participant's no is always in before the approval)."""

    channel_type = "terminal"

    def __init__(self, people: dict[str, SigningKey], votes: Votes, world: TripWorld) -> None:
        self._people, self._votes, self._world = people, votes, world
        self._tasks: list[asyncio.Task[None]] = []

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        self._tasks.append(asyncio.create_task(self._approve(notice, responder)))

    async def withdraw(self, ask_id: str, human: str) -> None:
        return None

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _approve(self, notice: Notice, responder: Responder) -> None:
        await self._votes.wait(notice.payload["txnId"], 4)
        key = self._people[notice.human]
        vote = sign_vote(key, notice.payload, "approve", self._world.clock.now())
        with contextlib.suppress(HatpError):  # the ask closed first: the deadline, an abort
            await responder.submit_vote(notice.ask_id, vote)


def _gateway_refusals(plan: dict[str, Any], directory: Directory, world: TripWorld) -> list[str]:
    """Ask the gateway's router about the plan as the agent wrote it (unparsed)."""
    try:
        plan_digest = digest(parse_plan(plan).to_wire())
    except HatpError:  # the router reads the plan itself, and refuses it first
        plan_digest = digest(plan)
    try:
        route(
            plan,
            plan_digest,
            "finance",
            directory,
            gateway_id="https://gateway.acme.com",
            key=world.keys["gateway"],
            clock=world.clock,
        )
    except HatpError as exc:
        rule = exc.data.get("rule")
        by = f" by {rule}" if rule else ""
        return [f"gateway refused: {exc.code} {exc.data.get('reason', '')}{by}"]
    return []


def _record_lines(record: dict[str, Any]) -> Iterator[str]:
    for event in record["events"]:
        body = event["body"]
        if body.get("problem"):
            yield (
                f"{body.get('branchId') or 'approval ' + body.get('groupId', '?')}: "
                + body["problem"]
            )
        approval = body.get("approval") or {}
        for human in (approval.get("routing") or {}).get("humans", []):
            rule = f" {human['rule']}: {human['detail']}" if human.get("rule") else ""
            yield f"routing {human['id']} {human['result']}{rule}"


def _missing(case: Case, lines: list[str]) -> list[str]:
    return [want for want in case.evidence if not any(want in line for line in lines)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_planted_transaction_leaves_its_evidence(case: Case, tmp_path: Path) -> None:
    """[GW-AMOUNT] [GW-BELOW-TOTAL] [GW-NEGATIVE] [GW-FEW] [DIR-SOD] [DIR-AUTHORITY]
    [CARD-SIGNED] [COORD-DIGEST] [COORD-DEADLINE] [PART-COST]: every planted case is caught."""
    lines = asyncio.run(_run(case, tmp_path))
    assert _missing(case, lines) == [], lines


@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_check_off_loses_exactly_its_cases_evidence(check: str, tmp_path: Path) -> None:
    """Cases whose checks name ``check`` lose evidence with it off; no other case does."""
    with unsafe_switched_off(check):
        for case in CASES:
            lines = asyncio.run(_run(case, tmp_path / case.name))
            missing = _missing(case, lines)
            if check in case.checks:
                assert missing, f"{case.name} still leaves all its evidence without {check}"
            else:
                assert missing == [], f"{case.name} lost {missing} without {check}: {lines}"
