"""A trip whose finance group needs the approver's passkey, end to end, on SQLite and PostgreSQL.

The trip world's people have passkeys on their cards (software authenticators);
the real Human Gateway asks bob, whose scripted vote is signed by his passkey
over the nonce his notice carried. The coordinator counts the approval only
after checking that assertion against bob's directory-signed card ([COORD-EVIDENCE],
[TXN-PASSKEY]), and the record verifies offline. A compromised gateway, which
holds bob's vote key (it signs at his terminal) but not his passkey, signs an
approval with his Ed25519 vote alone: the coordinator refuses it, and with its
evidence check switched off the offline verifier still fails the record on
[TXN-PASSKEY].
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import Trip, events, failed_findings
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock, parse_time
from hatp.coordinator import ApprovalRequest, Gateway, Outcome
from hatp.demo import PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.evidence import SigningKey, sign
from hatp.gateway import sign_vote
from hatp.model import TxnState
from hatp.store import DecisionLog

BOB = "human://acme.com/bob"


@pytest.fixture
def trip(tmp_path: Path, clock: ManualClock, store_url: str, log: DecisionLog) -> Iterator[Trip]:
    """The trip world with a passkey for rpId acme.com on every acme card."""
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)
    world = TripWorld.open(
        tmp_path / "trip", clock, rooms=30, store_urls=urls, passkey_rp_id="acme.com"
    )
    try:
        yield Trip(world, log, clock)
    finally:
        world.close()


class PasskeylessGateway:
    """A compromised gateway: each approval it signs carries the approvers' votes made
    again with their Ed25519 vote keys (which it holds), without their passkeys."""

    def __init__(self, inner: Gateway, key: SigningKey, people: Mapping[str, SigningKey]) -> None:
        self.inner = inner
        self._key = key
        self._people = people

    @property
    def gateway_id(self) -> str:
        return self.inner.gateway_id

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        return self._fabricate(await self.inner.ask(request))

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        return self._fabricate(await self.inner.poll(ask_id, wait_seconds=wait_seconds))

    async def withdraw(self, ask_id: str, reason: str) -> None:
        await self.inner.withdraw(ask_id, reason)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        return await self.inner.withdraw_transaction(txn_id, reason)

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        return await self.inner.estimate(request)

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        return await self.inner.ask_question(question)

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        return self._fabricate(await self.inner.tighten(ask_id, decide_by))

    def _fabricate(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("kind") != "approval" or answer.get("decision") != "approve":
            return answer
        votes = []
        for vote in answer["votes"]:
            payload = {k: vote[k] for k in ("askId", "txnId", "planDigest", "groupId", "human")}
            at = parse_time(vote["time"])
            votes.append(sign_vote(self._people[vote["human"]], payload, vote["decision"], at))
        unsigned = {k: v for k, v in answer.items() if k != "signature"}
        return sign({**unsigned, "votes": votes}, self._key)


def _run(trip: Trip, *, compromised: bool = False) -> Outcome:
    world = trip.world
    plan = trip_plan(
        f"trip-pk-{'bad' if compromised else 'good'}",
        decide_by=trip.clock.now() + timedelta(minutes=15),
        passkey=True,
    )
    gateway: Gateway = world.gateway(world.scripted_people("approve"))
    if compromised:
        gateway = PasskeylessGateway(gateway, world.keys["gateway"], world.people)
    coordinator = world.coordinator(trip.log, gateway, links=trip.links, retry_delay=0.0)
    return asyncio.run(coordinator.run(plan))


def test_a_trip_needing_a_passkey_commits_on_bobs_passkey_and_verifies_offline(
    trip: Trip,
) -> None:
    """[GW-PASSKEY] [COORD-EVIDENCE] [TXN-PASSKEY]"""
    outcome = _run(trip)
    assert outcome.state is TxnState.COMMITTED
    (approval,) = [e["body"]["approval"] for e in events(outcome.record, "txn.approval")]
    (vote,) = approval["votes"]
    assert vote["human"] == BOB and vote["passkey"]["kid"] == f"{BOB}#passkey-1"
    assert failed_findings(outcome, trip.world) == []
    assert set(trip.world.effects("trip-pk-good").values()) == {"whole"}


def test_an_approval_fabricated_without_the_passkey_is_refused_and_flagged_offline(
    trip: Trip,
) -> None:
    """[COORD-EVIDENCE] [TXN-PASSKEY] the gateway's own word, and bob's Ed25519 vote, are
    not his passkey."""
    refused = _run(trip, compromised=True)
    assert refused.state is TxnState.ABORTED
    assert set(trip.world.effects("trip-pk-bad").values()) == {"none"}
    problems = [str(e["body"]) for e in events(refused.record, "txn.approval")]
    assert any("TXN-PASSKEY" in p for p in problems), problems


def test_without_the_coordinators_evidence_check_the_verifier_flags_it(
    trip: Trip,
) -> None:
    """[TXN-PASSKEY] a naive coordinator commits; the record fails on that rule alone."""
    with unsafe_switched_off("COORD-EVIDENCE"):
        let_by = _run(trip, compromised=True)
    assert let_by.state is TxnState.COMMITTED
    failed = {finding.split(":")[0] for finding in failed_findings(let_by, trip.world)}
    assert failed == {"TXN-PASSKEY"}
