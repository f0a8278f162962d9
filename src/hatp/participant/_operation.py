"""What a tool server writes: one :class:`Operation` per operation it offers.

The SDK calls the operation inside the participant's store transaction and
hands it that transaction's connection in :class:`Work`, so the operation's
own ledger writes and the branch state commit together or not at all
[PART-DURABLE]. The operation never signs, never checks fences and never
keeps branch state: the SDK does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from hatp.errors import InvalidJson
from hatp.evidence import canonicalize, json_number
from hatp.model import (
    Amount,
    Branch,
    EffectPreview,
    ObservedEffect,
    Plan,
    Preconditions,
    Tier,
    UndoOffer,
)

__all__ = [
    "Committed",
    "NotUndoable",
    "Operation",
    "Prepared",
    "Quoted",
    "Refuse",
    "Undo",
    "Undoing",
    "Work",
]


@dataclass(frozen=True)
class Work:
    """One request as an operation sees it.

    ``conn`` is the participant's open store transaction: write the
    operation's own tables through it, never through another connection.
    ``prepared`` is what :meth:`Operation.prepare` returned (``None`` while
    preparing).
    """

    conn: Connection
    participant_id: str
    txn_id: str
    branch: Branch
    plan: Plan
    plan_digest: str
    now: datetime
    prepared: Prepared | None
    #: An undo branch: the committed step it takes back (``None`` for any other branch).
    undoing: Undoing | None = None


@dataclass(frozen=True)
class Undoing:
    """The committed step an undo branch takes back, as this participant committed it.

    ``original`` is that step's work (its plan, branch and what its prepare
    returned, on the undo's connection and clock); ``effect`` what its commit
    receipt says it did; ``offer`` the undo offer that receipt signed;
    ``undo_token`` the token a compensate-tier commit issued.
    """

    original: Work
    offer: UndoOffer
    effect: dict[str, Any]
    undo_token: str | None


@dataclass(frozen=True)
class Undo:
    """How a commit of an operation can be taken back, as :meth:`Operation.undo_terms`
    declares it; signed into the commit receipt's ``undo`` [PART-UNDO-OFFER].

    ``fee``: what the participant keeps for undoing (a cancellation fee).
    ``refund``: the money the undo returns, before any fee (a refund or void).
    ``undo_seconds``: how long from the commit the offer stands (``None``: no end).
    ``args``: JSON the undo branch is sent.

    Raises:
        ValueError: ``undo_seconds`` is not positive, or ``args`` is not JSON.
    """

    fee: Amount | None = None
    refund: Amount | None = None
    undo_seconds: float | None = None
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.undo_seconds is not None and not self.undo_seconds > 0:
            raise ValueError(f"undo_seconds must be positive, not {self.undo_seconds}")
        _require_json(self.args, "Undo.args")


@dataclass(frozen=True)
class NotUndoable:
    """A commit that cannot be taken back, and why (signed into its receipt)."""

    reason: str


@dataclass(frozen=True)
class Prepared:
    """A yes vote from :meth:`Operation.prepare`.

    ``cost``: what the participant will really charge (checked against the
    branch's amount [PART-COST]). ``preconditions``: what a dry run saw
    (checked again at commit [PART-PRECONDITION]). ``lease_seconds``: holds
    only, the lease asked for (capped at ``max_lease_seconds``).
    ``preview``: what commit will change, and how surely (build it with
    :func:`~hatp.participant.preview`); ``None`` is signed as certainty
    ``none``, never guessed [PART-PREVIEW].
    ``data``: operation-private JSON, handed back in ``Work.prepared``.

    Raises:
        ValueError: ``lease_seconds`` is not positive, or ``data`` is not JSON.
    """

    cost: Amount | None = None
    preconditions: Preconditions | None = None
    lease_seconds: float | None = None
    preview: EffectPreview | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.lease_seconds is not None and not self.lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, not {self.lease_seconds}")
        _require_json(self.data, "Prepared.data")


@dataclass(frozen=True)
class Committed:
    """What :meth:`Operation.commit` did.

    ``effect``: JSON for a person (in the commit receipt). ``observed``: what
    it changed, in the structure of the preview (build it with
    :func:`~hatp.participant.observed`), compared with the preview by the
    coordinator [TXN-EFFECT]. ``undo_token``: compensate tier only; ``None``
    lets the SDK make a random one [PART-UNDO].

    Raises:
        ValueError: ``effect`` is not JSON.
    """

    effect: dict[str, Any] = field(default_factory=dict)
    observed: ObservedEffect | None = None
    undo_token: str | None = None

    def __post_init__(self) -> None:
        _require_json(self.effect, "Committed.effect")


@dataclass(frozen=True)
class Quoted:
    """What :meth:`Operation.quote` says a prepare now would charge.

    ``cost``: the price (``None``: not said). ``valid_seconds``: how long the
    price holds from now (``None``: no expiry). ``preview``: what a prepare
    now and its commit would change (``None``: certainty ``none``). A cost
    above the branch's amount is quoted as it is: the prepare is what votes
    no [PART-COST].

    Raises:
        ValueError: ``valid_seconds`` is not positive.
    """

    cost: Amount | None = None
    valid_seconds: float | None = None
    preview: EffectPreview | None = None

    def __post_init__(self) -> None:
        if self.valid_seconds is not None and not self.valid_seconds > 0:
            raise ValueError(f"valid_seconds must be positive, not {self.valid_seconds}")


class Refuse(Exception):
    """Raised by :meth:`Operation.prepare` to vote no.

    ``reason`` is a short upper-case code (``SOLD_OUT``); the receipt's
    ``reason`` is ``"<reason>: <message>"``. Whatever the operation wrote
    before raising is rolled back.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class Operation(ABC):
    """One operation a participant offers, with the tier it can honestly guarantee.

    Subclasses set ``name`` and ``tier`` as class attributes. A hold also sets
    ``max_lease_seconds`` (longest lease granted) and ``max_hold_seconds``
    (the horizon, renewals included). ``inverse`` names the operation, offered by
    the same participant, that takes a commit of this one back (a cancellation, a
    refund): that operation then runs only in undo plans, with ``Work.undoing``
    set, and :meth:`undo_terms` says on what terms [PART-UNDO-OFFER].
    """

    name: str
    tier: Tier
    max_lease_seconds: float = 1200.0
    max_hold_seconds: float = 1800.0
    inverse: str | None = None

    @abstractmethod
    def prepare(self, work: Work) -> Prepared:
        """Place the hold (hold tier) or do the dry run (compensate, final).

        Returns:
            What was prepared: the yes vote.

        Raises:
            Refuse: to vote no.
        """

    @abstractmethod
    def commit(self, work: Work) -> Committed:
        """Do the effect (convert the hold). Runs once per branch.

        Raises:
            HatpError: the commit failed; nothing it wrote is kept.
        """

    @abstractmethod
    def abort(self, work: Work) -> None:
        """Release the hold or void the dry run. Called only after a yes prepare."""

    def compensate(self, work: Work, undo_token: str) -> None:
        """Undo a commit (compensate tier only). Called once, with the right token.

        Raises:
            NotImplementedError: the operation is not of the compensate tier.
        """
        raise NotImplementedError(f"operation {self.name!r} cannot compensate")

    def renew(self, work: Work) -> None:
        """Extend the hold at the provider, if it has a say (the default: it has none).

        Called inside the renewal's store transaction, before the new lease is
        saved; the SDK has already capped the lease at the horizon.

        Raises:
            Refuse: the provider declines (``AUTHENTICATION_REQUIRED`` when a
                card needs the payer present); the lease stands, nothing is saved.
        """
        return None

    def undo_terms(self, work: Work, committed: Committed) -> Undo | NotUndoable:
        """Say, at commit, how this commit can be taken back and at what cost.

        Runs in the commit's store transaction, after :meth:`commit`. The default:
        on no terms (no fee, no end) when the operation has an ``inverse`` or is of
        the compensate tier (undone with its token); otherwise not undoable.
        """
        if self.inverse is not None or self.tier is Tier.COMPENSATE:
            return Undo()
        if self.tier is Tier.FINAL:
            return NotUndoable(f"{self.name} is final and declares no refund or void")
        return NotUndoable(f"{self.name} declares no inverse operation")

    def preconditions(self, work: Work) -> Preconditions | None:
        """Re-read the targets at commit; ``None`` (the default) skips the re-read."""
        return None

    def quote(self, work: Work) -> Quoted | None:
        """Say what a prepare now would charge, and for how long; place nothing.

        Runs in a savepoint the SDK rolls back, so nothing it writes is kept
        [PART-QUOTE]. A quote never votes: raising :class:`Refuse` (or
        returning ``None``, the default) quotes no cost.
        """
        return None


def _require_json(value: dict[str, Any], what: str) -> None:
    # It ends up in a signed receipt or a stored row: refuse it now, by name,
    # rather than as a failed signature or a store error inside a transaction.
    try:
        canonicalize(value)
    except InvalidJson as exc:
        raise ValueError(f"{what} must be JSON: {exc.message}") from None


def prepared_to_json(prepared: Prepared) -> dict[str, Any]:
    """Return the stored form of ``prepared`` (the branch row's ``prepared``)."""
    return {
        "cost": None if prepared.cost is None else prepared.cost.to_wire(),
        "preconditions": None
        if prepared.preconditions is None
        else prepared.preconditions.to_wire(),
        "leaseSeconds": None
        if prepared.lease_seconds is None
        else json_number(prepared.lease_seconds),
        "preview": None if prepared.preview is None else prepared.preview.to_wire(),
        "data": prepared.data,
    }


def prepared_from_json(doc: dict[str, Any]) -> Prepared:
    """Rebuild a :class:`Prepared` from :func:`prepared_to_json`'s form."""
    cost, preconditions, preview = doc.get("cost"), doc.get("preconditions"), doc.get("preview")
    return Prepared(
        cost=None if cost is None else Amount.model_validate(cost),
        preconditions=None
        if preconditions is None
        else Preconditions.model_validate(preconditions),
        lease_seconds=doc.get("leaseSeconds"),
        preview=None if preview is None else EffectPreview.model_validate(preview),
        data=dict(doc.get("data") or {}),
    )
