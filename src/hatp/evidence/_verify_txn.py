"""The offline verifier's transaction rules: a record that shows a real two-phase commit.

An intact chain says no event was removed or edited. A transaction's record
(it has ``txn.*`` events; the first is ``txn.planned``) must also show that
every party spoke about the one plan it starts with, that the coordinator
decided once, after every vote and approval was in, and that phase 2 did
only what that decision and the tiers allow. Each rule reads the events as
they stand; a rule that needs the plan is absent when the plan cannot be
read, and absent is never a pass. Rules are keyed by the ``branchId`` and
``groupId`` the coordinator wrote into each event body; [TXN-DIGEST]
checks those against the signed receipts, pending answers and approvals.
What an approving approval carries (votes, cards, routing record) is
checked by the approval rules of :mod:`hatp.evidence._verify_approval`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hatp.clock import parse_time
from hatp.errors import InvalidJson, PlanInvalid, SignatureInvalid, VersionUnsupported
from hatp.evidence._digest import digest
from hatp.evidence._keys import Keyring
from hatp.evidence._signing import verify
from hatp.evidence._tally import Tally
from hatp.evidence._verify_approval import APPROVAL_RULES, Approving, approval_findings
from hatp.model import (
    COMMIT_ORDER,
    SEAL_EVENT,
    Approval,
    ApprovalDecision,
    Decision,
    Finding,
    OutcomeReceipt,
    PendingVote,
    Plan,
    PrepareReceipt,
    RenewReceipt,
    Tier,
    TxnEvent,
    TxnState,
    Vote,
    WireModel,
    parse_plan,
)

#: The transaction rules, in report order, with what a pass means.
TXN_RULES: dict[str, str] = {
    "TXN-PLAN": "the record starts with one txn.planned whose plan is valid, belongs to "
    "this record, and has the stated digest",
    "TXN-DIGEST": "every event, receipt, pending answer and approval names this plan, this "
    "transaction and a branch or approval group of it",
    "TXN-SIGNER": "every receipt is signed by its branch's participant and every approval "
    "and pending vote by its gateway",
    "TXN-DECIDED": "one decision, logged before anything is committed or concluded",
    "TXN-VOTES": "commit only after every branch voted yes and every approval group "
    "approved by the deadline",
    **APPROVAL_RULES,
    "TXN-ORDER": "branches are committed compensate first, then final, then hold",
    "TXN-FINAL": "at most one final (irreversible) commit",
    "TXN-AFTER-ABORT": "nothing is committed after an abort decision or once unwinding began",
    "TXN-OUTCOME": "one outcome, last before the seal, borne out by the receipts",
}

_DECISIONS = frozenset(d.value for d in Decision)
_BRANCH_EVENTS = frozenset(
    {
        TxnEvent.PREPARED,
        TxnEvent.RENEWED,
        TxnEvent.IN_DOUBT,
        TxnEvent.UNWINDING,
        TxnEvent.COMMITTED,
        TxnEvent.COMPENSATED,
        TxnEvent.ABORTED,
    }
)


@dataclass(frozen=True, slots=True)
class _Embedded:
    """Where an event body carries a signed object, and what that object must be."""

    member: str
    model: type[WireModel]
    #: Its allowed ``kind``s. An abort after a compensate returns the compensate receipt.
    kinds: tuple[str, ...]
    #: ``txn.prepared`` and ``txn.approval`` may carry null and a ``problem`` instead, or
    #: an object with a ``problem``: what was presented, kept as evidence, counted as no.
    optional: bool
    #: What part of the plan it is about: ``branchId`` (signed by the branch's
    #: participant) or ``groupId`` (signed by the gateway it names).
    key: str = "branchId"


_EMBEDDED: dict[str, _Embedded] = {
    TxnEvent.PREPARED: _Embedded("receipt", PrepareReceipt, ("prepare",), optional=True),
    # A renewal is held to the prepare receipt's rules: its branch's participant, this plan.
    TxnEvent.RENEWED: _Embedded("receipt", RenewReceipt, ("renew",), optional=False),
    TxnEvent.PENDING: _Embedded(
        "pending", PendingVote, ("pending",), optional=False, key="groupId"
    ),
    TxnEvent.APPROVAL: _Embedded("approval", Approval, ("approval",), optional=True, key="groupId"),
    TxnEvent.COMMITTED: _Embedded("receipt", OutcomeReceipt, ("commit",), optional=False),
    TxnEvent.COMPENSATED: _Embedded("receipt", OutcomeReceipt, ("compensate",), optional=False),
    TxnEvent.ABORTED: _Embedded("receipt", OutcomeReceipt, ("abort", "compensate"), optional=False),
}


@dataclass(frozen=True, slots=True)
class _Event:
    """One event of the record that is an object with a type; ``position`` is its seq."""

    position: int
    type: str
    body: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"event {self.position} ({self.type})"

    @property
    def branch(self) -> Any:
        return self.body.get("branchId")

    def get(self, member: str) -> Any:
        return self.body.get(member)

    @property
    def refused(self) -> bool:
        """Whether the coordinator refused what this vote or approval event carries.

        Its object (a forged or foreign receipt, say) is kept as evidence of
        what was presented, is not held to the signer and digest rules, and
        counts as a no.
        """
        spec = _EMBEDDED.get(self.type)
        return spec is not None and spec.optional and self.body.get("problem") is not None

    def embedded(self) -> dict[str, Any] | None:
        """The receipt or approval the body carries and the coordinator counted, if any."""
        spec = _EMBEDDED.get(self.type)
        found = self.body.get(spec.member) if spec and not self.refused else None
        return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class _Txn:
    """What every rule reads: the events, the plan, and the keyring."""

    record_id: str
    events: tuple[_Event, ...]
    keyring: Keyring
    plan: Plan | None
    #: What ``txn.planned`` says the digest is; what the rules hold everything to.
    plan_digest: str | None
    computed_digest: str | None
    plan_problem: str | None

    def of(self, *types: str) -> list[_Event]:
        return [e for e in self.events if e.type in types]

    def tier(self, branch_id: Any) -> Tier | None:
        if self.plan is None:
            return None
        return next((b.tier for b in self.plan.branches if b.branch_id == branch_id), None)


def is_transaction(events: Sequence[Any]) -> bool:
    """Return whether a record is a transaction's: it has a ``txn.*`` event.

    Any ``txn.*`` event counts, not only a first ``txn.planned``, so that a
    record whose plan event was replaced is checked, and fails [TXN-PLAN].
    """
    return any(
        isinstance(e, dict) and isinstance(e.get("type"), str) and e["type"].startswith("txn.")
        for e in events
    )


def transaction_findings(record_id: str, events: Sequence[Any], keyring: Keyring) -> list[Finding]:
    """Check the transaction rules (:data:`TXN_RULES`); return one finding per rule.

    A failing rule has one finding per failure, ``event`` being its
    position. Never raises on a malformed record: what cannot be read fails
    or is absent.
    """
    txn = _read(record_id, events, keyring)
    tally = Tally(TXN_RULES)
    passes: dict[str, str] = {}
    for rule, check in _RULES.items():
        detail = check(txn, tally)
        if detail is not None:
            passes[rule] = detail
    if txn.plan is not None and txn.plan_digest is not None:
        passes.update(approval_findings(txn.plan, txn.plan_digest, _approving(txn), keyring, tally))
    return tally.findings(passes)


def _approving(txn: _Txn) -> list[Approving]:
    """The approvals the record counts, that approve: what the approval rules check."""
    return [
        Approving(event.position, event.name, approval)
        for event in txn.of(TxnEvent.APPROVAL)
        if (approval := event.embedded()) is not None
        and approval.get("decision") == ApprovalDecision.APPROVE
    ]


def _read(record_id: str, events: Sequence[Any], keyring: Keyring) -> _Txn:
    read: list[_Event] = []
    for position, event in enumerate(events):
        # Anything else fails REC-SHAPE; the transaction rules read what is left.
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            body = event.get("body")
            read.append(_Event(position, event["type"], body if isinstance(body, dict) else {}))
    return _with_plan(record_id, tuple(read), keyring)


def _with_plan(record_id: str, read: tuple[_Event, ...], keyring: Keyring) -> _Txn:
    first = read[0] if read and read[0].position == 0 else None
    if first is None or first.type != TxnEvent.PLANNED:
        kind = repr(first.type) if first else "not an event"
        problem = f"event 0 is {kind}; a transaction's record starts with txn.planned"
        return _Txn(record_id, read, keyring, None, None, None, problem)
    try:
        plan = parse_plan(first.get("plan"))
        computed = digest(plan.to_wire())
    except (PlanInvalid, VersionUnsupported, InvalidJson) as exc:
        reason = exc.data.get("reason", exc.code)
        problem = f"{first.name}: body.plan is not a valid plan: {reason}: {exc.message}"
        return _Txn(record_id, read, keyring, None, None, None, problem)
    stated = first.get("planDigest")
    stated = stated if isinstance(stated, str) else computed
    return _Txn(record_id, read, keyring, plan, stated, computed, None)


# --- the rules, each (txn, tally) -> the detail of a pass -------------------------


def _check_plan(txn: _Txn, tally: Tally) -> str | None:
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


def _check_digest(txn: _Txn, tally: Tally) -> str | None:
    rule = "TXN-DIGEST"
    if txn.plan is None:
        return None
    yes = _yes_votes(txn)
    events = [e for e in txn.events if e.type.startswith("txn.")]
    for event in events:
        for problem in _binding_problems(txn, txn.plan, event, yes):
            tally.fail(rule, f"{event.name} {problem}", event.position)
    tally.ran(rule)
    signed = sum(1 for e in events if e.embedded() is not None)
    return f"{len(events)} events and {signed} receipts and approvals name plan {txn.plan_digest}"


def _yes_votes(txn: _Txn) -> set[Any]:
    return {
        e.branch
        for e in txn.of(TxnEvent.PREPARED)
        if (receipt := e.embedded()) is not None and receipt.get("vote") == Vote.YES
    }


def _binding_problems(txn: _Txn, plan: Plan, event: _Event, yes: set[Any]) -> list[str]:
    out: list[str] = []
    if event.get("planDigest") != txn.plan_digest:
        out.append(f"names plan {event.get('planDigest')!r}, not {txn.plan_digest}")
    if event.type in _BRANCH_EVENTS and event.branch not in {b.branch_id for b in plan.branches}:
        out.append(f"names branch {event.branch!r}, which is not in the plan")
    group = event.get("groupId")
    spec = _EMBEDDED.get(event.type)
    if spec and spec.key == "groupId" and group not in {g.group_id for g in plan.approvals}:
        out.append(f"names approval group {group!r}, which is not in the plan")
    signed = event.embedded()
    if signed is not None:
        out += _signed_binding(txn, plan, event, signed, yes)
    return out


def _signed_binding(
    txn: _Txn, plan: Plan, event: _Event, signed: Mapping[str, Any], yes: set[Any]
) -> list[str]:
    what = f"carries a {_EMBEDDED[event.type].member}"
    out: list[str] = []
    found = signed.get("planDigest")
    # An abort before any prepare cannot know the plan, and says so with null.
    unprepared_abort = found is None and signed.get("kind") == "abort" and event.branch not in yes
    if found != txn.plan_digest and not unprepared_abort:
        out.append(f"{what} for plan {found!r}, not {txn.plan_digest}")
    if signed.get("txnId") != plan.txn_id:
        out.append(f"{what} for transaction {signed.get('txnId')!r}, not {plan.txn_id!r}")
    key = _EMBEDDED[event.type].key
    if signed.get(key) != event.get(key):
        out.append(f"{what} for {key} {signed.get(key)!r}, not {event.get(key)!r}")
    return out


def _check_signers(txn: _Txn, tally: Tally) -> str | None:
    rule = "TXN-SIGNER"
    if txn.plan is None:
        return None
    checked = 0
    for event in txn.events:
        spec = _EMBEDDED.get(event.type)
        if spec is None or event.refused or (spec.optional and event.get(spec.member) is None):
            continue
        checked += 1
        problem = _signer_problem(txn, txn.plan, spec, event.get(spec.member))
        if problem is not None:
            tally.fail(rule, f"{event.name}: {problem}", event.position)
    tally.ran(rule)
    return f"{checked} receipts and approvals verify, each signed by its own party"


def _signer_problem(txn: _Txn, plan: Plan, spec: _Embedded, signed: Any) -> str | None:
    where = f"body.{spec.member}"
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
    try:
        signer = verify(signed, txn.keyring)
    except (SignatureInvalid, VersionUnsupported, InvalidJson) as exc:
        return f"{where} does not verify: {exc.data.get('reason', exc.code)}: {exc.message}"
    if spec.key == "groupId":
        expected, role = signed["gateway"], "the gateway it names"
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


def _check_decided(txn: _Txn, tally: Tally) -> str | None:
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


def _check_votes(txn: _Txn, tally: Tally) -> str | None:
    rule = "TXN-VOTES"
    if txn.plan is None:
        return None
    decided = next(iter(txn.of(TxnEvent.DECIDED)), None)
    outcome = next(iter(txn.of(TxnEvent.OUTCOME)), None)
    if decided is not None and decided.get("decision") == Decision.COMMIT:
        at = decided
    elif outcome is not None and outcome.get("state") == TxnState.COMMITTED:
        at = outcome
    else:
        tally.ran(rule)
        return "nothing was decided or concluded as commit"
    # Votes and approvals count only when they were in before the decision.
    cutoff = decided.position if decided is not None else at.position
    for problem in _missing_consent(txn, txn.plan, cutoff):
        tally.fail(rule, f"{at.name} commits, but {problem}", at.position)
    tally.ran(rule)
    return "every branch voted yes and every approval group approved before the decision"


def _missing_consent(txn: _Txn, plan: Plan, cutoff: int) -> list[str]:
    before = [e for e in txn.events if e.position < cutoff]
    votes: dict[Any, list[Any]] = {}
    for event in before:
        receipt = event.embedded() if event.type == TxnEvent.PREPARED else None
        if receipt is not None:
            votes.setdefault(event.branch, []).append(receipt.get("vote"))
        elif event.type == TxnEvent.PREPARED and event.refused:
            votes.setdefault(event.branch, []).append(f"refused: {event.get('problem')}")
    out = []
    for branch in plan.branches:
        cast = votes.get(branch.branch_id, [])
        if not cast:
            out.append(f"branch {branch.branch_id!r} has no yes vote (no prepare receipt)")
        elif any(vote != Vote.YES for vote in cast):
            out.append(f"branch {branch.branch_id!r} has no yes vote (it voted {cast})")
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
    try:
        return isinstance(moment, str) and parse_time(moment) <= parse_time(deadline)
    except ValueError:
        return False


def _check_order(txn: _Txn, tally: Tally) -> str | None:
    rule = "TXN-ORDER"
    if txn.plan is None:
        return None
    rank = {tier: index for index, tier in enumerate(COMMIT_ORDER)}
    latest: tuple[_Event, Tier] | None = None
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


def _check_final(txn: _Txn, tally: Tally) -> str | None:
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


def _check_after_abort(txn: _Txn, tally: Tally) -> str | None:
    rule = "TXN-AFTER-ABORT"
    stop: _Event | None = None
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


def _check_outcome(txn: _Txn, tally: Tally) -> str | None:
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
    if state not in (TxnState.COMMITTED, TxnState.ABORTED):
        tally.fail(
            rule, f"{outcome.name} states {state!r}, not committed or aborted", outcome.position
        )
        return None
    if txn.plan is None:
        return None
    check = _committed_problems if state == TxnState.COMMITTED else _aborted_problems
    for position, problem in check(txn, txn.plan, outcome):
        tally.fail(rule, problem, position)
    tally.ran(rule)
    return f"outcome {state} at event {outcome.position}, borne out by the receipts"


def _is_receipt(event: _Event, kind: str, outcome: str) -> bool:
    receipt = event.embedded()
    return receipt is not None and receipt.get("kind") == kind and receipt.get("outcome") == outcome


def _committed_problems(txn: _Txn, plan: Plan, outcome: _Event) -> list[tuple[int, str]]:
    commits = {
        e.branch for e in txn.of(TxnEvent.COMMITTED) if _is_receipt(e, "commit", "committed")
    }
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


def _aborted_problems(txn: _Txn, plan: Plan, outcome: _Event) -> list[tuple[int, str]]:
    undone = [
        e
        for e in txn.of(TxnEvent.COMPENSATED, TxnEvent.ABORTED)
        if _is_receipt(e, "compensate", "compensated")
    ]
    out = []
    for event in txn.of(TxnEvent.COMMITTED):
        tier = txn.tier(event.branch)
        if tier is None or not _is_receipt(event, "commit", "committed"):
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


_RULES: dict[str, Callable[[_Txn, Tally], str | None]] = {
    "TXN-PLAN": _check_plan,
    "TXN-DIGEST": _check_digest,
    "TXN-SIGNER": _check_signers,
    "TXN-DECIDED": _check_decided,
    "TXN-VOTES": _check_votes,
    "TXN-ORDER": _check_order,
    "TXN-FINAL": _check_final,
    "TXN-AFTER-ABORT": _check_after_abort,
    "TXN-OUTCOME": _check_outcome,
}
