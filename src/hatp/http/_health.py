"""``hatp serve``'s health endpoints: is the process alive, and can it reach its store.

``/healthz`` touches nothing but the event loop, so it answers while a
database hangs; ``/readyz`` asks each store the served roles use to answer
within its bound (:meth:`~hatp.store.Store.call` of
:meth:`~hatp.store.Store.ping`) and answers 503 with the typed
``STORE_UNAVAILABLE`` body when one does not (docs/spec.md §25
[HTTP-HEALTH]).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp.errors import StoreUnavailable
from hatp.http._api import ERROR_SCOPE
from hatp.http._errors import error_response
from hatp.store import Store

__all__ = ["LIVE_PATH", "READY_PATH", "health_paths", "health_routes"]

#: Liveness: the process answers.
LIVE_PATH = "/healthz"
#: Readiness: the process answers and reaches its store.
READY_PATH = "/readyz"

_log = logging.getLogger(__name__)


def health_routes(stores: Iterable[Store]) -> list[Route]:
    """``GET /healthz`` (200 ``{"status": "live"}``) and ``GET /readyz`` (200
    ``{"status": "ready"}`` once every one of ``stores`` answered within its
    ``call_seconds``; else 503 ``STORE_UNAVAILABLE``)."""
    checked: list[Store] = []
    for store in stores:
        if all(store is not seen for seen in checked):
            checked.append(store)

    async def live(_: Request) -> Response:
        return JSONResponse({"status": "live"})

    async def ready(request: Request) -> Response:
        for store in checked:
            try:
                await store.call(store.ping)
            except StoreUnavailable as error:
                _log.warning("not ready: %s", error.message)
                request.scope[ERROR_SCOPE] = error.code
                return error_response(error)
        return JSONResponse({"status": "ready"})

    return [
        Route(LIVE_PATH, live, methods=["GET"], name="hatp-healthz"),
        Route(READY_PATH, ready, methods=["GET"], name="hatp-readyz"),
    ]


def health_paths(error_body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI path items of ``/healthz`` and ``/readyz`` (``error_body``: the schema
    of a refusal's body)."""

    def answer(status: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"status": {"const": status}},
            "required": ["status"],
            "additionalProperties": False,
        }

    def ok(summary: str, status: str) -> dict[str, Any]:
        return {"description": summary, "content": {"application/json": {"schema": answer(status)}}}

    live = "The process answers (it touches no store)"
    ready = "The process answers and reaches its store within its bound"
    return {
        LIVE_PATH: {
            "get": {
                "operationId": "getHealthz",
                "summary": live,
                "tags": ["meta"],
                "responses": {"200": ok(live, "live")},
            }
        },
        READY_PATH: {
            "get": {
                "operationId": "getReadyz",
                "summary": ready,
                "tags": ["meta"],
                "responses": {
                    "200": ok(ready, "ready"),
                    "503": {
                        "description": "refused: STORE_UNAVAILABLE",
                        "x-hatp-codes": ["STORE_UNAVAILABLE"],
                        "content": {"application/json": {"schema": error_body}},
                    },
                },
            }
        },
    }
