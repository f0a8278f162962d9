"""Transaction Records: writing the chain, and the verifier's chain rules."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.clock import ManualClock
from hatp.errors import InvalidJson, RecordInvalid, VersionUnsupported
from hatp.evidence import (
    Keyring,
    RecordWriter,
    SigningKey,
    canonicalize,
    digest,
    digest_bytes,
    verify_record,
)
from hatp.model import Result, VerificationReport

ISSUER = "https://directory.acme.example"
KEYS = [SigningKey.from_seed(bytes([40 + i]) * 32, f"party-{i}") for i in range(3)]
RING = Keyring(((k.public, ISSUER) for k in KEYS), trusted_issuers=[ISSUER])
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def make_record(events: int, record_id: str = "txn-1") -> dict[str, Any]:
    clock = ManualClock(START)
    writer = RecordWriter(record_id, clock)
    for n in range(events):
        writer.append("step.done", {"n": n, "note": f"step {n}"}, KEYS[n % len(KEYS)])
        clock.advance(0.5)
    writer.seal(KEYS[0])
    return writer.to_json()


def failing(report: VerificationReport) -> list[tuple[str, int | None]]:
    return [(f.rule, f.event) for f in report.findings if f.result is not Result.PASS]


def test_written_record_passes_every_chain_rule() -> None:
    """REC-SEQ REC-PREV REC-SIG REC-KID REC-TIME REC-SEAL REC-HEAD on a fresh record."""
    record = make_record(4)
    report = verify_record(record, RING)
    assert report.ok, failing(report)
    assert report.events == 5
    assert report.head == record["head"] == digest(record["events"][-1])
    assert {f.rule for f in report.findings} == {
        "REC-VERSION", "REC-SHAPE", "REC-ID", "REC-SEQ", "REC-PREV",
        "REC-KID", "REC-SIG", "REC-TIME", "REC-SEAL", "REC-HEAD", "REC-UNSIGNED",
    }  # fmt: skip


def test_events_chain_by_digest_of_the_previous_event() -> None:
    """REC-PREV: seq 0 has prev null; every later prev is the digest of the one before."""
    events = make_record(3)["events"]
    assert events[0]["prev"] is None
    for before, after in itertools.pairwise(events):
        assert after["prev"] == digest(before)
        assert after["seq"] == before["seq"] + 1


def test_empty_record_is_absent_never_a_pass() -> None:
    """VFY-ABSENT: rules that could not run are absent, and the record does not pass."""
    report = verify_record(
        {"hatpVersion": "0.1", "recordId": "r", "events": [], "head": None}, RING
    )
    assert not report.ok
    results = {f.rule: f.result for f in report.findings}
    assert results["REC-SIG"] is Result.ABSENT
    assert results["REC-SEAL"] is Result.FAIL


def test_sealed_record_refuses_more_events() -> None:
    """REC-SEAL: nothing may follow the seal."""
    writer = RecordWriter("txn-1", ManualClock(START))
    writer.append("step.done", {}, KEYS[0])
    writer.seal(KEYS[0])
    assert writer.sealed
    with pytest.raises(RecordInvalid, match="sealed"):
        writer.append("step.done", {}, KEYS[0])
    with pytest.raises(RecordInvalid, match="sealed"):
        writer.seal(KEYS[0])


def test_append_refuses_bad_event_types_and_values() -> None:
    writer = RecordWriter("txn-1", ManualClock(START))
    with pytest.raises(RecordInvalid, match="seal"):
        writer.append("record.sealed", {}, KEYS[0])
    with pytest.raises(RecordInvalid, match="Vote Cast"):
        writer.append("Vote Cast", {}, KEYS[0])
    with pytest.raises(InvalidJson):
        writer.append("step.done", {"amount": float("nan")}, KEYS[0])
    assert writer.events() == [], "a refused append leaves nothing behind"
    with pytest.raises(RecordInvalid):
        RecordWriter("", ManualClock(START))


def test_event_times_never_go_backwards_even_if_the_clock_does() -> None:
    """REC-TIME: a wall clock stepping back does not make the record go back."""
    clock = ManualClock(START)
    writer = RecordWriter("txn-1", clock)
    writer.append("step.done", {}, KEYS[0])
    clock._now = datetime(2026, 12, 1, tzinfo=UTC)  # a wall clock stepped back a day
    second = writer.append("step.done", {}, KEYS[0])
    writer.seal(KEYS[0])
    assert second["time"] == writer.events()[0]["time"]
    assert verify_record(writer.to_json(), RING).ok


def test_resumed_writer_continues_the_same_chain() -> None:
    clock = ManualClock(START)
    first = RecordWriter("txn-1", clock)
    first.append("step.done", {"n": 0}, KEYS[0])
    resumed = RecordWriter.resume(first.to_json(), clock)
    assert resumed.head == first.head
    resumed.append("step.done", {"n": 1}, KEYS[1])
    resumed.seal(KEYS[0])
    report = verify_record(resumed.to_json(), RING)
    assert report.ok, failing(report)


def test_not_a_record_is_unusable_input() -> None:
    for doc in ([], {"events": []}, {"recordId": "r", "events": {}}, "record"):
        with pytest.raises(RecordInvalid):
            verify_record(doc, RING)  # type: ignore[arg-type]


def test_unknown_record_version_is_refused_by_name() -> None:
    """VER-KNOWN: a verifier refuses a version it does not know instead of guessing."""
    record = {**make_record(1), "hatpVersion": "2.0"}
    with pytest.raises(VersionUnsupported, match=r"2\.0"):
        verify_record(record, RING)


def test_pinned_head_catches_a_different_record() -> None:
    """REC-HEAD: --head pins the head learned elsewhere."""
    record = make_record(2)
    assert verify_record(record, RING, expected_head=record["head"]).ok
    other = make_record(3)["head"]
    report = verify_record(record, RING, expected_head=other)
    assert ("REC-HEAD", None) in failing(report)


def test_event_that_is_not_an_object_is_named() -> None:
    """REC-SHAPE: a non-object event is a finding on that event, not a crash."""
    record = make_record(2)
    record["events"][1] = "gone"
    report = verify_record(record, RING)
    assert ("REC-SHAPE", 1) in failing(report)


# --- hypothesis: any removal, reorder, insertion or edit is named ---------------

MUTATIONS = st.sampled_from(["remove", "swap", "insert-copy", "insert-foreign", "edit"])


@given(size=st.integers(min_value=2, max_value=7), kind=MUTATIONS, data=st.data())
def test_any_tampering_fails_with_a_finding_that_names_the_event(
    size: int, kind: str, data: st.DataObject
) -> None:
    """REC-SEQ REC-PREV REC-SIG REC-ID REC-SEAL: tampering never verifies, and is located."""
    record = make_record(size)
    events: list[Any] = record["events"]
    last = len(events) - 1
    i = data.draw(st.integers(min_value=0, max_value=last), label="position")
    if kind == "remove":
        del events[i]
        named = {min(i, len(events) - 1)}
    elif kind == "swap":
        j = data.draw(st.integers(min_value=0, max_value=last).filter(lambda j: j != i), "other")
        events[i], events[j] = events[j], events[i]
        named = {min(i, j)}
    elif kind == "insert-copy":
        j = data.draw(st.integers(min_value=0, max_value=last), label="copied")
        events.insert(i, copy.deepcopy(events[j]))
        # A copy next to its original: either of the two twins is the intruder.
        named = {i, i + 1} if j in (i - 1, i) else {i}
    elif kind == "insert-foreign":
        foreign = make_record(size, record_id="txn-other")["events"]
        events.insert(i, foreign[min(i, len(foreign) - 1)])
        named = {i}
    else:
        events[i]["body"]["edited"] = data.draw(st.text(max_size=5), label="value")
        named = {i}
    report = verify_record(record, RING)
    assert not report.ok
    located = {event for _, event in failing(report)}
    assert named & located, (kind, i, failing(report))


def test_written_since_gives_the_signed_canonical_bytes_of_the_later_events() -> None:
    """RecordWriter.written_since(n): from seq n on, each event's seq, time and the
    canonical bytes it was signed over (the next event's prev is their digest); a bad
    n is refused."""
    writer = RecordWriter("txn-1", ManualClock(START))
    for n in range(3):
        writer.append("step.done", {"n": n, "note": "caf\u00e9"}, KEYS[0])
    events = writer.events()
    written = writer.written_since(0)
    assert [w.seq for w in written] == [0, 1, 2]
    assert [w.time for w in written] == [e["time"] for e in events]
    assert [w.canonical for w in written] == [canonicalize(e) for e in events]
    assert [digest_bytes(w.canonical) for w in written[:2]] == [e["prev"] for e in events[1:]]
    assert digest_bytes(written[-1].canonical) == writer.head
    assert writer.written_since(1) == written[1:]
    assert writer.written_since(3) == []
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="start must be from 0 to 3"):
            writer.written_since(bad)


def test_nothing_handed_out_edits_the_chain() -> None:
    """Events are immutable once signed: editing what append, events or
    to_json handed out, or the body given to append, changes nothing the writer holds."""
    writer = RecordWriter("txn-1", ManualClock(START))
    body: dict[str, Any] = {"receipt": {"n": [1, 2]}, "note": "first"}
    appended = writer.append("step.done", body, KEYS[0])
    writer.append("step.done", {"n": 1}, KEYS[1])
    before, head = writer.to_json(), writer.head
    body["receipt"]["n"].append(3)
    body["note"] = "edited"
    appended["body"]["receipt"]["n"].append(4)
    appended["seq"] = 7
    for handed in (writer.events(), writer.to_json()["events"]):
        handed[0]["body"]["note"] = "edited"
        handed[1]["signature"]["sig"] = "forged"
        handed.pop()
    assert writer.to_json() == before
    assert writer.head == head == digest(before["events"][-1])
    assert writer.to_json() is not writer.to_json(), "each caller gets its own"
    writer.seal(KEYS[0])
    assert verify_record(writer.to_json(), RING).ok


def test_append_refuses_a_bad_event_type_every_time() -> None:
    """The envelope check is cached per (type, kid) pair; a bad type is refused each
    time, and a good pair still passes next to it."""
    writer = RecordWriter("txn-1", ManualClock(START))
    for _ in range(2):
        with pytest.raises(RecordInvalid, match=r"cannot append 'Step\.Done'"):
            writer.append("Step.Done", {}, KEYS[0])
        writer.append("step.done", {}, KEYS[0])
    assert [e["seq"] for e in writer.events()] == [0, 1]


def test_append_refuses_a_clock_outside_the_wire_range() -> None:
    """[TIME-REAL] A record time is a real instant in the wire range, even for a pair
    of type and kid seen before."""
    clock = ManualClock(START)
    writer = RecordWriter("txn-1", clock)
    writer.append("step.done", {}, KEYS[0])
    late = RecordWriter("txn-2", ManualClock(datetime(9500, 1, 1, tzinfo=UTC)))
    with pytest.raises(RecordInvalid, match=r"cannot append 'step\.done'"):
        late.append("step.done", {}, KEYS[0])
    assert late.head is None


def test_append_refuses_a_body_the_record_could_not_be_read_back_with() -> None:
    """[JCS-READBACK] A body of 62 nested levels is 65 deep in its record: unreadable."""
    writer = RecordWriter("txn-1", ManualClock(START))
    with pytest.raises(InvalidJson) as caught:
        writer.append("step.done", {"amount": 1e20}, KEYS[0])
    assert (caught.value.data["rule"], caught.value.data["where"]) == (
        "JSON-INTEGER-RANGE",
        "/body/amount",
    )
    deep: Any = 1
    for _ in range(61):
        deep = [deep]
    with pytest.raises(InvalidJson) as caught:
        writer.append("step.done", {"deep": deep}, KEYS[0])
    assert caught.value.data["rule"] == "JSON-DEPTH"
    assert writer.head is None  # nothing was appended


@pytest.mark.parametrize("member", ["note", "signature", "approvedBy"])
def test_a_member_beside_the_signed_events_fails_rec_unsigned(member: str) -> None:
    """[REC-UNSIGNED] The events and head verify; the extra member is bytes nobody signed."""
    record = {**make_record(2), member: "approved by the cfo, by phone"}
    assert failing(verify_record(record, RING)) == [("REC-UNSIGNED", None)]
    assert failing(verify_record(make_record(2), RING)) == []
