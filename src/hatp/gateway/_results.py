"""What the gateway answers about an ask: its signed pending vote or its signed outcome."""

from __future__ import annotations

from typing import Any

from hatp.errors import AskUnknown, AskWithdrawn
from hatp.store import AskKind, AskRow, AskState

__all__ = ["approval_result", "of_kind", "question_result"]


#: Which method polls which kind of ask.
_POLLED_WITH = {
    AskKind.APPROVAL: "poll",
    AskKind.CALL: "poll_call",
    AskKind.QUESTION: "poll_question",
}


def of_kind(row: AskRow, kind: AskKind) -> AskRow:
    """``row``, if it is an ask of ``kind``; else AskUnknown, naming the method to poll it with."""
    if row.kind is not kind:
        raise AskUnknown(
            f"ask {row.ask_id} is a {row.kind.value} ask, not a {kind.value} ask; poll it "
            f"with {_POLLED_WITH[row.kind]}",
            ask_id=row.ask_id,
        )
    return row


def approval_result(row: AskRow) -> dict[str, Any]:
    """The final Approval (CallApproval) of an approval or call ask, else its pending vote."""
    result: dict[str, Any] = row.doc["result"] or row.doc["pending"]
    return result


def question_result(row: AskRow) -> dict[str, Any]:
    """The signed Answer of a question, else its pending vote; AskWithdrawn if it closed
    unanswered."""
    if row.state is AskState.WITHDRAWN:
        reason = row.doc.get("closedReason", "withdrawn")
        raise AskWithdrawn(
            f"question {row.txn_id} was withdrawn unanswered: {reason}; ask it again "
            "with a later decideBy or another address",
            ask_id=row.ask_id,
            reason=reason,
        )
    result: dict[str, Any] = row.doc["result"] or row.doc["pending"]
    return result
