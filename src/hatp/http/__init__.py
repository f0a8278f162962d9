"""hatp over HTTP (Starlette): the carriage of compensation leases, and hatp errors.

A system of record's own API takes mutations only under a lease
(:class:`LeaseGuard`, a pure ASGI middleware) and serves its lease
endpoints (:func:`lease_routes`: grant, read, recover, restore by hand);
an agent talks to both with :class:`LeaseClient`. The PTCL headers carry
the signed documents as base64url of their canonical JSON
(:func:`encode_header`, :func:`decode_header`). Every hatp error travels
as its wire form with the status :data:`HTTP_STATUS` gives it
(:func:`error_response`). No protocol rule lives here: the system of
record checks every lease (:class:`hatp.lease.SystemOfRecord`).
"""

from hatp.http._errors import (
    DEFAULT_STATUS,
    HTTP_STATUS,
    PTCL_STALE_FENCE,
    error_body,
    error_response,
    handle_hatp_error,
    status_of,
)
from hatp.http._lease_client import LeaseClient, LeasedResponse
from hatp.http._lease_guard import LeaseGuard, PresentedLease, attach_receipt, presented_lease
from hatp.http._lease_headers import (
    FENCE_HEADER,
    LEASE_HEADER,
    RECEIPT_HEADER,
    decode_header,
    encode_header,
    parse_fence_token,
)
from hatp.http._lease_routes import MAX_BODY_BYTES, Authenticate, lease_routes

__all__ = [
    "DEFAULT_STATUS",
    "FENCE_HEADER",
    "HTTP_STATUS",
    "LEASE_HEADER",
    "MAX_BODY_BYTES",
    "PTCL_STALE_FENCE",
    "RECEIPT_HEADER",
    "Authenticate",
    "LeaseClient",
    "LeaseGuard",
    "LeasedResponse",
    "PresentedLease",
    "attach_receipt",
    "decode_header",
    "encode_header",
    "error_body",
    "error_response",
    "handle_hatp_error",
    "lease_routes",
    "parse_fence_token",
    "presented_lease",
    "status_of",
]
