"""``CoordinatorClient``: a caller's side of the coordinator's JSON API (docs/spec.md §25).

Begin a transaction for a plan, follow it, read its record, list the newest, take a
committed one back (its undo plan shown, or begun).
A refusal comes back as the typed hatp error the server raised (rebuilt from
its body with :func:`hatp.errors.error_from_dict`); no answer at all is
``PEER_UNAVAILABLE`` naming the server.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import Any, Unpack
from urllib.parse import quote

import httpx2

from hatp._undo_ask import UndoAsk, undo_request
from hatp.errors import HatpError, PeerIncompatible, PeerUnavailable
from hatp.evidence import parse_json
from hatp.http._client import HttpClientBase, refusal
from hatp.model import TxnState

__all__ = ["CoordinatorClient"]

_log = logging.getLogger(__name__)

#: How long one request may take by default, in seconds.
DEFAULT_TIMEOUT = 30.0


class CoordinatorClient(HttpClientBase):
    """The coordinator's JSON API of the ``hatp serve`` at ``base_url``.

    ``token`` is a caller's bearer token (``[api] callers``; ``hatp api-token``
    makes one), sent as ``Authorization: Bearer``. ``client`` is the HTTP client
    to use (one is made, and closed by :meth:`aclose`, if none is given: pass one
    with an ``httpx2.ASGITransport`` to reach an app in process); ``prefix``
    where the coordinator's routes are served. Use it as
    ``async with CoordinatorClient(url) as coordinator:``.

    Every method raises, besides what it names: the server's refusal as its
    typed :class:`~hatp.errors.HatpError` (``TXN_UNKNOWN``, ``PLAN_INVALID``,
    ``UNDO_REFUSED``, ``UNAUTHENTICATED``, ``CALLER_REFUSED``, …);
    ``PEER_UNAVAILABLE`` when no answer came (the server is unreachable, or a 5xx
    without a hatp body; asking again is safe); ``PEER_INCOMPATIBLE`` (reason
    ``METHOD``) for an answer that is not the coordinator API's.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        client: httpx2.AsyncClient | None = None,
        prefix: str = "/coordinator",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(base_url, prefix, client, timeout)
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}

    async def begin(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """Begin a transaction for ``plan`` (its wire form); it runs at the server.

        Returns:
            ``{"txnId", "state"}`` as the log holds it once begun.
        """
        return await self._json("POST", f"{self.prefix}/txns", json={"plan": dict(plan)})

    async def state(self, txn_id: str) -> dict[str, Any]:
        """Where transaction ``txn_id`` stands: ``{"txnId", "state"}``."""
        return await self._json("GET", self._txn_path(txn_id))

    async def record(self, txn_id: str) -> dict[str, Any]:
        """The Transaction Record of ``txn_id`` as logged so far (verify it offline with
        :func:`hatp.evidence.verify` or ``hatp verify``)."""
        answer = await self._json("GET", self._txn_path(txn_id) + "/record")
        record = answer.get("record")
        if not isinstance(record, dict):
            raise self._incompatible("GET", self._txn_path(txn_id) + "/record", "no record")
        return record

    async def list(
        self, *, state: TxnState | str | None = None, limit: int = 50
    ) -> builtins.list[Any]:
        """The newest transactions (an agent's token: only its own), in ``state`` if given.

        Returns:
            Up to ``limit`` ``{"txnId", "state", "initiator", "createdAt", "updatedAt"}``,
            newest first.
        """
        query: dict[str, Any] = {"limit": limit}
        if state is not None:
            query["state"] = state.value if isinstance(state, TxnState) else state
        answer = await self._json("GET", f"{self.prefix}/txns", params=query)
        found = answer.get("transactions")
        if not isinstance(found, list):
            raise self._incompatible("GET", f"{self.prefix}/txns", "no transactions")
        return found

    async def plan_undo(
        self,
        txn_id: str,
        **ask: Unpack[UndoAsk],
    ) -> dict[str, Any]:
        """The plan that would take back committed transaction ``txn_id``'s steps (its wire
        form; nothing is begun): each branch the step it undoes and what that costs,
        ``undoes.kept`` each step it leaves and why.

        ``steps``: only these branch ids (default: every step that can be undone);
        ``differing``: only those that committed other than their approved preview;
        ``decide_seconds``: how long people would have to approve it; ``undo_txn_id``: the
        undo's own id.

        Raises:
            TransactionUnknown: no such transaction.
            UndoRefused: nothing can be taken back as asked (``data.reason``).
        """
        body = undo_request(ask)
        answer = await self._json(
            "POST", self._txn_path(txn_id) + "/undo", json=body | {"dryRun": True}
        )
        plan = answer.get("plan")
        if not isinstance(plan, dict):
            raise self._incompatible("POST", self._txn_path(txn_id) + "/undo", "no plan")
        return plan

    async def undo(
        self,
        txn_id: str,
        **ask: Unpack[UndoAsk],
    ) -> dict[str, Any]:
        """Begin taking back committed transaction ``txn_id``'s steps (as :meth:`plan_undo`):
        an undo transaction of its own, run at the server; nothing is undone until people
        approve it, and then all of it is, or none.

        Returns:
            ``{"txnId", "state", "plan"}``: the undo transaction once logged, and its plan.

        Raises:
            TransactionUnknown: no such transaction.
            UndoRefused: nothing can be taken back as asked (``data.reason``); nothing begun.
            OutcomeConflict: a transaction ``undo_txn_id`` is already in the log.
        """
        body = undo_request(ask)
        return await self._json("POST", self._txn_path(txn_id) + "/undo", json=body)

    def _txn_path(self, txn_id: str) -> str:
        return f"{self.prefix}/txns/{quote(txn_id, safe='')}"

    def _incompatible(self, method: str, path: str, what: str) -> PeerIncompatible:
        _log.info("%s %s%s answered %s", method, self.base_url, path, what)
        return PeerIncompatible(
            f"{method} {self.base_url}{path} answered {what}: it does not serve hatp's "
            "coordinator API there",
            reason="METHOD",
            server=self.base_url,
        )

    async def _json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        url = self.base_url + path
        try:
            response = await self._client.request(
                method, url, json=json, params=params, headers=self._headers
            )
        except httpx2.RequestError as exc:
            _log.info("%s %s: no answer (%s)", method, url, type(exc).__name__)
            raise PeerUnavailable(
                f"{method} {url} got no answer ({type(exc).__name__}: {exc}): is hatp serve "
                "running there? Asking again is safe",
                server=self.base_url,
            ) from exc
        if not response.is_success:
            error = refusal(response, method, url)
            _log.info("%s %s refused: %s", method, url, error.code)
            raise error
        try:
            body = parse_json(response.content)
        except HatpError as exc:
            _log.info("%s %s: unreadable answer (%s)", method, url, type(exc).__name__)
            body = None
        if not isinstance(body, dict):
            raise self._incompatible(method, path, "no JSON object")
        return body
