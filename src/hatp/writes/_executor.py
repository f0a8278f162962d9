"""The executor of approval-bound writes: propose, approve, execute once (docs/spec.md §22).

:class:`Writes` keeps its bookkeeping (:mod:`hatp.writes._book`) in the
user's own database, beside the records it corrects. :meth:`Writes.execute`
is the pattern, step for step:

1. The plan version is stored, and approved by a human (or allowed by the
   policy without one) for exactly its digest [WRITE-APPROVED].
2. Its execution key, derived from plan id and version alone
   (:func:`derive_key`), is reserved under a lease, before anything is
   written: ``INSERT .. ON CONFLICT DO NOTHING`` on the key, in the same
   short transaction that read the plan and its approval in step 1 (and
   committed before step 3 begins, so other workers see the reservation).
   A completed key answers with its stored result and writes nothing
   [WRITE-ONCE]; a key reserved under a live lease is refused
   [WRITE-CONCURRENT]; one whose lease ran out (its worker died) is classified
   by the live records: still the snapshot, it is run; already the
   postcondition, it is recorded as applied; anything else goes to a person
   [WRITE-RECOVER].
3. One transaction: lock the key (still ours, at our fence), re-read the
   records with locks and compare them with the snapshot [WRITE-DRIFT], apply
   the corrections, read again and compare with the postcondition
   [WRITE-VERIFY], mark the key completed with its result, append the journal
   entry, set the plan executed; commit. A serialization failure or deadlock
   rolls it back and it runs again, a bounded number of times.

A refusal in step 3 rolls everything back, then marks the key failed (so
it may be reserved again) and the plan version failed, in a short
transaction of its own.

Durability. The transaction of step 3 commits as every hatp transaction
does: it waits for the disk (PostgreSQL ``synchronous_commit = on``, SQLite
WAL with ``synchronous = FULL``). The transaction of steps 1-2, when all it
did was read and reserve (or take over) the key, commits on PostgreSQL
without waiting for its WAL flush (``SET LOCAL synchronous_commit = off``,
for that transaction only; :func:`hatp.writes._book.relax_commit_txn`).
Losing it is harmless:

- A worker process dying (SIGKILL) loses nothing: the commit is done in
  the server, visible to every other transaction at once, and is flushed
  within moments by the server's WAL writer. Only the database server
  itself crashing (power loss, OS crash) can lose it.
- If it is lost, the key is back where it was before: absent, failed, or
  reserved by an earlier (dead) worker. The next worker reserves or
  recovers it afresh, exactly as if this one had never reserved.
- Nothing durable can depend on it. Step 3 commits durably, and a commit's
  WAL flush covers every record before it, this reservation included; the
  same holds for any other worker's durable commit made after seeing it.
  A lost reservation therefore implies nothing was written under it.
- The worker that held it, if it outlived the server's crash, runs step 3
  against a key that is no longer reserved at its fence: step 3a finds
  that and it writes nothing (``CONCURRENT_EXECUTION``). If another worker
  meanwhile reserved the key afresh (at the same fence, 1), both run step
  3 under the key's row lock: the first to commit completes the key with
  the write, the other then finds it completed (``ALREADY_EXECUTED``) and
  writes nothing; exactly one effect, because it is step 3, not the lease,
  that decides [WRITE-ONCE]. The lease only keeps workers from running the
  same plan at once; safety never rested on its durability.
- Whatever else that transaction may write stays durable: when it records
  a dead worker's applied write (a completed key and a journal entry), it
  commits as every other transaction does.

On SQLite the reservation commits with ``synchronous = FULL`` like every
other transaction: the level cannot change inside a transaction (SQLite
refuses: "Safety level may not be changed inside a transaction"), and the
store's connections are opened and begun (``BEGIN IMMEDIATE``) by
:mod:`hatp.store`, outside this package.

The pieces: who may allow a write is :mod:`hatp.writes._approvals`; the
steps inside each transaction are :mod:`hatp.writes._steps`; classifying a
dead worker's key is :mod:`hatp.writes._recovery`. This module holds the
transactions, the retries and the fault points around them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock
from hatp.errors import (
    DriftDetected,
    HatpError,
    StoreUnavailable,
    VerificationFailed,
    WritePlanInvalid,
    WritePlanUnknown,
)
from hatp.evidence import Keyring, digest
from hatp.model import EffectPreview
from hatp.store import Store
from hatp.writes import _book, _tables
from hatp.writes._approvals import (
    Authority,
    Principal,
    authority,
    check_human,
    check_separation,
    denied,
    signed_approvers,
    store_approval_txn,
    verified_approval,
)
from hatp.writes._corrections import Registry
from hatp.writes._effects import plan_preview
from hatp.writes._plan import Change, CheckedPlan, check_next_version, check_plan, diff
from hatp.writes._policy import Policy, PolicyDecision, Verdict
from hatp.writes._records import RecordName, read_records
from hatp.writes._recovery import differences, record_names
from hatp.writes._steps import Claim, ExecutionStatus, Job, Steps, WriteOutcome
from hatp.writes._tables import ApprovalRow, JournalEntry, KeyRow, KeyState, PlanRow
from hatp.writes._undo import undo_plan

__all__ = [
    "DryRun",
    "ExecutionStatus",
    "Principal",
    "Proposal",
    "WriteOutcome",
    "WriteStatus",
    "Writes",
    "derive_key",
]

#: How many times the main transaction runs when the database aborts it as a
#: serialization failure or deadlock (each time from the start, same key).
MAX_ATTEMPTS = 5
# SQLSTATEs of a transaction PostgreSQL aborted so another could go on.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected


def derive_key(plan_id: str, version: int, *, undo: bool = False) -> str:
    """The execution key of a plan version: the digest of ``{"planId", "version"}``.

    Derived from the business operation alone, never from an attempt, a
    worker or a tool call, so every retry of the same approved version
    finds the same key. With ``undo``, the key of its undo: the digest of
    ``{"planId", "version", "undo": true}``.
    """
    if undo:
        return digest({"planId": plan_id, "version": version, "undo": True})
    return digest({"planId": plan_id, "version": version})


@dataclass(frozen=True)
class Proposal:
    """A stored plan version: its digest (what an approval binds), the policy's
    decision, its diff, and the effect preview its approver is shown
    (:func:`hatp.gateway.write_preview_lines`).

    ``preview`` is ``exact``, computed from the stored plan's snapshot and
    postcondition as the write participant's yes vote will sign it
    [WRITE-PREVIEW]; ``None`` when its changes do not fit a preview (shown
    as "cannot say").
    """

    plan_id: str
    version: int
    digest: str
    decision: PolicyDecision
    diff: list[Change]
    preview: EffectPreview | None


@dataclass(frozen=True)
class DryRun:
    """What executing a plan version now would meet; nothing was written.

    ``key_state`` is its execution key's (``None``: never reserved) and
    ``executed_for`` the ``origin`` a completed key's result names;
    ``live`` the records it touches as they are now and ``drift`` how they
    differ from the snapshot (``{record: {"approved", "live"}}``, empty when
    they do not); ``undo`` the plan that would undo it, or ``None`` with
    ``undo_problem`` saying why it cannot be undone.
    """

    plan_id: str
    version: int
    digest: str
    key: str
    key_state: KeyState | None
    executed_for: str | None
    checked: CheckedPlan
    live: dict[RecordName, dict[str, Any] | None]
    drift: dict[RecordName, dict[str, Any]]
    undo: CheckedPlan | None
    undo_problem: str | None


@dataclass(frozen=True)
class WriteStatus:
    """Where a plan version stands: its row, its approval, its key and journal entry."""

    plan: PlanRow
    approval: ApprovalRow | None
    key: KeyRow | None
    journal_seq: int | None


class Writes:
    """Approval-bound transactional writes to the system of record in ``store``.

    Creates its bookkeeping tables in ``store`` if missing. ``registry`` is
    the allowlist, ``policy`` decides what needs an approval, ``clock`` times
    leases and records. ``lease_seconds`` is how long a reservation stays
    live: choose it from the slowest realistic execution, not the average.
    ``gateways`` holds the keys of the Human Gateways whose signed approvals
    are taken (:meth:`approve_signed`).

    Raises:
        ValueError: ``lease_seconds`` is not positive.
        StoreUnavailable: the tables could not be created.
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        policy: Policy,
        clock: Clock,
        *,
        lease_seconds: float = 60.0,
        gateways: Keyring | None = None,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"a lease lasts a positive number of seconds, not {lease_seconds!r}")
        self._store = store
        self._registry = registry
        self._policy = policy
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._gateways = gateways
        self._steps = Steps(registry.sets, clock, lease_seconds)
        #: Test hook: called at the start of every attempt of the main transaction
        #: with its connection and the attempt number (1, 2, ...). A test raises a
        #: serialization failure from it to show the retry; None in production.
        self._on_attempt: Callable[[sa.Connection, int], None] | None = None
        with store.transaction() as conn:
            _tables.create_tables_txn(conn)

    # --- propose and approve ------------------------------------------------

    def propose(self, plan_doc: Mapping[str, Any], proposer: Principal) -> Proposal:
        """Check a plan, ask the policy, and store the version; return the proposal.

        Proposing a stored version again with the same content returns it
        (idempotent); with other content it is refused: a version is never changed.

        Raises:
            WritePlanInvalid: a rule of :func:`check_plan` fails; or reason
                ``SHAPE``: ``proposedBy`` is not ``proposer``; or reason
                ``VERSION``: the version is not the next, or changes a stored one.
            WriteDenied: the policy denies the plan; nothing was stored.
            StoreUnavailable: the database failed; nothing was stored.
        """
        checked = check_plan(plan_doc, self._registry)
        plan = checked.plan
        if plan.proposed_by != proposer.id and _checks.is_on("WRITE-SHAPE"):
            raise WritePlanInvalid(
                f"the plan says it is proposed by {plan.proposed_by!r}, but "
                f"{proposer.id!r} proposes it: proposedBy is the proposer's own id",
                reason="SHAPE",
                rule="WRITE-SHAPE",
                where="/proposedBy",
            )
        decision = self._policy.decide(checked)
        if decision.verdict is Verdict.DENY:
            raise denied(plan.plan_id, plan.version, decision)
        now = self._clock.now()
        wire = plan.to_wire()
        with self._store.transaction() as conn:
            stored = _book.get_plan_txn(conn, plan.plan_id, plan.version)
            if stored is None:
                check_next_version(
                    plan.plan_id, plan.version, _book.last_version_txn(conn, plan.plan_id)
                )
                inserted = _book.insert_plan_txn(
                    conn,
                    plan.plan_id,
                    plan.version,
                    checked.digest,
                    wire,
                    decision.verdict.value,
                    now,
                )
                if not inserted:  # a racing propose stored this version first
                    stored = _book.get_plan_txn(conn, plan.plan_id, plan.version)
            if stored is not None and stored.digest != checked.digest:
                if _checks.is_on("WRITE-VERSION"):
                    raise WritePlanInvalid(
                        f"plan {plan.plan_id} version {plan.version} is stored with other "
                        "content; a proposed version is never changed: propose version "
                        f"{(_book.last_version_txn(conn, plan.plan_id) or 0) + 1}",
                        reason="VERSION",
                        rule="WRITE-VERSION",
                        where="/version",
                        plan_id=plan.plan_id,
                        version=plan.version,
                    )
                _book.replace_plan_txn(
                    conn,
                    plan.plan_id,
                    plan.version,
                    checked.digest,
                    wire,
                    decision.verdict.value,
                    now,
                )
            row = _known(
                _book.get_plan_txn(conn, plan.plan_id, plan.version), plan.plan_id, plan.version
            )
        # The preview of the plan as stored, read back as the write participant's dry run
        # reads it (canonical JSON: its column order, its numbers), so the approver is
        # shown exactly what that participant will sign [WRITE-PREVIEW].
        shown = plan_preview(check_plan(row.plan, self._registry).plan)
        return Proposal(plan.plan_id, plan.version, checked.digest, decision, diff(checked), shown)

    def approve(self, plan_id: str, version: int, approver: Principal) -> None:
        """Record ``approver``'s approval of this plan version (of its digest).

        ``approver`` comes from the caller's authentication layer. A version
        approved before keeps its first approval.

        Raises:
            WritePlanUnknown: no such plan version.
            ApproverRefused: reason ``NOT_HUMAN`` (an agent principal,
                [WRITE-HUMAN]) or ``SELF_APPROVAL`` (the plan's proposer or
                whom it acts for, [WRITE-SOD]); nothing was stored.
            StoreUnavailable: the database failed; nothing was stored.
        """
        check_human(approver)
        with self._store.transaction() as conn:
            row = _plan_row_txn(conn, plan_id, version)
            check_separation(row, (approver.id,))
            store_approval_txn(conn, row, (approver.id,), "direct", None, self._clock.now())

    def approve_signed(self, plan_id: str, version: int, approval: Mapping[str, Any]) -> None:
        """Record a Human Gateway's signed Approval of this plan version.

        The approval must verify under a key of ``gateways`` issued to the
        gateway it names, approve, and name this version's digest as its
        ``planDigest``; its approvers (people, by the cards the gateway
        checked) must not be the plan's proposer nor whom it acts for.

        Raises:
            WritePlanUnknown: no such plan version.
            ApproverRefused: reason ``SIGNATURE`` ([WRITE-SIGNED]: not an
                Approval, or not signed by a trusted gateway), ``REJECTED``
                ([WRITE-SIGNED]: it does not approve), ``OTHER_PLAN``
                ([WRITE-BOUND]: another digest), ``NOT_HUMAN`` (no approvers,
                [WRITE-HUMAN]) or ``SELF_APPROVAL`` ([WRITE-SOD]); nothing stored.
            StoreUnavailable: the database failed; nothing was stored.
        """
        parsed = verified_approval(approval, self._gateways)
        with self._store.transaction() as conn:
            row = _plan_row_txn(conn, plan_id, version)
            approvers = signed_approvers(parsed, row)
            store_approval_txn(conn, row, approvers, "gateway", dict(approval), self._clock.now())

    # --- execute ------------------------------------------------------------

    def execute(
        self, plan_id: str, version: int, worker: str, *, origin: str | None = None
    ) -> WriteOutcome:
        """Apply an approved plan version once, with its bookkeeping, in one transaction.

        ``worker`` names this caller in the key's reservation (for people
        reading the table); fencing does not rest on it. ``origin``, if
        given, is kept in the result (who asked for the write).

        Returns:
            ``executed`` (applied now), ``already-executed`` (the key was
            completed before: the stored result, nothing written) or
            ``recovered`` (a dead worker's key was finished now).

        Raises:
            WritePlanUnknown: no such plan version.
            WritePlanInvalid: the stored plan no longer passes the allowlist.
            WriteDenied: the policy denies it now.
            NotApproved: it needs an approval of this version's digest
                [WRITE-APPROVED].
            ConcurrentExecution: another worker holds the key under a live
                lease [WRITE-CONCURRENT], or took it over from this call.
            RecoveryRequired: a dead worker's key, and the records are neither
                the snapshot nor the postcondition [WRITE-RECOVER].
            DriftDetected: the records are not the approved snapshot [WRITE-DRIFT].
            VerificationFailed: after the corrections the postcondition does
                not hold [WRITE-VERIFY].
            StoreUnavailable: the database failed. If it failed at the commit,
                whether the write committed is known from :meth:`status` (the
                key is completed exactly when it did).
        Every refusal leaves the records as they were.
        """
        with self._store.transaction() as conn:
            # Steps 1 and 2 in one transaction: what allows the plan to run is read
            # where its key is reserved (a refusal in step 1 rolls back, reserving nothing).
            # On PostgreSQL the read and a fresh reservation are one statement (one round
            # trip): the reservation comes first there, and a refusal rolls it back.
            now, until = self._steps.lease()
            key = derive_key(plan_id, version)
            found, approval, reserved = _book.get_plan_and_reserve_txn(
                conn, plan_id, version, key, worker, until, now
            )
            job = self._job(found, approval, plan_id, version, origin)
            # relax: when all this transaction did is read and reserve (or take over) the
            # key, it need not survive a power loss on its own ("Durability" above).
            claim = self._steps.reserve_txn(conn, job, worker, relax=True, reserved=reserved)
        if isinstance(claim, WriteOutcome):
            return claim
        fault_point("writes.reserved")
        try:
            outcome = self._run(job, claim)
        except (DriftDetected, VerificationFailed) as refusal:
            self._release(job, claim, refusal.code, refusal.to_dict())
            raise
        except (HatpError, StoreUnavailable):
            raise  # the key stays reserved: its lease runs out, recovery classifies it
        except Exception as error:
            # A correction's own code failed before the commit: nothing was written.
            detail = {"code": type(error).__name__, "message": str(error)}
            self._release(job, claim, type(error).__name__, detail)
            raise
        fault_point("writes.committed")
        return outcome

    def execute_txn(
        self,
        conn: sa.Connection,
        plan_id: str,
        version: int,
        worker: str,
        *,
        origin: str | None = None,
    ) -> WriteOutcome:
        """Apply an approved plan version once inside the caller's transaction ``conn``.

        For a caller whose own bookkeeping must commit with the write (the
        write participant's branch state): ``conn`` is an open transaction
        on this Writes' database (:meth:`same_database`), which the caller
        commits. The key is reserved first, in ``conn``, and completed in it,
        so the reservation, the write, the key, the journal entry and the
        caller's own rows commit together or not at all: no other worker
        ever sees the reservation before its write. No retry here: a
        serialization failure aborts the caller's transaction, which the
        caller runs again. Returns and raises as :meth:`execute`; after a
        refusal the caller must roll back (nothing of it is then kept).
        """
        return self._all_in_txn(conn, self._job_txn(conn, plan_id, version, origin), worker)

    def undo(
        self, plan_id: str, version: int, worker: str, *, origin: str | None = None
    ) -> WriteOutcome:
        """Undo an executed plan version once, in one transaction of its own.

        As :meth:`undo_txn`, in a transaction this call commits.
        """
        with self._store.transaction() as conn:
            return self.undo_txn(conn, plan_id, version, worker, origin=origin)

    def undo_txn(
        self,
        conn: sa.Connection,
        plan_id: str,
        version: int,
        worker: str,
        *,
        origin: str | None = None,
    ) -> WriteOutcome:
        """Undo an executed plan version once inside the caller's transaction [WRITE-UNDO].

        Applies the plan's undo (its corrections' inverses, from
        :func:`~hatp.writes.undo_plan`) under its own key
        (``derive_key(plan_id, version, undo=True)``), with the same checks
        as an execution: the records must still be the plan's postcondition
        (the undo's snapshot) and end as the undo's postcondition. It is
        allowed by the approval the execution ran under (journaled with
        source ``undo`` and its approvers), not asked again of the policy.
        The plan version's status becomes ``compensated``.

        Returns:
            ``executed``, or ``already-executed`` (undone before: its result).

        Raises:
            WritePlanUnknown: no such plan version, or it was never executed here.
            ValueError, WritePlanInvalid: it cannot be undone (see ``undo_plan``).
            DriftDetected: the records are no longer the plan's postcondition
                [WRITE-DRIFT]; nothing was written: a person decides.
            VerificationFailed: the undo's postcondition does not hold [WRITE-VERIFY].
            ConcurrentExecution: a standalone worker holds the undo key.
            StoreUnavailable: the database failed.
        """
        return self._all_in_txn(conn, self._undo_job_txn(conn, plan_id, version, origin), worker)

    def dry_run(self, plan_id: str, version: int) -> DryRun:
        """What executing the plan version now would meet (see :meth:`dry_run_txn`)."""
        with self._store.transaction() as conn:
            return self.dry_run_txn(conn, plan_id, version)

    def dry_run_txn(self, conn: sa.Connection, plan_id: str, version: int) -> DryRun:
        """Check a plan version could run now, in the caller's transaction; write nothing.

        Raises:
            WritePlanUnknown, WritePlanInvalid, WriteDenied, NotApproved: as
                :meth:`execute` would.
            StoreUnavailable: the database failed.
        The records' drift, the key's state and whether the plan can be
        undone are returned, not raised: the caller decides.
        """
        job = self._job_txn(conn, plan_id, version, None)
        found = _book.get_key_txn(conn, job.key)
        snapshot, post = job.checked.plan.snapshot, job.checked.plan.postcondition
        live = read_records(conn, self._registry.sets, record_names(snapshot, post), lock=False)
        undo: CheckedPlan | None = None
        problem: str | None = None
        try:
            undo = undo_plan(job.checked, self._registry)
        except (ValueError, WritePlanInvalid) as exc:
            problem = exc.message if isinstance(exc, HatpError) else str(exc)
        if undo is not None and self._policy.decide(undo).verdict is Verdict.DENY:
            undo, problem = None, "the write policy denies its undo"
        return DryRun(
            plan_id=plan_id,
            version=version,
            digest=job.digest,
            key=job.key,
            key_state=None if found is None else found.state,
            executed_for=_origin_of(found),
            checked=job.checked,
            live=live,
            drift=differences(live, snapshot, "approved"),
            undo=undo,
            undo_problem=problem,
        )

    def same_database(self, conn: sa.Connection) -> bool:
        """Whether ``conn`` is a connection to this Writes' database (same URL)."""
        return bool(conn.engine.url.render_as_string(hide_password=False) == self._store.url)

    def status(self, plan_id: str, version: int) -> WriteStatus:
        """Where a plan version stands: stored, approved, its key, its journal entry.

        Raises:
            WritePlanUnknown: no such plan version.
            StoreUnavailable: the database failed.
        """
        key = derive_key(plan_id, version)
        with self._store.transaction() as conn:
            row = _plan_row_txn(conn, plan_id, version)
            return WriteStatus(
                plan=row,
                approval=_book.get_approval_txn(conn, plan_id, version),
                key=_book.get_key_txn(conn, key),
                journal_seq=_book.journal_seq_txn(conn, key),
            )

    def journal(self, plan_id: str | None = None) -> list[JournalEntry]:
        """The journal, oldest first: every entry, or those of one plan id.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            return _book.journal_txn(conn, plan_id)

    # --- the transactions of execute ----------------------------------------

    def _job_txn(self, conn: sa.Connection, plan_id: str, version: int, origin: str | None) -> Job:
        """Step 1: the stored plan version, checked again, and who allows it to run."""
        # The plan version and its approval in one statement (a LEFT JOIN).
        found, approval = _book.get_plan_and_approval_txn(conn, plan_id, version)
        return self._job(found, approval, plan_id, version, origin)

    def _job(
        self,
        found: PlanRow | None,
        approval: ApprovalRow | None,
        plan_id: str,
        version: int,
        origin: str | None,
    ) -> Job:
        """Step 1 on the stored plan version and its approval, read."""
        row = _known(found, plan_id, version)
        checked = check_plan(row.plan, self._registry)
        allowed = authority(self._policy, row, checked, approval)
        key = derive_key(plan_id, version)
        return Job(key, plan_id, version, row.digest, checked, allowed, origin=origin)

    def _undo_job_txn(
        self, conn: sa.Connection, plan_id: str, version: int, origin: str | None
    ) -> Job:
        """The undo of an executed plan version, allowed by what allowed the execution."""
        row = _plan_row_txn(conn, plan_id, version)
        key = derive_key(plan_id, version)
        ran = [e for e in _book.journal_txn(conn, plan_id) if e.key == key]
        if not ran:
            raise WritePlanUnknown(
                f"plan {plan_id} version {version} was never executed here: there is "
                "nothing to undo",
                plan_id=plan_id,
                version=version,
            )
        undo = undo_plan(check_plan(row.plan, self._registry), self._registry)
        return Job(
            derive_key(plan_id, version, undo=True),
            plan_id,
            version,
            undo.digest,
            undo,
            Authority(ran[0].approvers, "undo"),
            undoes=row.digest,
            origin=origin,
        )

    def _all_in_txn(self, conn: sa.Connection, job: Job, worker: str) -> WriteOutcome:
        """Reserve, then apply, in the caller's one transaction (no retry, no release)."""
        claim = self._steps.reserve_txn(conn, job, worker)
        if isinstance(claim, WriteOutcome):
            return claim
        return self._steps.apply_txn(conn, job, claim)

    def _run(self, job: Job, claim: Claim) -> WriteOutcome:
        """Step 3, retried when the database aborts it so another transaction can go on."""
        attempt = 1
        while True:
            try:
                return self._attempt(job, claim, attempt)
            except StoreUnavailable as error:
                if attempt >= MAX_ATTEMPTS or not _retryable(error):
                    raise
                attempt += 1

    def _attempt(self, job: Job, claim: Claim, attempt: int) -> WriteOutcome:
        hook = self._on_attempt
        with self._store.transaction() as conn:
            on_locked = None if hook is None else (lambda: hook(conn, attempt))
            done = self._steps.hold_txn(conn, job, claim, on_locked)
            if done is not None:
                return done
            return self._steps.apply_txn(conn, job, claim)

    def _release(self, job: Job, claim: Claim, code: str, detail: dict[str, Any]) -> None:
        """After a refusal rolled step 3 back: the key may be reserved again; the plan failed."""
        with self._store.transaction() as conn:
            self._steps.release_txn(conn, job, claim, code, detail)


def _origin_of(found: KeyRow | None) -> str | None:
    if found is None or found.state is not KeyState.COMPLETED:
        return None
    origin = (found.result or {}).get("origin")
    return origin if isinstance(origin, str) else None


def _plan_row_txn(conn: sa.Connection, plan_id: str, version: int) -> PlanRow:
    return _known(_book.get_plan_txn(conn, plan_id, version), plan_id, version)


def _known(row: PlanRow | None, plan_id: str, version: int) -> PlanRow:
    if row is None:
        raise WritePlanUnknown(
            f"no write plan {plan_id} version {version} was proposed here",
            plan_id=plan_id,
            version=version,
        )
    return row


def _retryable(error: StoreUnavailable) -> bool:
    """Whether the database aborted the transaction only so another could go on."""
    cause = error.__cause__
    orig = getattr(cause, "orig", None) or cause
    if getattr(orig, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    text = str(orig).lower()
    return isinstance(orig, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
