"""The offline verifier's undo rules: an undo record checked against its original.

An undo transaction is an ordinary transaction, and its record passes or
fails the chain and transaction rules like any other (:func:`verify_record`).
What those rules cannot see is what it takes back: that the coordinator who
ran the original vouched, in a signed reference, for the very record it undoes
([UNDO-LINK]); that each of its branches takes back a step that committed there,
the way that step's participant offered in its signed commit receipt
([UNDO-STEPS]); and that, across every undo of that original one is shown,
no step was taken back twice ([UNDO-ONCE]). :func:`verify_undo` checks the undo
record, the original and each further undo of it, and then these rules.

The report is the undo record's: its own findings and signatures first; then
the original's and each further record's, each finding's detail and each
signature's place prefixed with the record it is about (their event positions
are in that text, not in ``event``, which always means the undo record); then
the undo rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from hatp.clock import parse_time
from hatp.errors import InvalidJson, SignatureInvalid, VersionUnsupported
from hatp.evidence._keys import Keyring
from hatp.evidence._tally import Place, Signatures, Tally
from hatp.evidence._txn_read import Txn, read_txn, wire_time
from hatp.evidence._verify import verify_record
from hatp.model import (
    Branch,
    Finding,
    OutcomeReceipt,
    Plan,
    Result,
    SignatureUse,
    TxnEvent,
    TxnState,
    UndoReference,
    VerificationReport,
)

#: The undo rules, in report order, with what a pass means.
UNDO_RULES: dict[str, str] = {
    "UNDO-LINK": "the undo plan carries an undo reference to this original record at its "
    "head, signed (at its time) by the coordinator that signed the original's events",
    "UNDO-STEPS": "the original committed, and each undo branch takes back one of its "
    "committed steps, at that step's participant, with the operation and tier that step's "
    "signed commit receipt offered, before the offer lapsed",
    "UNDO-ONCE": "across every committed undo shown, each about this original, no step of "
    "the original is taken back twice",
}

#: Where the undo reference sits in the undo record.
_REFERENCE = "body.plan.undoes"


@dataclass(frozen=True)
class _Record:
    """One record of the check, read: its id, stated head, transaction view and report."""

    role: str
    record: Mapping[str, Any]
    report: VerificationReport
    txn: Txn

    @property
    def record_id(self) -> str:
        return self.report.record_id

    @property
    def name(self) -> str:
        return f"{self.role} {self.record_id}"

    @property
    def plan(self) -> Plan | None:
        return self.txn.plan

    @property
    def reference(self) -> UndoReference | None:
        return None if self.txn.plan is None else self.txn.plan.undoes

    def states(self) -> list[Any]:
        """What each ``txn.outcome`` event of the record says the outcome is."""
        return [event.get("state") for event in self.txn.of(TxnEvent.OUTCOME)]


def verify_undo(
    undo: Mapping[str, Any],
    original: Mapping[str, Any],
    keyring: Keyring,
    *,
    others: Sequence[Mapping[str, Any]] = (),
    expected_head: str | None = None,
) -> VerificationReport:
    """Check an undo record offline against its original; return one report.

    ``undo``, ``original`` and each of ``others`` (further undo records of the
    same original) are verified as records (:func:`verify_record`); then the
    undo rules (:data:`UNDO_RULES`) check how ``undo`` links to ``original``
    and that no step is taken back twice. ``expected_head`` pins the undo
    record's head, as in :func:`verify_record`. The report passes only if every
    finding of every record, and every undo rule, passes.

    Raises:
        RecordInvalid: one of them is not a record at all.
        VersionUnsupported: one of them names a version this build does not know.
    """
    first = _read("undo", undo, keyring, expected_head)
    origin = _read("original", original, keyring, None)
    more = [_read("undo", other, keyring, None) for other in others]
    tally = Tally(UNDO_RULES)
    link = Signatures()
    passes = {
        "UNDO-LINK": _check_link(first, origin, keyring, link, tally),
        "UNDO-STEPS": _check_steps(first, origin, tally),
        "UNDO-ONCE": _check_once(first, origin, more, tally),
    }
    findings = [
        *first.report.findings,
        *_of(origin),
        *(finding for other in more for finding in _of(other)),
        *tally.findings({rule: detail for rule, detail in passes.items() if detail}),
    ]
    uses = sorted(
        [*first.report.signatures, *link.uses()],
        key=lambda use: -1 if use.event is None else use.event,
    )
    for other in (origin, *more):
        uses += [_moved(other, use) for use in other.report.signatures]
    return VerificationReport(
        hatp_version=first.report.hatp_version,
        record_id=first.record_id,
        head=first.report.head,
        events=first.report.events,
        ok=all(f.result is Result.PASS for f in findings),
        findings=findings,
        signatures=uses,
    )


def _read(
    role: str, record: Mapping[str, Any], keyring: Keyring, expected_head: str | None
) -> _Record:
    report = verify_record(record, keyring, expected_head=expected_head)
    events = record["events"]  # verify_record has checked it is a list
    return _Record(role, record, report, read_txn(report.record_id, events, keyring))


def _of(read: _Record) -> list[Finding]:
    """Another record's findings, each saying which record (and event) it is about."""
    out = []
    for finding in read.report.findings:
        where = read.name
        if finding.event is not None and f"event {finding.event}" not in finding.detail:
            where += f", event {finding.event}"
        out.append(
            finding.model_copy(update={"detail": f"{where}: {finding.detail}", "event": None})
        )
    return out


def _moved(read: _Record, use: SignatureUse) -> SignatureUse:
    """Another record's signature, placed in that record."""
    return use.model_copy(update={"where": f"{read.name}: {use.where}", "event": None})


# --- the rules, each -> the detail of a pass ----------------------------------------


def _check_link(
    undo: _Record, original: _Record, keyring: Keyring, link: Signatures, tally: Tally
) -> str | None:
    rule = "UNDO-LINK"
    if undo.plan is None:
        tally.absent(rule, f"the undo record's plan cannot be read: {undo.txn.plan_problem}")
        return None
    ref = undo.reference
    if ref is None:
        tally.fail(
            rule,
            f"{undo.name}'s plan has no undoes reference: it is not an undo transaction",
            0,
        )
        return None
    if ref.txn_id != original.record_id:
        tally.fail(
            rule,
            f"the undo plan takes back transaction {ref.txn_id!r}, but the original given is "
            f"{original.record_id!r}",
            0,
        )
    stated = original.record.get("head")
    if ref.head != stated or original.report.head != stated:
        given = (
            f"is at head {stated}"
            if original.report.head == stated
            else f"states head {stated!r}, and its last event digests to {original.report.head}"
        )
        tally.fail(
            rule,
            f"the undo reference names head {ref.head}, but the original given {given}: it is "
            "not the record the undo was built from (or it changed since)",
            0,
        )
    problem = _reference_signer(undo, original, ref, keyring, link)
    if problem is not None:
        tally.fail(rule, f"the undo reference {problem}", 0)
    tally.ran(rule)
    return f"undo reference to {ref.txn_id} at head {ref.head}, signed by {ref.coordinator}"


def _reference_signer(
    undo: _Record, original: _Record, ref: UndoReference, keyring: Keyring, link: Signatures
) -> str | None:
    """Why the reference is not the original's coordinator's signed word, or ``None``."""
    raw = undo.txn.events[0].get("plan")["undoes"]  # the plan parsed: it is there
    at = wire_time(ref.time)
    try:
        signer = link.verify(raw, keyring, Place(0, _REFERENCE, at), ref.time)
    except (SignatureInvalid, VersionUnsupported, InvalidJson) as exc:
        return f"does not verify: {exc.data.get('reason', exc.code)}: {exc.message}"
    if signer.issuer != ref.coordinator:
        return f"names coordinator {ref.coordinator!r} but is signed by {signer.issuer!r}"
    signers = _event_signers(original, keyring)
    if signers != {signer.issuer}:
        found = ", ".join(repr(s) for s in sorted(signers)) or "nobody this keyring knows"
        return (
            f"is signed by {signer.issuer!r}, but the original's events are signed by {found}: "
            "only the coordinator that ran a transaction vouches for its record"
        )
    return None


def _event_signers(read: _Record, keyring: Keyring) -> set[str]:
    """Who vouches, in ``keyring``, for the keys that signed the record's events (whether
    each signature verifies is the record's own [REC-SIG])."""
    out: set[str] = set()
    for event in read.record["events"]:
        signature = event.get("signature") if isinstance(event, dict) else None
        kid = signature.get("kid") if isinstance(signature, dict) else None
        if isinstance(kid, str) and kid in keyring:
            try:
                out.add(keyring.resolve(kid)[1])
            except SignatureInvalid:
                continue
    return out


@dataclass(frozen=True)
class _Step:
    """A committed step of the original: where its commit was logged, and its receipt."""

    position: int
    receipt: OutcomeReceipt | None


def _committed_steps(original: _Record) -> dict[str, _Step]:
    """The original's steps with a ``txn.committed`` event and not taken back after (a
    ``txn.compensated``, or an abort that returned a compensate receipt), by branch id."""
    steps: dict[str, _Step] = {}
    for event in original.txn.events:
        receipt = event.embedded()
        if event.type == TxnEvent.COMPENSATED or (
            event.type == TxnEvent.ABORTED
            and receipt is not None
            and receipt.get("kind") == "compensate"
        ):
            steps.pop(str(event.branch), None)
        elif event.type == TxnEvent.COMMITTED and event.branch is not None:
            try:
                parsed = OutcomeReceipt.model_validate(receipt)
            except ValidationError:
                parsed = None
            steps[event.branch] = _Step(event.position, parsed)
    return steps


def _check_steps(undo: _Record, original: _Record, tally: Tally) -> str | None:
    rule = "UNDO-STEPS"
    if undo.plan is None or undo.reference is None:
        tally.absent(rule, "not checked: the undo record's plan is not an undo plan")
        return None
    if original.plan is None:
        tally.absent(rule, f"the original's plan cannot be read: {original.txn.plan_problem}")
        return None
    states = original.states()
    if not states or any(state != TxnState.COMMITTED for state in states):
        said = ", ".join(repr(s) for s in states) or "no outcome"
        tally.fail(
            rule,
            f"the original {original.record_id} concluded {said}, not committed: only a "
            "committed transaction's steps can be taken back",
        )
    steps = _committed_steps(original)
    planned = undo.txn.events[0].time
    for branch in undo.plan.branches:
        assert branch.undoes is not None  # the plan's own rule [UNDO-PLAN]
        step_id = branch.undoes.branch_id
        problem = _step_problem(original, step_id, steps.get(step_id))
        if problem is None:
            problem = _offer_problem(original, step_id, steps[step_id], branch, planned)
        if problem is not None:
            tally.fail(rule, f"undo branch {branch.branch_id!r} {problem}", 0)
    tally.ran(rule)
    taken = ", ".join(b.undoes.branch_id for b in undo.plan.branches if b.undoes is not None)
    return (
        f"each undo branch takes back a committed step of {original.record_id} as offered: {taken}"
    )


def _step_problem(original: _Record, step_id: str, step: _Step | None) -> str | None:
    """Why ``step_id`` is no step that can be taken back, or ``None``."""
    if step is None:
        return (
            f"takes back {step_id!r}, which is not a step {original.record_id} committed "
            "(never committed there, or compensated after)"
        )
    offer = None if step.receipt is None else step.receipt.undo
    if offer is None:
        return (
            f"takes back {step_id!r}, whose commit receipt (original event {step.position}) "
            "offers no undo"
        )
    if not offer.undoable:
        return (
            f"takes back {step_id!r}, whose commit receipt (original event {step.position}) says "
            f"it is not undoable: {offer.reason or 'no reason given'}"
        )
    return None


def _offer_problem(
    original: _Record, step_id: str, step: _Step, branch: Branch, planned: datetime | None
) -> str | None:
    """Why ``branch`` does not take the step back as its signed offer says, or ``None``."""
    assert step.receipt is not None and step.receipt.undo is not None
    offer = step.receipt.undo
    assert original.plan is not None
    try:
        participant = original.plan.branch(step_id).participant
    except KeyError:
        return f"takes back {step_id!r}, which is not a branch of {original.record_id}'s plan"
    if branch.participant != participant:
        return f"takes back {step_id!r} at {branch.participant}, but that step is {participant}'s"
    if (branch.operation, branch.tier) != (offer.operation, offer.tier):
        return (
            f"takes back {step_id!r} with {branch.operation} ({branch.tier.value}), but the "
            f"step's signed commit receipt (original event {step.position}) offers "
            f"{offer.operation} ({offer.tier.value if offer.tier else 'no tier'})"
        )
    if offer.undo_by is not None and planned is not None and planned > parse_time(offer.undo_by):
        return (
            f"takes back {step_id!r}, but the undo was planned after the step's undo offer "
            f"lapsed at {offer.undo_by}"
        )
    return None


def _check_once(
    undo: _Record, original: _Record, others: Sequence[_Record], tally: Tally
) -> str | None:
    rule = "UNDO-ONCE"
    for other in others:
        ref = other.reference
        if ref is None:
            tally.fail(
                rule,
                f"record {other.record_id} is given as an undo of {original.record_id}, but "
                + ("its plan cannot be read" if other.plan is None else "it undoes nothing"),
            )
        elif ref.txn_id != original.record_id or ref.head != original.report.head:
            tally.fail(
                rule,
                f"{other.name} takes back {ref.txn_id} at head {ref.head}, not the original "
                f"{original.record_id} at head {original.report.head}",
            )
    seen: dict[str, _Record] = {}
    taken: dict[str, list[str]] = {}
    for read in (undo, *others):
        earlier = seen.get(read.record_id)
        if earlier is not None:
            if earlier.report.head != read.report.head:
                tally.fail(
                    rule,
                    f"two different records of {read.name} are given (heads "
                    f"{earlier.report.head} and {read.report.head})",
                )
            continue
        seen[read.record_id] = read
        if read.plan is None or TxnState.COMMITTED not in read.states():
            continue
        for branch in read.plan.branches:
            if branch.undoes is not None and branch.undoes.txn_id == original.record_id:
                taken.setdefault(branch.undoes.branch_id, []).append(read.record_id)
    for step_id, by in taken.items():
        if len(by) > 1:
            tally.fail(
                rule,
                f"step {step_id!r} of {original.record_id} is taken back by {len(by)} committed "
                f"undos: {', '.join(by)}",
            )
    tally.ran(rule)
    committed = sorted({txn for by in taken.values() for txn in by})
    return (
        f"{len(committed)} committed undo(s) of {original.record_id} among {len(seen)} given; "
        f"no step taken back twice"
    )
