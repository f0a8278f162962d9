"""The tool server's checks of a call approval, in the order they run (docs/spec.md §20).

:func:`check_approval` returns only after every numbered step passed; each
refusal is ``APPROVAL_INVALID`` with the reason and the rule of its step.
The server trusts nothing the agent hands it: the call digest, the amount
and the price are computed here from the call itself, the requester comes
from authentication, and the people are checked against their own signed
votes and directory-signed cards, not the gateway's list alone. Each check
asks :func:`hatp._checks.is_on` first, so the planted-violation tests can
show that it is what refuses its cases. Single use ([GATE-ONCE]) is the last
step and the only one that writes: see :mod:`hatp.gate._gate`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import parse_time
from hatp.directory import matches
from hatp.errors import (
    APPROVAL_REASONS,
    AddressInvalid,
    ApprovalInvalid,
    CardInvalid,
    HatpError,
    SignatureInvalid,
)
from hatp.evidence import Keyring, digest, verify
from hatp.gate._cards import VerifiedCard, VerifiedCards
from hatp.gate._tools import Price, Requester, _Declared
from hatp.model import (
    CALL_GROUP,
    Amount,
    CallApproval,
    HumanVote,
    first_error,
    owed,
    parse_address,
    parse_card,
)

__all__ = ["Call", "check_approval", "parse_approval"]

#: The rule each refusal reason enforces, read from the one list of reasons.
_RULES = {
    reason: match.group(1)
    for reason, text in APPROVAL_REASONS.items()
    if (match := re.search(r"\((GATE-[A-Z-]+)\)", text))
}
#: Signature refusals that mean the signer is not one the server trusts, not bad bytes.
_TRUST_REASONS = frozenset({"KID_UNKNOWN", "ISSUER_UNTRUSTED"})


@dataclass(frozen=True)
class Call:
    """One call as the server sees it, with everything it computed itself."""

    declared: _Declared
    server: str
    arguments: Mapping[str, Any]
    requester: Requester
    call_digest: str
    amount: Amount | None
    price: Price | None
    now: datetime
    skew: timedelta
    max_lifetime: timedelta
    gateways: Keyring
    cards: VerifiedCards
    #: The digest of the tool's definition as the server lists it now (``None``: not bound).
    tool_digest: str | None = None

    @property
    def tool(self) -> str:
        return self.declared.tool.name


def check_approval(call: Call, doc: Any) -> CallApproval:
    """Check ``doc`` as the approval of ``call``; return it parsed once every step passed.

    Raises:
        ApprovalInvalid: the first step that failed, as ``data.reason``.
    """
    # 1. The CallApproval form [GATE-SHAPE].
    approval = parse_approval(doc)
    who = _whose(approval)
    # 2-3. Signed by a key of a gateway the server trusts, the one it names
    #      [GATE-TRUSTED] [GATE-SIGNED].
    _check_signature(call, doc, approval, who)
    terms = approval.terms
    # 4. An approval, not a signed rejection [GATE-APPROVED].
    if approval.decision != "approve" and _checks.is_on("GATE-APPROVED"):
        raise _refuse(approval, "REJECTED", f"{who} is a rejection: {approval.reason}")
    # 5. This server, this tool, these exact arguments [GATE-CALL].
    _check_call(call, approval, who)
    # 6. The tool as the server lists it now [GATE-TOOL].
    _check_tool(call, approval, who)
    # 7. Asked for by the agent calling, for the person it acts for [GATE-REQUESTER].
    if (terms.requester, terms.on_behalf_of) != (
        call.requester.agent,
        call.requester.on_behalf_of,
    ) and _checks.is_on("GATE-REQUESTER"):
        raise _refuse(
            approval,
            "OTHER_REQUESTER",
            f"{who} was asked for by {terms.requester} for {terms.on_behalf_of}, not by "
            f"{call.requester.agent} for {call.requester.on_behalf_of}",
        )
    # 8. Inside its validity window [GATE-EXPIRY].
    _check_time(call, approval, who)
    # 9-10. The price cap and the payee [GATE-PRICE] [GATE-PAYEE].
    _check_price(call, approval, who)
    # 11. Every voter's card signed by a trusted directory [GATE-CARD].
    cards = _cards(call, approval, who)
    # 12. Every approver's own signed approve vote on these terms [GATE-VOTES].
    _check_votes(doc, approval, cards, who)
    # 13. Enough distinct approvers for the address's quorum [GATE-QUORUM].
    _check_quorum(call, approval, who)
    # 14. Asked of the tool's address, and every approver fits it [GATE-ADDRESS].
    _check_address(call, approval, cards, who)
    # 15. No approver is the person the calling agent acts for [GATE-SOD].
    if call.requester.on_behalf_of in approval.approvers and _checks.is_on("GATE-SOD"):
        raise _refuse(
            approval,
            "SELF_APPROVAL",
            f"{call.requester.on_behalf_of} approved a call made on their own behalf; "
            "someone else must approve it",
        )
    # 16. Every approver's authority covers the amount and the price [GATE-AUTHORITY].
    _check_authority(call, approval, cards, who)
    return approval


def parse_approval(doc: Any) -> CallApproval:
    """Read ``doc`` as a CallApproval. [GATE-SHAPE]

    Raises:
        ApprovalInvalid: reason ``SHAPE``: not a JSON object, or not of the form
            (``data.where`` points at the first bad member).
    """
    if not isinstance(doc, Mapping):
        raise ApprovalInvalid(
            "the approval is not a JSON object; pass the CallApproval the gateway signed",
            reason="SHAPE",
            rule="GATE-SHAPE",
            approval_id=None,
        )
    try:
        return CallApproval.model_validate(doc)
    except ValidationError as exc:
        path, msg = first_error(exc)
        where = "/" + path
        approval_id = doc.get("approvalId")
        raise ApprovalInvalid(
            f"the approval is not a CallApproval ({where}: {msg}); pass the "
            "CallApproval the gateway signed, unchanged",
            reason="SHAPE",
            rule="GATE-SHAPE",
            approval_id=approval_id if isinstance(approval_id, str) else None,
            where=where,
        ) from None


def _whose(approval: CallApproval) -> str:
    people = ", ".join(dict.fromkeys(approval.approvers)) or "nobody"
    return f"approval {approval.approval_id} by {people}"


def _check_signature(call: Call, doc: Mapping[str, Any], approval: CallApproval, who: str) -> None:
    try:
        signer = verify(doc, call.gateways)
    except SignatureInvalid as exc:
        if exc.reason in _TRUST_REASONS:
            if _checks.is_on("GATE-TRUSTED"):
                raise _refuse(
                    approval,
                    "UNTRUSTED_GATEWAY",
                    f"{who} is signed by {approval.signature.kid!r}, not by a key of a gateway "
                    f"this server trusts ({exc.message})",
                ) from None
        elif _checks.is_on("GATE-SIGNED"):
            raise _refuse(
                approval, "FORGED", f"{who} has no valid signature: {exc.message}"
            ) from None
        return
    except HatpError as exc:  # an unknown version, or no canonical form
        raise _refuse(approval, "SHAPE", f"{who} cannot be verified: {exc.message}") from None
    if signer.issuer != approval.gateway and _checks.is_on("GATE-SIGNED"):
        raise _refuse(
            approval,
            "FORGED",
            f"{who} names gateway {approval.gateway} but is signed by {signer.issuer}",
        )


def _check_call(call: Call, approval: CallApproval, who: str) -> None:
    if not _checks.is_on("GATE-CALL"):
        return
    terms = approval.terms
    wrong = [
        what
        for what, mine, theirs in (
            ("server", call.server, terms.server),
            ("tool", call.tool, terms.tool),
            ("arguments", call.call_digest, terms.call_digest),
        )
        if mine != theirs
    ]
    if wrong:
        other = {"server": "another server", "tool": "another tool", "arguments": "other arguments"}
        raise _refuse(
            approval,
            "OTHER_CALL",
            f"{who} is for another call ({other[wrong[0]]}); ask for an approval of "
            "exactly this call",
            differs=wrong,
        )


def _check_tool(call: Call, approval: CallApproval, who: str) -> None:
    bound = call.tool_digest
    if bound is None or not _checks.is_on("GATE-TOOL"):
        return
    if approval.terms.tool_digest != bound:
        said = (
            "does not bind the tool's definition"
            if approval.terms.tool_digest is None
            else "was given for another definition of the tool"
        )
        raise _refuse(
            approval,
            "TOOL_CHANGED",
            f"{who} {said}; the tool as listed now has digest {bound}: ask again",
        )


def _check_time(call: Call, approval: CallApproval, who: str) -> None:
    if not _checks.is_on("GATE-EXPIRY"):
        return
    decided, expires = parse_time(approval.decided_at), parse_time(approval.expires_at)
    if call.now > expires + call.skew:
        why = f"expired at {approval.expires_at}"
    elif decided > call.now + call.skew:
        why = f"is dated {approval.decided_at}, in the future"
    elif expires < decided or expires - decided > call.max_lifetime:
        why = (
            f"is valid from {approval.decided_at} to {approval.expires_at}, longer than the "
            f"{int(call.max_lifetime.total_seconds())} s this server accepts"
        )
    else:
        return
    raise _refuse(approval, "EXPIRED", f"{who} {why}; ask for a new one")


def _check_price(call: Call, approval: CallApproval, who: str) -> None:
    price = call.price
    if price is None:
        return
    cap = approval.terms.price
    if _checks.is_on("GATE-PRICE"):
        if cap is None:
            raise _refuse(
                approval,
                "PRICE_RAISED",
                f"{who} fixes no price, and this call costs {price.amount}",
                price=price.amount.to_wire(),
            )
        covered = cap.max_amount.currency == price.amount.currency and (
            cap.max_amount.decimal >= price.amount.decimal
        )
        if not covered:
            raise _refuse(
                approval,
                "PRICE_RAISED",
                f"{who} caps the price at {cap.max_amount}; this call costs {price.amount}",
                price=price.amount.to_wire(),
                cap=cap.max_amount.to_wire(),
            )
    if cap is not None and cap.pay_to != price.pay_to and _checks.is_on("GATE-PAYEE"):
        raise _refuse(
            approval,
            "PAYEE_CHANGED",
            f"{who} pays {cap.pay_to}; this call pays {price.pay_to}",
        )


def _cards(call: Call, approval: CallApproval, who: str) -> dict[str, VerifiedCard]:
    cards: dict[str, VerifiedCard] = {}
    for doc in approval.cards:
        try:
            card = (
                call.cards.verify(doc)
                if _checks.is_on("GATE-CARD")
                else VerifiedCard.of(parse_card(doc))
            )
        except CardInvalid as exc:
            if _checks.is_on("GATE-CARD"):
                raise _refuse(
                    approval, "CARD", f"{who} carries a card not used: {exc.message}"
                ) from None
            continue
        cards[card.card.id] = card
    return cards


def _check_votes(
    doc: Mapping[str, Any], approval: CallApproval, cards: Mapping[str, VerifiedCard], who: str
) -> None:
    if not _checks.is_on("GATE-VOTES"):
        return
    bound: dict[str, str | None] = {
        "kind": "human-vote",
        "askId": approval.ask_id,
        "txnId": approval.terms.request_id,
        "planDigest": digest(doc["terms"]),  # the terms as signed (validated just before)
        "groupId": CALL_GROUP,
        "decision": "approve",
        # A call's ask states no hold terms: a vote naming some was made for a
        # transaction's holds-first ask (the live gateway refuses it the same way).
        "termsDigest": None,
    }
    for human in dict.fromkeys(approval.approvers):
        problem = _vote_problem(human, approval.votes, bound, cards.get(human))
        if problem is not None:
            raise _refuse(approval, "VOTES", f"{who}: {problem}", human=human)


def _vote_problem(
    human: str,
    votes: list[dict[str, Any]],
    bound: Mapping[str, str | None],
    card: VerifiedCard | None,
) -> str | None:
    if card is None:
        return f"no card of {human} to check their vote with"
    for doc in votes:
        if doc.get("human") != human or any(doc.get(k) != v for k, v in bound.items()):
            continue
        try:
            verify(doc, card.keys)
            HumanVote.model_validate(doc)
        except (ValidationError, HatpError):
            continue
        return None
    return f"{human} signed no approve vote on exactly these terms"


def _check_quorum(call: Call, approval: CallApproval, who: str) -> None:
    needed = call.declared.address.quorum[0]
    distinct = len(set(approval.approvers))
    if distinct < needed and _checks.is_on("GATE-QUORUM"):
        raise _refuse(
            approval,
            "QUORUM",
            f"{who}: {distinct} distinct approver(s), and {call.declared.tool.address} "
            f"needs {needed}",
            needed=needed,
            distinct=distinct,
        )


def _check_address(
    call: Call, approval: CallApproval, cards: Mapping[str, VerifiedCard], who: str
) -> None:
    if not _checks.is_on("GATE-ADDRESS"):
        return
    address = call.declared.address
    try:
        asked = str(parse_address(approval.terms.address))
    except AddressInvalid:
        asked = approval.terms.address
    if asked != str(address):
        raise _refuse(
            approval,
            "ADDRESS",
            f"{who} was asked of {approval.terms.address}; this tool needs {address}",
        )
    for human in approval.approvers:
        card = cards.get(human)
        if card is None or not matches(card.card, address):
            raise _refuse(
                approval, "ADDRESS", f"{who}: {human} is not one of {address}", human=human
            )


def _check_authority(
    call: Call, approval: CallApproval, cards: Mapping[str, VerifiedCard], who: str
) -> None:
    if not _checks.is_on("GATE-AUTHORITY"):
        return
    action = call.declared.tool.action
    covered = owed(call.amount, None if call.price is None else call.price.amount)
    for human in approval.approvers:
        card = cards.get(human)
        limits = {} if card is None else card.card.limits(action)
        short = [f"{v} {c}" for c, v in sorted(covered.items()) if limits.get(c, Decimal(-1)) < v]
        if short or not limits:
            what = ", ".join(short) or f"anything ({action})"
            raise _refuse(
                approval,
                "AUTHORITY",
                f"{who}: {human} may not approve {what} for {action}",
                human=human,
            )


def _refuse(approval: CallApproval, reason: str, message: str, **data: Any) -> ApprovalInvalid:
    rule = _RULES[reason]
    return ApprovalInvalid(
        message, reason=reason, rule=rule, approval_id=approval.approval_id, **data
    )
