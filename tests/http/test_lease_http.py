"""Leases over HTTP: a guarded ticket API and its lease routes, on SQLite and PostgreSQL.

Every exchange goes through the ASGI stack in process (``httpx2.ASGITransport``);
``test_lease_uvicorn.py`` repeats the happy path over a real server.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx2
import pytest

from hatp.demo._tickets import touch
from hatp.errors import (
    EvidenceInvalid,
    HatpError,
    LeaseRefused,
    LeaseUnknown,
    PeerIncompatible,
    RecoveryRefused,
    Unauthenticated,
)
from hatp.evidence import canonicalize, digest, digest_bytes
from hatp.http import (
    FENCE_HEADER,
    LEASE_HEADER,
    PTCL_STALE_FENCE,
    RECEIPT_HEADER,
    LeaseClient,
    decode_header,
    encode_header,
)
from hatp.lease import (
    LEASE_MEDIA_TYPE,
    LeaseCommit,
    LeaseRecovery,
    RecoveryMode,
    RecoveryOutcome,
    verify_receipt,
    verify_rejection,
)

COMP = RecoveryMode.COMPENSATING_ACTION


async def _grant(leases: LeaseClient, tickets: Any, mode: RecoveryMode = COMP) -> dict[str, Any]:
    return await leases.grant(tickets.RESOURCE, tickets.CLOSE, t_req_ms=60_000, mode=mode)


def _headers(lease: dict[str, Any], **extra: str) -> dict[str, str]:
    return {LEASE_HEADER: encode_header(lease), **extra}


def test_a_leased_mutation_is_applied_and_its_receipt_verifies_offline(tickets: Any) -> None:
    """[HTTP-LEASE-GUARD] [HTTP-RECEIPT] the receipt header is the signed commit receipt."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        sent = await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        return lease, sent, await leases.lease(lease["leaseId"])

    lease, sent, kept = tickets.run(body)
    assert sent.response.status_code == 200
    assert sent.response.json()["ticket"]["status"] == "closed"
    # Offline: only the header's bytes and the public keys.
    header = sent.response.headers[RECEIPT_HEADER]
    receipt = verify_receipt(decode_header_json(header), tickets.keyring)
    assert isinstance(receipt, LeaseCommit)
    assert receipt.lease_id == lease["leaseId"]
    assert receipt.lease_digest == digest(lease)
    assert receipt.epoch == lease["casFenceEpoch"]
    assert sent.receipt == decode_header_json(header)
    assert kept["status"] == "applied"
    assert kept["commitReceipt"] == sent.receipt
    state, epoch = tickets.state()
    assert (state["status"], epoch) == ("closed", lease["casFenceEpoch"])
    assert receipt.post_image_state_hash == digest(state)


def decode_header_json(value: str) -> dict[str, Any]:
    raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    doc: dict[str, Any] = json.loads(raw)
    assert canonicalize(doc) == raw  # the header carries the canonical form
    return doc


@pytest.mark.parametrize("value", [None, "", "  "], ids=["absent", "empty", "blank"])
def test_a_mutation_without_a_lease_is_428_and_the_app_never_runs(
    tickets: Any, value: str | None
) -> None:
    """[HTTP-LEASE-REQUIRED] no lease: 428 LEASE_REQUIRED, the row untouched."""
    before = tickets.state()
    headers = {} if value is None else {LEASE_HEADER: value}

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        return await http.patch("/tickets/4711", json={"status": "closed"}, headers=headers)

    answer = tickets.run(body)
    assert answer.status_code == 428
    assert answer.json()["code"] == "LEASE_REQUIRED"
    assert answer.json()["data"] == {"header": LEASE_HEADER}
    assert RECEIPT_HEADER not in answer.headers
    assert tickets.ran == []
    assert tickets.state() == before


def test_a_stale_writer_gets_409_err_stale_fence_epoch_with_a_signed_receipt(tickets: Any) -> None:
    """[HTTP-STATUS] two leases fenced at one epoch: the second writer is 409
    ERR_STALE_FENCE_EPOCH, and the client raises the same typed refusal."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        first, second = await _grant(leases, tickets), await _grant(leases, tickets)
        assert first["casFenceEpoch"] == second["casFenceEpoch"]
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=first)
        raw = await http.patch(
            "/tickets/4711",
            json={"status": "closed"},
            headers=_headers(second, **{FENCE_HEADER: str(second["casFenceEpoch"])}),
        )
        with pytest.raises(LeaseRefused) as caught:
            await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=second)
        return second, raw, caught.value

    second, raw, refused = tickets.run(body)
    assert raw.status_code == 409
    doc = raw.json()
    assert doc["ptcl"] == PTCL_STALE_FENCE == "ERR_STALE_FENCE_EPOCH"
    assert (doc["code"], doc["data"]["reason"]) == ("LEASE_REFUSED", "MONOTONIC_CAS_FENCING")
    assert doc["data"]["rule"] == "LEASE-FENCE"
    rejection = verify_rejection(doc["data"]["receipt"], tickets.keyring)
    assert rejection.lease_id == second["leaseId"]
    assert rejection.lease_digest == digest(second)
    assert refused.reason == "MONOTONIC_CAS_FENCING"
    verify_rejection(refused.data["receipt"], tickets.keyring)
    assert RECEIPT_HEADER not in raw.headers
    assert tickets.state()[1] == second["casFenceEpoch"]  # only the first writer moved it


def test_writers_racing_with_leases_of_one_epoch_have_exactly_one_winner(tickets: Any) -> None:
    """[HTTP-LEASE-GUARD] four concurrent PATCHes through the guard: one 200, three 409."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> list[httpx2.Response]:
        granted = [await _grant(leases, tickets) for _ in range(4)]
        sends = [
            http.patch("/tickets/4711", json={"status": "closed"}, headers=_headers(lease))
            for lease in granted
        ]
        return list(await asyncio.gather(*sends))

    answers = tickets.run(body)
    assert sorted(a.status_code for a in answers) == [200, 409, 409, 409]
    winner = next(a for a in answers if a.status_code == 200)
    assert verify_receipt(decode_header_json(winner.headers[RECEIPT_HEADER]), tickets.keyring)
    assert all(a.json()["ptcl"] == PTCL_STALE_FENCE for a in answers if a.status_code == 409)


@pytest.mark.parametrize(
    ("value", "received"),
    [
        ("not a lease!", b"not a lease!"),
        ("e30=", b"e30="),  # padded base64url is not the header's form: the bytes as sent
        (
            base64.urlsafe_b64encode(b"\xff\xfe not json").rstrip(b"=").decode(),
            b"\xff\xfe not json",
        ),
        (base64.urlsafe_b64encode(b"[1, 2]").rstrip(b"=").decode(), b"[1, 2]"),
    ],
    ids=["not-base64url", "padded", "not-json", "not-an-object"],
)
def test_a_header_that_is_no_lease_is_400_lease_shape_with_a_receipt(
    tickets: Any, value: str, received: bytes
) -> None:
    """[HTTP-LEASE-HEADER] undecodable or not a lease: 400 LEASE-SHAPE, signed receipt
    naming the bytes received; the row untouched."""
    before = tickets.state()

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        return await http.patch(
            "/tickets/4711", json={"status": "closed"}, headers={LEASE_HEADER: value}
        )

    answer = tickets.run(body)
    assert answer.status_code == 400
    doc = answer.json()
    assert (doc["code"], doc["data"]["reason"], doc["data"]["rule"]) == (
        "LEASE_REFUSED",
        "SHAPE",
        "LEASE-SHAPE",
    )
    assert "ptcl" not in doc
    rejection = verify_rejection(doc["data"]["receipt"], tickets.keyring)
    if received[:1] == b"[":
        assert rejection.lease_digest == digest([1, 2])
    else:
        assert rejection.lease_digest == digest_bytes(received)
    assert rejection.lease_id is None
    assert tickets.state() == before
    assert tickets.sor.rejections(tickets.RESOURCE)[-1] == doc["data"]["receipt"]


@pytest.mark.parametrize("token", ["eight", "-8", "+8", "08", "8.0", "0x8", "", "9" * 20, "8, 8"])
def test_a_malformed_fence_token_is_400_header_invalid_and_nothing_runs(
    tickets: Any, token: str
) -> None:
    """[HTTP-FENCE-TOKEN] not one decimal integer: 400 HEADER_INVALID; the app never runs."""
    before = tickets.state()

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        lease = await _grant(leases, tickets)
        headers = _headers(lease, **{FENCE_HEADER: token})
        return await http.patch("/tickets/4711", json={"status": "closed"}, headers=headers)

    answer = tickets.run(body)
    assert answer.status_code == 400
    assert answer.json()["code"] == "HEADER_INVALID"
    assert answer.json()["data"] == {"header": FENCE_HEADER}
    assert tickets.ran == []
    assert tickets.state() == before


def test_a_fence_token_sent_twice_is_malformed(tickets: Any) -> None:
    """[HTTP-FENCE-TOKEN] two header lines are one value, joined by a comma: refused."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        lease = await _grant(leases, tickets)
        token = str(lease["casFenceEpoch"])
        headers = [
            (LEASE_HEADER, encode_header(lease)),
            (FENCE_HEADER, token),
            (FENCE_HEADER, token),
        ]
        return await http.patch("/tickets/4711", json={"status": "closed"}, headers=headers)

    assert tickets.run(body).json()["code"] == "HEADER_INVALID"
    assert tickets.ran == []


def test_a_fence_token_other_than_the_leases_fence_is_409(tickets: Any) -> None:
    """[HTTP-FENCE-TOKEN] a well-formed token that is not casFenceEpoch: LEASE-FENCE, 409."""
    before = tickets.state()

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        with pytest.raises(LeaseRefused) as caught:
            await leases.send(
                "PATCH",
                "/tickets/4711",
                json={"status": "closed"},
                lease=lease,
                fence_token=lease["casFenceEpoch"] + 1,
            )
        raw = await http.patch(
            "/tickets/4711",
            json={"status": "closed"},
            headers=_headers(lease, **{FENCE_HEADER: "0"}),
        )
        return caught.value, raw

    refused, raw = tickets.run(body)
    assert (refused.reason, refused.data["rule"]) == ("MONOTONIC_CAS_FENCING", "LEASE-FENCE")
    assert "fence token" in refused.message
    assert raw.status_code == 409
    assert raw.json()["ptcl"] == PTCL_STALE_FENCE
    verify_rejection(raw.json()["data"]["receipt"], tickets.keyring)
    assert tickets.state() == before


def test_a_retry_with_the_same_lease_gets_the_same_receipt_and_writes_nothing(
    tickets: Any,
) -> None:
    """[HTTP-RECEIPT] a replay is answered 200 with the stored receipt, byte for byte."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        first = await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        after_first = tickets.state()
        again = await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        return first, again, after_first

    first, again, after_first = tickets.run(body)
    assert again.response.headers[RECEIPT_HEADER] == first.response.headers[RECEIPT_HEADER]
    assert again.receipt == first.receipt
    assert (first.response.json()["replayed"], again.response.json()["replayed"]) == (False, True)
    assert tickets.state() == after_first


def test_a_lease_for_another_mutation_is_refused_403(tickets: Any) -> None:
    """[HTTP-STATUS] LEASE-DIGEST: a lease for closing the ticket does not reassign it."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        raw = await http.patch(
            "/tickets/4711", json={"assignee": "mallory"}, headers=_headers(lease)
        )
        return raw

    raw = tickets.run(body)
    assert raw.status_code == 403
    assert raw.json()["data"]["reason"] == "DIGEST_MISMATCH"


def test_an_expired_lease_is_412(tickets: Any) -> None:
    """[HTTP-STATUS] LEASE-WINDOW (RECOVERY_WINDOW_INEQUALITY) travels as 412."""

    async def body(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        tickets.clock.advance(120)
        with pytest.raises(LeaseRefused) as caught:
            await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        raw = await http.patch("/tickets/4711", json={"status": "closed"}, headers=_headers(lease))
        return caught.value, raw

    refused, raw = tickets.run(body)
    assert refused.reason == "RECOVERY_WINDOW_INEQUALITY"
    assert raw.status_code == 412


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"extra": 1}, "/extra"),
        ({"tReqMs": "60000"}, "/tReqMs"),
        ({"tReqMs": True}, "/tReqMs"),
        ({"tReqMs": -1}, "/tReqMs"),
        ({"tReqMs": 1.5}, "/tReqMs"),
        ({"mode": "UNDO"}, "/mode"),
        ({"mode": None}, "/mode"),
        ({"resource": 4711}, "/resource"),
        ({"resource": "ticket 4711"}, "/resource"),
        ({"mutation": [1]}, "/mutation"),
        ({"binding": {"txnId": "t-1"}}, "/binding/planDigest"),
        ({"resource": None}, "/resource"),
    ],
)
def test_a_grant_body_that_is_not_the_form_is_400_naming_the_member(
    tickets: Any, body: dict[str, Any], where: str
) -> None:
    """[HTTP-LEASE-ROUTES] strict body: unknown members and wrong types are INVALID_JSON."""
    doc = {
        "resource": tickets.RESOURCE,
        "mutation": tickets.CLOSE,
        "tReqMs": 60_000,
        "mode": "SNAPSHOT_RESTORE",
    }
    doc.update(body)

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        return await http.post("/leases", json=doc)

    answer = tickets.run(run)
    assert answer.status_code == 400
    assert answer.json()["code"] == "INVALID_JSON"
    assert answer.json()["data"]["where"] == where
    assert where.split("/")[1] in answer.json()["message"]


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b'{"resource": "a", "resource": "b"}', b"[]", b"NaN"],
    ids=["empty", "truncated", "duplicate-key", "array", "nan"],
)
def test_a_grant_body_that_is_not_strict_json_is_400(tickets: Any, raw: bytes) -> None:
    """[HTTP-LEASE-ROUTES] the body is read by the strict JSON reader."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        return await http.post("/leases", content=raw, headers={"content-type": "application/json"})

    answer = tickets.run(run)
    assert (answer.status_code, answer.json()["code"]) == (400, "INVALID_JSON")


def _update(ticket: int, **params: Any) -> dict[str, Any]:
    return {"action": "tickets.update", "params": {"id": ticket, **params}}


@pytest.mark.parametrize(
    ("resource", "mutation", "status", "code"),
    [
        (
            "ticket/4711",
            {"action": "tickets.delete", "params": {"id": 4711}},
            422,
            "MUTATION_INVALID",
        ),
        ("ticket/4711", _update(4711, status="gone"), 422, "MUTATION_INVALID"),
        ("ticket/9999", _update(9999, status="closed"), 404, "RESOURCE_UNKNOWN"),
        (
            "ticket/4711",
            {"action": "tickets.clear_notes", "params": {"id": 4711}},
            422,
            "LEASE_UNAVAILABLE",
        ),
    ],
    ids=["unknown-action", "refused-params", "unknown-resource", "no-inverse"],
)
def test_a_grant_the_system_of_record_refuses_keeps_its_code_and_status(
    tickets: Any,
    resource: str,
    mutation: dict[str, Any],
    status: int,
    code: str,
) -> None:
    """[HTTP-STATUS] the client raises the same typed error the system of record raised."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        doc = {"resource": resource, "mutation": mutation, "tReqMs": 60_000, "mode": COMP.value}
        raw = await http.post("/leases", json=doc)
        with pytest.raises(HatpError) as caught:
            await leases.grant(resource, mutation, t_req_ms=60_000, mode=COMP)
        return raw, caught.value

    raw, error = tickets.run(run)
    assert (raw.status_code, raw.json()["code"]) == (status, code)
    assert error.code == code
    assert error.to_dict() == raw.json()


def test_a_granted_lease_is_201_of_the_lease_media_type(tickets: Any) -> None:
    """[HTTP-LEASE-ROUTES] POST /leases: 201, application/agent-tx-lease+json, Location."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        doc = {
            "resource": tickets.RESOURCE,
            "mutation": tickets.CLOSE,
            "tReqMs": 60_000,
            "mode": "SNAPSHOT_RESTORE",
            "binding": None,
        }
        return await http.post("/leases", json=doc)

    answer = tickets.run(run)
    assert answer.status_code == 201
    assert answer.headers["content-type"] == LEASE_MEDIA_TYPE
    lease = answer.json()
    assert answer.content == canonicalize(lease)
    assert answer.headers["location"] == f"/leases/{lease['leaseId']}"
    assert lease["recoveryMode"] == "SNAPSHOT_RESTORE"


@pytest.mark.parametrize("mode", [m for m in RecoveryMode if m is not RecoveryMode.HUMAN_ESCROW])
def test_recovery_over_http_restores_the_pre_image(tickets: Any, mode: RecoveryMode) -> None:
    """[HTTP-LEASE-ROUTES] POST /leases/{id}/recover: the state digests to preImageStateHash."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets, mode)
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        recovered = await leases.recover(lease["leaseId"])
        again = await leases.recover(lease["leaseId"])
        raw = await http.post(f"/leases/{lease['leaseId']}/recover", json={})
        return lease, recovered, again, raw, await leases.lease(lease["leaseId"])

    lease, recovered, again, raw, kept = tickets.run(run)
    assert recovered.outcome is RecoveryOutcome.RESTORED
    assert (recovered.replayed, again.replayed) == (False, True)
    assert recovered.case is None
    state, epoch = tickets.state()
    assert digest(state) == lease["preImageStateHash"] == recovered.receipt["restoredStateHash"]
    assert state == tickets.TICKET
    assert epoch == lease["casFenceEpoch"] + 1
    assert isinstance(verify_receipt(raw.json()["receipt"], tickets.keyring), LeaseRecovery)
    assert raw.json() == {"receipt": recovered.receipt, "case": None, "replayed": True}
    assert kept["status"] == "recovered"
    assert kept["recoveryReceipt"] == recovered.receipt


def test_an_unspent_lease_is_voided_and_then_refused(tickets: Any) -> None:
    """[HTTP-LEASE-ROUTES] recover before apply voids it; the guarded write is then 403."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        voided = await leases.recover(lease["leaseId"])
        with pytest.raises(LeaseRefused) as caught:
            await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        raw = await http.patch("/tickets/4711", json={"status": "closed"}, headers=_headers(lease))
        return voided, caught.value, raw

    voided, refused, raw = tickets.run(run)
    assert voided.outcome is RecoveryOutcome.VOIDED
    assert refused.reason == "NOT_GRANTED"
    assert raw.status_code == 403


def test_reading_or_recovering_an_unknown_lease_is_404(tickets: Any) -> None:
    """[HTTP-STATUS] LEASE_UNKNOWN travels as 404 and comes back typed."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        raw = await http.get("/leases/lease-nosuchlease")
        with pytest.raises(LeaseUnknown):
            await leases.lease("lease-nosuchlease")
        with pytest.raises(LeaseUnknown):
            await leases.recover("lease-nosuchlease")
        return raw

    raw = tickets.run(run)
    assert (raw.status_code, raw.json()["code"]) == (404, "LEASE_UNKNOWN")


def test_recovery_after_a_later_change_is_409_recovery_refused(tickets: Any) -> None:
    """[HTTP-STATUS] RECOVERY_REFUSED (MOVED) travels as 409; nothing is written."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        touch(tickets.store, 4711, notes="changed behind the lease")
        with pytest.raises(RecoveryRefused) as caught:
            await leases.recover(lease["leaseId"])
        return caught.value, await http.post(f"/leases/{lease['leaseId']}/recover", json={})

    refused, raw = tickets.run(run)
    assert refused.data["reason"] == "MOVED"
    assert raw.status_code == 409
    assert tickets.state()[0]["notes"] == "changed behind the lease"


def test_an_escrowed_lease_is_restored_by_the_authenticated_person(tickets: Any) -> None:
    """[HTTP-RESTORE] the person comes from authentication; no person: 401; the case is
    handed back by recover, its members in camelCase."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets, RecoveryMode.HUMAN_ESCROW)
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        escalated = await http.post(f"/leases/{lease['leaseId']}/recover", json={})
        path = f"/leases/{lease['leaseId']}/restore"
        pre_image = escalated.json()["case"]["preImage"]
        anonymous = await http.post(path, json={"state": pre_image})
        with pytest.raises(Unauthenticated):
            await leases.restore(lease["leaseId"], pre_image)
        forged = await http.post(
            path,
            json={"state": pre_image, "by": "human://x/boss"},
            headers={"authorization": "Person lee"},
        )
        restored = await http.post(
            path, json={"state": pre_image}, headers={"authorization": "Person lee"}
        )
        return lease, escalated, anonymous, forged, restored

    lease, escalated, anonymous, forged, restored = tickets.run(run, authenticate=_person)
    case = escalated.json()["case"]
    assert escalated.json()["receipt"]["outcome"] == "escrowed"
    assert case == {
        "leaseId": lease["leaseId"],
        "resource": tickets.RESOURCE,
        "address": "human://tickets.example/role/support-lead",
        "instructions": case["instructions"],
        "preImageStateHash": lease["preImageStateHash"],
        "preImage": tickets.TICKET,
    }
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "UNAUTHENTICATED")
    assert (forged.status_code, forged.json()["data"]["where"]) == (400, "/by")
    assert restored.status_code == 200
    receipt = verify_receipt(restored.json()["receipt"], tickets.keyring)
    assert isinstance(receipt, LeaseRecovery)
    assert (receipt.outcome, receipt.by) == (RecoveryOutcome.RESTORED, tickets.PERSON)
    assert tickets.state()[0] == tickets.TICKET


def test_the_client_restores_as_whoever_its_http_client_authenticates(tickets: Any) -> None:
    """[HTTP-RESTORE] ``LeaseClient.restore`` sends the client's own authentication
    (here a synchronous ``authenticate``)."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets, RecoveryMode.HUMAN_ESCROW)
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        escalated = await leases.recover(lease["leaseId"])
        assert escalated.case is not None
        http.headers["authorization"] = "Person lee"
        return escalated, await leases.restore(lease["leaseId"], escalated.case.pre_image)

    escalated, restored = tickets.run(run, authenticate=tickets.person)
    assert escalated.outcome is RecoveryOutcome.ESCROWED
    assert escalated.case is not None and escalated.case.pre_image == tickets.TICKET
    assert restored.outcome is RecoveryOutcome.RESTORED
    assert restored.receipt["by"] == tickets.PERSON


def test_without_authenticate_there_is_no_restore_route(tickets: Any) -> None:
    """[HTTP-RESTORE] nobody restores by hand over HTTP unless the app authenticates people."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets, RecoveryMode.HUMAN_ESCROW)
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
        await leases.recover(lease["leaseId"])
        raw = await http.post(f"/leases/{lease['leaseId']}/restore", json={"state": tickets.TICKET})
        with pytest.raises(PeerIncompatible):
            await leases.restore(lease["leaseId"], tickets.TICKET)
        return raw

    assert tickets.run(run).status_code == 404
    assert tickets.state()[0]["status"] == "closed"


async def _person(request: Any) -> str | None:
    """An asynchronous authentication: ``Authorization: Person lee`` is lee."""
    return (
        "human://tickets.example/lee"
        if request.headers.get("authorization") == "Person lee"
        else None
    )


def test_reads_and_unguarded_paths_pass_through_untouched(tickets: Any) -> None:
    """[HTTP-LEASE-GUARD] a GET of a guarded path needs no lease and gets no receipt."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> httpx2.Response:
        return await http.get("/tickets/4711")

    answer = tickets.run(run)
    assert answer.status_code == 200
    assert answer.json() == {"ticket": tickets.TICKET, "epoch": 0}
    assert RECEIPT_HEADER not in answer.headers
    assert tickets.ran == ["/tickets/4711"]


def test_a_guarded_route_that_hands_back_no_receipt_fails_the_client(tickets: Any) -> None:
    """[HTTP-CLIENT] a 2xx without Agent-Commit-Receipt is EVIDENCE_INVALID, MISSING."""

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await _grant(leases, tickets)
        with pytest.raises(EvidenceInvalid) as caught:
            await leases.send(
                "PATCH", "/tickets/4711/forgetful", json={"status": "closed"}, lease=lease
            )
        return caught.value, await leases.lease(lease["leaseId"])

    missing, kept = tickets.run(run)
    assert missing.reason == "MISSING"
    assert kept["status"] == "applied"  # it ran: the lease's record tells


def test_a_snapshot_lease_covers_a_mutation_without_an_inverse(tickets: Any) -> None:
    """[HTTP-LEASE-GUARD] POST is guarded too; SNAPSHOT_RESTORE puts the notes back."""
    clear = {"action": "tickets.clear_notes", "params": {"id": 4711}}

    async def run(http: httpx2.AsyncClient, leases: LeaseClient) -> Any:
        lease = await leases.grant(
            tickets.RESOURCE, clear, t_req_ms=1000, mode=RecoveryMode.SNAPSHOT_RESTORE
        )
        refused = await http.post("/tickets/4711/clear-notes")
        sent = await leases.send("POST", "/tickets/4711/clear-notes", lease=lease)
        cleared = tickets.state()[0]["notes"]
        await leases.recover(lease["leaseId"])
        return refused, sent, cleared

    refused, sent, cleared = tickets.run(run)
    assert refused.status_code == 428
    assert sent.response.status_code == 200
    assert cleared == ""
    assert tickets.state()[0]["notes"] == tickets.TICKET["notes"]


def test_decode_header_hands_the_verifier_the_received_bytes() -> None:
    """[HTTP-LEASE-HEADER] (the guard's decoding, seen directly)."""
    assert decode_header("not a lease!") == b"not a lease!"
    assert decode_header(encode_header({"a": 1})) == b'{"a":1}'
