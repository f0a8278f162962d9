"""One ask's state and what may happen to it: the gateway's rules, without any I/O.

An ask's state is a JSON document (kept whole in the :class:`~hatp.store.AskStore`)
with one entry per person in ``people``, in routing order: the ranked
candidates, the people passed over, then any delegates escalated to. Each
change is a method of :class:`AskDoc` that edits a copy of the document and
returns what the gateway must then do over its channels (:class:`Effects`).
The gateway stores the document first and speaks over channels after, so
nobody is ever asked or withdrawn from that the store does not know of. Over a
push channel (webhook, e-mail) the notices are outbox rows stored with the
document and sent at least once ([OUTBOX]); over an in-process channel a notice
lost in a crash is not sent again: that person misses their SLA and the
gateway escalates.

An ask is an approval group of a plan, a question, or one tool call; a call
ask follows an approval group's rules throughout and ends in a signed
CallApproval instead of an Approval.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from hatp.clock import format_time, parse_time
from hatp.directory import CardSource, Resolution, resolve
from hatp.evidence import SigningKey, copy_json, sign
from hatp.gateway._routing import excluded_human, resign_routing, resolve_question
from hatp.model import Approval, CallApproval, HumanCard, HumanResult, RoutedHuman
from hatp.version import PROTOCOL_VERSION

#: A person's status in an ask's state, and the routing result it is reported as.
RESULTS: dict[str, HumanResult] = {
    "candidate": HumanResult.NOT_REACHED,  # eligible, never asked
    "excluded": HumanResult.EXCLUDED,
    "asked": HumanResult.ASKED,  # asked, no response yet
    "unreachable": HumanResult.ASKED,  # no channel the gateway serves
    "declined": HumanResult.ASKED,
    "escalated": HumanResult.ASKED,  # missed their SLA; asked someone else
    "withdrawn": HumanResult.ASKED,  # still asked when the ask closed
    "decided": HumanResult.DECIDED,
}
_MS = timedelta(milliseconds=1)
#: How many random bytes a passkey nonce has.
PASSKEY_NONCE_BYTES = 16


@dataclass(frozen=True)
class Context:
    """What a change needs from the gateway: who signs, what it serves, the cards, the time."""

    gateway_id: str
    key: SigningKey
    served: frozenset[str]
    directory: CardSource
    now: datetime
    #: Whether the gateway holds contact details for (channel type, person); ``None``:
    #: every channel it serves reaches everyone (channels that need no address).
    reaches: Callable[[str, str], bool] | None = None
    #: The push channels (webhook, e-mail): people asked over them are reminded once,
    #: halfway through their SLA ([GW-REMIND]).
    push: frozenset[str] = frozenset()


@dataclass
class Effects:
    """What the gateway does over its channels once the change is stored."""

    deliver: list[str] = field(default_factory=list)  # people newly asked
    withdraw: list[tuple[str, str]] = field(default_factory=list)  # (person, channel type)
    #: (person, event) told something over their channel: "deadline", "outcome".
    inform: list[tuple[str, str]] = field(default_factory=list)


def person_entry(card: HumanCard, **extra: Any) -> dict[str, Any]:
    """A candidate's entry: what the gateway needs of their card to ask and escalate
    (``passkey: true`` when the card holds one: they get a nonce when asked)."""
    entry = {
        "id": card.id,
        "status": "candidate",
        "channels": [c.value for c in card.channels],
        "sla": card.sla.decide_seconds,
        "delegates": list(card.delegates),
        **extra,
    }
    if card.has_passkey:
        entry["passkey"] = True
    return entry


class AskDoc:
    """A working copy of one ask's state document, and the rules that change it.

    ``owned``: the caller has just built ``doc`` and gives it up (nothing else holds
    any part of it), so it is worked on as it is; otherwise on a copy, which leaves a
    stored row as it was read (and lets a change be seen by comparing the two).
    """

    def __init__(self, doc: dict[str, Any], ctx: Context, *, owned: bool = False) -> None:
        self.doc = doc if owned else copy_json(doc)
        self.ctx = ctx
        self.effects = Effects()

    # -- reading ---------------------------------------------------------

    @property
    def is_question(self) -> bool:
        return bool(self.doc["kind"] == "question")

    @property
    def is_call(self) -> bool:
        return bool(self.doc["kind"] == "call")

    @property
    def decide_by(self) -> datetime:
        return parse_time(self.doc["decideBy"])

    @property
    def people(self) -> list[dict[str, Any]]:
        return list(self.doc["people"])

    def person(self, human: str) -> dict[str, Any] | None:
        return next((p for p in self.doc["people"] if p["id"] == human), None)

    def approvers(self) -> list[str]:
        """Who approved, in vote order, each once ([GW-QUORUM]: distinct people)."""
        seen: list[str] = []
        for vote in self.doc["votes"]:
            if vote["decision"] == "approve" and vote["human"] not in seen:
                seen.append(vote["human"])
        return seen

    def next_due(self) -> datetime:
        """The earliest SLA (or reminder) of anyone still asked, or just after the deadline."""
        moments = []
        for entry in self.doc["people"]:
            if _waiting(entry):
                moments.append(parse_time(entry["respondBy"]))
                remind = self._remind_at(entry)
                if remind is not None:
                    moments.append(remind)
        return min([*moments, self.decide_by + _MS])

    def _remind_at(self, entry: dict[str, Any]) -> datetime | None:
        """[GW-REMIND] when someone asked over a push channel is reminded: halfway through
        their SLA, once (``None``: not over a push channel, or reminded already)."""
        if entry.get("channel") not in self.ctx.push or "remindedAt" in entry:
            return None
        asked, due = parse_time(entry["askedAt"]), parse_time(entry["respondBy"])
        return asked + (due - asked) / 2

    # -- asking ----------------------------------------------------------

    def fill(self) -> list[str]:
        """Ask the next candidates until ``needed`` people are asked or approved
        ([GW-QUORUM]); return whom it asked. Someone with no channel the gateway
        serves is passed over ([GW-CHANNEL])."""
        asked: list[str] = []
        while self._outstanding() < self.doc["needed"]:
            nxt = next((p for p in self.doc["people"] if p["status"] == "candidate"), None)
            if nxt is None:
                break  # [GW-FEW-LATER] wait for the deadline
            if self._ask(nxt):
                asked.append(nxt["id"])
        return asked

    def _channel_for(self, entry: dict[str, Any]) -> str | None:
        """[GW-CHANNEL] the first channel on the person's card, in the card's order, that
        the gateway serves, holds their contact details for, and has not failed them."""
        failed = entry.get("failedChannels", ())
        reaches = self.ctx.reaches
        channels: list[str] = entry["channels"]
        return next(
            (
                channel
                for channel in channels
                if channel in self.ctx.served
                and channel not in failed
                and (reaches is None or reaches(channel, entry["id"]))
            ),
            None,
        )

    def channel_failed(self, human: str, channel: str, reason: str) -> bool:
        """[GW-CHANNEL-NEXT] ``channel`` could not reach ``human``: ask them over their next
        channel (their SLA starting again), or, with none left, count them unreachable and
        ask the next candidate. Only for someone still asked over that channel; returns
        whether anything changed."""
        entry = self.person(human)
        if entry is None or not _waiting(entry) or entry.get("channel") != channel:
            return False
        entry.setdefault("failedChannels", []).append(channel)
        if self._ask(entry):
            entry["detail"] = f"{channel} failed ({reason[:200]}); asked over {entry['channel']}"
            return True
        entry["detail"] = f"{entry['detail']}; last: {channel}: {reason[:200]}"
        self.fill()
        return True

    def _outstanding(self) -> int:
        waiting = sum(1 for p in self.doc["people"] if _waiting(p))
        return waiting + len(self.approvers())

    def _ask(self, entry: dict[str, Any]) -> bool:
        channel = self._channel_for(entry)
        if channel is None:
            failed = entry.get("failedChannels")
            detail = (
                f"every channel failed ({', '.join(failed)})"
                if failed
                else "no channel the gateway serves"
            )
            entry.update(status="unreachable", detail=detail)
            return False
        now = self.ctx.now
        entry.update(
            status="asked",
            channel=channel,
            askedAt=format_time(now),
            respondBy=format_time(now + timedelta(seconds=entry["sla"])),
        )
        entry.pop("remindedAt", None)  # asked anew (another channel): reminded anew
        if entry.get("passkey") and self.doc["kind"] == "approval" and "nonce" not in entry:
            # [GW-PASSKEY] what this person's passkey signs over, once; stored before
            # the notice that carries it is sent.
            entry["nonce"] = secrets.token_urlsafe(PASSKEY_NONCE_BYTES)
        self.effects.deliver.append(entry["id"])
        return True

    # -- people's responses ----------------------------------------------

    def record_vote(self, vote: dict[str, Any], card_doc: dict[str, Any] | None) -> None:
        """Record a checked vote, then decide if it decides the group."""
        entry = self.person(vote["human"])
        if entry is not None:
            entry.update(status="decided", decision=vote["decision"])
            entry.pop("detail", None)
        self.doc["votes"].append(vote)
        if card_doc is not None:
            self.doc["cards"][vote["human"]] = card_doc
        if vote["decision"] == "reject":  # [GW-REJECT] fail closed
            self.decide("reject", f"{vote['human']} rejected")
        elif len(approvers := self.approvers()) >= self.doc["needed"]:
            self.decide(
                "approve",
                f"{len(approvers)} of {self.doc['needed']} needed approved: {', '.join(approvers)}",
            )

    def decline(self, human: str) -> None:
        """Pass the ask from ``human`` to the next eligible person ([GW-DECLINE])."""
        entry = self.person(human)
        if entry is None:
            return
        entry.update(status="declined", detail="declined")
        self.doc.setdefault("declined", []).append(human)
        self.effects.withdraw.append((human, entry["channel"]))
        self.fill()

    # -- time ------------------------------------------------------------

    def tick(self) -> None:
        """Escalate everyone past their SLA, remind those halfway through it over a push
        channel ([GW-REMIND]), and close the ask at its deadline."""
        if self.ctx.now > self.decide_by:
            self.expire()
            return
        for entry in self.people:
            if not _waiting(entry):
                continue
            if parse_time(entry["respondBy"]) <= self.ctx.now:
                self._escalate(entry)
                continue
            remind = self._remind_at(entry)
            if remind is not None and remind <= self.ctx.now:
                entry["remindedAt"] = format_time(self.ctx.now)
                self.effects.inform.append((entry["id"], "reminder"))

    def _escalate(self, entry: dict[str, Any]) -> None:
        """[GW-ESCALATE] ask the eligible delegates of someone who missed their SLA,
        else the next candidate; the ask is withdrawn from them."""
        entry["status"] = "escalated"
        self.effects.withdraw.append((entry["id"], entry["channel"]))
        asked = [d for d in entry["delegates"] if self._ask_delegate(d, entry["id"])]
        to = "delegates" if asked else "the next candidate"
        asked = asked or self.fill()
        missed = f"missed SLA {entry['sla']} s"
        entry["detail"] = (
            f"{missed}; escalated to {to} {', '.join(asked)}"
            if asked
            else f"{missed}; nobody left to escalate to"
        )

    def _ask_delegate(self, delegate: str, of: str) -> bool:
        known = self.person(delegate)
        if known is not None:
            if known["status"] != "candidate":
                return False
            known["delegateOf"] = of
            return self._ask(known)
        resolution = self._resolve_delegate(delegate)
        if resolution.excluded:
            human = excluded_human(resolution.excluded[0], f"delegate of {of}: ")
            self.doc["people"].append(
                {"id": delegate, "status": "excluded", "rule": human.rule, "detail": human.detail}
            )
            return False
        if not resolution.candidates:
            return False  # no card in the directory: nobody to ask
        entry = person_entry(resolution.candidates[0].card, delegateOf=of)
        self.doc["people"].append(entry)
        return self._ask(entry)

    def _resolve_delegate(self, delegate: str) -> Resolution:
        if self.is_question:
            return resolve_question(self.ctx.directory, delegate)
        remaining = (self.decide_by - self.ctx.now).total_seconds()
        return resolve(
            self.ctx.directory,
            delegate,
            self.doc["action"],
            amounts={c: Decimal(v) for c, v in self.doc["amounts"].items()},
            on_behalf_of=self.doc["onBehalfOf"],
            initiator_principal=self.doc["initiatorPrincipal"],
            deadline_seconds=remaining,
            passkey_required=self.doc["passkey"],
        )

    def expire(self) -> None:
        """[GW-DEADLINE] withdraw every ask and say no (approvals) or nothing (questions)."""
        have = len(self.approvers())
        reason = (
            f"deadline {self.doc['decideBy']} passed with {have} of {self.doc['needed']} "
            "needed approvals; the gateway withdrew its asks"
        )
        self.close_withdrawn(reason, "withdrawn at deadline")

    def close_withdrawn(self, reason: str, detail: str) -> None:
        """Withdraw the ask from everyone still asked; approvals and calls get a withdrawn
        reject."""
        self._withdraw_waiting(detail)
        self.doc["state"] = "withdrawn"
        self.doc["closedReason"] = reason
        if not self.is_question:
            self.doc["result"] = self._approval("reject", reason, withdrawn=True)

    # -- deciding --------------------------------------------------------

    def decide(self, decision: str, reason: str) -> None:
        """Close the group with ``decision``; sign the final routing record and the
        Approval (the CallApproval of a call ask)."""
        self._withdraw_waiting("withdrawn: the group was decided")
        self.doc["state"] = "decided"
        self.doc["result"] = self._approval(decision, reason, withdrawn=False)

    def answered(self, answer: dict[str, Any], human: str) -> None:
        """Close a question with the signed answer of ``human``."""
        entry = self.person(human)
        if entry is not None:
            entry.update(status="decided")
        self._withdraw_waiting("withdrawn: the question was answered")
        self.doc["state"] = "decided"
        self.doc["result"] = answer

    def _withdraw_waiting(self, detail: str) -> None:
        """Withdraw the ask from everyone still asked; tell those who responded how it
        ended (their ``outcome`` notice)."""
        for entry in self.doc["people"]:
            if _waiting(entry):
                entry.update(status="withdrawn", detail=detail)
                self.effects.withdraw.append((entry["id"], entry["channel"]))
            elif entry["status"] == "decided" and entry.get("channel"):
                self.effects.inform.append((entry["id"], "outcome"))

    def _approval(self, decision: str, reason: str, *, withdrawn: bool) -> dict[str, Any]:
        """The signed outcome: an Approval of a plan's group, or a CallApproval of one call."""
        doc, ctx = self.doc, self.ctx
        routing = resign_routing(doc["routing"], self.routed(), ctx.key, ctx.now)
        voters = list(dict.fromkeys(v["human"] for v in doc["votes"]))
        body = {
            "hatpVersion": PROTOCOL_VERSION,
            "askId": doc["askId"],
            "decision": decision,
            "approvers": self.approvers() if decision == "approve" else [],
            "reason": reason[:1000],
            "withdrawn": withdrawn,
            "votes": doc["votes"],
            "cards": [doc["cards"][h] for h in voters if h in doc["cards"]],
            "routing": routing,
            "gateway": ctx.gateway_id,
            "decidedAt": format_time(ctx.now),
        }
        model: type[Approval | CallApproval]
        if self.is_call:  # [GW-CALL-APPROVAL]
            valid = timedelta(seconds=doc["terms"]["validSeconds"])
            body.update(
                kind="call-approval",
                approvalId=doc["approvalId"],
                terms=doc["terms"],
                expiresAt=format_time(ctx.now + valid),
            )
            model = CallApproval
        else:
            body.update(
                kind="approval",
                txnId=doc["txnId"],
                planDigest=doc["planDigest"],
                groupId=doc["groupId"],
            )
            if doc.get("termsDigest") is not None:  # [GW-TERMS] absent without terms
                body["termsDigest"] = doc["termsDigest"]
            model = Approval
        signed = sign(body, ctx.key)
        model.model_validate(signed)
        return signed

    def routed(self) -> list[RoutedHuman]:
        """What became of each person, as the final routing record says ([GW-ROUTING-FINAL])."""
        humans = []
        for entry in self.doc["people"]:
            result = RESULTS[entry["status"]]
            if result is HumanResult.DECIDED:
                detail = entry.get("decision")
            else:
                detail = entry.get("detail")
                if entry.get("delegateOf") and result is not HumanResult.EXCLUDED:
                    mark = f"delegate of {entry['delegateOf']}"
                    detail = f"{mark}; {detail}" if detail else mark
            humans.append(
                RoutedHuman(id=entry["id"], result=result, rule=entry.get("rule"), detail=detail)
            )
        return humans


def _waiting(entry: dict[str, Any]) -> bool:
    return bool(entry["status"] == "asked")
