"""Wire types of the offline verifier's report."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from hatp.model._base import WireModel


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


class VerificationReport(WireModel):
    """What ``hatp verify`` concludes about a record."""

    hatp_version: str
    record_id: str
    head: str | None
    events: int
    ok: bool = Field(description="true only if every finding is a pass")
    findings: list[Finding]
