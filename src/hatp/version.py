"""The protocol version this build speaks, and the versions it can read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hatp import _checks
from hatp.errors import VersionUnsupported

__all__ = ["PROTOCOL_VERSION", "SUPPORTED_VERSIONS", "VERSION_FIELD", "require_supported"]

#: The version written into every signed object and record this build makes.
PROTOCOL_VERSION = "0.1"
#: Every version this build can verify. Anything else is refused by name.
SUPPORTED_VERSIONS: frozenset[str] = frozenset({PROTOCOL_VERSION})
#: The member that carries the version in every signed object and record.
VERSION_FIELD = "hatpVersion"


def require_supported(obj: Mapping[str, Any], what: str = "object") -> str:
    """Return the object's protocol version, or refuse one this build does not know.

    Raises:
        VersionUnsupported: the version is missing, not a string, or unknown [VER-KNOWN].
    """
    version = obj.get(VERSION_FIELD)
    if isinstance(version, str) and version in SUPPORTED_VERSIONS:
        return version
    if not _checks.is_on("VER-KNOWN"):
        return str(version)
    if version is None:
        raise VersionUnsupported(
            f"the {what} carries no {VERSION_FIELD}; this build reads "
            f"{', '.join(sorted(SUPPORTED_VERSIONS))}",
            rule="VER-KNOWN",
            found=None,
            supported=sorted(SUPPORTED_VERSIONS),
        )
    raise VersionUnsupported(
        f"the {what} is hatp version {version!r}, which this build does not know; "
        f"it reads {', '.join(sorted(SUPPORTED_VERSIONS))}: upgrade hatp to check it",
        rule="VER-KNOWN",
        found=version,
        supported=sorted(SUPPORTED_VERSIONS),
    )
