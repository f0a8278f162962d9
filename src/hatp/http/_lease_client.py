"""``LeaseClient``: an agent's side of leases over HTTP.

It asks a system of record for a lease (:func:`hatp.http.lease_routes`),
sends a mutation with it in the PTCL headers to the system's own API
(behind a :class:`~hatp.http.LeaseGuard`), and checks every lease and
receipt it gets back against its keyring before handing it on. A refusal
comes back as the same typed hatp error the server raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx2

from hatp.errors import (
    EvidenceInvalid,
    PeerUnavailable,
)
from hatp.evidence import Keyring
from hatp.http._client import HttpClientBase, refusal
from hatp.http._lease_evidence import (
    checked_case,
    checked_commit,
    checked_lease,
    lease_receipt,
    read_document,
)
from hatp.http._lease_headers import FENCE_HEADER, LEASE_HEADER, RECEIPT_HEADER, encode_header
from hatp.lease import LeaseBinding, LeaseCommit, LeaseRecovery, Recovered, RecoveryMode

__all__ = ["LeaseClient", "LeasedResponse"]


@dataclass(frozen=True)
class LeasedResponse:
    """A mutation's 2xx answer: the response, and its checked commit receipt."""

    response: httpx2.Response
    receipt: dict[str, Any]
    commit: LeaseCommit


class LeaseClient(HttpClientBase):
    """Leases and leased mutations of one system of record at ``base_url``.

    ``keyring`` must trust the system of record's keys: every lease and
    receipt is checked against it. ``client`` is the HTTP client to use
    (one is made, and closed by :meth:`aclose`, if none is given);
    ``prefix`` where :func:`hatp.http.lease_routes` are mounted. Use it as
    ``async with LeaseClient(...) as leases:``.

    Every method raises, besides what it names: the server's refusal as
    its typed :class:`~hatp.errors.HatpError` (rebuilt from the body);
    ``PEER_UNAVAILABLE`` when no answer came (a transport error, or a 5xx
    without a hatp body: the request may have taken effect, and asking
    again is safe); ``PEER_INCOMPATIBLE`` (reason ``METHOD``) for another
    error status without a hatp body.
    """

    def __init__(
        self,
        base_url: str,
        *,
        keyring: Keyring,
        client: httpx2.AsyncClient | None = None,
        prefix: str = "/leases",
    ) -> None:
        super().__init__(base_url, prefix, client)
        self.keyring = keyring

    async def grant(
        self,
        resource: str,
        mutation: Mapping[str, Any],
        *,
        t_req_ms: int,
        mode: RecoveryMode,
        binding: LeaseBinding | None = None,
    ) -> dict[str, Any]:
        """Ask for a lease for ``mutation`` (``{action, params}``) of ``resource``.

        Returns:
            The signed lease, once it verified against the keyring and was found
            to be a CompensationLease for this resource, mutation, mode and binding.

        Raises:
            EvidenceInvalid: the lease handed back is not that (``SHAPE``,
                ``SIGNATURE``, ``MISMATCH``); it must not be used.
        """
        body: dict[str, Any] = {
            "resource": resource,
            "mutation": dict(mutation),
            "tReqMs": t_req_ms,
            "mode": RecoveryMode(mode).value,
        }
        if binding is not None:
            body["binding"] = binding.to_wire()
        response = await self._request("POST", self.prefix, json=body)
        lease = read_document(response.content, "lease")
        checked_lease(
            lease, self.keyring, resource=resource, mutation=mutation, mode=mode, binding=binding
        )
        return lease

    async def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        lease: Mapping[str, Any],
        fence_token: int | None = None,
    ) -> LeasedResponse:
        """Send a mutation to ``path`` with ``lease`` in ``Agent-Compensation-Lease``.

        ``Agent-Fence-Token`` is ``fence_token``, by default the lease's
        ``casFenceEpoch``.

        Returns:
            The 2xx answer with its commit receipt, checked: it verifies against the
            keyring and names this lease, its resource and its mutation.

        Raises:
            EvidenceInvalid: a 2xx answer without such a receipt (``MISSING``,
                ``ENCODING``, ``SHAPE``, ``SIGNATURE``, ``MISMATCH``). The mutation
                may have run: :meth:`lease` tells.
            InvalidJson: ``lease`` has no canonical form; nothing was sent.
        """
        token = lease.get("casFenceEpoch") if fence_token is None else fence_token
        headers = {LEASE_HEADER: encode_header(lease)}
        if token is not None:
            headers[FENCE_HEADER] = str(token)
        response = await self._request(method, path, json=json, headers=headers)
        raw = response.headers.get(RECEIPT_HEADER)
        try:
            receipt, commit = checked_commit(
                None if raw is None else raw.encode("latin-1"), lease, self.keyring
            )
        except EvidenceInvalid as exc:
            raise EvidenceInvalid(
                f"{exc.message}; the mutation may have run: the lease's status "
                f"({self.prefix}/{lease.get('leaseId')}) tells",
                **exc.data,
            ) from None
        return LeasedResponse(response, receipt, commit)

    async def lease(self, lease_id: str) -> dict[str, Any]:
        """The lease as the system of record keeps it.

        Returns:
            ``{leaseId, resource, status, commitReceipt, recoveryReceipt}``, each
            receipt checked against the keyring (or ``None``).

        Raises:
            EvidenceInvalid: a receipt that does not verify, or of another lease.
        """
        response = await self._request("GET", self._lease_path(lease_id))
        doc = read_document(response.content, "lease status")
        if doc.get("commitReceipt") is not None:
            what = f"commit receipt of {lease_id}"
            lease_receipt(doc["commitReceipt"], self.keyring, LeaseCommit, lease_id, what)
        if doc.get("recoveryReceipt") is not None:
            what = f"recovery receipt of {lease_id}"
            lease_receipt(doc["recoveryReceipt"], self.keyring, LeaseRecovery, lease_id, what)
        return doc

    async def recover(self, lease_id: str) -> Recovered:
        """Run the lease's recovery (``POST {prefix}/{leaseId}/recover``).

        Returns:
            Its checked recovery receipt, whether it ran before, and the escrow
            case of an escalated HUMAN_ESCROW lease.

        Raises:
            EvidenceInvalid: the receipt does not verify, or is of another lease.
        """
        response = await self._request("POST", self._lease_path(lease_id) + "/recover", json={})
        return self._recovered(response, lease_id)

    async def restore(self, lease_id: str, state: Mapping[str, Any]) -> Recovered:
        """Record a person's restore of an escalated lease (``POST …/restore``).

        The person is whoever the HTTP client authenticates as (its headers).

        Raises:
            EvidenceInvalid: the receipt does not verify, or is of another lease.
        """
        path = self._lease_path(lease_id) + "/restore"
        response = await self._request("POST", path, json={"state": dict(state)})
        return self._recovered(response, lease_id)

    def _recovered(self, response: httpx2.Response, lease_id: str) -> Recovered:
        what = f"recovery receipt of {lease_id}"
        doc = read_document(response.content, what)
        receipt, _ = lease_receipt(doc.get("receipt"), self.keyring, LeaseRecovery, lease_id, what)
        case = doc.get("case")
        return Recovered(
            receipt,
            replayed=doc.get("replayed") is True,
            case=None if case is None else checked_case(case, lease_id),
        )

    def _lease_path(self, lease_id: str) -> str:
        return f"{self.prefix}/{quote(lease_id, safe='')}"

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx2.Response:
        url = self.base_url + path
        try:
            response = await self._client.request(method, url, json=json, headers=headers)
        except httpx2.RequestError as exc:
            raise PeerUnavailable(
                f"{method} {url} got no answer ({type(exc).__name__}: {exc}); it may have "
                "taken effect: asking again is safe",
                server=self.base_url,
            ) from exc
        if response.is_success:
            return response
        raise refusal(response, method, url)
