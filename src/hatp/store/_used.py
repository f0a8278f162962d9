"""A tool server's used call approvals: each approval runs its call once.

Before a gated tool runs, the server claims the approval's id here
([STORE-USED-ONCE]). The claim is one ``INSERT .. ON CONFLICT DO NOTHING``
on the id, the table's primary key, so of any number of claims of one id,
from any threads and processes sharing the database, exactly one inserts the
row and goes on to run the tool; every other claim, then or later, gets the
row as the first claim stored it and refuses the call ([GATE-ONCE]). Once the
tool has run the server records how it ended (:meth:`UsedApprovals.finish`).
A row is kept until its approval has expired; only then may
:meth:`UsedApprovals.prune` delete it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa

from hatp.errors import ApprovalUnknown
from hatp.store._driver import DriverStatement
from hatp.store._engine import Store, insert_or_ignore
from hatp.store._schema import AnyRow, from_ms, to_ms, used_approval

__all__ = ["UseOutcome", "UsedApproval", "UsedApprovals"]


class UseOutcome(StrEnum):
    """How the call an approval was used for ended."""

    RAN = "ran"
    FAILED = "failed"


@dataclass(frozen=True)
class UsedApproval:
    """One used approval as the store holds it.

    ``server``, ``tool`` and ``call_digest`` name the call its first claim
    was for, and ``used_at`` when that claim was made. ``outcome``,
    ``detail`` and ``finished_at`` stay ``None`` until the call is recorded
    as finished (a claim whose process died while the tool ran stays so).
    """

    approval_id: str
    server: str
    tool: str
    call_digest: str
    used_at: datetime
    expires_at: datetime
    outcome: UseOutcome | None = None
    detail: str | None = None
    finished_at: datetime | None = None

    @classmethod
    def _from_row(cls, row: AnyRow) -> UsedApproval:
        return cls(
            approval_id=row.approval_id,
            server=row.server,
            tool=row.tool,
            call_digest=row.call_digest,
            used_at=from_ms(row.used_at),
            expires_at=from_ms(row.expires_at),
            outcome=None if row.outcome is None else UseOutcome(row.outcome),
            detail=row.detail,
            finished_at=None if row.finished_at is None else from_ms(row.finished_at),
        )


class UsedApprovals:
    """The approvals a tool server has used, kept in a :class:`Store`.

    Each method is one short transaction, committed (durably, [STORE-DURABLE])
    before it returns.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def claim(
        self,
        approval_id: str,
        *,
        server: str,
        tool: str,
        call_digest: str,
        expires_at: datetime,
        now: datetime,
    ) -> UsedApproval | None:
        """Claim the approval for one run of this call, or find it claimed before.

        Returns ``None`` when this call claimed the approval now: the claim is
        stored, and the caller runs the tool (once) and then calls
        :meth:`finish`. Returns the stored :class:`UsedApproval` when it was
        claimed before, by this process or any other, whatever call that claim
        named: the caller refuses the call as used. When several claims of one
        id race, exactly one returns ``None`` ([STORE-USED-ONCE]).

        Raises:
            ValueError: ``expires_at`` or ``now`` is naive (has no time zone);
                nothing was written.
            StoreUnavailable: the database failed. The claim was not made (or,
                if the connection broke during the commit, cannot be known to
                have been): do not run the tool.
        """
        values = {
            "approval_id": approval_id,
            "server": server,
            "tool": tool,
            "call_digest": call_digest,
            "used_at": _ms("now", now),
            "expires_at": _ms("expires_at", expires_at),
        }
        claim = _claim_statement(self._store.dialect)
        while True:
            # The hot path of every gated call: on the driver's cursor (see Store).
            with self._store.driver_transaction() as cursor:
                cursor.execute(claim.sql, claim.params(values))
                if cursor.fetchone() is not None:
                    return None
            # Not inserted: the row is there, committed by whoever got there first
            # (PostgreSQL's ON CONFLICT waits for a racing insert to commit).
            found = self.get(approval_id)
            if found is not None:
                return found
            # Between this insert and its read-back, PostgreSQL let a prune() delete
            # the row (it had expired). Claim again, as if the claim came after it.

    def finish(
        self, approval_id: str, outcome: UseOutcome, detail: str | None, now: datetime
    ) -> None:
        """Record how the call the approval was claimed for ended.

        The first outcome recorded stays: finishing an approval already
        finished changes nothing, whatever outcome it names (so a retried
        ``finish`` is harmless and a ``ran`` is never turned into ``failed``,
        nor the other way round).

        Raises:
            ValueError: ``now`` is naive, or ``outcome`` is not a
                :class:`UseOutcome` value; nothing was written.
            ApprovalUnknown: the approval was never claimed in this store (or its row
                was pruned after it expired); ``data.approval_id`` names it.
            StoreUnavailable: the database failed; nothing was written.
        """
        params = {
            "k_approval_id": approval_id,
            "outcome": UseOutcome(outcome).value,
            "detail": detail,
            "finished_at": _ms("now", now),
        }
        with self._store.transaction() as conn:
            done = conn.execute(_FINISH, params).first()
            if done is None:
                found = conn.execute(_GET, {"approval_id": approval_id}).first()
        if done is None and found is None:
            raise ApprovalUnknown(
                f"approval {approval_id} was never claimed in this store (or expired and "
                "was pruned); claim it before recording how its call ended",
                approval_id=approval_id,
            )

    def get(self, approval_id: str) -> UsedApproval | None:
        """Return the used approval, or ``None`` if it was never claimed here.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            found = conn.execute(_GET, {"approval_id": approval_id}).first()
        return None if found is None else UsedApproval._from_row(found)

    def prune(self, before: datetime) -> int:
        """Delete the approvals that expired before ``before``; return how many.

        A pruned approval can be claimed again, so ``before`` must be a time
        at which the server refuses those approvals as expired anyway: now
        minus the clock skew it allows, and minus a margin (a minute, say) for
        calls checked before the prune but not yet claimed.

        Raises:
            ValueError: ``before`` is naive; nothing was deleted.
            StoreUnavailable: the database failed; nothing was deleted.
        """
        params = {"before": _ms("before", before)}
        with self._store.transaction() as conn:
            return conn.execute(_PRUNE, params).rowcount


_CLAIMED = ("approval_id", "server", "tool", "call_digest", "used_at", "expires_at")


@functools.cache
def _claim_statement(dialect: str) -> DriverStatement:
    # RETURNING names the row only if this INSERT wrote it; a rowcount would not
    # do (through psycopg, SQLAlchemy reports -1 for an INSERT).
    insert = insert_or_ignore(dialect, used_approval).values(
        {name: sa.bindparam(name) for name in _CLAIMED}
    )
    return DriverStatement(dialect, insert.returning(used_approval.c.approval_id))


def _ms(name: str, moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(
            f"{name} must be timezone-aware, not the naive {moment.isoformat()}: "
            "pass the clock's now() or a datetime with tzinfo=UTC"
        )
    return to_ms(moment)


# Built once and executed with parameters (see _log.py); the key's are named k_*.
_GET = sa.select(used_approval).where(used_approval.c.approval_id == sa.bindparam("approval_id"))
_FINISH = (
    sa.update(used_approval)
    .where(
        used_approval.c.approval_id == sa.bindparam("k_approval_id"),
        used_approval.c.outcome.is_(None),
    )
    .returning(used_approval.c.approval_id)
)
_PRUNE = sa.delete(used_approval).where(used_approval.c.expires_at < sa.bindparam("before"))
