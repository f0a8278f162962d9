"""The ``quote`` call: what a prepare of a branch would give now, placing nothing [PART-QUOTE].

Like every handler it runs inside the caller's store transaction with the
branch row locked; the operation's ``quote`` runs in a savepoint that is
always rolled back, so a quote has no effect whatever the operation writes.
The only change a quote makes is the one every call makes: a higher fence
is remembered [PART-FENCE].
"""

from __future__ import annotations

from hatp import _checks
from hatp.model import Branch, BranchState, Plan, Tier
from hatp.participant._effects import no_preview
from hatp.participant._handlers import Call, Handler, Result
from hatp.participant._operation import Operation, Quoted, Refuse
from hatp.participant._rules import hold_terms, valid_until


def _quote(call: Call) -> Result:
    req = call.request
    if req.plan is None or req.branch is None or req.operation is None or req.plan_digest is None:
        raise TypeError("quote needs the plan, branch, operation and digest")
    operation = req.operation
    quoted = _ask(call, operation, req.plan, req.branch, req.plan_digest)
    lease_seconds = hold_seconds = None
    if operation.tier is Tier.HOLD:
        lease_seconds, hold_seconds = hold_terms(operation)
    return call.signer().quote(
        req.plan_digest,
        operation.tier,
        cost=quoted.cost,
        valid_until=valid_until(call.now, quoted.valid_seconds),
        lease_seconds=lease_seconds,
        hold_seconds=hold_seconds,
        preview=quoted.preview or no_preview(operation),
    )


def _ask(call: Call, operation: Operation, plan: Plan, branch: Branch, plan_digest: str) -> Quoted:
    """The operation's quote; whatever it wrote is rolled back [PART-QUOTE]. An undo
    branch whose step cannot be taken back now quotes nothing: its prepare votes no."""
    savepoint = call.conn.begin_nested()
    try:
        undoing = None
        if branch.undoes is not None:
            undoing = call.original_for(branch, checking=True).undoing
        quoted = operation.quote(call.work(plan, branch, plan_digest, None, undoing))
    except Refuse:
        quoted = None  # a quote never votes: the prepare will
    finally:
        if _checks.is_on("PART-QUOTE"):
            savepoint.rollback()
        else:
            savepoint.commit()
    return quoted or Quoted()


#: A quote reads the operation, not the branch: it is answered in every state.
QUOTE: dict[BranchState, Handler] = dict.fromkeys(BranchState, _quote)
