"""Gated MCP tools: a tool server runs a risky tool only with an approval for exactly that call.

:func:`gate_tools` puts an :class:`~hatp.gate.ApprovalGate` in front of an
existing ``MCPServer``'s ``tools/call`` (the ``dev.hatp/gate`` extension's
``intercept_tool_call``). A call of a gated tool carries its CallApproval in
``params._meta["dev.hatp/approval"]``; the gate checks it against the call the
server itself sees, claims its single use durably, and only then lets the
tool run (:meth:`ApprovalGate.run`). Who is calling comes from the server's
own authentication (the ``requester`` function), never from the call. A
refusal is a JSON-RPC error: ``-31050`` ``APPROVAL_REQUIRED`` (its
``data.data.requirement`` says what to ask the Human Gateway for), ``-31051``
``APPROVAL_INVALID``, ``-31052`` ``CALL_INVALID``. Tools that are not gated
pass through untouched, so a plain MCP client still calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from hatp.errors import HatpError
from hatp.gate import ApprovalGate, Requester
from hatp.mcp._install import install
from hatp.mcp._wire import APPROVAL_META_KEY, GATE_EXTENSION_ID, hatp_error, mcp_error
from hatp.model import WireModel

__all__ = [
    "GateAdvert",
    "GateExtension",
    "GatedToolAdvert",
    "RequesterOf",
    "call_gated",
    "gate_tools",
]

#: Who is calling, from the request's context (its authenticated transport).
RequesterOf = Callable[[ServerRequestContext[Any, Any]], Requester]


class GatedToolAdvert(WireModel):
    """What an agent needs to know about one gated tool before it asks for an approval."""

    address: str
    action: str
    amount_pointer: str | None = None


class GateAdvert(WireModel):
    """The settings under ``capabilities.extensions["dev.hatp/gate"]``: the server id
    approvals must name, the gated tools, and the gateways whose approvals count."""

    server_id: str
    tools: dict[str, GatedToolAdvert]
    trusted_gateways: list[str]


class GateExtension(Extension):
    """The ``dev.hatp/gate`` extension: gates ``gate``'s tools on this server's ``tools/call``.

    Usable directly as ``MCPServer(extensions=[GateExtension(gate, requester=...)])``.
    """

    identifier = GATE_EXTENSION_ID

    def __init__(self, gate: ApprovalGate, *, requester: RequesterOf) -> None:
        self._gate = gate
        self._requester = requester

    def settings(self) -> dict[str, Any]:
        return _advert(self._gate).to_wire()

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

        async def run_tool(_: Mapping[str, Any]) -> HandlerResult:
            result = await call_next(ctx)
            if _is_error(result):  # the tool ran and failed: the approval is used, outcome FAILED
                raise _ToolFailed(result)
            return result

        try:
            requester = self._requester(ctx)
            return await self._gate.run(params.name, arguments, approval, requester, run_tool)
        except _ToolFailed as failed:
            return failed.result
        except HatpError as refusal:
            raise mcp_error(refusal) from None


def gate_tools(server: MCPServer, gate: ApprovalGate, *, requester: RequesterOf) -> None:
    """Gate ``gate``'s tools on ``server``, which keeps serving every other tool as before.

    ``requester(ctx)`` says who is calling (the agent and the person it acts
    for) as the server's transport authenticated them.

    Raises:
        ValueError: the server has a ``dev.hatp/gate`` extension already.
    """
    install(server, GateExtension(gate, requester=requester))


async def call_gated(
    client: Client,
    tool: str,
    arguments: Mapping[str, Any],
    approval: Mapping[str, Any] | None,
) -> types.CallToolResult:
    """Call ``tool`` on a gated server, with ``approval`` (a signed CallApproval) in ``_meta``.

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


def _advert(gate: ApprovalGate) -> GateAdvert:
    tools = {
        tool.name: GatedToolAdvert(
            address=tool.address, action=tool.action, amount_pointer=tool.amount
        )
        for tool in gate.tools
    }
    return GateAdvert(server_id=gate.server_id, tools=tools, trusted_gateways=gate.trusted_gateways)
