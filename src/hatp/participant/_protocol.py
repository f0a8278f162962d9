"""The calls a coordinator makes on a participant, whatever the transport."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from hatp.model import BranchStatus, Plan, Preconditions

__all__ = ["Participant"]


@runtime_checkable
class Participant(Protocol):
    """A participant as the coordinator sees it: eight async calls.

    Every call is keyed by ``(txnId, branchId)`` (``replace`` also by its
    attempt) and returns the same signed receipt when repeated
    [PART-IDEMPOTENT]; ``quote`` and ``status`` store nothing and change
    nothing. ``ParticipantServer`` implements it in process; transports
    implement it on the client side.
    """

    @property
    def participant_id(self) -> str:
        """The participant's id, as branches name it (``mcp://airline.example``)."""
        ...

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Vote on one branch; return the signed PrepareReceipt (yes or no).

        Raises:
            PlanInvalid, OutcomeConflict, StaleFence: see docs/spec.md.
        """
        ...

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Say what a prepare would give now, placing nothing; return the signed Quote.

        Raises:
            PlanInvalid, StaleFence.
        """
        ...

    async def replace(self, plan: Plan, branch_id: str, fence: int, attempt: int) -> dict[str, Any]:
        """Place a lost hold again; return the signed PrepareReceipt of ``attempt``.

        Raises:
            NotReplaceable, NotPrepared, PlanInvalid, OutcomeConflict, StaleFence.
        """
        ...

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        """Commit a prepared branch; return the signed OutcomeReceipt (kind commit).

        Raises:
            NotPrepared, OutcomeConflict, HoldExpired, PreconditionChanged, StaleFence.
        """
        ...

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Release or void a branch (also before any prepare); return the abort receipt.

        Raises:
            OutcomeConflict, StaleFence.
        """
        ...

    async def compensate(
        self, txn_id: str, branch_id: str, fence: int, undo_token: str
    ) -> dict[str, Any]:
        """Undo a committed compensate-tier branch; return the compensate receipt.

        Raises:
            NotPrepared, OutcomeConflict, UndoInvalid, StaleFence.
        """
        ...

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Extend a prepared hold's lease, up to its horizon; return the signed RenewReceipt.

        Raises:
            HoldExpired, NotRenewable, NotPrepared, OutcomeConflict, StaleFence.
        """
        ...

    async def status(self, txn_id: str, branch_id: str) -> BranchStatus:
        """Return where the branch stands; changes nothing."""
        ...
