"""The Human Gateway and the Directory, reached over MCP.

:func:`mcp_gateway` checks a server's advert (role ``gateway``, the id the
caller names, keys the caller's keyring trusts under that id) and returns an
:class:`McpGateway`, which the coordinator uses exactly as an in-process
:class:`~hatp.gateway.HumanGateway` (:class:`hatp.coordinator.Gateway`); an
agent also asks it to approve one tool call, or a question. Every answer is
the gateway's signed document, checked by the caller as always.
:func:`mcp_directory` does the same for a directory (role ``directory``):
its cards (MCP resources) and ``resolve``, each card verified against the
caller's keyring before use. :func:`await_call_approval` is a plain agent's
way to have one tool call approved through the gateway's tool, driving the
``input_required`` loop by hand: an ask can take hours, far longer than the
SDK's automatic retries last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from hatp._edge_params import ask_params
from hatp.clock import Clock, SystemClock, format_time
from hatp.coordinator import ApprovalRequest
from hatp.directory import Candidate, Exclusion, ExclusionRule, Resolution, verify_card
from hatp.errors import PeerIncompatible, PeerUnavailable
from hatp.evidence import Keyring, parse_json
from hatp.mcp._advert import HatpAdvert, check_server
from hatp.mcp._rpc import request
from hatp.mcp._wire import (
    CALL_APPROVAL_TOOL,
    MAX_WAIT_SECONDS,
    METHODS,
    PENDING_META_KEY,
    hatp_error,
)
from hatp.model import CallApproval, HumanCard, Status, parse_address

__all__ = [
    "McpDirectory",
    "McpGateway",
    "await_call_approval",
    "mcp_directory",
    "mcp_gateway",
]


class McpGateway:
    """A Human Gateway on an MCP server: the coordinator's :class:`~hatp.coordinator.Gateway`,
    and an agent's way to ask for a call approval or an answer.

    Build it with :func:`mcp_gateway`. ``timeout`` bounds each request's wait
    for an answer (a long poll: plus the wait asked for); no answer raises
    ``PEER_UNAVAILABLE``, which the coordinator counts as not approved.
    """

    def __init__(
        self, gateway_id: str, client: Client, advert: HatpAdvert, *, timeout: float | None
    ) -> None:
        self._id = gateway_id
        self._client = client
        self.advert = advert
        self._timeout = timeout

    @property
    def gateway_id(self) -> str:
        """The gateway's id, as its advert and its signing key's issuer name it."""
        return self._id

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask the group (``txn/ask``); return the signed PendingVote or final Approval."""
        return await self._send("txn/ask", ask_params(request), member="answer")

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll the ask (``txn/voted``), waiting up to ``wait_seconds`` (capped by the server)."""
        params = {"askId": ask_id, "waitSeconds": float(wait_seconds)}
        return await self._send("txn/voted", params, wait=wait_seconds, member="answer")

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Withdraw the ask (``txn/withdraw``); a decided ask stays decided."""
        await self._send("txn/withdraw", {"askId": ask_id, "reason": reason[:1000]}, member=None)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw every open ask of the transaction (``txn/withdrawAll``); return their ids."""
        params = {"txnId": txn_id, "reason": reason[:1000]}
        found = (await self._send("txn/withdrawAll", params, member=None)).get("askIds")
        if not isinstance(found, list):
            raise PeerIncompatible(
                f"{self._id} answered txn/withdrawAll without a list 'askIds'",
                reason="METHOD",
                server=self._id,
                method=METHODS["txn/withdrawAll"],
            )
        return [str(ask_id) for ask_id in found]

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the signed ChainEstimate of asking the group (``txn/estimate``)."""
        return await self._send("txn/estimate", ask_params(request), member="estimate")

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Move the ask's deadline earlier (``txn/tighten``); return the signed pending or final."""
        params = {"askId": ask_id, "decideBy": format_time(decide_by)}
        return await self._send("txn/tighten", params, member="answer")

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a question (``ask/question``); return the signed pending or the signed Answer."""
        return await self._send("ask/question", {"question": dict(question)}, member="answer")

    async def ask_call(self, call_request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask people to approve one tool call (``ask/call``); return the signed pending or
        the signed CallApproval."""
        return await self._send("ask/call", {"request": dict(call_request)}, member="answer")

    async def poll_call(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll a call ask (``ask/answered``); the signed pending, or the CallApproval."""
        return await self._answered(ask_id, "call", wait_seconds)

    async def poll_question(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll a question (``ask/answered``); the signed pending, or the Answer.

        Raises:
            AskWithdrawn: the question closed unanswered.
        """
        return await self._answered(ask_id, "question", wait_seconds)

    async def _answered(self, ask_id: str, kind: str, wait_seconds: float) -> dict[str, Any]:
        params = {"askId": ask_id, "kind": kind, "waitSeconds": float(wait_seconds)}
        return await self._send("ask/answered", params, wait=wait_seconds, member="answer")

    async def _send(
        self, name: str, params: Mapping[str, Any], *, member: str | None, wait: float = 0.0
    ) -> dict[str, Any]:
        timeout = None if self._timeout is None else self._timeout + min(wait, MAX_WAIT_SECONDS)
        result = await request(
            self._client,
            METHODS[name],
            params,
            server=self._id,
            timeout=timeout,
            silence=lambda why: PeerUnavailable(why, gateway=self._id),
        )
        if member is None:
            return result
        answer = result.get(member)
        if not isinstance(answer, dict):
            raise PeerIncompatible(
                f"{self._id} answered {METHODS[name]} without an object {member!r}",
                reason="METHOD",
                server=self._id,
                method=METHODS[name],
            )
        return answer


async def mcp_gateway(
    gateway_id: str, client: Client, keyring: Keyring, *, timeout: float | None = None
) -> McpGateway:
    """Check the server ``client`` reaches is the Human Gateway ``gateway_id``; return it.

    ``client`` must be entered (``async with``) and declare the extension
    (``Client(..., extensions=[mcp.client.advertise(EXTENSION_ID)])``).

    Raises:
        PeerIncompatible: the advert does not fit (``NO_EXTENSION``, ``SETTINGS``,
            ``VERSION``, ``ROLE``, ``IDENTITY``, ``KEY_UNTRUSTED``).
    """
    advert = check_server(client, role="gateway", server_id=gateway_id, keyring=keyring)
    return McpGateway(gateway_id, client, advert, timeout=timeout)


class McpDirectory:
    """A directory on an MCP server: its Human Cards (a :class:`~hatp.directory.CardSource`
    once loaded) and ``resolve``; every card verified against ``keyring`` first.

    Build it with :func:`mcp_directory`.
    """

    def __init__(self, server_id: str, client: Client, keyring: Keyring) -> None:
        self._id = server_id
        self._client = client
        self._keyring = keyring
        self._cards: list[HumanCard] = []

    async def load(self) -> list[HumanCard]:
        """Read every Human Card resource and verify it; keep and return them.

        Raises:
            CardInvalid: a card does not verify under the keyring (none is kept).
        """
        listed = await self._client.list_resources()
        cards: list[HumanCard] = []
        for resource in listed.resources:
            if resource.mime_type != "application/json" or not str(resource.uri).startswith(
                "human://"
            ):
                continue
            read = await self._client.read_resource(str(resource.uri))
            for content in read.contents:
                if isinstance(content, types.TextResourceContents):
                    cards.append(verify_card(parse_json(content.text), self._keyring))
        self._cards = cards
        return list(cards)

    def cards(self) -> list[HumanCard]:
        """The cards :meth:`load` read last, verified."""
        return list(self._cards)

    async def resolve(
        self,
        address: str,
        action: str,
        *,
        amounts: Mapping[str, Decimal],
        on_behalf_of: str,
        initiator_principal: str | None = None,
        deadline_seconds: float | None = None,
        passkey_required: bool = False,
    ) -> Resolution:
        """Resolve ``address`` at the directory (``directory/resolve``): ranked candidates,
        each with its card verified here, and everyone passed over with the rule why.

        Raises:
            CardInvalid: a candidate's card does not verify under the keyring.
            AddressInvalid: the directory refused the address.
        """
        params: dict[str, Any] = {
            "address": address,
            "action": action,
            "amounts": {currency: str(value) for currency, value in amounts.items()},
            "onBehalfOf": on_behalf_of,
            "initiatorPrincipal": initiator_principal,
            "deadlineSeconds": deadline_seconds,
            "passkeyRequired": passkey_required,
        }
        answer = await request(self._client, METHODS["directory/resolve"], params, server=self._id)
        try:
            resolution = self._resolution(answer)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise PeerIncompatible(
                f"{self._id} answered {METHODS['directory/resolve']} with something that is "
                f"not a resolution ({type(exc).__name__}: {exc})",
                reason="METHOD",
                server=self._id,
                method=METHODS["directory/resolve"],
            ) from None
        for candidate in resolution.candidates:
            if candidate.card.id != candidate.id:
                raise PeerIncompatible(
                    f"{self._id} named candidate {candidate.id} with the card of "
                    f"{candidate.card.id}",
                    reason="METHOD",
                    server=self._id,
                    method=METHODS["directory/resolve"],
                )
        return resolution

    def _resolution(self, answer: Mapping[str, Any]) -> Resolution:
        # Cards are verified against the caller's keyring (CardInvalid when not);
        # anything else out of shape raises KeyError, TypeError or ValueError.
        candidates = tuple(
            Candidate(
                id=str(c["id"]),
                card=verify_card(c["card"], self._keyring),
                status=Status(c["status"]),
                load=Fraction(c["load"]),
                sla_fits=bool(c["slaFits"]),
            )
            for c in answer["candidates"]
        )
        excluded = tuple(
            Exclusion(id=str(e["id"]), rule=ExclusionRule(e["rule"]), detail=str(e["detail"]))
            for e in answer["excluded"]
        )
        return Resolution(parse_address(answer["address"]), candidates, excluded)


async def mcp_directory(server_id: str, client: Client, keyring: Keyring) -> McpDirectory:
    """Check the server ``client`` reaches serves a directory as ``server_id``; return it.

    Co-hosted with a gateway, ``server_id`` is the gateway's id; the cards'
    issuer is checked on every card, against ``keyring``.

    Raises:
        PeerIncompatible: the advert does not fit (role ``directory``).
    """
    check_server(client, role="directory", server_id=server_id, keyring=keyring)
    return McpDirectory(server_id, client, keyring)


async def await_call_approval(
    client: Client,
    request: Mapping[str, Any],
    *,
    until: datetime,
    clock: Clock | None = None,
    on_pending: Callable[[dict[str, Any]], None] | None = None,
) -> CallApproval:
    """Have one tool call approved through the gateway's :data:`CALL_APPROVAL_TOOL`.

    Drives the ``input_required`` loop itself, one round per long poll, for
    as long as people take, until ``until`` on ``clock`` (the system clock
    by default); the ask's own ``decideBy`` ends it earlier with a signed
    withdrawn rejection. ``on_pending`` sees the signed pending vote of each
    round still open (who is asked, the deadline in force).

    Returns:
        The signed CallApproval: ``decision`` ``approve`` or ``reject``.

    Raises:
        CallInvalid, VersionUnsupported, AskUnknown: the gateway refused the request.
        TimeoutError: ``until`` passed with the ask still open.
        MCPError: any other JSON-RPC error.
    """
    clock = clock or SystemClock()
    state: str | None = None
    arguments = {"request": dict(request)}
    while True:
        try:
            result = await client.session.call_tool(
                CALL_APPROVAL_TOOL, arguments, request_state=state, allow_input_required=True
            )
        except MCPError as exc:
            refusal = hatp_error(exc)
            if refusal is not None:
                raise refusal from None
            raise
        if isinstance(result, types.CallToolResult):
            if result.is_error or result.structured_content is None:
                raise MCPError(types.INTERNAL_ERROR, f"{CALL_APPROVAL_TOOL} failed: {result}")
            return CallApproval.model_validate(result.structured_content)
        if not isinstance(result, types.InputRequiredResult) or result.request_state is None:
            raise MCPError(types.INTERNAL_ERROR, f"{CALL_APPROVAL_TOOL} answered {result!r}")
        pending = (result.meta or {}).get(PENDING_META_KEY)
        if on_pending is not None and isinstance(pending, dict):
            on_pending(pending)
        if clock.now() >= until:
            raise TimeoutError(
                f"the call approval was still undecided at {format_time(until)}; the ask stays "
                "open at the gateway until its decideBy"
            )
        state = result.request_state
