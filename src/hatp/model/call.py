"""Wire types of approval-gated tool calls (docs/spec.md §20).

One risky tool call runs only with an approval for exactly that call. The
tool server refuses a gated call without one with ``APPROVAL_REQUIRED`` and a
:class:`CallRequirement` saying what to ask for. The agent sends the Human
Gateway a :class:`CallRequest`; the gateway computes the :class:`CallTerms`
people approve (the call digest, the amount read from the arguments, the
price cap) and, once enough people voted, signs a :class:`CallApproval`
over them. The tool server checks it before the tool runs, and uses it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

import jsonpointer
from pydantic import Field, StringConstraints, ValidationError

from hatp.errors import CallInvalid
from hatp.model._base import Digest, JsonObject, WireModel, WireTime
from hatp.model.card import PersonAddress
from hatp.model.human import ASK_ID_PATTERN
from hatp.model.plan import AgentText, Amount, Name
from hatp.model.signature import Signature

__all__ = [
    "APPROVAL_ID_PATTERN",
    "CALL_GROUP",
    "CallApproval",
    "CallRequest",
    "CallRequirement",
    "CallTerms",
    "PriceCap",
    "ToolCall",
    "owed",
    "read_amount",
]

#: An approval id: the single-use id of one call approval.
APPROVAL_ID_PATTERN = r"^apv-[A-Za-z0-9_-]{8,64}$"
#: The group id a call ask, its votes and its routing record name.
CALL_GROUP = "call"

#: A tool's name as MCP allows it (letters, digits, ``_``, ``-``, ``.``), 1 to 128 characters.
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]
#: A tool server's id, e.g. ``https://payments.example``.
ServerId = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^\S+$")]
#: A JSON Pointer (RFC 6901) into a call's arguments, e.g. ``/amount``.
Pointer = Annotated[str, StringConstraints(pattern=r"^(/([^~/]|~[01])*)*$", max_length=512)]
Agent = Annotated[str, StringConstraints(pattern=r"^agent://\S+$", max_length=512)]
PayTo = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^\S+$")]


class ToolCall(WireModel):
    """One call: which server, which tool, with which arguments. ``callDigest`` is its digest."""

    server: ServerId
    tool: ToolName
    arguments: JsonObject


class PriceCap(WireModel):
    """The most that may be paid for the call, and to whom (x402-style server prices)."""

    max_amount: Amount
    pay_to: PayTo


class CallRequirement(WireModel):
    """What a tool server says to ask for when it refuses a gated call (``APPROVAL_REQUIRED``).

    ``amount`` is what the server read from the arguments at ``amountPointer``
    (``None`` for a tool that moves no money); ``price`` is the server's own
    price for the call, when it sets one.
    """

    server: ServerId
    tool: ToolName
    call_digest: Digest
    tool_digest: Digest | None = Field(description="set when the approval must bind the tool")
    address: str = Field(max_length=512, description="who must approve, as a human:// address")
    action: Name
    amount_pointer: Pointer | None
    amount: Amount | None
    price: PriceCap | None = Field(description="the server's price: maxAmount is what it charges")
    max_lifetime_seconds: int = Field(ge=1, le=86_400)


class CallRequest(WireModel):
    """What an agent asks the Human Gateway to approve: one exact call.

    ``requestId`` names the business operation (asking again with it returns
    the same ask). The gateway recomputes the digests and the amount itself;
    ``reason`` is agent-written and shown labelled as such.
    """

    hatp_version: str
    kind: Literal["call-request"]
    request_id: Name
    requester: Agent
    on_behalf_of: PersonAddress
    call: ToolCall
    tool_definition: JsonObject | None = Field(
        default=None, description="the tool as the server lists it; its digest is bound"
    )
    address: str = Field(max_length=512)
    action: Name
    amount_pointer: Pointer | None = None
    price: PriceCap | None = None
    passkey: bool = False
    reason: AgentText | None = None
    decide_by: WireTime
    valid_seconds: int = Field(ge=1, le=86_400, description="how long the approval is good for")


class CallTerms(WireModel):
    """Exactly what people approve; their votes bind its digest."""

    request_id: Name
    server: ServerId
    tool: ToolName
    call_digest: Digest
    tool_digest: Digest | None
    requester: Agent
    on_behalf_of: PersonAddress
    address: str = Field(max_length=512)
    action: Name
    amount: Amount | None = Field(description="read by the gateway from the arguments")
    price: PriceCap | None
    valid_seconds: int = Field(ge=1, le=86_400)


class CallApproval(WireModel):
    """A gateway's signed approval (or rejection) of one exact tool call; it works once.

    ``votes`` are the people's own signed HumanVotes over the digest of
    ``terms`` (``txnId`` = requestId, ``groupId`` = ``"call"``), ``cards``
    the directory-signed cards of the voters, ``routing`` the gateway's
    final signed routing record.
    """

    hatp_version: str
    kind: Literal["call-approval"]
    approval_id: str = Field(pattern=APPROVAL_ID_PATTERN, description="single-use id")
    ask_id: str = Field(pattern=ASK_ID_PATTERN)
    terms: CallTerms
    decision: Literal["approve", "reject"]
    approvers: list[PersonAddress] = Field(max_length=64)
    reason: str = Field(max_length=1000)
    withdrawn: bool = False
    votes: list[JsonObject] = Field(max_length=64)
    cards: list[JsonObject] = Field(max_length=64)
    routing: JsonObject
    gateway: str = Field(min_length=1, max_length=512)
    decided_at: WireTime
    expires_at: WireTime
    signature: Signature


def read_amount(arguments: Mapping[str, Any], pointer: str) -> Amount:
    """Return the amount at JSON Pointer ``pointer`` in a call's ``arguments``.

    The member there is ``{"value", "currency"}``; ``value`` is a decimal
    string or a JSON integer (never a float, never negative). The gateway and
    the tool server both read the amount this way, never from a number the
    agent states. [CALL-AMOUNT]

    Raises:
        CallInvalid: reason ``AMOUNT``, with ``data.where`` = ``pointer``.
    """
    try:
        found = jsonpointer.resolve_pointer(arguments, pointer)
    except jsonpointer.JsonPointerException as exc:
        raise _no_amount(pointer, f"nothing there ({exc})") from None
    if not isinstance(found, Mapping) or set(found) != {"value", "currency"}:
        raise _no_amount(pointer, "it is not an object of exactly value and currency")
    value = found["value"]
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _no_amount(pointer, "its value is neither a decimal string nor an integer")
    try:
        return Amount(value=value, currency=found["currency"])
    except ValidationError as exc:
        raise _no_amount(pointer, exc.errors()[0]["msg"]) from None


def _no_amount(pointer: str, why: str) -> CallInvalid:
    return CallInvalid(
        f"the arguments hold no amount at {pointer!r}: {why}; pass the amount as "
        '{"value": "2140.00", "currency": "USD"}',
        reason="AMOUNT",
        where=pointer,
    )


def owed(*amounts: Amount | None) -> dict[str, Decimal]:
    """Return what an approver of a call must cover per currency: the amount in its
    arguments and the price, the larger where they share a currency (the price is
    that same money, not more of it). The gateway routes on it and the tool
    server checks authority against it ([GATE-AUTHORITY]); currencies are never
    converted."""
    covered: dict[str, Decimal] = {}
    for amount in amounts:
        if amount is not None:
            covered[amount.currency] = max(covered.get(amount.currency, Decimal(0)), amount.decimal)
    return covered
