"""The steps of one execution, each inside a transaction the caller holds (docs/spec.md §22).

:class:`Steps` reserves an execution key (step 2 of :mod:`hatp.writes._executor`),
checks the key is still held, re-reads the records and compares them with the
snapshot, applies the corrections, checks the postcondition and writes the
bookkeeping (step 3). Every method whose name ends in ``_txn`` runs in the
caller's connection and commits nothing: :class:`~hatp.writes.Writes` runs
them in transactions of its own, the write participant in the participant's.

A :class:`Job` is what one execution is of: an approved plan version, or the
undo of one (its corrections' inverses, under a key of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from hatp import _checks
from hatp.clock import Clock
from hatp.errors import ConcurrentExecution, DriftDetected, VerificationFailed
from hatp.store._schema import lease_end
from hatp.writes import _book
from hatp.writes._approvals import Authority
from hatp.writes._plan import CheckedPlan
from hatp.writes._records import RecordSet, read_records, same_state
from hatp.writes._recovery import (
    Recovery,
    classify,
    differences,
    part,
    record_names,
    recovery_required,
)
from hatp.writes._tables import KeyRow, KeyState, PlanStatus

__all__ = ["ExecutionStatus", "WriteOutcome"]


class ExecutionStatus(StrEnum):
    """How an execute ended, when it did not raise."""

    EXECUTED = "executed"  # the corrections were applied now
    ALREADY_EXECUTED = "already-executed"  # the key was completed before: nothing written
    RECOVERED = "recovered"  # a dead worker's key, finished now (see result["recovered"])


@dataclass(frozen=True)
class WriteOutcome:
    """The outcome of :meth:`Writes.execute`.

    ``result`` is the stored result of the key (the same for every replay):
    ``planId``, ``version``, ``digest`` and ``records`` (the records after the
    write), and ``recovered`` (``applied`` or ``not-applied``) when a dead
    worker's key was finished; an undo's also has ``undoes``, the digest of
    the plan version it undid; ``origin`` when the caller named one.
    ``journal_seq`` is the journal entry's.
    """

    status: ExecutionStatus
    key: str
    result: dict[str, Any]
    journal_seq: int | None


@dataclass(frozen=True)
class Job:
    """One execution: its key, what it journals, the checked plan it applies, who allowed it.

    ``digest`` is the digest journaled (the plan's, or the undo plan's);
    ``undoes`` is set for an undo: the digest of the plan version it undoes.
    ``origin`` (when set) names who asked for it, e.g. a transaction's
    branch, and is kept in the result.
    """

    key: str
    plan_id: str
    version: int
    digest: str
    checked: CheckedPlan
    authority: Authority
    undoes: str | None = None
    origin: str | None = None

    @property
    def what(self) -> str:
        """The plan version as a message names it."""
        name = f"plan {self.plan_id} version {self.version}"
        return name if self.undoes is None else f"the undo of {name}"

    def result(self, records: dict[str, Any]) -> dict[str, Any]:
        """The key's result, given the records after the write."""
        result = {
            "planId": self.plan_id,
            "version": self.version,
            "digest": self.digest,
            "records": records,
        }
        if self.undoes is not None:
            result["undoes"] = self.undoes
        if self.origin is not None:
            result["origin"] = self.origin
        return result


@dataclass(frozen=True)
class Claim:
    """A reservation this call holds: the key's fence, and whether it was a takeover."""

    fence: int
    recovered: bool


class Steps:
    """The steps of an execution, on the records of ``sets``, timed by ``clock``."""

    def __init__(self, sets: Mapping[str, RecordSet], clock: Clock, lease_seconds: float) -> None:
        self._sets = sets
        self._clock = clock
        self._lease_seconds = lease_seconds

    def lease(self) -> tuple[datetime, int]:
        """Now, and the stored end of a lease taken now."""
        now = self._clock.now()
        return now, lease_end(now, self._lease_seconds)

    def reserve_txn(
        self,
        conn: sa.Connection,
        job: Job,
        worker: str,
        *,
        relax: bool = False,
        reserved: bool | None = None,
    ) -> Claim | WriteOutcome:
        """Step 2: reserve the job's key, or find out why not.

        With ``relax`` (only for a transaction that holds nothing but step 1 and this
        step, committed before step 3: :meth:`Writes.execute`), a transaction that ends
        with a claim, having written nothing but the reservation, commits without waiting
        for the disk (:func:`hatp.writes._book.relax_commit_txn`, and the module docstring
        of :mod:`hatp.writes._executor` for why that is safe). One that records a dead
        worker's applied write keeps the durable commit. Never in a caller's own
        transaction that also writes (:meth:`Writes.execute_txn`, :meth:`Writes.undo_txn`).

        Returns the claim, or the outcome when there is nothing to run: the key
        was completed before (``already-executed``) or a dead worker's write is
        found applied (``recovered``, recorded now).

        ``reserved``: the fresh reservation was already tried in this transaction
        (:func:`hatp.writes._book.get_plan_and_reserve_txn`), and whether it was made.

        Raises:
            ConcurrentExecution: another worker holds the key under a live lease
                [WRITE-CONCURRENT].
            RecoveryRequired: a dead worker's key, and the records are neither
                the snapshot nor the postcondition [WRITE-RECOVER].
        """
        now, until = self.lease()
        if reserved is None:
            reserved = _book.reserve_key_txn(
                conn, job.key, job.plan_id, job.version, worker, until, now, relax=relax
            )
        if reserved:
            return Claim(fence=1, recovered=False)
        key = job.key
        found = _book.get_key_txn(conn, key, lock=True)
        if found is None:  # pragma: no cover - keys are never deleted
            raise ConcurrentExecution(f"execution key {key} vanished; execute again", key=key)
        if found.state is KeyState.COMPLETED and _checks.is_on("WRITE-ONCE"):
            return _replayed(conn, found)
        live = found.state is KeyState.RESERVED and (
            found.lease_until is not None and found.lease_until > now
        )
        if live and _checks.is_on("WRITE-CONCURRENT"):
            raise ConcurrentExecution(
                f"worker {found.owner} is executing {job.what} under a lease until "
                f"{found.lease_until}; ask again after it for the result",
                key=key,
                owner=found.owner,
                lease_until=None if found.lease_until is None else found.lease_until.isoformat(),
            )
        dead = found.state is KeyState.RESERVED and not live
        if dead and _checks.is_on("WRITE-RECOVER"):
            return self._recover_txn(conn, job, found, worker, until, relax)
        return self._claim_txn(conn, found, worker, until, relax, recovered=False)

    def _recover_txn(
        self, conn: sa.Connection, job: Job, found: KeyRow, worker: str, until: int, relax: bool
    ) -> Claim | WriteOutcome:
        """A dead worker's key: classify it by the live records, under their locks."""
        snapshot, post = job.checked.plan.snapshot, job.checked.plan.postcondition
        live = read_records(conn, self._sets, record_names(snapshot, post), lock=True)
        found_state = classify(live, snapshot, post)
        if found_state is Recovery.NOT_APPLIED:
            # The dead worker's transaction never committed: run it.
            return self._claim_txn(conn, found, worker, until, relax, recovered=True)
        if found_state is Recovery.APPLIED:
            # Applied, by whatever means, yet never journaled: record it, write nothing.
            fence = self._take_txn(conn, found, worker, until)
            result = {**job.result(part(live, post)), "recovered": Recovery.APPLIED.value}
            seq = self.complete_txn(conn, job, fence, result)
            return WriteOutcome(ExecutionStatus.RECOVERED, job.key, result, seq)
        raise recovery_required(job.what, job.key, found.owner, live, snapshot)

    def _claim_txn(
        self,
        conn: sa.Connection,
        found: KeyRow,
        worker: str,
        until: int,
        relax: bool,
        *,
        recovered: bool,
    ) -> Claim:
        """Take the key over for step 3; with ``relax`` its commit need not wait for the disk."""
        claim = Claim(self._take_txn(conn, found, worker, until), recovered=recovered)
        if relax:
            _book.relax_commit_txn(conn)
        return claim

    def _take_txn(self, conn: sa.Connection, found: KeyRow, worker: str, until: int) -> int:
        fence = _book.take_key_txn(conn, found.key, found.fence, worker, until, self._clock.now())
        if fence is None:  # pragma: no cover - the row is locked since get_key_txn
            raise ConcurrentExecution(f"another worker took key {found.key} first", key=found.key)
        return fence

    def hold_txn(
        self,
        conn: sa.Connection,
        job: Job,
        claim: Claim,
        on_locked: Callable[[], None] | None = None,
    ) -> WriteOutcome | None:
        """Step 3a: lock the key and check it is still ours, at our fence.

        ``on_locked`` (a test hook) is called once the key's row is locked.
        Returns ``None`` when it is ours; the stored outcome when another
        worker completed it meanwhile.

        Raises:
            ConcurrentExecution: another worker took the key over.
        """
        held = _book.get_key_txn(conn, job.key, lock=True)
        if on_locked is not None:
            on_locked()
        if held is not None and held.state is KeyState.RESERVED and held.fence == claim.fence:
            return None
        if held is not None and held.state is KeyState.COMPLETED:
            return _replayed(conn, held)
        raise ConcurrentExecution(
            f"this worker's lease on key {job.key} ran out and another worker took the "
            "key over; nothing was written by this call",
            key=job.key,
            owner=None if held is None else held.owner,
        )

    def apply_txn(self, conn: sa.Connection, job: Job, claim: Claim) -> WriteOutcome:
        """Steps 3b-3e: check the snapshot, apply, check the postcondition, book it.

        Raises:
            DriftDetected: the records are not the snapshot [WRITE-DRIFT].
            VerificationFailed: after the corrections the records are not the
                postcondition [WRITE-VERIFY].
        The caller rolls its transaction back on any exception.
        """
        snapshot, post = job.checked.plan.snapshot, job.checked.plan.postcondition
        names = record_names(snapshot, post)
        # 3b. The records are the approved snapshot.
        live = read_records(conn, self._sets, names, lock=True)
        if not same_state(part(live, snapshot), snapshot) and _checks.is_on("WRITE-DRIFT"):
            raise DriftDetected(
                f"the records of {job.what} changed since they were approved; nothing was "
                "written: "
                + (
                    "propose a new version from the live records"
                    if job.undoes is None
                    else "a person must decide what they should hold"
                ),
                plan_id=job.plan_id,
                version=job.version,
                records=differences(live, snapshot, "approved"),
            )
        # 3c. Apply the corrections, in plan order.
        for correction, params in job.checked.steps:
            correction.apply(conn, self._sets, params)
        # 3d. The postcondition holds.
        after = read_records(conn, self._sets, names, lock=False)
        if not same_state(part(after, post), post) and _checks.is_on("WRITE-VERIFY"):
            raise VerificationFailed(
                f"after the corrections of {job.what} the records are not the "
                "postcondition; everything was rolled back",
                plan_id=job.plan_id,
                version=job.version,
                records=differences(after, post, "expected"),
            )
        # 3e. The bookkeeping, in the same transaction as the write.
        result = job.result(part(after, post))
        if claim.recovered:
            result["recovered"] = Recovery.NOT_APPLIED.value
        seq = self.complete_txn(conn, job, claim.fence, result)
        status = ExecutionStatus.RECOVERED if claim.recovered else ExecutionStatus.EXECUTED
        return WriteOutcome(status, job.key, result, seq)

    def complete_txn(
        self, conn: sa.Connection, job: Job, fence: int, result: dict[str, Any]
    ) -> int:
        """Mark the key completed, append the journal entry, set the plan's status; the seq."""
        now = self._clock.now()
        status = PlanStatus.EXECUTED if job.undoes is None else PlanStatus.COMPENSATED
        # One call, three statements on the driver's cursor, the result's JSON made once.
        seq = _book.complete_key_txn(
            conn,
            job.key,
            fence,
            job.plan_id,
            job.version,
            job.digest,
            job.authority.approvers,
            job.authority.source,
            result,
            status,
            now,
        )
        if seq is None:
            raise ConcurrentExecution(  # pragma: no cover - the key row is locked
                f"key {job.key} was taken over before it could be completed", key=job.key
            )
        return seq

    def release_txn(
        self, conn: sa.Connection, job: Job, claim: Claim, code: str, detail: dict[str, Any]
    ) -> None:
        """After a refusal rolled step 3 back: the key may be reserved again; a plan (not an
        undo) is marked failed."""
        now: datetime = self._clock.now()
        released = _book.finish_key_txn(conn, job.key, claim.fence, KeyState.FAILED, detail, now)
        if released and job.undoes is None:
            _book.set_plan_status_txn(conn, job.plan_id, job.version, PlanStatus.FAILED, code, now)


def _replayed(conn: sa.Connection, completed: KeyRow) -> WriteOutcome:
    """A completed key's stored outcome: ``already-executed``, nothing written [WRITE-ONCE]."""
    seq = _book.journal_seq_txn(conn, completed.key)
    return WriteOutcome(
        ExecutionStatus.ALREADY_EXECUTED, completed.key, completed.result or {}, seq
    )
