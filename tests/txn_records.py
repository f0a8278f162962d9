"""Realistic transaction records, built step by step, for verifier tests.

A business trip: hold a seat (airline, hold), hold a room (hotel, hold), add
a calendar event (calendar, compensate), charge the card (payments, final;
it settles the two holds), with one finance approval through the gateway.
Every receipt and approval is signed by its own party in the exact wire form
of :class:`PrepareReceipt`, :class:`OutcomeReceipt` or :class:`Approval`,
and checked against that model; every event is signed by the coordinator,
as the coordinator writes them (docs/spec.md §14, §15). Right after the
plan comes the mode choice (``txn.mode``): the plan's ``auto`` mode, with
the airline's and the hotel's signed quotes (30-minute holds) and the
gateway's signed chain estimate for finance (15 minutes at worst), is
parallel.

An approval carries real evidence (§19): the finance approvers of acme.com
(:data:`PEOPLE`) have Ed25519 keys on Human Cards signed by acme's directory,
their votes are signed with those keys, and the routing record is the one
:func:`hatp.gateway.route` signs, finished with what happened to each person.

:class:`TxnBuilder` writes one event per call, so a test can write the
record of a transaction that broke a rule as easily as a good one: that is
what an attacker holding the coordinator key can do. :func:`committed_trip`,
:func:`rejected_trip` and :func:`unwound_trip` are the good records.

Keys and times are fixed and Ed25519 is deterministic, so every record is
reproducible byte for byte (the planted fixtures depend on it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from directory.people import ISSUER as DIRECTORY
from directory.people import authenticator, card, passkey
from hatp.clock import ManualClock, format_time, parse_time
from hatp.directory import Directory, sign_card
from hatp.evidence import (
    CHAIN_RULES,
    Keyring,
    RecordWriter,
    SigningKey,
    digest,
    sign,
    verify_record,
)
from hatp.evidence._b64 import b64url_encode
from hatp.gateway import Routed, route, sign_passkey_vote
from hatp.model import (
    Approval,
    ChainEstimate,
    Finding,
    HumanVote,
    OutcomeReceipt,
    PendingVote,
    PrepareReceipt,
    Quote,
    RenewReceipt,
    Result,
    RoutingRecord,
    parse_plan,
)
from hatp.version import PROTOCOL_VERSION

COORDINATOR = "https://coordinator.acme.com"
AIRLINE = "mcp://airline.example"
HOTEL = "mcp://hotel.example"
CALENDAR = "mcp://calendar.example"
PAYMENTS = "mcp://payments.example"
GATEWAY = "https://gateway.acme.com"
#: acme's directory signs the Human Cards (its issuer is ``https://directory.acme.com``).
PARTIES = (COORDINATOR, AIRLINE, HOTEL, CALENDAR, PAYMENTS, GATEWAY, DIRECTORY)
#: Each party's key; its issuer is the party itself.
KEYS = {
    party: SigningKey.from_seed(bytes([70 + n]) * 32, f"{party}#key-1")
    for n, party in enumerate(PARTIES)
}
FINANCE = "human://acme.com/role/finance-approver"
#: acme.com's finance approvers: name -> approve.spend limit in USD. Dana is who
#: the agent acts for (separation of duties passes her over); Erin's limit is low.
PEOPLE = {"alice": "10000", "bob": "10000", "carol": "10000", "dana": "50000", "erin": "500"}
#: Each person's own key, on their card: what signs their votes.
PERSON_KEYS = {
    f"human://acme.com/{name}": SigningKey.from_seed(
        bytes([110 + n]) * 32, f"human://acme.com/{name}#key-1"
    )
    for n, name in enumerate(PEOPLE)
}
ALICE, BOB, CAROL, DANA, ERIN = PERSON_KEYS
START = datetime(2026, 12, 2, 16, 48, 8, 123000, tzinfo=UTC)
TXN_ID = "txn-trip-0001"
#: Branch id -> (participant, tier), in plan order.
BRANCHES = {
    "flight": (AIRLINE, "hold"),
    "hotel": (HOTEL, "hold"),
    "calendar": (CALENDAR, "compensate"),
    "pay": (PAYMENTS, "final"),
}
#: Phase 2's order: compensate, final, hold.
COMMIT_ORDER = ("calendar", "pay", "flight", "hotel")
#: A hold's lease when prepared, and how long it can last, renewals included.
LEASE_SECONDS, HOLD_SECONDS = 1200, 1800
#: The coordinator's commit allowance, as ``txn.mode`` states it.
COMMIT_SECONDS = 60
#: Each person's SLA on their card (``directory.people``).
SLA = 900


def keyring() -> Keyring:
    """Every party's public key, each party trusted as its own issuer."""
    return Keyring(((k.public, party) for party, k in KEYS.items()), trusted_issuers=PARTIES)


def trip_plan(
    txn_id: str = TXN_ID,
    *,
    pay: str = "1900.00",
    quorum: str | None = None,
    mode: str = "auto",
    passkey: bool | dict[str, Any] = False,
) -> dict[str, Any]:
    """Return the trip's plan in its normal form (what ``txn.planned`` carries);
    ``quorum`` (``"2-of-3"``) asks finance for that many people, ``mode`` is phase 1's,
    ``passkey`` finance's passkey requirement."""
    plan = {
        "hatpVersion": PROTOCOL_VERSION,
        "txnId": txn_id,
        "initiator": "agent://acme.com/travel-bot",
        "onBehalfOf": "human://acme.com/dana",
        "branches": [
            _branch("flight", "hold_seat", {"flight": "LH 401", "seat": "12A"}, "1240.00"),
            _branch("hotel", "hold_room", {"hotel": "Hotel Adlon", "nights": 2}, "660.00"),
            _branch("calendar", "add_event", {"title": "Berlin trip", "day": "2026-12-09"}),
            {
                **_branch("pay", "charge_card", {"card": "corp-visa-4242"}, pay),
                "settles": ["flight", "hotel"],
            },
        ],
        "approvals": [
            {
                "groupId": "finance",
                "address": FINANCE if quorum is None else f"{FINANCE}?quorum={quorum}",
                "requirement": {"action": "approve.spend", "tolerance": "0.02", "passkey": passkey},
            }
        ],
        "deadlines": {"decideBy": format_time(START + timedelta(minutes=15))},
        "mode": mode,
        "agentText": {"summary": "Book Dana's Berlin trip: flight, hotel, calendar, card."},
    }
    return parse_plan(plan).to_wire()


def signed_card(name: str, *, key: SigningKey | None = None, **changes: Any) -> dict[str, Any]:
    """``name``'s Human Card with their own key (and a passkey), signed by ``key``
    (acme's directory unless given); ``changes`` override members before signing."""
    person = f"human://acme.com/{name}"
    keys = [PERSON_KEYS[person].public.to_jwk(), passkey(name)] if person in PERSON_KEYS else []
    body = card(name, PEOPLE.get(name, "10000"), **{"keys": keys, **changes})
    return sign_card(body, key or KEYS[DIRECTORY])


def directory() -> Directory:
    """acme's directory of :data:`PEOPLE`, as the gateway routes on it."""
    return Directory(DIRECTORY, [signed_card(name) for name in PEOPLE], keyring())


def _branch(
    branch_id: str, operation: str, args: dict[str, Any], value: str | None = None
) -> dict[str, Any]:
    participant, tier = BRANCHES[branch_id]
    amount = None if value is None else {"value": value, "currency": "USD"}
    return {
        "branchId": branch_id,
        "participant": participant,
        "operation": operation,
        "tier": tier,
        "args": args,
        "amount": amount,
    }


class TxnBuilder:
    """Writes a transaction's record one event at a time, each a second after the last.

    Receipt and approval makers return the signed wire dict; event writers
    take one (or make the honest one) and append the event.
    """

    def __init__(self, plan: Mapping[str, Any] | None = None, txn_id: str = TXN_ID) -> None:
        self.plan = dict(plan) if plan is not None else trip_plan(txn_id)
        self.txn_id = str(self.plan["txnId"])
        self.plan_digest = digest(self.plan)
        self.clock = ManualClock(START)
        self.writer = RecordWriter(self.txn_id, self.clock)
        #: Each hold's horizon, from its latest logged prepare or replace receipt.
        self.horizons: dict[str, str] = {}
        #: The effect preview each branch's yes vote signs, and what its commit observed.
        self.previews: dict[str, dict[str, Any]] = {}
        self.observations: dict[str, dict[str, Any]] = {}

    def now(self) -> str:
        return format_time(self.clock.now())

    # --- signed objects -------------------------------------------------------

    def prepare_receipt(
        self, branch_id: str, vote: str = "yes", *, by: str | None = None, **change: Any
    ) -> dict[str, Any]:
        """A participant's signed vote; ``change`` overrides members before signing, and
        ``by`` names another party to sign it."""
        participant, tier = BRANCHES[branch_id]
        lease = self.clock.now() + timedelta(minutes=20)
        hold = tier == "hold" and vote == "yes"
        dry_run = tier != "hold" and vote == "yes"
        receipt = {
            **self._head("prepare", branch_id, self.plan_digest),
            "vote": vote,
            "reason": None if vote == "yes" else "SOLD_OUT: no rooms left on those nights",
            "tier": tier,
            "leaseExpiresAt": format_time(lease) if hold else None,
            "holdHorizon": format_time(lease + timedelta(minutes=10)) if hold else None,
            "preconditions": {"versions": {branch_id: "v7"}, "scope": "write"} if dry_run else None,
            "cost": self._amount(branch_id) if vote == "yes" else None,
            "preview": self.previews.get(branch_id) if vote == "yes" else None,
            "time": self.now(),
            **change,
        }
        return self._signed(receipt, by or participant, PrepareReceipt)

    def renew_receipt(
        self, branch_id: str, *, by: str | None = None, **change: Any
    ) -> dict[str, Any]:
        """A participant's signed renewal of a hold: the lease another 20 minutes on,
        up to the hold's horizon (of its logged prepare receipt)."""
        horizon = self.horizons.get(branch_id, format_time(START + timedelta(seconds=HOLD_SECONDS)))
        lease = min(self.clock.now() + timedelta(seconds=LEASE_SECONDS), parse_time(horizon))
        receipt = {
            **self._head("renew", branch_id, self.plan_digest),
            "leaseExpiresAt": format_time(lease),
            "holdHorizon": horizon,
            "time": self.now(),
            **change,
        }
        return self._signed(receipt, by or BRANCHES[branch_id][0], RenewReceipt)

    def quote(self, branch_id: str, *, by: str | None = None, **change: Any) -> dict[str, Any]:
        """A participant's signed quote: the branch's amount, valid for an hour, and for a
        hold the lease and horizon a prepare now would grant."""
        participant, tier = BRANCHES[branch_id]
        hold = tier == "hold"
        quote = {
            **self._head("quote", branch_id, self.plan_digest),
            "tier": tier,
            "cost": self._amount(branch_id),
            "validUntil": format_time(self.clock.now() + timedelta(hours=1)),
            "leaseSeconds": LEASE_SECONDS if hold else None,
            "holdSeconds": HOLD_SECONDS if hold else None,
            "time": self.now(),
            **change,
        }
        return self._signed(quote, by or participant, Quote)

    def estimate(
        self,
        group_id: str = "finance",
        *,
        by: str = GATEWAY,
        chain: Sequence[str] = (ALICE,),
        **change: Any,
    ) -> dict[str, Any]:
        """The gateway's signed chain estimate: ``chain`` asked one after another, each
        waiting their SLA, nobody answering."""
        links = [
            {"human": human, "sla": SLA, "delegateOf": None, "startsAt": n * SLA,
             "endsAt": (n + 1) * SLA}
            for n, human in enumerate(chain)
        ]  # fmt: skip
        estimate = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "chain-estimate",
            "txnId": self.txn_id,
            "planDigest": self.plan_digest,
            "groupId": group_id,
            "gateway": GATEWAY,
            "chain": links,
            "worstSeconds": len(links) * SLA,
            "time": self.now(),
            **change,
        }
        return self._signed(estimate, by, ChainEstimate)

    def mode_body(self) -> dict[str, Any]:
        """The honest ``txn.mode`` body for this plan (besides ``planDigest``)."""
        requested = self.plan["mode"]
        body: dict[str, Any] = {
            "requested": requested,
            "chosen": requested,
            "estimates": [],
            "quotes": [],
            "worstSeconds": None,
            "shortestHoldSeconds": None,
            "commitSeconds": COMMIT_SECONDS,
            "basis": None,
        }
        holds = [b["branchId"] for b in self.plan["branches"] if b["tier"] == "hold"]
        if requested == "approval-first":
            body["quotes"] = [self.quote(branch_id) for branch_id in holds]
        elif requested == "auto" and not holds:
            body["chosen"] = "parallel"
        elif requested == "auto":
            estimates = [self.estimate(g["groupId"]) for g in self.plan["approvals"]]
            quotes = [self.quote(branch_id) for branch_id in holds]
            worst = max((e["worstSeconds"] for e in estimates), default=0)
            shortest = min(q["holdSeconds"] for q in quotes)
            fits = worst + COMMIT_SECONDS <= shortest
            body.update(
                chosen="parallel" if fits else "approval-first",
                estimates=estimates,
                quotes=quotes,
                worstSeconds=worst,
                shortestHoldSeconds=shortest,
                basis=next(q["branchId"] for q in quotes if q["holdSeconds"] == shortest),
            )
        return body

    def outcome_receipt(
        self, branch_id: str, kind: str, *, by: str | None = None, **change: Any
    ) -> dict[str, Any]:
        """A participant's signed commit, abort or compensate receipt."""
        participant, tier = BRANCHES[branch_id]
        outcome = {"commit": "committed", "abort": "aborted", "compensate": "compensated"}[kind]
        committing = kind == "commit"
        receipt = {
            **self._head(kind, branch_id, self.plan_digest),
            "outcome": outcome,
            "undoToken": f"undo-{branch_id}-1" if committing and tier == "compensate" else None,
            "effect": {"done": f"{branch_id} {outcome}"},
            "observed": self.observations.get(branch_id) if committing else None,
            "time": self.now(),
            **change,
        }
        return self._signed(receipt, by or participant, OutcomeReceipt)

    def ask_id(self, group_id: str = "finance") -> str:
        """The gateway's id for its ask of ``group_id`` about this plan."""
        return f"ask-{self.txn_id}-{group_id}"

    def vote(
        self,
        human: str,
        decision: str = "approve",
        *,
        group_id: str = "finance",
        key: SigningKey | None = None,
        passkey: bool = False,
        **change: Any,
    ) -> dict[str, Any]:
        """``human``'s signed vote, with the key on their card unless ``key`` is given;
        with ``passkey``, their passkey's assertion on it too (made before ``change``)."""
        vote = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "human-vote",
            "askId": self.ask_id(group_id),
            "txnId": self.txn_id,
            "planDigest": self.plan_digest,
            "groupId": group_id,
            "human": human,
            "decision": decision,
            "time": self.now(),
        }
        if passkey:
            vote["passkey"] = _assertion(
                vote, {k: v for k, v in change.items() if k == "termsDigest"}
            )
        vote.update(change)
        signed = sign(vote, key or PERSON_KEYS[human])
        HumanVote.model_validate(signed)
        return signed

    def routing(
        self, group_id: str = "finance", decided: Mapping[str, str] | None = None, **change: Any
    ) -> dict[str, Any]:
        """The gateway's final signed routing record: the record :func:`route` signs,
        with each person in ``decided`` (id -> decision) decided, the other
        candidates not reached. ``change`` overrides members before signing."""
        routed = self._routed(group_id)
        if decided is None:
            first = routed.resolution.candidate_ids[: routed.resolution.needed]
            decided = dict.fromkeys(first, "approve")
        humans = []
        for human in routed.record["humans"]:
            if human["id"] in decided:
                human = {"id": human["id"], "result": "decided", "detail": decided[human["id"]]}
            elif human["result"] == "candidate":
                human = {**human, "result": "not-reached"}
            humans.append(human)
        # A gateway that asked someone its resolution passed over (planted cases) says so.
        seen = {h["id"] for h in humans}
        humans += [
            {"id": person, "result": "decided", "detail": decision}
            for person, decision in decided.items()
            if person not in seen
        ]
        body = {k: v for k, v in routed.record.items() if k != "signature"}
        return self._signed({**body, "humans": humans, **change}, GATEWAY, RoutingRecord)

    def approval(
        self,
        group_id: str = "finance",
        decision: str = "approve",
        *,
        by: str = GATEWAY,
        votes: Sequence[dict[str, Any]] | None = None,
        terms_digest: str | None = None,
        **change: Any,
    ) -> dict[str, Any]:
        """The gateway's signed account of one approval group's decision, with its evidence.

        By default the top N candidates (N of the group's quorum; one for a
        reject) vote ``decision``; ``votes`` gives other votes. The cards are
        the voters', the approvers those who voted approve, the routing record
        the final one; ``change`` overrides any member before signing. With
        ``terms_digest`` (holds-first) the votes and the approval carry it.
        """
        terms = {} if terms_digest is None else {"termsDigest": terms_digest}
        if votes is None:
            resolution = self._routed(group_id).resolution
            asked = resolution.candidate_ids[: resolution.needed if decision == "approve" else 1]
            votes = [self.vote(person, decision, group_id=group_id, **terms) for person in asked]
        voters = list(dict.fromkeys(v["human"] for v in votes))
        approvers = list(dict.fromkeys(v["human"] for v in votes if v["decision"] == "approve"))
        decided = {v["human"]: v["decision"] for v in votes}
        approval = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "approval",
            "askId": self.ask_id(group_id),
            "txnId": self.txn_id,
            "planDigest": self.plan_digest,
            "groupId": group_id,
            "decision": decision,
            "approvers": approvers,
            "reason": f"{len(approvers)} of {group_id} approved"
            if decision == "approve"
            else f"{', '.join(voters) or 'nobody'} rejected",
            "withdrawn": False,
            "votes": list(votes),
            "cards": [signed_card(person.rsplit("/", 1)[1]) for person in voters],
            "routing": self.routing(group_id, decided),
            "gateway": GATEWAY,
            "decidedAt": self.now(),
            **terms,
            **change,
        }
        return self._signed(approval, by, Approval)

    def pending(
        self, group_id: str = "finance", *, by: str = GATEWAY, **change: Any
    ) -> dict[str, Any]:
        """The gateway's signed word that ``group_id`` is asked and not yet decided."""
        pending = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "pending",
            "askId": self.ask_id(group_id),
            "txnId": self.txn_id,
            "planDigest": self.plan_digest,
            "groupId": group_id,
            "gateway": GATEWAY,
            "decideBy": self.plan["deadlines"]["decideBy"],
            "time": self.now(),
            **change,
        }
        return self._signed(pending, by, PendingVote)

    def _routed(self, group_id: str) -> Routed:
        return route(
            self.plan,
            self.plan_digest,
            group_id,
            directory(),
            gateway_id=GATEWAY,
            key=KEYS[GATEWAY],
            clock=ManualClock(self.clock.now()),
        )

    # --- events ----------------------------------------------------------------

    def event(self, event_type: str, **body: Any) -> dict[str, Any]:
        """Append one coordinator-signed event carrying the plan digest (``body`` may override)."""
        event = self.writer.append(
            event_type, {"planDigest": self.plan_digest, **body}, KEYS[COORDINATOR]
        )
        self.clock.advance(1)
        return event

    def planned(self, plan: Mapping[str, Any] | None = None, *, mode: bool = True) -> TxnBuilder:
        """Log the plan, and then (unless not ``mode``) the honest mode choice."""
        self.event(
            "txn.planned",
            plan=dict(plan if plan is not None else self.plan),
            coordinator=COORDINATOR,
            fence=1,
        )
        return self.moded() if mode else self

    def moded(self, **change: Any) -> TxnBuilder:
        """Log the mode choice (txn.mode): :meth:`mode_body`, ``change`` overriding members."""
        self.event("txn.mode", **{**self.mode_body(), **change})
        return self

    def replaced(
        self,
        branch_id: str,
        receipt: dict[str, Any] | None = None,
        problem: str | None = None,
        **change: Any,
    ) -> TxnBuilder:
        """Log a lost hold placed again (txn.replaced): a new prepare receipt, attempt 2,
        with a lease and horizon from now (``change`` overrides its members)."""
        if receipt is None and problem is None:
            receipt = self.prepare_receipt(branch_id, **{"attempt": 2, **change})
        if problem is None:
            self._note_horizon(branch_id, receipt)
        self.event("txn.replaced", branchId=branch_id, receipt=receipt, problem=problem)
        return self

    def renewed(self, branch_id: str, receipt: dict[str, Any] | None = None) -> TxnBuilder:
        """Log a hold's renewal (txn.renewed)."""
        receipt = receipt if receipt is not None else self.renew_receipt(branch_id)
        self.event("txn.renewed", branchId=branch_id, receipt=receipt)
        return self

    def termed(
        self,
        *,
        longer: Mapping[str, float] | None = None,
        misstated: Mapping[str, dict[str, Any]] | None = None,
    ) -> str:
        """Holds-first: state the holds' terms (txn.terms) from their logged prepare
        receipts and the deadline in force, each hold in ``longer`` stated as held that
        many seconds past its horizon, and each step's signed preview (those in
        ``misstated`` stated otherwise); return the terms' digest."""
        holds = []
        previews: dict[str, Any] = {}
        for event in self.writer.events():
            body = event["body"]
            receipt = body.get("receipt") if event["type"] == "txn.prepared" else None
            if receipt and receipt.get("preview") is not None:
                previews[body["branchId"]] = receipt["preview"]
            if receipt and receipt.get("holdHorizon"):
                extra = timedelta(seconds=(longer or {}).get(body["branchId"], 0.0))
                horizon = format_time(parse_time(receipt["holdHorizon"]) + extra)
                holds.append(
                    {
                        "branchId": body["branchId"],
                        "leaseExpiresAt": receipt["leaseExpiresAt"],
                        "holdHorizon": horizon,
                    }
                )
        deadlines = [e["body"]["approveBy"] for e in self.writer.events()
                     if e["type"] == "txn.deadline"]  # fmt: skip
        terms = {
            "kind": "hold-terms",
            "planDigest": self.plan_digest,
            "holds": holds,
            "approveBy": min([*deadlines, self.plan["deadlines"]["decideBy"]]),
            "previews": {**previews, **(misstated or {})},
        }
        self.event("txn.terms", terms=terms, termsDigest=digest(terms))
        return digest(terms)

    def deadline(self, approve_by: str, basis: str = "flight") -> TxnBuilder:
        """Log the approval deadline moved earlier (txn.deadline)."""
        self.event("txn.deadline", approveBy=approve_by, basis=basis)
        return self

    def prepared(
        self, branch_id: str, vote: str = "yes", receipt: dict[str, Any] | None = None
    ) -> TxnBuilder:
        receipt = receipt if receipt is not None else self.prepare_receipt(branch_id, vote)
        self._note_horizon(branch_id, receipt)
        self.event("txn.prepared", branchId=branch_id, receipt=receipt, problem=None)
        return self

    def _note_horizon(self, branch_id: str, receipt: Any) -> None:
        if isinstance(receipt, dict) and isinstance(receipt.get("holdHorizon"), str):
            self.horizons[branch_id] = receipt["holdHorizon"]

    def approved(
        self,
        group_id: str = "finance",
        decision: str = "approve",
        approval: dict[str, Any] | None = None,
    ) -> TxnBuilder:
        approval = approval if approval is not None else self.approval(group_id, decision)
        self.event("txn.approval", groupId=group_id, approval=approval, problem=None)
        return self

    def pending_asked(
        self, group_id: str = "finance", pending: dict[str, Any] | None = None
    ) -> TxnBuilder:
        """Log the gateway's pending answer to the coordinator's ask (txn.pending)."""
        pending = pending if pending is not None else self.pending(group_id)
        self.event("txn.pending", groupId=group_id, pending=pending)
        return self

    def decided(self, decision: str, reason: str = "") -> TxnBuilder:
        reason = reason or (
            "every vote is yes" if decision == "commit" else "not every vote is yes"
        )
        self.event("txn.decided", decision=decision, reason=reason)
        return self

    def phase2(
        self, event_type: str, branch_id: str, receipt: dict[str, Any] | None = None
    ) -> TxnBuilder:
        """Log a txn.committed, txn.compensated or txn.aborted event with its receipt."""
        kind = {"txn.committed": "commit", "txn.compensated": "compensate", "txn.aborted": "abort"}
        receipt = (
            receipt if receipt is not None else self.outcome_receipt(branch_id, kind[event_type])
        )
        self.event(event_type, branchId=branch_id, receipt=receipt)
        return self

    def committed(self, *branch_ids: str) -> TxnBuilder:
        for branch_id in branch_ids:
            self.phase2("txn.committed", branch_id)
        return self

    def aborted(self, *branch_ids: str) -> TxnBuilder:
        for branch_id in branch_ids:
            self.phase2("txn.aborted", branch_id)
        return self

    def compensated(self, *branch_ids: str) -> TxnBuilder:
        for branch_id in branch_ids:
            self.phase2("txn.compensated", branch_id)
        return self

    def unwinding(self, branch_id: str, code: str = "PRECONDITION_CHANGED") -> TxnBuilder:
        error = {
            "code": code,
            "message": f"{branch_id}: the target changed after the approval",
            "data": {"changed": [branch_id]},
        }
        self.event("txn.unwinding", branchId=branch_id, error=error)
        return self

    def held(self, branch_id: str, code: str = "OUTCOME_CONFLICT") -> TxnBuilder:
        """The participant refused, for certain, to release ``branch_id`` [COORD-SETTLE]."""
        error = {"code": code, "message": f"{branch_id} cannot be released", "data": {}}
        self.event("txn.held", branchId=branch_id, step="txn.aborted", error=error)
        return self

    def effect(self, branch_id: str, verdict: str, certainty: str = "predicted") -> TxnBuilder:
        """How the branch's commit compares with its preview [COORD-EFFECT]."""
        self.event("txn.effect", branchId=branch_id, certainty=certainty, verdict=verdict)
        return self

    def outcome(self, state: str, **body: Any) -> TxnBuilder:
        self.event("txn.outcome", state=state, **body)
        return self

    def sealed(self) -> dict[str, Any]:
        """Seal the record and return it."""
        self.writer.seal(KEYS[COORDINATOR])
        return self.writer.to_json()

    # --- common openings -------------------------------------------------------

    def voted(self, *, approval: str | None = "approve", pending: bool = False) -> TxnBuilder:
        """Plan, every branch votes yes, and the finance group answers (unless None),
        first with a pending answer if ``pending``."""
        self.planned()
        for branch_id in BRANCHES:
            self.prepared(branch_id)
        if pending:
            self.pending_asked("finance")
        if approval is not None:
            self.approved("finance", approval)
        return self

    def _head(self, kind: str, branch_id: str, plan_digest: str | None) -> dict[str, Any]:
        head = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": kind,
            "txnId": self.txn_id,
            "branchId": branch_id,
            "participant": BRANCHES[branch_id][0],
            "planDigest": plan_digest,
            "fence": 1,
        }
        return {**head, "attempt": 1} if kind == "prepare" else head

    def _amount(self, branch_id: str) -> dict[str, str] | None:
        branch = next(b for b in self.plan["branches"] if b["branchId"] == branch_id)
        amount = branch["amount"]
        return None if amount is None else dict(amount)

    @staticmethod
    def _signed(obj: dict[str, Any], party: str, model: Any) -> dict[str, Any]:
        signed = sign(obj, KEYS[party])
        model.model_validate(signed)
        return signed


def committed_trip() -> dict[str, Any]:
    """Every vote yes, finance approves, phase 2 in tier order: COMMITTED."""
    b = TxnBuilder().voted().decided("commit")
    return b.committed(*COMMIT_ORDER).outcome("committed").sealed()


#: The card's preview: predicted, as the bank sets the exchange rate at capture, at most 1950.
PAY_PREVIEW: dict[str, Any] = {
    "certainty": "predicted",
    "summary": "charge card corp-visa-4242 1900.00 USD",
    "changes": [
        {
            "resource": "card corp-visa-4242",
            "kind": "charge",
            "field": None,
            "before": None,
            "after": None,
            "amount": {"value": "1900.00", "currency": "USD"},
            "at": None,
        }
    ],
    "bound": {"value": "1950.00", "currency": "USD"},
}


def observed_charge(value: str) -> dict[str, Any]:
    """What the card's commit observed: the same charge, of ``value`` USD."""
    change = {**PAY_PREVIEW["changes"][0], "amount": {"value": value, "currency": "USD"}}
    return {"summary": f"charge card corp-visa-4242 {value} USD", "changes": [change]}


def price_changed_trip(
    value: str = "1985.00", *, stated: str | None = "differs", flagged: bool = True
) -> dict[str, Any]:
    """COMMITTED; the card was charged ``value`` against a predicted 1900.00 (at most
    1950.00). The record states ``stated`` for it (None: no txn.effect event) and, if
    ``flagged``, names it in the outcome's ``effectDiffers``."""
    b = TxnBuilder()
    b.previews["pay"] = PAY_PREVIEW
    b.observations["pay"] = observed_charge(value)
    b.voted().decided("commit")
    for branch_id in COMMIT_ORDER:
        b.committed(branch_id)
        if branch_id == "pay" and stated is not None:
            b.effect("pay", stated)
    body: dict[str, Any] = {"effectDiffers": ["pay"]} if flagged else {}
    return b.outcome("committed", **body).sealed()


def rejected_trip() -> dict[str, Any]:
    """Every vote yes, finance rejects, everything released: ABORTED."""
    b = TxnBuilder().voted(approval="reject").decided("abort", "finance rejected the spend")
    return b.aborted(*BRANCHES).outcome("aborted").sealed()


def held_trip() -> dict[str, Any]:
    """Every vote yes, finance rejects; the card's participant refuses for certain to void
    its authorization, everything else is released: NEEDS-ATTENTION naming the card."""
    b = TxnBuilder().voted(approval="reject").decided("abort", "finance rejected the spend")
    b.aborted(*(branch for branch in BRANCHES if branch != "pay")).held("pay")
    return b.outcome("needs-attention", held=["pay"], problems=["pay: refused"]).sealed()


def unwound_trip() -> dict[str, Any]:
    """Commit decided; the card's target changed, so the calendar entry is undone and
    the holds and the card released: ABORTED."""
    b = TxnBuilder().voted().decided("commit").committed("calendar").unwinding("pay")
    b.compensated("calendar").aborted("pay", "flight", "hotel")
    return b.outcome("aborted").sealed()


def lapsed_trip(*, flight_lease: datetime | None = None) -> dict[str, Any]:
    """The card was charged in time, but its answer came after the flight's hold lapsed:
    the flight is released, recovery offered: NEEDS-RECOVERY. The flight's lease ends
    between the charge (event 9) and the late answer (event 10), unless told."""
    b = TxnBuilder().planned()
    lease = flight_lease or START + timedelta(seconds=9.5)
    b.prepared("flight", receipt=b.prepare_receipt("flight", leaseExpiresAt=format_time(lease)))
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    b.approved().decided("commit").committed("calendar", "pay")
    b.event(
        "txn.late-answer",
        branchId="pay",
        holds=[
            {"branchId": "flight", "leaseExpiresAt": format_time(lease), "live": False},
            {"branchId": "hotel", "leaseExpiresAt": b.now(), "live": True},
        ],
    )
    b.committed("hotel").aborted("flight")
    b.event("txn.recovery-offered", lapsed=["flight"], linkedTxnId=f"{b.txn_id}.recovery",
            payerPresent=True, plan={}, question=None, problem=None)  # fmt: skip
    return b.outcome("needs-recovery").sealed()


def hold_preview(branch_id: str, holder: str = "dana") -> dict[str, Any]:
    """An exact preview of the hold ``branch_id``: it is ticketed for ``holder``."""
    return {
        "certainty": "exact",
        "summary": f"book {branch_id}: holder (none) → {holder}",
        "changes": [
            {
                "resource": branch_id,
                "kind": "book",
                "field": "holder",
                "before": None,
                "after": holder,
                "amount": None,
                "at": None,
            }
        ],
        "bound": None,
    }


def holds_first_trip(
    *,
    longer: Mapping[str, float] | None = None,
    misstated: Mapping[str, dict[str, Any]] | None = None,
    replaced_with: dict[str, Any] | None = None,
    policy: Mapping[str, str] | None = None,
    previewed: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Holds-first: every branch votes (the holds with their previews), the terms are
    stated (the holds' ends, decideBy well inside them, the previews; ``longer`` and
    ``misstated``: misstated, see :meth:`TxnBuilder.termed`), finance approves plan and
    terms: COMMITTED. ``replaced_with``: after the approval, the flight's hold is placed
    again (same lease) with this preview, and committed so. ``policy``: the plan's
    preview minimum per tier; ``previewed``: previews of other steps, as signed."""
    plan = trip_plan(mode="holds-first")
    if policy is not None:
        plan["previews"] = {"minimum": dict(policy)}
    b = TxnBuilder(plan).planned()
    b.previews.update({bid: hold_preview(bid) for bid in ("flight", "hotel")})
    b.previews.update(previewed or {})
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    first = next(
        e["body"]["receipt"]
        for e in b.writer.events()
        if e["type"] == "txn.prepared" and e["body"]["branchId"] == "flight"
    )
    terms_digest = b.termed(longer=longer, misstated=misstated)
    b.approved(approval=b.approval(terms_digest=terms_digest))
    if replaced_with is not None:
        b.replaced(
            "flight",
            preview=replaced_with,
            leaseExpiresAt=first["leaseExpiresAt"],
            holdHorizon=first["holdHorizon"],
        )
    b.decided("commit")
    for branch_id in COMMIT_ORDER:
        preview = replaced_with if branch_id == "flight" and replaced_with else None
        preview = preview or b.previews.get(branch_id)
        if preview is not None:  # the hold did as its last vote previewed
            b.observations[branch_id] = {
                "summary": preview["summary"],
                "changes": preview["changes"],
            }
        b.committed(branch_id)
        if preview is not None:
            b.effect(branch_id, "as-previewed", preview["certainty"])
    return b.outcome("committed").sealed()


#: A demanding preview policy: exact holds, the card's charge bounded.
PREVIEW_POLICY: dict[str, str] = {"hold": "exact", "final": "bounded"}


def approval_first_trip(
    *,
    mode: str = "approval-first",
    policy: Mapping[str, str] | None = None,
    group_policy: Mapping[str, str] | None = None,
    prepared_with: Mapping[str, dict[str, Any]] | None = None,
    stated: bool = True,
) -> dict[str, Any]:
    """Approval-first with previews, as the coordinator writes it [COORD-PREVIEW]: every
    branch quoted with its preview (the holds exact, the card :data:`PAY_PREVIEW`, the
    calendar none), the terms stated (no holds, decideBy, the quotes' previews),
    finance approves plan and terms, every branch prepared with the preview it was
    quoted with, committed as previewed: COMMITTED.

    ``mode``: the plan's (``auto`` needs a demanding policy, and is approval-first on
    basis ``previews``); ``policy`` and ``group_policy``: the plan's and finance's
    preview minimum per tier. ``prepared_with``: previews the prepares sign instead of
    their quotes'. ``stated=False``: no ``txn.terms``, and the approval carries no
    ``termsDigest``."""
    plan = trip_plan(mode=mode)
    if policy is not None:
        plan["previews"] = {"minimum": dict(policy)}
    if group_policy is not None:
        plan["approvals"][0]["previews"] = {"minimum": dict(group_policy)}
    b = TxnBuilder(parse_plan(plan).to_wire()).planned(mode=False)
    b.previews.update({bid: hold_preview(bid) for bid in ("flight", "hotel")}, pay=PAY_PREVIEW)
    quotes = [
        b.quote(bid, preview=b.previews[bid]) if bid in b.previews else b.quote(bid)
        for bid in BRANCHES
    ]
    b.moded(
        chosen="approval-first",
        estimates=[],
        quotes=quotes,
        worstSeconds=None,
        shortestHoldSeconds=None,
        basis="previews" if mode == "auto" else None,
    )
    terms_digest = None
    if stated:
        terms = {
            "kind": "hold-terms",
            "planDigest": b.plan_digest,
            "holds": [],
            "approveBy": b.plan["deadlines"]["decideBy"],
            "previews": {q["branchId"]: q["preview"] for q in quotes if "preview" in q},
        }
        terms_digest = digest(terms)
        b.event("txn.terms", terms=terms, termsDigest=terms_digest)
    b.approved(approval=b.approval(terms_digest=terms_digest))
    b.previews.update(prepared_with or {})
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.decided("commit")
    for branch_id in COMMIT_ORDER:
        preview = b.previews.get(branch_id)
        if preview is not None:  # the step did as its prepare previewed
            b.observations[branch_id] = {
                "summary": preview["summary"],
                "changes": preview["changes"],
            }
        b.committed(branch_id)
        if preview is not None:
            b.effect(branch_id, "as-previewed", preview["certainty"])
    return b.outcome("committed").sealed()


def sold_out_trip() -> dict[str, Any]:
    """The hotel votes no before the calendar is asked; the calendar's abort comes
    before any prepare, so its receipt names no plan (planDigest null): ABORTED."""
    b = TxnBuilder().planned().prepared("flight").prepared("hotel", "no")
    b.decided("abort", "hotel voted no").aborted("flight", "hotel")
    for branch_id in ("calendar", "pay"):
        receipt = b.outcome_receipt(branch_id, "abort", planDigest=None)
        b.phase2("txn.aborted", branch_id, receipt)
    return b.outcome("aborted").sealed()


def failures(record: dict[str, Any], ring: Keyring | None = None) -> dict[str, list[Finding]]:
    """The failing (or absent) findings by rule, verified with ``ring`` (default
    :func:`keyring`); the chain rules must all pass."""
    report = verify_record(record, ring or keyring())
    out: dict[str, list[Finding]] = {}
    for finding in report.findings:
        if finding.result is not Result.PASS:
            out.setdefault(finding.rule, []).append(finding)
    assert not set(out) & set(CHAIN_RULES), f"the chain itself is broken: {out}"
    assert report.ok is (not out)
    return out


def only(rule: str, record: dict[str, Any], ring: Keyring | None = None) -> list[Finding]:
    """Assert ``record`` fails ``rule`` and nothing else; return its findings."""
    found = failures(record, ring)
    assert set(found) == {rule}, {r: [f.detail for f in fs] for r, fs in found.items()}
    assert all(f.result is Result.FAIL for f in found[rule])
    return found[rule]


def _assertion(vote: Mapping[str, Any], terms: Mapping[str, Any]) -> dict[str, Any]:
    """The passkey member of ``vote`` by its voter's software passkey, over a nonce of
    the ask (ECDSA: a new signature every time)."""
    human = str(vote["human"])
    nonce = b64url_encode(hashlib.sha256(f"{vote['askId']} {human}".encode()).digest()[:16])
    payload = {k: vote[k] for k in ("askId", "txnId", "planDigest", "groupId", "human")}
    payload.update(terms)
    made = sign_passkey_vote(
        authenticator(human.rsplit("/", 1)[1]),
        payload,
        vote["decision"],
        nonce,
        parse_time(str(vote["time"])),
    )
    member: dict[str, Any] = made["passkey"]
    return member
