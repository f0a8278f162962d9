"""The ``hatp serve`` application: the gateway's, directory's and coordinator's JSON API.

:func:`hatp_app` builds one Starlette app from whichever roles it is given
(each can be served alone), plus ``/.well-known/human-card.json``,
``/.well-known/hatp-keys.json`` (the organisation's key set), ``/openapi.json``,
an index at ``/`` and the health endpoints ``/healthz`` and ``/readyz``. The app
only carries requests: every rule stays in the role (docs/spec.md §25).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from hatp.coordinator import Coordinator, Recovery
from hatp.directory import Directory, PasskeyEnrolment
from hatp.gateway import HumanGateway, WebApprovals
from hatp.http._api import DEFAULT_MAX_BODY_BYTES, Operation, routes
from hatp.http._approver import APPROVER_PATH, approver_error_page, approver_routes
from hatp.http._callers import ApiCallers
from hatp.http._coordinator_api import CoordinatorApi
from hatp.http._directory_api import directory_operations, key_set_route, well_known_route
from hatp.http._gateway_api import gateway_operations
from hatp.http._health import health_routes
from hatp.http._metrics import RequestLog, ServeMetrics
from hatp.http._openapi import OPENAPI_PATH, openapi_document
from hatp.http._signed import SignedCallers
from hatp.http._unrouted import unrouted_handler
from hatp.model import WELL_KNOWN_PATH
from hatp.version import PROTOCOL_VERSION

__all__ = ["hatp_app"]


def hatp_app(
    *,
    gateway: HumanGateway | None = None,
    directory: Directory | None = None,
    coordinator: Coordinator | None = None,
    well_known: Mapping[str, Any] | None = None,
    web: WebApprovals | None = None,
    enrolment: PasskeyEnrolment | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str = "hatp",
    callers: ApiCallers | None = None,
    https: bool = False,
    trusted_proxies: Sequence[str] = (),
    recovery: Recovery | None = None,
    key_set: bytes | None = None,
    signed_callers: SignedCallers | None = None,
) -> Starlette:
    """Return the app serving the JSON API of each role given.

    - ``gateway``: ``/gateway/…`` (asks, polls, withdraw, tighten, estimate,
      questions, calls); the app runs the gateway's background loop (SLAs,
      escalations, deadlines) from its startup to its shutdown.
    - ``directory``: ``/directory/…`` (resolve, the cards).
    - ``coordinator``: ``/coordinator/txns…``; transactions it begins run in the
      app's event loop, and those still running at shutdown are stopped, left in
      the log for :meth:`~hatp.coordinator.Coordinator.recover`.
    - ``well_known``: the document served at ``/.well-known/human-card.json``
      (see :func:`hatp.directory.well_known`).
    - ``key_set``: the organisation's signed key set, served byte for byte at
      ``/.well-known/hatp-keys.json`` with a ``Cache-Control`` of at most an hour,
      never past its expiry (docs/spec.md [KEYSET-SERVE]); verify it first.
    - ``web``: the approver page at ``/approve`` (sign in with a passkey, answer
      asks); with ``enrolment``, people register passkeys there from invitations.
      The gateway must be ``web.gateway``. ``https``: the page is served over https
      whatever a request says (a proxy ends TLS), so its session cookie is always
      ``Secure``; else only on an https request.
    - ``trusted_proxies``: IP addresses and networks (``10.0.0.0/8``) whose
      ``X-Forwarded-Proto`` and ``X-Forwarded-For`` give a request's scheme and client
      (uvicorn's ``ProxyHeadersMiddleware``); anyone else's are ignored. None: every
      request is taken as it arrives.

    With ``callers``, every request to the JSON API carries a bearer token of one of
    them (401 ``UNAUTHENTICATED`` otherwise), and an agent's token speaks only for that
    agent (403 ``CALLER_REFUSED``); the index, the OpenAPI document, the well-known
    document, the key set and the approver page (its own sessions) stay open. With
    ``signed_callers``, a request may instead be signed with a key its keyring holds
    (another organisation's coordinator, say: docs/spec.md [API-SIGNED]); its caller is
    the key's issuer, bound by the same rules. Given alone, every request to the JSON
    API is signed (401 ``UNAUTHENTICATED`` otherwise).

    ``/healthz`` answers whenever the process does; ``/readyz`` once the store of the
    gateway and the coordinator answers within its bound (else 503 ``STORE_UNAVAILABLE``).
    ``/metrics`` (open like them) gives the Prometheus metrics of this app alone
    (``recovery``: the served coordinator's background recovery, whose runs it counts);
    every request is logged on ``hatp.http.requests``.
    A request body larger than ``max_body_bytes`` is refused 413 ``BODY_TOO_LARGE``.
    ``app.state.hatp_operations`` lists the operations served (what the OpenAPI
    document describes); ``app.state.hatp_coordinator`` holds the coordinator's
    API (:meth:`running` gives the tasks of the transactions it began), or ``None``.

    Raises:
        ValueError: no role, no well-known document and no key set to serve, ``well_known``
            is not a WellKnown document, ``key_set`` not of the key set form, or
            ``web`` is another gateway's.
    """
    roles = (gateway, directory, coordinator, well_known, key_set)
    if all(given is None for given in roles):
        raise ValueError("give hatp_app at least one role (gateway, directory, coordinator)")
    if web is not None and web.gateway is not gateway:
        raise ValueError("the approver page answers the served gateway's asks: web.gateway")
    operations: list[Operation] = []
    served: list[str] = []
    if gateway is not None:
        operations += gateway_operations(gateway)
        served.append("gateway")
    if directory is not None:
        operations += directory_operations(directory)
        served.append("directory")
    coordinator_api = None if coordinator is None else CoordinatorApi(coordinator)
    if coordinator_api is not None:
        operations += coordinator_api.operations()
        served.append("coordinator")
    document = openapi_document(
        operations,
        title=title,
        well_known=well_known is not None,
        bearer=callers is not None,
        signed=signed_callers is not None,
        key_set=key_set is not None,
    )
    index = {
        "service": title,
        "hatpVersion": PROTOCOL_VERSION,
        "serves": served,
        "openapi": OPENAPI_PATH,
        "wellKnown": WELL_KNOWN_PATH if well_known is not None else None,
        "approve": APPROVER_PATH if web is not None else None,
    }

    async def openapi(_: Request) -> Response:
        return JSONResponse(document)

    async def home(_: Request) -> Response:
        return JSONResponse(index)

    extra = [
        Route("/", home, methods=["GET"], name="hatp-index"),
        Route(OPENAPI_PATH, openapi, methods=["GET"], name="hatp-openapi"),
    ]
    if well_known is not None:
        extra.append(well_known_route(well_known))
    if key_set is not None:
        extra.append(key_set_route(key_set))
    stores = [] if gateway is None else [gateway.asks.store]
    stores += [] if coordinator is None else [coordinator.log.store]
    extra += health_routes(stores)
    log = None if coordinator is None else coordinator.log
    metrics = ServeMetrics(gateway=gateway, recovery=recovery, log=log)
    if coordinator is not None:
        coordinator.observe(metrics)
    extra.append(metrics.route())
    pages = (
        []
        if web is None
        else approver_routes(web, enrolment, max_body_bytes=max_body_bytes, https=https)
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if gateway is not None:
            gateway.start()
        try:
            yield
        finally:
            if coordinator_api is not None:
                await coordinator_api.aclose()
            if gateway is not None:
                await gateway.stop()

    api = routes(operations, max_body_bytes, callers, signed_callers)
    page = None if web is None else functools.partial(approver_error_page, web)
    unrouted = {HTTPException: unrouted_handler(page, APPROVER_PATH)}
    proxies = [Middleware(ProxyHeadersMiddleware, trusted_hosts=list(trusted_proxies))]
    logged = [Middleware(RequestLog, metrics=metrics)]
    app = Starlette(
        routes=[*extra, *pages, *api],
        lifespan=lifespan,
        exception_handlers=unrouted,
        middleware=[*(proxies if trusted_proxies else []), *logged],
    )
    app.state.hatp_operations = operations
    app.state.hatp_coordinator = coordinator_api
    app.state.hatp_metrics = metrics
    return app
