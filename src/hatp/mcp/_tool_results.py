"""What a hatp tool answers a stock MCP host: an answer, or a hatp refusal, as a tool result.

A host that speaks no hatp method (an MCP SDK client that declares no
extension, or any host driven by a model) can still list and call tools, and
it shows the model what a tool answered. MCP puts a tool's own failure in its
result (``isError: true``), so the model reads it; a JSON-RPC error is for a
request that is malformed, and hosts often hide it. So every hatp tool
answers with a ``CallToolResult``:

- an answer (:func:`tool_result`): one text block a person or a model reads,
  and ``structuredContent``, the JSON object a program reads (signed objects
  in it exactly as they were signed);
- a refusal (:func:`refusal_result`): ``isError: true``, the hatp message as
  its text, and ``structuredContent`` ``{"error": {code, message, data}}``, the
  hatp error's wire form (docs/spec.md §9), so a program tells refusals apart
  by ``code`` as it does on every other edge.

:func:`answer_or_refusal` runs a tool's work and renders a hatp refusal it
raises; anything else it raises is the SDK's to report (an internal error is
no answer, not a refusal).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types

from hatp.errors import HatpError

__all__ = ["answer_or_refusal", "refusal_result", "tool_result"]

_log = logging.getLogger(__name__)


def tool_result(text: str, structured: Mapping[str, Any]) -> types.CallToolResult:
    """An answer: ``text`` for a person or a model, ``structured`` for a program.

    Args:
        text: what the answer says, readable on its own (a model may see only this).
        structured: the answer as a JSON object, under the members the tool documents.
    """
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=dict(structured),
    )


def refusal_result(error: HatpError) -> types.CallToolResult:
    """A hatp refusal as a tool result: ``isError`` true, its message as the text, and
    ``structuredContent`` ``{"error": error.to_dict()}``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=error.message)],
        structured_content={"error": error.to_dict()},
        is_error=True,
    )


async def answer_or_refusal(
    tool: str, work: Callable[[], Awaitable[types.CallToolResult]]
) -> types.CallToolResult:
    """Run ``work`` (one call of the tool named ``tool``) and return its result; a hatp
    refusal it raises comes back as :func:`refusal_result` (and is logged).

    Raises:
        Exception: whatever ``work`` raises that is not a :class:`HatpError`,
            unchanged (the SDK answers it as the tool's internal error).
    """
    try:
        return await work()
    except HatpError as refusal:
        _log.info("tool %s refused: %s", tool, refusal.code)
        return refusal_result(refusal)
