"""What a tool server declares about its gated tools, and who is calling.

A :class:`GatedTool` says who must approve a call of the tool (an address and
an action), where its arguments hold the amount the approvers' authority must
cover, optionally the tool's definition that an approval must bind, and
optionally the server's own price for a call (x402-style). The declarations
are checked once, when the gate is built, so a wrong one fails at start-up
with ``GATE_INVALID`` instead of letting a call through later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpointer
from pydantic import TypeAdapter, ValidationError

from hatp.errors import AddressInvalid, GateInvalid, HatpError
from hatp.evidence import tool_digest
from hatp.model import Address, AddressKind, Amount, parse_address
from hatp.model.call import ToolName
from hatp.model.plan import Name

__all__ = ["GatedTool", "Price", "Requester", "Tools"]

_TOOL_NAME = TypeAdapter(ToolName)
_ACTION = TypeAdapter(Name)


@dataclass(frozen=True, slots=True)
class Price:
    """What the server charges for one call, and to whom it is paid."""

    amount: Amount
    pay_to: str


@dataclass(frozen=True, slots=True)
class Requester:
    """Who is calling, as the transport authenticated them: the agent, and the
    person it acts for. Never read from the call or the approval."""

    agent: str
    on_behalf_of: str


@dataclass(frozen=True)
class GatedTool:
    """A tool that runs only with an approval for the exact call.

    ``address`` is who must approve (``human://org/role/R?quorum=2-of-3``);
    ``action`` the authority they need; ``amount`` a JSON Pointer to the
    ``{value, currency}`` in the arguments their authority must cover.
    With ``definition`` (the tool as the server lists it) an approval must
    bind its digest, so a tool changed after approval is refused. With
    ``price`` the server names what one call with these arguments costs and
    whom it pays; the approval must cap the price at no less, to the same payee.
    """

    name: str
    address: str
    action: str = "approve.call"
    amount: str | None = None
    definition: Mapping[str, Any] | None = None
    price: Callable[[Mapping[str, Any]], Price] | None = None


@dataclass(frozen=True)
class _Declared:
    """A checked declaration, with what the gate computes from it once."""

    tool: GatedTool
    address: Address
    tool_digest: str | None


class Tools:
    """The checked declarations of one server's gated tools, by name."""

    def __init__(self, tools: Iterable[GatedTool]) -> None:
        self._by_name: dict[str, _Declared] = {}
        for tool in tools:
            self.add(declare(tool))

    def add(self, declared: _Declared) -> None:
        """Add one checked declaration.

        Raises:
            GateInvalid: a tool of this name is declared already.
        """
        name = declared.tool.name
        if name in self._by_name:
            raise GateInvalid(
                f"tool {name!r} is declared twice; declare each gated tool once", tool=name
            )
        self._by_name[name] = declared

    def get(self, name: str) -> _Declared | None:
        """Return the declaration of tool ``name``, or ``None`` if it is not gated."""
        return self._by_name.get(name)

    def names(self) -> list[str]:
        """Return the names of the gated tools, sorted."""
        return sorted(self._by_name)


def declare(tool: GatedTool) -> _Declared:
    """Check a declaration and compute what the gate needs of it once.

    Raises:
        GateInvalid: the name, address, action, amount pointer or definition is not
            one a gate takes.
    """
    name = tool.name
    try:
        _TOOL_NAME.validate_python(name)
    except ValidationError:
        raise GateInvalid(
            f"{name!r} is not a tool name (letters, digits, '_', '-', '.'; 1 to 128)", tool=name
        ) from None
    try:
        address = parse_address(tool.address)
    except AddressInvalid as exc:
        raise _invalid(name, f"its address is not valid: {exc.message}") from None
    if address.kind is AddressKind.AGENT:
        raise _invalid(name, f"its address {tool.address!r} is an agent's; people approve calls")
    try:
        _ACTION.validate_python(tool.action)
    except ValidationError:
        raise _invalid(
            name, f"{tool.action!r} is not an action name, e.g. 'approve.spend'"
        ) from None
    if tool.amount is not None:
        try:
            jsonpointer.JsonPointer(tool.amount)
        except jsonpointer.JsonPointerException:
            raise _invalid(name, f"{tool.amount!r} is not a JSON Pointer, e.g. '/amount'") from None
    digest = None
    if tool.definition is not None:
        if tool.definition.get("name") != name:
            raise _invalid(name, "its definition's name is not the tool's name")
        try:
            digest = tool_digest(tool.definition)
        except HatpError as exc:
            raise _invalid(name, f"its definition is not JSON: {exc.message}") from None
    return _Declared(tool, address, digest)


def _invalid(name: str, why: str) -> GateInvalid:
    return GateInvalid(f"gated tool {name!r}: {why}; fix the declaration", tool=name)
