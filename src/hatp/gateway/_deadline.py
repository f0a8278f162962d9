"""An ask's deadline: the signed pending vote that names it, and moving it earlier.

The coordinator may have to hear from people sooner than the plan's
``decideBy``: its holds end first. It tells the gateway the approval deadline
now in force, and the gateway moves the ask's ``decideBy`` there
([GW-TIGHTEN]). Everything that reads the deadline reads it from the ask's
state, so the ask is then withdrawn, and late votes refused, at the new
deadline exactly as at the old one ([GW-DEADLINE], [GW-VOTE-LATE]).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.evidence import SigningKey, sign
from hatp.gateway._ask import AskDoc
from hatp.model import PendingVote
from hatp.store import AskRow, AskState
from hatp.version import PROTOCOL_VERSION

__all__ = ["deadline", "pending_vote", "tighten"]


def deadline(row: AskRow) -> datetime:
    """The deadline in force for ``row``: its state's ``decideBy`` (which a tighten may
    have moved since the ask was created)."""
    return parse_time(row.doc["decideBy"])


def pending_vote(
    doc: Mapping[str, Any], gateway_id: str, key: SigningKey, now: datetime
) -> dict[str, Any]:
    """The gateway's signed PendingVote for the ask ``doc``, naming its ``decideBy``."""
    signed = sign(
        {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "pending",
            "askId": doc["askId"],
            "txnId": doc["txnId"],
            "planDigest": doc["planDigest"],
            "groupId": doc["groupId"],
            "gateway": gateway_id,
            "decideBy": doc["decideBy"],
            "time": format_time(now),
        },
        key,
    )
    PendingVote.model_validate(signed)
    return signed


def tighten(work: AskDoc, decide_by: datetime) -> bool:
    """Move the open ask's deadline to ``decide_by`` if that is earlier ([GW-TIGHTEN]);
    return whether it moved.

    A later time, or the same one, leaves the ask as it is: a deadline is only
    ever tightened. The pending vote is signed anew with the new deadline. A
    deadline already past withdraws the ask at once ([GW-DEADLINE]). A closed
    ask stays as it is.

    Raises:
        ValueError: ``decide_by`` has no time zone.
    """
    moved = parse_time(format_time(decide_by))  # wire times have milliseconds
    if work.doc["state"] != AskState.OPEN.value or moved == work.decide_by:
        return False
    if moved > work.decide_by and _checks.is_on("GW-TIGHTEN"):  # never later
        return False
    ctx = work.ctx
    work.doc["decideBy"] = format_time(moved)
    work.doc["pending"] = pending_vote(work.doc, ctx.gateway_id, ctx.key, ctx.now)
    if ctx.now > work.decide_by:
        work.expire()
    return True
