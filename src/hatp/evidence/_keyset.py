"""An organisation's key set (docs/spec.md [KEYSET-DOC]): its parties' keys, signed by
its root key, which a partner pins by thumbprint ([KEYSET-PIN]) and checks in the
order of [KEYSET-ORDER] before any key of it is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.errors import KeyInvalid, KeySetInvalid, SignatureInvalid
from hatp.evidence._b64 import b64url_encode
from hatp.evidence._digest import digest
from hatp.evidence._keys import KeyPeriod, Keyring, PublicKey, SigningKey
from hatp.evidence._signing import sign, verify
from hatp.model import KEYSET_TYPE, KeySetBody, KeySetKey, Signature, first_error
from hatp.version import PROTOCOL_VERSION, require_supported

_log = logging.getLogger(__name__)

#: How far ahead of the verifier's clock a set's ``issuedAt`` may be ([KEYSET-ORDER]).
ISSUED_AT_SKEW = timedelta(minutes=5)

#: The rule each KEYSET_INVALID reason enforces, as its KEYSET_REASONS text names it.
_RULES = {"SHAPE": "KEYSET-DOC", "ROOT_MISMATCH": "KEYSET-PIN", "ROLLED_BACK": "KEYSET-ROLLBACK"}


def thumbprint(key: PublicKey) -> str:
    """The RFC 7638 JWK thumbprint of ``key``, unpadded base64url: SHA-256 over the JSON
    object of exactly ``crv``, ``kty`` and ``x``, in that order, without whitespace.
    The kid is not part of it ([KEYSET-PIN])."""
    # Written out here: no dependency hatp carries implements RFC 7638. The members are
    # ASCII (base64url and fixed names), so json.dumps writes exactly RFC 7638's bytes.
    members = {"crv": "Ed25519", "kty": "OKP", "x": b64url_encode(key.raw)}
    text = json.dumps(members, separators=(",", ":"), sort_keys=True)
    return b64url_encode(hashlib.sha256(text.encode("ascii")).digest())


@dataclass(frozen=True, slots=True)
class VerifiedKeySet:
    """A key set that passed every step of [KEYSET-ORDER]: who published it, which
    version, when it must be fetched again, and its keys."""

    organisation: str
    version: int
    issued_at: datetime
    expires_at: datetime
    #: The RFC 7638 thumbprint of the root key that signed it (the pin it matched).
    root_thumbprint: str
    #: The digest of the whole signed set: pass it as ``newest_digest`` next time.
    digest: str
    keys: tuple[KeySetKey, ...]

    def keyring(self) -> Keyring:
        """A keyring holding every key of the set, vouched for by the issuer it names and
        valid in its period ([SIG-PERIOD]), trusting every issuer the set names. The
        root key is not in it: the root signs key sets only."""
        ring = Keyring(trusted_issuers={key.issuer for key in self.keys})
        for key in self.keys:
            public = PublicKey.from_jwk(key.to_wire())
            ring.add(public, key.issuer, self._period(key))
        return ring

    def _period(self, key: KeySetKey) -> KeyPeriod:
        return KeyPeriod(
            not_before=parse_time(key.not_before),
            not_after=None if key.not_after is None else parse_time(key.not_after),
            revoked_at=None if key.revoked_at is None else parse_time(key.revoked_at),
            role=key.role,
            organisation=self.organisation,
            set_version=self.version,
        )


def sign_key_set(
    root: SigningKey,
    *,
    organisation: str,
    version: int,
    issued_at: datetime,
    expires_at: datetime,
    keys: Sequence[KeySetKey | Mapping[str, Any]],
) -> dict[str, Any]:
    """Build the key set of ``organisation`` and sign it with ``root``; return it.

    ``keys`` are :class:`~hatp.model.KeySetKey` objects or their wire form. The set is
    checked as a verifier checks its form ([KEYSET-DOC]) before it is signed.

    Raises:
        KeySetInvalid: reason ``SHAPE`` (``data.where`` a JSON Pointer): the set would
            not be one, e.g. a kid listed twice or the root's.
    """
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "type": KEYSET_TYPE,
        "organisation": organisation,
        "version": version,
        "issuedAt": format_time(issued_at),
        "expiresAt": format_time(expires_at),
        "root": root.public.to_jwk(),
        "keys": [key.to_wire() if isinstance(key, KeySetKey) else dict(key) for key in keys],
    }
    parsed, _ = _parse_body(body)
    return sign(parsed.to_wire(), root)


def verify_key_set(
    doc: Any,
    *,
    pin: str,
    now: datetime,
    newest_seen: int | None = None,
    newest_digest: str | None = None,
) -> VerifiedKeySet:
    """Check a key set against the pinned root thumbprint ``pin`` at time ``now``.

    ``newest_seen`` is the highest version of this organisation's set accepted before
    and ``newest_digest`` that set's digest (:attr:`VerifiedKeySet.digest`); with them a
    set is refused that rolls back to an older one or swaps the one seen. Returns only
    after every step of [KEYSET-ORDER] has passed, in this order.

    Raises:
        VersionUnsupported: step 2, the set names a version this build does not know.
        KeySetInvalid: ``data.reason`` ``SHAPE`` (steps 1, 3), ``UNSIGNED`` (4),
            ``ROOT_MISMATCH`` (5), ``BAD_SIGNATURE`` (6), ``EXPIRED`` or
            ``NOT_YET_ISSUED`` (7), ``ROLLED_BACK`` (8).
        ValueError: ``now`` is a naive datetime.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    # 1. A JSON object, or nothing else is looked at.
    if not isinstance(doc, Mapping):
        raise _refused("SHAPE", f"a key set is a JSON object, not {type(doc).__name__}")
    # 2. A version this build knows ([VER-KNOWN]).
    require_supported(doc, "key set")
    # 3. The key set form, the signature member aside.
    body, root = _parse_body({k: v for k, v in doc.items() if k != "signature"})
    named = {"organisation": body.organisation, "version": body.version}
    # 4. Signed.
    if "signature" not in doc:
        raise _refused(
            "UNSIGNED",
            "the key set has no signature member: only a set its root key signed is used",
            **named,
        )
    signature = _parse_signature(doc["signature"], named)
    # 5. By the pinned root.
    found = thumbprint(root)
    if found != pin and _checks.is_on("KEYSET-PIN"):
        raise _refused(
            "ROOT_MISMATCH",
            f"the key set of {body.organisation!r} is signed by another root (thumbprint "
            f"{found}) than the one pinned ({pin}); if the organisation changed its root, "
            "pin the new thumbprint after checking it with them out of band",
            thumbprint=found,
            pin=pin,
            **named,
        )
    # 6. The signature is the root's, and verifies.
    if signature.kid != root.kid:
        raise _refused(
            "BAD_SIGNATURE",
            f"the key set is signed by key {signature.kid!r}, not by its root {root.kid!r}: "
            "the root signs its key set",
            kid=signature.kid,
            **named,
        )
    try:
        verify(doc, Keyring([(root, body.organisation)], trusted_issuers=[body.organisation]))
    except SignatureInvalid as exc:
        raise _refused(
            "BAD_SIGNATURE",
            f"the key set's signature does not verify under its root: {exc.message}",
            signature_reason=exc.reason,
            **named,
        ) from None
    # 7. Current: issued (give or take the skew), not expired.
    issued_at, expires_at = parse_time(body.issued_at), parse_time(body.expires_at)
    if issued_at > now + ISSUED_AT_SKEW:
        raise _refused(
            "NOT_YET_ISSUED",
            f"the key set says it was issued at {body.issued_at}, more than 5 minutes after "
            f"now ({format_time(now)}): check this clock or the publisher's",
            issued_at=body.issued_at,
            now=format_time(now),
            **named,
        )
    if now >= expires_at:
        raise _refused(
            "EXPIRED",
            f"the key set expired at {body.expires_at}; fetch it again from {body.organisation}",
            expires_at=body.expires_at,
            now=format_time(now),
            **named,
        )
    # 8. Not older than the newest seen, and not another set of the same version.
    set_digest = digest(dict(doc))
    _refuse_rollback(body, set_digest, newest_seen, newest_digest)
    return VerifiedKeySet(
        organisation=body.organisation,
        version=body.version,
        issued_at=issued_at,
        expires_at=expires_at,
        root_thumbprint=found,
        digest=set_digest,
        keys=tuple(body.keys),
    )


def _parse_body(doc: Mapping[str, Any]) -> tuple[KeySetBody, PublicKey]:
    """The set's form, and its root key; every key's ``x`` is checked to be a key."""
    try:
        body = KeySetBody.model_validate(doc)
    except ValidationError as exc:
        path, msg = first_error(exc)
        where = "/" + path if path else ""
        raise _refused(
            "SHAPE",
            f"not a key set: {where or '(top)'}: {msg}",
            where=where,
            organisation=_text_or_none(doc.get("organisation")),
        ) from None
    root = _public(body.root.to_wire(), "/root", body.organisation)
    for position, key in enumerate(body.keys):
        _public(key.to_wire(), f"/keys/{position}", body.organisation)
    return body, root


def _parse_signature(member: Any, named: dict[str, Any]) -> Signature:
    try:
        return Signature.model_validate(member)
    except ValidationError:
        raise _refused(
            "SHAPE",
            "the key set's signature member is not {alg, kid, sig}, all strings",
            where="/signature",
            **named,
        ) from None


def _public(jwk: Mapping[str, Any], where: str, organisation: str) -> PublicKey:
    try:
        return PublicKey.from_jwk(jwk)
    except KeyInvalid as exc:
        # The form is checked already: this x is not the one spelling of 32 bytes.
        raise _refused(
            "SHAPE",
            f"not a key set: {where} is not a key: {exc.message}",
            where=where,
            organisation=organisation,
        ) from None


def _refuse_rollback(
    body: KeySetBody, set_digest: str, newest_seen: int | None, newest_digest: str | None
) -> None:
    named = {"organisation": body.organisation, "version": body.version}
    if newest_seen is None or not _checks.is_on("KEYSET-ROLLBACK"):
        return
    if body.version < newest_seen:
        raise _refused(
            "ROLLED_BACK",
            f"key set version {body.version} of {body.organisation!r} is older than version "
            f"{newest_seen}, already seen: an old set may list keys revoked since; fetch "
            "the current one",
            newest_seen=newest_seen,
            **named,
        )
    if body.version == newest_seen and newest_digest is not None and set_digest != newest_digest:
        raise _refused(
            "ROLLED_BACK",
            f"key set version {body.version} of {body.organisation!r} is not the set of "
            "that version already seen: a publisher issues a new version for every change; "
            "ask them why two sets share one",
            newest_seen=newest_seen,
            digest=set_digest,
            newest_digest=newest_digest,
            **named,
        )


def _refused(reason: str, message: str, **data: Any) -> KeySetInvalid:
    _log.info("refused a key set (%s): %s", reason, message)
    return KeySetInvalid(message, reason=reason, rule=_RULES.get(reason, "KEYSET-ORDER"), **data)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
