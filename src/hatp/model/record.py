"""Wire types of the Transaction Record: a signed, hash-chained list of events."""

from __future__ import annotations

from pydantic import Field

from hatp.model._base import Digest, JsonObject, Kid, WireModel, WireTime
from hatp.model.signature import Signature

#: Event types: dotted lowercase words, e.g. ``plan.proposed``, ``record.sealed``.
EVENT_TYPE_PATTERN = r"^[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)+$"
#: The event that closes a record; nothing may follow it.
SEAL_EVENT = "record.sealed"


class RecordEvent(WireModel):
    """One event of a record, signed by the party that emitted it."""

    hatp_version: str
    record_id: str = Field(min_length=1, max_length=256)
    seq: int = Field(ge=0, description="position in the record, from 0")
    prev: Digest | None = Field(description="digest of the previous event; null for seq 0")
    type: str = Field(pattern=EVENT_TYPE_PATTERN)
    time: WireTime
    kid: Kid = Field(description="the emitting party's key id")
    body: JsonObject
    signature: Signature


class TransactionRecord(WireModel):
    """A whole record: its id, its events in order, and the digest of the last one."""

    hatp_version: str
    record_id: str = Field(min_length=1, max_length=256)
    events: list[RecordEvent]
    head: Digest | None = Field(description="digest of the last event; names the record")
