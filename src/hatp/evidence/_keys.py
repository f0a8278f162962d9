"""Ed25519 keys: generate, save, load, publish as JWK, and the verifier's keyring."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import ValidationError

from hatp import _checks
from hatp.errors import InvalidJson, KeyInvalid, KeyringInvalid, SignatureInvalid
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.evidence._strict_json import parse_json
from hatp.model import HumanCard, KeyringDocument, PublicJwk, first_error
from hatp.model._base import KID_PATTERN
from hatp.version import PROTOCOL_VERSION, require_supported

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


class Keyring:
    """The public keys a verifier knows, each vouched for by an issuer, and
    the issuers it trusts. A key whose issuer is not trusted verifies nothing.
    """

    def __init__(
        self,
        keys: Iterable[tuple[PublicKey, str]] = (),
        trusted_issuers: Iterable[str] = (),
    ) -> None:
        self._keys: dict[str, tuple[PublicKey, str]] = {}
        self._trusted: set[str] = set(trusted_issuers)
        for key, issuer in keys:
            self.add(key, issuer)

    def add(self, key: PublicKey, issuer: str) -> None:
        """Add ``key`` as vouched for by ``issuer``.

        Raises:
            KeyringInvalid: another key already has this kid, or this key
                already has another issuer.
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
        self._keys[key.kid] = (key, issuer)

    def trust(self, issuer: str) -> None:
        """Trust keys vouched for by ``issuer``."""
        self._trusted.add(issuer)

    def resolve(self, kid: str) -> tuple[PublicKey, str]:
        """Return the key with this kid and its issuer, if the issuer is trusted.

        Raises:
            SignatureInvalid: reason ``KID_UNKNOWN`` or ``ISSUER_UNTRUSTED``.
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
        return found

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
                {**key.to_jwk(), "issuer": issuer}
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
            keyring.add(key, entry.issuer)
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
