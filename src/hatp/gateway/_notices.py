"""What a person is told about an ask: the view to decide on and the payload to sign."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hatp.clock import parse_time
from hatp.gateway._channels import Notice
from hatp.gateway._deadline import deadline
from hatp.gateway._hold_terms import TERMS_DIGEST
from hatp.gateway._view import approver_view, call_view, question_view
from hatp.model import parse_plan
from hatp.store import AskKind, AskRow

__all__ = ["notice"]

_NOTICE_KINDS: dict[AskKind, Literal["approval", "question", "call"]] = {
    AskKind.APPROVAL: "approval",
    AskKind.QUESTION: "question",
    AskKind.CALL: "call",
}


def notice(row: AskRow, entry: Mapping[str, Any]) -> Notice:
    """What ``entry``'s person is told about ask ``row``: the view and the payload they sign."""
    doc = row.doc
    if row.kind is AskKind.QUESTION:
        view: Any = question_view(doc["question"])
        payload = {
            "askId": row.ask_id,
            "questionId": doc["txnId"],
            "questionDigest": doc["planDigest"],
        }
    else:
        view = (
            call_view(doc["request"])
            if row.kind is AskKind.CALL
            else approver_view(parse_plan(doc["plan"]), doc["groupId"], terms=doc.get("terms"))
        )
        payload = {
            "askId": row.ask_id,
            "txnId": doc["txnId"],
            "planDigest": doc["planDigest"],
            "groupId": doc["groupId"],
            "human": entry["id"],
        }
        if row.kind is AskKind.APPROVAL and doc.get(TERMS_DIGEST) is not None:  # [GW-TERMS]
            payload[TERMS_DIGEST] = doc[TERMS_DIGEST]
    return Notice(
        ask_id=row.ask_id,
        human=entry["id"],
        kind=_NOTICE_KINDS[row.kind],
        view=view,
        payload=payload,
        decide_by=deadline(row),
        respond_by=parse_time(entry["respondBy"]),
        nonce=entry.get("nonce"),
    )
