"""The offline verifier's transaction rules: a record that shows a real two-phase commit.

An intact chain says no event was removed or edited. A transaction's record
(it has ``txn.*`` events; the first is ``txn.planned``) must also show that
every party spoke about the one plan it starts with, that the coordinator
decided once, after every vote and approval was in, and that phase 2 did
only what that decision and the tiers allow. Each rule reads the events as
they stand; a rule that needs the plan is absent when the plan cannot be
read, and absent is never a pass. Rules are keyed by the ``branchId`` and
``groupId`` the coordinator wrote into each event body; [TXN-DIGEST]
checks those against the signed receipts, pending answers and approvals,
and against the quotes and chain estimates ``txn.mode`` carries.
What an approving approval carries (votes, cards, routing record) is
checked by the approval rules of :mod:`hatp.evidence._verify_approval`;
how phase 1 was timed (the mode, the approval deadline, the leases) by
:mod:`hatp.evidence._verify_holds`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from hatp.errors import InvalidJson, SignatureInvalid, VersionUnsupported
from hatp.evidence._keys import Keyring
from hatp.evidence._tally import Signatures, Tally
from hatp.evidence._txn_read import EMBEDDED, Event, Signed, Txn, read_txn, wire_time
from hatp.evidence._verify_approval import APPROVAL_RULES, Approving, approval_findings
from hatp.evidence._verify_holds import (
    check_approve_by,
    check_lease,
    check_mode,
    estimate_gateway_problem,
    plan_groups,
    recovery_problems,
)
from hatp.model import (
    COMMIT_ORDER,
    SEAL_EVENT,
    ApprovalDecision,
    Certainty,
    ChainEstimate,
    Decision,
    EffectPreview,
    EffectVerdict,
    Finding,
    Mode,
    ObservedEffect,
    Plan,
    Tier,
    TxnEvent,
    TxnState,
    Vote,
    effect_verdict,
    meets,
)

#: The transaction rules, in report order, with what a pass means.
TXN_RULES: dict[str, str] = {
    "TXN-PLAN": "the record starts with one txn.planned whose plan is valid, belongs to "
    "this record, and has the stated digest",
    "TXN-DIGEST": "every event, receipt, pending answer, approval, quote and estimate names "
    "this plan, this transaction and a branch or approval group of it",
    "TXN-SIGNER": "every receipt and quote is signed by its branch's participant and every "
    "approval, pending vote and estimate by its gateway",
    "TXN-MODE": "one txn.mode before anything is prepared or asked, choosing the plan's mode "
    "as its signed numbers say; in approval-first nothing is prepared before every approval",
    "TXN-DECIDED": "one decision, logged before anything is committed or concluded",
    "TXN-VOTES": "commit only after every branch voted yes and every approval group "
    "approved by the deadline",
    "TXN-APPROVE-BY": "no approval counted in a commit was decided after the approval "
    "deadline recorded before the decision",
    **APPROVAL_RULES,
    "TXN-ORDER": "branches are committed compensate first, then final, then hold",
    "TXN-LEASE": "the final step and every hold were committed while every hold they relied "
    "on was leased, and no lease passes its hold's horizon",
    "TXN-FINAL": "at most one final (irreversible) commit",
    "TXN-AFTER-ABORT": "nothing is committed after an abort decision or once unwinding began",
    "TXN-OUTCOME": "one outcome, last before the seal, borne out by the receipts",
    "TXN-SETTLED": "an aborted outcome shows, for every branch that voted yes, a release or "
    "compensate receipt; a needs-attention outcome names every branch still held",
    "TXN-PREVIEW": "the terms people approved state each step's effect preview exactly as "
    "its participant signed it (vote or quote), saying at least what the plan's and groups' "
    "policies ask, and every step committed is the one previewed",
    "TXN-EFFECT": "every committed step's observed effect is compared with the preview it was "
    "prepared with, in a txn.effect event stating the verdict the receipts bear out, and "
    "the outcome names every step that committed other than previewed (effectDiffers)",
}

_DECISIONS = tuple(d.value for d in Decision)
_BRANCH_EVENTS = frozenset(
    {
        TxnEvent.PREPARED,
        TxnEvent.REPLACED,
        TxnEvent.RENEWED,
        TxnEvent.IN_DOUBT,
        TxnEvent.UNWINDING,
        TxnEvent.COMMITTED,
        TxnEvent.EFFECT,
        TxnEvent.COMPENSATED,
        TxnEvent.ABORTED,
        TxnEvent.HELD,
    }
)


def transaction_findings(
    record_id: str,
    events: Sequence[Any],
    keyring: Keyring,
    signatures: Signatures | None = None,
) -> list[Finding]:
    """Check the transaction rules (:data:`TXN_RULES`); return one finding per rule.

    A failing rule has one finding per failure, ``event`` being its
    position. Every signed object an event carries is checked at that event's
    time ([VER-PERIOD]) and noted in ``signatures``. Never raises on a malformed
    record: what cannot be read fails or is absent.
    """
    txn = read_txn(record_id, events, keyring, signatures)
    tally = Tally(TXN_RULES)
    passes: dict[str, str] = {}
    for rule, check in _RULES.items():
        detail = check(txn, tally)
        if detail is not None:
            passes[rule] = detail
    if txn.plan is not None and txn.plan_digest is not None:
        approving = _approving(txn)
        passes.update(
            approval_findings(txn.plan, txn.plan_digest, approving, keyring, tally, txn.signatures)
        )
    return tally.findings(passes)


def _approving(txn: Txn) -> list[Approving]:
    """The approvals the record counts, that approve: what the approval rules check."""
    member = f"body.{EMBEDDED[TxnEvent.APPROVAL].member}"
    return [
        Approving(event.position, event.name, approval, event.place(member))
        for event in txn.of(TxnEvent.APPROVAL)
        if (approval := event.embedded()) is not None
        and approval.get("decision") == ApprovalDecision.APPROVE
    ]


# --- the rules, each (txn, tally) -> the detail of a pass -------------------------


def _check_plan(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-PLAN"
    if txn.plan is None:
        tally.fail(rule, f"the plan cannot be read: {txn.plan_problem}", 0)
        return None
    stated = txn.events[0].get("planDigest")
    if stated != txn.computed_digest:
        tally.fail(
            rule,
            f"event 0 (txn.planned) states planDigest {stated!r}, but its plan digests to "
            f"{txn.computed_digest}: the plan is not the one every party signed for",
            0,
        )
    if txn.plan.txn_id != txn.record_id:
        tally.fail(
            rule,
            f"event 0 (txn.planned) plans transaction {txn.plan.txn_id!r}, "
            f"but this is the record of {txn.record_id!r}",
            0,
        )
    for again in txn.of(TxnEvent.PLANNED)[1:]:
        tally.fail(
            rule, f"{again.name} plans the transaction again; only event 0 may", again.position
        )
    tally.ran(rule)
    return f"plan {txn.computed_digest} with {len(txn.plan.branches)} branches"


def _check_digest(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-DIGEST"
    if txn.plan is None:
        return None
    yes = _yes_votes(txn)
    events = [e for e in txn.events if e.type.startswith("txn.")]
    for event in events:
        for problem in _binding_problems(txn, txn.plan, event, yes):
            tally.fail(rule, f"{event.name} {problem}", event.position)
    tally.ran(rule)
    signed = sum(1 for e in events for s in e.signed() if isinstance(s.doc, dict))
    return f"{len(events)} events and {signed} signed objects name plan {txn.plan_digest}"


def _yes_votes(txn: Txn) -> list[str]:
    return [
        e.branch
        for e in txn.of(TxnEvent.PREPARED, TxnEvent.REPLACED)
        if (receipt := e.embedded()) is not None
        and receipt.get("vote") == Vote.YES
        and isinstance(e.branch, str)
    ]


def _binding_problems(txn: Txn, plan: Plan, event: Event, yes: list[str]) -> list[str]:
    out: list[str] = []
    if event.get("planDigest") != txn.plan_digest:
        out.append(f"names plan {event.get('planDigest')!r}, not {txn.plan_digest}")
    if event.type in _BRANCH_EVENTS and event.branch not in [b.branch_id for b in plan.branches]:
        out.append(f"names branch {event.branch!r}, which is not in the plan")
    group = event.get("groupId")
    spec = EMBEDDED.get(event.type)
    if spec and spec.key == "groupId" and group not in plan_groups(plan):
        out.append(f"names approval group {group!r}, which is not in the plan")
    for signed in event.signed():
        if isinstance(signed.doc, dict):
            out += _signed_binding(txn, plan, event, signed, yes)
    return out


def _signed_binding(
    txn: Txn, plan: Plan, event: Event, signed: Signed, yes: list[str]
) -> list[str]:
    what, doc = f"carries {signed.label}", signed.doc
    out: list[str] = []
    found = doc.get("planDigest")
    # An abort before any prepare cannot know the plan, and says so with null.
    unprepared_abort = found is None and doc.get("kind") == "abort" and event.branch not in yes
    if found != txn.plan_digest and not unprepared_abort:
        out.append(f"{what} for plan {found!r}, not {txn.plan_digest}")
    if doc.get("txnId") != plan.txn_id:
        out.append(f"{what} for transaction {doc.get('txnId')!r}, not {plan.txn_id!r}")
    key = signed.spec.key
    if event.type in EMBEDDED:
        if doc.get(key) != signed.filed_under:
            out.append(f"{what} for {key} {doc.get(key)!r}, not {signed.filed_under!r}")
        return out
    # The lists of txn.mode are filed under no branch or group: each names its own.
    ids = [b.branch_id for b in plan.branches] if key == "branchId" else plan_groups(plan)
    if doc.get(key) not in ids:
        out.append(f"{what} for {key} {doc.get(key)!r}, which is not in the plan")
    return out


def _check_signers(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-SIGNER"
    if txn.plan is None:
        return None
    checked = 0
    for event in txn.events:
        for signed in event.signed():
            checked += 1
            problem = _signer_problem(txn, txn.plan, event, signed)
            if problem is not None:
                tally.fail(rule, f"{event.name}: {problem}", event.position)
    tally.ran(rule)
    return f"{checked} signed receipts, approvals, quotes and estimates verify, each by its party"


def _signer_problem(txn: Txn, plan: Plan, event: Event, found: Signed) -> str | None:
    where, spec, signed = found.where, found.spec, found.doc
    if not isinstance(signed, dict):
        return f"{where} is {'missing' if signed is None else 'not an object'}"
    try:
        spec.model.model_validate(signed)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(p) for p in error["loc"])
        return f"{where} is not a {spec.model.__name__}: {loc}: {error['msg']}"
    if signed["kind"] not in spec.kinds:
        return f"{where} has kind {signed['kind']!r}; this event carries {' or '.join(spec.kinds)}"
    if signed.get("attempt", 1) < spec.min_attempt:
        return f"{where} is attempt {signed.get('attempt', 1)}; a hold placed again is attempt 2 on"
    try:
        # At its event's time: the coordinator recorded it then, so it was signed by then.
        signer = txn.signatures.verify(signed, txn.keyring, event.place(where))
    except (SignatureInvalid, VersionUnsupported, InvalidJson) as exc:
        return f"{where} does not verify: {exc.data.get('reason', exc.code)}: {exc.message}"
    if spec.key == "groupId":
        expected, role = signed["gateway"], "the gateway it names"
        if spec.model is ChainEstimate:
            problem = estimate_gateway_problem(txn, signed)
            if problem is not None:
                return f"{where} {problem}"
    else:
        branch = next((b for b in plan.branches if b.branch_id == signed["branchId"]), None)
        if branch is None:
            return None  # names no branch of the plan: TXN-DIGEST reports it
        expected, role = branch.participant, f"the participant of branch {branch.branch_id!r}"
        if signed["participant"] != expected:
            return f"{where} names participant {signed['participant']!r}, not {role} {expected!r}"
    if signer.issuer != expected:
        return (
            f"{where} is signed by {signer.issuer!r} (key {signer.kid!r}), "
            f"not by {role} {expected!r}"
        )
    return None


def _check_decided(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-DECIDED"
    decided = txn.of(TxnEvent.DECIDED)
    later = txn.of(TxnEvent.COMMITTED, TxnEvent.COMPENSATED, TxnEvent.OUTCOME)
    if not decided:
        for event in later:
            tally.fail(rule, f"{event.name} but the record has no txn.decided", event.position)
        tally.ran(rule)
        return "nothing was decided, and nothing committed or concluded"
    first = decided[0]
    for again in decided[1:]:
        tally.fail(
            rule, f"{again.name} decides again; the decision is at {first.name}", again.position
        )
    if first.get("decision") not in _DECISIONS:
        tally.fail(
            rule,
            f"{first.name} decides {first.get('decision')!r}, not commit or abort",
            first.position,
        )
    for event in later:
        if event.position < first.position:
            tally.fail(
                rule,
                f"{event.name} comes before the decision at {first.name}: a decision is "
                "logged before anything is committed",
                event.position,
            )
    tally.ran(rule)
    return f"decision {first.get('decision')!r} logged at event {first.position}"


def _check_votes(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-VOTES"
    if txn.plan is None:
        return None
    point = txn.commit_point()
    if point is None:
        tally.ran(rule)
        return "nothing was decided or concluded as commit"
    # Votes and approvals count only when they were in before the decision.
    at, cutoff = point
    for problem in _missing_consent(txn, txn.plan, cutoff):
        tally.fail(rule, f"{at.name} commits, but {problem}", at.position)
    tally.ran(rule)
    return "every branch voted yes and every approval group approved before the decision"


def _vote(event: Event) -> Any:
    """What a prepare or replace event says the branch voted; ``None`` if nothing."""
    receipt = event.embedded()
    if receipt is not None:
        return receipt.get("vote")
    return f"refused: {event.get('problem')}" if event.refused else None


def _missing_consent(txn: Txn, plan: Plan, cutoff: int) -> list[str]:
    before = [e for e in txn.events if e.position < cutoff]
    votes: dict[Any, list[Any]] = {}
    # A hold placed again stands on its latest replace.
    again: dict[Any, Any] = {}
    for event in before:
        voting = event.type in (TxnEvent.PREPARED, TxnEvent.REPLACED)
        vote = _vote(event) if voting and isinstance(event.branch, str) else None
        if vote is not None and event.type == TxnEvent.PREPARED:
            votes.setdefault(event.branch, []).append(vote)
        elif vote is not None:
            again[event.branch] = vote
    out = []
    for branch in plan.branches:
        bid, cast = branch.branch_id, votes.get(branch.branch_id, [])
        if not cast:
            out.append(f"branch {bid!r} has no yes vote (no prepare receipt)")
        elif any(vote != Vote.YES for vote in cast):
            out.append(f"branch {bid!r} has no yes vote (it voted {cast})")
        elif again.get(bid, Vote.YES) != Vote.YES:
            out.append(f"branch {bid!r} was lost and not placed again ({again[bid]})")
    deadline = plan.deadlines.decide_by
    for group in plan.approvals:
        answers = [
            a
            for e in before
            if e.type == TxnEvent.APPROVAL and e.get("groupId") == group.group_id
            if (a := e.embedded()) is not None
        ]
        if any(a.get("decision") == ApprovalDecision.REJECT for a in answers):
            out.append(f"approval group {group.group_id!r} rejected")
        elif not any(
            a.get("decision") == ApprovalDecision.APPROVE and _by(a.get("decidedAt"), deadline)
            for a in answers
        ):
            out.append(f"approval group {group.group_id!r} has no approval decided by {deadline}")
    return out


def _by(moment: Any, deadline: str) -> bool:
    at, by = wire_time(moment), wire_time(deadline)
    return at is not None and by is not None and at <= by


def _check_order(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-ORDER"
    if txn.plan is None:
        return None
    rank = {tier: index for index, tier in enumerate(COMMIT_ORDER)}
    latest: tuple[Event, Tier] | None = None
    commits = txn.of(TxnEvent.COMMITTED)
    for event in commits:
        tier = txn.tier(event.branch)
        if tier is None:
            continue
        if latest is not None and rank[tier] < rank[latest[1]]:
            tally.fail(
                rule,
                f"{event.name} commits {tier} branch {event.branch!r} after {latest[1]} branch "
                f"{latest[0].branch!r} at event {latest[0].position}; commits go "
                "compensate, then final, then hold",
                event.position,
            )
        else:
            latest = (event, tier)
    tally.ran(rule)
    return f"{len(commits)} commits in tier order compensate, final, hold"


def _check_final(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-FINAL"
    if txn.plan is None:
        return None
    finals = [b.branch_id for b in txn.plan.branches if b.tier is Tier.FINAL]
    if len(finals) > 1:
        tally.fail(rule, f"event 0 (txn.planned): the plan has final branches {finals}", 0)
    done = [e for e in txn.of(TxnEvent.COMMITTED) if txn.tier(e.branch) is Tier.FINAL]
    for again in done[1:]:
        tally.fail(
            rule,
            f"{again.name} commits final branch {again.branch!r}, but a final step was "
            f"already committed at {done[0].name} (branch {done[0].branch!r})",
            again.position,
        )
    tally.ran(rule)
    return f"{len(done)} of at most 1 final commit"


def _check_after_abort(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-AFTER-ABORT"
    stop: Event | None = None
    for event in txn.events:
        aborts = event.type == TxnEvent.DECIDED and event.get("decision") == Decision.ABORT
        if stop is None and (aborts or event.type == TxnEvent.UNWINDING):
            stop = event
        elif stop is not None and event.type == TxnEvent.COMMITTED:
            why = "the abort decision" if stop.type == TxnEvent.DECIDED else "unwinding began"
            tally.fail(
                rule,
                f"{event.name} commits branch {event.branch!r} after {why} at {stop.name}",
                event.position,
            )
    tally.ran(rule)
    return "no commit after an abort decision or unwinding"


def _check_outcome(txn: Txn, tally: Tally) -> str | None:
    rule = "TXN-OUTCOME"
    outcomes = txn.of(TxnEvent.OUTCOME)
    last = next((e for e in reversed(txn.events) if e.type != SEAL_EVENT), None)
    if last is None:
        tally.fail(rule, "the record has no events but its seal, so no txn.outcome")
        return None
    if not outcomes:
        tally.fail(rule, f"the record has no txn.outcome; it ends at {last.name}", last.position)
        return None
    outcome = outcomes[0]
    for again in outcomes[1:]:
        tally.fail(rule, f"{again.name} is a second outcome after {outcome.name}", again.position)
    if outcome is not last and len(outcomes) == 1:
        tally.fail(
            rule, f"{outcome.name} is not the last event: {last.name} follows it", outcome.position
        )
    state = outcome.get("state")
    checks = {
        TxnState.COMMITTED: _committed_problems,
        TxnState.ABORTED: _aborted_problems,
        TxnState.NEEDS_RECOVERY: recovery_problems,
        TxnState.NEEDS_ATTENTION: _attention_problems,
    }
    if state not in checks:
        tally.fail(
            rule,
            f"{outcome.name} states {state!r}, not committed, aborted, needs-recovery or "
            "needs-attention",
            outcome.position,
        )
        return None
    if txn.plan is None:
        return None
    check = checks[state]
    for position, problem in check(txn, txn.plan, outcome):
        tally.fail(rule, problem, position)
    tally.ran(rule)
    return f"outcome {state} at event {outcome.position}, borne out by the receipts"


def _is_receipt(event: Event, kind: str, outcome: str) -> bool:
    receipt = event.embedded()
    return receipt is not None and receipt.get("kind") == kind and receipt.get("outcome") == outcome


def _committed_problems(txn: Txn, plan: Plan, outcome: Event) -> list[tuple[int, str]]:
    commits = [
        e.branch for e in txn.of(TxnEvent.COMMITTED) if _is_receipt(e, "commit", "committed")
    ]
    out = [
        (
            outcome.position,
            f"{outcome.name} says committed, but branch {b.branch_id!r} has no commit receipt",
        )
        for b in plan.branches
        if b.branch_id not in commits
    ]
    out += [
        (e.position, f"{e.name}: branch {e.branch!r} was undone, yet {outcome.name} says committed")
        for e in txn.of(TxnEvent.COMPENSATED, TxnEvent.ABORTED)
    ]
    return out


def _aborted_problems(
    txn: Txn, plan: Plan, outcome: Event, exempt: frozenset[str] | set[str] = frozenset()
) -> list[tuple[int, str]]:
    """Why an abort is not borne out: a commit left standing (but for ``exempt`` branches)."""
    undone = [
        e
        for e in txn.of(TxnEvent.COMPENSATED, TxnEvent.ABORTED)
        if _is_receipt(e, "compensate", "compensated")
    ]
    out = []
    for event in txn.of(TxnEvent.COMMITTED):
        tier = txn.tier(event.branch)
        if tier is None or event.branch in exempt or not _is_receipt(event, "commit", "committed"):
            continue
        if tier is not Tier.COMPENSATE:
            problem = f"its {tier} effect stays"
        elif not any(u.branch == event.branch and u.position > event.position for u in undone):
            problem = "no compensate receipt follows"
        else:
            continue
        out.append(
            (
                event.position,
                f"{event.name} commits {tier} branch {event.branch!r} and {problem}, "
                f"yet {outcome.name} says aborted",
            )
        )
    return out


def _attention_problems(txn: Txn, plan: Plan, outcome: Event) -> list[tuple[int, str]]:
    """A needs-attention outcome is an abort, except for the branches it names as held."""
    held = _held(outcome)
    if not held:
        return [(outcome.position, f"{outcome.name} says needs-attention but names nothing held")]
    return _aborted_problems(txn, plan, outcome, exempt=held)


def _held(outcome: Event) -> set[str]:
    named = outcome.get("held")
    if not isinstance(named, list):
        return set()
    return {b for b in named if isinstance(b, str)}


def _check_settled(txn: Txn, tally: Tally) -> str | None:
    """[TXN-SETTLED]: an abort is clean only where a receipt says so.

    Every branch that voted yes and was not committed (its participant may hold
    something for it) must show, after its last yes vote, a participant-signed
    abort or compensate receipt; a ``needs-attention`` outcome may instead name
    it in ``held``. A committed branch's effect and undo are [TXN-OUTCOME]'s.
    """
    rule = "TXN-SETTLED"
    outcome = next(iter(txn.of(TxnEvent.OUTCOME)), None)
    state = None if outcome is None else outcome.get("state")
    if outcome is None or state not in (TxnState.ABORTED, TxnState.NEEDS_ATTENTION):
        tally.ran(rule)
        return "not an aborted record"
    held = _held(outcome) if state == TxnState.NEEDS_ATTENTION else set()
    voted: dict[str, int] = {}
    for event in txn.of(TxnEvent.PREPARED, TxnEvent.REPLACED):
        receipt = event.embedded()
        if (
            receipt is not None
            and receipt.get("vote") == Vote.YES
            and isinstance(event.branch, str)
        ):
            voted[event.branch] = event.position
    # A branch committed is [TXN-OUTCOME]'s to judge (its effect, and its undo).
    committed = {
        e.branch for e in txn.of(TxnEvent.COMMITTED) if _is_receipt(e, "commit", "committed")
    }
    settled = committed | {
        e.branch
        for e in txn.of(TxnEvent.ABORTED, TxnEvent.COMPENSATED)
        if e.branch in voted
        and e.position > voted[e.branch]
        and (_is_receipt(e, "abort", "aborted") or _is_receipt(e, "compensate", "compensated"))
    }
    for branch, position in sorted(voted.items(), key=lambda item: item[1]):
        if branch in settled or branch in held:
            continue
        tally.fail(
            rule,
            f"branch {branch!r} voted yes at event {position} and nothing shows it released "
            f"or undone, yet {outcome.name} says {state}"
            + ("" if state == TxnState.ABORTED else " without naming it held"),
            outcome.position,
        )
    tally.ran(rule)
    return f"every one of {len(voted)} yes votes released, undone or named held"


def _check_preview(txn: Txn, tally: Tally) -> str | None:
    """[TXN-PREVIEW]: what people were shown is what the participants signed, and ran.

    In a record with terms (holds-first, approval-first), the terms' ``previews``
    state, for every branch whose participant signed a preview (in holds-first its
    yes vote before the terms, in approval-first its quote in ``txn.mode``), exactly
    that preview, and nothing for any other branch; each says at least what the
    plan's and the approval groups' policies ask of its tier; and every committed
    branch's last yes vote before its commit signed the preview the terms state,
    unless that one is ``none`` (a hold placed again after the approval, or a
    prepare unlike its quote, with another preview fails: people approved
    something else). A record that commits a plan requiring previews states terms.
    """
    rule = "TXN-PREVIEW"
    found = txn.of(TxnEvent.TERMS)
    policy = None if txn.plan is None else txn.plan.preview_policy
    if len(found) != 1:  # none: nothing was shown with the plan; several: [TXN-MODE]'s
        point = txn.commit_point()
        if not found and policy is not None and policy.demands and point is not None:
            tally.fail(
                rule,
                "the plan requires effect previews, but the record commits with no terms "
                "showing them to the approvers",
                point[0].position,
            )
        tally.ran(rule)
        return "no terms: no previews were stated to the approvers"
    terms_event = found[0]
    terms = terms_event.get("terms")
    shown = terms.get("previews") if isinstance(terms, dict) else None
    if not isinstance(shown, dict):
        shown = {}
    signed = _signed_previews(txn, terms_event)
    for branch in sorted(set(signed) | set(shown)):
        if not _same_preview(shown.get(branch), signed.get(branch)):
            said = "no preview" if branch not in shown else "another preview"
            tally.fail(
                rule,
                f"{terms_event.name} states {said} for branch {branch!r} than its participant "
                "signed before it",
                terms_event.position,
            )
    planned_branches = [] if policy is None or txn.plan is None else txn.plan.branches
    for planned in planned_branches:
        need = "none" if policy is None else policy.required(planned.tier)
        try:
            stated = shown.get(planned.branch_id)
            preview = None if stated is None else EffectPreview.model_validate(stated)
        except ValidationError:
            preview = None
        if not meets(preview, need):
            tally.fail(
                rule,
                f"{terms_event.name} shows people a {planned.tier.value} step "
                f"{planned.branch_id!r} whose preview says less than the plan's minimum {need}",
                terms_event.position,
            )
    for commit in txn.of(TxnEvent.COMMITTED):
        branch = str(commit.branch)
        approved = shown.get(branch)
        if not isinstance(approved, dict) or approved.get("certainty") == Certainty.NONE:
            continue
        try:
            ran = _last_preview(txn, branch, commit.position)
        except ValidationError:
            ran = None
        if ran is None or not _same_preview(ran.to_wire(), approved):
            tally.fail(
                rule,
                f"{commit.name}: branch {branch!r} committed on a vote whose preview is not "
                f"the one people approved in {terms_event.name}",
                commit.position,
            )
    tally.ran(rule)
    return f"{terms_event.name} states {len(shown)} previews as their participants signed them"


def _check_effect(txn: Txn, tally: Tally) -> str | None:
    """[TXN-EFFECT]: a difference between what was previewed and what was done shows.

    For each committed branch, the verdict is recomputed from the preview of its
    last yes vote before the commit and the observed effect of its commit receipt
    (:func:`~hatp.model.effect_verdict`). Unless it is ``unchecked``, a
    ``txn.effect`` event for the branch must state it; the outcome's
    ``effectDiffers`` must name exactly the branches that differ. A record that
    hides a difference (no event, another verdict, the flag left out) fails.
    """
    rule = "TXN-EFFECT"
    stated: dict[str, list[Event]] = {}
    for event in txn.of(TxnEvent.EFFECT):
        stated.setdefault(str(event.branch), []).append(event)
    differs: set[str] = set()
    checked = 0
    for commit in txn.of(TxnEvent.COMMITTED):
        receipt = commit.embedded()
        if receipt is None or not _is_receipt(commit, "commit", "committed"):
            continue
        branch = str(commit.branch)
        try:
            preview = _last_preview(txn, branch, commit.position)
            observed = receipt.get("observed")
            seen = None if observed is None else ObservedEffect.model_validate(observed)
        except ValidationError as exc:
            tally.fail(rule, f"{commit.name}: a preview or observed effect is malformed: {exc}")
            continue
        verdict = effect_verdict(preview, seen)
        said = [e for e in stated.pop(branch, []) if e.position > commit.position]
        if verdict is EffectVerdict.UNCHECKED:
            continue
        checked += 1
        if verdict is EffectVerdict.DIFFERS:
            differs.add(branch)
        if not said:
            tally.fail(
                rule,
                f"{commit.name}: branch {branch!r} committed {verdict.value} its preview, and no "
                "txn.effect event says so",
                commit.position,
            )
        for event in said:
            if event.get("verdict") != verdict.value:
                tally.fail(
                    rule,
                    f"{event.name} states {event.get('verdict')!r} for branch {branch!r}; its "
                    f"receipts bear out {verdict.value!r}",
                    event.position,
                )
    for branch, events in stated.items():
        for event in events:
            tally.fail(
                rule, f"{event.name} judges branch {branch!r}, which has no commit before it"
            )
    outcome = next(iter(txn.of(TxnEvent.OUTCOME)), None)
    if outcome is not None:
        named = outcome.get("effectDiffers")
        flagged = set(named) if isinstance(named, list) else set()
        if flagged != differs:
            tally.fail(
                rule,
                f"{outcome.name} names {sorted(flagged)} as committed other than previewed; "
                f"the receipts show {sorted(differs)}",
                outcome.position,
            )
    tally.ran(rule)
    return f"{checked} committed steps compared with their previews; {len(differs)} differ"


def _same_preview(one: Any, other: Any) -> bool:
    """Whether two stated previews say the same: equal as EffectPreviews (a member left
    out and one written ``null`` are the same), or equal as JSON when either is not one."""
    if one is None or other is None:
        return one is other
    try:
        return EffectPreview.model_validate(one) == EffectPreview.model_validate(other)
    except ValidationError:
        return bool(one == other)


def _signed_previews(txn: Txn, terms_event: Event) -> dict[str, Any]:
    """The previews the participants signed before ``terms_event``, by branch: in
    approval-first their quotes' (in ``txn.mode``), else their yes votes'."""
    mode = next(iter(txn.of(TxnEvent.MODE)), None)
    if mode is not None and mode.get("chosen") == Mode.APPROVAL_FIRST:
        quotes = mode.get("quotes")
        return {
            str(quote.get("branchId")): quote["preview"]
            for quote in (quotes if isinstance(quotes, list) else [])
            if isinstance(quote, dict) and quote.get("preview") is not None
        }
    signed: dict[str, Any] = {}
    for event in txn.of(TxnEvent.PREPARED, TxnEvent.REPLACED):
        receipt = event.embedded()
        if (
            event.position < terms_event.position
            and receipt is not None
            and receipt.get("vote") == Vote.YES
            and receipt.get("preview") is not None
        ):
            signed[str(event.branch)] = receipt["preview"]
    return signed


def _last_preview(txn: Txn, branch: str, before: int) -> EffectPreview | None:
    """The preview of the branch's last yes vote before event ``before``."""
    preview = None
    for event in txn.of(TxnEvent.PREPARED, TxnEvent.REPLACED):
        receipt = event.embedded()
        if event.branch != branch or event.position > before or receipt is None:
            continue
        if receipt.get("vote") == Vote.YES:
            shown = receipt.get("preview")
            preview = None if shown is None else EffectPreview.model_validate(shown)
    return preview


_RULES: dict[str, Callable[[Txn, Tally], str | None]] = {
    "TXN-PLAN": _check_plan,
    "TXN-DIGEST": _check_digest,
    "TXN-SIGNER": _check_signers,
    "TXN-MODE": check_mode,
    "TXN-DECIDED": _check_decided,
    "TXN-VOTES": _check_votes,
    "TXN-APPROVE-BY": check_approve_by,
    "TXN-ORDER": _check_order,
    "TXN-LEASE": check_lease,
    "TXN-FINAL": _check_final,
    "TXN-AFTER-ABORT": _check_after_abort,
    "TXN-OUTCOME": _check_outcome,
    "TXN-SETTLED": _check_settled,
    "TXN-PREVIEW": _check_preview,
    "TXN-EFFECT": _check_effect,
}
