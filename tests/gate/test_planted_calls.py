"""Planted gated-call violations: each refused by the check it names, the tool never run.

Every case is a call with an approval built to break one rule of §20: a
replay, changed arguments, an expired, forged or untrusted approval, too
few approvers, a raised price, a tool changed after approval, a requester
approving their own request, and more. With every check on, each is refused
with ``APPROVAL_INVALID`` and its reason, the tool does not run, and the
approval is not used up. With one check switched off
(``hatp._checks.unsafe_switched_off``), exactly the cases that name it stop
being refused by it, and every other case is still refused by its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from directory.people import OTHER_KEY
from directory.people import card as unsigned_card
from gate.calls import (
    APPROVAL_ID,
    ARGS,
    DEFINITION,
    EVIL_GATEWAY,
    EVIL_KEY,
    FINANCE,
    NOW,
    REQUESTER,
    SERVER,
    Approving,
    approval,
    card,
    charge_card,
    human,
    make_gate,
    terms,
    usd,
    vote,
)
from gateway.people import KEYS
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.directory import sign_card
from hatp.errors import APPROVAL_REASONS, ApprovalInvalid
from hatp.evidence import SigningKey, call_digest, sign
from hatp.gate import GatedTool, Price, Requester
from hatp.model import PriceCap
from hatp.store import Store, UsedApprovals, open_store

PAYEE = "https://payments.example/pay"
PRICE = Price(usd("30.00"), PAYEE)
TWO_OF_THREE = FINANCE + "?quorum=2-of-3"


@dataclass(frozen=True)
class Attempt:
    """One call of ``charge_card`` as the server sees it."""

    approval: dict[str, Any]
    args: Mapping[str, Any] = field(default_factory=lambda: ARGS)
    requester: Requester = REQUESTER
    tools: Sequence[GatedTool] = field(default_factory=lambda: [charge_card()])
    used_before: bool = False


@dataclass(frozen=True)
class Case:
    check: str
    reason: str
    why: str
    build: Callable[[], Attempt]
    sole: bool = True  # with its check off, nothing else refuses it


def _priced(cap: PriceCap | None) -> Callable[[], Attempt]:
    def build() -> Attempt:
        doc = approval(Approving(terms=terms(price=None if cap is None else cap.to_wire())))
        return Attempt(doc, tools=[charge_card(price=PRICE)])

    return build


def _quorum(*names: str) -> Callable[[], Attempt]:
    return lambda: Attempt(
        approval(Approving(approvers=list(names), terms=terms(address=TWO_OF_THREE))),
        tools=[charge_card(TWO_OF_THREE)],
    )


def _forged_key() -> dict[str, Any]:
    # The acme gateway's kid on a key that is not the acme gateway's.
    return approval(Approving(key=SigningKey.from_seed(bytes([99]) * 32, "acme-gateway-1")))


def _alg_none() -> dict[str, Any]:
    doc = approval()
    return {**doc, "signature": {**doc["signature"], "alg": "none"}}


def _tampered() -> dict[str, Any]:
    doc = approval()
    return {**doc, "expiresAt": "2026-12-02T09:15:00.000Z"}  # five minutes more, unsigned


def _other_call(**changes: Any) -> Callable[[], Attempt]:
    return lambda: Attempt(approval(), args={**ARGS, **changes})


def _other_tool() -> Attempt:
    other = terms(tool="refund_card", callDigest=call_digest(SERVER, "refund_card", ARGS))
    return Attempt(approval(Approving(terms=other)))


def _other_server() -> Attempt:
    there = "https://payments.other.example"
    other = terms(server=there, callDigest=call_digest(there, "charge_card", ARGS))
    return Attempt(approval(Approving(terms=other)))


def _vote_by_another_key() -> Attempt:
    on = terms()
    forged = vote("bob", on)
    carol_signed = sign({k: v for k, v in forged.items() if k != "signature"}, KEYS["carol"])
    return Attempt(approval(Approving(votes=[carol_signed])))


def _card_from_another_directory() -> Attempt:
    other = sign_card(unsigned_card("bob", "10000", keys=[KEYS["bob"].public.to_jwk()]), OTHER_KEY)
    return Attempt(approval(Approving(cards=[other])))


CASES: dict[str, Case] = {
    "replayed-approval": Case(
        "GATE-ONCE",
        "USED",
        "the same approval, used a second time",
        lambda: Attempt(approval(), used_before=True),
    ),
    "changed-amount": Case(
        "GATE-CALL",
        "OTHER_CALL",
        "approved 2140.00 USD, called with 21400.00 USD",
        _other_call(amount={"value": "2140.01", "currency": "USD"}),
    ),
    "changed-payee-argument": Case(
        "GATE-CALL",
        "OTHER_CALL",
        "approved paying Lufthansa, called paying another",
        _other_call(payee="Mallory Travel"),
    ),
    "approval-for-another-tool": Case(
        "GATE-CALL", "OTHER_CALL", "an approval of refund_card used on charge_card", _other_tool
    ),
    "approval-for-another-server": Case(
        "GATE-CALL", "OTHER_CALL", "an approval for another payments server", _other_server
    ),
    "expired": Case(
        "GATE-EXPIRY",
        "EXPIRED",
        "valid for 10 minutes from 20 minutes ago",
        lambda: Attempt(approval(Approving(decided_at=NOW - timedelta(minutes=20)))),
    ),
    "dated-in-the-future": Case(
        "GATE-EXPIRY",
        "EXPIRED",
        "decided 10 minutes from now (a gateway clock far ahead, or a forgery's date)",
        lambda: Attempt(approval(Approving(decided_at=NOW + timedelta(minutes=10)))),
    ),
    "outlives-the-server-lifetime": Case(
        "GATE-EXPIRY",
        "EXPIRED",
        "valid for 30 days; the server accepts an hour",
        lambda: Attempt(approval(Approving(valid_for=timedelta(days=30)))),
    ),
    "tampered-after-signing": Case(
        "GATE-SIGNED",
        "FORGED",
        "expiresAt moved after the gateway signed",
        lambda: Attempt(_tampered()),
    ),
    "signed-with-another-key-under-the-gateway-kid": Case(
        "GATE-SIGNED",
        "FORGED",
        "the acme kid on a key that is not acme's",
        lambda: Attempt(_forged_key()),
    ),
    "alg-none": Case("GATE-SIGNED", "FORGED", "signature alg 'none'", lambda: Attempt(_alg_none())),
    "trusted-key-names-another-gateway": Case(
        "GATE-SIGNED",
        "FORGED",
        "signed by acme's key but naming the evil gateway as its signer",
        lambda: Attempt(approval(Approving(gateway=EVIL_GATEWAY))),
    ),
    "untrusted-gateway": Case(
        "GATE-TRUSTED",
        "UNTRUSTED_GATEWAY",
        "validly signed by a gateway the server does not trust",
        lambda: Attempt(approval(Approving(key=EVIL_KEY, gateway=EVIL_GATEWAY))),
    ),
    "unknown-gateway-key": Case(
        "GATE-TRUSTED",
        "UNTRUSTED_GATEWAY",
        "signed by a key the server has never heard of",
        lambda: Attempt(approval(Approving(key=SigningKey.from_seed(bytes([98]) * 32, "new-1")))),
    ),
    "a-rejection-presented-as-approval": Case(
        "GATE-APPROVED",
        "REJECTED",
        "the gateway's signed rejection of the call",
        lambda: Attempt(approval(Approving(decision="reject"))),
        sole=False,  # with it off, nobody approved: GATE-QUORUM refuses it
    ),
    "too-few-approvers": Case(
        "GATE-QUORUM", "QUORUM", "one approver for a 2-of-3 role", _quorum("bob")
    ),
    "the-same-approver-twice": Case(
        "GATE-QUORUM",
        "QUORUM",
        "bob listed twice, with two votes, for 2-of-3",
        lambda: Attempt(
            approval(
                Approving(
                    approvers=["bob", "bob"],
                    terms=terms(address=TWO_OF_THREE),
                    votes=[vote("bob", terms(address=TWO_OF_THREE))] * 2,
                )
            ),
            tools=[charge_card(TWO_OF_THREE)],
        ),
    ),
    "requester-approves-own-request": Case(
        "GATE-SOD",
        "SELF_APPROVAL",
        "dana, for whom the agent acts, approves her own charge",
        lambda: Attempt(approval(Approving(approvers=["dana"]))),
    ),
    "authority-below-the-amount": Case(
        "GATE-AUTHORITY",
        "AUTHORITY",
        "erin (limit 500 USD) approves 2140.00 USD",
        lambda: Attempt(approval(Approving(approvers=["erin"], cards=[card("erin", "500")]))),
    ),
    "authority-in-another-currency": Case(
        "GATE-AUTHORITY",
        "AUTHORITY",
        "bob's USD limit approves a charge in EUR (currencies are never converted)",
        lambda: Attempt(
            approval(Approving(terms=terms(_eur(), amount=_eur()["amount"]))), args=_eur()
        ),
    ),
    "price-raised": Case(
        "GATE-PRICE",
        "PRICE_RAISED",
        "the approval caps the price at 25.00 USD; the server charges 30.00 USD",
        _priced(PriceCap(max_amount=usd("25.00"), pay_to=PAYEE)),
    ),
    "no-price-cap": Case(
        "GATE-PRICE",
        "PRICE_RAISED",
        "the server sets a price; the approval fixes none",
        _priced(None),
    ),
    "payee-changed": Case(
        "GATE-PAYEE",
        "PAYEE_CHANGED",
        "the approval pays another payee than the server's terms",
        _priced(PriceCap(max_amount=usd("30.00"), pay_to="https://mallory.example/pay")),
    ),
    "tool-description-changed": Case(
        "GATE-TOOL",
        "TOOL_CHANGED",
        "the tool's description changed after approval",
        lambda: Attempt(
            approval(),
            tools=[charge_card(definition={**DEFINITION, "description": "Charge any card."})],
        ),
    ),
    "tool-definition-not-bound": Case(
        "GATE-TOOL",
        "TOOL_CHANGED",
        "the server binds its tool's definition; the approval does not",
        lambda: Attempt(approval(Approving(terms=terms(toolDigest=None)))),
    ),
    "another-agent-uses-it": Case(
        "GATE-REQUESTER",
        "OTHER_REQUESTER",
        "an approval asked for by the travel bot, presented by another agent",
        lambda: Attempt(
            approval(), requester=Requester("agent://acme.com/other-bot", human("dana"))
        ),
    ),
    "no-vote-behind-the-approver": Case(
        "GATE-VOTES",
        "VOTES",
        "the gateway names bob, who signed no vote",
        lambda: Attempt(approval(Approving(votes=[]))),
    ),
    "vote-on-other-terms": Case(
        "GATE-VOTES",
        "VOTES",
        "bob's vote is on a charge of 100.00 USD",
        lambda: Attempt(
            approval(
                Approving(votes=[vote("bob", terms(amount={"value": "100.00", "currency": "USD"}))])
            )
        ),
    ),
    "vote-on-hold-terms": Case(
        "GATE-VOTES",
        "VOTES",
        "bob's vote also names hold terms: a holds-first vote of a transaction, not this call's",
        lambda: Attempt(
            approval(Approving(votes=[vote("bob", terms(), termsDigest="sha256:" + "0" * 64)]))
        ),
    ),
    "vote-signed-by-someone-else": Case(
        "GATE-VOTES", "VOTES", "bob's vote, signed with carol's key", _vote_by_another_key
    ),
    "card-from-another-directory": Case(
        "GATE-CARD",
        "CARD",
        "bob's card signed by a directory the server does not trust",
        _card_from_another_directory,
    ),
    "approver-outside-the-role": Case(
        "GATE-ADDRESS",
        "ADDRESS",
        "bob holds no finance-approver role",
        lambda: Attempt(approval(Approving(cards=[card("bob", roles=[])]))),
    ),
    "asked-of-another-address": Case(
        "GATE-ADDRESS",
        "ADDRESS",
        "the agent asked bob by name instead of the finance-approver role",
        lambda: Attempt(approval(Approving(terms=terms(address=human("bob"))))),
    ),
}


def _eur() -> dict[str, Any]:
    return {**ARGS, "amount": {"value": "2140.00", "currency": "EUR"}}


class Server:
    """The payments server: the gate over a store, and a tool that counts its runs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ran: list[Mapping[str, Any]] = []

    def attempt(self, attempt: Attempt) -> str | None:
        """Call the tool; return the refusal reason, or ``None`` if it ran."""
        UsedApprovals(self.store).prune(NOW + timedelta(days=3650))
        clock = ManualClock(NOW)
        gate = make_gate(self.store, clock, attempt.tools)
        if attempt.used_before:
            gate.use(gate.check("charge_card", attempt.args, attempt.approval, attempt.requester))
        before = len(self.ran)
        try:
            asyncio.run(
                gate.run(
                    "charge_card",
                    attempt.args,
                    attempt.approval,
                    attempt.requester,
                    self.ran.append,
                )
            )
        except ApprovalInvalid as refusal:
            assert len(self.ran) == before, "the tool ran on a refusal"
            if refusal.reason != "USED":  # a refused approval is not used up
                assert UsedApprovals(self.store).get(APPROVAL_ID) is None
            return refusal.reason
        assert len(self.ran) == before + 1
        return None


@pytest.fixture
def server(tmp_path: Path) -> Any:
    store = open_store(tmp_path / "payments.db")
    yield Server(store)
    store.close()


def test_the_honest_call_runs_once(server: Server) -> None:
    assert server.attempt(Attempt(approval())) is None
    assert server.ran == [ARGS]


@pytest.mark.parametrize("name", sorted(CASES))
def test_planted_call_is_refused_by_its_check_and_the_tool_never_runs(
    server: Server, name: str
) -> None:
    case = CASES[name]
    assert server.attempt(case.build()) == case.reason, case.why
    assert f"({case.check})" in APPROVAL_REASONS[case.reason]


def test_there_are_at_least_eighteen_planted_calls() -> None:
    assert len(CASES) >= 18
    assert {c.reason for c in CASES.values()} == set(APPROVAL_REASONS) - {"SHAPE"}


CHECKS = sorted({case.check for case in CASES.values()})


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_gate_check_off_stops_exactly_its_cases(server: Server, check: str) -> None:
    with unsafe_switched_off(check):
        outcomes = {name: server.attempt(case.build()) for name, case in CASES.items()}
    for name, case in CASES.items():
        refused_by = outcomes[name]
        if case.check == check:
            assert refused_by != case.reason, f"{name} is still refused by {check}"
            if case.sole:
                assert refused_by is None, f"{name} was refused as {refused_by}"
        else:
            assert refused_by == case.reason, f"{name}: {refused_by}, not {case.reason}"
