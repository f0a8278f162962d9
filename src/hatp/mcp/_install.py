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

from typing import Any

from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer

__all__ = ["install", "tool_registry"]


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
