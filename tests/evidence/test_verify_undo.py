"""The offline verifier's undo rules: an undo record checked against its original
[UNDO-LINK] [UNDO-STEPS] [UNDO-ONCE].

The real records come from the real coordinator (:func:`undo_records.real_undos`);
the records that break a rule are written with every party's own key
(:mod:`undo_records`), so that the rule broken is the only one that refuses
them: switched off, each verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from evidence.undo_records import (
    OFFERS,
    UNDO_ID,
    UNDO_START,
    RealUndos,
    original_trip,
    real_undos,
    rewritten,
    undo_plan,
    undo_trip,
    unwound_original,
)
from hatp._checks import unsafe_switched_off
from hatp.clock import format_time, parse_time
from hatp.errors import RecordInvalid
from hatp.evidence import UNDO_RULES, SigningKey, verify_undo
from hatp.model import Result, VerificationReport
from txn_records import (
    COORDINATOR,
    GATEWAY,
    HOTEL,
    KEYS,
    TXN_ID,
    committed_trip,
    keyring,
)

#: Each undo rule's switch-off tests: with the check off, its forged records verify.
SWITCH_OFF_TESTS = {
    "UNDO-LINK": (
        "test_with_the_link_check_off_the_real_forgeries_verify_UNDO_LINK",
        "test_with_the_link_check_off_a_foreign_reference_verifies_UNDO_LINK",
    ),
    "UNDO-STEPS": ("test_with_the_steps_check_off_each_forged_step_verifies_UNDO_STEPS",),
    "UNDO-ONCE": ("test_with_the_once_check_off_each_forged_set_verifies_UNDO_ONCE",),
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealUndos:
    return real_undos(tmp_path_factory.mktemp("undo"))


def _failing(report: VerificationReport) -> dict[str, list[str]]:
    """The details of every finding that did not pass, by rule."""
    out: dict[str, list[str]] = {}
    for finding in report.findings:
        if finding.result is not Result.PASS:
            out.setdefault(finding.rule, []).append(finding.detail)
    assert report.ok is (not out)
    return out


def _undo_results(report: VerificationReport) -> dict[str, Result]:
    return {f.rule: f.result for f in report.findings if f.rule in UNDO_RULES}


# --- real records --------------------------------------------------------------------


def test_a_real_undo_and_its_original_pass_every_rule_UNDO_LINK(real: RealUndos) -> None:
    """[UNDO-LINK] [UNDO-STEPS] [UNDO-ONCE] the coordinator's undo of the calendar step,
    checked with its original and the undo finance rejected before: every finding of
    the three records and every undo rule passes."""
    report = verify_undo(real.undone, real.original, real.keyring, others=[real.rejected])
    assert _failing(report) == {}
    assert _undo_results(report) == dict.fromkeys(UNDO_RULES, Result.PASS)
    assert report.record_id == real.undone["recordId"]
    assert report.head == real.undone["head"]
    original_id = real.original["recordId"]
    ours = [f for f in report.findings if f.detail.startswith(f"original {original_id}: ")]
    assert {f.rule for f in ours} >= {"REC-SIG", "TXN-OUTCOME"}
    assert all(f.event is None for f in ours)
    (reference,) = [s for s in report.signatures if s.where == "event 0 body.plan.undoes"]
    coordinator = real.original["events"][0]["body"]["coordinator"]
    assert (reference.issuer, reference.event) == (coordinator, 0)
    assert any(s.where.startswith(f"original {original_id}: event") for s in report.signatures)


def test_a_rejected_real_undo_is_a_sound_record_of_nothing_taken_back_UNDO_ONCE(
    real: RealUndos,
) -> None:
    """[UNDO-ONCE] an undo finance rejected links to its original like any, and takes
    nothing back: beside the one that committed, no step is taken back twice."""
    report = verify_undo(real.rejected, real.original, real.keyring, others=[real.undone])
    assert _failing(report) == {}
    once = next(f for f in report.findings if f.rule == "UNDO-ONCE")
    assert once.detail.startswith("1 committed undo(s)")


def test_a_real_undo_checked_against_another_trip_fails_the_link_UNDO_LINK(
    real: RealUndos,
) -> None:
    """[UNDO-LINK] the undo of trip-1 passed off as one of trip-2 (a trip with the same
    steps, so every step matches): only the signed reference says it is not."""
    found = _failing(verify_undo(real.undone, real.other, real.keyring))
    assert set(found) == {"UNDO-LINK"}
    text = " ".join(found["UNDO-LINK"])
    assert repr(real.original["recordId"]) in text and repr(real.other["recordId"]) in text
    assert real.other["head"] in text


def _resealed(real: RealUndos) -> dict[str, Any]:
    """The original sealed again a second later by its coordinator: sound, another head."""
    seal = real.original["events"][-1]
    later = format_time(parse_time(seal["time"]) + timedelta(seconds=1))
    changed = rewritten(
        real.original, real.coordinator_key, len(real.original["events"]) - 1, time=later
    )
    assert changed["head"] != real.original["head"]
    return changed


def test_a_real_original_changed_after_the_reference_fails_the_link_UNDO_LINK(
    real: RealUndos,
) -> None:
    """[UNDO-LINK] the original's coordinator rewrote its record after the undo named its
    head: the new record verifies on its own, but is not the record the undo was built
    from."""
    changed = _resealed(real)
    found = _failing(verify_undo(real.undone, changed, real.keyring))
    assert set(found) == {"UNDO-LINK"}
    assert real.original["head"] in found["UNDO-LINK"][0]
    assert changed["head"] in found["UNDO-LINK"][0]


def test_with_the_link_check_off_the_real_forgeries_verify_UNDO_LINK(real: RealUndos) -> None:
    """[UNDO-LINK] switched off, the undo checked against another trip, and against its
    original rewritten, both verify: nothing else would have refused them."""
    with unsafe_switched_off("UNDO-LINK"):
        for original in (real.other, _resealed(real)):
            report = verify_undo(real.undone, original, real.keyring)
            assert _failing(report) == {}, original["recordId"]


def test_a_record_that_undoes_nothing_fails_the_link_UNDO_LINK(real: RealUndos) -> None:
    """[UNDO-LINK] an ordinary committed trip given as the undo: its plan has no undo
    reference; what it takes back cannot be checked (absent, never a pass)."""
    report = verify_undo(real.other, real.original, real.keyring)
    found = _failing(report)
    assert set(found) == {"UNDO-LINK", "UNDO-STEPS"}
    assert "no undoes reference" in found["UNDO-LINK"][0]
    assert _undo_results(report)["UNDO-STEPS"] is Result.ABSENT


def test_records_that_are_no_records_are_refused_UNDO_LINK(real: RealUndos) -> None:
    """[UNDO-LINK] an original, or a further undo, that is not a record at all is
    unusable input, as for a single record."""
    with pytest.raises(RecordInvalid):
        verify_undo(real.undone, {"recordId": "x"}, real.keyring)
    with pytest.raises(RecordInvalid):
        verify_undo(real.undone, real.original, real.keyring, others=[{"events": []}])


# --- written records: the link ----------------------------------------------------------


def test_a_written_undo_of_two_steps_passes_every_rule_UNDO_STEPS() -> None:
    """[UNDO-STEPS] the calendar entry (compensate, with its undo token) and the seat
    (cancelled for a fee, before its offer lapses) taken back as their receipts offer."""
    original = original_trip()
    undo = undo_trip(undo_plan(original, ("flight", "calendar")))
    report = verify_undo(undo, original, keyring())
    assert _failing(report) == {}
    steps = next(f for f in report.findings if f.rule == "UNDO-STEPS")
    assert steps.detail.endswith("flight, calendar")


_OUTSIDER = SigningKey.from_seed(bytes([99]) * 32, f"{COORDINATOR}#key-2")

#: Undo references the original's coordinator did not sign as they stand.
FOREIGN_REFERENCES: dict[str, tuple[dict[str, Any], str]] = {
    "signed by the gateway, naming the coordinator": (
        {"key": KEYS[GATEWAY]},
        f"names coordinator {COORDINATOR!r} but is signed by {GATEWAY!r}",
    ),
    "the gateway's own": (
        {"key": KEYS[GATEWAY], "reference": {"coordinator": GATEWAY}},
        "the original's events are signed by",
    ),
    "signed by a key the keyring lacks": ({"key": _OUTSIDER}, "KID_UNKNOWN"),
    "naming another head": (
        {"reference": {"head": "sha256:" + "A" * 43}},
        "it is not the record the undo was built from",
    ),
    "naming another transaction": (
        {
            "reference": {"txnId": "txn-trip-0002"},
            "branches": {
                "calendar": {"undoes": {"txnId": "txn-trip-0002", "branchId": "calendar"}}
            },
        },
        "takes back transaction 'txn-trip-0002', but the original given is 'txn-trip-0001'",
    ),
}


@pytest.mark.parametrize("name", sorted(FOREIGN_REFERENCES))
def test_a_reference_not_the_originals_fails_the_link_UNDO_LINK(name: str) -> None:
    """[UNDO-LINK] the reference must be the original coordinator's, signed by it at its
    time, naming the original and its head; the undo record is otherwise sound."""
    options, says = FOREIGN_REFERENCES[name]
    original = original_trip()
    report = verify_undo(undo_trip(undo_plan(original, **options)), original, keyring())
    found = _failing(report)
    assert set(found) == {"UNDO-LINK"}, found
    assert any(says in detail for detail in found["UNDO-LINK"]), found


def test_with_the_link_check_off_a_foreign_reference_verifies_UNDO_LINK() -> None:
    """[UNDO-LINK] switched off, each foreign reference verifies: the link rule, and
    nothing else, refuses them."""
    original = original_trip()
    with unsafe_switched_off("UNDO-LINK"):
        for name, (options, _) in FOREIGN_REFERENCES.items():
            report = verify_undo(undo_trip(undo_plan(original, **options)), original, keyring())
            assert _failing(report) == {}, name


# --- written records: the steps ---------------------------------------------------------


def _lapsed() -> tuple[dict[str, Any], dict[str, Any]]:
    lapse = format_time(UNDO_START - timedelta(minutes=1))
    original = original_trip(offers={"flight": {**OFFERS["flight"], "undoBy": lapse}})
    return original, undo_plan(original, ("flight",))


def _steps(
    steps: tuple[str, ...], **branches: dict[str, Any]
) -> Callable[[], tuple[dict[str, Any], dict[str, Any]]]:
    def build() -> tuple[dict[str, Any], dict[str, Any]]:
        original = original_trip()
        return original, undo_plan(original, steps, branches=branches)

    return build


def _from_unwound() -> tuple[dict[str, Any], dict[str, Any]]:
    original = unwound_original()
    return original, undo_plan(original)


#: Undo plans that take a step back other than as it was offered: (original, plan)
#: builders, and what the finding says.
STEP_FORGERIES: dict[str, tuple[Callable[[], tuple[dict[str, Any], dict[str, Any]]], str]] = {
    "a step offered as not undoable": (
        _steps(("hotel",), hotel={"operation": "cancel_room", "tier": "final"}),
        "says it is not undoable: hold_room declares no inverse operation",
    ),
    "another operation": (
        _steps(("flight",), flight={"operation": "delete_booking"}),
        "with delete_booking (final), but the step's signed commit receipt",
    ),
    "another tier": (
        _steps(("flight",), flight={"tier": "compensate"}),
        "offers cancel_seat (final)",
    ),
    "another participant": (
        _steps(("flight",), flight={"participant": HOTEL}),
        f"at {HOTEL}, but that step is",
    ),
    "after the offer lapsed": (_lapsed, "after the step's undo offer lapsed"),
    "of a transaction that did not commit": (_from_unwound, "concluded 'aborted', not committed"),
}


@pytest.mark.parametrize("name", sorted(STEP_FORGERIES))
def test_an_undo_branch_other_than_its_steps_offer_fails_UNDO_STEPS(name: str) -> None:
    """[UNDO-STEPS] each undo branch takes back a step the original committed, at its
    participant, with the operation and tier its signed commit receipt offered, before
    the offer lapsed; the original committed. Every record is otherwise sound."""
    build, says = STEP_FORGERIES[name]
    original, plan = build()
    found = _failing(verify_undo(undo_trip(plan), original, keyring()))
    assert set(found) == {"UNDO-STEPS"}, found
    assert any(says in detail for detail in found["UNDO-STEPS"]), found


def test_a_step_compensated_in_the_original_is_not_committed_UNDO_STEPS() -> None:
    """[UNDO-STEPS] the unwound trip committed the calendar entry, then compensated it:
    the step is not a committed step of the original."""
    original, plan = _from_unwound()
    found = _failing(verify_undo(undo_trip(plan), original, keyring()))
    assert any("not a step txn-trip-0001 committed" in d for d in found["UNDO-STEPS"]), found


def test_with_the_steps_check_off_each_forged_step_verifies_UNDO_STEPS() -> None:
    """[UNDO-STEPS] switched off, every forged step verifies: nothing else refuses them."""
    with unsafe_switched_off("UNDO-STEPS"):
        for name, (build, _) in STEP_FORGERIES.items():
            original, plan = build()
            report = verify_undo(undo_trip(plan), original, keyring())
            assert _failing(report) == {}, name


# --- written records: once -----------------------------------------------------------


def _twice() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    original = original_trip()
    first = undo_trip(undo_plan(original))
    second = undo_trip(undo_plan(original, ("flight", "calendar"), txn_id=f"{TXN_ID}.undo-2"))
    return original, first, [second]


def _foreign() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    original, other = original_trip(), original_trip("txn-trip-0002")
    stranger = undo_trip(undo_plan(other, txn_id="txn-trip-0002.undo-1"))
    return original, undo_trip(undo_plan(original)), [stranger]


def _not_an_undo() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    original = original_trip()
    return original, undo_trip(undo_plan(original)), [committed_trip()]


def _older_head() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    original = original_trip()
    older = undo_plan(original, ("flight",), txn_id=f"{TXN_ID}.undo-2")
    older["undoes"] = undo_plan(original, reference={"head": "sha256:" + "B" * 43})["undoes"]
    return original, undo_trip(undo_plan(original)), [undo_trip(older)]


#: Sets of undos of which one takes a step back again, or is no undo of the original:
#: (original, undo, others) builders, and what the finding says.
ONCE_FORGERIES: dict[
    str,
    tuple[Callable[[], tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]], str],
]
ONCE_FORGERIES = {
    "the calendar taken back twice": (
        _twice,
        f"step 'calendar' of {TXN_ID} is taken back by 2 committed undos: "
        f"{UNDO_ID}, {TXN_ID}.undo-2",
    ),
    "an undo of another transaction": (
        _foreign,
        "undo txn-trip-0002.undo-1 takes back txn-trip-0002",
    ),
    "a record that undoes nothing": (
        _not_an_undo,
        f"record {TXN_ID} is given as an undo of {TXN_ID}, but it undoes nothing",
    ),
    "an undo of another head": (_older_head, "at head sha256:BBBB"),
}


@pytest.mark.parametrize("name", sorted(ONCE_FORGERIES))
def test_a_step_taken_back_twice_or_a_stranger_among_the_undos_fails_UNDO_ONCE(
    name: str,
) -> None:
    """[UNDO-ONCE] across the committed undos given, no step is taken back twice, and
    every further record is an undo of this very original."""
    build, says = ONCE_FORGERIES[name]
    original, undo, others = build()
    found = _failing(verify_undo(undo, original, keyring(), others=others))
    assert set(found) == {"UNDO-ONCE"}, found
    assert any(says in detail for detail in found["UNDO-ONCE"]), found


def test_with_the_once_check_off_each_forged_set_verifies_UNDO_ONCE() -> None:
    """[UNDO-ONCE] switched off, every forged set verifies: nothing else refuses them."""
    with unsafe_switched_off("UNDO-ONCE"):
        for name, (build, _) in ONCE_FORGERIES.items():
            original, undo, others = build()
            report = verify_undo(undo, original, keyring(), others=others)
            assert _failing(report) == {}, name


def test_undos_of_different_steps_and_a_rejected_one_pass_UNDO_ONCE() -> None:
    """[UNDO-ONCE] the calendar taken back by one undo, the seat by another, and the
    calendar again by one finance rejected (it took nothing back): no step twice. The
    same record given twice counts once."""
    original = original_trip()
    calendar = undo_trip(undo_plan(original))
    seat = undo_trip(undo_plan(original, ("flight",), txn_id=f"{TXN_ID}.undo-2"))
    rejected = undo_trip(undo_plan(original, txn_id=f"{TXN_ID}.undo-3"), approve=False)
    others = [seat, rejected, calendar]
    report = verify_undo(calendar, original, keyring(), others=others)
    assert _failing(report) == {}
    once = next(f for f in report.findings if f.rule == "UNDO-ONCE")
    assert once.detail.startswith("2 committed undo(s) of txn-trip-0001 among 3 given")


def test_two_different_records_of_one_undo_fail_UNDO_ONCE() -> None:
    """[UNDO-ONCE] two records of the same undo transaction with different heads: one of
    them is not the coordinator's record of it."""
    original = original_trip()
    undo = undo_trip(undo_plan(original))
    seal = undo["events"][-1]
    later = format_time(parse_time(seal["time"]) + timedelta(seconds=1))
    again = rewritten(undo, KEYS[COORDINATOR], len(undo["events"]) - 1, time=later)
    found = _failing(verify_undo(undo, original, keyring(), others=[again]))
    assert set(found) == {"UNDO-ONCE"}
    assert f"two different records of undo {UNDO_ID}" in found["UNDO-ONCE"][0]
