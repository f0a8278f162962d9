"""The offline verifier's approval rules: an approval shows the people who approved.

A gateway's signed approval is its word; these rules check the evidence it
carries instead (docs/spec.md §19). For every approval the record counts as
approve, the routing record must verify against the plan with a real amount
check, every card must be signed by a directory the keyring trusts, every
vote by a key on its voter's card or by their passkey (every approve by
one when the group needs it), and the votes must show enough distinct
people, none of them the person the agent acts for, each with the authority
for what was checked, all by the deadline and all in the routing record.

Each rule reads the evidence as it stands and fails only on its own
ground, so one planted violation fails one rule. A rule that needs the
routing record is absent when it cannot be read, and absent is never a pass.
An approval that does not verify as its gateway's is not read at all: its
members are nobody's word, and [TXN-SIGNER] fails it. Reject approvals need
no evidence (a withdrawn one has no votes); the signer and digest rules
still hold them.

The evidence layer imports only :mod:`hatp.model`: a card's signature is
checked here with the keyring, as the directory checks it, and a vote with
a keyring of the Ed25519 keys on its voter's card. In a record, every one
of those signatures is checked at the time of the event that carries the
approval ([VER-PERIOD]).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from hatp.clock import parse_time
from hatp.errors import HatpError, PasskeyInvalid
from hatp.evidence._digest import digest
from hatp.evidence._keys import Keyring, card_keyring
from hatp.evidence._passkey import verify_passkey
from hatp.evidence._signing import Verified
from hatp.evidence._tally import Place, Signatures, Tally
from hatp.evidence._verify_routing import carried_routing_findings, routing_findings
from hatp.model import (
    ABSENT,
    Approval,
    ApprovalDecision,
    ApprovalGroup,
    Finding,
    HumanCard,
    HumanResult,
    HumanVote,
    Plan,
    Result,
    RoutingRecord,
    parse_address,
    parse_card,
    parse_plan,
    passkey_required,
)

#: The approval rules, in report order, with what a pass means.
APPROVAL_RULES: dict[str, str] = {
    "TXN-ROUTING": "every approval that approves carries its group's routing record, signed "
    "by its gateway, that verifies against the plan with an amount check (never absent)",
    "TXN-CARD-SIGNED": "every card an approval carries is a Human Card signed by the "
    "directory it names, one the keyring trusts",
    "TXN-VOTE-SIGNED": "every vote is a HumanVote for its approval's ask, this transaction, "
    "plan and group (and the approval's hold terms, if any), signed by an Ed25519 key on "
    "the voter's card (a vote without that signature is signed by its passkey: TXN-PASSKEY)",
    "TXN-PASSKEY": "every passkey assertion a vote carries verifies under a passkey on the "
    "voter's card, over the vote's challenge, user verified, from an origin of the "
    "passkey's rpId; and every approve vote in a group that needs a passkey carries one",
    "TXN-APPROVERS": "an approval that approves is not withdrawn, has no reject vote and one "
    "vote a person, and lists as approvers exactly the people whose votes approve",
    "TXN-QUORUM": "at least N distinct people approved, N of the group address's quorum N-of-M",
    "TXN-SOD": "no approver is the person the agent acts for (onBehalfOf)",
    "TXN-AUTHORITY": "every approver's card grants the group's action up to at least the "
    "amount the routing record checked, in every currency (never converted)",
    "TXN-VOTE-LATE": "no vote is later than the plan's decideBy",
    "TXN-ROUTED": "every voter is in the routing record as decided, and everyone it says "
    "decided has a vote in the approval",
}


@dataclass(frozen=True, slots=True)
class Approving:
    """An approval the record counts as approve, and the event that carries it."""

    #: The event's position, ``None`` for an approval checked on its own.
    position: int | None
    #: How findings name the event, e.g. ``event 5 (txn.approval)``.
    name: str
    doc: Mapping[str, Any]
    #: Where the approval sits in its event (``body.approval``) and the event's time,
    #: which its signatures and those of what it carries are checked at.
    place: Place = field(default_factory=Place)


@dataclass(frozen=True, slots=True)
class _Vote:
    index: int
    doc: Any
    #: ``None`` when the vote is not a HumanVote ([TXN-VOTE-SIGNED] says why).
    vote: HumanVote | None
    problem: str | None


@dataclass(frozen=True)
class _Evidence:
    """One approving approval, verified as its gateway's, and what it carries, read."""

    at: Approving
    approval: Approval
    group: ApprovalGroup
    votes: tuple[_Vote, ...]
    #: The cards that have the Human Card form, by id (the first, if an id repeats).
    cards: Mapping[str, HumanCard]
    routing: RoutingRecord | None
    #: Each of ``approval.cards`` read: the card, or why it is not one.
    read_cards: tuple[HumanCard | HatpError, ...] = ()

    def where(self, detail: str) -> str:
        prefix = f"{self.at.name}: " if self.at.name else ""
        return f"{prefix}the approval of group {self.group.group_id!r} {detail}"

    @property
    def read_votes(self) -> list[HumanVote]:
        return [v.vote for v in self.votes if v.vote is not None]

    @property
    def approving_people(self) -> list[str]:
        """Who approved, by the votes and by the approval's own list, first seen first."""
        voted = [v.human for v in self.read_votes if v.decision == "approve"]
        return list(dict.fromkeys([*voted, *self.approval.approvers]))


@dataclass
class _Counts:
    """What the rules looked at, for the details of a pass."""

    approvals: int = 0
    unverified: int = 0
    votes: int = 0
    cards: int = 0
    approvers: int = 0
    passkeys: int = 0
    passkey_groups: int = 0
    checked: list[str] = field(default_factory=list)
    quorums: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Context:
    plan: Plan
    plan_digest: str
    keyring: Keyring
    #: Whether the logged plan is the one its digest names ([TXN-PLAN] fails if not).
    plan_signed: bool
    #: Every signature checked, noted for the report.
    signatures: Signatures


def approval_findings(
    plan: Plan,
    plan_digest: str,
    approving: Sequence[Approving],
    keyring: Keyring,
    tally: Tally,
    signatures: Signatures | None = None,
) -> dict[str, str]:
    """Check :data:`APPROVAL_RULES` on every approval in ``approving``, each signature at
    the time of its approval's place, noted in ``signatures``.

    Failures and absences go to ``tally``; returns the detail of each rule
    that ran, for its pass. Never raises on malformed evidence.
    """
    signed = digest(plan.to_wire()) == plan_digest
    noted = Signatures() if signatures is None else signatures
    context = _Context(plan, plan_digest, keyring, signed, noted)
    counts = _Counts()
    for item in approving:
        evidence = _read(context, item)
        if isinstance(evidence, str):
            counts.unverified += 1  # [TXN-SIGNER] or [TXN-DIGEST] fails it
            continue
        _check(context, evidence, tally, counts)
    for rule in APPROVAL_RULES:
        tally.ran(rule)
    return _details(plan, counts)


def verify_approval(
    approval: Mapping[str, Any], plan: Mapping[str, Any] | Plan, keyring: Keyring
) -> list[Finding]:
    """Check the evidence an approval that approves carries against ``plan``; return
    one finding per rule of :data:`APPROVAL_RULES` (one per failure of a failing rule).

    What the offline verifier checks of each approval in a record, for one
    approval on its own (a coordinator deciding whether it counts). An
    approval that does not verify as signed by the gateway it names, is not
    for a group of the plan, or does not approve, has its evidence unread:
    every rule is absent, and absent is never a pass. Never raises.
    """
    tally = Tally(APPROVAL_RULES)
    try:
        parsed = parse_plan(plan)
    except HatpError as exc:
        for rule in APPROVAL_RULES:
            tally.absent(rule, f"the plan cannot be read: {exc.code}: {exc.message}")
        return tally.findings({})
    context = _Context(parsed, digest(parsed.to_wire()), keyring, True, Signatures())
    return _findings(context, _read(context, Approving(None, "", approval)), tally)


def verify_read_approval(
    doc: Mapping[str, Any],
    approval: Approval,
    signer: Verified,
    plan: Plan,
    plan_digest: str,
    keyring: Keyring,
) -> list[Finding]:
    """:func:`verify_approval`, for a caller that has read ``doc`` as ``approval`` and
    verified its signature itself (``signer``, what :func:`verify` returned for it), and
    holds the digest of ``plan`` (the coordinator, which checks both before it looks at
    the evidence): the same rules and findings, without reading the approval twice.
    """
    context = _Context(plan, plan_digest, keyring, True, Signatures())
    evidence = _evidence(context, Approving(None, "", doc), approval, signer)
    return _findings(context, evidence, Tally(APPROVAL_RULES))


def _findings(context: _Context, evidence: _Evidence | str, tally: Tally) -> list[Finding]:
    """The findings of one approval on its own: every rule absent when it is not read
    or does not approve, else each rule's."""
    if isinstance(evidence, str) or evidence.approval.decision is not ApprovalDecision.APPROVE:
        why = evidence if isinstance(evidence, str) else "the approval does not approve"
        for rule in APPROVAL_RULES:
            tally.absent(rule, f"{why}: its evidence is not read")
        return tally.findings({})
    counts = _Counts()
    _check(context, evidence, tally, counts)
    for rule in APPROVAL_RULES:
        tally.ran(rule)
    return tally.findings(_details(context.plan, counts))


def _check(context: _Context, evidence: _Evidence, tally: Tally, counts: _Counts) -> None:
    counts.approvals += 1
    counts.votes += len(evidence.votes)
    counts.cards += len(evidence.approval.cards)
    counts.approvers += len(evidence.approving_people)
    for check in _CHECKS.values():
        check(context, evidence, tally, counts)


def _read(context: _Context, item: Approving) -> _Evidence | str:
    """Read an approval the gateway it names signed, for a group of the plan;
    else say why it is not one."""
    try:
        approval = Approval.model_validate(item.doc)
        signer = context.signatures.verify(item.doc, context.keyring, item.place)
    except ValidationError as exc:
        return f"not an Approval: {exc.errors()[0]['msg']}"
    except HatpError as exc:
        return f"the approval does not verify: {exc.data.get('reason', exc.code)}: {exc.message}"
    return _evidence(context, item, approval, signer)


def _evidence(
    context: _Context, item: Approving, approval: Approval, signer: Verified
) -> _Evidence | str:
    """The evidence of an approval read and verified, if its gateway signed it and it is
    for a group of the plan; else why not."""
    if signer.issuer != approval.gateway:
        return f"the approval is signed by {signer.issuer!r}, not its gateway {approval.gateway!r}"
    group = next((g for g in context.plan.approvals if g.group_id == approval.group_id), None)
    if group is None:
        return f"the plan has no approval group {approval.group_id!r}"
    votes = tuple(_read_vote(index, doc) for index, doc in enumerate(approval.votes))
    read_cards: list[HumanCard | HatpError] = []
    cards: dict[str, HumanCard] = {}
    for doc in approval.cards:
        try:
            card = parse_card(doc)
        except HatpError as exc:
            read_cards.append(exc)
            continue
        read_cards.append(card)
        cards.setdefault(card.id, card)
    try:
        routing: RoutingRecord | None = RoutingRecord.model_validate(approval.routing)
    except ValidationError:
        routing = None
    return _Evidence(item, approval, group, votes, cards, routing, tuple(read_cards))


def _read_vote(index: int, doc: Any) -> _Vote:
    try:
        return _Vote(index, doc, HumanVote.model_validate(doc), None)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(p) for p in error["loc"])
        return _Vote(index, doc, None, f"is not a HumanVote: {loc}: {error['msg']}")


# --- the rules, each (context, evidence, tally, counts) -> None ------------------


def _check_routing(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-ROUTING"
    # A plan edited after its digest was signed fails [TXN-PLAN]; the routing
    # record is then held to the digest alone, or it would be blamed for the edit.
    skipped = frozenset() if context.plan_signed else _PLAN_RULES
    findings = (
        # Read once already; the plan digests to context.plan_digest when it is signed.
        routing_findings(
            ev.approval.routing,
            ev.routing,
            context.plan,
            context.plan_digest,
            context.keyring,
            context.signatures,
            ev.at.place.member("routing"),
        )
        if ev.routing is not None and context.plan_signed
        else carried_routing_findings(
            ev.approval.routing,
            context.plan,
            context.keyring,
            context.signatures,
            ev.at.place.member("routing"),
        )
    )
    for finding in findings:
        if finding.result is Result.PASS or (
            finding.result is Result.FAIL and finding.rule in skipped
        ):
            continue
        tally.fail(
            rule,
            ev.where(
                f"carries a routing record that {_verdict(finding.result)} "
                f"{finding.rule}: {finding.detail}"
            ),
            ev.at.position,
        )
    routing = ev.routing
    if routing is None:
        return
    if not context.plan_signed and routing.plan_digest != context.plan_digest:
        tally.fail(
            rule,
            ev.where(f"carries a routing record for plan {routing.plan_digest}"),
            ev.at.position,
        )
    if routing.gateway != ev.approval.gateway:
        tally.fail(
            rule,
            ev.where(
                f"was signed by {ev.approval.gateway!r}, but its routing record is "
                f"{routing.gateway!r}'s"
            ),
            ev.at.position,
        )
    if routing.group_id != ev.group.group_id:
        tally.fail(
            rule,
            ev.where(f"carries the routing record of group {routing.group_id!r}"),
            ev.at.position,
        )
    if isinstance(routing.checked, list):
        counts.checked.append(_money({a.currency: a.decimal for a in routing.checked}))


def _check_cards(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-CARD-SIGNED"
    seen: set[str] = set()
    for index, doc in enumerate(ev.approval.cards):
        read = ev.read_cards[index] if index < len(ev.read_cards) else None
        place = ev.at.place.member(f"cards[{index}]")
        problem = _card_problem(doc, context, place, read)
        card_id = doc.get("id") if isinstance(doc.get("id"), str) else None
        if problem is None and card_id in seen:
            problem = "repeats a card id"
        if card_id is not None:
            seen.add(card_id)
        if problem is not None:
            tally.fail(
                rule,
                ev.where(f"carries cards[{index}] ({card_id}), which {problem}"),
                ev.at.position,
            )


def _card_problem(
    doc: Mapping[str, Any], context: _Context, place: Place, read: HumanCard | HatpError | None
) -> str | None:
    """Why ``doc`` is not a Human Card signed by the directory it names, if it is not
    (``read``: the card as read already, or why it could not be read)."""
    if isinstance(read, HatpError):
        return _untrusted(read)
    try:
        if read is None:
            parse_card(doc)
        signer = context.signatures.verify(doc, context.keyring, place)
    except HatpError as exc:
        return _untrusted(exc)
    if signer.issuer != doc.get("issuer"):
        # One directory does not vouch for another's people.
        return f"names issuer {doc.get('issuer')!r} but is signed by {signer.issuer!r}"
    return None


def _untrusted(exc: HatpError) -> str:
    return f"is not a trusted Human Card: {exc.data.get('reason', exc.code)}: {exc.message}"


def _check_votes(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-VOTE-SIGNED"
    expected = {
        "askId": ev.approval.ask_id,
        "txnId": context.plan.txn_id,
        "planDigest": context.plan_digest,
        "groupId": ev.group.group_id,
        # Holds-first: people approved the plan and these terms; both absent otherwise.
        "termsDigest": ev.approval.terms_digest,
    }
    for item in ev.votes:
        for problem in _vote_problems(context, ev, item, expected):
            tally.fail(
                rule, ev.where(f"carries votes[{item.index}], which {problem}"), ev.at.position
            )


def _vote_problems(
    context: _Context, ev: _Evidence, item: _Vote, expected: Mapping[str, str | None]
) -> list[str]:
    if item.vote is None:
        return [str(item.problem)]
    out = [
        f"names {member} {item.doc.get(member)!r}, not {value!r}"
        for member, value in expected.items()
        if item.doc.get(member) != value
    ]
    card = ev.cards.get(item.vote.human)
    if card is None:
        return [*out, f"is by {item.vote.human}, whose card the approval does not carry"]
    if item.vote.signature is None:
        return out  # signed by its passkey alone: [TXN-PASSKEY] checks that
    try:
        place = ev.at.place.member(f"votes[{item.index}]")
        context.signatures.verify(item.doc, card_keyring(card), place)
    except HatpError as exc:
        out.append(
            f"is not signed by an Ed25519 key on {card.id}'s card: "
            f"{exc.data.get('reason', exc.code)}: {exc.message}"
        )
    return out


def _check_passkeys(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-PASSKEY"
    needed = passkey_required(context.plan, ev.group.group_id)
    counts.passkey_groups += needed
    for item in ev.votes:
        vote = item.vote
        if vote is None:
            continue  # [TXN-VOTE-SIGNED] says it is no vote
        problem = None
        if vote.passkey is None:
            if needed and vote.decision == "approve":
                problem = (
                    f"is an approve by {vote.human} without a passkey assertion, but the "
                    "group needs the approver's passkey (REQUIRED)"
                )
        elif (card := ev.cards.get(vote.human)) is None:
            problem = f"carries a passkey assertion by {vote.human}, whose card it does not carry"
        else:
            try:
                verify_passkey(item.doc, card)
                counts.passkeys += 1
            except PasskeyInvalid as exc:
                problem = (
                    f"carries a passkey assertion that is refused ({exc.reason}): {exc.message}"
                )
        if problem is not None:
            tally.fail(rule, ev.where(f"has votes[{item.index}], which {problem}"), ev.at.position)


def _check_approvers(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-APPROVERS"
    problems: list[str] = []
    if ev.approval.withdrawn:
        problems.append("is withdrawn (the deadline passed), yet approves")
    voters: list[str] = []
    for item in ev.votes:
        vote = item.vote
        if vote is None:
            continue
        if vote.decision == "reject":
            problems.append(
                f"has a reject vote by {vote.human} (votes[{item.index}]), yet approves"
            )
        if vote.human in voters:
            problems.append(f"has a second vote by {vote.human} (votes[{item.index}])")
        voters.append(vote.human)
    approved = list(dict.fromkeys(v.human for v in ev.read_votes if v.decision == "approve"))
    if ev.approval.approvers != approved:
        problems.append(
            f"lists approvers {ev.approval.approvers}, but the people whose votes approve "
            f"are {approved}"
        )
    for problem in problems:
        tally.fail(rule, ev.where(problem), ev.at.position)


def _check_quorum(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-QUORUM"
    try:
        needed = parse_address(ev.group.address).quorum[0]
    except HatpError as exc:
        tally.fail(
            rule, ev.where(f"is for address {ev.group.address!r}: {exc.message}"), ev.at.position
        )
        return
    approved = {v.human for v in ev.read_votes if v.decision == "approve"}
    counts.quorums.append(f"group {ev.group.group_id!r}: {len(approved)} of {needed} needed")
    tally.expect(
        rule,
        len(approved) >= needed,
        ev.at.position,
        lambda: ev.where(
            f"has approve votes from {_count(len(approved), 'person', 'people')}, "
            f"but its address {ev.group.address} needs {needed} distinct people"
        ),
    )


def _check_sod(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-SOD"
    principal = context.plan.on_behalf_of
    tally.expect(
        rule,
        principal not in ev.approving_people,
        ev.at.position,
        lambda: ev.where(
            f"is approved by {principal}, the person the agent acts for: nobody approves "
            "their own request"
        ),
    )


def _check_authority(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-AUTHORITY"
    amounts = ev.routing.checked if ev.routing is not None else None
    if not isinstance(amounts, list):
        what = "cannot be read" if ev.routing is None else f"checked {ABSENT}"
        tally.absent(
            rule,
            ev.where(
                f"has a routing record that {what}: no amount to hold the approvers' authority to"
            ),
        )
        return
    checked = {a.currency: a.decimal for a in amounts}
    action = ev.group.requirement.action
    for person in ev.approving_people:
        card = ev.cards.get(person)
        problem = (
            "the approval carries no card of theirs"
            if card is None
            else _short_of(card.limits(action), checked, action)
        )
        if problem is not None:
            tally.fail(
                rule,
                ev.where(
                    f"is approved by {person}, who may not approve {_money(checked)}: {problem}"
                ),
                ev.at.position,
            )


def _short_of(
    limits: Mapping[str, Decimal], checked: Mapping[str, Decimal], action: str
) -> str | None:
    if not limits:
        return f"their card grants no {action}"
    for currency, amount in sorted(checked.items()):
        if currency not in limits:
            return f"their card grants {action} in {_money(limits)}, not in {currency}"
        if limits[currency] < amount:
            return f"their card's limit for {action} is {limits[currency]} {currency}"
    return None


def _check_late(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-VOTE-LATE"
    deadline = context.plan.deadlines.decide_by
    for item in ev.votes:
        vote = item.vote
        if vote is not None and not _by(vote.time, deadline):
            tally.fail(
                rule,
                ev.where(
                    f"counts votes[{item.index}] by {vote.human} at {vote.time}, after "
                    f"the plan's decideBy {deadline}"
                ),
                ev.at.position,
            )


def _by(moment: str, deadline: str) -> bool:
    try:
        return parse_time(moment) <= parse_time(deadline)
    except ValueError:  # a time that is no time is not by the deadline
        return False


def _check_routed(context: _Context, ev: _Evidence, tally: Tally, counts: _Counts) -> None:
    rule = "TXN-ROUTED"
    if ev.routing is None:
        tally.absent(rule, ev.where("has a routing record that cannot be read"))
        return
    decided = [h.id for h in ev.routing.humans if h.result is HumanResult.DECIDED]
    voters = list(dict.fromkeys(v.human for v in ev.read_votes))
    for person in voters:
        if person not in decided:
            result = next((h.result.value for h in ev.routing.humans if h.id == person), None)
            shown = "not in it" if result is None else f"{result!r} in it"
            tally.fail(
                rule,
                ev.where(
                    f"has a vote by {person}, who the routing record does not show as "
                    f"decided ({shown})"
                ),
                ev.at.position,
            )
    for person in decided:
        if person not in voters:
            tally.fail(
                rule,
                ev.where(f"carries no vote by {person}, who the routing record says decided"),
                ev.at.position,
            )


#: The routing rules that recompute from the plan (the others read only the record).
_PLAN_RULES = frozenset({"RTE-DIGEST", "RTE-CHECKED", "RTE-TOTALS"})

_CHECKS: dict[str, Callable[[_Context, _Evidence, Tally, _Counts], None]] = {
    "TXN-ROUTING": _check_routing,
    "TXN-CARD-SIGNED": _check_cards,
    "TXN-VOTE-SIGNED": _check_votes,
    "TXN-PASSKEY": _check_passkeys,
    "TXN-APPROVERS": _check_approvers,
    "TXN-QUORUM": _check_quorum,
    "TXN-SOD": _check_sod,
    "TXN-AUTHORITY": _check_authority,
    "TXN-VOTE-LATE": _check_late,
    "TXN-ROUTED": _check_routed,
}


def _details(plan: Plan, counts: _Counts) -> dict[str, str]:
    approvals = _count(counts.approvals, "approving approval")
    if counts.unverified:
        approvals += f" (and {counts.unverified} that do not verify: TXN-SIGNER)"
    votes, approvers = _count(counts.votes, "vote"), _count(counts.approvers, "approver")
    return {
        "TXN-ROUTING": f"{approvals}; routing records verify, checked "
        + ("; ".join(counts.checked) or "nothing"),
        "TXN-CARD-SIGNED": f"{approvals}; {_count(counts.cards, 'card')} signed by trusted "
        "directories",
        "TXN-VOTE-SIGNED": f"{approvals}; {votes}, each signed by a key on its voter's card",
        "TXN-PASSKEY": f"{approvals}; {_count(counts.passkeys, 'passkey assertion')} verified "
        f"against the voters' cards; {_count(counts.passkey_groups, 'group')} needing one",
        "TXN-APPROVERS": f"{approvals}; {approvers}, each with an approve vote",
        "TXN-QUORUM": f"{approvals}; " + ("; ".join(counts.quorums) or "no quorum to meet"),
        "TXN-SOD": f"{approvals}; no approver is {plan.on_behalf_of}",
        "TXN-AUTHORITY": f"{approvals}; {approvers} with authority for what was checked",
        "TXN-VOTE-LATE": f"{approvals}; {votes} by {plan.deadlines.decide_by}",
        "TXN-ROUTED": f"{approvals}; every voter decided in the routing records",
    }


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _verdict(result: Result) -> str:
    return "fails" if result is Result.FAIL else f"is {result} for"


def _money(amounts: Mapping[str, Decimal]) -> str:
    return ", ".join(f"{v} {c}" for c, v in sorted(amounts.items())) or "nothing"
