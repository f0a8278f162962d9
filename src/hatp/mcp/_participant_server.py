"""A participant behind an MCP server: the ``dev.hatp/txn/*`` methods, served.

:func:`serve_hatp` adds the hatp extension to an MCP server a tool author has
already built; :class:`ParticipantExtension` is the same extension for
``MCPServer(extensions=[...])``. Each method reads its params (a plan travels
in its wire form and is parsed here, so its digest is the one the coordinator
computed), calls the :class:`~hatp.participant.ParticipantServer`, and answers
with what it signed. Every rule stays in the participant: this module only
carries requests and answers (docs/spec.md §21).

A stock MCP host, which sends no hatp method, reads a branch's status through
the read-only tool :data:`BRANCH_STATUS_TOOL`: the same BranchStatus, as a tool
result (a refusal is an ``isError`` result, :mod:`hatp.mcp._tool_results`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from hatp.evidence import PublicKey
from hatp.mcp._advert import HatpAdvert, OperationAdvert
from hatp.mcp._install import install
from hatp.mcp._rpc import HatpParams, method
from hatp.mcp._tool_results import answer_or_refusal, tool_result
from hatp.mcp._wire import EXTENSION_ID, METHODS
from hatp.model import BranchState, BranchStatus, Preconditions, Tier, parse_plan
from hatp.participant import Operation, ParticipantServer
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "BRANCH_STATUS_TOOL",
    "BranchParams",
    "CommitParams",
    "CompensateParams",
    "ParticipantExtension",
    "PlanParams",
    "ReplaceParams",
    "StatusParams",
    "serve_hatp",
]

Ctx = ServerRequestContext[Any, Any]

#: The read-only tool a stock MCP host calls for ``txn/status``'s answer.
BRANCH_STATUS_TOOL: Final = "hatp_branch_status"

_TxnId = Annotated[str, Field(min_length=1, description="the transaction's id (its plan's txnId)")]
_BranchId = Annotated[str, Field(min_length=1, description="the branch's id in that plan")]


class StatusParams(HatpParams):
    """``txn/status``: which branch."""

    txn_id: str = Field(min_length=1)
    branch_id: str = Field(min_length=1)


class BranchParams(StatusParams):
    """``txn/abort`` and ``txn/renew``: which branch, under which fence."""

    fence: int = Field(ge=0)


class CommitParams(BranchParams):
    """``txn/commit``: the branch, its fence, the plan digest voted on, the preconditions seen."""

    plan_digest: str = Field(min_length=1)
    preconditions: Preconditions | None = None


class CompensateParams(BranchParams):
    """``txn/compensate``: the branch, its fence, and the undo token its commit returned."""

    undo_token: str


class PlanParams(HatpParams):
    """``txn/prepare`` and ``txn/quote``: the plan's wire form, the branch, the fence."""

    plan: dict[str, Any]
    branch_id: str = Field(min_length=1)
    fence: int = Field(ge=0)


class ReplaceParams(PlanParams):
    """``txn/replace``: as prepare, with the attempt wanted."""

    attempt: int = Field(ge=1)


class ParticipantExtension(Extension):
    """The ``dev.hatp/hatp`` extension serving one :class:`ParticipantServer`.

    Its settings are the participant's :class:`HatpAdvert` (role
    ``participant``, its id, its operations with their tiers and, for holds,
    their lease limits, and ``keys`` as public JWKs); its methods are
    ``txn/prepare``, ``txn/quote``, ``txn/replace``, ``txn/commit``,
    ``txn/abort``, ``txn/compensate``, ``txn/renew`` and ``txn/status`` under
    ``dev.hatp/``. A refusal goes back as a JSON-RPC error carrying the
    participant's typed error; params that do not fit are refused with
    ``PEER_INCOMPATIBLE`` (reason ``METHOD``). Its one tool,
    :data:`BRANCH_STATUS_TOOL`, answers ``txn/status`` to a host that sends no
    hatp method.

    Raises:
        ValueError: ``keys`` is empty.
    """

    identifier = EXTENSION_ID

    def __init__(self, participant: ParticipantServer, *, keys: Sequence[PublicKey]) -> None:
        if not keys:
            raise ValueError(
                f"advertise at least one public key for {participant.participant_id}: "
                "callers check receipts against it"
            )
        self._participant = participant
        self._advert = HatpAdvert(
            hatp_version=PROTOCOL_VERSION,
            id=participant.participant_id,
            roles=["participant"],
            operations={name: _operation_advert(op) for name, op in participant.operations.items()},
            keys=[key.to_jwk() for key in keys],
        )

    @property
    def advert(self) -> HatpAdvert:
        """What this extension advertises."""
        return self._advert

    def settings(self) -> dict[str, Any]:
        """The advert's wire form, under ``capabilities.extensions["dev.hatp/hatp"]``."""
        return self._advert.settings()

    def methods(self) -> Sequence[MethodBinding]:
        """The eight ``dev.hatp/txn/*`` participant methods."""
        return [
            method(METHODS["txn/prepare"], PlanParams, self._prepare),
            method(METHODS["txn/quote"], PlanParams, self._quote),
            method(METHODS["txn/replace"], ReplaceParams, self._replace),
            method(METHODS["txn/commit"], CommitParams, self._commit),
            method(METHODS["txn/abort"], BranchParams, self._abort),
            method(METHODS["txn/compensate"], CompensateParams, self._compensate),
            method(METHODS["txn/renew"], BranchParams, self._renew),
            method(METHODS["txn/status"], StatusParams, self._status),
        ]

    def tools(self) -> Sequence[ToolBinding]:
        """The read-only tool :data:`BRANCH_STATUS_TOOL` (``{txnId, branchId}``)."""
        return [
            ToolBinding(
                self._branch_status,
                kwargs={
                    "name": BRANCH_STATUS_TOOL,
                    "description": (
                        f"Where one branch of a hatp transaction stands at {self._advert.id}; "
                        "changes nothing. Answers structuredContent {status: BranchStatus}: "
                        "state (prepared, refused, committed, aborted, compensated, or unknown "
                        "when this participant was never asked), the highest fence seen, the "
                        "last receipt it signed, and flags."
                    ),
                    "annotations": types.ToolAnnotations(
                        read_only_hint=True, open_world_hint=False
                    ),
                },
            )
        ]

    # The parameters are named as the tool's arguments are on the wire (camelCase).
    async def _branch_status(self, txnId: _TxnId, branchId: _BranchId) -> types.CallToolResult:
        async def read() -> types.CallToolResult:
            status = await self._participant.status(txnId, branchId)
            return tool_result(_status_line(status), {"status": status.to_wire()})

        return await answer_or_refusal(BRANCH_STATUS_TOOL, read)

    async def _prepare(self, p: PlanParams, ctx: Ctx) -> Mapping[str, Any]:
        receipt = await self._participant.prepare(parse_plan(p.plan), p.branch_id, p.fence)
        return {"receipt": receipt}

    async def _quote(self, p: PlanParams, ctx: Ctx) -> Mapping[str, Any]:
        quote = await self._participant.quote(parse_plan(p.plan), p.branch_id, p.fence)
        return {"quote": quote}

    async def _replace(self, p: ReplaceParams, ctx: Ctx) -> Mapping[str, Any]:
        plan = parse_plan(p.plan)
        receipt = await self._participant.replace(plan, p.branch_id, p.fence, p.attempt)
        return {"receipt": receipt}

    async def _commit(self, p: CommitParams, ctx: Ctx) -> Mapping[str, Any]:
        receipt = await self._participant.commit(
            p.txn_id, p.branch_id, p.fence, p.plan_digest, p.preconditions
        )
        return {"receipt": receipt}

    async def _abort(self, p: BranchParams, ctx: Ctx) -> Mapping[str, Any]:
        return {"receipt": await self._participant.abort(p.txn_id, p.branch_id, p.fence)}

    async def _compensate(self, p: CompensateParams, ctx: Ctx) -> Mapping[str, Any]:
        receipt = await self._participant.compensate(p.txn_id, p.branch_id, p.fence, p.undo_token)
        return {"receipt": receipt}

    async def _renew(self, p: BranchParams, ctx: Ctx) -> Mapping[str, Any]:
        return {"receipt": await self._participant.renew(p.txn_id, p.branch_id, p.fence)}

    async def _status(self, p: StatusParams, ctx: Ctx) -> Mapping[str, Any]:
        status = await self._participant.status(p.txn_id, p.branch_id)
        return {"status": status.to_wire()}


def serve_hatp(
    server: MCPServer, participant: ParticipantServer, *, keys: Sequence[PublicKey]
) -> None:
    """Make ``server`` the participant ``participant``; its own tools keep working.

    Adds :class:`ParticipantExtension` to the already-built server: it then
    advertises the hatp extension and serves the ``dev.hatp/txn/*`` methods.

    Raises:
        ValueError: ``keys`` is empty, or the server has a hatp extension already.
        RuntimeError: this ``mcp`` SDK cannot add an extension to a built server.
    """
    install(server, ParticipantExtension(participant, keys=keys))


def _status_line(status: BranchStatus) -> str:
    """One line a person or a model reads: which branch, its state, and what it holds."""
    receipt = status.receipt or {}
    details: list[str] = []
    if status.state is BranchState.UNKNOWN:
        details.append("this participant was never asked about it")
    elif status.state is BranchState.PREPARED and receipt.get("leaseExpiresAt"):
        details.append(f"hold until {receipt['leaseExpiresAt']}")
    elif status.state is BranchState.REFUSED and receipt.get("reason"):
        details.append(f"because {receipt['reason']}")
    if status.state is not BranchState.UNKNOWN:
        details.append(f"fence {status.fence}")
    if status.flags:
        details.append("flags: " + ", ".join(status.flags))
    return (
        f"branch {status.branch_id} of {status.txn_id} at {status.participant}: "
        f"{status.state.value} ({'; '.join(details)})"
    )


def _operation_advert(operation: Operation) -> OperationAdvert:
    if operation.tier is Tier.HOLD:
        return OperationAdvert(
            tier=operation.tier,
            max_lease_seconds=operation.max_lease_seconds,
            max_hold_seconds=operation.max_hold_seconds,
        )
    return OperationAdvert(tier=operation.tier)
