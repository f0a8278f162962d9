"""[TXN-PASSKEY] the offline verifier checks each vote's passkey assertion against the card.

Records are the trip of ``txn_records``; finance's votes carry assertions of
the voters' software passkeys (the keys :func:`directory.people.passkey` puts on
their cards). Each planted record breaks the passkey rule in one way and fails
that rule alone; the honest ones pass every rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hatp._checks import unsafe_switched_off
from hatp.errors import PasskeyInvalid
from hatp.evidence import digest, origin_fits, passkey_challenge, verify_passkey, verify_record
from hatp.evidence._b64 import b64url_decode
from hatp.model import Result, parse_card
from txn_records import (
    ALICE,
    COMMIT_ORDER,
    TxnBuilder,
    _assertion,
    keyring,
    signed_card,
    trip_plan,
)

ABOVE_1000 = {"above": {"value": "1000", "currency": "USD"}}
ABOVE_5000 = {"above": {"value": "5000", "currency": "USD"}}


def _record(make_votes: Callable[[TxnBuilder], list[dict[str, Any]]], passkey: Any = True) -> Any:
    b = TxnBuilder(trip_plan(passkey=passkey)).voted(approval=None)
    b.approved(approval=b.approval(votes=make_votes(b))).decided("commit")
    return b.committed(*COMMIT_ORDER).outcome("committed").sealed()


def _failed(record: Any) -> dict[str, list[str]]:
    report = verify_record(record, keyring())
    out: dict[str, list[str]] = {}
    for finding in report.findings:
        if finding.result is not Result.PASS:
            out.setdefault(finding.rule, []).append(finding.detail)
    return out


def _unsigned(vote: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in vote.items() if k != "signature"}


def test_an_approval_signed_by_the_approvers_passkey_verifies() -> None:
    """[TXN-PASSKEY] an assertion beside the Ed25519 signature, and one alone."""
    assert _failed(_record(lambda b: [b.vote(ALICE, passkey=True)])) == {}
    assert _failed(_record(lambda b: [_unsigned(b.vote(ALICE, passkey=True))])) == {}


def test_an_approve_without_the_passkey_fails_only_when_the_group_needs_one() -> None:
    """[TXN-PASSKEY] a threshold above the 1,938 USD the group covers needs none."""
    assert _failed(_record(lambda b: [b.vote(ALICE)], passkey=ABOVE_5000)) == {}
    failed = _failed(_record(lambda b: [b.vote(ALICE)], passkey=ABOVE_1000))
    assert set(failed) == {"TXN-PASSKEY"} and "REQUIRED" in failed["TXN-PASSKEY"][0]


def test_a_reject_assertion_replayed_as_an_approve_fails() -> None:
    """[TXN-PASSKEY] the passkey signed a reject; the vote says approve."""

    def replayed(b: TxnBuilder) -> list[dict[str, Any]]:
        return [{**_unsigned(b.vote(ALICE, "reject", passkey=True)), "decision": "approve"}]

    failed = _failed(_record(replayed))
    assert set(failed) == {"TXN-PASSKEY"} and "(CHALLENGE)" in failed["TXN-PASSKEY"][0]


def test_an_assertion_made_for_another_plan_fails_even_under_a_good_ed25519_signature() -> None:
    """[TXN-PASSKEY] a gateway holding alice's vote key pairs her assertion on another
    plan with a vote on this one."""

    def other(b: TxnBuilder) -> list[dict[str, Any]]:
        vote = b.vote(ALICE)
        elsewhere = {**vote, "planDigest": digest(trip_plan(pay="1950.00"))}
        from hatp.evidence import sign
        from txn_records import PERSON_KEYS

        return [sign({**_unsigned(vote), "passkey": _assertion(elsewhere, {})}, PERSON_KEYS[ALICE])]

    failed = _failed(_record(other))
    assert set(failed) == {"TXN-PASSKEY"} and "(CHALLENGE)" in failed["TXN-PASSKEY"][0]


def test_a_bad_assertion_fails_even_where_no_passkey_is_needed() -> None:
    """[TXN-PASSKEY] an assertion a vote carries is checked, needed or not."""

    def tampered(b: TxnBuilder) -> list[dict[str, Any]]:
        vote = _unsigned(b.vote(ALICE, passkey=True))
        return [{**vote, "passkey": {**vote["passkey"], "signature": "MEUCIQ" + "A" * 90}}]

    failed = _failed(_record(tampered, passkey=False))
    assert set(failed) == {"TXN-PASSKEY"}


def test_switched_off_the_rule_lets_the_replayed_reject_through() -> None:
    """[TXN-PASSKEY] the rule, and nothing else, catches it."""

    def replayed(b: TxnBuilder) -> list[dict[str, Any]]:
        return [{**_unsigned(b.vote(ALICE, "reject", passkey=True)), "decision": "approve"}]

    record = _record(replayed)
    with unsafe_switched_off("TXN-PASSKEY"):
        assert _failed(record) == {}


# --- the parts: challenge, origin, assertion -------------------------------------------


BOUND = {
    "txn_id": "trip-1",
    "group_id": "finance",
    "plan_digest": "sha256:" + "A" * 43,
    "decision": "approve",
    "nonce": "n" * 22,
    "human": ALICE,
}


def test_the_challenge_is_the_digest_of_what_it_binds() -> None:
    bound = {
        "txnId": "trip-1",
        "groupId": "finance",
        "planDigest": BOUND["plan_digest"],
        "decision": "approve",
        "nonce": "n" * 22,
        "human": ALICE,
    }
    expected = b64url_decode(digest(bound).removeprefix("sha256:"))
    assert passkey_challenge(**BOUND) == expected and len(expected) == 32


@pytest.mark.parametrize(
    "member, value",
    [
        ("decision", "reject"),
        ("plan_digest", "sha256:" + "B" * 43),
        ("nonce", "m" * 22),
        ("human", "human://acme.com/bob"),
        ("group_id", "legal"),
        ("txn_id", "trip-2"),
        ("terms_digest", "sha256:" + "C" * 43),
    ],
)
def test_every_bound_member_changes_the_challenge(member: str, value: str) -> None:
    assert passkey_challenge(**{**BOUND, member: value}) != passkey_challenge(**BOUND)


@pytest.mark.parametrize(
    "origin, fits",
    [
        ("https://acme.com", True),
        ("https://approve.acme.com", True),
        ("https://acme.com:8443", True),
        ("http://acme.com", False),
        ("https://evil.example", False),
        ("https://notacme.com", False),
        ("https://acme.com.evil.example", False),
        ("https://acme.com/approve", False),
        ("https://ACME.com", False),
        ("https://user@acme.com", False),
        ("acme.com", False),
    ],
)
def test_an_origin_fits_an_rp_id_as_a_browser_lets_it(origin: str, fits: bool) -> None:
    assert origin_fits(origin, "acme.com") is fits


def test_http_is_an_origin_of_localhost_only() -> None:
    assert origin_fits("http://localhost:4321", "localhost")
    assert not origin_fits("http://127.0.0.1:4321", "127.0.0.1")


def _vote() -> tuple[dict[str, Any], Any]:
    b = TxnBuilder(trip_plan(passkey=True))
    return _unsigned(b.vote(ALICE, passkey=True)), parse_card(signed_card("alice"))


def test_a_passkey_assertion_verifies_against_the_card_and_says_what_verified() -> None:
    vote, card = _vote()
    verified = verify_passkey(vote, card)
    assert (verified.kid, verified.origin) == (f"{ALICE}#passkey-1", "https://acme.com")


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda p: {**p, "nonce": "short"}, "SHAPE"),
        (lambda p: {**p, "clientDataJSON": "bm90IGpzb24"}, "SHAPE"),
        (lambda p: {**p, "credentialId": "b3RoZXI"}, "KEY_UNKNOWN"),
        (lambda p: {**p, "kid": f"{ALICE}#key-1"}, "KEY_UNKNOWN"),
    ],
)
def test_a_malformed_or_misnamed_assertion_is_refused(
    change: Callable[[dict[str, Any]], dict[str, Any]], reason: str
) -> None:
    vote, card = _vote()
    with pytest.raises(PasskeyInvalid) as info:
        verify_passkey({**vote, "passkey": change(vote["passkey"])}, card)
    assert info.value.reason == reason


def test_an_assertion_the_gateway_already_saw_counted_is_refused_with_its_count() -> None:
    vote, card = _vote()
    count = verify_passkey(vote, card).sign_count
    with pytest.raises(PasskeyInvalid) as info:
        verify_passkey(vote, card, sign_count=count)
    assert info.value.reason == "SIGN_COUNT"


def test_an_origin_not_among_those_served_is_refused() -> None:
    vote, card = _vote()
    with pytest.raises(PasskeyInvalid) as info:
        verify_passkey(vote, card, origins=["https://approve.acme.com"])
    assert info.value.reason == "ORIGIN"
