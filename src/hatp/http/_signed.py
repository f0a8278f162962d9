"""Requests signed by the asking organisation's key: who calls, across organisations.

A bearer token (:mod:`hatp.http._callers`) is a secret two parties share. Between
two organisations (acme's coordinator asking globex's gateway) the caller signs
each request with a key its organisation publishes instead, and the server checks
it against the caller's published keys (a :class:`~hatp.evidence.Keyring` whose
keys carry their issuer and period): nothing secret is shared or stored.

:func:`sign_request` makes the four headers; :class:`SignedCallers` checks them and
names the caller ([API-SIGNED], docs/spec.md §25). What is signed, as bytes::

    b"hatp-request-v1\\n" + METHOD + b" " + target + b"\\n" + timestamp + b"\\n" + body

``target`` is the path and query exactly as sent (percent-encoded, ASCII), the
timestamp the ``Hatp-Timestamp`` header's wire time, ``body`` the body's bytes.
The caller id (``Hatp-Caller``) is not signed: it must be the key's issuer, which
the kid already fixes. Whoever sees a signed request may replay it within the
tolerance: the gateway's requests are idempotent (asking again is the same ask),
and the API is served over TLS so that nobody else sees one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Final

from hatp.clock import Clock, SystemClock, format_time, parse_time
from hatp.errors import SignatureInvalid, TimeInvalid, Unauthenticated
from hatp.evidence import Keyring, SigningKey
from hatp.evidence._b64 import b64url_decode, b64url_encode

__all__ = [
    "CALLER_HEADER",
    "DEFAULT_TOLERANCE",
    "KEY_ID_HEADER",
    "SIGNATURE_HEADER",
    "SIGNED_HEADERS",
    "TIMESTAMP_HEADER",
    "SignedCallers",
    "request_message",
    "sign_request",
]

_log = logging.getLogger(__name__)

#: Who signed: the caller id, the signing key's issuer.
CALLER_HEADER: Final = "Hatp-Caller"
#: The signing key's kid.
KEY_ID_HEADER: Final = "Hatp-Key-Id"
#: When it was signed (a wire time).
TIMESTAMP_HEADER: Final = "Hatp-Timestamp"
#: Unpadded base64url of the Ed25519 signature.
SIGNATURE_HEADER: Final = "Hatp-Signature"
#: The four headers of a signed request, in the order they are read.
SIGNED_HEADERS: Final = (CALLER_HEADER, KEY_ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
#: How far a request's timestamp may be from the server's time, either way, by default.
DEFAULT_TOLERANCE: Final = timedelta(minutes=5)

_DOMAIN = b"hatp-request-v1\n"
#: The longest header value read (a caller id, a kid, a time, a signature).
_MAX_HEADER = 1024


def request_message(method: str, target: str, timestamp: str, body: bytes) -> bytes:
    """The bytes a request signature covers (see the module's docstring).

    Raises:
        ValueError: ``method`` or ``target`` is not ASCII (a target as sent is
            percent-encoded), or ``target`` does not start with ``/``.
    """
    if not method.isascii() or not target.isascii():
        raise ValueError("a request's method and target are ASCII (percent-encode the path)")
    if not target.startswith("/"):
        raise ValueError(f"a request target is a path and query starting with /, not {target!r}")
    head = b"%s %s\n%s\n" % (method.upper().encode(), target.encode(), timestamp.encode())
    return _DOMAIN + head + body


def sign_request(
    key: SigningKey, caller: str, method: str, target: str, body: bytes, now: datetime
) -> dict[str, str]:
    """Sign one request as ``caller`` (the issuer of ``key``, as the server's keyring
    names it) at ``now``: return the headers to send with it. [API-SIGNED]

    ``target`` is the request's path and query exactly as sent, ``body`` its bytes
    (``b""`` for none).

    Raises:
        ValueError: ``method`` or ``target`` is not ASCII, ``target`` is not a path, or
            ``now`` is naive.
    """
    timestamp = format_time(now)
    signature = key.sign_bytes(request_message(method, target, timestamp, body))
    return {
        CALLER_HEADER: caller,
        KEY_ID_HEADER: key.kid,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: b64url_encode(signature),
    }


class SignedCallers:
    """The callers whose signed requests this server takes: those whose keys
    ``keyring`` holds, of issuers it trusts, within their periods. [API-SIGNED]

    A request's timestamp may be at most ``tolerance`` from ``clock``'s time (the
    system clock by default), either way. A key from a key set signs requests only
    if its role is one of ``roles`` (a coordinator's, by default: a participant's or
    a gateway's key of the same organisation speaks for it in nothing else); a key
    the keyring holds without a period (this server's own keyring file) is taken
    as the operator put it there.

    Raises:
        ValueError: ``tolerance`` is not positive.
    """

    def __init__(
        self,
        keyring: Keyring,
        *,
        tolerance: timedelta = DEFAULT_TOLERANCE,
        clock: Clock | None = None,
        roles: Iterable[str] = ("coordinator",),
    ) -> None:
        if tolerance <= timedelta(0):
            raise ValueError(f"the tolerance must be positive, not {tolerance}")
        self.keyring = keyring
        self.tolerance = tolerance
        self.roles = frozenset(roles)
        self._clock = clock or SystemClock()

    def verify(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes,
    ) -> str:
        """Return the caller id a signed request authenticates: its key's issuer.

        ``target`` is the path and query as received, ``headers`` the request's
        (names in any case; a mapping, or pairs that may repeat a name), ``body`` the
        bytes the params are read from. Checked in this order, each refusal saying
        which (``data.reason``):

        1. the four headers, once each, of their form (else ``BAD_SIGNATURE``);
        2. the timestamp within the tolerance of this server's time (``STALE``);
        3. the key: in the keyring, of a trusted issuer, inside its period at the
           timestamp, and of one of ``roles`` (``UNKNOWN_KEY``; ``data.keyReason`` the
           keyring's reason, or ``ROLE``);
        4. the signature over the request as received (``BAD_SIGNATURE``);
        5. ``Hatp-Caller`` is the key's issuer (``WRONG_CALLER``).

        Raises:
            Unauthenticated: one of the above; nothing about the request was done.
        """
        caller, kid, timestamp, signature = _read_headers(headers)
        signed_at = _signed_at(timestamp)
        now = self._clock.now()
        if abs(now - signed_at) > self.tolerance:
            skew = (signed_at - now).total_seconds()
            _log.info("refused a request signed by %s at %s: %+.0f s off", kid, timestamp, skew)
            raise Unauthenticated(
                f"the request was signed at {timestamp}, {abs(skew):.0f} s "
                f"{'ahead of' if skew > 0 else 'behind'} this server's time {format_time(now)}; "
                f"it takes {self.tolerance.total_seconds():.0f} s either way: sign it again "
                "now, and check your clock",
                reason="STALE",
                timestamp=timestamp,
                serverTime=format_time(now),
                toleranceSeconds=self.tolerance.total_seconds(),
            )
        try:
            key, issuer = self.keyring.resolve(kid, at=signed_at)
        except SignatureInvalid as exc:
            _log.info("refused a request signed by key %s: %s", kid, exc.reason)
            raise Unauthenticated(
                f"key {kid!r} does not sign requests to this server: {exc.message}. The "
                "server's keyring must hold your organisation's published key, its issuer "
                "trusted, and the request signed inside the key's period",
                reason="UNKNOWN_KEY",
                kid=kid,
                keyReason=exc.reason,
            ) from None
        period = self.keyring.period(kid)
        if period is not None and period.role not in self.roles:
            _log.info("refused a request signed by key %s, a %s key", kid, period.role)
            raise Unauthenticated(
                f"key {kid!r} is {period.organisation}'s {period.role} key, and requests to "
                f"this server are signed with a {' or '.join(sorted(self.roles))} key",
                reason="UNKNOWN_KEY",
                kid=kid,
                keyReason="ROLE",
            )
        try:
            key.verify_bytes(signature, request_message(method, target, timestamp, body))
        except (SignatureInvalid, ValueError):
            _log.info("refused a request: its signature does not verify under key %s", kid)
            raise Unauthenticated(
                f"the request's signature does not verify under key {kid!r}: sign "
                "hatp-request-v1, the method and the path and query exactly as sent, "
                f"{TIMESTAMP_HEADER} and the body's exact bytes with that key",
                reason="BAD_SIGNATURE",
                kid=kid,
            ) from None
        if caller != issuer:
            _log.info("refused a request signed by key %s of %s as %r", kid, issuer, caller)
            raise Unauthenticated(
                f"{CALLER_HEADER} is {caller!r}, but key {kid!r} is {issuer!r}'s: name the "
                "key's issuer as the caller",
                reason="WRONG_CALLER",
                caller=caller,
                issuer=issuer,
            )
        return issuer


def _read_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> tuple[str, str, str, bytes]:
    """The caller, kid, timestamp and decoded signature of a signed request.

    Raises:
        Unauthenticated: reason ``BAD_SIGNATURE``: a header missing, repeated,
            too long, or a signature that is not unpadded base64url.
    """
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found: dict[str, list[str]] = {name.lower(): [] for name in SIGNED_HEADERS}
    for name, value in pairs:
        if name.lower() in found:
            found[name.lower()].append(value)
    values: list[str] = []
    for name in SIGNED_HEADERS:
        given = found[name.lower()]
        if len(given) != 1 or not given[0] or len(given[0]) > _MAX_HEADER:
            problem = (
                "is missing"
                if not given or not given[0]
                else "is given more than once"
                if len(given) > 1
                else f"is longer than {_MAX_HEADER} characters"
            )
            raise Unauthenticated(
                f"a signed request carries {', '.join(SIGNED_HEADERS)}, each once; {name} "
                f"{problem}",
                reason="BAD_SIGNATURE",
                header=name,
            )
        values.append(given[0])
    caller, kid, timestamp, encoded = values
    try:
        signature = b64url_decode(encoded)
    except ValueError:
        raise Unauthenticated(
            f"{SIGNATURE_HEADER} is unpadded base64url of the Ed25519 signature, and this is not",
            reason="BAD_SIGNATURE",
            header=SIGNATURE_HEADER,
        ) from None
    return caller, kid, timestamp, signature


def _signed_at(timestamp: str) -> datetime:
    try:
        return parse_time(timestamp)
    except TimeInvalid:
        raise Unauthenticated(
            f"{TIMESTAMP_HEADER} is a wire time (YYYY-MM-DDTHH:MM:SS.mmmZ), not {timestamp[:40]!r}",
            reason="BAD_SIGNATURE",
            header=TIMESTAMP_HEADER,
        ) from None
