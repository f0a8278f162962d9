"""Approving one exact tool call: read the agent's request, work out the terms people approve.

An agent that a tool server refused with ``APPROVAL_REQUIRED`` sends the
gateway a :class:`~hatp.model.CallRequest`. :func:`parse_call_request`
refuses one that cannot be read (``CALL_INVALID``, with a JSON Pointer to
the first bad member); :func:`call_terms` computes what people approve:
the call's digest, the tool definition's digest, and the amount read from
the call's own arguments ([GW-CALL-TERMS], [GW-CALL-AMOUNT]), never a
number the agent states. The ask itself is an approval ask of kind ``call``
on the same machinery as an approval group (docs/spec.md §19, §20).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from hatp.errors import AddressInvalid, CallInvalid, InvalidJson
from hatp.evidence import call_digest, digest, tool_digest
from hatp.model import CallRequest, CallTerms, parse_address, read_amount
from hatp.version import require_supported

__all__ = ["call_terms", "parse_call_request", "terms_digest"]


def parse_call_request(doc: Mapping[str, Any] | CallRequest) -> CallRequest:
    """Parse and check an agent's call request from its wire form; return it. [CALL-SHAPE]

    Beyond the :class:`~hatp.model.CallRequest` form, the address must be a
    ``human://`` address, and a tool definition, when given, must name the
    tool called ([CALL-DEFINITION]).

    Raises:
        CallInvalid: ``data.reason`` is ``SHAPE`` (``data.where`` points at
            the first bad member), ``ADDRESS`` or ``DEFINITION``.
        VersionUnsupported: the request names a protocol version this build
            does not know.
    """
    if isinstance(doc, CallRequest):
        doc = doc.to_wire()
    if not isinstance(doc, Mapping):
        raise CallInvalid(
            "a call request is a JSON object (kind call-request)", reason="SHAPE", where=""
        )
    require_supported(doc, "call request")
    try:
        request = CallRequest.model_validate(doc)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = _pointer(error["loc"])
        raise CallInvalid(
            f"{where or 'the call request'}: {error['msg']}; send the CallRequest form "
            "(docs/spec.md §20)",
            reason="SHAPE",
            where=where,
        ) from None
    _check_address(request.address)
    definition = request.tool_definition
    if definition is not None and definition.get("name") != request.call.tool:
        raise CallInvalid(
            f"/toolDefinition/name: the definition is of tool {definition.get('name')!r}, "
            f"not of the tool called ({request.call.tool!r}); send the called tool's "
            "definition as its server lists it",
            reason="DEFINITION",
            where="/toolDefinition/name",
        )
    return request


def _check_address(address: str) -> None:
    try:
        parsed = parse_address(address)
    except AddressInvalid as exc:
        raise CallInvalid(
            f"/address: {exc.message}", reason="ADDRESS", where="/address", detail=exc.reason
        ) from None
    if not parsed.is_human:
        raise CallInvalid(
            f"/address: {address!r} is an agent's address; a call is approved by people: "
            "give a human:// address",
            reason="ADDRESS",
            where="/address",
        )


def call_terms(request: CallRequest) -> CallTerms:
    """Return the terms people approve for ``request``, computed by the gateway. [GW-CALL-TERMS]

    ``callDigest`` is :func:`hatp.evidence.call_digest` of the call,
    ``toolDigest`` :func:`hatp.evidence.tool_digest` of the definition (when
    one is given), and ``amount`` what the call's arguments hold at
    ``amountPointer``, read with :func:`hatp.model.read_amount`
    ([CALL-AMOUNT], [GW-CALL-AMOUNT]); the rest is copied from the request.

    Raises:
        CallInvalid: ``AMOUNT`` (no amount at the pointer, ``data.where`` the
            pointer into the arguments), or ``SHAPE`` (the arguments or the
            definition have no canonical JSON form).
    """
    call = request.call
    amount = None
    if request.amount_pointer is not None:
        amount = read_amount(call.arguments, request.amount_pointer)
    return CallTerms(
        request_id=request.request_id,
        server=call.server,
        tool=call.tool,
        call_digest=_digest_of(
            "/call/arguments", lambda: call_digest(call.server, call.tool, call.arguments)
        ),
        tool_digest=None
        if request.tool_definition is None
        else _digest_of("/toolDefinition", lambda: tool_digest(request.tool_definition or {})),
        requester=request.requester,
        on_behalf_of=request.on_behalf_of,
        address=request.address,
        action=request.action,
        amount=amount,
        price=request.price,
        valid_seconds=request.valid_seconds,
    )


def terms_digest(terms: CallTerms) -> str:
    """Return the digest of the terms' wire form: what every vote and the approval bind."""
    return digest(terms.to_wire())


def _digest_of(where: str, compute: Callable[[], str]) -> str:
    try:
        return compute()
    except InvalidJson as exc:
        raise CallInvalid(
            f"{where}: {exc.message}; send JSON that has a canonical form (RFC 8785)",
            reason="SHAPE",
            where=where,
        ) from None


def _pointer(path: Sequence[Any]) -> str:
    return "".join(f"/{str(part).replace('~', '~0').replace('/', '~1')}" for part in path)
