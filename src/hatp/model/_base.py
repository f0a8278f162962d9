"""The base every protocol type shares: wire names, no unknown fields, no coercion."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

#: ``sha256:`` + 43 characters of unpadded base64url (see docs/spec.md, DIG-FORM).
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[A-Za-z0-9_-]{43}$")]
#: A key id: printable, no spaces, at most 256 characters.
Kid = Annotated[str, StringConstraints(pattern=r"^[!-~]{1,256}$")]
#: A wire time: RFC 3339 in UTC with milliseconds, e.g. ``2026-12-02T16:48:08.123Z``.
WireTime = Annotated[
    str,
    StringConstraints(
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
    ),
]


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
