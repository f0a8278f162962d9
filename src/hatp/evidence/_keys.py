"""Ed25519 keys: generate, save, load, publish as JWK, and the verifier's keyring."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import ValidationError

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.errors import InvalidJson, KeyInvalid, KeyringInvalid, SignatureInvalid
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.evidence._strict_json import parse_json
from hatp.model import HumanCard, KeyringDocument, KeyringEntry, KeyRole, PublicJwk, first_error
from hatp.model._base import KID_PATTERN
from hatp.version import PROTOCOL_VERSION, require_supported

if TYPE_CHECKING:
    import httpx2

SIGNATURE_LENGTH = 64
_KID_RE = re.compile(KID_PATTERN)


class PublicKey:
    """An Ed25519 public key with its key id."""

    __slots__ = ("_key", "kid", "raw")

    def __init__(self, raw: bytes, kid: str) -> None:
        if not _KID_RE.fullmatch(kid):
            raise KeyInvalid(
                f"kid {kid!r} is not a key id: 1 to 256 printable ASCII characters, no spaces",
                kid=kid,
            )
        if len(raw) != 32:
            raise KeyInvalid(f"an Ed25519 public key is 32 bytes, not {len(raw)}", kid=kid)
        self.kid = kid
        self.raw = raw
        self._key = Ed25519PublicKey.from_public_bytes(raw)

    @classmethod
    def from_jwk(cls, jwk: Mapping[str, Any]) -> PublicKey:
        """Read a public JWK (``kty: OKP``, ``crv: Ed25519``, ``x``, ``kid``).

        Raises:
            KeyInvalid: the JWK is not an Ed25519 public key of that form.
        """
        fields = {k: v for k, v in jwk.items() if k in ("kty", "crv", "x", "kid")}
        try:
            parsed = PublicJwk.model_validate(fields)
            raw = b64url_decode(parsed.x)
        except (ValidationError, ValueError) as exc:
            raise KeyInvalid(
                f"not an Ed25519 public JWK (need kty OKP, crv Ed25519, x, kid): {exc}",
                kid=jwk.get("kid"),
            ) from None
        return cls(raw, parsed.kid)

    def to_jwk(self) -> dict[str, str]:
        """Return the public JWK."""
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(self.raw), "kid": self.kid}

    def verify_bytes(self, signature: bytes, message: bytes) -> None:
        """Check an Ed25519 signature over ``message``.

        Raises:
            SignatureInvalid: reason ``BAD_LENGTH`` or ``BAD_SIGNATURE``.
        """
        if len(signature) != SIGNATURE_LENGTH and _checks.is_on("SIG-LENGTH"):
            raise SignatureInvalid(
                "BAD_LENGTH",
                f"an Ed25519 signature is 64 bytes; this one is {len(signature)}",
                kid=self.kid,
            )
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            if _checks.is_on("SIG-CRYPTO"):
                raise SignatureInvalid(
                    "BAD_SIGNATURE",
                    f"the signature does not verify under key {self.kid!r}: "
                    "the signed content was changed, or another key signed it",
                    kid=self.kid,
                ) from None


class SigningKey:
    """An Ed25519 private key with its key id. Keep it secret."""

    __slots__ = ("_key", "kid", "public")

    def __init__(self, key: Ed25519PrivateKey, kid: str) -> None:
        self._key = key
        self.kid = kid
        raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public = PublicKey(raw, kid)

    @classmethod
    def generate(cls, kid: str) -> SigningKey:
        """Make a new random key.

        Raises:
            KeyInvalid: ``kid`` is not a key id.
        """
        return cls(Ed25519PrivateKey.generate(), kid)

    @classmethod
    def from_seed(cls, seed: bytes, kid: str) -> SigningKey:
        """Make the key whose 32-byte private seed is ``seed`` (RFC 8032 test keys)."""
        if len(seed) != 32:
            raise KeyInvalid(f"an Ed25519 seed is 32 bytes, not {len(seed)}", kid=kid)
        return cls(Ed25519PrivateKey.from_private_bytes(seed), kid)

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        """Read a private key file written by :meth:`save`.

        Raises:
            KeyInvalid: the file is unreadable or not an Ed25519 private JWK.
        """
        try:
            doc = parse_json(Path(path).read_bytes())
        except OSError as exc:
            raise KeyInvalid(f"cannot read key file {path}: {exc.strerror}") from None
        except InvalidJson as exc:
            raise KeyInvalid(f"{path} is not a private key file: {exc.message}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("d"), str):
            raise KeyInvalid(f"{path} is not a private key file (no 'd' member)")
        try:
            public = PublicKey.from_jwk(doc)
        except KeyInvalid as exc:
            raise KeyInvalid(f"{path}: {exc.message}", kid=doc.get("kid")) from None
        try:
            seed = b64url_decode(doc["d"])
        except ValueError:
            raise KeyInvalid(f"{path}: 'd' is not base64url") from None
        key = cls.from_seed(seed, public.kid)
        if key.public.raw != public.raw:
            raise KeyInvalid(f"{path}: 'x' is not the public half of 'd'", kid=public.kid)
        return key

    def save(self, path: str | Path, *, overwrite: bool = False) -> None:
        """Write the private JWK to ``path``, readable by the owner only.

        Raises:
            KeyInvalid: the file exists and ``overwrite`` is false.
        """
        target = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
        try:
            fd = os.open(target, flags, 0o600)
        except FileExistsError:
            raise KeyInvalid(
                f"{target} exists; refusing to overwrite a key (pass overwrite / --force)"
            ) from None
        os.fchmod(fd, 0o600)  # O_TRUNC keeps an existing file's mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(_json_text(self.private_jwk()))

    def private_jwk(self) -> dict[str, str]:
        """Return the private JWK (with ``d``). Never publish it."""
        seed = self._key.private_bytes_raw()
        return {**self.public.to_jwk(), "d": b64url_encode(seed)}

    def sign_bytes(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``message``."""
        return self._key.sign(message)


@dataclass(frozen=True, slots=True)
class KeyPeriod:
    """When a key may have signed ([SIG-PERIOD]), and where that was said: from
    ``not_before`` to ``not_after`` inclusive (``None``: open-ended), and never at or
    after ``revoked_at``. ``role``, ``organisation`` and ``set_version`` say what the
    key speaks for and which key set listed it. Times are timezone-aware.

    Raises:
        KeyringInvalid: a naive time, ``not_after`` not after ``not_before``, or a
            ``role`` that is not one of :data:`hatp.model.KeyRole`.
    """

    not_before: datetime
    not_after: datetime | None = None
    revoked_at: datetime | None = None
    role: str | None = None
    organisation: str | None = None
    set_version: int | None = None

    def __post_init__(self) -> None:
        for name in ("not_before", "not_after", "revoked_at"):
            moment = getattr(self, name)
            if moment is not None and moment.tzinfo is None:
                raise KeyringInvalid(f"a key period's {name} must be timezone-aware")
        if self.not_after is not None and self.not_after <= self.not_before:
            raise KeyringInvalid(
                f"a key period ends ({format_time(self.not_after)}) before it starts "
                f"({format_time(self.not_before)}): notAfter must be after notBefore"
            )
        if self.role is not None and self.role not in get_args(KeyRole):
            raise KeyringInvalid(
                f"a key period's role is one of {', '.join(get_args(KeyRole))}, not {self.role!r}"
            )

    def refusal(self, at: datetime) -> tuple[str, str] | None:
        """Why a signature made at ``at`` is outside this period: ``(reason, message)``
        with a :class:`SignatureInvalid` reason, or ``None`` when it is inside."""
        if self.revoked_at is not None and self.revoked_at <= at:
            return "KEY_REVOKED", (
                f"revoked at {format_time(self.revoked_at)}: it verifies nothing signed "
                f"since ({format_time(at)}); use the signer's current key"
            )
        if at < self.not_before:
            return "KEY_NOT_YET_VALID", (
                f"valid from {format_time(self.not_before)}, after the signing time "
                f"{format_time(at)}; check the signer's clock or key set"
            )
        if self.not_after is not None and at > self.not_after:
            return "KEY_EXPIRED", (
                f"valid until {format_time(self.not_after)}, before the signing time "
                f"{format_time(at)}; the signer must sign with its current key"
            )
        return None


class Keyring:
    """The public keys a verifier knows, each vouched for by an issuer, and
    the issuers it trusts. A key whose issuer is not trusted verifies nothing.
    A key may carry a :class:`KeyPeriod`: then it verifies only what was signed
    inside it, when the verifier says when that was (``resolve(kid, at)``).
    """

    def __init__(
        self,
        keys: Iterable[tuple[PublicKey, str]] = (),
        trusted_issuers: Iterable[str] = (),
    ) -> None:
        self._keys: dict[str, tuple[PublicKey, str]] = {}
        self._periods: dict[str, KeyPeriod] = {}
        self._trusted: set[str] = set(trusted_issuers)
        for key, issuer in keys:
            self.add(key, issuer)

    def add(self, key: PublicKey, issuer: str, period: KeyPeriod | None = None) -> None:
        """Add ``key`` as vouched for by ``issuer``, valid in ``period`` if one is given.

        Adding a key already held is a no-op when issuer and period are the same.

        Raises:
            KeyringInvalid: another key already has this kid, this key already has
                another issuer, or it is already held with another period (or none).
        """
        known = self._keys.get(key.kid)
        if known is not None and known[0].raw != key.raw:
            raise KeyringInvalid(f"two different keys share kid {key.kid!r}", kid=key.kid)
        if known is not None and known[1] != issuer:
            raise KeyringInvalid(
                f"key {key.kid!r} is vouched for by both {known[1]!r} and {issuer!r}; "
                "keep one entry",
                kid=key.kid,
            )
        if known is not None and self._periods.get(key.kid) != period:
            raise KeyringInvalid(
                f"key {key.kid!r} is already held with another period; build the keyring "
                "from one key set (the newest) rather than merging two that disagree",
                kid=key.kid,
            )
        self._keys[key.kid] = (key, issuer)
        if period is not None:
            self._periods[key.kid] = period

    def period(self, kid: str) -> KeyPeriod | None:
        """The period of the key with this kid; ``None`` if it has none or is not held."""
        return self._periods.get(kid)

    def include(self, other: Keyring) -> None:
        """Add every key ``other`` holds, each with its issuer and period, and trust the
        issuers ``other`` trusts (a partner's key set joining this keyring).

        Raises:
            KeyringInvalid: a key clashes with one held already (another key under its
                kid, another issuer or another period).
        """
        for kid, (key, issuer) in sorted(other._keys.items()):
            self.add(key, issuer, other.period(kid))
        self._trusted |= other._trusted

    def trust(self, issuer: str) -> None:
        """Trust keys vouched for by ``issuer``."""
        self._trusted.add(issuer)

    def resolve(self, kid: str, at: datetime | None = None) -> tuple[PublicKey, str]:
        """Return the key with this kid and its issuer, if the issuer is trusted and,
        when ``at`` (the signing time, timezone-aware) is given and the key has a
        period, ``at`` is inside it ([SIG-PERIOD]).

        Raises:
            SignatureInvalid: reason ``KID_UNKNOWN``, ``ISSUER_UNTRUSTED``,
                ``KEY_REVOKED``, ``KEY_NOT_YET_VALID`` or ``KEY_EXPIRED``.
            ValueError: ``at`` is a naive datetime.
        """
        found = self._keys.get(kid)
        if found is None:
            raise SignatureInvalid(
                "KID_UNKNOWN",
                f"no key with kid {kid!r} in the keyring; add the signer's public key",
                kid=kid,
            )
        if found[1] not in self._trusted and _checks.is_on("SIG-ISSUER"):
            raise SignatureInvalid(
                "ISSUER_UNTRUSTED",
                f"key {kid!r} is vouched for by {found[1]!r}, an issuer this keyring "
                "does not trust",
                kid=kid,
                issuer=found[1],
            )
        if at is None:
            return found
        return self._in_period(found, at)

    def _in_period(self, found: tuple[PublicKey, str], at: datetime) -> tuple[PublicKey, str]:
        if at.tzinfo is None:
            raise ValueError("the signing time must be timezone-aware")
        kid = found[0].kid
        period = self._periods.get(kid)
        if period is None or not _checks.is_on("SIG-PERIOD"):
            return found
        refused = period.refusal(at)
        if refused is None:
            return found
        reason, why = refused
        raise SignatureInvalid(reason, f"key {kid!r} is {why}", kid=kid, at=format_time(at))

    def kids(self) -> list[str]:
        """Return every key id in the keyring, sorted."""
        return sorted(self._keys)

    def issued_by(self, issuer: str) -> list[PublicKey]:
        """Return the keys ``issuer`` vouches for, by kid, if the keyring trusts ``issuer``
        (none otherwise): what a well-known document publishes as ``issuer``'s."""
        if issuer not in self._trusted and _checks.is_on("SIG-ISSUER"):
            return []
        return [key for kid, (key, by) in sorted(self._keys.items()) if by == issuer]

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def trusted_issuers(self) -> list[str]:
        """The issuers whose keys this keyring trusts, sorted."""
        return sorted(self._trusted)

    def to_json(self) -> dict[str, Any]:
        """Return the keyring document (see ``schemas/KeyringDocument.json``)."""
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "trustedIssuers": self.trusted_issuers,
            "keys": [
                {**key.to_jwk(), "issuer": issuer, **_period_members(self._periods.get(key.kid))}
                for key, issuer in sorted(self._keys.values(), key=lambda item: item[0].kid)
            ],
        }

    @classmethod
    def from_json(cls, doc: Any) -> Keyring:
        """Build a keyring from its document.

        Raises:
            KeyringInvalid: the document is not a keyring.
            VersionUnsupported: it names a version this build does not know.
        """
        if not isinstance(doc, dict):
            raise KeyringInvalid("a keyring is a JSON object")
        require_supported(doc, "keyring")
        try:
            parsed = KeyringDocument.model_validate(doc)
        except ValidationError as exc:
            raise KeyringInvalid(f"not a keyring: {_first_error(exc)}") from None
        keyring = cls(trusted_issuers=parsed.trusted_issuers)
        for entry in parsed.keys:
            try:
                key = PublicKey.from_jwk(entry.to_wire())
            except KeyInvalid as exc:
                raise KeyringInvalid(f"key {entry.kid!r}: {exc.message}") from None
            keyring.add(key, entry.issuer, _entry_period(entry))
        return keyring

    @classmethod
    def load(cls, path: str | Path) -> Keyring:
        """Read a keyring file.

        Raises:
            KeyringInvalid: unreadable, not JSON, or not a keyring.
            VersionUnsupported: it names a version this build does not know.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyringInvalid(f"cannot read keyring {path}: {exc.strerror}") from None
        try:
            doc = parse_json(data)
        except InvalidJson as exc:
            raise KeyringInvalid(f"{path} is not a keyring: {exc.message}") from None
        return cls.from_json(doc)

    def save(self, path: str | Path) -> None:
        """Write the keyring document to ``path``."""
        Path(path).write_text(_json_text(self.to_json()), encoding="utf-8")

    @classmethod
    def discover(
        cls,
        url: str,
        *,
        pin: str,
        cache_dir: str | Path | None = None,
        now: datetime | None = None,
        timeout_seconds: float = 10.0,
        client: httpx2.Client | None = None,
        max_age: timedelta | None = None,
    ) -> Keyring:
        """The keyring of the key set an organisation publishes at ``url`` (its base URL
        or the set's), signed by the root whose RFC 7638 thumbprint is ``pin``: every
        key with its issuer and period (docs/spec.md [KEYSET-FETCH]). See
        :func:`hatp.evidence.discover_key_set` for the cache and the arguments.

        Raises:
            KeySetInvalid: the set cannot be fetched (``UNREACHABLE``) or is refused.
            VersionUnsupported: the set names a version this build does not know.
            ConfigInvalid: ``cache_dir`` cannot be written.
        """
        from hatp.evidence._discover import MAX_CACHE_AGE, discover_key_set  # it imports us

        return discover_key_set(
            url,
            pin=pin,
            cache_dir=cache_dir,
            now=now,
            timeout_seconds=timeout_seconds,
            client=client,
            max_age=MAX_CACHE_AGE if max_age is None else max_age,
        ).keyring()


def _period_members(period: KeyPeriod | None) -> dict[str, Any]:
    """A key's period as keyring members (docs/spec.md [KEYRING-DOC]): none without one."""
    if period is None:
        return {}
    members: dict[str, Any] = {
        "notBefore": format_time(period.not_before),
        "notAfter": None if period.not_after is None else format_time(period.not_after),
        "revokedAt": None if period.revoked_at is None else format_time(period.revoked_at),
        "role": period.role,
        "organisation": period.organisation,
        "setVersion": period.set_version,
    }
    return {name: value for name, value in members.items() if value is not None}


def _entry_period(entry: KeyringEntry) -> KeyPeriod | None:
    if entry.not_before is None:
        return None
    return KeyPeriod(
        not_before=parse_time(entry.not_before),
        not_after=None if entry.not_after is None else parse_time(entry.not_after),
        revoked_at=None if entry.revoked_at is None else parse_time(entry.revoked_at),
        role=entry.role,
        organisation=entry.organisation,
        set_version=entry.set_version,
    )


def _json_text(doc: Any) -> str:
    import json

    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _first_error(exc: ValidationError) -> str:
    where, msg = first_error(exc)
    return f"{where or '(top)'}: {msg}"


def card_keyring(card: HumanCard) -> Keyring:
    """The Ed25519 keys on a person's Human Card, the person trusted as their issuer:
    what their own signed votes verify under."""
    keys = [PublicKey.from_jwk(k.to_wire()) for k in card.keys if isinstance(k, PublicJwk)]
    return Keyring(((key, card.id) for key in keys), trusted_issuers=[card.id])
