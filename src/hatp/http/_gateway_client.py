"""``HttpGateway``: a Human Gateway reached over ``hatp serve``'s JSON API (docs/spec.md §25).

The coordinator uses it exactly as an in-process :class:`~hatp.gateway.HumanGateway`
(:class:`hatp.coordinator.Gateway`): another organisation's gateway, say, asked by
this organisation's coordinator. Each request is signed with the coordinator's
key ([API-SIGNED]), so the remote gateway knows who asks by this organisation's
published keys, or carries a bearer token ([API-TOKEN]). Every answer is the
gateway's signed document as it signed it; the coordinator vets it against its
own keyring, as always. A refusal comes back as the typed hatp error the gateway
raised; no answer at all is ``PEER_UNAVAILABLE``, which the coordinator counts as
not approved.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote

import httpx2

from hatp._edge_params import MAX_WAIT_SECONDS, ask_params
from hatp.clock import Clock, SystemClock, format_time
from hatp.coordinator import ApprovalRequest
from hatp.errors import HatpError, PeerIncompatible, PeerUnavailable
from hatp.evidence import SigningKey, parse_json
from hatp.http._client import HttpClientBase, refusal
from hatp.http._signed import sign_request

__all__ = ["HttpGateway"]

_log = logging.getLogger(__name__)

#: How long one request may take by default, in seconds (a long poll: plus its wait).
DEFAULT_TIMEOUT: Final = 30.0
#: How many open asks one client remembers for :meth:`HttpGateway.withdraw_transaction`.
_REMEMBERED_ASKS: Final = 10_000


class HttpGateway(HttpClientBase):
    """The Human Gateway ``gateway_id`` served at ``base_url`` (its routes under
    ``/gateway``): the coordinator's :class:`~hatp.coordinator.Gateway`, and an
    agent's way to ask for a call approval or an answer.

    Each request is signed with ``signer`` as ``caller`` (the key's issuer, as the
    gateway's keyring names it: ``https://coordinator.acme.com``) at ``clock``'s
    time (the system clock by default); else, with ``token``, it carries
    ``Authorization: Bearer``; else nothing (a gateway open to whoever reaches it).
    ``client`` is the HTTP client to use (one is made, and closed by
    :meth:`aclose`, if none is given); ``timeout`` bounds each request's wait for
    an answer, plus the wait a long poll asks for.

    Every method raises, besides what it names: the gateway's refusal as its typed
    :class:`~hatp.errors.HatpError` (``ASK_UNKNOWN``, ``ASK_INVALID``,
    ``UNAUTHENTICATED``, ``CALLER_REFUSED``, ``STORE_UNAVAILABLE``, …);
    ``PEER_UNAVAILABLE`` when no answer came (unreachable, a timeout, a 5xx without
    a hatp body; asking again is safe); ``PEER_INCOMPATIBLE`` (reason ``METHOD``)
    for an answer that is not the gateway API's.

    Raises:
        ValueError: ``signer`` without ``caller``.
    """

    def __init__(
        self,
        base_url: str,
        gateway_id: str,
        *,
        signer: SigningKey | None = None,
        caller: str | None = None,
        token: str | None = None,
        client: httpx2.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Clock | None = None,
        prefix: str = "/gateway",
    ) -> None:
        if signer is not None and not caller:
            raise ValueError(
                "a signed request names its caller: give caller, the signing key's issuer"
            )
        super().__init__(base_url, prefix, client, timeout)
        self._id = gateway_id
        self._signer = signer
        self._caller = caller or ""
        self._token = token
        self._timeout = timeout
        self._clock = clock or SystemClock()
        #: The open asks this client made: ask id -> transaction id, oldest first.
        self._open: OrderedDict[str, str] = OrderedDict()

    @property
    def gateway_id(self) -> str:
        """The gateway's id, as its signing key's issuer names it."""
        return self._id

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask the group (``POST /gateway/asks``); return the signed PendingVote or final
        Approval. Asking again for the same transaction, group and plan is the same ask."""
        answer = await self._send("POST", "/asks", ask_params(request), member="answer")
        return self._noted(answer, request.txn_id)

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll the ask (``GET /gateway/asks/{askId}``), waiting up to ``wait_seconds``
        (at most the server's 30 s) for its decision; the signed pending or Approval."""
        answer = await self._poll(f"/asks/{_quoted(ask_id)}", wait_seconds)
        return self._noted(answer)

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Withdraw the ask (``POST /gateway/asks/{askId}/withdraw``); a decided ask stays
        decided. The signed withdrawn reject names this client's caller."""
        path = f"/asks/{_quoted(ask_id)}/withdraw"
        await self._send("POST", path, {"reason": reason[:1000]}, member=None)
        self._open.pop(ask_id, None)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw the open asks this client made for ``txn_id``; return their ids.

        The JSON API has no route that withdraws a transaction's asks, so only the
        asks this object made (and last saw open) are withdrawn, one by one. The asks
        of a restarted coordinator, which this object never made, stay open at the
        remote gateway until their own ``decideBy``, which closes them as rejected.

        Raises:
            PeerUnavailable: a withdrawal got no answer; those before it stand, and the
                rest are still remembered, to withdraw again.
        """
        ask_ids = [ask_id for ask_id, txn in self._open.items() if txn == txn_id]
        for ask_id in ask_ids:
            await self.withdraw(ask_id, reason)
        if ask_ids:
            _log.info("gateway %s: withdrew %s of %s", self._id, ", ".join(ask_ids), txn_id)
        return ask_ids

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the signed ChainEstimate of asking the group (``POST /gateway/estimate``);
        nobody is asked."""
        return await self._send("POST", "/estimate", ask_params(request), member="estimate")

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Move the ask's deadline earlier (``POST /gateway/asks/{askId}/tighten``); return
        the signed pending with the deadline now in force, or the final Approval."""
        path = f"/asks/{_quoted(ask_id)}/tighten"
        body = {"decideBy": format_time(decide_by)}
        return self._noted(await self._send("POST", path, body, member="answer"))

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a question (``POST /gateway/questions``); the signed pending or Answer."""
        body = {"question": dict(question)}
        return await self._send("POST", "/questions", body, member="answer")

    async def poll_question(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll a question (``GET /gateway/questions/{askId}``); the signed pending or
        Answer.

        Raises:
            AskWithdrawn: the question closed unanswered.
        """
        return await self._poll(f"/questions/{_quoted(ask_id)}", wait_seconds)

    async def ask_call(self, call_request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask people to approve one tool call (``POST /gateway/calls``); the signed
        pending or CallApproval."""
        body = {"request": dict(call_request)}
        return await self._send("POST", "/calls", body, member="answer")

    async def poll_call(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll a call ask (``GET /gateway/calls/{askId}``); the signed pending or
        CallApproval."""
        return await self._poll(f"/calls/{_quoted(ask_id)}", wait_seconds)

    def _noted(self, answer: dict[str, Any], txn_id: str | None = None) -> dict[str, Any]:
        """Remember ``answer``'s ask while it is open (for :meth:`withdraw_transaction`)."""
        ask_id = answer.get("askId")
        if not isinstance(ask_id, str):
            return answer
        if answer.get("kind") != "pending":
            self._open.pop(ask_id, None)
        elif txn_id is not None:
            self._open[ask_id] = txn_id
            self._open.move_to_end(ask_id)
            while len(self._open) > _REMEMBERED_ASKS:
                self._open.popitem(last=False)
        return answer

    async def _poll(self, path: str, wait_seconds: float) -> dict[str, Any]:
        wait = min(max(float(wait_seconds), 0.0), MAX_WAIT_SECONDS)
        return await self._send(
            "GET", f"{path}?waitSeconds={wait!r}", None, member="answer", wait=wait
        )

    async def _send(
        self,
        method: str,
        path: str,
        doc: Mapping[str, Any] | None,
        *,
        member: str | None,
        wait: float = 0.0,
    ) -> dict[str, Any]:
        """Send one request (``path`` under the prefix, its query included) and return
        the answer's ``member`` (``None``: the whole answer)."""
        url = self.base_url + self.prefix + path
        body = b"" if doc is None else _json_bytes(doc)
        headers = {"Content-Type": "application/json"} if doc is not None else {}
        request = self._client.build_request(
            method, url, content=body, headers=headers, timeout=self._timeout + wait
        )
        self._authenticate(request, body)
        try:
            response = await self._client.send(request)
        except httpx2.RequestError as exc:
            _log.info("%s %s: no answer (%s)", method, url, type(exc).__name__)
            raise PeerUnavailable(
                f"gateway {self._id} gave no answer to {method} {url} ({type(exc).__name__}: "
                f"{exc}); asking again is safe",
                gateway=self._id,
                server=self.base_url,
            ) from exc
        if not response.is_success:
            error = refusal(response, method, url)
            _log.info("%s %s refused: %s", method, url, error.code)
            if isinstance(error, PeerUnavailable) and "gateway" not in error.data:
                raise PeerUnavailable(error.message, **error.data, gateway=self._id)
            raise error
        try:
            answer = parse_json(response.content)
        except HatpError as exc:
            _log.info("%s %s: unreadable answer (%s)", method, url, type(exc).__name__)
            answer = None
        if not isinstance(answer, dict):
            raise self._incompatible(method, url, "no JSON object")
        if member is None:
            return answer
        found = answer.get(member)
        if not isinstance(found, dict):
            raise self._incompatible(method, url, f"no object {member!r}")
        return found

    def _authenticate(self, request: httpx2.Request, body: bytes) -> None:
        """Sign ``request`` (its path and query exactly as they go out), else give it the
        bearer token."""
        if self._signer is not None:
            target = request.url.raw_path.decode("ascii")
            signed = sign_request(
                self._signer, self._caller, request.method, target, body, self._clock.now()
            )
            request.headers.update(signed)
        elif self._token is not None:
            request.headers["Authorization"] = f"Bearer {self._token}"

    def _incompatible(self, method: str, url: str, what: str) -> PeerIncompatible:
        _log.info("%s %s answered %s", method, url, what)
        return PeerIncompatible(
            f"{method} {url} answered {what}: it does not serve hatp's gateway API there",
            reason="METHOD",
            server=self.base_url,
            gateway=self._id,
        )


def _quoted(ask_id: str) -> str:
    return quote(ask_id, safe="")


def _json_bytes(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(
        dict(doc), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode()
