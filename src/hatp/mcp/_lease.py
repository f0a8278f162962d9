"""Leased MCP tools: a system of record's mutations, each call under a compensation lease.

:func:`lease_tools` adds tools to an existing ``MCPServer``, each one typed
mutation (an :class:`~hatp.lease.Action`) of a
:class:`~hatp.lease.SystemOfRecord`; the ``dev.hatp/lease`` extension serves
them from its ``intercept_tool_call``. A call carries its CompensationLease,
as a JSON object, in ``params._meta["compensationLease"]`` (the PTCL draft's
member; ``_meta["agentFenceToken"]`` may carry the fence token, as HTTP's
``Agent-Fence-Token``). The mutation is ``{action: the tool's action,
params: the call's arguments}``, exactly; the resource comes from the
arguments. The system of record applies it under the lease (every rule of
docs/spec.md §23, off the event loop) and the result carries the signed
``lease-commit`` receipt in ``_meta["commitReceipt"]``. A refusal is a
JSON-RPC error whose ``data`` is the hatp error: ``-31054``
``LEASE_REQUIRED`` (no lease; ``data.data`` says what to lease), ``-31053``
``LEASE_REFUSED`` (``data.data.reason``, ``rule`` and the signed rejection
``receipt``), ``-31000`` for the rest (``MUTATION_INVALID``,
``RESOURCE_UNKNOWN``, ``PEER_INCOMPATIBLE`` for a fence token that is not
an epoch, ``STORE_UNAVAILABLE``); in every one nothing was written. Other
tools pass through untouched, so a plain MCP client still calls them.

:func:`call_leased` is the agent's side: it sends the lease, verifies the
receipt against its own keyring and that it names this lease, and turns
refusals back into the typed hatp errors.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import jsonpointer
import mcp_types as types
from mcp.client import Client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, ToolBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from hatp.errors import (
    HatpError,
    LeaseRequired,
    MutationInvalid,
    PeerIncompatible,
)
from hatp.evidence import Keyring, digest
from hatp.lease import LeaseCommit, SystemOfRecord, check_commit_receipt, evidence_invalid
from hatp.mcp._advert import advertised
from hatp.mcp._install import install, tool_registry
from hatp.mcp._wire import (
    COMMIT_RECEIPT_META_KEY,
    FENCE_TOKEN_META_KEY,
    LEASE_EXTENSION_ID,
    LEASE_META_KEY,
    hatp_error,
    mcp_error,
)
from hatp.model import WireModel

__all__ = [
    "LeaseAdvert",
    "LeasedResult",
    "LeasedTool",
    "LeasedToolAdvert",
    "ResourceOf",
    "call_leased",
    "lease_tools",
]

#: The resource a call mutates, from its arguments (raise ``ValueError`` or
#: ``KeyError`` for arguments that name none).
ResourceOf = Callable[[Mapping[str, Any]], str]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class LeasedTool:
    """One tool that runs the system of record's ``action`` under a lease.

    ``resource`` names the resource a call mutates: a template whose
    ``{<JSON Pointer>}`` placeholders are replaced by the argument there (a
    string or an integer), e.g. ``"ticket/{/id}"``; or a function of the
    arguments (then the advert shows no template). ``input_schema`` is the
    JSON Schema ``tools/list`` shows; the action itself, not the schema,
    decides which params it takes.

    Raises:
        ValueError: an empty name or action, a template placeholder that is
            not a JSON Pointer, or a schema that is not of an object.
    """

    name: str
    action: str
    resource: str | ResourceOf
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def __post_init__(self) -> None:
        if not self.name or not self.action:
            raise ValueError("a leased tool has a name and the action it runs")
        if isinstance(self.resource, str):
            for pointer in _PLACEHOLDER.findall(self.resource):
                try:
                    jsonpointer.JsonPointer(pointer)
                except jsonpointer.JsonPointerException as exc:
                    raise ValueError(
                        f"{{{pointer}}} in {self.resource!r} is not a JSON Pointer: {exc}"
                    ) from None
                if not pointer:
                    raise ValueError(f"{{}} in {self.resource!r} names no argument")
        if self.input_schema.get("type") != "object":
            raise ValueError(f"the input schema of {self.name} is of an object (type: object)")

    def resource_of(self, arguments: Mapping[str, Any]) -> str:
        """The resource a call with ``arguments`` mutates.

        Raises:
            MutationInvalid: the arguments name no resource (``data.where``
                is the template's pointer, when it has one).
        """
        if not isinstance(self.resource, str):
            try:
                found = self.resource(arguments)
            except (KeyError, ValueError, TypeError) as exc:
                raise self._no_resource(f"they name no resource ({exc})") from None
            if not isinstance(found, str) or not found:
                raise self._no_resource("they name no resource")
            return found
        return _PLACEHOLDER.sub(lambda m: self._argument(arguments, m.group(1)), self.resource)

    def _argument(self, arguments: Mapping[str, Any], pointer: str) -> str:
        try:
            found = jsonpointer.resolve_pointer(arguments, pointer)
        except jsonpointer.JsonPointerException:
            raise self._no_resource(f"nothing at {pointer}", where=pointer) from None
        if isinstance(found, bool) or not isinstance(found, str | int) or found == "":
            raise self._no_resource(f"{pointer} is not a string or an integer", where=pointer)
        return str(found)

    def _no_resource(self, why: str, **where: str) -> MutationInvalid:
        return MutationInvalid(
            f"the arguments of {self.name} do not say which resource to mutate: {why}",
            action=self.action,
            tool=self.name,
            **where,
        )


class LeasedToolAdvert(WireModel):
    """What an agent needs to know about one leased tool before it asks for a lease."""

    action: str
    resource: str | None


class LeaseAdvert(WireModel):
    """The settings under ``capabilities.extensions["dev.hatp/lease"]``: the system of
    record that grants the leases, and the leased tools."""

    issuer: str
    tools: dict[str, LeasedToolAdvert]


class _LeaseExtension(Extension):
    """The ``dev.hatp/lease`` extension: ``tools`` run on ``sor`` under leases."""

    identifier = LEASE_EXTENSION_ID

    def __init__(self, sor: SystemOfRecord, tools: Sequence[LeasedTool]) -> None:
        self._sor = sor
        self._tools = {tool.name: tool for tool in tools}

    def settings(self) -> dict[str, Any]:
        return LeaseAdvert(
            issuer=self._sor.issuer,
            tools={
                tool.name: LeasedToolAdvert(
                    action=tool.action,
                    resource=tool.resource if isinstance(tool.resource, str) else None,
                )
                for tool in self._tools.values()
            },
        ).to_wire()

    def tools(self) -> Sequence[ToolBinding]:
        return [
            ToolBinding(
                _served_by_the_extension(tool.name),
                kwargs={
                    "name": tool.name,
                    "description": tool.description
                    or f"{tool.action} under a compensation lease (_meta.compensationLease)",
                    # A retry with the same lease is answered with the stored receipt.
                    "annotations": types.ToolAnnotations(
                        read_only_hint=False, idempotent_hint=True
                    ),
                    # The result is a text and the receipt in _meta, no structured content.
                    "structured_output": False,
                },
            )
            for tool in self._tools.values()
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Apply a leased tool's mutation under the call's lease; pass any other call through."""
        tool = self._tools.get(params.name)
        if tool is None:
            return await call_next(ctx)
        try:
            return await self._apply(tool, dict(params.arguments or {}), dict(params.meta or {}))
        except HatpError as refusal:
            raise mcp_error(refusal) from None

    async def _apply(
        self, tool: LeasedTool, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> types.CallToolResult:
        resource = tool.resource_of(arguments)
        mutation = {"action": tool.action, "params": arguments}
        lease = meta.get(LEASE_META_KEY)
        if lease is None:
            raise LeaseRequired(
                f"{tool.name} mutates {resource} only under a compensation lease: ask "
                f"{self._sor.issuer} for one for this mutation, then send it in "
                f"_meta[{LEASE_META_KEY!r}]",
                tool=tool.name,
                resource=resource,
                mutation=mutation,
                issuer=self._sor.issuer,
            )
        applied = await anyio.to_thread.run_sync(
            functools.partial(
                self._sor.apply,
                _as_received(lease),
                resource=resource,
                mutation=mutation,
                fence_token=_fence_token(tool, meta.get(FENCE_TOKEN_META_KEY)),
            )
        )
        receipt = applied.receipt
        again = " (a retry: nothing was written again)" if applied.replayed else ""
        text = (
            f"{tool.action} applied to {resource} under {receipt['leaseId']}, now at epoch "
            f"{receipt['epoch']}{again}; the signed receipt is in "
            f"_meta[{COMMIT_RECEIPT_META_KEY!r}]"
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            _meta={COMMIT_RECEIPT_META_KEY: receipt},
        )


def lease_tools(server: MCPServer, sor: SystemOfRecord, tools: Sequence[LeasedTool]) -> None:
    """Add ``tools`` to ``server``: each call applies its mutation on ``sor`` under the
    compensation lease it carries. The server keeps serving every other tool as before.

    Raises:
        ValueError: no tools, two of the same name, a tool whose action ``sor``
            does not offer, a tool the server has already, or a server with a
            ``dev.hatp/lease`` extension already.
        RuntimeError: this mcp SDK offers no way to add the tools (see ``install``).
    """
    if not tools:
        raise ValueError("lease at least one tool")
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"two leased tools share a name: {sorted(names)}")
    unknown = sorted({tool.action for tool in tools} - set(sor.actions))
    if unknown:
        raise ValueError(f"{sor.issuer} offers no action {unknown}; it offers {sor.actions}")
    registry = tool_registry(server)
    taken = [name for name in names if registry.get_tool(name) is not None]
    if taken:
        raise ValueError(f"the server has tools named {taken} already")
    install(server, _LeaseExtension(sor, tools))
    for tool in tools:
        registered = registry.get_tool(tool.name)
        if registered is not None:
            registered.parameters = dict(tool.input_schema)


@dataclass(frozen=True)
class LeasedResult:
    """A leased call that applied: the tool's result, its commit receipt (verified,
    naming the lease sent), and the receipt as signed (the evidence to keep)."""

    result: types.CallToolResult
    receipt: LeaseCommit
    signed: dict[str, Any]


async def call_leased(
    client: Client,
    tool: str,
    arguments: Mapping[str, Any],
    lease: Mapping[str, Any],
    *,
    keyring: Keyring,
    fence_token: int | None = None,
) -> LeasedResult:
    """Call the leased ``tool`` with ``lease`` (a signed CompensationLease) in ``_meta``.

    The server must advertise ``tool`` in its ``dev.hatp/lease`` extension.
    The result's commit receipt must verify against ``keyring`` (the caller's
    trust, never the server's) and name this lease: its id, its digest, its
    resource, its mutation and its issuer. Calling again with the same lease and arguments
    is safe: a mutation applied before is answered with the stored receipt.

    Returns:
        The result and the verified receipt.

    Raises:
        LeaseRefused: the system of record refused the lease (``data.reason``,
            ``data.rule``, ``data.receipt``: signed); nothing was written.
        MutationInvalid, ResourceUnknown: the arguments name no mutation it
            offers, or no resource it holds; nothing was written.
        PeerIncompatible: the server does not lease ``tool``; nothing was sent.
        EvidenceInvalid: the result carries no commit receipt (``MISSING``),
            or one that is not a lease-commit (``SHAPE``), does not verify
            (``SIGNATURE``) or is of another lease (``MISMATCH``); whether the
            mutation applied is unknown: call again with the same lease.
        InvalidJson: ``lease`` has no canonical JSON form; nothing was sent.
        MCPError: any other JSON-RPC error (the mutation may have applied).
    """
    _check_leased(client, tool)
    digest(dict(lease))  # a lease with no canonical form is refused before anything is sent
    meta: dict[str, Any] = {LEASE_META_KEY: dict(lease)}
    if fence_token is not None:
        meta[FENCE_TOKEN_META_KEY] = fence_token
    try:
        result = await client.call_tool(tool, dict(arguments), meta=meta)  # type: ignore[arg-type]
    except MCPError as exc:
        refusal = hatp_error(exc)
        if refusal is not None:
            raise refusal from None
        raise
    signed = (result.meta or {}).get(COMMIT_RECEIPT_META_KEY)
    if result.is_error or not isinstance(signed, dict):
        raise evidence_invalid(
            "MISSING",
            "commit receipt",
            f"the result of {tool} carries no _meta[{COMMIT_RECEIPT_META_KEY!r}]",
        )
    receipt = check_commit_receipt(signed, lease, keyring)
    return LeasedResult(result=result, receipt=receipt, signed=signed)


def _served_by_the_extension(name: str) -> Callable[..., Any]:
    """The function registered for a leased tool: the extension answers every call
    before it, so running it means the extension is not in the server's chain."""

    def leased(**arguments: Any) -> Any:
        raise RuntimeError(f"{name} is served by the dev.hatp/lease extension, which is missing")

    return leased


def _as_received(lease: object) -> Mapping[str, Any] | bytes:
    """The lease for the system of record: an object as is; any other JSON value as
    its JSON text, which the shape rule refuses with a receipt naming its digest."""
    if isinstance(lease, Mapping):
        return lease
    try:
        return json.dumps(lease, ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError):
        return repr(lease).encode()


def _fence_token(tool: LeasedTool, token: object) -> int | None:
    if token is None:
        return None
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise PeerIncompatible(
            f"_meta[{FENCE_TOKEN_META_KEY!r}] of a call of {tool.name} is the epoch the "
            f"writer writes at, an integer >= 0, not {token!r}",
            reason="METHOD",
            tool=tool.name,
            where=f"/_meta/{FENCE_TOKEN_META_KEY}",
        )
    return token


def _check_leased(client: Client, tool: str) -> None:
    """Refuse a tool the server does not advertise as leased: the lease would not
    guard it, and no receipt would come back."""
    settings = advertised(client.server_capabilities).get(LEASE_EXTENSION_ID)
    if settings is None:
        raise PeerIncompatible(
            f"the server has no {LEASE_EXTENSION_ID} extension: it leases no tool",
            reason="NO_EXTENSION",
            tool=tool,
        )
    try:
        advert = LeaseAdvert.model_validate(settings)
    except ValidationError as exc:
        raise PeerIncompatible(
            f"the server's {LEASE_EXTENSION_ID} settings are not a LeaseAdvert: {exc}",
            reason="SETTINGS",
            tool=tool,
        ) from None
    if tool not in advert.tools:
        raise PeerIncompatible(
            f"the server does not lease {tool!r}; it leases {sorted(advert.tools)}",
            reason="METHOD",
            tool=tool,
        )
