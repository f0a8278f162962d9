"""hatp errors as HTTP answers: one status table, one JSON body.

Every refusal travels as the error's wire form ``{code, message, data}``
(:meth:`hatp.errors.HatpError.to_dict`) with the status :data:`HTTP_STATUS`
gives it; a client rebuilds the same typed error with
:func:`hatp.errors.error_from_dict`. A stale fence (``LEASE_REFUSED``,
reason ``MONOTONIC_CAS_FENCING``) also names the PTCL draft's error,
``"ptcl": "ERR_STALE_FENCE_EPOCH"``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hatp.errors import HatpError, LeaseRefused, MethodNotAllowed

__all__ = [
    "DEFAULT_STATUS",
    "HTTP_STATUS",
    "PTCL_STALE_FENCE",
    "error_body",
    "error_response",
    "handle_hatp_error",
    "status_of",
]

#: The status of a hatp error the table does not name.
DEFAULT_STATUS = 400
#: The PTCL draft's name for a refusal under MONOTONIC_CAS_FENCING (HTTP 409).
PTCL_STALE_FENCE = "ERR_STALE_FENCE_EPOCH"

#: The HTTP status of each hatp error, by ``(code, data.reason)``; a reason of
#: ``None`` is the status of every other reason of that code.
HTTP_STATUS: dict[tuple[str, str | None], int] = {
    # LEASE_REFUSED, by reason: every key of hatp.errors.LEASE_REASONS is named.
    ("LEASE_REFUSED", "SHAPE"): 400,
    ("LEASE_REFUSED", "SIGNATURE"): 403,
    ("LEASE_REFUSED", "BINDING"): 403,
    ("LEASE_REFUSED", "DIGEST_MISMATCH"): 403,
    ("LEASE_REFUSED", "FOUR_MODE_RESERVATION_MANDATE"): 403,
    ("LEASE_REFUSED", "CLOCK_SKEW"): 403,
    ("LEASE_REFUSED", "RECOVERY_WINDOW_INEQUALITY"): 412,
    ("LEASE_REFUSED", "MONOTONIC_CAS_FENCING"): 409,
    ("LEASE_REFUSED", "NOT_GRANTED"): 403,
    ("LEASE_REFUSED", "SHADOW_DIVERGED"): 403,
    ("LEASE_REFUSED", None): 403,
    ("LEASE_REQUIRED", None): 428,
    ("MUTATION_INVALID", None): 422,
    ("RESOURCE_UNKNOWN", None): 404,
    ("LEASE_UNKNOWN", None): 404,
    ("LEASE_UNAVAILABLE", None): 422,
    ("RECOVERY_REFUSED", None): 409,
    ("INVALID_JSON", None): 400,
    ("HEADER_INVALID", None): 400,
    ("UNAUTHENTICATED", None): 401,
    ("STORE_UNAVAILABLE", None): 503,
    ("BODY_TOO_LARGE", None): 413,
    # The Human Gateway, the Directory and the coordinator (hatp serve).
    ("ASK_INVALID", None): 422,
    ("ASK_UNKNOWN", None): 404,
    ("ASK_CONFLICT", None): 409,
    ("ASK_WITHDRAWN", None): 410,
    ("QUESTION_INVALID", None): 422,
    ("ANSWER_INVALID", None): 422,
    ("CALL_INVALID", None): 422,
    ("RESPONSE_REFUSED", "SHAPE"): 422,
    ("RESPONSE_REFUSED", "SIGNATURE"): 403,
    ("RESPONSE_REFUSED", "NOT_ASKED"): 403,
    ("RESPONSE_REFUSED", "PASSKEY"): 403,
    ("PASSKEY_INVALID", None): 422,
    ("RESPONSE_REFUSED", None): 409,
    ("PLAN_INVALID", None): 422,
    ("REQUIREMENT_BELOW_TOTAL", None): 422,
    ("ADDRESS_INVALID", None): 422,
    ("VERSION_UNSUPPORTED", None): 422,
    ("CARD_UNKNOWN", None): 404,
    ("TXN_UNKNOWN", None): 404,
    ("OUTCOME_CONFLICT", None): 409,
    ("STALE_FENCE", None): 409,
    # Every reason of hatp.errors.UNDO_REASONS: what was committed cannot be taken back so.
    ("UNDO_REFUSED", None): 409,
    # The approver page (hatp serve's /approve).
    ("SIGN_IN_REFUSED", None): 401,
    ("INVITE_INVALID", None): 403,
    ("ORIGIN_REFUSED", None): 403,
    ("CALLER_REFUSED", None): 403,
    ("LINK_REFUSED", "INVALID"): 404,
    ("LINK_REFUSED", None): 410,
    # What no route takes (docs/spec.md §25 [HTTP-TYPED]).
    ("NOT_FOUND", None): 404,
    ("METHOD_NOT_ALLOWED", None): 405,
    ("UNSUPPORTED_MEDIA_TYPE", None): 415,
}


def status_of(error: HatpError) -> int:
    """Return the HTTP status ``error`` travels with (see :data:`HTTP_STATUS`)."""
    reason = error.data.get("reason")
    if isinstance(reason, str) and (error.code, reason) in HTTP_STATUS:
        return HTTP_STATUS[(error.code, reason)]
    return HTTP_STATUS.get((error.code, None), DEFAULT_STATUS)


def error_body(error: HatpError) -> dict[str, Any]:
    """Return the JSON body of ``error``: its wire form, plus ``ptcl`` for a stale fence."""
    body = error.to_dict()
    if isinstance(error, LeaseRefused) and error.reason == "MONOTONIC_CAS_FENCING":
        body["ptcl"] = PTCL_STALE_FENCE
    return body


def error_response(error: HatpError) -> JSONResponse:
    """Return ``error`` as an HTTP response: :func:`error_body` with :func:`status_of`
    (a ``METHOD_NOT_ALLOWED`` also with the ``Allow`` header its ``data.allowed`` names)."""
    headers = None
    if isinstance(error, MethodNotAllowed):
        headers = {"Allow": ", ".join(str(m) for m in error.data.get("allowed", ()))}
    return JSONResponse(error_body(error), status_code=status_of(error), headers=headers)


async def handle_hatp_error(request: Request, exc: Exception) -> Response:
    """A Starlette exception handler: ``Starlette(exception_handlers={HatpError:
    handle_hatp_error})`` answers every hatp error a route raises with :func:`error_response`.

    Raises:
        Exception: ``exc`` again, if it is not a hatp error.
    """
    if not isinstance(exc, HatpError):
        raise exc
    return error_response(exc)
