"""Planted violations: the one place where documents built to break one rule live.

Each case is a document (as bytes, exactly as an attacker would hand it
over) that breaks one rule of docs/spec.md, and names the check that must
refuse it. ``test_planted.py`` proves each is refused by that check, and
that switching the check off stops exactly those cases from being refused
by it. The cases are also written to ``tests/fixtures/bad/`` as the folder
of known-bad fixtures; run ``python tests/planted.py`` to rewrite them.

Every key and time here is fixed, and Ed25519 is deterministic, so the
fixture files are reproducible byte for byte.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from hatp.clock import ManualClock, format_time
from hatp.errors import InvalidJson, SignatureInvalid, VersionUnsupported
from hatp.evidence import (
    Keyring,
    RecordWriter,
    SigningKey,
    canonicalize,
    digest,
    parse_json,
    sign,
    verify,
    verify_record,
)
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.model import Result
from txn_records import (
    ALICE,
    BOB,
    BRANCHES,
    COMMIT_ORDER,
    COORDINATOR,
    DANA,
    ERIN,
    GATEWAY,
    PAY_PREVIEW,
    PREVIEW_POLICY,
    TxnBuilder,
    approval_first_trip,
    hold_preview,
    holds_first_trip,
    lapsed_trip,
    price_changed_trip,
    signed_card,
    trip_plan,
)
from txn_records import KEYS as TXN_KEYS
from txn_records import START as TXN_START

FIXTURES = Path(__file__).parent / "fixtures" / "bad"
TRUSTED = "https://directory.acme.example"
UNTRUSTED = "https://keys.evil.example"
START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)

Kind = Literal["json", "signed", "record"]


def _key(name: str, seed: int) -> SigningKey:
    return SigningKey.from_seed(bytes([seed]) * 32, f"{name}-1")


KEYS = {
    "coordinator": _key("coordinator", 11),
    "airline": _key("airline", 12),
    "gateway": _key("gateway", 13),
    "outsider": _key("outsider", 14),
}


def keyring() -> Keyring:
    """The verifier's keyring: three trusted parties, one untrusted outsider, and
    the trip's parties (``txn_records``), each trusted as its own issuer."""
    ring = Keyring(trusted_issuers=[TRUSTED, *TXN_KEYS])
    for name, key in KEYS.items():
        ring.add(key.public, UNTRUSTED if name == "outsider" else TRUSTED)
    for party, key in TXN_KEYS.items():
        ring.add(key.public, party)
    return ring


@dataclass(frozen=True)
class Planted:
    """One planted violation: what it breaks and which check must refuse it."""

    name: str
    check: str
    kind: Kind
    why: str
    build: Callable[[], Any]
    #: True when this check is the only barrier: switched off, the case passes.
    sole: bool = True
    expected_head: str | None = None
    #: Lower-level checks the named check is built from (REC-SIG is the SIG-* checks).
    via: tuple[str, ...] = ()

    def document(self) -> bytes:
        built = self.build()
        return built if isinstance(built, bytes) else _text(built)


def attempt(case: Planted, data: bytes | None = None) -> set[str]:
    """Run the case's document through the full path; return the rules that refused it."""
    try:
        doc = parse_json(case.document() if data is None else data)
        if case.kind == "signed":
            verify(doc, keyring())
        elif case.kind == "record":
            report = verify_record(doc, keyring(), expected_head=case.expected_head)
            return {f.rule for f in report.findings if f.result is not Result.PASS}
    except (InvalidJson, SignatureInvalid, VersionUnsupported) as exc:
        return {str(exc.data["rule"])}
    return set()


# --- building blocks -------------------------------------------------------


def _text(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _payment() -> dict[str, Any]:
    return {
        "hatpVersion": "0.1",
        "kind": "approval",
        "tool": "charge_card",
        "args": {"amount": {"value": "2140.00", "currency": "USD"}, "payee": "Lufthansa"},
        "approver": "human://acme.example/bob",
    }


def _signed(by: str = "gateway") -> dict[str, Any]:
    return sign(_payment(), KEYS[by])


def _raw_sign(obj: dict[str, Any], key: SigningKey, kid: str | None = None) -> dict[str, Any]:
    """Sign without sign()'s own checks: an attacker's or an old build's signer."""
    unsigned = {k: v for k, v in obj.items() if k != "signature"}
    sig = b64url_encode(key.sign_bytes(canonicalize(unsigned)))
    return {**unsigned, "signature": {"alg": "Ed25519", "kid": kid or key.kid, "sig": sig}}


def _record() -> dict[str, Any]:
    clock = ManualClock(START)
    writer = RecordWriter("txn-planted-1", clock)
    plan_digest = digest(_payment())
    for party, kind in (
        ("coordinator", "plan.proposed"),
        ("airline", "vote.cast"),
        ("gateway", "approval.granted"),
        ("coordinator", "decision.logged"),
    ):
        writer.append(kind, {"planDigest": plan_digest}, KEYS[party])
        clock.advance(1)
    writer.seal(KEYS["coordinator"])
    return writer.to_json()


def _owner(event: dict[str, Any]) -> SigningKey:
    return next(k for k in KEYS.values() if k.kid == event["signature"]["kid"])


def _relink(record: dict[str, Any], start: int) -> dict[str, Any]:
    """Re-chain and re-sign every event from ``start`` on, as an insider with
    every party's key would, so that only the rule under test can notice."""
    events = record["events"]
    for position in range(start, len(events)):
        event = events[position]
        event["prev"] = digest(events[position - 1]) if position else None
        events[position] = _raw_sign(event, _owner(event), event["signature"]["kid"])
    record["head"] = digest(events[-1])
    return record


def _edit(record: dict[str, Any], position: int, change: Callable[[dict[str, Any]], None]) -> Any:
    change(record["events"][position])
    return _relink(record, position)


# --- the cases ---------------------------------------------------------------


def _duplicate_amount() -> bytes:
    # Python keeps the last value, many parsers the first: the approver's
    # screen and the executor would read different amounts.
    return (
        b'{"hatpVersion":"0.1","tool":"charge_card",'
        b'"amount":{"value":"21.40","value":"2140.00","currency":"USD"}}'
    )


def _alg_none() -> dict[str, Any]:
    doc = _signed()
    doc["args"]["amount"]["value"] = "99999.00"
    doc["signature"] = {"alg": "none", "kid": KEYS["gateway"].kid, "sig": ""}
    return doc


def _kid_lie() -> dict[str, Any]:
    return _raw_sign(_payment(), KEYS["gateway"], kid="finance-director-1")


def _padded() -> dict[str, Any]:
    doc = _signed()
    sig = doc["signature"]["sig"]
    # 64 bytes take 86 characters; the last one's 4 low bits are unused.
    # Setting one gives another string that a lenient decoder reads as the
    # same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    doc["signature"]["sig"] = sig[:-1] + alphabet[alphabet.index(sig[-1]) | 1]
    return doc


def _long_sig() -> dict[str, Any]:
    doc = _signed()
    raw = b64url_decode(doc["signature"]["sig"])
    doc["signature"]["sig"] = b64url_encode(raw + b"\x00")
    return doc


def _edited_after_signing() -> dict[str, Any]:
    doc = _signed()
    doc["args"]["payee"] = "Mallory Travel Ltd"
    return doc


def _future_version() -> dict[str, Any]:
    return _raw_sign({**_payment(), "hatpVersion": "9.0"}, KEYS["gateway"])


def _record_unknown_version() -> dict[str, Any]:
    return {**_record(), "hatpVersion": "9.0"}


def _event_unknown_version() -> Any:
    return _edit(_record(), 2, lambda e: e.update(hatpVersion="9.0"))


def _event_extra_member() -> Any:
    return _edit(_record(), 1, lambda e: e.update(note="approved by phone"))


def _spliced() -> Any:
    return _edit(_record(), 2, lambda e: e.update(recordId="txn-other-7"))


def _renumbered() -> Any:
    return _edit(_record(), 2, lambda e: e.update(seq=7))


def _removed() -> Any:
    record = _record()
    del record["events"][2]
    for position, event in enumerate(record["events"][2:], start=2):
        event["seq"] = position
        if event["type"] == "record.sealed":
            event["body"] = {"eventCount": position}
        # Re-signed but not re-chained: prev still names the removed event.
        record["events"][position] = _raw_sign(event, _owner(event))
    record["head"] = digest(record["events"][-1])
    return record


def _reordered() -> Any:
    record = _record()
    events = record["events"]
    events[1], events[2] = events[2], events[1]
    for position in (1, 2):
        events[position]["seq"] = position
        events[position] = _raw_sign(events[position], _owner(events[position]))
    record["head"] = digest(events[-1])
    return record


def _kid_mismatch() -> Any:
    # The airline signs an event that claims to come from the gateway.
    def claim(event: dict[str, Any]) -> None:
        event["kid"] = KEYS["gateway"].kid

    record = _record()
    claim(record["events"][1])
    return _relink(record, 1)


def _body_edited() -> Any:
    record = _record()
    record["events"][2]["body"]["planDigest"] = digest({"another": "plan"})
    return _relink(record, 3)  # later events re-chained; the edited one is not re-signed


def _outsider_event() -> Any:
    record = _record()
    event = record["events"][2]
    event["kid"] = KEYS["outsider"].kid
    record["events"][2] = _raw_sign(event, KEYS["outsider"])
    return _relink(record, 3)


def _time_backwards() -> Any:
    return _edit(_record(), 2, lambda e: e.update(time=format_time(START)))


def _truncated() -> Any:
    record = _record()
    record["events"].pop()
    record["head"] = digest(record["events"][-1])
    return record


def _wrong_head() -> Any:
    record = _record()
    record["head"] = digest(record["events"][1])
    return record


def _resealed_short() -> Any:
    # A key holder cuts the last decision and seals again: every chain rule
    # holds, and only a head learned elsewhere (a receipt) shows it.
    record = _record()
    del record["events"][-2:]
    last = record["events"][-1]
    seal = {
        "hatpVersion": "0.1",
        "recordId": record["recordId"],
        "seq": len(record["events"]),
        "prev": digest(last),
        "type": "record.sealed",
        "time": last["time"],
        "kid": KEYS["coordinator"].kid,
        "body": {"eventCount": len(record["events"])},
    }
    record["events"].append(_raw_sign(seal, KEYS["coordinator"]))
    record["head"] = digest(record["events"][-1])
    return record


def _unsigned_member() -> Any:
    # Every event and the head verify; beside them, a member nobody signed that a
    # reader of the file could take as part of the record.
    return {**_record(), "approvedBy": "cfo@acme.example (by phone, amount raised to 99999.00)"}


def _deep() -> bytes:
    return b"[" * 65 + b"]" * 65


# Transaction records: written whole by a holder of the coordinator key, so
# every chain rule passes and only the transaction rule under test can notice.


def _voted_and_decided(approval: str | None = "approve") -> TxnBuilder:
    return TxnBuilder().voted(approval=approval).decided("commit")


def _txn_plan_edited() -> Any:
    b = TxnBuilder().planned(plan=trip_plan(pay="9900.00"))
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def _txn_vote_for_other_plan() -> Any:
    b = TxnBuilder().planned()
    other = digest(trip_plan(pay="1950.00"))
    b.prepared("flight", receipt=b.prepare_receipt("flight", planDigest=other))
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def _txn_forged_vote() -> Any:
    b = TxnBuilder().planned().prepared("flight")
    b.prepared("hotel", receipt=b.prepare_receipt("hotel", by=COORDINATOR))
    b.prepared("calendar").prepared("pay").approved().decided("commit")
    return b.committed(*COMMIT_ORDER).outcome("committed").sealed()


def _txn_flipped_approval() -> Any:
    b = TxnBuilder().voted(approval=None)
    flipped = {**b.approval(decision="reject"), "decision": "approve"}
    b.approved(approval=flipped).decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def _txn_commit_before_decision() -> Any:
    b = TxnBuilder().voted().committed("calendar").decided("commit")
    return b.committed("pay", "flight", "hotel").outcome("committed").sealed()


def _txn_commit_without_approval() -> Any:
    b = _voted_and_decided(approval=None)
    return b.committed(*COMMIT_ORDER).outcome("committed").sealed()


def _txn_holds_before_final() -> Any:
    b = _voted_and_decided().committed("calendar", "flight", "hotel", "pay")
    return b.outcome("committed").sealed()


def _txn_final_twice() -> Any:
    b = _voted_and_decided().committed("calendar", "pay", "pay", "flight", "hotel")
    return b.outcome("committed").sealed()


def _txn_commit_while_unwinding() -> Any:
    b = _voted_and_decided().committed("calendar", "pay").unwinding("hotel")
    return b.committed("flight", "hotel").outcome("committed").sealed()


def _txn_committed_missing_branch() -> Any:
    b = _voted_and_decided().committed("calendar", "pay", "flight")
    return b.outcome("committed").sealed()


def _txn_aborted_hold_left() -> Any:
    # Finance rejected; the seat's release was never answered, yet the outcome says aborted.
    b = TxnBuilder().voted(approval="reject").decided("abort", "finance rejected the spend")
    return b.aborted("calendar", "pay", "hotel").outcome("aborted").sealed()


def _txn_preview_misstated() -> Any:
    # The terms people approve show the hotel's hold for alice; the hotel signed dana's.
    return holds_first_trip(misstated={"hotel": hold_preview("hotel", holder="alice")})


def _txn_preview_changed_after_approval() -> Any:
    # After finance approved, the flight's hold is placed again for someone else, and
    # committed: not what people were shown.
    return holds_first_trip(replaced_with=hold_preview("flight", holder="mallory"))


def _txn_preview_below_policy() -> Any:
    # The plan asks an exact preview of its final step; the card's is only predicted, yet
    # people were asked and the trip committed.
    return holds_first_trip(policy={"final": "exact"}, previewed={"pay": PAY_PREVIEW})


def _txn_preview_unlike_quote() -> Any:
    # Approval-first: people approved the airline's quote ticketing the seat for dana; the
    # airline's prepare (its own signature) tickets it for mallory, and it is committed.
    return approval_first_trip(
        policy=PREVIEW_POLICY, prepared_with={"flight": hold_preview("flight", holder="mallory")}
    )


def _txn_preview_terms_missing() -> Any:
    # The plan requires previews; finance was asked with no terms stating them (the
    # approval and votes name none), and the trip committed.
    return approval_first_trip(policy=PREVIEW_POLICY, stated=False)


def _txn_effect_hidden() -> Any:
    # The card was charged 1985.00 against a predicted 1900.00 (at most 1950.00); the
    # record says nothing of it: no txn.effect, no effectDiffers.
    return price_changed_trip(stated=None, flagged=False)


def _txn_effect_flag_removed() -> Any:
    # The difference is judged, but the outcome's effectDiffers flag was left out.
    return price_changed_trip(flagged=False)


def _txn_effect_beyond_bound() -> Any:
    # 1985.00 is beyond the approved bound of 1950.00, yet the record calls it within bounds.
    return price_changed_trip(stated="within-bounds", flagged=False)


def _txn_attention_hold_unnamed() -> Any:
    # The card is named held, but the seat was never released either, and is not named.
    b = TxnBuilder().voted(approval="reject").decided("abort", "finance rejected the spend")
    b.aborted("calendar", "hotel").held("pay")
    return b.outcome("needs-attention", held=["pay"]).sealed()


def _txn_aborted_effect_left() -> Any:
    b = _voted_and_decided().committed("calendar").unwinding("pay")
    return b.aborted("pay", "flight", "hotel").outcome("aborted").sealed()


# Approvals whose evidence breaks one rule: the gateway's key signs each approval
# (and its routing record), so only the approval rule under test can notice.


def _committed_on(
    make: Callable[[TxnBuilder], dict[str, Any]], plan: dict[str, Any] | None = None
) -> Any:
    """A committed trip whose finance approval is ``make(builder)``."""
    b = TxnBuilder(plan).voted(approval=None)
    b.approved(approval=make(b)).decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def _txn_vote_tampered() -> Any:
    # Alice rejected; the gateway turns her vote into an approve.
    return _committed_on(
        lambda b: b.approval(votes=[{**b.vote(ALICE, "reject"), "decision": "approve"}])
    )


def _txn_vote_signed_by_gateway() -> Any:
    return _committed_on(lambda b: b.approval(votes=[b.vote(ALICE, key=TXN_KEYS[GATEWAY])]))


#: A key the gateway made for Alice, on a card an untrusted "directory" signed.
_MADE_UP = SigningKey.from_seed(bytes([15]) * 32, f"{ALICE}#key-2")


def _txn_card_untrusted() -> Any:
    card = signed_card(
        "alice", key=KEYS["outsider"], issuer=UNTRUSTED, keys=[_MADE_UP.public.to_jwk()]
    )
    return _committed_on(lambda b: b.approval(votes=[b.vote(ALICE, key=_MADE_UP)], cards=[card]))


def _txn_quorum_short() -> Any:
    return _committed_on(lambda b: b.approval(votes=[b.vote(ALICE)]), trip_plan(quorum="2-of-3"))


def _txn_self_approved() -> Any:
    return _committed_on(lambda b: b.approval(votes=[b.vote(DANA)]))


def _txn_over_authority() -> Any:
    return _committed_on(lambda b: b.approval(votes=[b.vote(ERIN)]))


def _txn_late_vote() -> Any:
    late = format_time(TXN_START + timedelta(minutes=20))
    return _committed_on(lambda b: b.approval(votes=[b.vote(ALICE, time=late)]))


def _txn_check_lowered() -> Any:
    # Erin (limit 500) approves a 1,938 USD trip: the gateway says it checked 500 USD.
    def make(b: TxnBuilder) -> dict[str, Any]:
        routing = b.routing(
            decided={ERIN: "approve"}, checked=[{"value": "500", "currency": "USD"}]
        )
        return b.approval(votes=[b.vote(ERIN)], routing=routing)

    return _committed_on(make)


def _txn_no_amount_check() -> Any:
    return _committed_on(
        lambda b: b.approval(routing=b.routing(decided={ALICE: "approve"}, checked="absent"))
    )


def _txn_voter_not_decided() -> Any:
    return _committed_on(lambda b: b.approval(routing=b.routing(decided={})))


def _txn_approver_without_vote() -> Any:
    return _committed_on(
        lambda b: b.approval(
            votes=[b.vote(ALICE)],
            approvers=[ALICE, BOB],
            cards=[signed_card("alice"), signed_card("bob")],
        )
    )


def _txn_approved_without_passkey() -> Any:
    # Finance needs the approver's passkey. The gateway holds Alice's vote key (it signs
    # at her terminal) but not her passkey: it signs her approve alone, and counts it.
    return _committed_on(lambda b: b.approval(), trip_plan(passkey=True))


def _txn_pending_forged() -> Any:
    b = TxnBuilder().voted(approval=None)
    b.pending_asked(pending=b.pending(by=COORDINATOR)).approved().decided("commit")
    return b.committed(*COMMIT_ORDER).outcome("committed").sealed()


# How phase 1 was timed: the mode, the approval deadline and the leases. The
# participants and the gateway sign the quotes, estimates, receipts and times;
# the coordinator's key writes a record they do not bear out.


def _at(seconds: float) -> str:
    return format_time(TXN_START + timedelta(seconds=seconds))


def _asked(b: TxnBuilder) -> TxnBuilder:
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    return b.approved()


def _committed(b: TxnBuilder) -> Any:
    b.decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def _txn_approved_after_deadline() -> Any:
    # The holds moved the approval deadline to 00:06.5; finance approved at 00:07.
    return _committed(TxnBuilder().voted(approval=None).deadline(_at(6.5)).approved())


def _flight_leased_until(seconds: float) -> TxnBuilder:
    b = TxnBuilder().planned()
    receipt = b.prepare_receipt("flight", leaseExpiresAt=_at(seconds))
    b.prepared("flight", receipt=receipt)
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    return b.approved()


def _txn_lapse_while_live() -> Any:
    return lapsed_trip(flight_lease=TXN_START + timedelta(minutes=20))


def _txn_final_after_lease() -> Any:
    # The seat's lease ended at 00:08.5; the card was charged at 00:09 (the seat at 00:10).
    return _committed(_flight_leased_until(8.5))


def _txn_hold_committed_after_lease() -> Any:
    # The card was charged in time (00:09); the seat's lease ended at 00:09.5, its commit 00:10.
    return _committed(_flight_leased_until(9.5))


def _txn_lease_past_horizon() -> Any:
    b = TxnBuilder().planned().prepared("flight").prepared("hotel")
    past = format_time(TXN_START + timedelta(minutes=45))
    b.renewed("flight", b.renew_receipt("flight", leaseExpiresAt=past))
    return _committed(b.prepared("calendar").prepared("pay").approved())


def _txn_mode_numbers_ignored() -> Any:
    # Asking finance can take 1800 s (alice, then bob); the holds last 1800 s.
    b = TxnBuilder().planned(mode=False)
    b.moded(estimates=[b.estimate(chain=(ALICE, BOB))], worstSeconds=1800)
    return _committed(_asked(b))


def _txn_mode_not_requested() -> Any:
    b = TxnBuilder(trip_plan(mode="approval-first")).planned(mode=False)
    b.moded(requested="parallel", chosen="parallel", quotes=[])
    return _committed(_asked(b))


def _txn_prepared_before_approval() -> Any:
    return _committed(_asked(TxnBuilder(trip_plan(mode="approval-first")).planned()))


def _txn_held_off_quote() -> Any:
    # Approval-first: the flight was quoted at 400.00, held at 420.00, and committed anyway.
    b = TxnBuilder(trip_plan(mode="approval-first")).planned(mode=False)
    quotes = [b.quote("flight", cost={"value": "400.00", "currency": "USD"}), b.quote("hotel")]
    b.moded(quotes=quotes).approved()
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    return _committed(b)


def _txn_mode_previews_parallel() -> Any:
    # Auto, and the plan requires previews: the coordinator chose parallel on the holds'
    # numbers and asked finance while preparing, before anything was previewed. Finance
    # rejected and all was released, so only the mode choice shows it.
    plan = trip_plan()
    plan["previews"] = {"minimum": PREVIEW_POLICY}
    b = TxnBuilder(plan).voted(approval="reject").decided("abort", "finance rejected the spend")
    return b.aborted(*BRANCHES).outcome("aborted").sealed()


def _txn_terms_in_parallel() -> Any:
    # Parallel: finance was asked while the steps were prepared, yet the record states
    # terms after the votes, as if people had approved the steps' previews first.
    b = TxnBuilder(trip_plan(mode="parallel")).planned()
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.termed()
    b.approved("finance", "reject").decided("abort", "finance rejected the spend")
    return b.aborted(*BRANCHES).outcome("aborted").sealed()


def _txn_terms_removed() -> Any:
    # Approval-first: finance approved the terms (the quotes' previews) by their digest;
    # the record leaves the txn.terms out, so nobody can check what people were shown.
    record = approval_first_trip()
    events = [e for e in record["events"] if e["type"] != "txn.terms"]
    key = TXN_KEYS[COORDINATOR]
    for position, event in enumerate(events):
        event.update(seq=position, prev=digest(events[position - 1]) if position else None)
        if event["type"] == "record.sealed":
            event["body"] = {"eventCount": position}
        events[position] = _raw_sign(event, key)
    return {**record, "events": events, "head": digest(events[-1])}


def _txn_terms_misstated() -> Any:
    # The airline signed the flight's horizon; the terms people approved say 15 minutes more.
    return holds_first_trip(longer={"flight": 15 * 60})


def _txn_forged_estimate() -> Any:
    # The gateway's estimate would say 1800 s; the coordinator signs one of 900 s itself.
    b = TxnBuilder().planned(mode=False)
    b.moded(estimates=[b.estimate(by=COORDINATOR)])
    return _committed(_asked(b))


CASES: tuple[Planted, ...] = (
    Planted("duplicate-key-amount", "JSON-DUPLICATE-KEY", "json",
            "two parsers would read different amounts", _duplicate_amount),
    Planted("nan-amount", "JSON-NON-FINITE", "json", "NaN is not JSON",
            lambda: b'{"amount": NaN}'),
    Planted("lone-surrogate-payee", "JSON-LONE-SURROGATE", "json",
            "a lone surrogate has no UTF-8 form, so no canonical bytes",
            lambda: b'{"payee": "Luft\\ud800hansa"}'),
    Planted("unsafe-integer", "JSON-INTEGER-RANGE", "json",
            "2**53+1 reads back as 2**53 in most parsers",
            lambda: b'{"amount": 9007199254740993}'),
    Planted("nesting-65", "JSON-DEPTH", "json", "nesting past the limit", _deep),
    Planted("future-version", "VER-KNOWN", "signed",
            "a version this build does not know must not be guessed at", _future_version),
    Planted("unsigned-approval", "SIG-MEMBER", "signed",
            "an approval with its signature stripped", _payment),
    Planted("alg-none", "SIG-ALG", "signed",
            "alg none with the amount raised", _alg_none),
    Planted("kid-confusion", "SIG-KID", "signed",
            "signed by the gateway, claiming a key the keyring does not hold", _kid_lie),
    Planted("untrusted-issuer", "SIG-ISSUER", "signed",
            "signed by a key vouched for by an untrusted issuer",
            lambda: _signed(by="outsider")),
    Planted("malleable-encoding", "SIG-ENCODING", "signed",
            "the same signature bytes spelled another way", _padded),
    Planted("signature-too-long", "SIG-LENGTH", "signed",
            "a valid signature with a byte appended", _long_sig, sole=False),
    Planted("payee-edited", "SIG-CRYPTO", "signed",
            "the payee changed after the gateway signed", _edited_after_signing),
    Planted("record-future-version", "VER-KNOWN", "record",
            "a record of a version this build does not know", _record_unknown_version),
    Planted("event-future-version", "REC-VERSION", "record",
            "one event of an unknown version", _event_unknown_version, sole=False),
    Planted("event-extra-member", "REC-SHAPE", "record",
            "an event with a member the format does not have", _event_extra_member),
    Planted("spliced-event", "REC-ID", "record",
            "an event that belongs to another record", _spliced),
    Planted("renumbered-event", "REC-SEQ", "record",
            "an event whose seq is not its position", _renumbered),
    Planted("removed-event", "REC-PREV", "record",
            "the approval removed and the rest renumbered", _removed),
    Planted("reordered-events", "REC-PREV", "record",
            "two events swapped and renumbered", _reordered, sole=False),
    Planted("kid-mismatch-event", "REC-KID", "record",
            "the airline signs an event that claims to come from the gateway", _kid_mismatch),
    Planted("edited-event", "REC-SIG", "record",
            "an event's body changed after signing", _body_edited, via=("SIG-CRYPTO",)),
    Planted("outsider-event", "REC-SIG", "record",
            "an event signed by a key from an untrusted issuer", _outsider_event,
            via=("SIG-ISSUER",)),
    Planted("time-backwards", "REC-TIME", "record",
            "an event earlier than the one before it", _time_backwards),
    Planted("truncated", "REC-SEAL", "record",
            "the seal cut off the end", _truncated),
    Planted("wrong-head", "REC-HEAD", "record",
            "the stated head names another event", _wrong_head),
    Planted("resealed-short", "REC-HEAD", "record",
            "cut short and re-sealed by a key holder; caught by a pinned head",
            _resealed_short, expected_head=digest(_record()["events"][-1])),
    Planted("record-unsigned-member", "REC-UNSIGNED", "record",
            "a member beside the signed events that no party signed", _unsigned_member),
    Planted("txn-plan-edited", "TXN-PLAN", "record",
            "the card charge raised in the logged plan after every party signed its digest",
            _txn_plan_edited),
    Planted("txn-vote-for-other-plan", "TXN-DIGEST", "record",
            "the airline's yes vote was for another version of the plan", _txn_vote_for_other_plan),
    Planted("txn-forged-vote", "TXN-SIGNER", "record",
            "the coordinator signs the hotel's yes vote itself", _txn_forged_vote),
    # With SIG-CRYPTO off the flipped approval reads as the gateway's, and the
    # approval rules see its reject vote (TXN-APPROVERS, TXN-QUORUM).
    Planted("txn-flipped-approval", "TXN-SIGNER", "record",
            "finance rejected; the approval edited to approve after the gateway signed it",
            _txn_flipped_approval, via=("SIG-CRYPTO",), sole=False),
    Planted("txn-commit-before-decision", "TXN-DECIDED", "record",
            "the calendar committed before the decision was logged", _txn_commit_before_decision),
    Planted("txn-commit-without-approval", "TXN-VOTES", "record",
            "committed though finance never approved", _txn_commit_without_approval),
    Planted("txn-holds-before-final", "TXN-ORDER", "record",
            "the holds converted before the card was charged", _txn_holds_before_final),
    Planted("txn-final-twice", "TXN-FINAL", "record",
            "the card captured twice", _txn_final_twice),
    Planted("txn-commit-while-unwinding", "TXN-AFTER-ABORT", "record",
            "the hotel's commit failed, unwinding began, and the coordinator kept committing",
            _txn_commit_while_unwinding),
    Planted("txn-committed-missing-branch", "TXN-OUTCOME", "record",
            "the outcome says committed, but the hotel was never committed",
            _txn_committed_missing_branch),
    Planted("txn-aborted-effect-left", "TXN-OUTCOME", "record",
            "the outcome says aborted, but the calendar entry was never undone",
            _txn_aborted_effect_left),
    Planted("txn-aborted-hold-left", "TXN-SETTLED", "record",
            "the outcome says aborted, but the seat's hold was never released",
            _txn_aborted_hold_left),
    Planted("txn-preview-misstated", "TXN-PREVIEW", "record",
            "the terms people approved state a hold's preview other than its participant signed",
            _txn_preview_misstated),
    Planted("txn-preview-changed-after-approval", "TXN-PREVIEW", "record",
            "a hold placed again after the approval, with another preview, is committed so",
            _txn_preview_changed_after_approval),
    Planted("txn-preview-below-policy", "TXN-PREVIEW", "record",
            "the plan asks an exact preview of the card's charge; people saw a predicted one",
            _txn_preview_below_policy),
    Planted("txn-preview-unlike-quote", "TXN-PREVIEW", "record",
            "approval-first: the seat's prepare previews another holder than the quote "
            "people approved, and is committed so", _txn_preview_unlike_quote),
    Planted("txn-preview-terms-missing", "TXN-PREVIEW", "record",
            "the plan requires effect previews; people approved with no terms showing any, "
            "and the trip committed", _txn_preview_terms_missing),
    Planted("txn-effect-hidden", "TXN-EFFECT", "record",
            "the card was charged beyond its predicted preview's bound; the record is silent",
            _txn_effect_hidden),
    Planted("txn-effect-flag-removed", "TXN-EFFECT", "record",
            "the difference is judged, but the outcome's effectDiffers flag was removed",
            _txn_effect_flag_removed),
    Planted("txn-effect-beyond-bound", "TXN-EFFECT", "record",
            "the observed amount is beyond the approved bound, yet stated within bounds",
            _txn_effect_beyond_bound),
    Planted("txn-attention-hold-unnamed", "TXN-SETTLED", "record",
            "needs-attention names the card held, but the seat is held too and not named",
            _txn_attention_hold_unnamed),
    Planted("txn-pending-forged", "TXN-SIGNER", "record",
            "the coordinator signs the gateway's pending answer itself", _txn_pending_forged),
    Planted("txn-vote-tampered", "TXN-VOTE-SIGNED", "record",
            "alice rejected; the gateway edited her vote to approve", _txn_vote_tampered,
            via=("SIG-CRYPTO",)),
    Planted("txn-vote-signed-by-gateway", "TXN-VOTE-SIGNED", "record",
            "the gateway signs alice's approve with its own key, which is not on her card",
            _txn_vote_signed_by_gateway),
    Planted("txn-card-untrusted-issuer", "TXN-CARD-SIGNED", "record",
            "alice's card, with a key the gateway made, signed by a directory nobody trusts",
            _txn_card_untrusted, via=("SIG-ISSUER",)),
    Planted("txn-quorum-short", "TXN-QUORUM", "record",
            "a 2-of-3 finance approval with one approver", _txn_quorum_short),
    Planted("txn-self-approved", "TXN-SOD", "record",
            "dana approves the trip the agent books on her behalf", _txn_self_approved),
    Planted("txn-over-authority", "TXN-AUTHORITY", "record",
            "erin, limit 500 USD, approves a 1,938 USD trip", _txn_over_authority),
    Planted("txn-late-vote", "TXN-VOTE-LATE", "record",
            "alice's vote came after decideBy; the gateway dated the approval before it",
            _txn_late_vote),
    Planted("txn-check-lowered", "TXN-ROUTING", "record",
            "erin approves; the gateway's routing record says it checked 500 USD, not 1,938",
            _txn_check_lowered, via=("RTE-CHECKED",)),
    Planted("txn-no-amount-check", "TXN-ROUTING", "record",
            "a routing record that ran no amount check (checked: absent); absent never passes",
            _txn_no_amount_check, sole=False),
    Planted("txn-voter-not-decided", "TXN-ROUTED", "record",
            "alice's vote counted, but the routing record never shows her deciding",
            _txn_voter_not_decided),
    Planted("txn-approver-without-vote", "TXN-APPROVERS", "record",
            "bob listed as an approver without a vote of his", _txn_approver_without_vote),
    Planted("txn-approved-without-passkey", "TXN-PASSKEY", "record",
            "finance needs the approver's passkey; a gateway holding alice's vote key "
            "approved for her without it", _txn_approved_without_passkey),
    Planted("txn-approved-after-deadline", "TXN-APPROVE-BY", "record",
            "finance approved after the approval deadline the holds set, and it was counted",
            _txn_approved_after_deadline),
    Planted("txn-final-after-lease", "TXN-LEASE", "record",
            "the card charged (and the seat converted) after the seat's hold had lapsed",
            _txn_final_after_lease),
    Planted("txn-hold-committed-after-lease", "TXN-LEASE", "record",
            "the seat converted after its own lease ended", _txn_hold_committed_after_lease),
    Planted("txn-lease-past-horizon", "TXN-LEASE", "record",
            "a renewal leasing the seat past its hold's horizon", _txn_lease_past_horizon),
    Planted("txn-mode-numbers-ignored", "TXN-MODE", "record",
            "parallel, though the signed estimate and quotes say approval-first",
            _txn_mode_numbers_ignored),
    Planted("txn-mode-not-requested", "TXN-MODE", "record",
            "the plan asks approval-first; the record says parallel was requested",
            _txn_mode_not_requested),
    Planted("txn-prepared-before-approval", "TXN-MODE", "record",
            "approval-first, yet every hold placed before finance approved",
            _txn_prepared_before_approval),
    Planted("txn-held-off-quote", "TXN-MODE", "record",
            "approval-first: the flight held at 420.00 after people approved its 400.00 quote, "
            "committed anyway", _txn_held_off_quote),
    Planted("txn-mode-previews-parallel", "TXN-MODE", "record",
            "auto, with a plan requiring effect previews: the record chose parallel, asking "
            "people before any step was previewed", _txn_mode_previews_parallel),
    Planted("txn-terms-in-parallel", "TXN-MODE", "record",
            "parallel: the record states terms people never approved first",
            _txn_terms_in_parallel),
    Planted("txn-terms-removed", "TXN-MODE", "record",
            "approval-first: finance approved terms by digest that the record leaves out",
            _txn_terms_removed),
    Planted("txn-terms-misstated", "TXN-MODE", "record",
            "holds-first: the terms people approved say the flight is held 15 minutes longer "
            "than the airline signed", _txn_terms_misstated),
    Planted("txn-lapse-while-live", "TXN-OUTCOME", "record",
            "needs-recovery: the seat is said to have lapsed and is released while its lease "
            "still ran", _txn_lapse_while_live),
    Planted("txn-forged-estimate", "TXN-SIGNER", "record",
            "the coordinator signs finance's chain estimate itself, short enough for parallel",
            _txn_forged_estimate),
)  # fmt: skip


def write_fixtures() -> None:
    """Rewrite ``tests/fixtures/bad/``: one file per case, the keyring and a manifest."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    manifest = {
        c.name: {"check": c.check, "kind": c.kind, "why": c.why, "expectedHead": c.expected_head}
        for c in CASES
    }
    (FIXTURES / "manifest.json").write_bytes(_text(manifest))
    (FIXTURES / "keyring.json").write_bytes(_text(keyring().to_json()))
    for case in CASES:
        (FIXTURES / f"{case.name}.json").write_bytes(case.document())


def good_record() -> bytes:
    """The untampered record every record case starts from."""
    return _text(copy.deepcopy(_record()))


if __name__ == "__main__":
    write_fixtures()
    sys.stdout.write(f"wrote {len(CASES)} cases to {FIXTURES}\n")
