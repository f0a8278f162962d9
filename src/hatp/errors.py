"""The one exception tree of hatp.

Every refusal hatp makes is one of these. Each carries a stable string
``code`` (part of the wire contract, listed in ``docs/spec.md``), a ``message``
that tells a person what to fix, and structured ``data``. The same object is
rendered as the CLI's exit message, and later as the HTTP error body and the
MCP JSON-RPC error.

    HatpError
    ├── InvalidJson            INVALID_JSON
    ├── VersionUnsupported     VERSION_UNSUPPORTED
    ├── SignatureInvalid       SIGNATURE_INVALID   (data.reason says which check)
    ├── KeyInvalid             KEY_INVALID
    ├── KeyringInvalid         KEYRING_INVALID
    └── RecordInvalid          RECORD_INVALID
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "SIGNATURE_REASON_RULES",
    "HatpError",
    "InvalidJson",
    "KeyInvalid",
    "KeyringInvalid",
    "RecordInvalid",
    "SignatureInvalid",
    "VersionUnsupported",
    "error_from_dict",
]


class HatpError(Exception):
    """Base of every hatp error: a stable ``code``, a ``message`` and ``data``."""

    code: ClassVar[str] = "HATP_ERROR"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form ``{"code", "message", "data"}``."""
        return {"code": self.code, "message": self.message, "data": dict(self.data)}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidJson(HatpError):
    """A document is not strict JSON, or a value cannot be canonicalized.

    ``data.where`` locates the problem: a JSON Pointer into the document, or
    ``line:column`` for a syntax error.
    """

    code = "INVALID_JSON"


class VersionUnsupported(HatpError):
    """An object or record names a protocol version this build does not know."""

    code = "VERSION_UNSUPPORTED"


#: Which requirement of docs/spec.md each signature refusal reason enforces.
SIGNATURE_REASON_RULES: dict[str, str] = {
    "MISSING": "SIG-MEMBER",
    "MALFORMED": "SIG-MEMBER",
    "ALG_NONE": "SIG-ALG",
    "ALG_UNKNOWN": "SIG-ALG",
    "KID_UNKNOWN": "SIG-KID",
    "ISSUER_UNTRUSTED": "SIG-ISSUER",
    "BAD_ENCODING": "SIG-ENCODING",
    "BAD_LENGTH": "SIG-LENGTH",
    "BAD_SIGNATURE": "SIG-CRYPTO",
}


class SignatureInvalid(HatpError):
    """A signature did not verify.

    ``data.reason`` is the stable reason code (a key of
    :data:`SIGNATURE_REASON_RULES`) and ``data.rule`` the requirement it enforces.
    """

    code = "SIGNATURE_INVALID"

    def __init__(self, reason: str, message: str, **data: Any) -> None:
        rule = SIGNATURE_REASON_RULES.get(reason, "SIG-CRYPTO")
        super().__init__(message, reason=reason, rule=rule, **data)

    @property
    def reason(self) -> str:
        """The stable reason code, e.g. ``ALG_NONE`` or ``BAD_SIGNATURE``."""
        return str(self.data["reason"])


class KeyInvalid(HatpError):
    """A key file or JWK is malformed, or a key file would be overwritten."""

    code = "KEY_INVALID"


class KeyringInvalid(HatpError):
    """A keyring document is malformed."""

    code = "KEYRING_INVALID"


class RecordInvalid(HatpError):
    """A document is not a Transaction Record at all (wrong top-level shape)."""

    code = "RECORD_INVALID"


def error_from_dict(doc: Mapping[str, Any]) -> HatpError:
    """Rebuild a typed error from its wire form (the inverse of ``to_dict``)."""
    classes: dict[str, type[HatpError]] = {c.code: c for c in _all_subclasses(HatpError)}
    cls = classes.get(str(doc.get("code")), HatpError)
    data = dict(doc.get("data") or {})
    message = str(doc.get("message", ""))
    if cls is SignatureInvalid:
        reason = str(data.pop("reason", "UNKNOWN"))
        data.pop("rule", None)
        return SignatureInvalid(reason, message, **data)
    return cls(message, **data)


def _all_subclasses(cls: type[HatpError]) -> list[type[HatpError]]:
    found: list[type[HatpError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found
