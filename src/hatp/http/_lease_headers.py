"""The PTCL headers: a lease and a commit receipt in a header, and the fence token.

``Agent-Compensation-Lease`` and ``Agent-Commit-Receipt`` carry a signed
document as base64url without padding (RFC 4648 §5) of its RFC 8785
canonical JSON; ``Agent-Fence-Token`` is the decimal ``casFenceEpoch`` the
writer writes at.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from hatp.errors import HeaderInvalid
from hatp.evidence import canonicalize

__all__ = [
    "FENCE_HEADER",
    "LEASE_HEADER",
    "RECEIPT_HEADER",
    "decode_header",
    "encode_header",
    "header_bytes",
    "parse_fence_token",
    "strict_decode",
]

#: The header that carries the compensation lease of a mutation.
LEASE_HEADER = "Agent-Compensation-Lease"
#: The header that carries the epoch a writer writes at.
FENCE_HEADER = "Agent-Fence-Token"
#: The header that carries the signed commit receipt of a mutation applied under a lease.
RECEIPT_HEADER = "Agent-Commit-Receipt"

_BASE64URL = re.compile(rb"[A-Za-z0-9_-]*")
#: One spelling per value: no sign, no leading zero, at most 19 digits.
_DECIMAL = re.compile(rb"0|[1-9][0-9]{0,18}")
_MAX_EPOCH = 2**63 - 1


def encode_header(doc: Mapping[str, Any]) -> str:
    """Return ``doc`` as a header value: base64url, unpadded, of its canonical JSON.

    Raises:
        InvalidJson: ``doc`` has no canonical form (a float, NaN, a lone surrogate …).
    """
    return base64.urlsafe_b64encode(canonicalize(dict(doc))).rstrip(b"=").decode("ascii")


def decode_header(value: str | bytes) -> bytes:
    """Return the document a header value carries; never raises.

    A value that is the one canonical unpadded base64url spelling of some
    bytes gives those bytes; any other value is returned as it came (its
    bytes), so that a verifier refuses it and signs a receipt naming it.
    Spaces and tabs around the value are not part of it (RFC 9110 §5.5).
    """
    raw = _raw(value)
    decoded = strict_decode(raw)
    return raw if decoded is None else decoded


def strict_decode(value: str | bytes) -> bytes | None:
    """The bytes ``value`` spells in canonical unpadded base64url, or ``None``."""
    raw = _raw(value)
    if len(raw) % 4 == 1 or not _BASE64URL.fullmatch(raw):
        return None
    padded = raw.replace(b"-", b"+").replace(b"_", b"/") + b"=" * (-len(raw) % 4)
    try:
        data = binascii.a2b_base64(padded, strict_mode=True)
    except binascii.Error:
        return None
    # Unused low bits set in the last character: another spelling of the same bytes.
    if base64.urlsafe_b64encode(data).rstrip(b"=") != raw:
        return None
    return data


def parse_fence_token(value: str | bytes) -> int:
    """Return the epoch an ``Agent-Fence-Token`` value names.

    Raises:
        HeaderInvalid: the value is not one decimal integer from 0 to 2^63 - 1,
            written without sign or leading zeros (``data.header``).
    """
    raw = _raw(value)
    if _DECIMAL.fullmatch(raw) and int(raw) <= _MAX_EPOCH:
        return int(raw)
    shown = raw[:40].decode("ascii", "replace")
    raise HeaderInvalid(
        f"{FENCE_HEADER} is the decimal casFenceEpoch the writer writes at (e.g. 8), "
        f"not {shown!r}; nothing ran",
        header=FENCE_HEADER,
    )


def _raw(value: str | bytes) -> bytes:
    """A header value's bytes, without the spaces and tabs around it (RFC 9110 §5.5)."""
    return (value.encode("latin-1", "replace") if isinstance(value, str) else value).strip(b" \t")


def header_bytes(headers: list[tuple[bytes, bytes]], name: str) -> bytes | None:
    """The value of header ``name`` in raw ASGI ``headers``: several lines of it are
    joined with ``,`` (RFC 9110 §5.3); ``None`` when there is none."""
    wanted = name.lower().encode("latin-1")
    found = [value for key, value in headers if key.lower() == wanted]
    return b",".join(found) if found else None
