"""The webhook channel: the gateway POSTs each notice, signed, to the person's URL.

:class:`WebhookChannel` is a :class:`~hatp.gateway.PushChannel` of type
``webhook``. It sends a notice document (docs/spec.md [NOTICE-DOC]) as its
canonical JSON bytes, signed with the gateway's key over the timestamp and the
body ([WEBHOOK-SIGN]):

    Hatp-Signature = base64url(Ed25519(b"hatp-webhook-v1\\n" + Hatp-Timestamp + b"\\n" + body))

with ``Hatp-Key-Id`` naming the key, and ``Hatp-Notice-Id`` and
``Idempotency-Key`` both the notice's ``noticeId``, the same on every retry,
so a receiver acts on each notice once. What the receiver answers decides
what the outbox does next (:data:`~hatp.errors.DELIVERY_REASONS`): a 2xx is
delivered; no connection, no answer in time, a 5xx or a 429 are tried again;
any other status (a redirect too: none is followed) moves on to the person's
next channel.

:func:`verify_webhook` is the receiver's side ([WEBHOOK-VERIFY]): it checks the
headers, the timestamp against the receiver's clock, the key against its
keyring, the signature, and that the body is a notice in canonical JSON from
the gateway whose key signed it, in that order, and returns the notice only
when every check passed.

A URL may hold a secret (credentials, a token in its path or query): neither
logs nor errors ever show more of it than its host. Requests go straight to
the HTTP transport, so no HTTP client logs the URL either, and no proxy is
taken from the environment.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx2

from hatp import _checks
from hatp.clock import Clock, SystemClock, format_time, parse_time
from hatp.errors import DeliveryFailed, InvalidJson, SignatureInvalid, TimeInvalid, WebhookInvalid
from hatp.evidence import Keyring, SigningKey, canonicalize, parse_json
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway._push import OutboxMessage, delivery_failed

__all__ = [
    "IDEMPOTENCY_HEADER",
    "KEY_ID_HEADER",
    "NOTICE_ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WEBHOOK",
    "WebhookChannel",
    "verify_webhook",
    "webhook_signature_base",
]

#: The channel type this channel serves (a card's ``channels`` value).
WEBHOOK = "webhook"
NOTICE_ID_HEADER = "Hatp-Notice-Id"
TIMESTAMP_HEADER = "Hatp-Timestamp"
KEY_ID_HEADER = "Hatp-Key-Id"
SIGNATURE_HEADER = "Hatp-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: What every webhook signature starts with, so it cannot pass for another hatp signature.
_CONTEXT = b"hatp-webhook-v1\n"
_SIGNATURE_LENGTH = 64
_NOTICE_TYPE = "hatp.notice"

_log = logging.getLogger("hatp.gateway.webhook")


def webhook_signature_base(timestamp: str, body: bytes) -> bytes:
    """Return the bytes a webhook's signature is over: the context line, the
    ``Hatp-Timestamp`` value and the body. [WEBHOOK-SIGN]

    Raises:
        UnicodeEncodeError: ``timestamp`` is not ASCII (a wire time always is).
    """
    return _CONTEXT + timestamp.encode("ascii") + b"\n" + body


class WebhookChannel:
    """The ``webhook`` channel: POSTs each notice, signed with ``key``, to the URL
    ``urls`` holds for its person.

    ``gateway_id`` is the gateway the key speaks for: the channel signs only
    notices that name it (a receiver checks the two agree). ``timeout_seconds``
    bounds each attempt as a whole; ``clock`` gives the ``Hatp-Timestamp``
    (the system clock by default). One connection pool serves every send;
    :meth:`close` it when done.
    """

    def __init__(
        self,
        key: SigningKey,
        gateway_id: str,
        urls: Mapping[str, str],
        *,
        timeout_seconds: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        """Make the channel.

        Raises:
            ValueError: a URL is not an absolute ``http`` or ``https`` URL with a
                host, or ``timeout_seconds`` is not positive.
        """
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds}")
        self._key = key
        self._gateway_id = gateway_id
        self._targets = {human: _target(human, url) for human, url in urls.items()}
        self._timeout = timeout_seconds
        self._clock: Clock = clock or SystemClock()
        self._transport = httpx2.AsyncHTTPTransport(retries=0, trust_env=False)

    @property
    def channel_type(self) -> str:
        return WEBHOOK

    def reaches(self, human: str) -> bool:
        """Whether this channel holds a URL for ``human``."""
        return human in self._targets

    async def send(self, message: OutboxMessage) -> None:
        """POST ``message``'s notice to its person's URL, signed; return on a 2xx.

        Raises:
            DeliveryFailed: ``NO_ADDRESS`` (no URL for the person), ``CONNECT``,
                ``TIMEOUT`` or ``SERVER_ERROR`` (5xx, 429; all retryable), or
                ``REJECTED`` (any other status, a redirect included; not retryable).
                ``data`` holds ``noticeId``, ``human``, ``channel`` and ``status``
                (the HTTP status, or ``None`` when no answer came).
            ValueError: the notice names another gateway than this channel's.
            InvalidJson: the notice document has no canonical JSON form.
        """
        notice_id, human = message.notice_id, message.human
        target = self._targets.get(human)
        if target is None:
            raise _failed("NO_ADDRESS", f"no webhook URL is configured for {human}", message)
        if message.document.get("gateway") != self._gateway_id:
            raise ValueError(
                f"this channel signs for gateway {self._gateway_id!r}; notice {notice_id!r} "
                f"names {message.document.get('gateway')!r}"
            )
        url, authorization = target
        body = canonicalize(message.document)
        timestamp = format_time(self._clock.now())
        signature = self._key.sign_bytes(webhook_signature_base(timestamp, body))
        headers = {
            "Content-Type": "application/json",
            NOTICE_ID_HEADER: notice_id,
            IDEMPOTENCY_HEADER: notice_id,
            TIMESTAMP_HEADER: timestamp,
            KEY_ID_HEADER: self._key.kid,
            SIGNATURE_HEADER: b64url_encode(signature),
        }
        if authorization is not None:
            headers["Authorization"] = authorization
        request = httpx2.Request(
            "POST",
            url,
            headers=headers,
            content=body,
            extensions={"timeout": httpx2.Timeout(self._timeout).as_dict()},
        )
        host = request.url.host
        status = await self._post(request, message, host)
        if 200 <= status < 300:
            _log.info("notice %s delivered to %s at %s (HTTP %d)", notice_id, human, host, status)
            return
        if status >= 500 or status == 429:
            raise _failed(
                "SERVER_ERROR",
                f"the webhook receiver at {host} answered HTTP {status}; the outbox tries again",
                message,
                status=status,
            )
        raise _failed(
            "REJECTED",
            f"the webhook receiver at {host} answered HTTP {status} (redirects are not "
            f"followed); fix the URL or the receiver for {human}",
            message,
            status=status,
        )

    async def _post(self, request: httpx2.Request, message: OutboxMessage, host: str) -> int:
        """Send ``request`` and return the answer's status; the body is never read."""
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._transport.handle_async_request(request)
                await response.aclose()
        except (TimeoutError, httpx2.TimeoutException) as exc:
            raise _failed(
                "TIMEOUT",
                f"the webhook receiver at {host} did not answer within {self._timeout} s; "
                "the outbox tries again",
                message,
            ) from exc
        except httpx2.TransportError as exc:
            # The exception's text may quote the URL; its type says enough.
            raise _failed(
                "CONNECT",
                f"the webhook receiver at {host} could not be reached "
                f"({type(exc).__name__}); the outbox tries again",
                message,
            ) from exc
        return response.status_code

    async def close(self) -> None:
        """Close the channel's connections."""
        await self._transport.aclose()


def _target(human: str, url: str) -> tuple[str, str | None]:
    """``url`` without its credentials, and the Basic ``Authorization`` they make.

    Raises:
        ValueError: not an absolute ``http``/``https`` URL with a host.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        raise ValueError(f"the webhook URL for {human} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(
            f"the webhook URL for {human} must be an absolute http or https URL with a host"
        )
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), authorization


def _failed(
    reason: str, text: str, message: OutboxMessage, *, status: int | None = None
) -> DeliveryFailed:
    return delivery_failed(WEBHOOK, reason, text, message, _log, status=status)


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    keyring: Keyring,
    *,
    now: datetime,
    tolerance: timedelta = timedelta(minutes=5),
) -> dict[str, Any]:
    """Check a webhook as its receiver got it, and return the notice document.
    [WEBHOOK-VERIFY]

    ``headers`` are the request's headers (names in any case); ``now`` is the
    receiver's clock; a timestamp further than ``tolerance`` from it either way
    is refused. The key must be in ``keyring`` with a trusted issuer, and the
    notice's ``gateway`` must be that issuer. A receiver keeps the ``noticeId``
    s it has acted on: a retry carries the same one.

    Raises:
        WebhookInvalid: the first check that failed, in order: ``HEADERS``,
            ``STALE``, ``KID_UNKNOWN``, ``BAD_SIGNATURE``, ``BODY``.
        ValueError: ``tolerance`` is negative.
    """
    if tolerance < timedelta(0):
        raise ValueError("tolerance must not be negative")
    # 1. The signature headers are there, once each, and well formed.
    found = _headers(headers)
    timestamp, kid, signature = _signature_headers(found)
    # 2. The timestamp is within the tolerance of the receiver's clock.
    sent = parse_time(timestamp)
    if abs(now - sent) > tolerance and _checks.is_on("WEBHOOK-FRESH"):
        raise _invalid(
            "STALE",
            f"the webhook was signed at {timestamp}, further than {tolerance} from "
            f"{format_time(now)}: a replay, or a clock that is off; do not act on it",
            timestamp=timestamp,
        )
    # 3. The key is in the keyring, vouched for by a trusted issuer, and was valid when
    #    the webhook says it was signed (a key from a key set: [SIG-PERIOD]).
    try:
        key, issuer = keyring.resolve(kid, at=sent)
    except SignatureInvalid as exc:
        raise _invalid(
            "KID_UNKNOWN", f"{exc.message}; do not act on this webhook", kid=kid
        ) from None
    # 4. The signature verifies over the timestamp and the body as received.
    try:
        key.verify_bytes(signature, webhook_signature_base(timestamp, body))
    except SignatureInvalid:
        raise _invalid(
            "BAD_SIGNATURE",
            f"the signature does not verify under key {kid!r} over the timestamp and the "
            "body: they were changed, or another key signed them; do not act on it",
            kid=kid,
        ) from None
    # 5. The body is a notice in canonical JSON, from the gateway whose key signed it.
    return _notice(body, found, issuer)


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` by lower-case name; a name given twice (in two cases) is refused."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in found:
            raise _invalid("HEADERS", f"header {name!r} is given twice", header=name)
        found[lower] = value
    return found


def _signature_headers(found: Mapping[str, str]) -> tuple[str, str, bytes]:
    for name in (TIMESTAMP_HEADER, KEY_ID_HEADER, SIGNATURE_HEADER):
        if not found.get(name.lower()):
            raise _invalid(
                "HEADERS", f"the webhook has no {name} header; do not act on it", header=name
            )
    timestamp = found[TIMESTAMP_HEADER.lower()]
    try:
        parse_time(timestamp)
    except TimeInvalid:
        raise _invalid(
            "HEADERS",
            f"{TIMESTAMP_HEADER} is not a wire time (YYYY-MM-DDTHH:MM:SS.mmmZ)",
            header=TIMESTAMP_HEADER,
        ) from None
    signature = _unb64url(found[SIGNATURE_HEADER.lower()])
    if signature is None or len(signature) != _SIGNATURE_LENGTH:
        raise _invalid(
            "HEADERS",
            f"{SIGNATURE_HEADER} is not an Ed25519 signature in unpadded base64url",
            header=SIGNATURE_HEADER,
        )
    return timestamp, found[KEY_ID_HEADER.lower()], signature


def _invalid(reason: str, message: str, **data: Any) -> WebhookInvalid:
    return WebhookInvalid(message, reason=reason, **data)


def _unb64url(text: str) -> bytes | None:
    """The bytes ``text`` spells in unpadded base64url, if it is their one canonical spelling."""
    try:
        return b64url_decode(text)
    except ValueError:
        return None


def _notice(body: bytes, found: Mapping[str, str], issuer: str) -> dict[str, Any]:
    try:
        document = parse_json(body)
    except InvalidJson as exc:
        raise _invalid("BODY", f"the body is not strict JSON: {exc.message}") from None
    if not isinstance(document, dict) or document.get("type") != _NOTICE_TYPE:
        raise _invalid("BODY", f"the body is not a notice (an object of type {_NOTICE_TYPE})")
    try:
        canonical = canonicalize(document) == body
    except InvalidJson:
        canonical = False
    if not canonical:
        raise _invalid("BODY", "the body is not the notice's canonical JSON (RFC 8785)")
    if document.get("gateway") != issuer:
        raise _invalid(
            "BODY",
            f"the notice names gateway {document.get('gateway')!r} but is signed by a key "
            f"of {issuer!r}",
            issuer=issuer,
        )
    notice_id = document.get("noticeId")
    for name in (NOTICE_ID_HEADER, IDEMPOTENCY_HEADER):
        given = found.get(name.lower())
        if given is not None and given != notice_id:
            raise _invalid(
                "BODY",
                f"{name} {given!r} is not the notice's noticeId {notice_id!r}",
                header=name,
            )
    return document
