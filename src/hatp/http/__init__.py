"""hatp over HTTP (Starlette): ``hatp serve``'s JSON API, leases, and hatp errors.

:func:`hatp_app` serves the Human Gateway's, the Directory's and the
coordinator's JSON API (each alone or together), the well-known document,
an OpenAPI description (:func:`openapi_document`) and the approver page
(:func:`approver_routes`: people sign in with a passkey and answer their asks);
:func:`load_config` and :func:`open_services` open what ``hatp serve`` runs;
with :class:`ApiCallers` the API answers only its callers' bearer tokens, and an
agent's token speaks only for that agent; with :class:`SignedCallers`, requests
another organisation signs with its published keys (:func:`sign_request`).
Authentication is the transport's job; every protocol rule stays in the roles.
Each app logs its requests and serves its own Prometheus metrics at
``/metrics`` (:class:`ServeMetrics`).

A system of record's own API takes mutations only under a lease
(:class:`LeaseGuard`, a pure ASGI middleware) and serves its lease
endpoints (:func:`lease_routes`: grant, read, recover, restore by hand);
an agent talks to both with :class:`LeaseClient`. A caller of the
coordinator's API begins, follows and lists transactions with
:class:`CoordinatorClient` (``hatp txn``); a coordinator asks a gateway
served elsewhere with :class:`HttpGateway`, each request signed with its key.
The PTCL headers carry the signed documents as base64url of their canonical JSON
(:func:`encode_header`, :func:`decode_header`). Every hatp error travels
as its wire form with the status :data:`HTTP_STATUS` gives it
(:func:`error_response`). No protocol rule lives here: the system of
record checks every lease (:class:`hatp.lease.SystemOfRecord`).
"""

from hatp.http._api import DEFAULT_MAX_BODY_BYTES
from hatp.http._approver import APPROVER_PATH, SESSION_COOKIE, approver_routes
from hatp.http._callers import ApiCallers, api_token_digest, new_api_token
from hatp.http._config import (
    ROLES,
    CoordinatorSettings,
    DirectorySettings,
    GatewaySettings,
    Role,
    ServeConfig,
    WebSettings,
    load_config,
    parse_config,
    parse_only,
)
from hatp.http._coordinator_client import CoordinatorClient
from hatp.http._errors import (
    DEFAULT_STATUS,
    HTTP_STATUS,
    PTCL_STALE_FENCE,
    error_body,
    error_response,
    handle_hatp_error,
    status_of,
)
from hatp.http._gateway_client import HttpGateway
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
from hatp.http._metrics import METRICS_PATH, ServeMetrics
from hatp.http._openapi import OPENAPI_PATH, OPENAPI_VERSION, openapi_document
from hatp.http._serve import hatp_app
from hatp.http._services import (
    Services,
    enrol_link,
    invite,
    open_services,
    open_web,
)
from hatp.http._signed import SignedCallers, sign_request

__all__ = [
    "APPROVER_PATH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_STATUS",
    "FENCE_HEADER",
    "HTTP_STATUS",
    "LEASE_HEADER",
    "MAX_BODY_BYTES",
    "METRICS_PATH",
    "OPENAPI_PATH",
    "OPENAPI_VERSION",
    "PTCL_STALE_FENCE",
    "RECEIPT_HEADER",
    "ROLES",
    "SESSION_COOKIE",
    "ApiCallers",
    "Authenticate",
    "CoordinatorClient",
    "CoordinatorSettings",
    "DirectorySettings",
    "GatewaySettings",
    "HttpGateway",
    "LeaseClient",
    "LeaseGuard",
    "LeasedResponse",
    "PresentedLease",
    "Role",
    "ServeConfig",
    "ServeMetrics",
    "Services",
    "SignedCallers",
    "WebSettings",
    "api_token_digest",
    "approver_routes",
    "attach_receipt",
    "decode_header",
    "encode_header",
    "enrol_link",
    "error_body",
    "error_response",
    "handle_hatp_error",
    "hatp_app",
    "invite",
    "lease_routes",
    "load_config",
    "new_api_token",
    "open_services",
    "open_web",
    "openapi_document",
    "parse_config",
    "parse_fence_token",
    "parse_only",
    "presented_lease",
    "sign_request",
    "status_of",
]
