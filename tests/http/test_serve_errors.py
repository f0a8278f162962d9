"""The status of every hatp error the gateway, the directory and the coordinator answer over
HTTP: one table (:data:`hatp.http.HTTP_STATUS`), each code named in it."""

from __future__ import annotations

from typing import Any

import pytest

from hatp.errors import RESPONSE_REASONS, HatpError, ResponseRefused, error_from_dict
from hatp.http import HTTP_STATUS, error_body, status_of
from serve_world import Served

#: Every code the JSON API's roles (and its carriage) refuse with, and its status.
ROLE_CODES = {
    "INVALID_JSON": 400,
    "BODY_TOO_LARGE": 413,
    "ASK_INVALID": 422,
    "ASK_UNKNOWN": 404,
    "ASK_CONFLICT": 409,
    "ASK_WITHDRAWN": 410,
    "QUESTION_INVALID": 422,
    "ANSWER_INVALID": 422,
    "CALL_INVALID": 422,
    "RESPONSE_REFUSED": 409,
    "PLAN_INVALID": 422,
    "REQUIREMENT_BELOW_TOTAL": 422,
    "ADDRESS_INVALID": 422,
    "VERSION_UNSUPPORTED": 422,
    "CARD_UNKNOWN": 404,
    "TXN_UNKNOWN": 404,
    "OUTCOME_CONFLICT": 409,
    "UNDO_REFUSED": 409,
    "STALE_FENCE": 409,
    "STORE_UNAVAILABLE": 503,
    "PASSKEY_INVALID": 422,
}
#: RESPONSE_REFUSED reasons whose status is not 409.
RESPONSE_STATUS = {"SHAPE": 422, "SIGNATURE": 403, "NOT_ASKED": 403, "PASSKEY": 403}


def _classes() -> dict[str, type[HatpError]]:
    found: dict[str, type[HatpError]] = {}
    todo = [HatpError]
    while todo:
        cls = todo.pop()
        found[cls.code] = cls
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize(("code", "status"), sorted(ROLE_CODES.items()))
def test_every_code_the_roles_raise_has_its_status(code: str, status: int) -> None:
    """[HTTP-STATUS] named in the table, not left to the default; the body rebuilds the
    same typed error."""
    cls = _classes()[code]
    assert (code, None) in HTTP_STATUS
    error = cls("refused", reason="ANY") if code != "PLAN_INVALID" else cls("SHAPE", "refused")
    assert status_of(error) == status
    rebuilt = error_from_dict(error_body(error))
    assert type(rebuilt) is cls and rebuilt.data == error.data


@pytest.mark.parametrize("reason", sorted(RESPONSE_REASONS))
def test_every_response_refused_reason_has_its_status(reason: str) -> None:
    """[HTTP-STATUS] a refused response: 422 for its shape, 403 for whose it is, else 409."""
    error = ResponseRefused("refused", reason=reason, rule="GW-X", ask_id="a", human="h")
    assert status_of(error) == RESPONSE_STATUS.get(reason, 409)


def test_every_refusal_an_operation_declares_is_in_the_table(serve: Any) -> None:
    """[HTTP-STATUS] each code an operation of the app says it answers is a code of the
    table above, so none travels with the default status."""
    served: Served = serve()
    for operation in served.app.state.hatp_operations:
        for code in operation.refusals:
            assert code in ROLE_CODES, (operation.path, code)
