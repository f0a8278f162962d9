"""The offline verifier checks every signature at its event's time, and says which key and
which period vouched for each ([VER-PERIOD], [SIG-PERIOD]).

The record is the committed business trip of :mod:`txn_records` (fourteen events,
one a second from ``START``: the plan, the mode with its quotes and estimate, four
prepare receipts, finance's approval at event 6 with its routing record, card and
vote, the decision, four commit receipts, the outcome and the seal). The keyring is
the one an acme key set gives, holding the same public keys with periods.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from hatp.clock import format_time
from hatp.evidence import (
    Keyring,
    SigningKey,
    digest,
    sign,
    sign_key_set,
    thumbprint,
    verify_key_set,
    verify_record,
)
from hatp.model import Result, SignatureUse, VerificationReport
from txn_records import (
    AIRLINE,
    CALENDAR,
    COORDINATOR,
    DIRECTORY,
    GATEWAY,
    HOTEL,
    KEYS,
    PAYMENTS,
    START,
    committed_trip,
    keyring,
)

ORG = "https://acme.com"
ROOT = SigningKey.from_seed(bytes([31]) * 32, "acme-root-1")
ROLES = {
    COORDINATOR: "coordinator",
    AIRLINE: "participant",
    HOTEL: "participant",
    CALENDAR: "participant",
    PAYMENTS: "participant",
    GATEWAY: "gateway",
    DIRECTORY: "directory",
}
#: Every key's period starts a year before the trip, and is open-ended.
SINCE = START - timedelta(days=365)
#: Events of :func:`committed_trip`, by what they carry.
MODE, FLIGHT_PREPARED, APPROVAL, FLIGHT_COMMITTED, SEAL = 1, 2, 6, 10, 13


def time_of(event: int) -> datetime:
    """When :func:`committed_trip` wrote ``event``: a second after the one before."""
    return START + timedelta(seconds=event)


def key_set_keyring(**changes: Mapping[str, Any]) -> Keyring:
    """The keyring of acme's key set (version 4) listing every party's key, each
    valid from :data:`SINCE`; ``changes`` (by party) override members of its entry."""
    keys = [
        {
            **KEYS[party].public.to_jwk(),
            "role": role,
            "issuer": party,
            "notBefore": format_time(SINCE),
            "status": "active",
            **changes.get(party, {}),
        }
        for party, role in ROLES.items()
    ]
    doc = sign_key_set(
        ROOT,
        organisation=ORG,
        version=4,
        issued_at=START - timedelta(hours=1),
        expires_at=START + timedelta(days=7),
        keys=keys,
    )
    return verify_key_set(doc, pin=thumbprint(ROOT.public), now=START).keyring()


def revoked(at: datetime) -> dict[str, str]:
    return {"status": "revoked", "revokedAt": format_time(at)}


def failing(report: VerificationReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for finding in report.findings:
        if finding.result is not Result.PASS:
            out.setdefault(finding.rule, []).append(finding.detail)
    return out


def use(report: VerificationReport, where: str) -> SignatureUse:
    return next(u for u in report.signatures if u.where == where)


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return committed_trip()


# --- every key inside its period ------------------------------------------------------------


def test_every_signature_is_listed_once_in_record_order_with_its_period(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] with every key valid over the record's times the record passes, and
    the report lists each signature once, in record order, checked at its event's time,
    with the key, its issuer, its period from the key set and status valid."""
    report = verify_record(record, key_set_keyring())
    assert report.ok, failing(report)
    wheres = [u.where for u in report.signatures]
    assert len(wheres) == len(set(wheres))
    assert [u.event for u in report.signatures] == sorted(u.event or 0 for u in report.signatures)
    # Every event's own signature, each before what the event carries.
    events = [u for u in report.signatures if u.where == f"event {u.event}"]
    assert [u.event for u in events] == list(range(len(record["events"])))
    assert {u.where for u in report.signatures if u.event == APPROVAL} == {
        "event 6",
        "event 6 body.approval",
        "event 6 body.approval.routing",
        "event 6 body.approval.cards[0]",
        "event 6 body.approval.votes[0]",
    }
    assert wheres.index("event 6") < wheres.index("event 6 body.approval")
    assert {"event 1 body.quotes[0]", "event 1 body.estimates[0]", "event 2 body.receipt"} <= set(
        wheres
    )
    for entry in report.signatures:
        assert entry.at == record["events"][entry.event]["time"]
        if entry.where.endswith("votes[0]"):
            # A vote verifies under its voter's card: keys with no period.
            assert entry.status is None and entry.not_before is None
            continue
        party = entry.issuer
        assert party in ROLES and entry.kid == KEYS[party].kid
        assert entry.status == "valid"
        assert (entry.role, entry.organisation, entry.set_version) == (ROLES[party], ORG, 4)
        assert entry.not_before == format_time(SINCE)
        assert entry.not_after is None and entry.revoked_at is None
    signer = use(report, "event 6 body.approval")
    assert (signer.kid, signer.issuer) == (KEYS[GATEWAY].kid, GATEWAY)


def test_signatures_go_on_the_wire_in_the_report(record: dict[str, Any]) -> None:
    """[VER-PERIOD] the report's wire form carries signatures with their period members."""
    wire = verify_record(record, key_set_keyring()).to_wire()
    entry = next(u for u in wire["signatures"] if u["where"] == "event 0")  # type: ignore[attr-defined]
    assert entry == {
        "event": 0,
        "where": "event 0",
        "kid": KEYS[COORDINATOR].kid,
        "issuer": COORDINATOR,
        "at": record["events"][0]["time"],
        "role": "coordinator",
        "organisation": ORG,
        "setVersion": 4,
        "notBefore": format_time(SINCE),
        "notAfter": None,
        "revokedAt": None,
        "status": "valid",
    }
    assert VerificationReport.model_validate_json(json.dumps(wire)).to_wire() == wire


# --- a key outside its period -------------------------------------------------------------


def test_gateway_key_revoked_before_the_approval_fails_the_approval_by_name(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] [SIG-PERIOD] the gateway's key revoked after it signed the chain
    estimate (event 1) and before the approval's event: the approval does not verify,
    and TXN-SIGNER names KEY_REVOKED at event 6; the estimate still verifies."""
    ring = key_set_keyring(**{GATEWAY: revoked(time_of(3))})
    report = verify_record(record, ring)
    assert not report.ok
    failed = failing(report)
    assert set(failed) == {"TXN-SIGNER"}, failed
    (detail,) = failed["TXN-SIGNER"]
    assert detail.startswith("event 6 (txn.approval): body.approval does not verify: KEY_REVOKED")
    assert KEYS[GATEWAY].kid in detail and format_time(time_of(3)) in detail
    signer = next(f for f in report.findings if f.rule == "TXN-SIGNER")
    assert signer.event == APPROVAL
    approval = use(report, "event 6 body.approval")
    assert (approval.status, approval.issuer, approval.at) == (
        "KEY_REVOKED",
        GATEWAY,
        format_time(time_of(APPROVAL)),
    )
    assert approval.revoked_at == format_time(time_of(3))
    assert use(report, "event 1 body.estimates[0]").status == "valid"


def test_key_revoked_after_the_last_event_verifies_everything(record: dict[str, Any]) -> None:
    """[SIG-PERIOD] a revocation after the record was sealed leaves what was signed before."""
    ring = key_set_keyring(**{GATEWAY: revoked(time_of(SEAL) + timedelta(milliseconds=1))})
    report = verify_record(record, ring)
    assert report.ok, failing(report)
    approval = use(report, "event 6 body.approval")
    assert approval.status == "valid"
    assert approval.revoked_at == format_time(time_of(SEAL) + timedelta(milliseconds=1))


def test_key_expired_before_an_event_it_signed_fails_key_expired(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] the airline's key retired between its prepare receipt (event 2) and its
    commit receipt (event 10): that receipt fails TXN-SIGNER with KEY_EXPIRED."""
    until = time_of(5)
    ring = key_set_keyring(**{AIRLINE: {"status": "retired", "notAfter": format_time(until)}})
    report = verify_record(record, ring)
    failed = failing(report)
    assert set(failed) == {"TXN-SIGNER"}, failed
    (detail,) = failed["TXN-SIGNER"]
    assert detail.startswith("event 10 (txn.committed): body.receipt does not verify: KEY_EXPIRED")
    assert use(report, "event 10 body.receipt").status == "KEY_EXPIRED"
    assert use(report, "event 10 body.receipt").not_after == format_time(until)
    assert use(report, "event 2 body.receipt").status == "valid"
    assert use(report, "event 1 body.quotes[0]").status == "valid"


def test_key_not_yet_valid_when_it_signed_fails_key_not_yet_valid(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] the hotel's key valid only from after its quote in txn.mode (event 1):
    the quote fails TXN-SIGNER with KEY_NOT_YET_VALID; its later receipts verify."""
    ring = key_set_keyring(**{HOTEL: {"notBefore": format_time(time_of(2))}})
    report = verify_record(record, ring)
    failed = failing(report)
    assert "TXN-SIGNER" in failed, failed
    assert failed["TXN-SIGNER"] == [
        f"event 1 (txn.mode): body.quotes[1] does not verify: KEY_NOT_YET_VALID: key "
        f"{KEYS[HOTEL].kid!r} is valid from {format_time(time_of(2))}, after the signing "
        f"time {format_time(time_of(MODE))}; check the signer's clock or key set"
    ]
    assert use(report, "event 1 body.quotes[1]").status == "KEY_NOT_YET_VALID"
    assert use(report, "event 3 body.receipt").status == "valid"


def test_event_signatures_are_checked_at_each_events_own_time(record: dict[str, Any]) -> None:
    """[VER-PERIOD] REC-SIG: the coordinator's key expired after event 5 fails the event
    signatures from event 6 on, each at its own time, and no earlier one."""
    ring = key_set_keyring(
        **{COORDINATOR: {"status": "retired", "notAfter": format_time(time_of(5))}}
    )
    report = verify_record(record, ring)
    sig = [f for f in report.findings if f.rule == "REC-SIG"]
    assert [f.event for f in sig] == list(range(APPROVAL, SEAL + 1))
    assert all(f.result is Result.FAIL and ": KEY_EXPIRED: " in f.detail for f in sig)
    assert [u.status for u in report.signatures if u.where == f"event {u.event}"] == [
        "valid"
    ] * APPROVAL + ["KEY_EXPIRED"] * (SEAL + 1 - APPROVAL)


def test_directory_key_revoked_before_the_approval_fails_its_cards(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] what an approval carries is checked at the approval's event time too:
    a card signed by a directory key revoked before then fails TXN-CARD-SIGNED."""
    ring = key_set_keyring(**{DIRECTORY: revoked(time_of(4))})
    report = verify_record(record, ring)
    failed = failing(report)
    assert set(failed) == {"TXN-CARD-SIGNED"}, failed
    (detail,) = failed["TXN-CARD-SIGNED"]
    assert "cards[0]" in detail and "KEY_REVOKED" in detail
    assert use(report, "event 6 body.approval.cards[0]").status == "KEY_REVOKED"


def test_an_event_without_a_readable_time_is_checked_without_one(
    record: dict[str, Any],
) -> None:
    """[VER-PERIOD] a seal whose time is no time (re-signed by the coordinator's key) has
    its signature checked with no time, listed with ``at`` null; REC-TIME fails it."""
    forged = copy.deepcopy(record)
    seal = {k: v for k, v in forged["events"][SEAL].items() if k != "signature"}
    seal["time"] = "the day after"
    forged["events"][SEAL] = sign(seal, KEYS[COORDINATOR])
    forged["head"] = digest(forged["events"][SEAL])
    report = verify_record(forged, key_set_keyring(**{COORDINATOR: revoked(time_of(7))}))
    assert "REC-TIME" in failing(report)
    seal_use = use(report, f"event {SEAL}")
    assert seal_use.at is None and seal_use.status == "valid"


# --- a keyring without periods --------------------------------------------------------------


def test_a_keyring_without_periods_changes_nothing(record: dict[str, Any]) -> None:
    """[VER-PERIOD] an old keyring (no periods): the findings are those of a key-set
    keyring whose keys are all valid, and every signature is listed without a period."""
    plain = verify_record(record, keyring())
    assert plain.ok
    assert plain.findings == verify_record(record, key_set_keyring()).findings
    assert [u.where for u in plain.signatures] == [
        u.where for u in verify_record(record, key_set_keyring()).signatures
    ]
    for entry in plain.signatures:
        assert entry.status is None
        assert entry.not_before is None and entry.role is None and entry.set_version is None
        assert entry.at == record["events"][entry.event]["time"]
    # The same keyring that fails the revoked gateway's approval above, without periods.
    assert verify_record(record, keyring()).ok


def test_a_record_with_no_events_lists_no_signatures() -> None:
    report = verify_record(
        {"hatpVersion": "0.1", "recordId": "r", "events": [], "head": None}, key_set_keyring()
    )
    assert report.signatures == []
    assert report.to_wire()["signatures"] == []
