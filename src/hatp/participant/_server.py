"""ParticipantServer: the Participant calls, run in process on a participant's store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from hatp import _checks
from hatp._faults import fault_point
from hatp._turns import in_turn
from hatp.clock import Clock, format_time
from hatp.errors import HatpError, OutcomeConflict, StaleFence
from hatp.evidence import SigningKey, digest
from hatp.model import (
    COMPENSATION,
    Branch,
    BranchState,
    BranchStatus,
    Plan,
    Preconditions,
    Tier,
)
from hatp.participant import _handlers as handlers
from hatp.participant._operation import Operation
from hatp.participant._quote import QUOTE
from hatp.participant._replace import REPLACE
from hatp.participant._rules import check_plan
from hatp.participant._undo import Compensation
from hatp.store import BranchStore, Store

__all__ = ["ParticipantServer"]

#: How often a serving participant releases holds whose lease ended, by default.
DEFAULT_SWEEP_SECONDS = 30.0

_log = logging.getLogger(__name__)


class ParticipantServer:
    """A participant: signs receipts with ``key``, keeps branch state in ``store``.

    Each call locks its branch row and does all its work, the operation's own
    writes included, in one store transaction before it returns a receipt
    [PART-DURABLE]; a repeat returns the stored receipt [PART-IDEMPOTENT].
    Database work runs in a worker thread, so the event loop never blocks on it;
    the calls of one event loop's participants take turns there (``hatp._turns``:
    one at a time, and a call stuck on its database holds the others up for 3 ms
    at most).

    Raises:
        ValueError: two operations share a name, an operation has no name or tier, is
            named ``hatp.compensate`` (reserved), or names an inverse not offered.
        TypeError: a compensate-tier operation does not override ``compensate``.
    """

    def __init__(
        self,
        participant_id: str,
        key: SigningKey,
        store: Store,
        operations: Iterable[Operation],
        clock: Clock,
    ) -> None:
        self._id = participant_id
        self._key = key
        self._store = store
        self._branches = BranchStore(store)
        self._clock = clock
        self._operations: Mapping[str, Operation] = _by_name(operations)
        self._plans = handlers.PlanCache()

    @property
    def participant_id(self) -> str:
        """This participant's id, as plans name it."""
        return self._id

    @property
    def operations(self) -> Mapping[str, Operation]:
        """The operations this participant offers, by name (read-only)."""
        return MappingProxyType(self._operations)

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Vote on one branch; return the signed PrepareReceipt (yes, or no with a reason).

        Raises:
            PlanInvalid: ``SHAPE``, ``UNKNOWN_PARTICIPANT``, ``UNKNOWN_OPERATION``,
                ``TIER_MISMATCH`` [PART-PLAN].
            OutcomeConflict: prepared before under another plan digest [PART-PLAN], or
                aborted before prepare [PART-ORDER]; flagged.
            StaleFence: ``fence`` is below the highest seen [PART-FENCE].
        """
        branch, operation = check_plan(plan, branch_id, self._id, self._operations)
        request = _planned("prepare", plan, branch, operation)
        return await self._call(plan.txn_id, branch_id, fence, request, handlers.PREPARE)

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Say what a prepare of the branch would give now; place nothing [PART-QUOTE].

        Whatever the operation's ``quote`` writes is rolled back, and the branch
        is left as it was, except that a higher fence is remembered [PART-FENCE].
        A quote is answered in every branch state (it reads the operation, not
        the branch) and is not stored: a repeat is a fresh quote.

        Returns:
            The signed Quote: ``cost`` and ``validUntil`` as the operation says
            (``null`` if it says nothing); for a hold, ``leaseSeconds`` and
            ``holdSeconds``, the longest lease and the horizon a prepare now would grant.

        Raises:
            PlanInvalid: as for prepare [PART-PLAN].
            StaleFence: ``fence`` is below the highest seen [PART-FENCE].
        """
        branch, operation = check_plan(plan, branch_id, self._id, self._operations)
        request = _planned("quote", plan, branch, operation)
        return await self._call(plan.txn_id, branch_id, fence, request, QUOTE)

    async def replace(self, plan: Plan, branch_id: str, fence: int, attempt: int) -> dict[str, Any]:
        """Place a lost hold again under the same plan [PART-REPLACE].

        Allowed only for a hold whose lease ended: released at expiry, or still
        prepared with its lease over (released first, in the same transaction).
        The operation's prepare runs again and its vote, with a lease and horizon
        from now, is stored as the branch's prepare receipt, all in one store
        transaction [PART-DURABLE]. Commit, renew, abort, status and sweep then
        work on the new hold as on any prepared hold.

        Args:
            attempt: the attempt wanted: the branch's last attempt + 1 (the
                prepare is attempt 1). If the branch already has this attempt,
                its stored receipt is returned and nothing is placed [PART-IDEMPOTENT].

        Returns:
            The signed PrepareReceipt with ``attempt``: yes, or no (the operation
            refused, or [PART-COST]) leaving the branch refused.

        Raises:
            NotReplaceable: the hold was not lost (live, committed, refused,
                compensated or aborted by the coordinator), the branch is not a
                hold, or ``attempt`` is not the next one; nothing was done.
            NotPrepared: never prepared here.
            PlanInvalid: as for prepare [PART-PLAN].
            OutcomeConflict: prepared under another plan digest [PART-PLAN]; flagged.
            StaleFence: [PART-FENCE].
        """
        branch, operation = check_plan(plan, branch_id, self._id, self._operations)
        request = _planned("replace", plan, branch, operation, attempt=attempt)
        return await self._call(plan.txn_id, branch_id, fence, request, REPLACE)

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        """Commit a prepared branch; return the signed commit receipt.

        Raises:
            NotPrepared: never prepared here [PART-ORDER].
            OutcomeConflict: voted no, aborted, compensated, or another plan digest; flagged.
            HoldExpired: the lease ended; the hold was released [PART-HOLD].
            PreconditionChanged: nothing was done [PART-PRECONDITION].
            StaleFence: [PART-FENCE].
        """
        request = handlers.Request("commit", plan_digest=plan_digest, preconditions=preconditions)
        return await self._call(txn_id, branch_id, fence, request, handlers.COMMIT)

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Release or void the branch, or remember an abort before prepare.

        Returns:
            The signed abort receipt (``planDigest`` null if never prepared), or the
            stored compensate receipt if the branch was compensated.

        Raises:
            OutcomeConflict: the branch committed; flagged [PART-ORDER].
            StaleFence: [PART-FENCE].
        """
        request = handlers.Request("abort")
        return await self._call(txn_id, branch_id, fence, request, handlers.ABORT)

    async def compensate(
        self, txn_id: str, branch_id: str, fence: int, undo_token: str
    ) -> dict[str, Any]:
        """Undo a committed compensate-tier branch once; return the compensate receipt.

        Raises:
            UndoInvalid: the token is not the one issued, or the tier cannot undo [PART-UNDO].
            NotPrepared: never prepared here.
            OutcomeConflict: the branch is not committed; flagged.
            StaleFence: [PART-FENCE].
        """
        request = handlers.Request("compensate", undo_token=undo_token)
        return await self._call(txn_id, branch_id, fence, request, handlers.COMPENSATE)

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Extend a prepared hold's lease while the decision is awaited [PART-RENEW].

        The lease runs again for as long as prepare granted it, from now, but
        never past the hold's horizon and never earlier than it was; the new
        lease is stored before the receipt is returned.

        Returns:
            The signed RenewReceipt with the new ``leaseExpiresAt`` (equal to
            ``holdHorizon`` once the horizon is reached: a renewal changes nothing then).

        Raises:
            HoldExpired: the lease had already ended; the hold was released.
            NotRenewable: the branch is a compensate- or final-tier dry run.
            NotPrepared: never prepared here.
            OutcomeConflict: voted no, committed, aborted or compensated; flagged.
            StaleFence: [PART-FENCE].
        """
        request = handlers.Request("renew")
        return await self._call(txn_id, branch_id, fence, request, handlers.RENEW)

    async def status(self, txn_id: str, branch_id: str) -> BranchStatus:
        """Return the branch's state, highest fence, last receipt and flags; changes nothing."""
        row = await asyncio.to_thread(self._branches.get, self._id, txn_id, branch_id)
        if row is None:
            return BranchStatus(
                txn_id=txn_id,
                branch_id=branch_id,
                participant=self._id,
                state=BranchState.UNKNOWN,
                fence=0,
                receipt=None,
            )
        return BranchStatus(
            txn_id=txn_id,
            branch_id=branch_id,
            participant=self._id,
            state=row.state,
            fence=row.fence,
            receipt=row.outcome_receipt or row.prepare_receipt,
            flags=list(row.flags),
        )

    async def sweep(self) -> list[tuple[str, str]]:
        """Release every hold whose lease has ended [PART-HOLD].

        Returns:
            The ``(txnId, branchId)`` of each hold released, each with its abort receipt stored.
        """
        return await asyncio.to_thread(self._sweep)

    @contextlib.asynccontextmanager
    async def sweeping(self, every: float = DEFAULT_SWEEP_SECONDS) -> AsyncIterator[None]:
        """Inside the ``with`` block, :meth:`sweep` every ``every`` seconds on this
        participant's clock [PART-SWEEP]: a hold whose coordinator vanished is
        released at its lease's end, not never. A sweep the store refuses is logged
        and tried at the next turn.

        Raises:
            ValueError: ``every`` is not a positive number of seconds.
        """
        if not every > 0:
            raise ValueError("every must be a positive number of seconds")
        task = asyncio.get_running_loop().create_task(self._sweep_every(every))
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _sweep_every(self, every: float) -> None:
        while True:
            try:
                released = await self.sweep()
            except HatpError as exc:  # the store is down: the holds wait for the next turn
                _log.warning("participant %s: sweep failed: %s", self._id, exc)
            else:
                for txn_id, branch_id in released:
                    _log.info("participant %s: released the expired hold %s/%s", self._id,
                              txn_id, branch_id)  # fmt: skip
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=every))

    # --- in the worker thread ------------------------------------------------------------

    async def _call(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        request: handlers.Request,
        table: Mapping[BranchState, handlers.Handler],
    ) -> dict[str, Any]:
        return await in_turn(
            lambda: asyncio.to_thread(self._run, txn_id, branch_id, fence, request, table)
        )

    def _run(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        request: handlers.Request,
        table: Mapping[BranchState, handlers.Handler],
    ) -> dict[str, Any]:
        now = self._clock.now()
        try:
            with self._store.transaction() as conn:
                row = self._branches.lock(conn, self._id, txn_id, branch_id)
                _check_fence(row.fence, fence, request.method, txn_id, branch_id)
                call = handlers.Call(
                    self._key,
                    self._operations,
                    self._branches,
                    conn,
                    row,
                    now,
                    fence,
                    request,
                    self._plans,
                )
                result = table[row.state](call)
                if call.row.fence < fence:
                    call.save()  # a repeat still remembers a higher fence [PART-FENCE]
                # Everything is written and nothing committed: a crash here loses it all.
                fault_point(f"participant.{request.method}.staged")
        except OutcomeConflict as conflict:
            # Refused and rolled back; the flag is written on its own so it survives.
            note = (
                f"{format_time(now)} {request.method} (fence {fence}) refused: {conflict.message}"
            )
            self._branches.flag(self._id, txn_id, branch_id, note)
            raise
        fault_point(f"participant.{request.method}.done")
        if isinstance(result, HatpError):
            raise result
        return result

    def _sweep(self) -> list[tuple[str, str]]:
        now = self._clock.now()
        with self._store.transaction() as conn:
            expired = self._branches.expired_holds(conn, self._id, now)
        released: list[tuple[str, str]] = []
        for found in expired:
            # One transaction per hold: one failing release does not keep the others.
            with self._store.transaction() as conn:
                row = self._branches.lock(conn, self._id, found.txn_id, found.branch_id)
                if not _lease_ended(row.state, row.tier, row.lease_expires_at, now):
                    continue  # committed or aborted since it was listed
                request = handlers.Request("abort")
                call = handlers.Call(
                    self._key,
                    self._operations,
                    self._branches,
                    conn,
                    row,
                    now,
                    row.fence,
                    request,
                    self._plans,
                )
                handlers.release_expired(call)
            released.append((found.txn_id, found.branch_id))
        return released


def _planned(
    method: handlers.Method,
    plan: Plan,
    branch: Branch,
    operation: Operation,
    attempt: int | None = None,
) -> handlers.Request:
    """A request that carries the plan: its wire form is written once, for its digest
    and for the branch row (a prepare stores it)."""
    wire = plan.to_wire()
    return handlers.Request(
        method, plan, branch, operation, plan_digest=digest(wire), plan_wire=wire, attempt=attempt
    )


def _check_fence(current: int, fence: int, method: str, txn_id: str, branch_id: str) -> None:
    if fence < current and _checks.is_on("PART-FENCE"):
        raise StaleFence(
            f"{method} carries fence {fence}, but fence {current} was already seen for branch "
            f"{branch_id!r} of {txn_id!r}: a newer coordinator owns it; nothing was done",
            txn_id=txn_id,
            branch_id=branch_id,
            fence=fence,
            current=current,
            requested=method,
        )


def _lease_ended(state: BranchState, tier: Tier | None, ends: Any, now: Any) -> bool:
    return state is BranchState.PREPARED and tier is Tier.HOLD and ends is not None and ends <= now


def _by_name(operations: Iterable[Operation]) -> dict[str, Operation]:
    found: dict[str, Operation] = {}
    for operation in operations:
        name = getattr(operation, "name", None)
        if not isinstance(name, str) or not isinstance(getattr(operation, "tier", None), Tier):
            raise ValueError(f"{type(operation).__name__} needs a str name and a Tier tier")
        if name in found:
            raise ValueError(f"two operations are named {name!r}")
        if operation.tier is Tier.COMPENSATE and type(operation).compensate is Operation.compensate:
            raise TypeError(f"compensate-tier operation {name!r} must override compensate()")
        found[name] = operation
    if COMPENSATION in found:
        raise ValueError(f"the operation name {COMPENSATION!r} is reserved for undoing")
    for name, operation in found.items():
        if operation.inverse is not None and operation.inverse not in found:
            raise ValueError(
                f"operation {name!r} names inverse {operation.inverse!r}, which is not offered"
            )
    # Every participant can take back its compensate-tier commits [PART-UNDO-OFFER].
    found[COMPENSATION] = Compensation(found)
    return found
