"""The ``replace`` call: place a lost hold again under the same plan [PART-REPLACE].

A hold is lost when its lease ended: released at expiry (an abort receipt
whose effect says ``HOLD_EXPIRED``), or still prepared with its lease over
(released here first, in the same transaction). The operation's prepare runs
again, keyed as before by ``(txnId, branchId)``, and its vote is the
branch's new prepare receipt, attempt n + 1, with a lease and horizon from
now. The attempt makes the call idempotent: a replace asking for the attempt
the branch already has returns its stored receipt, so a lost answer can be
retried without placing twice.

Every handler runs inside the caller's store transaction with the branch row
locked (see :mod:`hatp.participant._handlers`).
"""

from __future__ import annotations

from typing import Any

from hatp import _checks
from hatp.clock import format_time
from hatp.errors import NotReplaceable
from hatp.model import BranchState, Tier
from hatp.participant._handlers import (
    EXPIRED,
    Call,
    Handler,
    Result,
    never_prepared,
    place,
    release_expired,
)


def _replace_prepared(call: Call) -> Result:
    stored = _repeat(call)
    if stored is not None:
        return stored
    attempt = _next_attempt(call)
    ended = call.row.lease_expires_at
    if ended is not None and ended <= call.now:
        release_expired(call)  # what sweep would have done, in this transaction [PART-HOLD]
    elif _checks.is_on("PART-REPLACE"):
        until = None if ended is None else format_time(ended)
        raise _not_replaceable(
            call,
            f"its hold is live until {until}: renew it, or commit it; only a lost hold is "
            "placed again",
            lease_expires_at=until,
        )
    else:
        operation, work = call.stored()
        operation.abort(work)  # a participant without the check: release, then place again
    return _place_again(call, attempt)


def _replace_aborted(call: Call) -> Result:
    if call.row.plan_digest is None:
        raise _not_replaceable(call, "it was aborted before it was ever prepared")
    stored = _repeat(call)
    if stored is not None:
        return stored
    effect = (call.row.outcome_receipt or {}).get("effect") or {}
    if effect.get("reason") != EXPIRED and _checks.is_on("PART-REPLACE"):
        raise _not_replaceable(
            call, "the coordinator aborted it: its hold was released on purpose, not lost"
        )
    return _place_again(call, _next_attempt(call))


def _replace_ended(call: Call) -> Result:
    stored = _repeat(call)
    if stored is not None:
        return stored
    why = {
        BranchState.REFUSED: "it voted no: it holds nothing to place again",
        BranchState.COMMITTED: "it committed: the hold became the effect",
        BranchState.COMPENSATED: "it committed and was compensated",
    }
    raise _not_replaceable(call, why.get(call.row.state, "it has ended"))


def _repeat(call: Call) -> dict[str, Any] | None:
    """Run the checks every replace of a prepared branch passes first, and return the
    stored receipt if the branch already has the attempt asked for [PART-IDEMPOTENT]."""
    row, attempt = call.row, _asked(call)
    if call.request.plan_digest != row.plan_digest and _checks.is_on("PART-PLAN"):
        raise call.conflict(
            f"branch {row.branch_id!r} of {row.txn_id!r} was prepared under plan digest "
            f"{row.plan_digest}, not {call.request.plan_digest}; a hold is only placed again "
            "under the plan it was prepared for",
            rule="PART-PLAN",
        )
    if attempt < 2:
        raise _not_replaceable(
            call,
            f"attempt {attempt} is not a replacement: the prepare is attempt 1",
            attempt=attempt,
        )
    if row.tier is not Tier.HOLD:
        tier = row.tier.value if row.tier else "unknown"
        raise _not_replaceable(call, f"it is tier {tier}, a dry run that holds nothing", tier=tier)
    receipt = row.prepare_receipt
    if receipt is not None and _attempt_of(receipt) == attempt:
        return receipt
    return None


def _next_attempt(call: Call) -> int:
    """The attempt asked for, if it is the one after the branch's last [PART-REPLACE]."""
    current, attempt = _attempt_of(call.row.prepare_receipt or {}), _asked(call)
    if attempt != current + 1:
        raise _not_replaceable(
            call,
            f"replace asks for attempt {attempt}, but the hold's last attempt is {current}; "
            f"ask for attempt {current + 1}",
            attempt=attempt,
            current=current,
        )
    return attempt


def _place_again(call: Call, attempt: int) -> dict[str, Any]:
    req = call.request
    if req.plan is None or req.branch is None or req.operation is None or req.plan_digest is None:
        raise TypeError("replace needs the plan, branch, operation and digest")
    return place(call, req.plan, req.branch, req.operation, req.plan_digest, attempt=attempt)


def _asked(call: Call) -> int:
    if call.request.attempt is None:
        raise TypeError("replace needs the attempt asked for")
    return call.request.attempt


def _attempt_of(receipt: dict[str, Any]) -> int:
    return int(receipt.get("attempt", 1))


def _not_replaceable(call: Call, why: str, **data: Any) -> NotReplaceable:
    row = call.row
    return NotReplaceable(
        f"branch {row.branch_id!r} of {row.txn_id!r} cannot be placed again: {why}. "
        "Nothing was done",
        txn_id=row.txn_id,
        branch_id=row.branch_id,
        state=row.state.value,
        requested="replace",
        rule="PART-REPLACE",
        **data,
    )


REPLACE: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: never_prepared,
    BranchState.PREPARED: _replace_prepared,
    BranchState.REFUSED: _replace_ended,
    BranchState.COMMITTED: _replace_ended,
    BranchState.ABORTED: _replace_aborted,
    BranchState.COMPENSATED: _replace_ended,
}
