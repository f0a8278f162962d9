"""Writing a Transaction Record: signed events, each chained to the one before."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hatp.clock import Clock, format_time
from hatp.errors import RecordInvalid
from hatp.evidence._canonical import copy_json
from hatp.evidence._digest import digest
from hatp.evidence._keys import SigningKey
from hatp.evidence._signing import refuse_unreadable, sign
from hatp.model import SEAL_EVENT, RecordEvent
from hatp.version import PROTOCOL_VERSION


class RecordWriter:
    """Appends signed, hash-chained events to one record.

    Each event names the record, its position (``seq``), the digest of the
    event before it (``prev``), its type, time, the emitting party's ``kid``
    and a body, and is signed by that party. The digest of the last event
    (``head``) names the whole record. :meth:`seal` closes it.
    """

    def __init__(self, record_id: str, clock: Clock) -> None:
        if not record_id or len(record_id) > 256:
            raise RecordInvalid("a record id is 1 to 256 characters", record_id=record_id)
        self.record_id = record_id
        self._clock = clock
        self._events: list[dict[str, Any]] = []
        self._head: str | None = None
        self._last_time = ""

    @classmethod
    def resume(cls, record: Mapping[str, Any], clock: Clock) -> RecordWriter:
        """Continue a record read back from the writer's own durable store.

        The events are taken as they are: verify a record from anywhere else
        with :func:`verify_record` first.
        """
        writer = cls(str(record["recordId"]), clock)
        for event in record["events"]:
            writer._accept(copy_json(dict(event)))
        return writer

    @property
    def head(self) -> str | None:
        """The digest of the last event, or ``None`` for an empty record."""
        return self._head

    @property
    def sealed(self) -> bool:
        """Whether the record has been sealed; nothing may be appended after."""
        return bool(self._events) and self._events[-1]["type"] == SEAL_EVENT

    def events(self) -> list[dict[str, Any]]:
        """Return a deep copy of the events so far."""
        return copy_json(self._events)

    def events_since(self, start: int) -> list[dict[str, Any]]:
        """Return a deep copy of the events from ``seq`` ``start`` on (every event for 0).

        Only those events are copied, so a writer that makes its record durable
        piece by piece does not copy the whole record at every step.

        Raises:
            ValueError: ``start`` is negative or past the number of events.
        """
        if not 0 <= start <= len(self._events):
            raise ValueError(f"start must be from 0 to {len(self._events)}, not {start}")
        return copy_json(self._events[start:])

    def append(
        self, event_type: str, body: Mapping[str, Any], signer: SigningKey
    ) -> dict[str, Any]:
        """Sign and append one event; return it.

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
        return self._append(SEAL_EVENT, {"eventCount": len(self._events)}, signer)

    def to_json(self) -> dict[str, Any]:
        """Return the record document (see ``schemas/TransactionRecord.json``)."""
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "recordId": self.record_id,
            "events": self.events(),
            "head": self._head,
        }

    def _append(self, event_type: str, body: dict[str, Any], signer: SigningKey) -> dict[str, Any]:
        if self.sealed:
            raise RecordInvalid(f"record {self.record_id} is sealed; nothing may follow")
        # A wall clock can step backwards; the record's times never do.
        time = max(format_time(self._clock.now()), self._last_time)
        unsigned = {
            "hatpVersion": PROTOCOL_VERSION,
            "recordId": self.record_id,
            "seq": len(self._events),
            "prev": self._head,
            "type": event_type,
            "time": time,
            "kid": signer.kid,
            "body": body,
        }
        refuse_unreadable(unsigned, _EVENT_DEPTH)
        try:
            # The envelope only: the body was just checked, whole, by refuse_unreadable
            # (all the event model checks of it), and is walked once more to sign it.
            RecordEvent.model_validate({**unsigned, "body": {}, "signature": _PLACEHOLDER})
        except ValueError as exc:
            raise RecordInvalid(f"cannot append {event_type!r}: {exc}") from None
        event = sign(unsigned, signer)
        self._accept(event)
        return copy_json(event)

    def _accept(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        self._head = digest(event)
        self._last_time = str(event["time"])


#: An event's depth in its record: the record, then its ``events`` array.
_EVENT_DEPTH = 2
_PLACEHOLDER = {"alg": "Ed25519", "kid": "-", "sig": "-"}
