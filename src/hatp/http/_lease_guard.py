"""``LeaseGuard``: a system of record's own API takes no mutation without a lease.

A pure ASGI middleware. On a mutating request to a guarded path it reads the
PTCL headers and hands them to the route; the route applies the mutation
with :meth:`hatp.lease.SystemOfRecord.apply` (where every rule is checked)
and hands the commit receipt back; the guard sends it in
``Agent-Commit-Receipt``. No protocol rule lives here: the guard only
carries the lease in and the receipt out, and answers hatp errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hatp.errors import HatpError, LeaseRequired
from hatp.http._errors import error_response
from hatp.http._lease_headers import (
    FENCE_HEADER,
    LEASE_HEADER,
    RECEIPT_HEADER,
    decode_header,
    encode_header,
    header_bytes,
    parse_fence_token,
)

__all__ = ["LeaseGuard", "PresentedLease", "attach_receipt", "presented_lease"]

#: Where the guard keeps a request's lease and receipt in the ASGI scope.
_SCOPE_KEY = "hatp.lease"
_MUTATING = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class PresentedLease:
    """The lease a request presented: ``doc`` the bytes its ``Agent-Compensation-Lease``
    header carries (for :meth:`~hatp.lease.SystemOfRecord.apply`, which refuses any that
    are not a lease, with a signed receipt), ``fence_token`` its ``Agent-Fence-Token``."""

    doc: bytes
    fence_token: int | None


class _Carried:
    """One guarded request's lease, and the receipt its route hands back."""

    __slots__ = ("presented", "receipt")

    def __init__(self, presented: PresentedLease) -> None:
        self.presented = presented
        self.receipt: dict[str, Any] | None = None


class LeaseGuard:
    """ASGI middleware that lets no mutation of a guarded path run without a lease.

    ``guarded`` are path prefixes (``/tickets`` guards ``/tickets`` and
    ``/tickets/…``, not ``/ticketsx``); ``methods`` the methods that mutate.
    On such a request:

    1. no ``Agent-Compensation-Lease`` (or an empty one): 428 ``LEASE_REQUIRED``;
    2. an ``Agent-Fence-Token`` that is not one decimal integer: 400 ``HEADER_INVALID``;
    3. else the app runs, with :func:`presented_lease` giving the lease (the
       header's base64url decoded; bytes that are not base64url as they came);
    4. the receipt the route hands to :func:`attach_receipt` goes out in
       ``Agent-Commit-Receipt`` (base64url of its canonical JSON);
    5. a :class:`~hatp.errors.HatpError` the app raises before it answers becomes
       the typed JSON error with its status (:func:`hatp.http.error_response`).

    In 1 and 2 the app never runs. Other requests, websockets and lifespan
    pass through untouched. Install it inside Starlette's error middleware,
    ``Starlette(middleware=[Middleware(LeaseGuard, guarded=[...])])``, so it
    sees the errors of routes before they become 500s.

    Raises:
        ValueError: no path is guarded, a path does not start with ``/``, or no
            method is named.
    """

    def __init__(
        self,
        app: ASGIApp,
        guarded: Iterable[str],
        methods: Iterable[str] = _MUTATING,
    ) -> None:
        self.app = app
        self.guarded = tuple(p.rstrip("/") or "/" for p in guarded)
        self.methods = frozenset(m.upper() for m in methods)
        if not self.guarded:
            raise ValueError("a lease guard guards at least one path prefix")
        if any(not p.startswith("/") for p in self.guarded):
            raise ValueError(f"guarded paths start with '/': {list(self.guarded)}")
        if not self.methods:
            raise ValueError("a lease guard guards at least one method")

    def guards(self, method: str, path: str) -> bool:
        """Whether a ``method`` request to ``path`` must carry a lease."""
        if method.upper() not in self.methods:
            return False
        return any(
            prefix == "/" or path == prefix or path.startswith(prefix + "/")
            for prefix in self.guarded
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.guards(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            carried = _Carried(_presented(scope["headers"]))
        except HatpError as refused:
            await error_response(refused)(scope, receive, send)
            return
        scope[_SCOPE_KEY] = carried
        started = False

        async def send_with_receipt(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if carried.receipt is not None:
                    value = encode_header(carried.receipt).encode("ascii")
                    headers = [
                        *message.get("headers", []),
                        (RECEIPT_HEADER.lower().encode(), value),
                    ]
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_receipt)
        except HatpError as error:
            if started:  # the answer is on its way: too late to change it
                raise
            # A receipt handed back before the error still goes out: the write committed.
            await error_response(error)(scope, receive, send_with_receipt)


def _presented(headers: list[tuple[bytes, bytes]]) -> PresentedLease:
    lease = header_bytes(headers, LEASE_HEADER)
    if lease is None or not lease.strip(b" \t"):
        raise LeaseRequired(
            f"this mutation needs a compensation lease: ask the system of record for one, "
            f"then send it in the {LEASE_HEADER} header (base64url of its canonical JSON); "
            "nothing ran",
            header=LEASE_HEADER,
        )
    token = header_bytes(headers, FENCE_HEADER)
    fence = None if token is None else parse_fence_token(token)
    return PresentedLease(decode_header(lease), fence)


def _carried(conn: HTTPConnection) -> _Carried:
    carried = conn.scope.get(_SCOPE_KEY)
    if not isinstance(carried, _Carried):
        raise LeaseRequired(
            f"{conn.url.path} is not guarded by a LeaseGuard, so it carries no lease: "
            "guard it before it mutates anything; nothing ran",
            header=LEASE_HEADER,
        )
    return carried


def presented_lease(request: HTTPConnection) -> PresentedLease:
    """The lease the guarded request presented.

    Raises:
        LeaseRequired: no :class:`LeaseGuard` guards this request (a route that
            mutates is never reached without one; fail closed).
    """
    return _carried(request).presented


def attach_receipt(request: HTTPConnection, receipt: Mapping[str, Any]) -> None:
    """Hand the guard the signed commit receipt to send in ``Agent-Commit-Receipt``.

    Raises:
        LeaseRequired: no :class:`LeaseGuard` guards this request.
        InvalidJson: the receipt has no canonical form (never, for a signed one).
    """
    carried = _carried(request)
    encode_header(receipt)  # refuse now, in the route, rather than once the answer started
    carried.receipt = dict(receipt)
