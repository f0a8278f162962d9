"""What the gateway checks of a person's response before it records anything.

Each check raises :class:`~hatp.errors.ResponseRefused` with a reason of
:data:`hatp.errors.RESPONSE_REASONS`; the switchable ones ask
:func:`hatp._checks.is_on` with their requirement id first.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import parse_time
from hatp.errors import (
    HatpError,
    InvalidJson,
    ResponseRefused,
    SignatureInvalid,
    VersionUnsupported,
)
from hatp.evidence import card_keyring, verify
from hatp.gateway._ask import AskDoc
from hatp.gateway._deadline import deadline
from hatp.gateway._hold_terms import TERMS_DIGEST
from hatp.model import HumanCard, HumanVote, first_error
from hatp.store import AskKind, AskRow

__all__ = [
    "check_signature",
    "check_vote",
    "parse_vote",
    "refused",
    "require_asked",
    "require_in_time",
    "require_open",
]


def check_vote(row: AskRow, work: AskDoc, vote: HumanVote, now: datetime) -> None:
    """Refuse a vote the ask cannot take ([GW-VOTE-OPEN] … [GW-VOTE-ASKED]); the signature is
    checked by :func:`check_signature`."""
    ask_id, human, doc = row.ask_id, vote.human, row.doc
    if row.kind is AskKind.QUESTION:  # approval groups and tool calls take votes
        raise refused(ask_id, human, "WRONG_KIND", "this ask is a question: answer it")
    require_open(row, human)
    require_in_time(row, human, now)
    if parse_time(vote.time) > deadline(row) and _checks.is_on("GW-VOTE-LATE"):
        raise refused(
            ask_id,
            human,
            "LATE",
            f"the vote is timed after the deadline {doc['decideBy']}; it is not counted",
        )
    bound = {
        "askId": vote.ask_id,
        "txnId": vote.txn_id,
        "planDigest": vote.plan_digest,
        "groupId": vote.group_id,
        # [GW-TERMS] the hold terms asked about, or none on both sides
        TERMS_DIGEST: vote.terms_digest,
    }
    wrong = sorted(k for k, v in bound.items() if doc.get(k) != v)
    if wrong and _checks.is_on("GW-VOTE-BINDS"):
        raise refused(
            ask_id,
            human,
            "MISMATCH",
            f"the vote names another {', '.join(wrong)} than this ask; "
            "sign the payload of this ask's notice",
            members=wrong,
        )
    if any(v["human"] == human for v in doc["votes"]) and _checks.is_on("GW-VOTE-ONCE"):
        raise refused(ask_id, human, "TWICE", f"{human} has voted on this ask already")
    require_asked(row, work, human, voted_ok=True)


def check_signature(
    ask_id: str,
    vote: Mapping[str, Any],
    human: str,
    card: HumanCard | None,
    *,
    kind: AskKind = AskKind.APPROVAL,
) -> None:
    """[GW-VOTE-SIGNED] the vote's Ed25519 signature, if it has one, verifies under a key
    on the voter's own card. A vote without one is signed by its passkey alone
    ([GW-PASSKEY]), which only an approval group's ask takes."""
    if not _checks.is_on("GW-VOTE-SIGNED"):
        return
    if vote.get("signature") is None:
        if kind is AskKind.APPROVAL:
            return
        raise refused(
            ask_id,
            human,
            "SIGNATURE",
            "a vote on a tool call is signed by an Ed25519 key on the voter's card; a "
            "passkey alone signs votes on plans only",
        )
    if card is None:
        raise refused(
            ask_id, human, "SIGNATURE", f"the directory has no card for {human} to verify with"
        )
    try:
        verify(vote, card_keyring(card))
    except (SignatureInvalid, VersionUnsupported, InvalidJson) as exc:
        raise refused(
            ask_id,
            human,
            "SIGNATURE",
            f"the vote is not signed by a key on {human}'s card: {exc.message}",
        ) from None


def parse_vote(ask_id: str, vote: Mapping[str, Any]) -> HumanVote:
    human = vote.get("human") if isinstance(vote, Mapping) else None
    try:
        if not isinstance(vote, Mapping):
            raise TypeError("a vote is a JSON object")
        return HumanVote.model_validate(vote)
    except (ValidationError, TypeError) as exc:
        raise refused(
            ask_id,
            human if isinstance(human, str) else None,
            "SHAPE",
            f"not a HumanVote: {_first_error(exc)}; sign the notice's payload with sign_vote",
        ) from None


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        path, msg = first_error(exc)
        return f"/{path}: {msg}"
    return str(exc)


def require_open(row: AskRow, human: str) -> None:
    """[GW-VOTE-OPEN] nothing is recorded on a decided or withdrawn ask."""
    if not row.is_open:
        raise refused(
            row.ask_id,
            human,
            "CLOSED",
            f"ask {row.ask_id} is {row.state.value} already; nothing more is recorded on it",
            state=row.state.value,
        )


def require_in_time(row: AskRow, human: str, now: datetime) -> None:
    """[GW-VOTE-LATE] no response is taken after decideBy."""
    if now > deadline(row) and _checks.is_on("GW-VOTE-LATE"):
        raise refused(
            row.ask_id,
            human,
            "LATE",
            f"the deadline {row.doc['decideBy']} has passed; the ask is being withdrawn",
        )


def require_asked(row: AskRow, work: AskDoc, human: str, *, voted_ok: bool = False) -> None:
    """[GW-VOTE-ASKED] only someone the ask stands with now (asked, or a delegate
    escalated to) responds."""
    entry = work.person(human)
    allowed = {"asked", "decided"} if voted_ok else {"asked"}
    if (entry is None or entry["status"] not in allowed) and _checks.is_on("GW-VOTE-ASKED"):
        status = "not among the people it routed to" if entry is None else entry["status"]
        raise refused(
            row.ask_id,
            human,
            "NOT_ASKED",
            f"{human} is not being asked on {row.ask_id} ({status}); only people the "
            "gateway asked, or delegates it escalated to, respond",
        )


def refused(ask_id: str, human: str | None, reason: str, message: str, **data: Any) -> HatpError:
    return ResponseRefused(message, reason=reason, ask_id=ask_id, human=human, **data)
