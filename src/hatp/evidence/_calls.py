"""The digests that bind an approval to one tool call (docs/spec.md §20)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hatp.evidence._digest import digest

__all__ = ["call_digest", "tool_digest"]


def call_digest(server: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """Return the digest of one exact call: ``{"server", "tool", "arguments"}``. [CALL-DIGEST]

    Raises:
        InvalidJson: the arguments have no canonical JSON form.
    """
    return digest({"server": server, "tool": tool, "arguments": dict(arguments)})


def tool_digest(definition: Mapping[str, Any]) -> str:
    """Return the digest of a tool's definition as its server lists it (name,
    description, input schema, …): a changed description changes it. [CALL-DIGEST]

    Raises:
        InvalidJson: the definition has no canonical JSON form.
    """
    return digest(dict(definition))
