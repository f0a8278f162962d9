"""The coordinator's undo journal: which undo transaction takes back each committed step.

A claim is written in the same database transaction as the undo transaction's
row in the decision log (:meth:`DecisionLog.create` with ``claims``), so an undo
transaction exists exactly when its claims do [UNDO-CLAIM]. A claim is never
deleted: it stands while its undo transaction is open or committed, and is void
once that transaction aborted, when a later undo may take the step over.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hatp.errors import UndoRefused
from hatp.model.txn import TxnState
from hatp.store._driver import DriverSession
from hatp.store._engine import insert_or_ignore
from hatp.store._schema import txn, undo_claim


@dataclass(frozen=True)
class UndoClaim:
    """One step's claim: the undo transaction taking it back, and where that one stands."""

    txn_id: str
    branch_id: str
    undo_txn_id: str
    state: TxnState | None

    @property
    def void(self) -> bool:
        """Whether the claim no longer holds: its undo transaction aborted (or is gone)."""
        return self.state is None or self.state is TxnState.ABORTED

    @property
    def undone(self) -> bool:
        """Whether its undo transaction committed: the step is taken back."""
        return self.state is TxnState.COMMITTED


_CLAIMS = (
    sa.select(undo_claim.c.branch_id, undo_claim.c.undo_txn_id, txn.c.state)
    .select_from(undo_claim.outerjoin(txn, txn.c.txn_id == undo_claim.c.undo_txn_id))
    .where(undo_claim.c.txn_id == sa.bindparam("txn_id"))
    .order_by(undo_claim.c.branch_id)
)
_CLAIM = _CLAIMS.where(undo_claim.c.branch_id == sa.bindparam("branch_id"))
# Taken over only from the claimant read: two undos racing for a void claim cannot both win.
_TAKE_OVER = (
    sa.update(undo_claim)
    .where(
        undo_claim.c.txn_id == sa.bindparam("k_txn_id"),
        undo_claim.c.branch_id == sa.bindparam("k_branch_id"),
        undo_claim.c.undo_txn_id == sa.bindparam("k_undo_txn_id"),
    )
    .returning(undo_claim.c.undo_txn_id)
)


@functools.cache
def _insert(dialect: str) -> sa.Insert:
    return insert_or_ignore(dialect, undo_claim).returning(undo_claim.c.undo_txn_id)


def claims_of(session: DriverSession, txn_id: str) -> dict[str, UndoClaim]:
    """Every claim on the steps of ``txn_id``, by step."""
    rows = session.execute(_CLAIMS, {"txn_id": txn_id}).all()
    return {row.branch_id: _claim(txn_id, row) for row in rows}


def _claim(txn_id: str, row: Any) -> UndoClaim:
    state = None if row.state is None else TxnState(row.state)
    return UndoClaim(txn_id, str(row.branch_id), str(row.undo_txn_id), state)


def claim_steps(
    session: DriverSession, undo_txn_id: str, txn_id: str, branch_ids: Sequence[str], at: int
) -> None:
    """Claim each step of ``txn_id`` for ``undo_txn_id``, in the caller's transaction.

    Steps are claimed in one order (by id), whatever order the caller gives: two undos
    claiming the same steps then wait for each other on PostgreSQL, never deadlock.

    Raises:
        UndoRefused: ``ALREADY_UNDONE`` or ``UNDO_PENDING``: a step's claim is held by
            another undo transaction, committed or still open; the caller's
            transaction must roll back (nothing is kept).
    """
    for branch_id in sorted(set(branch_ids)):
        _claim_step(session, undo_txn_id, txn_id, branch_id, at)


def _claim_step(
    session: DriverSession, undo_txn_id: str, txn_id: str, branch_id: str, at: int
) -> None:
    values = {
        "txn_id": txn_id,
        "branch_id": branch_id,
        "undo_txn_id": undo_txn_id,
        "claimed_at": at,
    }
    if session.execute(_insert(session.dialect), values).first() is not None:
        return
    while True:
        found = session.execute(_CLAIM, {"txn_id": txn_id, "branch_id": branch_id}).first()
        held = None if found is None else _claim(txn_id, found)
        if held is not None and held.undo_txn_id == undo_txn_id:
            return
        if held is None or not held.void:
            raise _held(txn_id, branch_id, held)
        took = session.execute(
            _TAKE_OVER,
            {
                "k_txn_id": txn_id,
                "k_branch_id": branch_id,
                "k_undo_txn_id": held.undo_txn_id,
                "undo_txn_id": undo_txn_id,
                "claimed_at": at,
            },
        ).first()
        if took is not None:
            return
        # Another undo took the void claim over first (its transaction has ended, so
        # this statement sees it): read the claim again, to refuse naming that one.


def _standing(held: UndoClaim | None) -> str:
    """Where the undo holding a claim stands, and what to do about it."""
    if held is not None and held.state is not None and held.state.finished:
        # Ended, but not whole: a person settles it (§13) before the step is free or undone.
        return f"which ended {held.state.value}; resolve it first"
    return "still open; wait for it to end"


def _held(txn_id: str, branch_id: str, held: UndoClaim | None) -> UndoRefused:
    if held is not None and held.undone:
        return UndoRefused(
            f"step {branch_id!r} of {txn_id} was already taken back by undo "
            f"{held.undo_txn_id}; nothing was begun",
            reason="ALREADY_UNDONE",
            txn_id=txn_id,
            branch_id=branch_id,
            undo_txn_id=held.undo_txn_id,
        )
    by = "another undo" if held is None else f"undo {held.undo_txn_id}"
    return UndoRefused(
        f"step {branch_id!r} of {txn_id} is claimed by {by}, {_standing(held)}; nothing was begun",
        reason="UNDO_PENDING",
        txn_id=txn_id,
        branch_id=branch_id,
        undo_txn_id=None if held is None else held.undo_txn_id,
    )
