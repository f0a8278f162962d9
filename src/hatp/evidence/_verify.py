"""The offline verifier: every signature against a keyring, and the chain.

A transaction's record (one with ``txn.*`` events) is also checked against
the transaction rules of :mod:`hatp.evidence._verify_txn`, reported after
the chain rules.

Every signature is checked at the time of the event that is or carries it
(docs/spec.md [VER-PERIOD]): a key from a key set verifies only what its event
shows was signed inside the key's period. The report lists each signature
checked, with that time and the key's period.

A record passes only if every rule ran and passed. A rule that could not run
(an empty record, say) is reported ``absent``, and absent is never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hatp.errors import InvalidJson, RecordInvalid, SignatureInvalid, VersionUnsupported
from hatp.evidence._digest import digest
from hatp.evidence._keys import Keyring
from hatp.evidence._strict_json import parse_json
from hatp.evidence._tally import Place, Signatures, Tally
from hatp.evidence._txn_read import is_transaction, wire_time
from hatp.evidence._verify_txn import transaction_findings
from hatp.model import SEAL_EVENT, RecordEvent, Result, VerificationReport
from hatp.version import (
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    VERSION_FIELD,
    require_supported,
)

#: The chain rules, in report order, with what a pass means.
CHAIN_RULES: dict[str, str] = {
    "REC-VERSION": "every event names a protocol version this verifier knows",
    "REC-SHAPE": "every event has the record-event form",
    "REC-ID": "every event belongs to this record",
    "REC-SEQ": "events are numbered 0, 1, 2, … in order",
    "REC-PREV": "every event names the digest of the event before it",
    "REC-KID": "every event is signed by the party it names",
    "REC-SIG": "every event's signature verifies with a trusted key",
    "REC-TIME": "event times never go backwards",
    "REC-SEAL": "the record ends with one record.sealed event counting the rest",
    "REC-HEAD": "the head digest is the digest of the last event",
    "REC-UNSIGNED": "the record holds nothing unsigned but its version, id, events and head",
}

#: The members of a record; everything else in one would be bytes nobody signed.
RECORD_MEMBERS = frozenset({VERSION_FIELD, "recordId", "events", "head"})


def load_record(path: str | Path) -> dict[str, Any]:
    """Read a record file with the strict JSON reader.

    Raises:
        RecordInvalid: the file cannot be read or is not a JSON object.
        InvalidJson: the file is not strict JSON.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RecordInvalid(f"cannot read {path}: {exc.strerror}") from None
    doc = parse_json(data)
    if not isinstance(doc, dict):
        raise RecordInvalid(f"{path} is not a Transaction Record (not a JSON object)")
    return doc


def verify_record(
    record: Mapping[str, Any], keyring: Keyring, *, expected_head: str | None = None
) -> VerificationReport:
    """Check a Transaction Record offline; return a finding per rule.

    ``expected_head`` pins the head digest learned elsewhere (a receipt, a
    log), which also catches a record cut short and re-sealed by a key holder.

    Raises:
        RecordInvalid: ``record`` is not a record at all (no ``recordId`` or
            ``events`` list).
        VersionUnsupported: the record names a version this build does not know.
    """
    record_id, events = _outline(record)
    tally = Tally(CHAIN_RULES)
    signatures = Signatures()
    previous_digest: str | None = None
    previous_time = ""
    for position, event in enumerate(events):
        if not isinstance(event, dict):
            tally.fail("REC-SHAPE", f"event {position} is not a JSON object", position)
            previous_digest = None
            continue
        at = wire_time(event.get("time"))
        _check_event(tally, keyring, signatures, position, event, record_id, previous_digest, at)
        previous_time = _check_time(tally, position, event, previous_time, at)
        try:
            previous_digest = digest(event)
        except InvalidJson:
            previous_digest = None
    head = previous_digest if events else None
    _check_seal(tally, events)
    _check_head(tally, record.get("head"), head, expected_head, bool(events))
    _check_unsigned(tally, record)
    findings = tally.findings({"REC-SIG": f"{len(events)} event signatures verify"})
    if is_transaction(events):
        findings += transaction_findings(record_id, events, keyring, signatures)
    return VerificationReport(
        hatp_version=PROTOCOL_VERSION,
        record_id=record_id,
        head=head,
        events=len(events),
        ok=all(f.result is Result.PASS for f in findings),
        findings=findings,
        signatures=signatures.uses(),
    )


def _outline(record: Mapping[str, Any]) -> tuple[str, list[Any]]:
    if not isinstance(record, Mapping):
        raise RecordInvalid("a Transaction Record is a JSON object")
    record_id, events = record.get("recordId"), record.get("events")
    if not isinstance(record_id, str) or not isinstance(events, list):
        raise RecordInvalid(
            "not a Transaction Record: it needs a string recordId and an events array"
        )
    require_supported(record, "record")
    return record_id, events


def _name(position: int, event: Mapping[str, Any]) -> str:
    kind = event.get("type")
    return f"event {position} ({kind})" if isinstance(kind, str) else f"event {position}"


def _check_event(
    tally: Tally,
    keyring: Keyring,
    signatures: Signatures,
    position: int,
    event: dict[str, Any],
    record_id: str,
    previous_digest: str | None,
    at: datetime | None,
) -> None:
    def name() -> str:
        return _name(position, event)

    version, seq, kid = event.get(VERSION_FIELD), event.get("seq"), event.get("kid")
    tally.expect(
        "REC-VERSION",
        isinstance(version, str) and version in SUPPORTED_VERSIONS,
        position,
        lambda: (
            f"{name()} is hatp version {version!r}; this verifier reads "
            f"{', '.join(sorted(SUPPORTED_VERSIONS))}"
        ),
    )
    try:
        RecordEvent.model_validate(event)
        tally.ran("REC-SHAPE")
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        tally.fail("REC-SHAPE", f"{name()}: {where}: {error['msg']}", position)
    tally.expect(
        "REC-ID",
        event.get("recordId") == record_id,
        position,
        lambda: (
            f"{name()} belongs to record {event.get('recordId')!r}, not {record_id!r} "
            "(spliced from another record)"
        ),
    )
    tally.expect(
        "REC-SEQ",
        seq == position,
        position,
        lambda: f"{name()} is at position {position} but has seq {seq!r}",
    )
    tally.expect(
        "REC-PREV",
        event.get("prev") == previous_digest,
        position,
        lambda: (
            f"{name()} does not follow the event before it (an event was removed, "
            "inserted, reordered or edited before this point)"
            if position
            else f"{name()} is first but names a previous event"
        ),
    )
    signature = event.get("signature")
    signer = signature.get("kid") if isinstance(signature, dict) else None
    tally.expect(
        "REC-KID",
        signer == kid,
        position,
        lambda: f"{name()} says it is from {kid!r} but is signed by {signer!r}",
    )
    try:
        # At the event's own time: what it says when it was signed, sealed by the chain.
        time = event["time"] if at is not None else None
        signatures.verify(event, keyring, Place(position, "", at), time)
        tally.ran("REC-SIG")
    except (SignatureInvalid, VersionUnsupported) as exc:
        reason = exc.data.get("reason", exc.code)
        tally.fail("REC-SIG", f"{name()}: {reason}: {exc.message}", position)


def _check_time(
    tally: Tally, position: int, event: Mapping[str, Any], previous: str, at: datetime | None
) -> str:
    time = event.get("time")
    if at is None or not isinstance(time, str):
        tally.fail("REC-TIME", f"{_name(position, event)} has no valid time", position)
        return previous
    # Wire times have one fixed width, so text order is time order.
    if time < previous:
        tally.fail(
            "REC-TIME", f"{_name(position, event)} at {time} is earlier than {previous}", position
        )
        return previous
    tally.ran("REC-TIME")
    return time


def _check_seal(tally: Tally, events: list[Any]) -> None:
    kinds = [e.get("type") if isinstance(e, dict) else None for e in events]
    for position, kind in enumerate(kinds[:-1]):
        if kind == SEAL_EVENT:
            tally.fail("REC-SEAL", f"event {position} seals the record but more follow", position)
    if not events:
        tally.fail("REC-SEAL", "the record has no events, so no seal")
        return
    last = len(events) - 1
    if kinds[-1] != SEAL_EVENT:
        tally.fail(
            "REC-SEAL",
            f"the record ends at event {last} ({kinds[-1]}) without a {SEAL_EVENT} event "
            "(events were cut off the end, or it was never closed)",
            last,
        )
        return
    body = events[-1].get("body")
    if body != {"eventCount": last}:
        tally.fail("REC-SEAL", f"the seal counts {body!r} but {last} events precede it", last)
        return
    tally.ran("REC-SEAL")


def _check_unsigned(tally: Tally, record: Mapping[str, Any]) -> None:
    # The events are signed and the head names the last of them; a member beside
    # them is text no party vouched for, which a reader might still take as part
    # of the record (a "note", a "status").
    extra = sorted(str(key) for key in record if key not in RECORD_MEMBERS)
    tally.expect(
        "REC-UNSIGNED",
        not extra,
        None,
        lambda: (
            f"the record holds member(s) {', '.join(repr(k[:60]) for k in extra[:5])} "
            "beside hatpVersion, recordId, events and head: unsigned, vouched for by nobody"
        ),
    )


def _check_head(
    tally: Tally, stated: Any, computed: str | None, expected: str | None, any_events: bool
) -> None:
    if not any_events:
        return
    if stated != computed:
        tally.fail("REC-HEAD", f"the record states head {stated!r}; its last event is {computed}")
    elif expected is not None and expected != computed:
        tally.fail("REC-HEAD", f"the head is {computed}, but {expected} was expected")
    else:
        tally.ran("REC-HEAD")
