"""Signed objects: a ``signature`` member over the canonical bytes of the rest."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hatp import _checks
from hatp.errors import InvalidJson, SignatureInvalid
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.evidence._canonical import canonical_plain, canonicalize
from hatp.evidence._keys import Keyring, SigningKey
from hatp.model import unreadable
from hatp.version import require_supported

_log = logging.getLogger(__name__)

ALGORITHM = "Ed25519"
_SIGNATURE_MEMBERS = frozenset({"alg", "kid", "sig"})


@dataclass(frozen=True, slots=True)
class Verified:
    """Who signed a verified object: the key id and the issuer that vouches for it."""

    kid: str
    issuer: str


def sign(obj: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """Return a copy of ``obj`` with a ``signature`` member made by ``key``.

    The signature covers the RFC 8785 canonical bytes of ``obj`` without its
    ``signature`` member, so member order and whitespace never matter.

    Raises:
        VersionUnsupported: ``obj`` carries no supported ``hatpVersion``.
        InvalidJson: ``obj`` has no canonical form, or its canonical bytes would not
            read back through the strict reader ([JCS-READBACK]: ``data.rule`` is the
            reader's rule, ``data.where`` a JSON Pointer).
        ValueError: ``obj`` is already signed.
    """
    require_supported(obj)
    if "signature" in obj:
        raise ValueError("the object is already signed; sign the unsigned object")
    # One walk for the common case; anything unusual takes the two careful ones,
    # which name the problem.
    payload = canonical_plain(obj)
    if payload is None:
        payload = canonicalize(obj)
        refuse_unreadable(obj)
    return signed_with(obj, key, payload)


def signed_with(obj: Mapping[str, Any], key: SigningKey, payload: bytes) -> dict[str, Any]:
    """``obj`` with a ``signature`` member made by ``key`` over ``payload``, which must be
    the canonical bytes of ``obj``, already checked as :func:`sign` checks them (for a
    caller that has those bytes anyway, such as the record writer)."""
    signature = {"alg": ALGORITHM, "kid": key.kid, "sig": b64url_encode(key.sign_bytes(payload))}
    return {**obj, "signature": signature}


def refuse_unreadable(value: Any, depth: int = 0) -> None:
    """Refuse a value whose canonical bytes the strict reader would not read back.

    ``depth`` is the value's own depth in the document that carries it (an
    event sits two levels down in its record).

    Raises:
        InvalidJson: [JCS-READBACK], with ``data.rule`` the reader's rule that would
            refuse it and ``data.where`` a JSON Pointer into ``value``.
    """
    found = unreadable(value, depth)
    if found is None:
        return
    _log.warning(
        "refused to sign a value the strict reader refuses: %s at %r", found.rule, found.where
    )
    raise InvalidJson(
        f"{found.detail} at {found.where or 'the top level'}: hatp signs only what it can "
        "read back",
        rule=found.rule,
        where=found.where,
    )


def verify(obj: Mapping[str, Any], keyring: Keyring, *, at: datetime | None = None) -> Verified:
    """Check the signature of a signed object; return who signed it.

    ``at`` is when the object was signed (timezone-aware), as the verifier knows it: a
    key with a period then verifies it only inside that period ([SIG-PERIOD]). Without
    ``at`` periods are not looked at.

    Returns only after every step below has passed; each failure names its step.

    Raises:
        VersionUnsupported: step 1, the object's version is unknown [VER-KNOWN].
        SignatureInvalid: with ``data.reason``:
            ``MALFORMED`` (``obj`` is not an object at all, [SIG-MEMBER]),
            ``MISSING`` / ``MALFORMED`` (step 2, [SIG-MEMBER]),
            ``ALG_NONE`` / ``ALG_UNKNOWN`` (step 3, [SIG-ALG]),
            ``KID_UNKNOWN`` / ``ISSUER_UNTRUSTED`` (step 4, [SIG-KID], [SIG-ISSUER]),
            ``KEY_REVOKED`` / ``KEY_NOT_YET_VALID`` / ``KEY_EXPIRED`` (step 4, with
            ``at``, [SIG-PERIOD]),
            ``BAD_ENCODING`` (step 5, [SIG-ENCODING]),
            ``BAD_LENGTH`` / ``BAD_SIGNATURE`` (step 6, [SIG-LENGTH], [SIG-CRYPTO]).
    """
    if not isinstance(obj, Mapping):
        _log.info("refused a signed object that is a %s, not an object", type(obj).__name__)
        raise SignatureInvalid(
            "MALFORMED", f"a signed object is a JSON object, not {type(obj).__name__}"
        )
    # 1. A version this build knows, or nothing else is looked at.
    require_supported(obj)
    # 2. The signature member has exactly alg, kid, sig, all strings.
    signature = obj.get("signature")
    if signature is None:
        if not _checks.is_on("SIG-MEMBER"):
            return Verified("(unsigned)", "(unchecked)")
        raise SignatureInvalid("MISSING", "the object has no signature member")
    if (
        not isinstance(signature, dict)
        or signature.keys() != _SIGNATURE_MEMBERS
        or not all(isinstance(v, str) for v in signature.values())
    ):
        raise SignatureInvalid(
            "MALFORMED", "the signature member must be exactly {alg, kid, sig}, all strings"
        )
    alg, kid, sig = signature["alg"], signature["kid"], signature["sig"]
    # 3. The one algorithm we accept. "none" gets its own reason: it is an attack.
    if alg != ALGORITHM:
        if not _checks.is_on("SIG-ALG"):
            # A naive verifier that trusts the object's own alg skips the check.
            return Verified(kid, "(unchecked)")
        reason = "ALG_NONE" if alg.lower() == "none" else "ALG_UNKNOWN"
        raise SignatureInvalid(reason, f"signature alg {alg!r} is not accepted; use Ed25519")
    # 4. A key we know, vouched for by an issuer we trust.
    if kid not in keyring and not _checks.is_on("SIG-KID"):
        return _any_key_verifies(obj, sig, keyring, at)
    key, issuer = keyring.resolve(kid, at)
    # 5. The one canonical base64url spelling of the signature bytes.
    try:
        raw = b64url_decode(sig)
    except ValueError as exc:
        raise SignatureInvalid(
            "BAD_ENCODING", f"the sig is not canonical unpadded base64url: {exc}", kid=kid
        ) from None
    # 6. Ed25519 over the canonical bytes of the object without its signature.
    unsigned = {k: v for k, v in obj.items() if k != "signature"}
    key.verify_bytes(raw, canonicalize(unsigned))
    return Verified(kid, issuer)


def _any_key_verifies(
    obj: Mapping[str, Any], sig: str, keyring: Keyring, at: datetime | None
) -> Verified:
    """What a verifier without the kid check does: try every key it has.

    Only the switch-off test reaches this; it shows why the kid must match.
    """
    unsigned = canonicalize({k: v for k, v in obj.items() if k != "signature"})
    for kid in keyring.kids():
        key, issuer = keyring.resolve(kid, at)
        try:
            key.verify_bytes(b64url_decode(sig), unsigned)
        except (SignatureInvalid, ValueError):
            continue
        return Verified(kid, issuer)
    raise SignatureInvalid("BAD_SIGNATURE", "no key in the keyring verifies the signature")
