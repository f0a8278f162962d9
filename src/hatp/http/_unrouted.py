"""What ``hatp serve``'s app answers when no route takes a request: a typed refusal.

Starlette answers a path no route serves, and a method a path does not take, in
plain text. The app answers them as it answers every other refusal of its JSON
API ([HTTP-TYPED]): ``NOT_FOUND`` (404) and ``METHOD_NOT_ALLOWED`` (405, with
``Allow``) as ``{code, message, data}``. Under the approver page's path (not its
``/api``, whose endpoints answer JSON) the page shows the refusal as its HTML
error page instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from hatp.errors import HatpError, MethodNotAllowed, NotFound
from hatp.http._errors import error_response

__all__ = ["PageRefusal", "unrouted", "unrouted_handler"]

_log = logging.getLogger(__name__)

#: Shows a refusal as an HTML page (the approver page's error page).
PageRefusal = Callable[[HatpError], Response]
#: A Starlette exception handler.
_Handler = Callable[[Request, Exception], Awaitable[Response]]


def unrouted(request: Request, status: int, allow: str = "") -> HatpError | None:
    """The typed refusal of a request no route took with ``status`` (404 or 405, with the
    ``Allow`` header Starlette gave it), or ``None`` for any other status."""
    path = request.url.path
    if status == 405:
        allowed = sorted({m.strip() for m in allow.split(",") if m.strip()})
        return MethodNotAllowed(
            f"{path} is not served for {request.method[:20]}; it takes {', '.join(allowed)}",
            method=request.method[:20],
            path=path[:500],
            allowed=allowed,
        )
    if status == 404:
        return NotFound(
            f"nothing is served at {path[:200]}: the routes are listed in /openapi.json",
            path=path[:500],
        )
    return None


def unrouted_handler(page: PageRefusal | None = None, page_prefix: str = "/approve") -> _Handler:
    """A Starlette handler of :class:`~starlette.exceptions.HTTPException` answering a
    request no route took with its typed refusal (:func:`unrouted`); with ``page``, one
    under ``page_prefix`` (but not ``page_prefix/api``) as ``page`` shows it."""

    async def handle(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException):
            raise exc
        headers = exc.headers or {}
        error = unrouted(request, exc.status_code, headers.get("Allow", ""))
        if error is None:  # not a routing refusal: as Starlette would answer it
            _log.warning("HTTP %d on %s, not a routing refusal", exc.status_code, request.url.path)
            return PlainTextResponse(exc.detail, exc.status_code, headers=exc.headers)
        _log.info("no route took %s %s: %s", request.method[:20], request.url.path, error.code)
        if page is not None and _on_page(request.url.path, page_prefix):
            shown = page(error)
            if isinstance(error, MethodNotAllowed):
                shown.headers["Allow"] = ", ".join(error.data["allowed"])
            return shown
        return error_response(error)

    return handle


def _on_page(path: str, prefix: str) -> bool:
    """Whether ``path`` is one of the approver page's HTML pages (not its JSON endpoints)."""
    on_page = path == prefix or path.startswith(prefix + "/")
    return on_page and not (path == prefix + "/api" or path.startswith(prefix + "/api/"))
