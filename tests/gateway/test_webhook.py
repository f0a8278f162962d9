"""The webhook channel over a real HTTP stack: uvicorn on 127.0.0.1, a real socket.

The receiver records every request as it came (body and headers) and checks
it with :func:`verify_webhook`; it can be told to answer an error status, to
hang past the channel's timeout, or not to listen at all and then recover.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from gateway.routes import GATEWAY_ID, GATEWAY_KEY, START
from gateway.servers import BOUND, Got, Receiver, bound_socket, serving
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock, format_time
from hatp.errors import DELIVERY_REASONS, WEBHOOK_REASONS, DeliveryFailed, WebhookInvalid
from hatp.evidence import KeyPeriod, Keyring, SigningKey, canonicalize
from hatp.gateway import OutboxMessage, PushChannel, WebhookChannel, verify_webhook
from hatp.gateway import webhook_signature_base as signature_base

#: The switchable checks this module plants violations of, and the tests that do.
SWITCH_OFF_TESTS = {"WEBHOOK-FRESH": ("test_switched_off_a_webhook_replayed_later_is_taken",)}

ALICE = "human://acme.com/alice"
BOB = "human://acme.com/bob"


def notice_doc(notice_id: str = "ntc_0001", **members: Any) -> dict[str, Any]:
    """A notice document for alice, as the outbox builds it."""
    return {
        "hatpVersion": "0.1",
        "type": "hatp.notice",
        "noticeId": notice_id,
        "event": "ask",
        "gateway": GATEWAY_ID,
        "askId": "ask_0001",
        "txnId": "txn-gw-0001",
        "askKind": "approval",
        "human": ALICE,
        "createdAt": "2026-12-02T09:00:00.000Z",
        "decideBy": "2026-12-02T10:15:00.000Z",
        "text": "Approval asked: approve.spend\nYou approve spending:\n  1,000 USD\n",
        "approverUrl": "https://gateway.acme.com/approve/ask_0001",
        **members,
    }


def outbox(doc: dict[str, Any] | None = None, attempt: int = 1) -> OutboxMessage:
    return OutboxMessage(doc or notice_doc(), None, None, attempt)


def keyring(key: SigningKey = GATEWAY_KEY) -> Keyring:
    return Keyring([(key.public, GATEWAY_ID)], trusted_issuers=[GATEWAY_ID])


def verified(got: Got) -> dict[str, Any]:
    """The notice ``got`` holds, checked as a receiver with the gateway's key would."""
    return verify_webhook(got.body, got.headers, keyring(), now=START)


Body = Callable[[Receiver, socket.socket], Awaitable[Any]]


def run(body: Body, *, listen: bool = True) -> Any:
    """Run ``body`` with a receiver, serving it unless ``listen`` is false."""

    async def go() -> Any:
        receiver = Receiver()
        sock = bound_socket()
        receiver.port = sock.getsockname()[1]
        try:
            if not listen:
                return await asyncio.wait_for(body(receiver, sock), BOUND)
            async with serving(receiver, sock):
                return await asyncio.wait_for(body(receiver, sock), BOUND)
        finally:
            sock.close()

    return asyncio.run(go())


def channel(
    receiver: Receiver, *, timeout_seconds: float = 5.0, path: str = "/hook"
) -> WebhookChannel:
    return WebhookChannel(
        GATEWAY_KEY,
        GATEWAY_ID,
        {ALICE: receiver.url(path)},
        timeout_seconds=timeout_seconds,
        clock=ManualClock(START),
    )


async def failure(hook: WebhookChannel, message: OutboxMessage) -> DeliveryFailed:
    try:
        await hook.send(message)
    except DeliveryFailed as failed:
        return failed
    raise AssertionError("the notice was delivered")


# --- delivery ---------------------------------------------------------------------------


def test_a_delivered_notice_is_canonical_json_signed_by_the_gateway() -> None:
    """[WEBHOOK-SIGN] [WEBHOOK-VERIFY] The receiver verifies what it got with the gateway's key."""

    async def body(receiver: Receiver, _: socket.socket) -> list[Got]:
        hook = channel(receiver)
        try:
            await hook.send(outbox())
        finally:
            await hook.close()
        return receiver.got

    [got] = run(body)
    assert verified(got) == notice_doc()
    assert got.body == canonicalize(notice_doc())
    assert got.headers["content-type"] == "application/json"
    assert got.headers["hatp-notice-id"] == got.headers["idempotency-key"] == "ntc_0001"
    assert got.headers["hatp-timestamp"] == format_time(START)
    assert got.headers["hatp-key-id"] == GATEWAY_KEY.kid
    signature = got.headers["hatp-signature"]
    assert "=" not in signature
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    base = signature_base(got.headers["hatp-timestamp"], got.body)
    assert base.startswith(b"hatp-webhook-v1\n" + format_time(START).encode() + b"\n{")
    GATEWAY_KEY.public.verify_bytes(raw, base)
    # Header names are matched in any case.
    capitalised = {name.title(): value for name, value in got.headers.items()}
    assert verify_webhook(got.body, capitalised, keyring(), now=START) == notice_doc()


def test_the_channel_is_a_push_channel_that_reaches_only_people_with_a_url() -> None:
    hook = WebhookChannel(GATEWAY_KEY, GATEWAY_ID, {ALICE: "https://hooks.acme.com/alice"})
    try:
        assert isinstance(hook, PushChannel)
        assert hook.channel_type == "webhook"
        assert hook.reaches(ALICE) and not hook.reaches(BOB)
        failed = asyncio.run(failure(hook, outbox(notice_doc(human=BOB))))
    finally:
        asyncio.run(hook.close())
    assert (failed.reason, failed.data["retryable"]) == ("NO_ADDRESS", False)
    assert failed.data["noticeId"] == "ntc_0001" and failed.data["channel"] == "webhook"


@pytest.mark.parametrize(
    ("status", "reason", "retryable"),
    [
        (500, "SERVER_ERROR", True),
        (503, "SERVER_ERROR", True),
        (429, "SERVER_ERROR", True),
        (404, "REJECTED", False),
        (400, "REJECTED", False),
        (302, "REJECTED", False),
    ],
)
def test_what_the_receiver_answers_decides_whether_the_outbox_retries(
    status: int, reason: str, retryable: bool
) -> None:
    """[OUTBOX] 5xx and 429 are tried again; any other status, a redirect too, is not."""

    async def body(receiver: Receiver, _: socket.socket) -> tuple[DeliveryFailed, list[Got]]:
        receiver.answers = [status]
        hook = channel(receiver)
        try:
            return await failure(hook, outbox()), receiver.got
        finally:
            await hook.close()

    failed, got = run(body)
    assert (failed.code, failed.reason, failed.data["retryable"]) == (
        "DELIVERY_FAILED",
        reason,
        retryable,
    )
    assert failed.data == {
        "reason": reason,
        "retryable": retryable,
        "noticeId": "ntc_0001",
        "human": ALICE,
        "channel": "webhook",
        "status": status,
    }
    # Never followed: the redirect's target got nothing.
    assert [g.path for g in got] == ["/hook"]


def test_a_retried_notice_carries_the_same_notice_id_and_body() -> None:
    """[OUTBOX] The idempotency key is the same on every attempt; each attempt verifies."""

    async def body(receiver: Receiver, _: socket.socket) -> tuple[DeliveryFailed, list[Got]]:
        receiver.answers = [500]
        hook = channel(receiver)
        try:
            failed = await failure(hook, outbox(attempt=1))
            await hook.send(outbox(attempt=2))
            return failed, receiver.got
        finally:
            await hook.close()

    failed, got = run(body)
    assert failed.reason == "SERVER_ERROR"
    first, second = got
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"] == "ntc_0001"
    assert first.headers["hatp-notice-id"] == second.headers["hatp-notice-id"] == "ntc_0001"
    assert first.body == second.body
    assert verified(first) == verified(second) == notice_doc()


def test_a_receiver_that_does_not_answer_in_time_is_a_retryable_timeout() -> None:
    """[OUTBOX] The channel gives up after its timeout; the outbox tries again."""

    async def body(receiver: Receiver, _: socket.socket) -> DeliveryFailed:
        receiver.hang = True
        hook = channel(receiver, timeout_seconds=0.5)
        try:
            return await failure(hook, outbox())
        finally:
            await hook.close()

    failed = run(body)
    assert (failed.reason, failed.data["retryable"], failed.data["status"]) == (
        "TIMEOUT",
        True,
        None,
    )


def test_a_receiver_that_is_down_is_a_retryable_connect_failure_until_it_recovers() -> None:
    """[OUTBOX] Nothing listening: CONNECT, retryable; once it listens, the same notice
    (same noticeId) is delivered."""

    async def body(receiver: Receiver, sock: socket.socket) -> tuple[DeliveryFailed, list[Got]]:
        hook = channel(receiver)
        try:
            failed = await failure(hook, outbox(attempt=1))
            async with serving(receiver, sock):
                await hook.send(outbox(attempt=2))
            return failed, receiver.got
        finally:
            await hook.close()

    failed, got = run(body, listen=False)
    assert (failed.reason, failed.data["retryable"], failed.data["status"]) == (
        "CONNECT",
        True,
        None,
    )
    [delivered] = got
    assert delivered.headers["idempotency-key"] == "ntc_0001"
    assert verified(delivered) == notice_doc()


def test_every_delivery_reason_fires() -> None:
    """Each reason of DELIVERY_REASONS has a test above that makes it fire."""

    async def body(receiver: Receiver, sock: socket.socket) -> set[str]:
        seen = set()
        hook = channel(receiver, timeout_seconds=0.5)
        try:
            seen.add((await failure(hook, outbox(notice_doc(human=BOB)))).reason)
            seen.add((await failure(hook, outbox())).reason)  # nothing listens yet
            async with serving(receiver, sock):
                for status in (500, 404):
                    receiver.answers = [status]
                    seen.add((await failure(hook, outbox())).reason)
                receiver.hang = True
                seen.add((await failure(hook, outbox())).reason)
        finally:
            await hook.close()
        return seen

    assert run(body, listen=False) == set(DELIVERY_REASONS)


def test_credentials_and_query_in_the_url_reach_the_receiver_but_no_log_or_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A URL's userinfo, path token and query are secrets: the receiver gets them (as
    Basic auth and the request target), no log line or error shows them."""
    caplog.set_level(logging.DEBUG)
    path = "/hook/tok-path-s3cret?token=tok-query-s3cret"

    async def body(receiver: Receiver, _: socket.socket) -> tuple[DeliveryFailed, list[Got]]:
        url = receiver.url(path).replace("http://", "http://hook-user:tok-pass-s3cret@")
        hook = WebhookChannel(GATEWAY_KEY, GATEWAY_ID, {ALICE: url}, clock=ManualClock(START))
        try:
            await hook.send(outbox())
            receiver.answers = [500]
            return await failure(hook, outbox()), receiver.got
        finally:
            await hook.close()

    failed, got = run(body)
    assert got[0].path == "/hook/tok-path-s3cret" and got[0].query == "token=tok-query-s3cret"
    auth = base64.b64decode(got[0].headers["authorization"].removeprefix("Basic "))
    assert auth == b"hook-user:tok-pass-s3cret"
    shown = caplog.text + str(failed) + json.dumps(failed.to_dict())
    assert "ntc_0001" in caplog.text  # the channel does log
    assert "s3cret" not in shown and "hook-user" not in shown


@pytest.mark.parametrize(
    "url",
    ["ftp://hooks.acme.com/x", "hooks.acme.com/x", "https:///x", "https://hooks:port/x"],
)
def test_a_url_that_is_not_absolute_http_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError, match="alice"):
        WebhookChannel(GATEWAY_KEY, GATEWAY_ID, {ALICE: url})


def test_a_notice_of_another_gateway_is_not_signed() -> None:
    hook = WebhookChannel(GATEWAY_KEY, GATEWAY_ID, {ALICE: "https://hooks.acme.com/alice"})
    try:
        with pytest.raises(ValueError, match="signs for gateway"):
            asyncio.run(hook.send(outbox(notice_doc(gateway="https://gateway.evil.example"))))
    finally:
        asyncio.run(hook.close())


# --- the receiver's checks --------------------------------------------------------------


def signed(
    body: bytes,
    *,
    key: SigningKey = GATEWAY_KEY,
    timestamp: str = format_time(START),
    notice_id: str | None = "ntc_0001",
) -> dict[str, str]:
    """The headers a gateway with ``key`` sends with ``body``."""
    signature = key.sign_bytes(signature_base(timestamp, body))
    headers = {
        "Hatp-Timestamp": timestamp,
        "Hatp-Key-Id": key.kid,
        "Hatp-Signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
    }
    if notice_id is not None:
        headers["Hatp-Notice-Id"] = headers["Idempotency-Key"] = notice_id
    return headers


BODY = canonicalize(notice_doc())


def refusal(body: bytes, headers: dict[str, str], ring: Keyring | None = None, **kw: Any) -> str:
    with pytest.raises(WebhookInvalid) as refused:
        verify_webhook(
            body, headers, keyring() if ring is None else ring, now=kw.pop("now", START), **kw
        )
    assert refused.value.code == "WEBHOOK_INVALID"
    return refused.value.reason


def test_a_signed_notice_verifies_and_the_notice_id_headers_are_optional() -> None:
    assert verify_webhook(BODY, signed(BODY), keyring(), now=START) == notice_doc()
    assert verify_webhook(BODY, signed(BODY, notice_id=None), keyring(), now=START)["noticeId"]


@pytest.mark.parametrize("missing", ["Hatp-Timestamp", "Hatp-Key-Id", "Hatp-Signature"])
def test_a_missing_signature_header_is_headers(missing: str) -> None:
    """[WEBHOOK-VERIFY] 1."""
    headers = signed(BODY)
    del headers[missing]
    assert refusal(BODY, headers) == "HEADERS"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Hatp-Timestamp", "2026-12-02T09:00:00Z"),
        ("Hatp-Timestamp", "1796202000"),
        ("Hatp-Signature", "abc"),
        ("Hatp-Signature", "not base64!"),
    ],
)
def test_a_malformed_signature_header_is_headers(name: str, value: str) -> None:
    """[WEBHOOK-VERIFY] 1."""
    assert refusal(BODY, {**signed(BODY), name: value}) == "HEADERS"


def test_a_padded_or_non_canonical_signature_is_headers() -> None:
    headers = signed(BODY)
    assert refusal(BODY, {**headers, "Hatp-Signature": headers["Hatp-Signature"] + "=="}) == (
        "HEADERS"
    )
    standard = headers["Hatp-Signature"].replace("-", "+").replace("_", "/")
    if standard != headers["Hatp-Signature"]:
        assert refusal(BODY, {**headers, "Hatp-Signature": standard}) == "HEADERS"


def test_a_header_given_twice_in_two_cases_is_headers() -> None:
    headers = {**signed(BODY), "hatp-timestamp": format_time(START + timedelta(seconds=1))}
    assert refusal(BODY, headers) == "HEADERS"


@pytest.mark.parametrize("off", [timedelta(minutes=6), -timedelta(minutes=6)])
def test_a_timestamp_outside_the_tolerance_is_stale(off: timedelta) -> None:
    """[WEBHOOK-VERIFY] 2. A replay later, or a clock far off, either way."""
    assert refusal(BODY, signed(BODY), now=START + off) == "STALE"
    assert verify_webhook(BODY, signed(BODY), keyring(), now=START + off / 6 * 5)
    assert refusal(BODY, signed(BODY), now=START + off / 6 * 5, tolerance=timedelta(minutes=4))


def test_a_key_the_receiver_does_not_know_or_trust_is_kid_unknown() -> None:
    """[WEBHOOK-VERIFY] 3."""
    assert refusal(BODY, signed(BODY), Keyring()) == "KID_UNKNOWN"
    untrusted = Keyring([(GATEWAY_KEY.public, GATEWAY_ID)])
    assert refusal(BODY, signed(BODY), untrusted) == "KID_UNKNOWN"


def test_a_tampered_body_is_bad_signature() -> None:
    """[WEBHOOK-VERIFY] 4. A changed body, still canonical, no longer matches the signature."""
    tampered = canonicalize(notice_doc(askId="ask_9999"))
    assert refusal(tampered, signed(BODY)) == "BAD_SIGNATURE"


def test_a_timestamp_changed_after_signing_is_bad_signature() -> None:
    headers = {**signed(BODY), "Hatp-Timestamp": format_time(START + timedelta(seconds=1))}
    assert refusal(BODY, headers) == "BAD_SIGNATURE"


def test_another_key_under_the_gateways_kid_is_bad_signature() -> None:
    """[WEBHOOK-VERIFY] 4. A wrong key that claims the gateway's key id."""
    impostor = SigningKey.from_seed(bytes([99]) * 32, GATEWAY_KEY.kid)
    assert refusal(BODY, signed(BODY, key=impostor)) == "BAD_SIGNATURE"


def test_a_non_canonical_body_is_body_even_when_signed() -> None:
    """[WEBHOOK-VERIFY] 5. The same notice with spaces and another key order."""
    loose = json.dumps(notice_doc(), indent=1).encode()
    assert json.loads(loose) == notice_doc()
    assert refusal(loose, signed(loose)) == "BODY"


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"a":1,"a":2}',
        canonicalize([notice_doc()]),
        canonicalize({**notice_doc(), "type": "hatp.vote"}),
        canonicalize(notice_doc(gateway="https://gateway.evil.example")),
    ],
    ids=["not-json", "duplicate-key", "not-an-object", "not-a-notice", "another-gateway"],
)
def test_a_body_that_is_not_this_gateways_notice_is_body(body: bytes) -> None:
    """[WEBHOOK-VERIFY] 5."""
    assert refusal(body, signed(body)) == "BODY"


def test_a_notice_id_header_that_is_not_the_bodys_is_body() -> None:
    """The Hatp-Notice-Id and Idempotency-Key headers are not signed: they must be the
    body's noticeId, or a receiver keying on them could be fooled."""
    assert refusal(BODY, {**signed(BODY), "Hatp-Notice-Id": "ntc_other"}) == "BODY"
    assert refusal(BODY, {**signed(BODY), "Idempotency-Key": "ntc_other"}) == "BODY"


def test_every_webhook_invalid_reason_fires() -> None:
    """Each reason of WEBHOOK_REASONS, in the order checked: the first failing check wins."""
    loose = json.dumps(notice_doc()).encode()
    cases = [
        (BODY, {**signed(BODY), "Hatp-Signature": "abc"}, START),
        (BODY, signed(BODY), START + timedelta(hours=1)),
        (BODY, signed(BODY, key=SigningKey.from_seed(bytes([7]) * 32, "stranger")), START),
        (canonicalize(notice_doc(askId="x")), signed(BODY), START),
        (loose, signed(loose), START),
    ]
    reasons = [refusal(body, headers, now=now) for body, headers, now in cases]
    assert reasons == list(WEBHOOK_REASONS)
    # A stale, tampered message is refused as stale: the cheap check comes first.
    assert refusal(loose, signed(BODY), now=START + timedelta(hours=1)) == "STALE"


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        verify_webhook(BODY, signed(BODY), keyring(), now=START, tolerance=-timedelta(seconds=1))


def test_switched_off_a_webhook_replayed_later_is_taken() -> None:
    """[WEBHOOK-FRESH] planted: an ask's webhook captured and replayed an hour later (the
    ask long closed) is refused STALE; with the check off the receiver takes it as new."""
    headers = signed(BODY)
    later = START + timedelta(hours=1)
    assert refusal(BODY, headers, now=later) == "STALE"
    with unsafe_switched_off("WEBHOOK-FRESH"):
        assert verify_webhook(BODY, headers, keyring(), now=later)["event"] == "ask"


def test_a_webhook_signed_by_a_revoked_key_is_kid_unknown() -> None:
    """[WEBHOOK-VERIFY] 3. [SIG-PERIOD] the gateway's key from its key set, revoked an hour
    before the webhook's timestamp: KID_UNKNOWN, the period's reason named; signed before
    the revocation, it verifies."""
    ring = Keyring()
    revoked_at = START - timedelta(hours=1)
    ring.add(
        GATEWAY_KEY.public,
        GATEWAY_ID,
        KeyPeriod(not_before=START - timedelta(days=30), revoked_at=revoked_at),
    )
    ring.trust(GATEWAY_ID)
    with pytest.raises(WebhookInvalid) as refused:
        verify_webhook(BODY, signed(BODY), ring, now=START)
    assert refused.value.reason == "KID_UNKNOWN" and "revoked" in refused.value.message
    earlier = revoked_at - timedelta(minutes=1)
    headers = signed(BODY, timestamp=format_time(earlier))
    assert verify_webhook(BODY, headers, ring, now=earlier)["noticeId"] == "ntc_0001"
