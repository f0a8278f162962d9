"""An approval-bound write as a compensate-tier branch of a hatp transaction (docs/spec.md §22).

:class:`WriteOperation` is a participant :class:`~hatp.participant.Operation`
whose branch names a stored plan version in its args, ``{"planId", "version"}``:

- prepare is a dry run [WRITE-PARTICIPANT]: the version is approved (or the
  policy allows it), its key was never used, the records are still its
  snapshot, and it can be undone; otherwise the vote is no, with the reason
  ``NOT_APPROVED``, ``WRITE_DENIED``, ``DRIFT_DETECTED``, ``ALREADY_EXECUTED``,
  ``NOT_COMPENSABLE``, ... The yes vote's preconditions are the digests of
  the records' states and the plan digest as scope, so the commit's re-read
  refuses drift with ``PRECONDITION_CHANGED`` [PART-PRECONDITION].
- commit executes the plan version once. When the participant's store is the
  system of record's database, in the participant's own store transaction:
  the write, its key and journal entry and the branch's state commit together
  [PART-DURABLE]; otherwise by :meth:`Writes.execute`, idempotent by its key.
- compensate applies the plan's undo once, under its own key [WRITE-UNDO].
- abort does nothing: the dry run placed nothing (with the system of record
  apart from the participant's store, a write this branch committed whose
  branch state was lost is undone).

The yes vote's preview is ``exact``: each record the plan touches, column by
column, from its snapshot to its postcondition, since the commit refuses any
drift from the snapshot and verifies the postcondition; the approver of the
plan version was shown the same preview [WRITE-PREVIEW]. The commit observes
the same, from the snapshot it checked to the records it left
(:mod:`hatp.writes._effects`).
"""

from __future__ import annotations

from typing import Any

from hatp.errors import (
    ConcurrentExecution,
    NotApproved,
    WriteDenied,
    WritePlanInvalid,
    WritePlanUnknown,
)
from hatp.evidence import digest
from hatp.model import Preconditions, Tier
from hatp.participant import Committed, Operation, Prepared, Refuse, Work
from hatp.writes._effects import observed_write, plan_preview
from hatp.writes._executor import DryRun, ExecutionStatus, Writes
from hatp.writes._steps import WriteOutcome
from hatp.writes._tables import KeyState

__all__ = ["WriteOperation"]


class WriteOperation(Operation):
    """Approval-bound writes as a compensate-tier participant operation.

    ``writes`` executes them; ``name`` is the operation's name in plans
    (default ``write``). A branch's args are ``{"planId": str, "version": int}``.
    """

    tier = Tier.COMPENSATE

    def __init__(self, writes: Writes, name: str = "write") -> None:
        self.name = name
        self._writes = writes

    def prepare(self, work: Work) -> Prepared:
        """The dry run: vote yes only if the plan version could run, and be undone, now."""
        plan_id, version = _target(work)
        try:
            dry = self._dry_run(work, plan_id, version)
        except (WritePlanUnknown, WritePlanInvalid, WriteDenied, NotApproved) as error:
            raise Refuse(error.code, error.message) from None
        if dry.key_state is KeyState.COMPLETED:
            raise Refuse(
                "ALREADY_EXECUTED",
                f"plan {plan_id} version {version} was executed before; a branch makes a "
                "write that has not run yet: propose a new version",
            )
        if dry.key_state is KeyState.RESERVED:
            raise Refuse(
                "CONCURRENT_EXECUTION",
                f"a worker is executing plan {plan_id} version {version} now",
            )
        if dry.drift:
            raise Refuse(
                "DRIFT_DETECTED",
                f"the records of plan {plan_id} version {version} changed since they were "
                f"approved ({', '.join(dry.drift)}): propose a new version from the live records",
            )
        if dry.undo is None:
            raise Refuse(
                "NOT_COMPENSABLE",
                f"plan {plan_id} version {version} cannot be undone ({dry.undo_problem}): "
                "a compensate-tier branch must be",
            )
        return Prepared(
            preconditions=_preconditions(dry),
            preview=plan_preview(dry.checked.plan),
            data={"planId": plan_id, "version": version, "digest": dry.digest},
        )

    def preconditions(self, work: Work) -> Preconditions:
        """The records' state digests now, re-read at commit [PART-PRECONDITION].

        Raises:
            HatpError: the plan version can no longer run (e.g. ``NOT_APPROVED``).
        """
        plan_id, version = _target(work)
        dry = self._dry_run(work, plan_id, version)
        if dry.executed_for == _origin(work) and work.prepared is not None:
            # This branch's own write, committed by an earlier attempt whose branch state
            # was lost (a system of record apart from the participant's store): the
            # records are the postcondition now, and the commit only finds its result.
            return work.prepared.preconditions or _preconditions(dry)
        return _preconditions(dry)

    def commit(self, work: Work) -> Committed:
        """Execute the plan version once; the effect names its key and journal entry.

        Raises:
            HatpError: the execution was refused (``DRIFT_DETECTED``, ...) or the
                version was executed for another origin (``CONCURRENT_EXECUTION``);
                nothing was written.
        """
        plan_id, version = _target(work)
        origin = _origin(work)
        # The snapshot the execution checks the records against [WRITE-DRIFT]: a plan
        # version never changes, so it is the one its prepare previewed from.
        snapshot = self._dry_run(work, plan_id, version).checked.plan.snapshot
        if self._writes.same_database(work.conn):
            outcome = self._writes.execute_txn(work.conn, plan_id, version, origin, origin=origin)
        else:
            outcome = self._writes.execute(plan_id, version, origin, origin=origin)
        _check_origin(outcome, origin, f"plan {plan_id} version {version}")
        return Committed(effect=_effect(outcome), observed=observed_write(snapshot, outcome))

    def abort(self, work: Work) -> None:
        """Nothing to release: the dry run placed nothing.

        Only when the system of record is apart from the participant's store
        can a commit have written and lost its branch state; if this branch's
        write did run, it is undone.
        """
        plan_id, version = _target(work)
        if self._writes.same_database(work.conn):
            return  # the write and the branch state commit together: it never ran
        key = self._writes.status(plan_id, version).key
        origin = _origin(work)
        ours = key is not None and (key.result or {}).get("origin") == origin
        if ours and key is not None and key.state is KeyState.COMPLETED:
            self._writes.undo(plan_id, version, origin, origin=origin)

    def compensate(self, work: Work, undo_token: str) -> None:
        """Apply the plan's undo once [WRITE-UNDO].

        Raises:
            HatpError: ``DRIFT_DETECTED`` (the records are no longer what the
                plan left: a person decides), or the undo was refused otherwise;
                nothing was written.
        """
        plan_id, version = _target(work)
        origin = _origin(work)
        if self._writes.same_database(work.conn):
            outcome = self._writes.undo_txn(work.conn, plan_id, version, origin, origin=origin)
        else:
            outcome = self._writes.undo(plan_id, version, origin, origin=origin)
        _check_origin(outcome, origin, f"the undo of plan {plan_id} version {version}")

    def _dry_run(self, work: Work, plan_id: str, version: int) -> DryRun:
        if self._writes.same_database(work.conn):
            return self._writes.dry_run_txn(work.conn, plan_id, version)
        return self._writes.dry_run(plan_id, version)


def _target(work: Work) -> tuple[str, int]:
    """The plan version the branch names; a no vote if its args do not name one."""
    args = work.branch.args
    plan_id, version = args.get("planId"), args.get("version")
    if (
        set(args) != {"planId", "version"}
        or not isinstance(plan_id, str)
        or not plan_id
        or not isinstance(version, int)
        or isinstance(version, bool)
    ):
        raise Refuse(
            "BAD_ARGS",
            'a write branch\'s args are {"planId": <string>, "version": <integer>}, '
            f"not {sorted(args)}",
        )
    return plan_id, version


def _origin(work: Work) -> str:
    """Who asks for the write: this participant's branch of this transaction."""
    return f"{work.participant_id} {work.txn_id}/{work.branch.branch_id}"


def _preconditions(dry: DryRun) -> Preconditions:
    return Preconditions(
        versions={name: digest({"state": state}) for name, state in dry.live.items()},
        scope=f"write-plan {dry.digest}",
    )


def _check_origin(outcome: WriteOutcome, origin: str, what: str) -> None:
    # A completed key is this branch's own only if its result names this branch: the same
    # plan version named by another transaction's branch must not count as ours.
    if (
        outcome.status is ExecutionStatus.ALREADY_EXECUTED
        and outcome.result.get("origin") != origin
    ):
        raise ConcurrentExecution(
            f"{what} was executed for {outcome.result.get('origin') or 'another caller'}, "
            f"not for {origin}; nothing was written",
            key=outcome.key,
            origin=outcome.result.get("origin"),
        )


def _effect(outcome: WriteOutcome) -> dict[str, Any]:
    return {
        "planId": outcome.result.get("planId"),
        "version": outcome.result.get("version"),
        "digest": outcome.result.get("digest"),
        "key": outcome.key,
        "journalSeq": outcome.journal_seq,
        "records": outcome.result.get("records"),
    }
