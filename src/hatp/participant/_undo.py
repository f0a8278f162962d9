"""Taking a committed step back: the undo offer a commit signs, and the undo branch that uses it.

At commit the SDK asks the operation how its commit can be undone
(:meth:`Operation.undo_terms`) and signs the answer into the commit receipt as
``undo`` [PART-UNDO-OFFER]. An undo plan's branch names the step it takes back in
``undoes``; when it is prepared here, the SDK locks that step's row, checks it is
committed here, offered exactly this undo, has not lapsed and is not being (or
been) taken back by another undo, and claims it (``undone_by``) in the same store
transaction as the undo operation's prepare [PART-UNDO-ONCE]. The undo's commit
marks the step compensated; its abort, or its hold's release, frees the claim.

A compensate-tier step is taken back by :class:`Compensation`, the operation every
participant offers as :data:`~hatp.model.COMPENSATION`: a hold whose prepare
places nothing but the claim and whose commit runs the step's ``compensate``
with its undo token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy import Connection

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.errors import OutcomeConflict
from hatp.model import (
    COMPENSATION,
    Branch,
    BranchState,
    Certainty,
    EffectPreview,
    Tier,
    UndoKind,
    UndoOffer,
)
from hatp.participant._effects import change, observed, preview
from hatp.participant._operation import (
    Committed,
    NotUndoable,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Undoing,
    Work,
    prepared_from_json,
)
from hatp.store import BranchRow, BranchStore

if TYPE_CHECKING:  # _handlers imports this module: the type only, for the checker
    from hatp.participant._handlers import PlanCache

__all__ = [
    "Compensation",
    "Original",
    "claim",
    "fee_problem",
    "offer_for",
    "open_original",
    "settle",
    "undo_only",
]


class Compensation(Operation):
    """Takes back a compensate-tier step with its undo token (tier hold: the claim on the
    step is what its prepare places; its commit compensates)."""

    name = COMPENSATION
    tier = Tier.HOLD

    def __init__(self, operations: Mapping[str, Operation]) -> None:
        self._operations = operations

    def prepare(self, work: Work) -> Prepared:
        undoing = _undoing(work)
        return Prepared(
            cost=undoing.offer.fee,
            lease_seconds=self.max_lease_seconds,
            preview=_compensation_preview(undoing),
        )

    def quote(self, work: Work) -> Quoted:
        undoing = _undoing(work)
        return Quoted(cost=undoing.offer.fee, preview=_compensation_preview(undoing))

    def commit(self, work: Work) -> Committed:
        undoing = _undoing(work)
        step = undoing.original
        self._operations[step.branch.operation].compensate(step, undoing.undo_token or "")
        return Committed(
            effect={
                "compensated": {"txnId": step.txn_id, "branchId": step.branch.branch_id},
                "undid": undoing.effect,
            },
            observed=observed(_compensation_preview(undoing).changes),
        )

    def abort(self, work: Work) -> None:
        return None  # the claim is freed by the SDK; nothing else was placed

    def undo_terms(self, work: Work, committed: Committed) -> Undo | NotUndoable:
        return NotUndoable("a compensation is not itself undone: plan the step again")


def _compensation_preview(undoing: Undoing) -> EffectPreview:
    """What the compensation will do: the step's own compensate, on what its commit did
    (predicted: the step's operation, not the SDK, knows the exact change)."""
    step = undoing.original
    what = ", ".join(f"{k} {v}" for k, v in sorted(undoing.effect.items())) or "its effect"
    return preview(
        Certainty.PREDICTED,
        [change(f"step {step.branch.branch_id} of {step.txn_id}", "compensate", before=what)],
        summary=f"{step.branch.operation} compensated: takes back {what}"[:200],
    )


def _undoing(work: Work) -> Undoing:
    if work.undoing is None:  # the SDK runs this operation only in undo branches
        raise Refuse("NOT_AN_UNDO", f"{COMPENSATION} runs only in an undo plan's branch")
    return work.undoing


def offer_for(
    operation: Operation,
    work: Work,
    committed: Committed,
    operations: Mapping[str, Operation],
    now: datetime,
) -> UndoOffer:
    """The undo offer a commit of ``operation`` signs into its receipt [PART-UNDO-OFFER]."""
    terms = operation.undo_terms(work, committed)
    if isinstance(terms, NotUndoable):
        return UndoOffer(kind=UndoKind.NOT_UNDOABLE, reason=terms.reason[:1000])
    if operation.inverse is not None:
        inverse = operations[operation.inverse]
        kind, name, tier = UndoKind.INVERSE, inverse.name, inverse.tier
    elif operation.tier is Tier.COMPENSATE:
        kind, name, tier = UndoKind.COMPENSATE, COMPENSATION, Tier.HOLD
    else:
        return UndoOffer(
            kind=UndoKind.NOT_UNDOABLE,
            reason=f"{operation.name} offered undo terms but declares no inverse operation",
        )
    undo_by = None
    if terms.undo_seconds is not None:
        undo_by = format_time(now + timedelta(seconds=terms.undo_seconds))
    return UndoOffer(
        kind=kind,
        operation=name,
        tier=tier,
        args=terms.args,
        fee=terms.fee,
        refund=terms.refund,
        undo_by=undo_by,
    )


class Original:
    """The committed step an undo branch takes back: its locked row and what it offered."""

    def __init__(self, row: BranchRow, offer: UndoOffer, undoing: Undoing) -> None:
        self.row = row
        self.offer = offer
        self.undoing = undoing


def open_original(
    conn: Connection,
    branches: BranchStore,
    participant_id: str,
    me: BranchRow,
    branch: Branch,
    plans: PlanCache,
    now: datetime,
    *,
    checking: bool,
) -> Original:
    """Lock and read the step ``branch`` takes back (in the caller's store transaction).

    ``checking`` (a prepare): refuse with :class:`Refuse` when the step cannot be
    taken back now: ``NOT_COMMITTED``, ``NOT_UNDOABLE``, ``UNDO_MISMATCH``,
    ``UNDO_LAPSED``, ``ALREADY_UNDONE``, ``UNDO_PENDING`` [PART-UNDO-ONCE]. Otherwise
    (a commit or abort of an undo branch that holds the claim) only read it.
    """
    ref = branch.undoes
    if ref is None:  # pragma: no cover - callers pass undo branches only
        raise TypeError("not an undo branch")
    row = branches.lock(conn, participant_id, ref.txn_id, ref.branch_id)
    step = f"step {ref.branch_id!r} of {ref.txn_id}"
    if checking:
        _check_open(row, step, _claimant(me), branches, conn, participant_id)
    offer = _offer(row, step) if checking else _stored_offer(row)
    if checking:
        _check_offer(offer, branch, step, now)
    if row.plan is None or row.plan_digest is None:  # pragma: no cover - committed rows have it
        raise Refuse("NOT_COMMITTED", f"{step} was never prepared here")
    plan = plans.get(row.plan_digest, row.plan)
    original = Work(
        conn,
        participant_id,
        row.txn_id,
        plan.branch(row.branch_id),
        plan,
        row.plan_digest,
        now,
        None if row.prepared is None else prepared_from_json(row.prepared),
    )
    effect = (row.outcome_receipt or {}).get("effect") or {}
    undoing = Undoing(original, offer, dict(effect), row.undo_token)
    return Original(row, offer, undoing)


def _claimant(me: BranchRow) -> str:
    return f"{me.txn_id}/{me.branch_id}"


def _check_open(
    row: BranchRow,
    step: str,
    me: str,
    branches: BranchStore,
    conn: Connection,
    participant_id: str,
) -> None:
    if row.state is BranchState.COMPENSATED and _checks.is_on("PART-UNDO-ONCE"):
        by = f" by {row.undone_by}" if row.undone_by else ""
        raise Refuse("ALREADY_UNDONE", f"{step} was already taken back{by}")
    if row.state not in (BranchState.COMMITTED, BranchState.COMPENSATED):
        raise Refuse("NOT_COMMITTED", f"{step} is {row.state.value} here, not committed")
    if row.undone_by in (None, me) or not _checks.is_on("PART-UNDO-ONCE"):
        return
    txn_id, _, branch_id = row.undone_by.partition("/")
    other = branches.read(conn, participant_id, txn_id, branch_id)
    if other is not None and other.state in (BranchState.PREPARED, BranchState.COMMITTED):
        raise Refuse(
            "UNDO_PENDING", f"{step} is being taken back by undo {row.undone_by}, still open"
        )


def _offer(row: BranchRow, step: str) -> UndoOffer:
    wire = (row.outcome_receipt or {}).get("undo")
    if wire is None:
        raise Refuse("NOT_UNDOABLE", f"{step} was committed without an undo offer")
    return UndoOffer.model_validate(wire)


def _stored_offer(row: BranchRow) -> UndoOffer:
    try:
        return UndoOffer.model_validate((row.outcome_receipt or {}).get("undo"))
    except ValidationError:  # pragma: no cover - a claimed step's offer was checked
        return UndoOffer(kind=UndoKind.NOT_UNDOABLE, reason="no undo offer")


def _check_offer(offer: UndoOffer, branch: Branch, step: str, now: datetime) -> None:
    if not offer.undoable:
        raise Refuse("NOT_UNDOABLE", f"{step} cannot be taken back: {offer.reason}")
    if (offer.operation, offer.tier) != (branch.operation, branch.tier):
        tier = None if offer.tier is None else offer.tier.value
        raise Refuse(
            "UNDO_MISMATCH",
            f"{step} is taken back by {offer.operation} (tier {tier}), not by "
            f"{branch.operation} (tier {branch.tier.value}); use its signed undo offer",
        )
    if offer.undo_by is not None and parse_time(offer.undo_by) < now:
        raise Refuse("UNDO_LAPSED", f"{step}'s undo offer lapsed at {offer.undo_by}")


def claim(conn: Connection, branches: BranchStore, original: Original, me: BranchRow) -> None:
    """Claim the step for the undo branch ``me`` (its prepare voted yes)."""
    row = original.row
    claimed = replace(row, undone_by=_claimant(me))
    branches.save(conn, claimed, locked=row)
    original.row = claimed


def settle(
    conn: Connection, branches: BranchStore, original: Original, me: BranchRow, *, undone: bool
) -> None:
    """The undo branch ``me`` committed (the step is taken back: compensated) or ended
    without committing (the claim is freed). Raises :class:`OutcomeConflict` if another
    undo holds the claim."""
    row = original.row
    mine = _claimant(me)
    if row.undone_by not in (None, mine):
        raise OutcomeConflict(
            f"step {row.branch_id!r} of {row.txn_id} is claimed by undo {row.undone_by}, "
            f"not {mine}; nothing was done",
            txn_id=me.txn_id,
            branch_id=me.branch_id,
            state=row.state.value,
        )
    if undone:
        settled = replace(row, state=BranchState.COMPENSATED, undone_by=mine)
    elif row.undone_by == mine:
        settled = replace(row, undone_by=None)
    else:
        return
    branches.save(conn, settled, locked=row)
    original.row = settled


def undo_only(operations: Mapping[str, Operation]) -> frozenset[str]:
    """The operations that run only in undo branches: every declared inverse, and
    :data:`~hatp.model.COMPENSATION`."""
    return frozenset(
        {COMPENSATION} | {op.inverse for op in operations.values() if op.inverse is not None}
    )


def fee_problem(prepared: Prepared, offer: UndoOffer) -> str | None:
    """Why an undo branch's prepare breaks the step's signed offer, or ``None``: it
    charges more than the fee the offer signed [PART-UNDO-OFFER]."""
    cost, fee = prepared.cost, offer.fee
    if cost is None or not cost.decimal > 0 or not _checks.is_on("PART-UNDO-OFFER"):
        return None
    if fee is None or cost.currency != fee.currency or cost.decimal > fee.decimal:
        signed = "no fee" if fee is None else str(fee)
        return f"FEE_ABOVE_OFFER: it costs {cost} but the step's undo offer signed {signed}"
    return None
