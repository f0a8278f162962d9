"""hatp errors over HTTP: the one status table, and the JSON body."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from hatp.errors import (
    LEASE_REASONS,
    LINK_REASONS,
    RESPONSE_REASONS,
    HatpError,
    InvalidJson,
    LeaseRefused,
    LeaseRequired,
    RecordInvalid,
    RecoveryRefused,
    error_from_dict,
)
from hatp.http import (
    DEFAULT_STATUS,
    HTTP_STATUS,
    PTCL_STALE_FENCE,
    error_body,
    error_response,
    handle_hatp_error,
    status_of,
)

#: The codes of leases and their carriage, and the status each travels with.
LEASE_CODES = {
    "LEASE_REQUIRED": 428,
    "MUTATION_INVALID": 422,
    "RESOURCE_UNKNOWN": 404,
    "LEASE_UNKNOWN": 404,
    "LEASE_UNAVAILABLE": 422,
    "RECOVERY_REFUSED": 409,
    "INVALID_JSON": 400,
    "HEADER_INVALID": 400,
    "UNAUTHENTICATED": 401,
    "STORE_UNAVAILABLE": 503,
}
LEASE_REFUSED_STATUS = {
    "MONOTONIC_CAS_FENCING": 409,
    "SHAPE": 400,
    "RECOVERY_WINDOW_INEQUALITY": 412,
}


def _codes() -> dict[str, type[HatpError]]:
    found: dict[str, type[HatpError]] = {}
    todo = [HatpError]
    while todo:
        cls = todo.pop()
        found[cls.code] = cls
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("reason", sorted(LEASE_REASONS))
def test_every_lease_refused_reason_has_its_status(reason: str) -> None:
    """[HTTP-STATUS] named in the table; 409, 400 and 412 where the spec says, else 403."""
    assert ("LEASE_REFUSED", reason) in HTTP_STATUS
    error = LeaseRefused("refused", reason=reason, rule="LEASE-X", receipt={})
    assert status_of(error) == LEASE_REFUSED_STATUS.get(reason, 403)


@pytest.mark.parametrize(("code", "status"), sorted(LEASE_CODES.items()))
def test_every_lease_related_code_has_its_status(code: str, status: int) -> None:
    """[HTTP-STATUS] each code exists in the error tree and travels with its status."""
    cls = _codes()[code]
    assert (code, None) in HTTP_STATUS
    assert status_of(cls("boom", reason="ANY")) == status


def test_the_table_names_only_codes_that_exist() -> None:
    codes = _codes()
    for code, reason in HTTP_STATUS:
        assert code in codes
        reasons = {"LEASE_REFUSED": LEASE_REASONS, "LINK_REFUSED": LINK_REASONS}
        assert reason is None or reason in reasons.get(code, RESPONSE_REASONS)


def test_a_lease_refusal_for_a_reason_not_yet_known_is_403() -> None:
    assert status_of(LeaseRefused("m", reason="FROM_THE_FUTURE")) == 403
    assert status_of(LeaseRefused("m")) == 403


def test_any_other_hatp_error_is_400() -> None:
    assert status_of(RecordInvalid("not a record")) == DEFAULT_STATUS == 400
    assert status_of(HatpError("m")) == 400


def test_the_body_is_the_error_wire_form_and_comes_back_typed() -> None:
    error = RecoveryRefused("moved", reason="MOVED", lease_id="lease-abcdefgh")
    response = error_response(error)
    assert response.status_code == 409
    assert response.media_type == "application/json"
    body = json.loads(response.body)
    assert body == error.to_dict()
    back = error_from_dict(body)
    assert type(back) is RecoveryRefused and back.to_dict() == error.to_dict()


def test_only_a_stale_fence_names_the_ptcl_error() -> None:
    """[HTTP-STATUS] "ptcl": "ERR_STALE_FENCE_EPOCH" beside the wire form, for that reason only."""
    stale = LeaseRefused("stale", reason="MONOTONIC_CAS_FENCING", rule="LEASE-FENCE", receipt={})
    assert error_body(stale) == {**stale.to_dict(), "ptcl": PTCL_STALE_FENCE}
    assert "ptcl" not in error_body(LeaseRefused("bad", reason="SHAPE"))
    assert error_from_dict(error_body(stale)).to_dict() == stale.to_dict()


def test_the_exception_handler_answers_hatp_errors_and_re_raises_others() -> None:
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": []})
    response = asyncio.run(handle_hatp_error(request, LeaseRequired("no lease")))
    assert response.status_code == 428
    with pytest.raises(ValueError, match="not ours"):
        asyncio.run(handle_hatp_error(request, ValueError("not ours")))
    assert status_of(InvalidJson("bad", where="/x")) == 400
