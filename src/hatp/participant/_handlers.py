"""What each call does to a branch in each state: one table per call.

Every handler runs inside the caller's store transaction with the branch row
locked (the ``_txn`` convention: it never commits). It returns the receipt,
raises to roll everything back, or returns a :class:`HoldExpired` to raise
once the release it made has committed.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.errors import (
    HoldExpired,
    NotPrepared,
    NotRenewable,
    OutcomeConflict,
    PlanInvalid,
    RenewalDeclined,
    UndoInvalid,
)
from hatp.evidence import SigningKey
from hatp.model import Branch, BranchState, Plan, Preconditions, Tier, Vote, parse_plan
from hatp.participant._effects import no_preview
from hatp.participant._operation import (
    Operation,
    Prepared,
    Refuse,
    Undoing,
    Work,
    prepared_from_json,
    prepared_to_json,
)
from hatp.participant._receipts import Signer
from hatp.participant._rules import check_preconditions, cost_problem, lease, renewed_lease
from hatp.participant._undo import Original, claim, fee_problem, offer_for, open_original, settle
from hatp.store import BranchRow, BranchStore

Method = Literal["prepare", "commit", "abort", "compensate", "renew", "quote", "replace"]
Result = dict[str, Any] | HoldExpired
Handler = Callable[["Call"], Result]

#: The ``reason`` in the effect of an abort receipt that released an expired hold.
EXPIRED = "HOLD_EXPIRED"


@dataclass(frozen=True)
class Request:
    """What the caller sent, beyond (txnId, branchId, fence)."""

    method: Method
    plan: Plan | None = None
    branch: Branch | None = None
    operation: Operation | None = None
    plan_digest: str | None = None
    preconditions: Preconditions | None = None
    undo_token: str | None = None
    attempt: int | None = None
    #: ``plan``'s wire form, the one ``plan_digest`` was computed over (``None``: not made).
    plan_wire: dict[str, Any] | None = None


class PlanCache:
    """Plans parsed before, by plan digest, so a commit does not parse its stored plan again.

    The stored plan stays the source of truth: an entry is only ever the
    parse of the plan whose digest is its key, and a plan not (or no longer)
    here is parsed from the row. Safe to share between worker threads.
    """

    def __init__(self, size: int = 256) -> None:
        self._plans: OrderedDict[str, Plan] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, plan_digest: str, stored: dict[str, Any]) -> Plan:
        """Return the plan with this digest: the one kept, or ``stored`` parsed (and kept).

        Raises:
            PlanInvalid: ``stored`` is parsed and is not a valid plan.
        """
        with self._lock:
            plan = self._plans.get(plan_digest)
        if plan is None:
            plan = parse_plan(stored)
            self.put(plan_digest, plan)
        return plan

    def put(self, plan_digest: str, plan: Plan) -> None:
        """Keep ``plan``, whose digest is ``plan_digest``; the least recently kept goes first."""
        with self._lock:
            self._plans[plan_digest] = plan
            self._plans.move_to_end(plan_digest)
            while len(self._plans) > self._size:
                self._plans.popitem(last=False)


@dataclass
class Call:
    """One call on one locked branch row, inside one store transaction."""

    key: SigningKey
    operations: Mapping[str, Operation]
    branches: BranchStore
    conn: Connection
    row: BranchRow
    now: datetime
    fence: int
    request: Request
    plans: PlanCache = field(default_factory=PlanCache)
    #: An undo branch's step, once :meth:`original_for` has locked it.
    original: Original | None = None

    def save(self, **changes: Any) -> None:
        """Update the row; the fence only ever grows [PART-FENCE]."""
        before = self.row
        self.row = replace(before, fence=max(before.fence, self.fence), **changes)
        self.branches.save(self.conn, self.row, locked=before)

    def signer(self) -> Signer:
        return Signer(
            self.key,
            self.row.participant_id,
            self.row.txn_id,
            self.row.branch_id,
            self.fence,
            self.now,
        )

    def stored(self) -> tuple[Operation, Work]:
        """The operation and the work of a branch this participant prepared."""
        if self.row.plan is None or self.row.plan_digest is None:
            raise NotPrepared(
                f"branch {self.row.branch_id!r} of {self.row.txn_id!r} was never prepared here",
                txn_id=self.row.txn_id,
                branch_id=self.row.branch_id,
                state=self.row.state.value,
            )
        plan = self.plans.get(self.row.plan_digest, self.row.plan)
        branch = plan.branch(self.row.branch_id)
        operation = self.operations.get(branch.operation)
        if operation is None:
            raise PlanInvalid(
                "UNKNOWN_OPERATION",
                f"operation {branch.operation!r} of a prepared branch is no longer offered; "
                "register it again to finish the branch",
                txn_id=self.row.txn_id,
                branch_id=self.row.branch_id,
                operation=branch.operation,
            )
        prepared = None if self.row.prepared is None else prepared_from_json(self.row.prepared)
        undoing = None
        if branch.undoes is not None:
            undoing = self.original_for(branch, checking=False).undoing
        return operation, self.work(plan, branch, self.row.plan_digest, prepared, undoing)

    def work(
        self,
        plan: Plan,
        branch: Branch,
        plan_digest: str,
        prepared: Prepared | None,
        undoing: Undoing | None = None,
    ) -> Work:
        return Work(
            self.conn,
            self.row.participant_id,
            self.row.txn_id,
            branch,
            plan,
            plan_digest,
            self.now,
            prepared,
            undoing,
        )

    def original_for(self, branch: Branch, *, checking: bool) -> Original:
        """Lock the step the undo branch ``branch`` takes back; with ``checking`` (a
        prepare or quote), refuse with :class:`Refuse` if it cannot be taken back now."""
        self.original = open_original(
            self.conn,
            self.branches,
            self.row.participant_id,
            self.row,
            branch,
            self.plans,
            self.now,
            checking=checking,
        )
        return self.original

    def settle_original(self, *, undone: bool) -> None:
        """An undo branch committed (``undone``) or ended otherwise: mark its step."""
        if self.original is not None:
            settle(self.conn, self.branches, self.original, self.row, undone=undone)

    def conflict(self, why: str | None = None, rule: str = "PART-ORDER") -> OutcomeConflict:
        """Refuse a request that contradicts the branch's outcome (the caller flags it)."""
        state, requested = self.row.state.value, self.request.method
        return OutcomeConflict(
            why
            or f"branch {self.row.branch_id!r} of {self.row.txn_id!r} is already {state}; "
            f"{requested} refused and flagged (an outcome is never flipped)",
            txn_id=self.row.txn_id,
            branch_id=self.row.branch_id,
            state=state,
            requested=requested,
            rule=rule,
        )

    def not_prepared(self) -> NotPrepared:
        return NotPrepared(
            f"branch {self.row.branch_id!r} of {self.row.txn_id!r} was never prepared here; "
            f"prepare it before {self.request.method}",
            txn_id=self.row.txn_id,
            branch_id=self.row.branch_id,
            state=self.row.state.value,
            requested=self.request.method,
        )


# --- savepoints ----------------------------------------------------------------------------

#: The savepoint an operation's own writes run under (apart from SQLAlchemy's ``sa_savepoint_N``).
_SAVEPOINT = "hatp_operation"


@contextlib.contextmanager
def undone_on_refusal(conn: Connection) -> Iterator[None]:
    """Run the block in a savepoint of ``conn``'s transaction, rolled back if it raises
    :class:`Refuse` (which then propagates): what an operation wrote before voting no
    is undone, and the rest of the transaction is kept.

    Any other exception rolls the whole transaction back, the savepoint with it.
    The three statements are fixed SQL, with no parameters and no result, so they
    run on the DB-API cursor: ``Connection.begin_nested`` costs two statement
    executions' worth of SQLAlchemy machinery on every prepare, more than the rest
    of the call's bookkeeping. Written by hand for that reason only; a driver
    error surfaces from the store's transaction as ``StoreUnavailable``.
    """
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            yield
        except Refuse:
            cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
            cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            raise
        cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    finally:
        cursor.close()


# --- prepare -------------------------------------------------------------------------------


def _prepare_new(call: Call) -> Result:
    req = call.request
    if req.plan is None or req.branch is None or req.operation is None or req.plan_digest is None:
        raise TypeError("prepare needs the plan, branch, operation and digest")
    return place(call, req.plan, req.branch, req.operation, req.plan_digest)


def place(
    call: Call,
    plan: Plan,
    branch: Branch,
    operation: Operation,
    plan_digest: str,
    *,
    attempt: int = 1,
) -> dict[str, Any]:
    """Run the operation's prepare, store the vote and return its receipt.

    The prepare of a branch is attempt 1; a lost hold placed again is the
    next attempt [PART-REPLACE]. Either way the new vote replaces whatever
    the row held: state, receipt, lease, and any outcome.
    """
    sign = call.signer()
    wire = call.request.plan_wire if call.request.plan is plan else None
    kept = {
        "tier": operation.tier,
        "plan_digest": plan_digest,
        "plan": plan.to_wire() if wire is None else wire,
        "outcome_receipt": None,
    }
    no = {"state": BranchState.REFUSED, "prepared": None, "lease_expires_at": None, **kept}
    try:
        with undone_on_refusal(call.conn):
            undoing = None
            if branch.undoes is not None:  # the step must be open to undo [PART-UNDO-ONCE]
                undoing = call.original_for(branch, checking=True).undoing
            work = call.work(plan, branch, plan_digest, None, undoing)
            prepared = operation.prepare(work)
    except Refuse as refusal:
        receipt = sign.prepare(
            plan_digest, operation.tier, Vote.NO, reason=str(refusal), attempt=attempt
        )
        call.save(prepare_receipt=receipt, **no)
        return receipt
    problem = cost_problem(branch, prepared.cost)
    if problem is None and work.undoing is not None:
        problem = fee_problem(prepared, work.undoing.offer)
    if problem is not None:
        operation.abort(replace(work, prepared=prepared))  # release what it placed [PART-COST]
        receipt = sign.prepare(
            plan_digest,
            operation.tier,
            Vote.NO,
            reason=problem,
            cost=prepared.cost,
            attempt=attempt,
        )
        call.save(prepare_receipt=receipt, **no)
        return receipt
    lease_expires_at = hold_horizon = None
    if operation.tier is Tier.HOLD:
        lease_expires_at, hold_horizon = lease(operation, prepared.lease_seconds, call.now)
    receipt = sign.prepare(
        plan_digest,
        operation.tier,
        Vote.YES,
        lease_expires_at=lease_expires_at,
        hold_horizon=hold_horizon,
        preconditions=prepared.preconditions,
        cost=prepared.cost,
        preview=prepared.preview or no_preview(operation),
        attempt=attempt,
    )
    call.save(
        state=BranchState.PREPARED,
        prepared=prepared_to_json(prepared),
        prepare_receipt=receipt,
        lease_expires_at=lease_expires_at,
        **kept,
    )
    if call.original is not None:
        claim(call.conn, call.branches, call.original, call.row)
    call.plans.put(plan_digest, plan)
    return receipt


def _prepare_repeat(call: Call) -> Result:
    if call.row.plan_digest != call.request.plan_digest and _checks.is_on("PART-PLAN"):
        raise call.conflict(
            f"branch {call.row.branch_id!r} of {call.row.txn_id!r} was already prepared under "
            f"plan digest {call.row.plan_digest}, not {call.request.plan_digest}; "
            "a changed plan needs a new txnId",
            rule="PART-PLAN",
        )
    if call.row.prepare_receipt is None:
        raise call.not_prepared()
    return call.row.prepare_receipt


def _prepare_after_abort(call: Call) -> Result:
    if call.row.plan_digest is not None:
        return _prepare_repeat(call)  # aborted after its prepare: the vote stands
    if not _checks.is_on("PART-ORDER"):
        return _prepare_new(call)
    raise call.conflict(
        f"branch {call.row.branch_id!r} of {call.row.txn_id!r} was aborted before it was "
        "prepared; it can no longer be prepared (start a new transaction)"
    )


PREPARE: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: _prepare_new,
    BranchState.PREPARED: _prepare_repeat,
    BranchState.REFUSED: _prepare_repeat,
    BranchState.COMMITTED: _prepare_repeat,
    BranchState.COMPENSATED: _prepare_repeat,
    BranchState.ABORTED: _prepare_after_abort,
}


# --- commit --------------------------------------------------------------------------------


def _commit_prepared(call: Call) -> Result:
    row = call.row
    if call.request.plan_digest != row.plan_digest and _checks.is_on("PART-PLAN"):
        raise call.conflict(
            f"branch {row.branch_id!r} of {row.txn_id!r} was prepared under plan digest "
            f"{row.plan_digest}, not {call.request.plan_digest}; nothing was committed",
            rule="PART-PLAN",
        )
    if (
        row.tier is Tier.HOLD
        and row.lease_expires_at is not None
        and row.lease_expires_at <= call.now
        and _checks.is_on("PART-HOLD")
    ):
        release_expired(call)
        return hold_expired(call, format_time(row.lease_expires_at))
    operation, work = call.stored()
    where = {"txn_id": row.txn_id, "branch_id": row.branch_id}
    seen = work.prepared.preconditions if work.prepared else None
    check_preconditions(seen, call.request.preconditions, source="request", **where)
    current = operation.preconditions(work)
    if current is not None:
        check_preconditions(seen, current, source="target", **where)
    committed = operation.commit(work)
    call.settle_original(undone=True)
    token = None
    if operation.tier is Tier.COMPENSATE:
        token = committed.undo_token or secrets.token_urlsafe(32)
    receipt = call.signer().outcome(
        "commit",
        row.plan_digest,
        BranchState.COMMITTED,
        undo_token=token,
        effect=committed.effect,
        observed=committed.observed,
        undo=offer_for(operation, work, committed, call.operations, call.now),
    )
    call.save(state=BranchState.COMMITTED, outcome_receipt=receipt, undo_token=token)
    return receipt


def release_expired(call: Call) -> dict[str, Any]:
    """Release a hold whose lease ended; store and return the abort receipt [PART-HOLD]."""
    operation, work = call.stored()
    operation.abort(work)
    call.settle_original(undone=False)
    ended = None if call.row.lease_expires_at is None else format_time(call.row.lease_expires_at)
    receipt = call.signer().outcome(
        "abort",
        call.row.plan_digest,
        BranchState.ABORTED,
        effect={"reason": EXPIRED, "leaseExpiresAt": ended},
    )
    call.save(state=BranchState.ABORTED, outcome_receipt=receipt)
    return receipt


def hold_expired(call: Call, ended: str | None) -> HoldExpired:
    """The refusal of a commit or renew whose hold was released when its lease ended."""
    row = call.row
    return HoldExpired(
        f"the hold on branch {row.branch_id!r} of {row.txn_id!r} ended at {ended}; "
        f"it was released, and this {call.request.method} did nothing",
        txn_id=row.txn_id,
        branch_id=row.branch_id,
        lease_expires_at=ended,
        now=format_time(call.now),
    )


def _released_at_expiry(call: Call) -> HoldExpired | None:
    """For an aborted branch: the refusal to repeat if its hold was released as expired."""
    effect = (call.row.outcome_receipt or {}).get("effect") or {}
    if effect.get("reason") != EXPIRED:
        return None
    return hold_expired(call, effect.get("leaseExpiresAt"))


def _commit_repeat(call: Call) -> Result:
    if call.request.plan_digest != call.row.plan_digest and _checks.is_on("PART-PLAN"):
        raise call.conflict(
            f"branch {call.row.branch_id!r} of {call.row.txn_id!r} was committed under plan "
            f"digest {call.row.plan_digest}, not {call.request.plan_digest}",
            rule="PART-PLAN",
        )
    if call.row.outcome_receipt is None:  # pragma: no cover - a committed row has its receipt
        raise call.not_prepared()
    return call.row.outcome_receipt


def _commit_after_abort(call: Call) -> Result:
    expired = _released_at_expiry(call)
    if expired is not None:
        raise expired
    # Aborted before prepare there is nothing to commit, switch or no switch.
    if call.row.plan is None or _checks.is_on("PART-ORDER"):
        raise call.conflict()
    return _commit_prepared(call)


def _commit_compensated(call: Call) -> Result:
    raise call.conflict()


def _commit_refused(call: Call) -> Result:
    raise call.conflict(
        f"branch {call.row.branch_id!r} of {call.row.txn_id!r} voted no; it cannot be committed"
    )


def never_prepared(call: Call) -> Result:
    """Commit, compensate, renew or replace of a branch this participant never prepared."""
    raise call.not_prepared()


COMMIT: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: never_prepared,
    BranchState.PREPARED: _commit_prepared,
    BranchState.REFUSED: _commit_refused,
    BranchState.COMMITTED: _commit_repeat,
    BranchState.ABORTED: _commit_after_abort,
    BranchState.COMPENSATED: _commit_compensated,
}


# --- abort ---------------------------------------------------------------------------------


def _abort_unprepared(call: Call) -> Result:
    # Remembered, so that a prepare arriving late is refused [PART-ORDER].
    receipt = call.signer().outcome("abort", None, BranchState.ABORTED)
    call.save(state=BranchState.ABORTED, outcome_receipt=receipt)
    return receipt


def _abort_prepared(call: Call) -> Result:
    operation, work = call.stored()
    operation.abort(work)
    call.settle_original(undone=False)
    receipt = call.signer().outcome("abort", call.row.plan_digest, BranchState.ABORTED)
    call.save(state=BranchState.ABORTED, outcome_receipt=receipt)
    return receipt


def _abort_refused(call: Call) -> Result:
    # A no vote placed nothing (or released it at once): nothing to call.
    receipt = call.signer().outcome("abort", call.row.plan_digest, BranchState.ABORTED)
    call.save(state=BranchState.ABORTED, outcome_receipt=receipt)
    return receipt


def _abort_committed(call: Call) -> Result:
    if not _checks.is_on("PART-ORDER"):
        return _abort_prepared(call)
    raise call.conflict()


def _stored_outcome(call: Call) -> Result:
    if call.row.outcome_receipt is None:  # pragma: no cover - an ended row has its receipt
        raise call.not_prepared()
    return call.row.outcome_receipt


ABORT: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: _abort_unprepared,
    BranchState.PREPARED: _abort_prepared,
    BranchState.REFUSED: _abort_refused,
    BranchState.COMMITTED: _abort_committed,
    BranchState.ABORTED: _stored_outcome,
    BranchState.COMPENSATED: _stored_outcome,  # the undo already happened [PART-ORDER]
}


# --- compensate ----------------------------------------------------------------------------


def _check_token(call: Call) -> str:
    row, token = call.row, call.request.undo_token or ""
    if row.tier is not Tier.COMPENSATE:
        tier = row.tier.value if row.tier else "unknown"
        raise UndoInvalid(
            f"branch {row.branch_id!r} of {row.txn_id!r} is tier {tier}; "
            "only a compensate-tier commit can be undone",
            txn_id=row.txn_id,
            branch_id=row.branch_id,
            tier=tier,
        )
    issued = row.undo_token or ""
    if not secrets.compare_digest(token.encode(), issued.encode()) and _checks.is_on("PART-UNDO"):
        raise UndoInvalid(
            f"that is not the undo token branch {row.branch_id!r} of {row.txn_id!r} issued; "
            "send the undoToken from its commit receipt",
            txn_id=row.txn_id,
            branch_id=row.branch_id,
        )
    return token


def _compensate_committed(call: Call) -> Result:
    token = _check_token(call)
    if call.row.undone_by is not None:
        raise call.conflict(
            f"branch {call.row.branch_id!r} of {call.row.txn_id!r} is being taken back by "
            f"undo {call.row.undone_by}; compensate refused and flagged",
            rule="PART-UNDO-ONCE",
        )
    operation, work = call.stored()
    operation.compensate(work, token)
    receipt = call.signer().outcome("compensate", call.row.plan_digest, BranchState.COMPENSATED)
    call.save(state=BranchState.COMPENSATED, outcome_receipt=receipt)
    return receipt


def _compensate_repeat(call: Call) -> Result:
    _check_token(call)
    if call.row.undone_by is not None:  # taken back by an undo transaction, not by this token
        raise call.conflict(
            f"branch {call.row.branch_id!r} of {call.row.txn_id!r} was taken back by undo "
            f"{call.row.undone_by}; compensate refused and flagged",
            rule="PART-UNDO-ONCE",
        )
    return _stored_outcome(call)


def _compensate_uncommitted(call: Call) -> Result:
    raise call.conflict(
        f"branch {call.row.branch_id!r} of {call.row.txn_id!r} is {call.row.state.value}, "
        "not committed; there is nothing to compensate",
        rule="PART-UNDO",
    )


COMPENSATE: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: never_prepared,
    BranchState.PREPARED: _compensate_uncommitted,
    BranchState.REFUSED: _compensate_uncommitted,
    BranchState.ABORTED: _compensate_uncommitted,
    BranchState.COMMITTED: _compensate_committed,
    BranchState.COMPENSATED: _compensate_repeat,
}


# --- renew ---------------------------------------------------------------------------------


def _renew_prepared(call: Call) -> Result:
    row = call.row
    if row.tier is not Tier.HOLD:
        # A dry run placed nothing and has no lease: there is nothing to switch off.
        tier = row.tier.value if row.tier else "unknown"
        raise NotRenewable(
            f"branch {row.branch_id!r} of {row.txn_id!r} is tier {tier}, a dry run that holds "
            "nothing; only a hold-tier branch has a lease to renew. Nothing was done",
            txn_id=row.txn_id,
            branch_id=row.branch_id,
            tier=tier,
        )
    current, horizon = _lease_of(call)
    if current <= call.now and _checks.is_on("PART-RENEW"):
        release_expired(call)  # an ended lease is never revived [PART-RENEW]
        return hold_expired(call, format_time(current))
    operation, work = call.stored()
    asked = work.prepared.lease_seconds if work.prepared else None
    ends = renewed_lease(operation, asked, call.now, current, horizon)
    try:
        operation.renew(work)
    except Refuse as refusal:  # the provider would not extend it: the lease stands
        raise RenewalDeclined(
            f"{row.branch_id!r} of {row.txn_id!r}: the renewal was declined: {refusal}; "
            f"the hold stands until {format_time(current)}",
            txn_id=row.txn_id,
            branch_id=row.branch_id,
            reason=refusal.reason,
            leaseExpiresAt=format_time(current),
        ) from None
    # Saved in the call's transaction: durable before the receipt leaves.
    call.save(lease_expires_at=ends)
    return call.signer().renew(str(row.plan_digest), ends, horizon)


def _lease_of(call: Call) -> tuple[datetime, datetime]:
    """A prepared hold's current ``leaseExpiresAt`` and its ``holdHorizon``."""
    receipt = call.row.prepare_receipt or {}
    horizon = receipt.get("holdHorizon")
    current = call.row.lease_expires_at
    if current is None or horizon is None:  # pragma: no cover - prepare stores both for a hold
        raise call.not_prepared()
    return current, parse_time(horizon)


def _renew_after_abort(call: Call) -> Result:
    expired = _released_at_expiry(call)
    if expired is not None:
        raise expired
    raise call.conflict(rule="PART-RENEW")


def _renew_refused(call: Call) -> Result:
    raise call.conflict(
        f"branch {call.row.branch_id!r} of {call.row.txn_id!r} voted no; it holds nothing to renew",
        rule="PART-RENEW",
    )


def _renew_ended(call: Call) -> Result:
    raise call.conflict(rule="PART-RENEW")


RENEW: dict[BranchState, Handler] = {
    BranchState.UNKNOWN: never_prepared,
    BranchState.PREPARED: _renew_prepared,
    BranchState.REFUSED: _renew_refused,
    BranchState.COMMITTED: _renew_ended,
    BranchState.ABORTED: _renew_after_abort,
    BranchState.COMPENSATED: _renew_ended,
}
