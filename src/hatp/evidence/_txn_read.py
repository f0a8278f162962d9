"""What the transaction rules read: a record's events, its plan, and the signed objects in them.

The coordinator signs every event, so an event body is the coordinator's
word; the signed objects it carries (receipts, pending answers, approvals,
and the quotes and chain estimates a ``txn.mode`` event rests on) are the
other parties' word, and what the rules of :mod:`hatp.evidence._verify_txn`
and :mod:`hatp.evidence._verify_holds` hold the record to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hatp.clock import parse_time
from hatp.errors import InvalidJson, PlanInvalid, VersionUnsupported
from hatp.evidence._digest import digest
from hatp.evidence._keys import Keyring
from hatp.evidence._tally import Place, Signatures
from hatp.model import (
    Approval,
    ChainEstimate,
    Decision,
    OutcomeReceipt,
    PendingVote,
    Plan,
    PrepareReceipt,
    Quote,
    RenewReceipt,
    Tier,
    TxnEvent,
    TxnState,
    WireModel,
    parse_plan,
)


@dataclass(frozen=True, slots=True)
class Embedded:
    """Where an event body carries a signed object, and what that object must be."""

    member: str
    model: type[WireModel]
    #: Its allowed ``kind``s. An abort after a compensate returns the compensate receipt.
    kinds: tuple[str, ...]
    #: ``txn.prepared``, ``txn.replaced`` and ``txn.approval`` may carry null and a
    #: ``problem`` instead, or an object with a ``problem``: what was presented, kept
    #: as evidence, counted as no.
    optional: bool
    #: What part of the plan it is about: ``branchId`` (signed by the branch's
    #: participant) or ``groupId`` (signed by the gateway it names).
    key: str = "branchId"
    #: The lowest ``attempt`` it may carry: a hold placed again is attempt 2 or later.
    min_attempt: int = 1


EMBEDDED: dict[str, Embedded] = {
    TxnEvent.PREPARED: Embedded("receipt", PrepareReceipt, ("prepare",), optional=True),
    TxnEvent.REPLACED: Embedded(
        "receipt", PrepareReceipt, ("prepare",), optional=True, min_attempt=2
    ),
    # A renewal is held to the prepare receipt's rules: its branch's participant, this plan.
    TxnEvent.RENEWED: Embedded("receipt", RenewReceipt, ("renew",), optional=False),
    TxnEvent.PENDING: Embedded("pending", PendingVote, ("pending",), optional=False, key="groupId"),
    TxnEvent.APPROVAL: Embedded("approval", Approval, ("approval",), optional=True, key="groupId"),
    TxnEvent.COMMITTED: Embedded("receipt", OutcomeReceipt, ("commit",), optional=False),
    TxnEvent.COMPENSATED: Embedded("receipt", OutcomeReceipt, ("compensate",), optional=False),
    TxnEvent.ABORTED: Embedded("receipt", OutcomeReceipt, ("abort", "compensate"), optional=False),
}

#: The lists of signed objects a ``txn.mode`` body carries; each names its own group or branch.
MODE_LISTS: dict[str, Embedded] = {
    "estimates": Embedded(
        "estimates", ChainEstimate, ("chain-estimate",), optional=False, key="groupId"
    ),
    "quotes": Embedded("quotes", Quote, ("quote",), optional=False),
}


@dataclass(frozen=True, slots=True)
class Signed:
    """One signed object an event carries and the record counts, and where it is."""

    #: Where in the event, e.g. ``body.receipt`` or ``body.quotes[1]``.
    where: str
    #: How details name it, e.g. ``a receipt`` or ``quotes[1]``.
    label: str
    spec: Embedded
    doc: Any
    #: The branch or approval group the event files it under; ``None`` for the lists
    #: of ``txn.mode``, whose objects name their own.
    filed_under: Any


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the record that is an object with a type; ``position`` is its seq."""

    position: int
    type: str
    body: Mapping[str, Any]
    #: The coordinator-signed time of the event (``None`` when unreadable: REC-SHAPE says).
    time: datetime | None = None

    @property
    def name(self) -> str:
        return f"event {self.position} ({self.type})"

    @property
    def branch(self) -> str | None:
        """The ``branchId`` the body names; one that is not a string is kept as text no
        branch id can be, so that it names no branch of the plan and stays hashable."""
        return _key_text(self.body.get("branchId"))

    def get(self, member: str) -> Any:
        return self.body.get(member)

    def place(self, path: str) -> Place:
        """Where the signed object at ``path`` of this event sits, checked at its time."""
        return Place(self.position, path, self.time)

    @property
    def refused(self) -> bool:
        """Whether the coordinator refused what this vote or approval event carries.

        Its object (a forged or foreign receipt, say) is kept as evidence of
        what was presented, is not held to the signer and digest rules, and
        counts as a no.
        """
        spec = EMBEDDED.get(self.type)
        return spec is not None and spec.optional and self.body.get("problem") is not None

    def embedded(self) -> dict[str, Any] | None:
        """The receipt or approval the body carries and the coordinator counted, if any."""
        spec = EMBEDDED.get(self.type)
        found = self.body.get(spec.member) if spec and not self.refused else None
        return found if isinstance(found, dict) else None

    def signed(self) -> list[Signed]:
        """Every signed object the body carries that the record counts, read or not."""
        spec = EMBEDDED.get(self.type)
        if spec is not None:
            found = self.body.get(spec.member)
            if self.refused or (spec.optional and found is None):
                return []
            label = f"a {spec.member}"
            return [Signed(f"body.{spec.member}", label, spec, found, self.body.get(spec.key))]
        if self.type != TxnEvent.MODE:
            return []
        out: list[Signed] = []
        for member, listed in MODE_LISTS.items():
            items = self.body.get(member)
            for index, doc in enumerate(items if isinstance(items, list) else []):
                label = f"{member}[{index}]"
                out.append(Signed(f"body.{label}", label, listed, doc, None))
        return out


@dataclass(frozen=True)
class Txn:
    """What every rule reads: the events, the plan, and the keyring."""

    record_id: str
    events: tuple[Event, ...]
    keyring: Keyring
    plan: Plan | None
    #: What ``txn.planned`` says the digest is; what the rules hold everything to.
    plan_digest: str | None
    computed_digest: str | None
    plan_problem: str | None
    #: Every signature the rules check, noted for the report ([VER-PERIOD]).
    signatures: Signatures = field(default_factory=Signatures)

    def of(self, *types: str) -> list[Event]:
        return [e for e in self.events if e.type in types]

    def tier(self, branch_id: Any) -> Tier | None:
        if self.plan is None:
            return None
        return next((b.tier for b in self.plan.branches if b.branch_id == branch_id), None)

    def commit_point(self) -> tuple[Event, int] | None:
        """Where the record commits, and the position votes must come before.

        The commit decision; with no commit decision, a ``committed``
        outcome (its votes are those before it). ``None`` when the record
        neither decides nor concludes commit.
        """
        decided = next(iter(self.of(TxnEvent.DECIDED)), None)
        outcome = next(iter(self.of(TxnEvent.OUTCOME)), None)
        if decided is not None and decided.get("decision") == Decision.COMMIT:
            return decided, decided.position
        if outcome is not None and outcome.get("state") == TxnState.COMMITTED:
            return outcome, decided.position if decided is not None else outcome.position
        return None


def _key_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return f"<not an id: {value!r:.60}>"


def wire_time(value: Any) -> datetime | None:
    """A wire time read, or ``None`` when ``value`` is not one."""
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def is_transaction(events: Sequence[Any]) -> bool:
    """Return whether a record is a transaction's: it has a ``txn.*`` event.

    Any ``txn.*`` event counts, not only a first ``txn.planned``, so that a
    record whose plan event was replaced is checked, and fails [TXN-PLAN].
    """
    return any(
        isinstance(e, dict) and isinstance(e.get("type"), str) and e["type"].startswith("txn.")
        for e in events
    )


def read_txn(
    record_id: str,
    events: Sequence[Any],
    keyring: Keyring,
    signatures: Signatures | None = None,
) -> Txn:
    """Read a transaction's record for the rules, which note every signature they check
    in ``signatures`` (a new collection if none); never raises."""
    read: list[Event] = []
    for position, event in enumerate(events):
        # Anything else fails REC-SHAPE; the transaction rules read what is left.
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            body = event.get("body")
            body = body if isinstance(body, dict) else {}
            read.append(Event(position, event["type"], body, wire_time(event.get("time"))))
    noted = Signatures() if signatures is None else signatures
    return _with_plan(record_id, tuple(read), keyring, noted)


def _with_plan(
    record_id: str, read: tuple[Event, ...], keyring: Keyring, signatures: Signatures
) -> Txn:
    first = read[0] if read and read[0].position == 0 else None
    if first is None or first.type != TxnEvent.PLANNED:
        kind = repr(first.type) if first else "not an event"
        problem = f"event 0 is {kind}; a transaction's record starts with txn.planned"
        return Txn(record_id, read, keyring, None, None, None, problem, signatures)
    try:
        plan = parse_plan(first.get("plan"))
        computed = digest(plan.to_wire())
    except (PlanInvalid, VersionUnsupported, InvalidJson) as exc:
        reason = exc.data.get("reason", exc.code)
        problem = f"{first.name}: body.plan is not a valid plan: {reason}: {exc.message}"
        return Txn(record_id, read, keyring, None, None, None, problem, signatures)
    stated = first.get("planDigest")
    stated = stated if isinstance(stated, str) else computed
    return Txn(record_id, read, keyring, plan, stated, computed, None, signatures)
