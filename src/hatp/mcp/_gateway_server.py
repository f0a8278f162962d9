"""The Human Gateway (and its Directory) as an MCP server.

:func:`serve_gateway` adds the ``dev.hatp/hatp`` extension to an MCP server
with the roles ``gateway`` (and ``directory`` when it serves one). Its methods
carry :class:`~hatp.gateway.HumanGateway`'s calls unchanged: a coordinator's
``txn/ask``, ``txn/voted`` (a long poll: it answers as soon as the ask is
decided, or after ``waitSeconds``, capped at :data:`MAX_WAIT_SECONDS`),
``txn/withdraw``, ``txn/estimate``, ``txn/tighten``; an agent's
``ask/call``, ``ask/question`` and ``ask/answered``; and
``directory/resolve``. Each answer is the gateway's signed document under
``answer`` (``estimate`` for an estimate), so the caller verifies it as it
would an in-process one. Every Human Card is an MCP resource whose URI is the
card's id and whose text is the card as its directory signed it.

A plain agent, which speaks no hatp methods, has one exact tool call approved
through the tool :data:`CALL_APPROVAL_TOOL`: while people decide it answers
``input_required`` with the ask id as its ``requestState`` (sealed by the
SDK's request-state boundary, so a client cannot forge or swap it), and with
the signed CallApproval once decided
(:func:`hatp.mcp.await_call_approval` is the client's side).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ResourceBinding, ToolBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import TextResource
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hatp._edge_params import (
    AnsweredParams,
    AskParams,
    CallParams,
    PollParams,
    QuestionParams,
    ResolveParams,
    TightenParams,
    WithdrawParams,
    WithdrawTxnParams,
    approval_request,
    resolve_answer,
)
from hatp.clock import parse_time
from hatp.directory import Directory
from hatp.errors import HatpError
from hatp.evidence import PublicKey
from hatp.gateway import HumanGateway
from hatp.mcp._advert import HatpAdvert, Role
from hatp.mcp._install import install
from hatp.mcp._rpc import method
from hatp.mcp._tool_results import refusal_result, tool_result
from hatp.mcp._wire import (
    CALL_APPROVAL_TOOL,
    EXTENSION_ID,
    MAX_WAIT_SECONDS,
    METHODS,
    PENDING_META_KEY,
    mcp_error,
)
from hatp.version import PROTOCOL_VERSION

__all__ = ["HANDSHAKE_WAIT_SECONDS", "GatewayExtension", "serve_gateway"]

#: How long one round of ``request_call_approval`` waits for people on a 2025 session,
#: well inside the usual client timeout of 60 s (the TypeScript SDK's default).
HANDSHAKE_WAIT_SECONDS = 20.0


class GatewayExtension(Extension):
    """The ``dev.hatp/hatp`` extension of a Human Gateway (and Directory) MCP server."""

    identifier = EXTENSION_ID

    def __init__(
        self,
        gateway: HumanGateway,
        *,
        keys: Sequence[PublicKey],
        directory: Directory | None = None,
    ) -> None:
        self._gateway = gateway
        self._keys = list(keys)
        self._directory = directory

    def settings(self) -> dict[str, Any]:
        roles: list[Role] = ["gateway"] if self._directory is None else ["gateway", "directory"]
        return HatpAdvert(
            hatp_version=PROTOCOL_VERSION,
            id=self._gateway.gateway_id,
            roles=roles,
            keys=[key.to_jwk() for key in self._keys],
        ).settings()

    def methods(self) -> Sequence[MethodBinding]:
        bindings = [
            method(METHODS["txn/ask"], AskParams, self._ask),
            method(METHODS["txn/voted"], PollParams, self._voted),
            method(METHODS["txn/withdraw"], WithdrawParams, self._withdraw),
            method(METHODS["txn/withdrawAll"], WithdrawTxnParams, self._withdraw_all),
            method(METHODS["txn/estimate"], AskParams, self._estimate),
            method(METHODS["txn/tighten"], TightenParams, self._tighten),
            method(METHODS["ask/question"], QuestionParams, self._question),
            method(METHODS["ask/call"], CallParams, self._call),
            method(METHODS["ask/answered"], AnsweredParams, self._answered),
        ]
        if self._directory is not None:
            resolve = _Resolve(self._directory)
            bindings.append(method(METHODS["directory/resolve"], ResolveParams, resolve))
        return bindings

    def tools(self) -> Sequence[ToolBinding]:
        return [
            ToolBinding(
                self._request_call_approval,
                kwargs={
                    "name": CALL_APPROVAL_TOOL,
                    "description": (
                        "Ask people to approve one exact tool call (a hatp CallRequest). "
                        "While they decide it answers input_required (call again with the "
                        "requestState) or, on a 2025 protocol version, the signed pending "
                        "vote (call again with the same request); then the signed "
                        "CallApproval to pass the gated server in _meta['dev.hatp/approval']."
                    ),
                },
            )
        ]

    def resources(self) -> Sequence[ResourceBinding]:
        if self._directory is None:
            return ()
        return [
            ResourceBinding(
                TextResource(
                    uri=card.id,
                    name=card.id,
                    title=card.display_name,
                    description=f"Human Card of {card.display_name}, signed by {card.issuer}",
                    mime_type="application/json",
                    text=json.dumps(self._directory.signed(card.id), ensure_ascii=False),
                )
            )
            for card in self._directory.cards()
        ]

    # -- the coordinator's side -------------------------------------------

    async def _ask(self, params: AskParams, _: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        return {"answer": await self._gateway.ask(approval_request(params))}

    async def _voted(self, params: PollParams, _: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        wait = min(params.wait_seconds, MAX_WAIT_SECONDS)
        return {"answer": await self._gateway.poll(params.ask_id, wait_seconds=wait)}

    async def _withdraw(
        self, params: WithdrawParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        await self._gateway.withdraw(params.ask_id, params.reason)
        return {}

    async def _withdraw_all(
        self, params: WithdrawTxnParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        return {"askIds": await self._gateway.withdraw_transaction(params.txn_id, params.reason)}

    async def _estimate(
        self, params: AskParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        return {"estimate": await self._gateway.estimate(approval_request(params))}

    async def _tighten(
        self, params: TightenParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        decide_by = parse_time(params.decide_by)
        return {"answer": await self._gateway.tighten(params.ask_id, decide_by)}

    # -- an agent's side ------------------------------------------------------

    async def _question(
        self, params: QuestionParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        return {"answer": await self._gateway.ask_question(params.question)}

    async def _call(self, params: CallParams, _: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        return {"answer": await self._gateway.ask_call(params.request)}

    async def _answered(
        self, params: AnsweredParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        wait = min(params.wait_seconds, MAX_WAIT_SECONDS)
        if params.kind == "call":
            return {"answer": await self._gateway.poll_call(params.ask_id, wait_seconds=wait)}
        return {"answer": await self._gateway.poll_question(params.ask_id, wait_seconds=wait)}

    async def _request_call_approval(
        self, request: dict[str, Any], ctx: Context
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One round of the call-approval loop: ask (first round) or poll the ask named by
        the sealed ``requestState``; ``input_required`` while open, else the approval.

        A session on a protocol version that has no ``input_required`` (every 2025
        version) gets a plain result instead: the signed pending vote, and words
        saying to call again with the same request (the same ``requestId`` and terms
        name the same ask, [GW-ASK-ONCE]), after waiting up to
        :data:`HANDSHAKE_WAIT_SECONDS` for people to decide."""
        rounds = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        try:
            ask_id = ctx.request_state if rounds else None
            if ask_id is None:
                answer = await self._gateway.ask_call(request)
                ask_id = str(answer.get("askId")) if answer.get("kind") == "pending" else None
            if ask_id is not None:
                wait = MAX_WAIT_SECONDS if rounds else HANDSHAKE_WAIT_SECONDS
                answer = await self._gateway.poll_call(ask_id, wait_seconds=wait)
        except HatpError as refusal:
            if rounds:
                raise mcp_error(refusal) from None
            return refusal_result(refusal)
        if answer.get("kind") != "pending":
            text = json.dumps(answer, ensure_ascii=False)
            return tool_result(text, answer)
        if rounds:
            return types.InputRequiredResult(
                request_state=str(answer["askId"]), _meta={PENDING_META_KEY: answer}
            )
        return tool_result(
            f"People have not decided yet (ask {answer.get('askId')}, at "
            f"{answer.get('gateway')}). Call {CALL_APPROVAL_TOOL} again with the same request "
            "to keep waiting; the answer is then the signed CallApproval.",
            answer,
        )


class _Resolve:
    """``directory/resolve`` over one directory: candidates come with their signed cards,
    so the caller verifies each card itself."""

    def __init__(self, directory: Directory) -> None:
        self._directory = directory

    async def __call__(
        self, params: ResolveParams, _: ServerRequestContext[Any, Any]
    ) -> dict[str, Any]:
        return resolve_answer(self._directory, params)


def serve_gateway(
    server: MCPServer,
    gateway: HumanGateway,
    *,
    keys: Sequence[PublicKey],
    directory: Directory | None = None,
    directory_id: str | None = None,
) -> None:
    """Serve ``gateway`` (and ``directory``'s cards and resolve) on ``server``.

    ``keys`` are the gateway's public keys, advertised so a caller can check
    they are the ones its keyring trusts for the gateway's id. The server's
    own tools keep working.

    Raises:
        ValueError: ``directory_id`` is not the directory's issuer; or the server
            has a ``dev.hatp/hatp`` extension, a tool or a method of these names already.
    """
    if directory is not None and directory_id not in (None, directory.issuer):
        raise ValueError(
            f"directory_id {directory_id!r} is not the directory's issuer {directory.issuer!r}"
        )
    install(server, GatewayExtension(gateway, keys=keys, directory=directory))
