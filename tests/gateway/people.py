"""People, cards, plans and a gateway world for the Human Gateway tests.

Every person has a directory-signed card of acme.com with a passkey and an
Ed25519 key (``KEYS[name]``) that signs their votes, reachable on the
``web`` channel. :class:`World` is a :class:`HumanGateway` on a store, with a
:class:`MemoryChannel` for ``web``, on a manual clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from directory.people import DIRECTORY_KEY, ISSUER, authenticator, card, directory, passkey
from gateway.routes import GATEWAY_ID, GATEWAY_KEY, branch
from hatp.clock import ManualClock, format_time
from hatp.coordinator import ApprovalRequest
from hatp.directory import Directory, sign_card
from hatp.directory._cards import verify_card
from hatp.evidence import Keyring, SigningKey, digest
from hatp.gateway import HumanGateway, MemoryChannel, Notice, Person, sign_passkey_vote, sign_vote
from hatp.model import parse_plan
from hatp.store import AskStore, Store, open_store

START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
DECIDE_BY = START + timedelta(minutes=75)
FINANCE = "human://acme.com/role/finance-approver"
AGENT = "agent://acme.com/travel-bot"
#: The person the travel bot works for: never its approver ([DIR-SOD]).
PRINCIPAL = "human://acme.com/frank"
NAMES = ("alice", "bob", "carol", "dana", "erin", "frank", "gina", "hank")
KEYS = {
    name: SigningKey.from_seed(bytes([100 + i]) * 32, f"human://acme.com/{name}#key-1")
    for i, name in enumerate(NAMES)
}


def human(name: str) -> str:
    return f"human://acme.com/{name}"


def person_card(name: str, limit: str | None = "10000", **changes: Any) -> dict[str, Any]:
    """An acme finance approver's signed card, with their vote key, on ``web``."""
    changes.setdefault("channels", ["web"])
    changes.setdefault("keys", [passkey(name), KEYS[name].public.to_jwk()])
    return sign_card(card(name, limit, **changes), DIRECTORY_KEY)


def people_directory(*cards: dict[str, Any]) -> Directory:
    return directory(*cards)


def finance_directory() -> Directory:
    """alice and bob may approve 10,000 USD; dana is who the agent acts for; erin's limit is 500."""
    return people_directory(
        person_card("alice"),
        person_card("bob"),
        person_card("dana", "50000"),
        person_card("erin", "500"),
    )


def plan_doc(
    address: str = FINANCE,
    amount: str = "1000",
    *,
    passkey_required: bool = False,
    txn_id: str = "txn-gw-0001",
    decide_by: datetime = DECIDE_BY,
) -> dict[str, Any]:
    """A plan spending ``amount`` USD, with one approval group ``finance`` at ``address``."""
    return {
        "hatpVersion": "0.1",
        "txnId": txn_id,
        "initiator": AGENT,
        "onBehalfOf": human("dana"),
        "branches": [branch("charge", amount)],
        "approvals": [
            {
                "groupId": "finance",
                "address": address,
                "requirement": {
                    "action": "approve.spend",
                    "tolerance": "0",
                    "amount": None,
                    "passkey": passkey_required,
                },
            }
        ],
        "deadlines": {"decideBy": format_time(decide_by)},
        "agentText": None,
    }


def request(doc: Mapping[str, Any] | None = None) -> ApprovalRequest:
    """The coordinator's ask for group ``finance`` of the plan."""
    plan = parse_plan(dict(doc or plan_doc()))
    decide_by = datetime.fromisoformat(plan.deadlines.decide_by)
    return ApprovalRequest(plan.txn_id, plan, digest(plan.to_wire()), plan.approvals[0], decide_by)


#: The approval deadline and the charge's hold in the hold terms of a holds-first ask.
TERMS_APPROVE_BY = START + timedelta(minutes=20)
TERMS_LEASE = START + timedelta(minutes=30)
TERMS_HORIZON = START + timedelta(hours=2)


def hold_terms(req: ApprovalRequest, **changes: Any) -> dict[str, Any]:
    """The HoldTerms of a holds-first ask about ``req``'s plan: its one hold ``charge``
    leased for 30 minutes, approved by 20 minutes in; ``changes`` replace any member."""
    return {
        "kind": "hold-terms",
        "planDigest": req.plan_digest,
        "holds": [
            {
                "branchId": "charge",
                "leaseExpiresAt": format_time(TERMS_LEASE),
                "holdHorizon": format_time(TERMS_HORIZON),
            }
        ],
        "approveBy": format_time(TERMS_APPROVE_BY),
        "previews": {},
        **changes,
    }


def terms_request(doc: Mapping[str, Any] | None = None) -> ApprovalRequest:
    """The coordinator's holds-first ask for group ``finance``: the plan and its hold terms."""
    req = request(doc)
    return replace(req, terms=hold_terms(req))


def keyring() -> Keyring:
    """Trusts the acme gateway and the acme directory."""
    ring = Keyring(trusted_issuers=[GATEWAY_ID, ISSUER])
    ring.add(GATEWAY_KEY.public, GATEWAY_ID)
    ring.add(DIRECTORY_KEY.public, ISSUER)
    return ring


def vote(notice: Notice, decision: str = "approve", at: datetime | None = None) -> dict[str, Any]:
    """The notice's person's signed vote."""
    name = notice.human.rsplit("/", 1)[1]
    return sign_vote(KEYS[name], notice.payload, decision, at or START)  # type: ignore[arg-type]


def passkey_vote(
    notice: Notice, decision: str = "approve", *, signed: bool = False
) -> dict[str, Any]:
    """The notice's person's vote signed by their passkey over the notice's nonce (and by
    their Ed25519 key too if ``signed``)."""
    name = notice.human.rsplit("/", 1)[1]
    if notice.nonce is None:
        raise AssertionError(f"the notice to {notice.human} carries no passkey nonce")
    return sign_passkey_vote(
        authenticator(name),
        notice.payload,
        decision,  # type: ignore[arg-type]
        notice.nonce,
        START,
        key=KEYS[name] if signed else None,
    )


def check_card(doc: dict[str, Any]) -> str:
    """The id of a card as the directory signed it (raises if it does not verify)."""
    return verify_card(doc, Keyring([(DIRECTORY_KEY.public, ISSUER)], [ISSUER])).id


#: A test's body: what it does with the world, on the event loop.
Body = Callable[["World"], Coroutine[Any, Any, None]]


#: How long :func:`until` lets a condition take before it fails the test: a bound on a
#: hang, not a claim about timing.
UNTIL_SECONDS = 30.0


async def until(condition: Callable[[], bool], what: str = "the condition") -> None:
    """Let other tasks, and the store's worker threads the gateway uses, run until
    ``condition`` holds; fail if it has not after :data:`UNTIL_SECONDS`."""
    end = time.monotonic() + UNTIL_SECONDS
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what} never held")
        await asyncio.sleep(0)


def run(world: World, body: Body) -> None:
    asyncio.run(body(world))


class World:
    """A gateway on a store, a ``web`` memory channel, and the clock they share."""

    def __init__(
        self,
        store_url: str,
        found: Directory,
        *,
        people: Mapping[str, Person] | None = None,
        clock: ManualClock | None = None,
        channel_type: str = "web",
        passkey_origins: Sequence[str] | None = None,
    ) -> None:
        self.passkey_origins = passkey_origins
        self.clock = clock or ManualClock(START)
        self.directory = found
        self.store_url = store_url
        self.stores: list[Store] = []
        self.channel = MemoryChannel(channel_type, clock=self.clock, people=people or {})
        self.gateway = self.restart()

    def restart(self, channel: MemoryChannel | None = None, **options: Any) -> HumanGateway:
        """A new gateway process on the same store (and a fresh channel if given);
        ``options`` go to :class:`HumanGateway` (``recheck_seconds``, say)."""
        self.stores.append(open_store(self.store_url))
        if channel is not None:
            self.channel = channel
        self.gateway = HumanGateway(
            GATEWAY_ID,
            GATEWAY_KEY,
            self.directory,
            AskStore(self.stores[-1]),
            {self.channel.channel_type: self.channel},
            self.clock,
            initiator_principals={AGENT: PRINCIPAL},
            passkey_origins=self.passkey_origins,
            **options,
        )
        return self.gateway

    def inbox(self, name: str) -> list[Notice]:
        return self.channel.inbox(human(name))

    def close(self) -> None:
        for store in self.stores:
            store.close()


def question_doc(kind: str, typed: Mapping[str, Any], **members: Any) -> dict[str, Any]:
    """A question's wire form of type ``kind`` carrying ``typed`` (its type's own members):
    the travel bot asks dana's way, answered by ``DECIDE_BY``; ``members`` replace any member."""
    return {
        "hatpVersion": "0.1",
        "kind": "question",
        "questionId": f"q-{kind}",
        "asker": AGENT,
        "onBehalfOf": human("dana"),
        "address": human("dana"),
        "type": kind,
        "prompt": {"summary": "Which seat?"},
        "decideBy": format_time(DECIDE_BY),
        **typed,
        **members,
    }
