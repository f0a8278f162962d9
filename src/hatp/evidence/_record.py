"""Writing a Transaction Record: signed events, each chained to the one before."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from hatp.clock import EARLIEST_WIRE_TIME, LATEST_WIRE_TIME, Clock, format_time
from hatp.errors import RecordInvalid
from hatp.evidence._canonical import canonical_plain, canonicalize, json_bytes, plain_bytes
from hatp.evidence._digest import digest_bytes
from hatp.evidence._keys import SigningKey
from hatp.evidence._signing import refuse_unreadable, sign, signed_with
from hatp.model import SEAL_EVENT, RecordEvent
from hatp.version import PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class WrittenEvent:
    """A record event as its writer signed it: its position, its time and its
    canonical bytes (what its signature and the next event's ``prev`` are over),
    for a store to keep without canonicalizing it again."""

    seq: int
    time: str
    canonical: bytes


class RecordWriter:
    """Appends signed, hash-chained events to one record.

    Each event names the record, its position (``seq``), the digest of the
    event before it (``prev``), its type, time, the emitting party's ``kid``
    and a body, and is signed by that party. The digest of the last event
    (``head``) names the whole record. :meth:`seal` closes it.

    The writer keeps each event as JSON bytes (in the order its members were
    written, for people reading the record; the digest and signature are over
    the canonical bytes), and its canonical bytes for the store
    (:meth:`written_since`): an event is never changed once signed, and every event
    the writer hands out is a fresh parse of those bytes (or, from
    :meth:`append`, the one object it built and did not keep), so nothing a
    caller does to what it was given edits the chain.
    """

    def __init__(self, record_id: str, clock: Clock) -> None:
        if not record_id or len(record_id) > 256:
            raise RecordInvalid("a record id is 1 to 256 characters", record_id=record_id)
        self.record_id = record_id
        self._clock = clock
        self._texts: list[bytes] = []
        self._written: list[WrittenEvent] = []
        self._head: str | None = None
        self._last_time = ""
        self._sealed = False

    @classmethod
    def resume(cls, record: Mapping[str, Any], clock: Clock) -> RecordWriter:
        """Continue a record read back from the writer's own durable store.

        The events are taken as they are: verify a record from anywhere else
        with :func:`verify_record` first.
        """
        writer = cls(str(record["recordId"]), clock)
        for event in record["events"]:
            kept = dict(event)
            writer._accept(kept, canonicalize(kept), str(event["type"]), str(event["time"]))
        return writer

    @property
    def head(self) -> str | None:
        """The digest of the last event, or ``None`` for an empty record."""
        return self._head

    @property
    def sealed(self) -> bool:
        """Whether the record has been sealed; nothing may be appended after."""
        return self._sealed

    def events(self) -> list[dict[str, Any]]:
        """Return the events so far, as a copy of their own."""
        return _parsed(self._texts)

    def written_since(self, start: int) -> list[WrittenEvent]:
        """The events from ``seq`` ``start`` on as they were signed (see :class:`WrittenEvent`).

        Raises:
            ValueError: ``start`` is negative or past the number of events.
        """
        if not 0 <= start <= len(self._written):
            raise ValueError(f"start must be from 0 to {len(self._written)}, not {start}")
        return self._written[start:]

    def append(
        self, event_type: str, body: Mapping[str, Any], signer: SigningKey
    ) -> dict[str, Any]:
        """Sign and append one event; return it (the writer keeps its bytes, not it).

        Raises:
            RecordInvalid: the record is sealed, or ``event_type`` is not a
                dotted lowercase name (``record.sealed`` is written by :meth:`seal`).
            InvalidJson: ``body`` has no canonical form, or the record would not read
                back through the strict reader with it ([JCS-READBACK]).
        """
        if event_type == SEAL_EVENT:
            raise RecordInvalid("use seal() to close a record")
        return self._append(event_type, dict(body), signer)

    def seal(self, signer: SigningKey) -> dict[str, Any]:
        """Close the record with a ``record.sealed`` event that counts the events before it.

        A verifier refuses a record without one, so cutting events off the
        end is detected.
        """
        return self._append(SEAL_EVENT, {"eventCount": len(self._texts)}, signer)

    def to_json(self) -> dict[str, Any]:
        """Return the record document (see ``schemas/TransactionRecord.json``)."""
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "recordId": self.record_id,
            "events": self.events(),
            "head": self._head,
        }

    def _append(self, event_type: str, body: dict[str, Any], signer: SigningKey) -> dict[str, Any]:
        if self._sealed:
            raise RecordInvalid(f"record {self.record_id} is sealed; nothing may follow")
        moment = self._clock.now()
        # A wall clock can step backwards; the record's times never do.
        time = max(format_time(moment), self._last_time)
        unsigned = {
            "hatpVersion": PROTOCOL_VERSION,
            "recordId": self.record_id,
            "seq": len(self._texts),
            "prev": self._head,
            "type": event_type,
            "time": time,
            "kid": signer.kid,
            "body": body,
        }
        # One walk: the canonical bytes to sign, and whether the record reads back.
        payload = canonical_plain(unsigned, _EVENT_DEPTH)
        if payload is None:
            refuse_unreadable(unsigned, _EVENT_DEPTH)
        _check_envelope(unsigned, in_range=EARLIEST_WIRE_TIME <= moment < LATEST_WIRE_TIME)
        if payload is None:  # not plain JSON: the reference path, which names any problem
            event = sign(unsigned, signer)
            text = canonicalize(event)
        else:
            event = signed_with(unsigned, signer, payload)
            text = plain_bytes(event)  # the signature adds ASCII text only: still plain
        self._accept(event, text, event_type, time)
        return event

    def _accept(self, event: dict[str, Any], canonical: bytes, event_type: str, time: str) -> None:
        self._written.append(WrittenEvent(len(self._texts), time, canonical))
        self._texts.append(json_bytes(event, canonical))
        self._head = digest_bytes(canonical)
        self._last_time = time
        self._sealed = event_type == SEAL_EVENT


def _parsed(texts: list[bytes]) -> list[dict[str, Any]]:
    """Events parsed from the JSON bytes the writer keeps, in one go."""
    events: list[dict[str, Any]] = orjson.loads(b"[" + b",".join(texts) + b"]")
    return events


def _check_envelope(unsigned: dict[str, Any], *, in_range: bool) -> None:
    """Check an event's envelope as the event model does, the body and signature aside.

    The writer builds the envelope itself: its version, record id, position and
    ``prev`` are right by construction, and its time is right when the clock's
    reading is in the wire range (the last time was checked before). What is left,
    the event type and the signer's kid, is a pure function of two strings, checked
    once per pair; anything else goes through the model, for its message.

    Raises:
        RecordInvalid: the envelope is not a record event's.
    """
    names = unsigned["type"], unsigned["kid"]
    if in_range and type(names[0]) is str and type(names[1]) is str and _names_ok(*names):
        return
    try:
        RecordEvent.model_validate({**unsigned, "body": {}, "signature": _PLACEHOLDER})
    except ValueError as exc:
        raise RecordInvalid(f"cannot append {unsigned['type']!r}: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _names_ok(event_type: str, kid: str) -> bool:
    """Whether an event type and a kid pass the event model (cached: both are text)."""
    try:
        RecordEvent.model_validate({**_SAMPLE, "type": event_type, "kid": kid})
    except ValueError:
        return False
    return True


#: An event's depth in its record: the record, then its ``events`` array.
_EVENT_DEPTH = 2
_PLACEHOLDER = {"alg": "Ed25519", "kid": "-", "sig": "-"}
#: A valid envelope, for checking an event type and kid alone.
_SAMPLE = {
    "hatpVersion": PROTOCOL_VERSION,
    "recordId": "r",
    "seq": 0,
    "prev": None,
    "type": "sample.event",
    "time": "2026-01-01T00:00:00.000Z",
    "kid": "-",
    "body": {},
    "signature": _PLACEHOLDER,
}
