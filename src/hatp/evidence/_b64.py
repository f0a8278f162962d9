"""Strict base64url without padding (RFC 4648 §5), the only binary text form on the wire."""

from __future__ import annotations

import base64
import binascii

from hatp import _checks


def b64url_encode(data: bytes) -> str:
    """Encode ``data`` as base64url with the padding stripped."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode unpadded base64url, refusing every non-canonical spelling.

    Python's own decoder skips stray characters and ignores the unused low
    bits of the last character, so two different strings can decode to the
    same bytes; for signatures that is malleability, so we refuse it.

    Raises:
        ValueError: ``text`` is not the one canonical base64url spelling of some bytes.
    """
    if not _checks.is_on("SIG-ENCODING"):
        # The lenient behaviour a naive verifier has; only the switch-off test sees it.
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if not text.isascii() or "=" in text or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
    try:
        data = binascii.a2b_base64(padded, strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64url: {exc}") from None
    if b64url_encode(data) != text:
        raise ValueError("non-canonical base64url (unused bits set)")
    return data
