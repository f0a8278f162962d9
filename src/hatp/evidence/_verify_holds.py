"""The offline verifier's timing rules: phase 1 fits inside the holds it rests on.

A hold lasts only so long, renewals included, and people's decision time
comes out of it. The coordinator records how it chose to fit the two
(``txn.mode``, with the signed numbers behind the choice), each time it
moved the approval deadline earlier (``txn.deadline``), and every lease a
participant granted (the prepare, replace and renew receipts). These rules
hold the record to that:

- [TXN-MODE] the mode was chosen once, before anything was prepared or
  asked, as the plan asks, and in ``auto`` as the signed quotes and chain
  estimates say (approval-first when the plan requires effect previews);
  approval-first prepares nothing before every group approved;
- [TXN-APPROVE-BY] no approval counted in a commit came after an approval
  deadline the coordinator itself recorded before deciding;
- [TXN-LEASE] the final step and every hold were committed, by their
  participants' signed times, while every hold they relied on was still
  leased, and no lease passes its hold's horizon. A compensate commit is
  not held to it: it can be undone, and is when a hold lapses after it
  (the record then concludes aborted, [TXN-OUTCOME]).

Whether each quote, estimate and receipt is its party's word is
[TXN-SIGNER]'s to say, and whether it is about this plan [TXN-DIGEST]'s;
these rules read what the objects state, so one forgery fails one rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from hatp.clock import format_time
from hatp.evidence._digest import digest
from hatp.evidence._tally import Tally
from hatp.evidence._txn_read import Event, Txn, wire_time
from hatp.model import (
    ApprovalDecision,
    ChainEstimate,
    Decision,
    HoldTerms,
    Mode,
    Plan,
    Quote,
    Tier,
    TxnEvent,
    Vote,
    WireModel,
)

_NO_PLAN = "the plan cannot be read ([TXN-PLAN] fails), so this rule could not run"
#: What phase 1 does; all of it comes after the mode is chosen.
_PHASE1 = (
    TxnEvent.PREPARED,
    TxnEvent.REPLACED,
    TxnEvent.PENDING,
    TxnEvent.APPROVAL,
    TxnEvent.RENEWED,
    TxnEvent.DEADLINE,
    TxnEvent.TERMS,
)
_CHOSEN = (Mode.PARALLEL.value, Mode.APPROVAL_FIRST.value, Mode.HOLDS_FIRST.value)
_LEASED = (TxnEvent.PREPARED, TxnEvent.REPLACED, TxnEvent.RENEWED)
_ENDED = (TxnEvent.COMMITTED, TxnEvent.COMPENSATED, TxnEvent.ABORTED)

_Model = TypeVar("_Model", bound=WireModel)


def plan_groups(plan: Plan) -> list[str]:
    """The plan's approval group ids, in plan order."""
    return [g.group_id for g in plan.approvals]


def estimate_gateway_problem(txn: Txn, estimate: Mapping[str, Any]) -> str | None:
    """Why a chain estimate is not from its group's gateway, or ``None``.

    The gateway that answered the group's ask (a pending answer or an
    approval the record counts) is the group's gateway; an estimate from
    another one says nothing about how long asking this group takes.
    """
    group = estimate.get("groupId")
    answered = {
        str(doc.get("gateway"))
        for event in txn.of(TxnEvent.PENDING, TxnEvent.APPROVAL)
        if event.get("groupId") == group and (doc := event.embedded()) is not None
    }
    if answered and estimate.get("gateway") not in answered:
        return (
            f"is from gateway {estimate.get('gateway')!r}, but approval group {group!r} "
            f"was asked of {', '.join(sorted(answered))}"
        )
    return None


# --- [TXN-MODE] ------------------------------------------------------------------


def check_mode(txn: Txn, tally: Tally) -> str | None:
    """[TXN-MODE] one ``txn.mode``, first, choosing as the plan and the signed numbers say."""
    rule = "TXN-MODE"
    if txn.plan is None:
        tally.absent(rule, _NO_PLAN)
        return None
    modes = txn.of(TxnEvent.MODE)
    if not modes:
        for event in txn.of(*_PHASE1)[:1]:
            tally.fail(
                rule,
                f"{event.name} comes, but the record has no txn.mode: the mode is chosen "
                "and recorded before anything is prepared or asked",
                event.position,
            )
        tally.ran(rule)
        return "no mode was chosen, and nothing was prepared or asked"
    mode = modes[0]
    for again in modes[1:]:
        again_at = f"{again.name} chooses the mode again; it was chosen at {mode.name}"
        tally.fail(rule, again_at, again.position)
    for event in txn.of(*_PHASE1, TxnEvent.DECIDED):
        if event.position < mode.position:
            early = f"{event.name} comes before the mode was chosen at {mode.name}"
            tally.fail(rule, early, event.position)
    for problem in _choice_problems(txn.plan, mode.body):
        tally.fail(rule, f"{mode.name} {problem}", mode.position)
    if mode.get("chosen") == Mode.APPROVAL_FIRST:
        for event, waiting in _prepared_early(txn, txn.plan):
            tally.fail(
                rule,
                f"{event.name} prepares branch {event.branch!r} in approval-first mode before "
                f"approval group {', '.join(map(repr, waiting))} approved",
                event.position,
            )
        for event, problem in _off_quote(txn, mode.body):
            tally.fail(rule, f"{event.name} {problem}", event.position)
        for position, problem in _quoted_terms_problems(txn, txn.plan):
            tally.fail(rule, problem, position)
    if mode.get("chosen") == Mode.HOLDS_FIRST and txn.plan.mode is Mode.HOLDS_FIRST:
        for position, problem in _terms_problems(txn, txn.plan):
            tally.fail(rule, problem, position)
    for position, problem in _unstated_terms(txn, mode):
        tally.fail(rule, problem, position)
    tally.ran(rule)
    return (
        f"mode {mode.get('chosen')!r} (requested {mode.get('requested')!r}) chosen at "
        f"{mode.name}, before anything was prepared or asked"
    )


def _choice_problems(plan: Plan, body: Mapping[str, Any]) -> list[str]:
    requested, chosen = body.get("requested"), body.get("chosen")
    if requested != plan.mode.value:
        return [f"says the plan requested {requested!r}; the plan's mode is {plan.mode.value!r}"]
    if chosen not in _CHOSEN:
        return [f"chose {chosen!r}; the mode chosen is parallel, approval-first or holds-first"]
    if plan.mode is not Mode.AUTO:
        return [] if chosen == requested else [f"chose {chosen!r}, but the plan asks {requested!r}"]
    if plan.preview_policy.demands:
        if chosen == Mode.APPROVAL_FIRST and body.get("basis") == "previews":
            return []
        return [
            f"chose {chosen!r} on basis {body.get('basis')!r}; a plan requiring effect "
            "previews runs 'approval-first' in auto, on basis 'previews'"
        ]
    holds = [b.branch_id for b in plan.branches if b.tier is Tier.HOLD]
    if not holds:
        if chosen == Mode.PARALLEL:
            return []
        return [f"chose {chosen!r}; with no hold to fit inside, auto is 'parallel'"]
    return _recomputed(plan, holds, body)


def _recomputed(plan: Plan, holds: list[str], body: Mapping[str, Any]) -> list[str]:
    """Auto with holds: the choice, recomputed from the signed estimates and quotes."""
    estimates = _readable(body.get("estimates"), ChainEstimate)
    quotes = _readable(body.get("quotes"), Quote)
    out: list[str] = []
    worst_of: dict[str, float] = {}
    for group in plan_groups(plan):
        found = [e.worst_seconds for e in estimates if e.group_id == group]
        if len(found) == 1:
            worst_of[group] = found[0]
        else:
            out.append(f"carries {len(found)} chain estimates for approval group {group!r}, not 1")
    hold_of: dict[str, float] = {}
    for bid in holds:
        # A quote that gives no holdSeconds promises no time at all.
        found = [q.hold_seconds or 0.0 for q in quotes if q.branch_id == bid]
        if len(found) == 1:
            hold_of[bid] = found[0]
        else:
            out.append(f"carries {len(found)} quotes for hold {bid!r}, not 1")
    commit = _seconds(body.get("commitSeconds"))
    if commit is None:
        out.append(f"states commitSeconds {body.get('commitSeconds')!r}, not a number of seconds")
    if out or commit is None:
        return out
    worst, shortest = max(worst_of.values(), default=0.0), min(hold_of.values())
    for member, computed, source in (
        ("worstSeconds", worst, "chain estimates"),
        ("shortestHoldSeconds", shortest, "quotes"),
    ):
        stated = body.get(member)
        if _seconds(stated) != computed:
            out.append(f"states {member} {stated!r}; its signed {source} give {computed:g}")
    basis = body.get("basis")
    if not isinstance(basis, str) or hold_of.get(basis) != shortest:
        shortest_holds = [bid for bid, seconds in hold_of.items() if seconds == shortest]
        out.append(f"states basis {basis!r}; the shortest hold is {shortest_holds}")
    expected = Mode.PARALLEL if worst + commit <= shortest else Mode.APPROVAL_FIRST
    if body.get("chosen") != expected:
        fits = "fits within" if expected is Mode.PARALLEL else "is more than"
        out.append(
            f"chose {body.get('chosen')!r}, but its signed numbers give {expected.value!r}: "
            f"worstSeconds {worst:g} + commitSeconds {commit:g} {fits} "
            f"shortestHoldSeconds {shortest:g}"
        )
    return out


def _readable(items: Any, model: type[_Model]) -> list[_Model]:
    """The items that read as ``model``; [TXN-SIGNER] fails the others."""
    out = []
    for item in items if isinstance(items, list) else []:
        try:
            out.append(model.model_validate(item))
        except ValidationError:
            continue
    return out


def _seconds(value: Any) -> float | None:
    """A JSON number of seconds (0 or more), or ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _prepared_early(txn: Txn, plan: Plan) -> list[tuple[Event, list[str]]]:
    """Approval-first: each prepare, with the groups that had not approved yet."""
    approved: dict[Any, int] = {}
    for event in txn.of(TxnEvent.APPROVAL):
        doc = event.embedded()
        approves = doc is not None and doc.get("decision") == ApprovalDecision.APPROVE
        if approves and isinstance(event.get("groupId"), str):
            approved.setdefault(event.get("groupId"), event.position)
    out = []
    for event in txn.of(TxnEvent.PREPARED):
        waiting = [
            g for g in plan_groups(plan) if approved.get(g, len(txn.events)) > event.position
        ]
        if waiting:
            out.append((event, waiting))
    return out


def _off_quote(txn: Txn, body: Mapping[str, Any]) -> list[tuple[Event, str]]:
    """Approval-first, in a record that commits: each counted yes vote before the commit
    point whose cost is not what its quote said people approved ([COORD-QUOTE])."""
    point = txn.commit_point()
    if point is None:
        return []
    quoted: dict[Any, Any] = {}
    for quote in _readable(body.get("quotes"), Quote):
        if quote.cost is not None:
            quoted[quote.branch_id] = quote.cost.to_wire()
    out = []
    for event in txn.of(TxnEvent.PREPARED, TxnEvent.REPLACED):
        receipt = event.embedded()
        if event.position > point[1] or receipt is None or event.branch not in quoted:
            continue
        if receipt.get("vote") == Vote.YES and receipt.get("cost") != quoted[event.branch]:
            out.append(
                (
                    event,
                    f"holds branch {event.branch!r} at {receipt.get('cost')!r}, but people "
                    f"approved its quote of {quoted[event.branch]!r}, and the record commits",
                )
            )
    return out


def _terms_problems(txn: Txn, plan: Plan) -> list[tuple[int, str]]:
    """Holds-first [COORD-TERMS]: one ``txn.terms`` after every branch's vote and before
    any ask, stating each hold's end as its participant signed it and the approval
    deadline in force, inside every horizon; every approving approval carries its digest."""
    found = txn.of(TxnEvent.TERMS)
    asked = txn.of(TxnEvent.PENDING, TxnEvent.APPROVAL)
    commits = any(e.get("decision") == Decision.COMMIT for e in txn.of(TxnEvent.DECIDED))
    if not found and not asked and not commits:
        return []  # ended before the terms (a no vote, a preview short of the policy)
    if len(found) != 1:
        where = found[1].position if len(found) > 1 else txn.events[-1].position
        return [(where, f"holds-first, with {len(found)} txn.terms events, not one")]
    terms_event = found[0]
    at, name = terms_event.position, terms_event.name
    parsed, out = _read_terms(txn, terms_event)
    if parsed is None:
        return out
    stated = terms_event.get("termsDigest")
    voted = {e.branch for e in txn.events[:at] if e.type == TxnEvent.PREPARED}
    for branch in plan.branches:
        if branch.branch_id not in voted:
            out.append((at, f"{name} comes before branch {branch.branch_id!r} voted"))
    for event in txn.of(TxnEvent.PENDING, TxnEvent.APPROVAL):
        if event.position < at:
            out.append((event.position, f"{event.name} asks before the terms at {name}"))
    leases, horizons = _leases_before(txn, at), _horizons_before(txn, at)
    holds = {h.branch_id: h for h in parsed.holds}
    approve_by = wire_time(parsed.approve_by)
    for branch in plan.branches:
        if branch.tier is not Tier.HOLD:
            continue
        held, lease = holds.get(branch.branch_id), leases.get(branch.branch_id)
        signed_end = None if lease is None or lease.ends is None else format_time(lease.ends)
        horizon = horizons.get(branch.branch_id)
        signed_horizon = None if horizon is None else format_time(horizon)
        if held is None or (held.lease_expires_at, held.hold_horizon) != (
            signed_end,
            signed_horizon,
        ):
            said = (
                "nothing"
                if held is None
                else f"a lease until {held.lease_expires_at} within {held.hold_horizon}"
            )
            out.append(
                (at, f"{name} states {said} for hold {branch.branch_id!r}; its participant "
                     f"signed a lease until {signed_end} within {signed_horizon}")
            )  # fmt: skip
        elif approve_by is not None and horizon is not None and approve_by >= horizon:
            out.append((at, f"{name}: approveBy is not inside hold {branch.branch_id!r}"))
    deadline = _deadline_before(txn, plan, at)
    if approve_by != deadline:
        out.append((at, f"{name} states approveBy {parsed.approve_by}, but the deadline in "
                        f"force was {format_time(deadline)}"))  # fmt: skip
    out.extend(_unbound_approvals(txn, name, stated))
    return out


def _unstated_terms(txn: Txn, mode: Event) -> list[tuple[int, str]]:
    """Terms where the mode has none, and approvals of terms the record does not state.

    Parallel mode states no terms; in a record without terms (parallel, or
    approval-first from before terms were stated) no approval names any: one that
    does approved terms this record no longer shows."""
    found = txn.of(TxnEvent.TERMS)
    if found:
        if mode.get("chosen") != Mode.PARALLEL:
            return []
        return [(e.position, f"{e.name} states terms, but parallel mode has none") for e in found]
    return [
        (event.position, f"{event.name}: the approval is of terms {named!r} not stated")
        for event in txn.of(TxnEvent.APPROVAL)
        if (doc := event.embedded()) is not None
        if (named := doc.get("termsDigest")) is not None
    ]


def _quoted_terms_problems(txn: Txn, plan: Plan) -> list[tuple[int, str]]:
    """Approval-first [COORD-PREVIEW]: the terms, when the record states them (a record
    from before they were, states none; [TXN-PREVIEW] fails one that needed them), are
    one ``txn.terms`` before anything is asked or prepared, naming no hold (none is
    placed yet), the approval deadline in force, and every approving approval carries
    their digest."""
    found = txn.of(TxnEvent.TERMS)
    if not found:
        return []
    if len(found) != 1:
        return [(found[1].position, f"approval-first, with {len(found)} txn.terms events")]
    terms_event = found[0]
    at, name = terms_event.position, terms_event.name
    parsed, out = _read_terms(txn, terms_event)
    if parsed is None:
        return out
    stated = terms_event.get("termsDigest")
    if parsed.holds:
        out.append((at, f"{name} states holds, but approval-first places none before approval"))
    for event in txn.of(TxnEvent.PENDING, TxnEvent.APPROVAL, TxnEvent.PREPARED):
        if event.position < at:
            out.append((event.position, f"{event.name} comes before the terms at {name}"))
    deadline = _deadline_before(txn, plan, at)
    if wire_time(parsed.approve_by) != deadline:
        out.append((at, f"{name} states approveBy {parsed.approve_by}, but the deadline in "
                        f"force was {format_time(deadline)}"))  # fmt: skip
    out.extend(_unbound_approvals(txn, name, stated))
    return out


def _read_terms(txn: Txn, terms_event: Event) -> tuple[HoldTerms | None, list[tuple[int, str]]]:
    """The terms event's HoldTerms (``None`` when it carries none), and the problems
    with it: no HoldTerms, or a ``termsDigest`` that is not the digest of its terms of
    this plan."""
    at, name = terms_event.position, terms_event.name
    terms = terms_event.get("terms")
    try:
        parsed = HoldTerms.model_validate(terms)
    except ValidationError as exc:
        return None, [(at, f"{name} carries no HoldTerms: {exc.errors()[0]['msg']}")]
    stated = terms_event.get("termsDigest")
    if stated == digest(terms) and parsed.plan_digest == txn.plan_digest:
        return parsed, []
    said = f"termsDigest {stated!r} is not the digest of its terms of this plan"
    return parsed, [(at, f"{name}: {said}")]


def _deadline_before(txn: Txn, plan: Plan, position: int) -> datetime:
    """The approval deadline in force at ``position``: the earliest ``txn.deadline``
    before it, or the plan's ``decideBy``."""
    moved = [
        moment
        for event in txn.events[:position]
        if event.type == TxnEvent.DEADLINE
        if (moment := wire_time(event.get("approveBy"))) is not None
    ]
    return min([*moved, wire_time(plan.deadlines.decide_by) or datetime.max.replace(tzinfo=UTC)])


def _unbound_approvals(txn: Txn, name: str, stated: Any) -> list[tuple[int, str]]:
    """Each approving approval that does not carry the digest of the terms at ``name``."""
    out = []
    for event in txn.of(TxnEvent.APPROVAL):
        doc = event.embedded()
        approves = doc is not None and doc.get("decision") == ApprovalDecision.APPROVE
        if approves and doc is not None and doc.get("termsDigest") != stated:
            out.append(
                (event.position, f"{event.name}: the approval is not of the terms at {name}")
            )
    return out


def _horizons_before(txn: Txn, position: int) -> dict[Any, datetime]:
    """Each hold's horizon from its latest yes prepare or replace receipt before ``position``."""
    horizons: dict[Any, datetime] = {}
    for event in txn.events[:position]:
        receipt = event.embedded()
        if event.type not in (TxnEvent.PREPARED, TxnEvent.REPLACED) or receipt is None:
            continue
        if receipt.get("vote") == Vote.YES and (end := wire_time(receipt.get("holdHorizon"))):
            horizons[event.branch] = end
    return horizons


# --- [TXN-APPROVE-BY] --------------------------------------------------------------


def check_approve_by(txn: Txn, tally: Tally) -> str | None:
    """[TXN-APPROVE-BY] no approval counted in a commit came after a recorded deadline."""
    rule = "TXN-APPROVE-BY"
    if txn.plan is None:
        tally.absent(rule, _NO_PLAN)
        return None
    point = txn.commit_point()
    if point is None:
        tally.ran(rule)
        return "nothing was decided or concluded as commit"
    at, cutoff = point
    deadline: tuple[datetime, Event] | None = None
    for event in txn.of(TxnEvent.DEADLINE):
        if event.position >= cutoff:
            continue
        moment = wire_time(event.get("approveBy"))
        if moment is None:
            tally.fail(
                rule,
                f"{event.name} moves the approval deadline to {event.get('approveBy')!r}, "
                "which is not a time",
                event.position,
            )
        elif deadline is None or moment < deadline[0]:
            deadline = (moment, event)
    tally.ran(rule)
    if deadline is None:
        return "no approval deadline was recorded before the decision (decideBy is TXN-VOTES')"
    moment, source = deadline
    by = f"the approval deadline {format_time(moment)} ({source.name})"
    counted = 0
    for event in txn.of(TxnEvent.APPROVAL):
        approval = event.embedded()
        if event.position >= cutoff or approval is None:
            continue
        if approval.get("decision") != ApprovalDecision.APPROVE:
            continue
        counted += 1
        decided = wire_time(approval.get("decidedAt"))
        if decided is not None and decided > moment:
            tally.fail(
                rule,
                f"{event.name}: approval group {event.get('groupId')!r} approved at "
                f"{approval.get('decidedAt')}, after {by}, yet {at.name} counts it",
                event.position,
            )
    return f"{counted} approvals counted in the commit were decided by {by}"


# --- [TXN-LEASE] -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lease:
    """A hold's latest lease, from a participant-signed receipt, and where it was granted."""

    ends: datetime | None
    event: Event


def check_lease(txn: Txn, tally: Tally) -> str | None:
    """[TXN-LEASE] commits within the leases they rely on; leases within their horizons."""
    rule = "TXN-LEASE"
    if txn.plan is None:
        tally.absent(rule, _NO_PLAN)
        return None
    holds = [b.branch_id for b in txn.plan.branches if b.tier is Tier.HOLD]
    leases: dict[Any, _Lease] = {}
    horizons: dict[Any, datetime | None] = {}
    granted = commits = 0
    for event in txn.events:
        receipt = event.embedded()
        if receipt is None or not isinstance(event.branch, str):
            continue  # no signed receipt, or no branch ([TXN-SIGNER], [TXN-DIGEST] say)
        if event.branch not in holds and event.type != TxnEvent.COMMITTED:
            continue
        if event.type in _LEASED:
            problem = _grant(event, receipt, leases, horizons)
            granted += event.branch in leases and leases[event.branch].event is event
        elif event.type == TxnEvent.COMMITTED:
            commits += txn.tier(event.branch) in (Tier.FINAL, Tier.HOLD)
            problem = _commit_problem(txn, event, receipt, holds, leases)
        else:
            problem = None
        if problem is not None:
            tally.fail(rule, f"{event.name}: {problem}", event.position)
        if event.type in _ENDED:
            leases.pop(event.branch, None)  # committed or released: no longer relied on
    tally.ran(rule)
    return (
        f"{commits} final and hold commits within the leases of the holds they relied on, "
        f"and {granted} leases within their holds' horizons"
    )


def _grant(
    event: Event,
    receipt: Mapping[str, Any],
    leases: dict[Any, _Lease],
    horizons: dict[Any, datetime | None],
) -> str | None:
    """Note the lease a receipt grants; return why it passes its hold's horizon, if it does."""
    bid = event.branch
    if event.type != TxnEvent.RENEWED:
        if receipt.get("vote") != Vote.YES:
            leases.pop(bid, None)  # a no places nothing
            return None
        horizons[bid] = wire_time(receipt.get("holdHorizon"))
    ends = wire_time(receipt.get("leaseExpiresAt"))
    leases[bid] = _Lease(ends, event)
    limits = [t for t in (horizons.get(bid), wire_time(receipt.get("holdHorizon"))) if t]
    if ends is not None and limits and ends > min(limits):
        return (
            f"hold {bid!r} is leased until {format_time(ends)}, past its horizon "
            f"{format_time(min(limits))}"
        )
    return None


def _commit_problem(
    txn: Txn, event: Event, receipt: Mapping[str, Any], holds: list[str], leases: dict[Any, _Lease]
) -> str | None:
    at = wire_time(receipt.get("time"))
    tier = txn.tier(event.branch)
    if at is None or tier is None or tier is Tier.COMPENSATE:
        # Not a receipt ([TXN-SIGNER]), not a branch ([TXN-DIGEST]), or undoable.
        return None
    # A hold relies on its own lease; the final step, which nothing undoes, on every hold's.
    relied = [event.branch] if tier is Tier.HOLD else holds
    what = f"{tier} branch {event.branch!r} committed at {format_time(at)} (its signed time)"
    for hold in relied:
        lease = leases.get(hold)
        if lease is None:
            continue  # never placed, or already ended: [TXN-VOTES], [TXN-ORDER] say
        whose = "its own" if hold == event.branch else f"hold {hold!r}'s"
        if lease.ends is None:
            return f"{what}, but {whose} receipt at {lease.event.name} gives no lease"
        if at >= lease.ends:
            return (
                f"{what}, but {whose} lease ended at {format_time(lease.ends)} ({lease.event.name})"
            )
    return None


# --- [TXN-OUTCOME] needs-recovery ---------------------------------------------


def recovery_problems(txn: Txn, plan: Plan, outcome: Event) -> list[tuple[int, str]]:
    """Why a ``needs-recovery`` outcome is not borne out, if it is not ([TXN-OUTCOME]).

    The final step (and every compensate step) committed and stays; each hold
    either committed or lapsed: the one ``txn.late-answer`` shows it not
    live, its latest participant-signed lease had ended by then, it was
    released after, and the one ``txn.recovery-offered`` after that names
    exactly the lapsed holds. At least one hold lapsed.
    """
    out: list[tuple[int, str]] = []
    lates = txn.of(TxnEvent.LATE_ANSWER)
    offers = txn.of(TxnEvent.RECOVERY_OFFERED)
    if len(lates) != 1 or len(offers) != 1:
        return [
            (
                outcome.position,
                f"{outcome.name} says needs-recovery, with {len(lates)} txn.late-answer and "
                f"{len(offers)} txn.recovery-offered events, not one of each",
            )
        ]
    late, offer = lates[0], offers[0]
    holds = late.get("holds")
    said = holds if isinstance(holds, list) else []
    lapsed = [h.get("branchId") for h in said if isinstance(h, dict) and h.get("live") is False]
    committed = {
        e.branch
        for e in txn.of(TxnEvent.COMMITTED)
        if (r := e.embedded()) and (r.get("kind"), r.get("outcome")) == ("commit", "committed")
    }
    released = {
        e.branch
        for e in txn.events[late.position + 1 :]
        if e.type == TxnEvent.ABORTED
        and (r := e.embedded())
        and (r.get("kind"), r.get("outcome")) == ("abort", "aborted")
    }
    leases = _leases_before(txn, late.position)
    for branch in plan.branches:
        bid = branch.branch_id
        if branch.tier is not Tier.HOLD or bid not in lapsed:
            if bid not in committed:
                out.append((outcome.position, f"{branch.tier} branch {bid!r} has no commit"))
            continue
        lease = leases.get(bid)
        if bid in committed:
            out.append((late.position, f"{late.name} says hold {bid!r} lapsed, yet it committed"))
        elif lease is None or lease.ends is None or late.time is None or lease.ends > late.time:
            ends = "no lease" if lease is None or lease.ends is None else format_time(lease.ends)
            out.append(
                (late.position, f"{late.name} says hold {bid!r} lapsed, but its lease was {ends}")
            )
        elif bid not in released:
            out.append((outcome.position, f"lapsed hold {bid!r} was never released"))
    out += [
        (e.position, f"{e.name}: branch {e.branch!r} was undone, yet the final step stays")
        for e in txn.of(TxnEvent.COMPENSATED)
    ]
    if not lapsed:
        out.append((late.position, f"{late.name} shows no hold lapsed: nothing to recover"))
    offered = offer.get("lapsed")
    if offer.position < late.position or offered != lapsed:
        out.append(
            (
                offer.position,
                f"{offer.name} offers recovery of {offered!r} after the late answer's lapsed "
                f"holds {lapsed!r}",
            )
        )
    return out


def _leases_before(txn: Txn, position: int) -> dict[Any, _Lease]:
    """Each hold's latest participant-signed lease before ``position``."""
    leases: dict[Any, _Lease] = {}
    horizons: dict[Any, datetime | None] = {}
    for event in txn.events[:position]:
        receipt = event.embedded()
        if event.type in _LEASED and receipt is not None and isinstance(event.branch, str):
            _grant(event, receipt, leases, horizons)
    return leases
