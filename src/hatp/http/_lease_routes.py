"""A system of record's lease endpoints: grant, read, recover, restore by hand.

:func:`lease_routes` gives the Starlette routes; each calls the
:class:`~hatp.lease.SystemOfRecord` (synchronous, it touches the database)
on a worker thread and answers a hatp error as
:func:`hatp.http.error_response` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from pydantic import Field, StringConstraints, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp.errors import HatpError, InvalidJson, Unauthenticated
from hatp.evidence import canonicalize, parse_json
from hatp.http._api import read_body, require_json
from hatp.http._errors import error_response
from hatp.lease import (
    LEASE_MEDIA_TYPE,
    EscrowCase,
    LeaseBinding,
    Recovered,
    RecoveryMode,
    SystemOfRecord,
)
from hatp.model import WireModel, first_error

__all__ = ["MAX_BODY_BYTES", "Authenticate", "lease_routes"]

#: Who the person behind a request is, as the application's authentication knows them
#: (``None``: nobody it accepts). May be a coroutine function.
Authenticate = Callable[[Request], str | Awaitable[str | None] | None]
#: The largest request body a lease route reads.
MAX_BODY_BYTES = 1024 * 1024

_Endpoint = Callable[[Request], Awaitable[Response]]
_Body = TypeVar("_Body", bound=WireModel)


class _GrantBody(WireModel):
    resource: Annotated[str, StringConstraints(pattern=r"^[!-~]{1,512}$")]
    mutation: dict[str, Any]
    t_req_ms: int = Field(ge=0, le=10**12)
    mode: RecoveryMode = Field(strict=False)
    binding: LeaseBinding | None = None


class _RestoreBody(WireModel):
    state: dict[str, Any]


def lease_routes(
    sor: SystemOfRecord, prefix: str = "/leases", authenticate: Authenticate | None = None
) -> list[Route]:
    """Return the lease endpoints of ``sor`` under ``prefix``.

    - ``POST {prefix}`` ``{resource, mutation, tReqMs, mode, binding?}``: 201, the
      signed lease (``application/agent-tx-lease+json``, ``Location`` its URL);
    - ``GET {prefix}/{leaseId}``: ``{leaseId, resource, status, commitReceipt,
      recoveryReceipt}``;
    - ``POST {prefix}/{leaseId}/recover``: ``{receipt, case, replayed}``;
    - ``POST {prefix}/{leaseId}/restore`` ``{state}``, only with ``authenticate``:
      the person it names restores an escalated HUMAN_ESCROW lease by hand
      (401 ``UNAUTHENTICATED`` when it names nobody); answered as recover.

    Every POST is sent as ``application/json``, even one without a body (recover):
    anything else is 415 ``UNSUPPORTED_MEDIA_TYPE`` before the body is read, so a form
    another site posts never reaches a lease ([HTTP-MEDIA-TYPE]); a body over
    :data:`MAX_BODY_BYTES` is 413 ``BODY_TOO_LARGE``. A body that is not strict JSON of
    that form is 400 ``INVALID_JSON``
    (``data.where`` names the member); the system of record's refusals keep
    their codes, with the status of :data:`hatp.http.HTTP_STATUS`.

    Raises:
        ValueError: ``prefix`` does not start with ``/`` or ends with one.
    """
    if not prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"a prefix starts with '/' and does not end with one, not {prefix!r}")

    async def grant(request: Request) -> Response:
        body = _parsed(_GrantBody, await read_body(request, MAX_BODY_BYTES))
        lease = await run_in_threadpool(
            sor.grant,
            body.resource,
            body.mutation,
            t_req_ms=body.t_req_ms,
            mode=body.mode,
            binding=body.binding,
        )
        return Response(
            canonicalize(lease),
            status_code=201,
            media_type=LEASE_MEDIA_TYPE,
            headers={"Location": f"{prefix}/{lease['leaseId']}"},
        )

    async def read(request: Request) -> Response:
        row = await run_in_threadpool(sor.lease, request.path_params["lease_id"])
        return JSONResponse(
            {
                "leaseId": row.lease_id,
                "resource": row.resource,
                "status": row.status.value,
                "commitReceipt": row.commit_receipt,
                "recoveryReceipt": row.recovery_receipt,
            }
        )

    async def recover(request: Request) -> Response:
        recovered = await run_in_threadpool(sor.recover, request.path_params["lease_id"])
        return JSONResponse(recovered_body(recovered))

    routes = [
        _route(prefix, grant, "grant"),
        _route(prefix + "/{lease_id}", read, "read", method="GET"),
        _route(prefix + "/{lease_id}/recover", recover, "recover"),
    ]
    if authenticate is not None:
        who = authenticate

        async def restore(request: Request) -> Response:
            person = who(request)
            by = await person if inspect.isawaitable(person) else person
            if not isinstance(by, str) or not by:
                raise Unauthenticated(
                    "restoring a lease by hand names the person who did it, from "
                    "authentication: sign in and send it again; nothing was written"
                )
            body = _parsed(_RestoreBody, await read_body(request, MAX_BODY_BYTES))
            recovered = await run_in_threadpool(
                sor.restore_by_hand, request.path_params["lease_id"], body.state, by=by
            )
            return JSONResponse(recovered_body(recovered))

        routes.append(_route(prefix + "/{lease_id}/restore", restore, "restore"))
    return routes


def recovered_body(recovered: Recovered) -> dict[str, Any]:
    """The JSON answer of a recovery: ``{receipt, case, replayed}``."""
    return {
        "receipt": recovered.receipt,
        "case": None if recovered.case is None else case_body(recovered.case),
        "replayed": recovered.replayed,
    }


def case_body(case: EscrowCase) -> dict[str, Any]:
    """An escrow case as JSON: its members in camelCase."""
    return {
        "leaseId": case.lease_id,
        "resource": case.resource,
        "address": case.address,
        "instructions": case.instructions,
        "preImageStateHash": case.pre_image_state_hash,
        "preImage": case.pre_image,
    }


def _route(path: str, endpoint: _Endpoint, name: str, *, method: str = "POST") -> Route:
    async def answering(request: Request) -> Response:
        try:
            if method == "POST":
                require_json(request)  # [HTTP-MEDIA-TYPE] before anything is read
            return await endpoint(request)
        except HatpError as error:
            return error_response(error)

    return Route(path, answering, methods=[method], name=f"hatp-lease-{name}")


def _parsed(model: type[_Body], raw: bytes) -> _Body:
    """``raw`` read as strict JSON of ``model``'s form.

    Raises:
        InvalidJson: not strict JSON, or not the form (``data.where`` names the member).
    """
    doc = parse_json(raw)
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        where, problem = first_error(exc)
        raise InvalidJson(
            f"the request body is not the form this endpoint takes: /{where}: {problem}",
            where="/" + where,
        ) from None
