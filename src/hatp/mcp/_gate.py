"""Gated MCP tools: a tool server runs a risky tool only with an approval for exactly that call.

:func:`gate_tools` puts an :class:`~hatp.gate.ApprovalGate` in front of an
existing ``MCPServer``'s ``tools/call`` (the ``dev.hatp/gate`` extension's
``intercept_tool_call``). The tool definition an approval binds is the one
the server lists in ``tools/list`` now (:func:`listed_definition`), read
from the server on every gated call, so a changed listing invalidates the
approvals given for the old one. Who is calling comes from the server's own
authentication (the ``requester`` function), never from the call.

Two kinds of client call a gated tool (docs/spec.md §21):

- A client that declares the extension (``dev.hatp/gate`` or
  ``dev.hatp/hatp``, under ``capabilities.extensions`` or
  ``capabilities.experimental``) carries its CallApproval in
  ``params._meta["dev.hatp/approval"]`` and gets refusals as JSON-RPC errors
  with stable codes (``-31050`` ``APPROVAL_REQUIRED``, ``-31051``
  ``APPROVAL_INVALID``, ``-31052`` ``CALL_INVALID``).
- A stock client (a host driven by a model, which controls only the tool's
  name and arguments) calls the tool as it calls any other. When the server
  is given a gateway, it asks the Human Gateway itself to approve exactly
  this call for exactly this requester, remembers the ask durably
  (:class:`~hatp.store.GateAsks`), and answers with a tool result marked
  ``isError`` that says what happened and what to do next; when the agent
  calls again with the same arguments, the server finds the decision, checks
  the approval as it would one carried in ``_meta``, and runs the tool once.

Tools that are not gated pass through untouched.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import mcp_types as types
from mcp.client import Client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from hatp import _checks
from hatp.clock import format_time
from hatp.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    AskUnknown,
    GateInvalid,
    HatpError,
    Unavailable,
)
from hatp.gate import ApprovalGate, Requester
from hatp.mcp._install import install, installed, wrap_answers
from hatp.mcp._tool_results import refusal_result
from hatp.mcp._wire import (
    APPROVAL_META_KEY,
    EXTENSION_ID,
    GATE_EXTENSION_ID,
    hatp_error,
    mcp_error,
)
from hatp.model import CallRequirement, WireModel
from hatp.store import GateAsk, GateAsks
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "CallAsker",
    "GateAdvert",
    "GateExtension",
    "GatedToolAdvert",
    "RequesterOf",
    "call_gated",
    "gate_of",
    "gate_tools",
    "listed_definition",
]

_log = logging.getLogger(__name__)

#: Who is calling, from the request's context (its authenticated transport).
RequesterOf = Callable[[ServerRequestContext[Any, Any]], Requester]

#: The members of a listed tool that its definition, and so an approval, binds.
_DEFINITION_MEMBERS = ("name", "description", "inputSchema", "annotations")


class CallAsker(Protocol):
    """A Human Gateway a tool server asks on a stock client's behalf
    (:class:`~hatp.gateway.HumanGateway`, :class:`~hatp.mcp.McpGateway`)."""

    async def ask_call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask people to approve one call; the signed pending vote or CallApproval."""
        ...

    async def poll_call(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """The signed pending vote while people decide, else the CallApproval."""
        ...


class GatedToolAdvert(WireModel):
    """What an agent needs to know about one gated tool before it asks for an approval."""

    address: str
    action: str
    amount_pointer: str | None = None


class GateAdvert(WireModel):
    """The settings under ``capabilities.extensions["dev.hatp/gate"]``: the server id
    approvals must name, the gated tools, the gateways whose approvals count, and
    whether the server asks a gateway itself for a client that cannot."""

    server_id: str
    tools: dict[str, GatedToolAdvert]
    trusted_gateways: list[str]
    asks_for_stock_clients: bool = False


@dataclass(frozen=True)
class _Asking:
    """How the server asks the gateway for a stock client: where, where it keeps the
    asks, how long people have, how long an approval lasts, where people approve."""

    gateway: CallAsker
    asks: GateAsks
    decide: timedelta
    valid_seconds: int
    approver_page: str | None


def listed_definition(tool: types.Tool | Mapping[str, Any]) -> dict[str, Any]:
    """The definition an approval binds, from a tool as ``tools/list`` shows it: its
    ``name``, ``description``, ``inputSchema`` and ``annotations``, the ones it has.

    An agent computes the same from its own listing (``toolDigest`` is the
    digest of this object, docs/spec.md §20).
    """
    if isinstance(tool, types.Tool):
        listed: Mapping[str, Any] = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    else:
        listed = tool
    return {key: listed[key] for key in _DEFINITION_MEMBERS if listed.get(key) is not None}


class GateExtension(Extension):
    """The ``dev.hatp/gate`` extension: gates ``gate``'s tools on ``server``'s ``tools/call``.

    Built by :func:`gate_tools`, which says what each argument means.
    """

    identifier = GATE_EXTENSION_ID

    def __init__(
        self,
        server: MCPServer,
        gate: ApprovalGate,
        *,
        requester: RequesterOf,
        asking: _Asking | None = None,
    ) -> None:
        self._server = server
        self._gate = gate
        self._requester = requester
        self._asking = asking

    @property
    def gate(self) -> ApprovalGate:
        """The gate in front of the server's tools."""
        return self._gate

    def settings(self) -> dict[str, Any]:
        tools = {
            tool.name: GatedToolAdvert(
                address=tool.address, action=tool.action, amount_pointer=tool.amount
            )
            for tool in self._gate.tools
        }
        return GateAdvert(
            server_id=self._gate.server_id,
            tools=tools,
            trusted_gateways=self._gate.trusted_gateways,
            asks_for_stock_clients=self._asking is not None,
        ).to_wire()

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Run a gated tool only through :meth:`ApprovalGate.run`; pass any other through."""
        if not self._gate.gated(params.name):
            return await call_next(ctx)
        approval: Any = (params.meta or {}).get(APPROVAL_META_KEY)
        arguments = dict(params.arguments or {})
        extended = _speaks_hatp(ctx)

        async def run_tool(_: Mapping[str, Any]) -> HandlerResult:
            result = await call_next(ctx)
            if _is_error(result):  # the tool ran and failed: the approval is used, outcome FAILED
                raise _ToolFailed(result)
            return result

        try:
            requester = self._requester(ctx)
            # [MCP-GATE-LISTED] the definition bound is the one listed now.
            definition = (
                await self._listed(params.name) if _checks.is_on("MCP-GATE-LISTED") else None
            )
            if approval is not None or extended or self._asking is None:
                return await self._gate.run(
                    params.name, arguments, approval, requester, run_tool, definition=definition
                )
            call = _Call(params.name, arguments, requester, definition, run_tool)
            return await self._for_stock_client(call, self._asking)
        except _ToolFailed as failed:
            return failed.result
        except HatpError as refusal:
            if isinstance(refusal, Unavailable):
                _log.warning(
                    "gate %s: %s not run, no answer: %s",
                    self._gate.server_id,
                    params.name,
                    refusal.message,
                )
            if extended:
                raise mcp_error(refusal) from None
            return refusal_result(refusal)

    async def _listed(self, tool: str) -> dict[str, Any]:
        """The tool's definition as the server lists it now."""
        for listed in await self._server.list_tools():
            if listed.name == tool:
                return listed_definition(listed)
        raise GateInvalid(
            f"{tool} is gated but {self._gate.server_id} does not list it; register the "
            "tool on the server before it is called",
            tool=tool,
        )

    async def _for_stock_client(
        self,
        call: _Call,
        asking: _Asking,
    ) -> HandlerResult:
        """The call of a client that carries no approval: use the decision of the ask made
        for exactly this call and requester, or ask, and say what to do next."""
        gate = self._gate
        requirement = gate.requirement(call.tool, call.arguments, definition=call.definition)
        assert requirement is not None  # the tool is gated
        asks = asking.asks
        key = {
            "server": gate.server_id,
            "call_digest": requirement.call_digest,
            "agent": call.requester.agent,
            "on_behalf_of": call.requester.on_behalf_of,
        }
        earlier: HatpError | None = None
        current = await asks.store.call(asks.current, **key)
        if current is not None and current.ask_id is not None:
            try:
                answer = await asking.gateway.poll_call(current.ask_id)
            except AskUnknown as unknown:  # the gateway no longer knows it: ask again
                await self._close(current, "ASK_UNKNOWN")
                current, earlier = None, unknown
            else:
                if answer.get("kind") == "pending":
                    return _waiting(requirement, current, answer, earlier=None, asking=asking)
                outcome = await self._use(call, current, answer)
                if not isinstance(outcome, HatpError):
                    return outcome
                current, earlier = None, outcome
        if current is None:
            now = gate.clock.now()
            current = await asks.store.call(
                asks.start, tool=call.tool, decide_by=now + asking.decide, now=now, **key
            )
        request = _call_request(current, call, requirement, asking)
        answer = await asking.gateway.ask_call(request)
        await asks.store.call(asks.asked, current.request_id, str(answer.get("askId")))
        _log.info(
            "gate %s asked %s to approve %s for %s (ask %s)",
            gate.server_id,
            answer.get("gateway"),
            call.tool,
            call.requester.agent,
            answer.get("askId"),
        )
        if answer.get("kind") == "pending":
            return _waiting(requirement, current, answer, earlier=earlier, asking=asking)
        outcome = await self._use(call, current, answer)  # decided at once
        if isinstance(outcome, HatpError):
            raise outcome
        return outcome

    async def _use(
        self, call: _Call, ask: GateAsk, approval: dict[str, Any]
    ) -> HandlerResult | HatpError:
        """Run the tool with a decided ask's approval, checked as one carried in ``_meta``.

        Returns the tool's result, or the refusal of an approval that cannot be used
        (expired, used, a changed listing…): the ask is closed and the caller asks again.

        Raises:
            ApprovalInvalid: reason ``REJECTED``: people said no (the ask is closed; the
                next call asks again).
            HatpError: any other refusal, the ask left open (a store or gateway fault).
        """
        try:
            result: HandlerResult = await self._gate.run(
                call.tool,
                call.arguments,
                approval,
                call.requester,
                call.run_tool,
                definition=call.definition,
            )
        except _ToolFailed:
            await self._close(ask, "used")
            raise
        except ApprovalInvalid as refused:
            reason = str(refused.data.get("reason", refused.code))
            await self._close(ask, reason)
            if reason == "REJECTED":
                raise
            return refused
        await self._close(ask, "used")
        return result

    async def _close(self, ask: GateAsk, why: str) -> None:
        assert self._asking is not None
        asks = self._asking.asks
        await asks.store.call(asks.close, ask.request_id, why, self._gate.clock.now())
        _log.info(
            "gate %s: ask %s of %s closed: %s", self._gate.server_id, ask.ask_id, ask.tool, why
        )


@dataclass(frozen=True)
class _Call:
    """One call of a gated tool, as the server sees it."""

    tool: str
    arguments: dict[str, Any]
    requester: Requester
    definition: dict[str, Any] | None
    run_tool: Callable[[Mapping[str, Any]], Awaitable[HandlerResult]]


def _speaks_hatp(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared hatp (``dev.hatp/gate`` or ``dev.hatp/hatp``) under its
    capabilities' ``extensions`` (2026-era) or ``experimental`` (2025-era)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None:
        return False
    declared = {**(capabilities.experimental or {}), **(capabilities.extensions or {})}
    return GATE_EXTENSION_ID in declared or EXTENSION_ID in declared


def gate_tools(
    server: MCPServer,
    gate: ApprovalGate,
    *,
    requester: RequesterOf,
    gateway: CallAsker | None = None,
    asks: GateAsks | None = None,
    decide_seconds: float = 900,
    valid_seconds: int = 600,
    approver_page: str | None = None,
) -> None:
    """Gate ``gate``'s tools on ``server``, which keeps serving every other tool as before.

    ``requester(ctx)`` says who is calling (the agent and the person it acts
    for) as the server's transport authenticated them. With ``gateway`` (and
    ``asks``, where the server keeps the asks it made), the server asks that
    Human Gateway itself when a stock client calls a gated tool with no
    approval: people have ``decide_seconds`` to decide, the approval is good
    for ``valid_seconds`` (at most the gate's maximum lifetime), and the
    answer points people at ``approver_page`` when given.

    Raises:
        ValueError: the server has a ``dev.hatp/gate`` extension already;
            ``gateway`` without ``asks``; a time that is not positive.
    """
    asking = None
    if gateway is not None:
        if asks is None:
            raise ValueError("gate_tools: a gateway needs asks=GateAsks(store) to keep its asks")
        if decide_seconds <= 0 or valid_seconds < 1:
            raise ValueError("gate_tools: decide_seconds and valid_seconds must be positive")
        asking = _Asking(
            gateway,
            asks,
            timedelta(seconds=decide_seconds),
            min(valid_seconds, gate.max_lifetime_seconds),
            approver_page,
        )
    install(server, GateExtension(server, gate, requester=requester, asking=asking))
    wrap_answers(server, "tools/list", functools.partial(_without_output_schemas, gate))


def _without_output_schemas(gate: ApprovalGate, listing: HandlerResult) -> HandlerResult:
    """The server's tool listing, its gated tools listed without an ``outputSchema``.

    A refusal's ``structuredContent`` (``{"error": ...}``) cannot fit the schema of
    the tool's own answer, and stock clients check it even on an ``isError`` result
    (the TypeScript SDK 1.x does, modelcontextprotocol/typescript-sdk#1943): with a
    schema listed, such a client would never show the model the refusal. The tool
    still answers as before; the schema is not part of the definition an approval
    binds ([MCP-GATE-LISTED]).
    """
    if not isinstance(listing, types.ListToolsResult):
        return listing
    tools = [
        tool.model_copy(update={"output_schema": None}) if gate.gated(tool.name) else tool
        for tool in listing.tools
    ]
    return listing.model_copy(update={"tools": tools})


def gate_of(server: MCPServer) -> ApprovalGate:
    """The gate :func:`gate_tools` put in front of ``server``'s tools.

    Raises:
        GateInvalid: ``server`` has no gate (call :func:`gate_tools` first).
    """
    extension = installed(server, GATE_EXTENSION_ID)
    if not isinstance(extension, GateExtension):
        raise GateInvalid(
            "this MCP server has no approval gate: call hatp.mcp.gate_tools(server, gate, ...) "
            "before declaring gated tools on it"
        )
    return extension.gate


async def call_gated(
    client: Client,
    tool: str,
    arguments: Mapping[str, Any],
    approval: Mapping[str, Any] | None,
) -> types.CallToolResult:
    """Call ``tool`` on a gated server, with ``approval`` (a signed CallApproval) in ``_meta``.

    The client must declare the extension
    (``Client(..., extensions=[advertise(GATE_EXTENSION_ID)])``) for refusals
    to come back as typed errors; a stock client gets them as tool results.

    Returns:
        The tool's result (``is_error`` set if the tool itself failed).

    Raises:
        ApprovalRequired: no approval; ``data.requirement`` says what to ask for.
        ApprovalInvalid, CallInvalid: the gate refused; the tool did not run.
        MCPError: any other JSON-RPC error.
    """
    meta: dict[str, Any] = {} if approval is None else {APPROVAL_META_KEY: dict(approval)}
    try:
        return await client.call_tool(tool, dict(arguments), meta=meta or None)  # type: ignore[arg-type]
    except MCPError as exc:
        refusal = hatp_error(exc)
        if refusal is not None:
            raise refusal from None
        raise


def _call_request(
    ask: GateAsk, call: _Call, requirement: CallRequirement, asking: _Asking
) -> dict[str, Any]:
    """The CallRequest for exactly this call, as the server sends it for a stock client."""
    price = None if requirement.price is None else requirement.price.to_wire()
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "call-request",
        "requestId": ask.request_id,
        "requester": call.requester.agent,
        "onBehalfOf": call.requester.on_behalf_of,
        "call": {"server": requirement.server, "tool": call.tool, "arguments": call.arguments},
        "toolDefinition": call.definition,  # None only with [MCP-GATE-LISTED] switched off
        "address": requirement.address,
        "action": requirement.action,
        "amountPointer": requirement.amount_pointer,
        "price": price,
        "passkey": False,
        "reason": None,
        "decideBy": format_time(ask.decide_by),
        "validSeconds": asking.valid_seconds,
    }


def _waiting(
    requirement: CallRequirement,
    ask: GateAsk,
    pending: Mapping[str, Any],
    *,
    earlier: HatpError | None,
    asking: _Asking,
) -> types.CallToolResult:
    """The tool result a stock client gets while people decide: what happened, who must
    approve what until when, and what to do next; the requirement in structured form."""
    amount = "" if requirement.amount is None else f" of {requirement.amount}"
    before = (
        "" if earlier is None else f"The earlier approval could not be used: {earlier.message} "
    )
    where = "" if asking.approver_page is None else f" They approve at {asking.approver_page}."
    text = (
        f"{before}{requirement.tool} did not run: it needs an approval of exactly this call. "
        f"This server asked the Human Gateway {pending.get('gateway', '')} for it (ask "
        f"{pending.get('askId')}): {requirement.address} must approve "
        f"{requirement.action}{amount}, by {format_time(ask.decide_by)}.{where} "
        f"Once approved, call {requirement.tool} again with exactly the same arguments; it "
        "then runs once. Other arguments are another call and need their own approval."
    )
    refusal = ApprovalRequired(
        text,
        tool=requirement.tool,
        requirement=requirement.to_wire(),
        ask={
            "askId": pending.get("askId"),
            "requestId": ask.request_id,
            "gateway": pending.get("gateway"),
            "decideBy": format_time(ask.decide_by),
            "approverPage": asking.approver_page,
        },
        **({} if earlier is None else {"earlier": earlier.to_dict()}),
    )
    return refusal_result(refusal)


class _ToolFailed(Exception):
    """The gated tool ran and answered with an error result."""

    def __init__(self, result: HandlerResult) -> None:
        super().__init__("the tool failed")
        self.result = result


def _is_error(result: HandlerResult) -> bool:
    if isinstance(result, types.CallToolResult):
        return bool(result.is_error)
    if isinstance(result, Mapping):
        return bool(result.get("isError"))
    return False
