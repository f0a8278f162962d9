"""The base every protocol type shares: wire names, no unknown fields, no coercion."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel

from hatp.clock import WIRE_TIME_PATTERN

#: ``sha256:`` + 43 characters of unpadded base64url (docs/spec.md, DIG-FORM). Match whole.
DIGEST_PATTERN = r"sha256:[A-Za-z0-9_-]{43}"
#: A key id: printable ASCII, no spaces, at most 256 characters. Match whole.
KID_PATTERN = r"[!-~]{1,256}"

Digest = Annotated[str, StringConstraints(pattern=f"^{DIGEST_PATTERN}$")]
Kid = Annotated[str, StringConstraints(pattern=f"^{KID_PATTERN}$")]
#: A wire time: RFC 3339 in UTC with milliseconds, e.g. ``2026-12-02T16:48:08.123Z``.
WireTime = Annotated[str, StringConstraints(pattern=f"^{WIRE_TIME_PATTERN}$")]


class WireModel(BaseModel):
    """A protocol type: camelCase on the wire, strict types, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
    )

    def to_wire(self) -> dict[str, object]:
        """Return the JSON-ready wire form (camelCase names, ``None`` members kept)."""
        return self.model_dump(mode="json", by_alias=True)


def first_error(exc: ValidationError) -> tuple[str, str]:
    """The first problem pydantic found: where (member names joined by ``/``, no
    leading slash; empty for the top) and what, for a refusal that names the member."""
    error = exc.errors()[0]
    return "/".join(str(part) for part in error["loc"]), error["msg"]
