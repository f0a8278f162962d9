"""The one digest form: ``sha256:`` + unpadded base64url of SHA-256 over canonical JSON."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from hatp.evidence._b64 import b64url_encode
from hatp.evidence._canonical import canonicalize
from hatp.model._base import DIGEST_PATTERN

DIGEST_PREFIX = "sha256:"
_DIGEST_RE = re.compile(DIGEST_PATTERN)


def digest(value: Any) -> str:
    """Return the digest of a JSON value: SHA-256 over its canonical bytes.

    Raises:
        InvalidJson: the value has no canonical form.
    """
    return digest_bytes(canonicalize(value))


def digest_bytes(data: bytes) -> str:
    """Return the digest text form of raw bytes (already canonical, or a blob)."""
    return DIGEST_PREFIX + b64url_encode(hashlib.sha256(data).digest())


def is_digest(text: object) -> bool:
    """Whether ``text`` is a well-formed digest string."""
    return isinstance(text, str) and _DIGEST_RE.fullmatch(text) is not None
