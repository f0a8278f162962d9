"""Adding an extension to an MCP server that already exists.

The SDK (2.3) takes extensions only when an ``MCPServer`` is built
(``MCPServer(extensions=[...])``). hatp's one-call setup (``serve_hatp``,
``serve_gateway``, ``gate_tools``) adds one to a server the tool author built
already, with the SDK's own steps for constructor extensions: register what
the extension contributes, then compose every extension's ``tools/call``
interceptor around the server's handler again. Those two steps are private
to the SDK, and so is its tool registry (where a leased tool's own input
schema is set), so this module is the one place that touches them, and
refuses clearly if a later SDK has moved them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer

__all__ = ["install", "installed", "tool_registry", "wrap_answers"]

#: The prefix of hatp's extension identifiers, mirrored under ``capabilities.experimental``.
_OURS = "dev.hatp/"


def install(server: MCPServer, extension: Extension) -> None:
    """Add ``extension`` to ``server``, as ``MCPServer(extensions=[...])`` would have.

    Raises:
        ValueError: the server has an extension with this identifier already.
        RuntimeError: this SDK version offers no way to add an extension later.
    """
    apply = getattr(server, "_apply_extension", None)
    compose = getattr(server, "_install_extension_interceptor", None)
    if apply is None or compose is None:
        raise RuntimeError(
            "this mcp SDK cannot add an extension to a built server; pass "
            f"MCPServer(extensions=[...]) the {extension.identifier} extension instead"
        )
    apply(extension)
    compose()
    _advertise_to_2025_clients(server)


def installed(server: MCPServer, identifier: str) -> Extension | None:
    """The extension ``identifier`` on ``server``, or ``None``."""
    extensions = getattr(server, "_extensions", None)
    if extensions is None:
        raise RuntimeError("this mcp SDK keeps its extensions elsewhere; hatp cannot find them")
    return next((e for e in extensions if e.identifier == identifier), None)


def _advertise_to_2025_clients(server: MCPServer) -> None:
    """Advertise hatp's extensions as they are now, under ``capabilities.experimental`` too.

    A session on a 2025 protocol version (most hosts, the TypeScript SDK 1.x) sees no
    ``capabilities.extensions``; ``experimental`` reaches every version. And the SDK
    reads an extension's settings once, when it is added, while a gate may declare a
    tool later (``@gated_tool``). The SDK builds the capabilities in its low-level
    server's ``get_capabilities`` (for the ``initialize`` answer and
    ``server/discover`` alike), so this wraps that method on this server only, once:
    each answer takes every ``dev.hatp/*`` extension's settings afresh, under both.
    """
    low: Any = getattr(server, "_lowlevel_server", None)
    if low is None or not callable(getattr(low, "get_capabilities", None)):
        raise RuntimeError("this mcp SDK builds its capabilities elsewhere; hatp cannot advertise")
    if getattr(low, "_hatp_experimental", False):
        return
    built = low.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities: types.ServerCapabilities = built(*args, **kwargs)
        extensions = getattr(server, "_extensions", ())
        ours = {e.identifier: e.settings() for e in extensions if e.identifier.startswith(_OURS)}
        if not ours:
            return capabilities
        return capabilities.model_copy(
            update={
                "extensions": {**(capabilities.extensions or {}), **ours},
                "experimental": {**ours, **(capabilities.experimental or {})},
            }
        )

    low.get_capabilities = get_capabilities
    low._hatp_experimental = True


def wrap_answers(server: MCPServer, method: str, wrap: Callable[[Any], Any]) -> None:
    """Pass every answer of ``server``'s ``method`` handler through ``wrap`` before it is sent.

    Raises:
        RuntimeError: this SDK version keeps its handlers elsewhere, or serves no ``method``.
    """
    low: Any = getattr(server, "_lowlevel_server", None)
    entry = None if low is None else low.get_request_handler(method)
    if entry is None:
        raise RuntimeError(f"this mcp SDK serves {method} elsewhere; hatp cannot adjust its answer")
    handler = entry.handler

    async def wrapped(ctx: Any, params: Any) -> Any:
        return wrap(await handler(ctx, params))

    low.add_request_handler(method, entry.params_type, wrapped)


def tool_registry(server: MCPServer) -> Any:
    """The server's tool registry, to show each leased tool's own input schema.

    The SDK (2.3) takes a tool's schema only from a Python signature; the
    registry is private, so this module is where it is reached, and it
    refuses clearly if a later SDK has moved it.
    """
    registry = getattr(server, "_tool_manager", None)
    if registry is None or not callable(getattr(registry, "get_tool", None)):
        raise RuntimeError(
            "this mcp SDK keeps its tools elsewhere; hatp cannot show the leased tools' schemas"
        )
    return registry
