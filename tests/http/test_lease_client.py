"""``LeaseClient`` against servers that misbehave: it trusts nothing it cannot check.

A scripted server (``httpx2.MockTransport``) hands back forged, tampered or
mismatched leases and receipts; each is refused ``EVIDENCE_INVALID`` with
the reason of the check that caught it. No answer is ``PEER_UNAVAILABLE``,
for every transport error httpx2 raises.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx2
import pytest

from hatp.clock import ManualClock
from hatp.errors import (
    EvidenceInvalid,
    HatpError,
    LeaseRefused,
    PeerIncompatible,
    PeerUnavailable,
)
from hatp.evidence import Keyring, SigningKey, canonicalize, digest, sign
from hatp.http import FENCE_HEADER, LEASE_HEADER, RECEIPT_HEADER, LeaseClient, encode_header
from hatp.lease import LeaseBinding, RecoveryMode, grant
from hatp.version import PROTOCOL_VERSION

T = TypeVar("T")

START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
BASE = "http://tickets.test"
ISSUER = "https://tickets.example"
RESOURCE = "ticket/4711"
STATE = {"id": 4711, "status": "open", "assignee": "dana"}
CLOSE = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
REOPEN = {"action": "tickets.update", "params": {"id": 4711, "status": "open"}}
MODE = RecoveryMode.COMPENSATING_ACTION
KEY = SigningKey.from_seed(bytes([61]) * 32, "tickets-1")
CRM = SigningKey.from_seed(bytes([62]) * 32, "crm-1")
OUTSIDER = SigningKey.from_seed(bytes([63]) * 32, "tickets-1")  # same kid, unknown key
KEYRING = Keyring([(KEY.public, ISSUER), (CRM.public, "https://crm.example")],
                  trusted_issuers=[ISSUER, "https://crm.example"])  # fmt: skip

Handler = Callable[[httpx2.Request], httpx2.Response]


def _lease(
    *,
    key: SigningKey = KEY,
    issuer: str = ISSUER,
    resource: str = RESOURCE,
    mutation: dict[str, Any] = CLOSE,
    binding: LeaseBinding | None = None,
) -> dict[str, Any]:
    return grant(
        resource=resource,
        state=STATE,
        epoch=7,
        mutation=mutation,
        t_req_ms=60_000,
        mode=MODE,
        inverse=REOPEN,
        key=key,
        issuer=issuer,
        clock=ManualClock(START),
        max_window_ms=600_000,
        binding=binding,
    )


LEASE = _lease()


def _commit(lease: dict[str, Any] = LEASE, key: SigningKey = KEY, **changes: Any) -> dict[str, Any]:
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "lease-commit",
        "leaseId": lease["leaseId"],
        "leaseDigest": digest(lease),
        "resource": lease["resource"],
        "mutationDigest": lease["mutationDigest"],
        "epoch": lease["casFenceEpoch"],
        "preImageStateHash": lease["preImageStateHash"],
        "postImageStateHash": digest({**STATE, "status": "closed"}),
        "binding": None,
        "at": "2026-12-02T09:00:01.000Z",
        "issuer": ISSUER,
        **changes,
    }
    return sign(body, key)


def _recovery(lease_id: str = LEASE["leaseId"], **changes: Any) -> dict[str, Any]:
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "lease-recovery",
        "leaseId": lease_id,
        "leaseDigest": digest(LEASE),
        "resource": RESOURCE,
        "recoveryMode": "HUMAN_ESCROW",
        "outcome": "escrowed",
        "epoch": 8,
        "restoredStateHash": None,
        "by": None,
        "at": "2026-12-02T09:00:02.000Z",
        "issuer": ISSUER,
        **changes,
    }
    return sign(body, KEY)


def _run(handler: Handler, body: Callable[[LeaseClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with (
            httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as http,
            LeaseClient(BASE, keyring=KEYRING, client=http) as leases,
        ):
            return await asyncio.wait_for(body(leases), 30)

    return asyncio.run(go())


def _granting(doc: Any, *, raw: bytes | None = None) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        content = raw if raw is not None else canonicalize(doc)
        return httpx2.Response(201, content=content)

    return handler


def _refused_grant(handler: Handler, **asked: Any) -> EvidenceInvalid:
    ask = {"resource": RESOURCE, "mutation": CLOSE, "mode": MODE, "binding": None, **asked}

    async def body(leases: LeaseClient) -> EvidenceInvalid:
        with pytest.raises(EvidenceInvalid) as caught:
            await leases.grant(
                ask["resource"],
                ask["mutation"],
                t_req_ms=60_000,
                mode=ask["mode"],
                binding=ask["binding"],
            )
        return caught.value

    return _run(handler, body)


def _tampered() -> dict[str, Any]:
    doc = copy.deepcopy(LEASE)
    doc["tGrantedMs"] = 600_000
    return doc


def _unsigned() -> dict[str, Any]:
    return {k: v for k, v in LEASE.items() if k != "signature"}


@pytest.mark.parametrize(
    ("lease", "reason"),
    [
        (_lease(key=OUTSIDER), "SIGNATURE"),  # a key the keyring does not hold
        (_tampered(), "SIGNATURE"),
        (_unsigned(), "SIGNATURE"),
        (_lease(key=CRM), "SIGNATURE"),  # a trusted key, of another system of record
        ({**LEASE, "kind": "lease-commit"}, "SHAPE"),
        ({"hatpVersion": PROTOCOL_VERSION}, "SHAPE"),
        ({**LEASE, "hatpVersion": "9.9"}, "SHAPE"),
        (_lease(resource="ticket/4712"), "MISMATCH"),
        (_lease(mutation={**CLOSE, "params": {"id": 4711, "status": "pending"}}), "MISMATCH"),
        (_lease(binding=LeaseBinding(txn_id="t-1", plan_digest=digest({}))), "MISMATCH"),
    ],
    ids=[
        "forged",
        "tampered",
        "unsigned",
        "other-issuer",
        "other-kind",
        "not-a-lease",
        "unknown-version",
        "other-resource",
        "other-mutation",
        "bound",
    ],
)
def test_a_granted_lease_that_does_not_check_out_is_refused(
    lease: dict[str, Any], reason: str
) -> None:
    """[HTTP-CLIENT] grant returns only a verified CompensationLease for what was asked."""
    refused = _refused_grant(_granting(lease))
    assert (refused.reason, refused.data["what"]) == (reason, "lease")


def test_a_lease_of_another_mode_than_asked_is_refused() -> None:
    refused = _refused_grant(_granting(LEASE), mode=RecoveryMode.SNAPSHOT_RESTORE)
    assert refused.reason == "MISMATCH"
    assert "recoveryMode" in refused.message


def test_a_lease_unbound_where_a_binding_was_asked_is_refused() -> None:
    binding = LeaseBinding(txn_id="t-1", plan_digest=digest({}))
    assert _refused_grant(_granting(LEASE), binding=binding).reason == "MISMATCH"


@pytest.mark.parametrize("raw", [b"not json", b"[1]", b'{"a": 1, "a": 2}'])
def test_a_grant_answer_that_is_not_a_json_object_is_refused(raw: bytes) -> None:
    assert _refused_grant(_granting(None, raw=raw)).reason == "ENCODING"


def test_a_lease_that_checks_out_is_returned_as_signed() -> None:
    async def body(leases: LeaseClient) -> dict[str, Any]:
        return await leases.grant(RESOURCE, CLOSE, t_req_ms=60_000, mode=MODE)

    assert _run(_granting(LEASE), body) == LEASE


def _answering(receipt_header: str | None, seen: list[httpx2.Request] | None = None) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen.append(request)
        headers = {} if receipt_header is None else {RECEIPT_HEADER: receipt_header}
        return httpx2.Response(200, json={"ok": True}, headers=headers)

    return handler


def _padded(doc: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(canonicalize(doc)).decode()


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "MISSING"),
        ("not base64url!", "ENCODING"),
        (_padded(_commit()), "ENCODING"),
        (encode_header({"x": 1}), "SHAPE"),
        (encode_header(_recovery()), "SHAPE"),  # a receipt, but not of a commit
        (encode_header(_commit(key=OUTSIDER)), "SIGNATURE"),
        (encode_header({**_commit(), "epoch": 9}), "SIGNATURE"),
        (encode_header(_commit(_lease(resource="ticket/4712"))), "MISMATCH"),
        (encode_header(_commit(leaseDigest=digest({}))), "MISMATCH"),
        (encode_header(_commit(mutationDigest=digest({}))), "MISMATCH"),
    ],
    ids=[
        "missing",
        "garbage",
        "padded",
        "not-a-receipt",
        "recovery-receipt",
        "forged",
        "tampered",
        "other-lease",
        "other-lease-digest",
        "other-mutation",
    ],
)
def test_a_success_without_a_good_commit_receipt_is_refused(
    header: str | None, reason: str
) -> None:
    """[HTTP-CLIENT] a 2xx is accepted only with a verified receipt of this very lease."""

    async def body(leases: LeaseClient) -> EvidenceInvalid:
        with pytest.raises(EvidenceInvalid) as caught:
            await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=LEASE)
        return caught.value

    refused = _run(_answering(header), body)
    assert (refused.reason, refused.data["what"]) == (reason, "commit receipt")
    assert "the mutation may have run" in refused.message


def test_send_carries_the_lease_and_its_fence_in_the_ptcl_headers() -> None:
    """[HTTP-CLIENT] Agent-Compensation-Lease: base64url of the canonical lease;
    Agent-Fence-Token: its casFenceEpoch, unless the writer names another."""
    seen: list[httpx2.Request] = []

    async def body(leases: LeaseClient) -> Any:
        sent = await leases.send("PUT", "/tickets/4711", json={"status": "closed"}, lease=LEASE)
        await leases.send("PUT", "/tickets/4711", lease=LEASE, fence_token=3)
        return sent

    sent = _run(_answering(encode_header(_commit()), seen), body)
    assert seen[0].headers[LEASE_HEADER] == encode_header(LEASE)
    assert seen[0].headers[FENCE_HEADER] == str(LEASE["casFenceEpoch"]) == "8"
    assert seen[1].headers[FENCE_HEADER] == "3"
    assert seen[0].method == "PUT"
    assert str(seen[0].url) == BASE + "/tickets/4711"
    assert sent.receipt == _commit()
    assert sent.commit.epoch == 8
    assert sent.response.json() == {"ok": True}


def _status(status: int, content: bytes) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=content)

    return handler


def _error_of(handler: Handler) -> HatpError:
    async def body(leases: LeaseClient) -> HatpError:
        with pytest.raises(HatpError) as caught:
            await leases.send("PATCH", "/tickets/4711", lease=LEASE)
        return caught.value

    return _run(handler, body)


def test_an_error_body_comes_back_as_the_typed_error() -> None:
    """[HTTP-CLIENT] rebuilt with error_from_dict; the ptcl member is not part of it."""
    wire = {
        "code": "LEASE_REFUSED",
        "message": "stale",
        "data": {"reason": "MONOTONIC_CAS_FENCING", "rule": "LEASE-FENCE", "receipt": {}},
        "ptcl": "ERR_STALE_FENCE_EPOCH",
    }
    error = _error_of(_status(409, canonicalize(wire)))
    assert isinstance(error, LeaseRefused)
    assert error.reason == "MONOTONIC_CAS_FENCING"


@pytest.mark.parametrize(
    ("status", "content", "cls"),
    [
        (404, b"Not Found", PeerIncompatible),
        (405, b"", PeerIncompatible),
        (307, b"", PeerIncompatible),
        (500, b"Internal Server Error", PeerUnavailable),
        (502, b'{"code": 5}', PeerUnavailable),
        (400, b'{"code":"INVALID_JSON","message":"m","data":{"message":"x"}}', PeerIncompatible),
    ],
)  # fmt: skip
def test_an_error_without_a_hatp_body_is_no_refusal(
    status: int, content: bytes, cls: type[HatpError]
) -> None:
    """[HTTP-CLIENT] 5xx: no answer, it may have run (PEER_UNAVAILABLE); else PEER_INCOMPATIBLE."""
    error = _error_of(_status(status, content))
    assert type(error) is cls
    assert error.data["status"] == status


def _request_errors() -> list[type[httpx2.RequestError]]:
    found: list[type[httpx2.RequestError]] = []
    todo = [httpx2.RequestError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("error", _request_errors(), ids=lambda c: c.__name__)
def test_every_transport_error_is_peer_unavailable(error: type[httpx2.RequestError]) -> None:
    """[HTTP-CLIENT] every httpx2 request error is mapped at the boundary."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        raise error("the line went dead", request=request)

    for call in (
        lambda leases: leases.grant(RESOURCE, CLOSE, t_req_ms=1, mode=MODE),
        lambda leases: leases.send("PATCH", "/tickets/4711", lease=LEASE),
        lambda leases: leases.recover(LEASE["leaseId"]),
        lambda leases: leases.lease(LEASE["leaseId"]),
    ):

        async def body(leases: LeaseClient, call: Any = call) -> PeerUnavailable:
            with pytest.raises(PeerUnavailable) as caught:
                await call(leases)
            return caught.value

        unavailable = _run(handler, body)
        assert unavailable.data["server"] == BASE
        assert isinstance(unavailable.__cause__, error)


def _json(doc: Any) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=canonicalize(doc))

    return handler


CASE = {
    "leaseId": LEASE["leaseId"],
    "resource": RESOURCE,
    "address": "human://tickets.example/role/support-lead",
    "instructions": "Reopen it.",
    "preImageStateHash": digest(STATE),
    "preImage": STATE,
}


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"receipt": _recovery("lease-someotherone"), "case": None}, "MISMATCH"),
        ({"receipt": _commit(), "case": None}, "SHAPE"),
        ({"receipt": "x", "case": None}, "SHAPE"),
        ({"case": None}, "SHAPE"),
        ({"receipt": {**_recovery(), "by": "human://x/y"}, "case": None}, "SIGNATURE"),
        ({"receipt": _recovery(), "case": {**CASE, "leaseId": "lease-someotherone"}}, "MISMATCH"),
        ({"receipt": _recovery(), "case": {**CASE, "preImage": "x"}}, "SHAPE"),
        ({"receipt": _recovery(), "case": {**CASE, "extra": 1}}, "SHAPE"),
    ],
    ids=[
        "other-lease",
        "commit-receipt",
        "not-an-object",
        "no-receipt",
        "tampered",
        "case-of-another-lease",
        "case-bad-pre-image",
        "case-extra-member",
    ],
)
def test_a_recovery_answer_that_does_not_check_out_is_refused(doc: Any, reason: str) -> None:
    """[HTTP-CLIENT] recover returns only a verified receipt and case of this lease."""

    async def body(leases: LeaseClient) -> EvidenceInvalid:
        with pytest.raises(EvidenceInvalid) as caught:
            await leases.recover(LEASE["leaseId"])
        return caught.value

    assert _run(_json(doc), body).reason == reason


def test_a_recovery_answer_that_checks_out_gives_the_case() -> None:
    async def body(leases: LeaseClient) -> Any:
        return await leases.recover(LEASE["leaseId"])

    recovered = _run(_json({"receipt": _recovery(), "case": CASE, "replayed": True}), body)
    assert recovered.replayed is True
    assert recovered.case is not None
    assert (recovered.case.address, recovered.case.pre_image) == (CASE["address"], STATE)


@pytest.mark.parametrize(
    "doc",
    [
        {"leaseId": LEASE["leaseId"], "commitReceipt": _commit(key=OUTSIDER)},
        {"leaseId": LEASE["leaseId"], "commitReceipt": _commit(_lease(resource="ticket/1"))},
        {"leaseId": LEASE["leaseId"], "recoveryReceipt": _commit()},
    ],
    ids=["forged-commit", "commit-of-another-lease", "commit-as-recovery"],
)
def test_a_lease_status_with_a_bad_receipt_is_refused(doc: dict[str, Any]) -> None:
    async def body(leases: LeaseClient) -> EvidenceInvalid:
        with pytest.raises(EvidenceInvalid) as caught:
            await leases.lease(LEASE["leaseId"])
        return caught.value

    assert _run(_json(doc), body).reason in {"SIGNATURE", "MISMATCH", "SHAPE"}


def test_a_client_handed_in_is_left_open() -> None:
    async def go() -> bool:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(_json({}))) as http:
            async with LeaseClient(BASE, keyring=KEYRING, client=http):
                pass
            return http.is_closed

    assert asyncio.run(go()) is False
