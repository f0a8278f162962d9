"""Wire types of the offline verifier's report."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from hatp.clock import WIRE_TIME_PATTERN
from hatp.model._base import WireModel
from hatp.model.keys import KeyRole

#: A time in a report: the wire form, checked by its pattern only. The verifier writes
#: these from times it has read and checked already, once per signature of a record of
#: any size, so the report does not check the calendar again.
_ReportTime = Annotated[str, StringConstraints(pattern=f"^{WIRE_TIME_PATTERN}$")]

#: A :class:`SignatureUse`'s status when the signature verified inside its key's period.
SIGNATURE_VALID = "valid"


class Result(StrEnum):
    """A rule's outcome. ``absent`` (the check could not run) never counts as a pass."""

    PASS = "pass"
    FAIL = "fail"
    ABSENT = "absent"


class Finding(WireModel):
    """One rule's outcome, for the whole record or for one event."""

    rule: str = Field(description="requirement id in docs/spec.md")
    result: Result
    detail: str
    event: int | None = Field(default=None, description="position of the event, if one")


class SignatureUse(WireModel):
    """One signature the verifier checked: where, under which key, at what time, and, for
    a key with a period (one from a key set), that period and whether the signature fell
    inside it (docs/spec.md [VER-PERIOD])."""

    event: int | None = Field(description="position of the event that is or carries it")
    where: str = Field(
        description='the event, and the signed object\'s path in it: "event 7", '
        '"event 7 body.receipt", "event 7 body.approval.votes[0]"'
    )
    kid: str | None = Field(description="the key id the signature names; null if it names none")
    issuer: str | None = Field(
        description="who the keyring says vouches for that key; null if it holds no such key"
    )
    at: _ReportTime | None = Field(
        description="the time it was checked at: the time of its event; null when that "
        "cannot be read ([REC-TIME] fails then) and no period was looked at"
    )
    role: KeyRole | None = Field(default=None, description="from the key's period, if it has one")
    organisation: str | None = Field(
        default=None, description="the organisation whose key set listed the key"
    )
    set_version: int | None = Field(default=None, description="the version of that key set")
    not_before: _ReportTime | None = Field(default=None, description="the key's period starts")
    not_after: _ReportTime | None = Field(
        default=None, description="the key's period ends; null: open-ended (or no period)"
    )
    revoked_at: _ReportTime | None = Field(default=None, description="the key was revoked then")
    status: str | None = Field(
        default=None,
        description='for a key with a period: "valid", or why the signature was refused '
        "(e.g. KEY_REVOKED, KEY_EXPIRED, BAD_SIGNATURE); null for a key without one",
    )


class VerificationReport(WireModel):
    """What ``hatp verify`` concludes about a record."""

    hatp_version: str
    record_id: str
    head: str | None
    events: int
    ok: bool = Field(description="true only if every finding is a pass")
    findings: list[Finding]
    signatures: list[SignatureUse] = Field(
        default_factory=list,
        description="every signature checked, once each, in record order ([VER-PERIOD])",
    )
