"""``@gated_tool``: register a function as an MCP tool and gate it, in one decorator.

The server's :func:`~hatp.mcp.gate_tools` set-up does the gating: the tool
is declared on the gate it installed, and each ``tools/call`` of it runs
only through :meth:`~hatp.gate.ApprovalGate.run`, with the definition the
server lists now bound (docs/spec.md §21).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer

from hatp.errors import GateInvalid
from hatp.gate import GatedTool, Price
from hatp.mcp._gate import gate_of

__all__ = ["gated_tool"]

_log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def gated_tool(
    server: MCPServer,
    address: str,
    *,
    action: str = "approve.call",
    amount: str | None = None,
    name: str | None = None,
    description: str | None = None,
    price: Callable[[Mapping[str, Any]], Price] | None = None,
) -> Callable[[F], F]:
    """Register the function as a tool of ``server`` (``server.tool(name, description)``)
    that runs only with an approval of exactly that call.

    Call :func:`~hatp.mcp.gate_tools` on the server first. ``address``,
    ``action``, ``amount`` and ``price`` are as in
    :class:`~hatp.gate.GatedTool`; ``name`` is the tool's name (the function's
    by default) and ``description`` its description (the docstring by
    default). The tool is declared on the gate before it is registered, so
    a tool that fails to register is refused, never run ungated; the gate's
    advert then names it. The function itself is returned unchanged: the
    gate sits on ``tools/call``.

    Raises:
        GateInvalid: ``gate_tools`` was not called on ``server``; at
            decoration, the declaration is not one the gate takes (a tool of
            that name gated already, a bad address, action or pointer).
    """
    try:
        gate = gate_of(server)
    except GateInvalid as refused:
        _log.warning("cannot gate a tool of %s: %s", server.name, refused.message)
        raise

    def decorate(fn: F) -> F:
        tool_name = name or str(getattr(fn, "__name__", ""))
        try:
            gate.declare(GatedTool(tool_name, address, action=action, amount=amount, price=price))
        except GateInvalid as refused:
            _log.warning("cannot gate %s on %s: %s", tool_name, server.name, refused.message)
            raise
        # The gate's advert names the new tool from now on (it is built afresh each time).
        return server.tool(name=tool_name, description=description)(fn)

    return decorate
