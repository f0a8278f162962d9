"""Reading the gateway's asks for one person: what waits on them, and how an ask stands.

A channel that people come to (the approver page) rather than one that
pushes to them needs the asks themselves, not the notices sent: those are
read here from the gateway's durable :class:`~hatp.store.AskStore`, so a
restarted gateway shows every open ask again. :func:`inbox` lists the
notices of every open ask that waits on a person over one channel type;
:func:`notice_of` rebuilds one person's notice of one ask; :func:`progress`
says how an ask stands: its state, its outcome and what became of each
person routed so far (the routing the Approval will carry).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from hatp.errors import AskUnknown
from hatp.gateway._channels import Notice
from hatp.gateway._notices import notice
from hatp.store import AskKind, AskRow, AskState, AskStore

__all__ = ["AskProgress", "PersonProgress", "inbox", "notice_of", "progress", "waiting"]


@dataclass(frozen=True, slots=True)
class PersonProgress:
    """What became of one person routed on an ask.

    ``status``: ``candidate`` (eligible, not asked), ``excluded`` (passed over:
    ``rule`` says why), ``asked`` (waiting for them), ``unreachable`` (no channel
    the gateway serves), ``declined``, ``escalated`` (missed their SLA),
    ``withdrawn`` (still asked when the ask closed) or ``decided`` (``decision``
    says what). ``detail`` is the gateway's note; ``delegate_of`` whom they stand in for.
    """

    id: str
    status: str
    decision: str | None
    rule: str | None
    detail: str | None
    delegate_of: str | None


@dataclass(frozen=True, slots=True)
class AskProgress:
    """How an ask stands: ``state`` open, decided or withdrawn; ``decision`` approve or
    reject once an approval or call ask is closed (``None`` while open, and for a
    question); ``answered_by`` who answered a question; ``people`` in routing order."""

    ask_id: str
    kind: AskKind
    state: AskState
    decision: str | None
    reason: str | None
    answered_by: str | None
    needed: int
    people: tuple[PersonProgress, ...]


def inbox(asks: AskStore, human: str, channel_types: Collection[str]) -> list[Notice]:
    """Return the notice of every open ask that waits on ``human`` over one of
    ``channel_types``, oldest ask first.

    Raises:
        StoreUnavailable: the store failed.
    """
    return [notice(row, entry) for row, entry in waiting(asks, human, channel_types)]


def waiting(
    asks: AskStore, human: str, channel_types: Collection[str]
) -> list[tuple[AskRow, dict[str, Any]]]:
    """Every open ask that waits on ``human`` over one of ``channel_types``, with their
    entry in its routing, oldest ask first (what :func:`inbox` makes notices of).

    Raises:
        StoreUnavailable: the store failed.
    """
    found = []
    for row in asks.open_asks():
        entry = _entry(row, human)
        if entry is not None and entry["status"] == "asked" and entry["channel"] in channel_types:
            found.append((row, entry))
    return found


def notice_of(row: AskRow, human: str) -> Notice:
    """Return ``human``'s notice of ask ``row`` (what they were shown and sign over),
    whether or not they are still asked.

    Raises:
        AskUnknown: ``human`` was never asked on this ask.
    """
    entry = _entry(row, human)
    if entry is None or "askedAt" not in entry:
        raise AskUnknown(
            f"no ask {row.ask_id} for {human}: you were not asked on it", ask_id=row.ask_id
        )
    return notice(row, entry)


def progress(row: AskRow) -> AskProgress:
    """Return how ask ``row`` stands (see :class:`AskProgress`)."""
    doc = row.doc
    result: Mapping[str, Any] = doc.get("result") or {}
    is_question = row.kind is AskKind.QUESTION
    return AskProgress(
        ask_id=row.ask_id,
        kind=row.kind,
        state=row.state,
        decision=None if is_question else result.get("decision"),
        reason=doc.get("closedReason") or result.get("reason"),
        answered_by=result.get("answeredBy") if is_question else None,
        needed=int(doc.get("needed", 1)),
        people=tuple(
            PersonProgress(
                id=entry["id"],
                status=entry["status"],
                decision=entry.get("decision"),
                rule=entry.get("rule"),
                detail=entry.get("detail"),
                delegate_of=entry.get("delegateOf"),
            )
            for entry in doc["people"]
        ),
    )


def _entry(row: AskRow, human: str) -> dict[str, Any] | None:
    return next((p for p in row.doc["people"] if p["id"] == human), None)
