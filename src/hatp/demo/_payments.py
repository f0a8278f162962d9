"""Payments: ``charge`` authorizes at prepare, captures at commit, voids at abort (tier final).

Each card has a version, bumped when the card itself changes (its limit,
say); authorizations only move its available credit. Prepare reports the
version it saw, and commit is refused (by the participant SDK) if the card
changed since.

The amount authorized is the amount captured, so a charge's preview is
``exact``; unless the bank adds a fee it sets only at capture
(:class:`CaptureFee`): then the preview is ``predicted``, bounded by the most
the bank says it may add, and the capture is what the bank really charged.

A capture can be refunded within 30 days (:data:`REFUND_SECONDS`): ``refund``,
the inverse of ``charge``, runs only in an undo plan (tier final). Its prepare
is a dry run that checks ``args.refund`` is in the charge's currency and at most
what it captured less what was already refunded; its commit pays that back to
the card. The undo plan refunds the capture less the fees the steps it paid for
keep, so the card ends charged exactly those fees.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    Column,
    Connection,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    and_,
    bindparam,
    func,
    insert,
    select,
    update,
)

from hatp.demo._ledger import (
    Seed,
    Service,
    kinds,
    ledger_table,
    log,
    money,
    offer_seconds,
    text_arg,
    undoing,
    write_line,
)
from hatp.errors import OutcomeConflict
from hatp.model import Amount, Certainty, Change, EffectPreview, Preconditions, Tier
from hatp.participant import (
    Committed,
    NotUndoable,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Undoing,
    Work,
    change,
    observed,
    preview,
    render,
)

PARTICIPANT = "mcp://payments.example"
#: The corporate card the trip is charged to, and a low-limit card that declines it.
CARD, LOW_LIMIT_CARD = "corp-4242", "corp-0005"
CARDS = {CARD: ("5000.00", "USD"), LOW_LIMIT_CARD: ("500.00", "USD")}
#: How long after capture a charge can still be refunded: 30 days.
REFUND_SECONDS = 30 * 24 * 3600.0

metadata = MetaData()
cards = Table(
    "payments_cards",
    metadata,
    Column("card_id", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("available", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
)
authorizations = Table(
    "payments_authorizations",
    metadata,
    Column("auth_id", String(64), primary_key=True),
    Column("txn_id", String(128), nullable=False, index=True),
    Column("branch_id", String(64), nullable=False),
    Column("card_id", String(64), nullable=False),
    Column("amount", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("payee", String(200), nullable=True),
    Column("status", String(16), nullable=False),  # authorized | captured | voided
)
refunds = Table(
    "payments_refunds",
    metadata,
    Column("refund_id", String(64), primary_key=True),
    Column("txn_id", String(128), nullable=False, index=True),  # the undo transaction
    Column("branch_id", String(64), nullable=False),
    Column("auth_id", String(64), nullable=False, index=True),  # the capture refunded
    Column("original_txn_id", String(128), nullable=False, index=True),
    Column("amount", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
)
ledger = ledger_table(metadata, "payments")

_log = logging.getLogger(__name__)


# Statements built once and run with parameters (SQLAlchemy's compiled cache
# serves every call). ``k_*`` parameters are the WHERE clause's; an UPDATE
# also sets the columns its other parameters name.
# Locked (PostgreSQL) so that concurrent authorizations cannot both spend the
# same available credit; SQLite's writes are serialized anyway.
_CARD = select(cards).where(cards.c.card_id == bindparam("card_id")).with_for_update()
_CARD_VERSION = (
    select(cards.c.version).where(cards.c.card_id == bindparam("card_id")).with_for_update()
)
_AVAILABLE = (
    select(cards.c.available).where(cards.c.card_id == bindparam("card_id")).with_for_update()
)
_SET_CARD = update(cards).where(cards.c.card_id == bindparam("k_card_id"))
_AUTHORIZE = insert(authorizations)
_OPEN = and_(
    authorizations.c.txn_id == bindparam("k_txn_id"),
    authorizations.c.branch_id == bindparam("k_branch_id"),
    authorizations.c.status == "authorized",
)
_OPEN_AUTH = select(authorizations).where(_OPEN)
_CAPTURE = (
    update(authorizations).where(_OPEN).values(status="captured").returning(*authorizations.c)
)
_VOID = update(authorizations).where(_OPEN).values(status="voided")
# Locked (PostgreSQL): a refund reads what the capture left to refund and pays it back
# in one transaction.
_CAPTURED = (
    select(authorizations).where(authorizations.c.auth_id == bindparam("auth_id")).with_for_update()
)
_REFUNDED = select(refunds.c.amount).where(refunds.c.auth_id == bindparam("auth_id"))
_REFUND = insert(refunds)
_SET_AUTH_AMOUNT = (
    update(authorizations)
    .where(authorizations.c.auth_id == bindparam("k_auth_id"))
    .values(amount=bindparam("amount"))
)


@dataclass(frozen=True)
class CaptureFee:
    """A fee the card's bank adds to every charge when it captures it, and says only then.

    ``up_to`` is the most the bank says it may add: a charge's preview is
    ``predicted``, bounded by its amount plus ``up_to``. ``added`` is what it
    adds at capture, in the charge's currency; above ``up_to``, the capture
    differs from its preview [TXN-EFFECT].

    Raises:
        ValueError: a fee that is negative or not a number.
    """

    up_to: Decimal
    added: Decimal

    def __post_init__(self) -> None:
        for name in ("up_to", "added"):
            value = getattr(self, name)
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ValueError(f"CaptureFee.{name} is a non-negative Decimal, not {value!r}")


class Charge(Operation):
    """Charge ``args.amount`` to ``args.card`` (optionally for ``args.payee``).

    ``capture_fee``: the bank adds a fee at capture (``None``: it adds none,
    and the amount authorized is the amount captured).
    """

    name = "charge"
    tier = Tier.FINAL
    inverse = "refund"

    def __init__(self, capture_fee: CaptureFee | None = None) -> None:
        self.capture_fee = capture_fee

    def prepare(self, work: Work) -> Prepared:
        card_id = text_arg(work, "card")
        try:
            amount = Amount.model_validate(work.branch.args.get("amount"))
        except ValidationError:
            raise Refuse(
                "BAD_ARGS", "charge needs amount {value: '730.00', currency: 'USD'}"
            ) from None
        card = work.conn.execute(_CARD, {"card_id": card_id}).one_or_none()
        if card is None:
            raise Refuse("UNKNOWN_CARD", f"no card {card_id!r} on file")
        if card.currency != amount.currency:
            raise Refuse("DECLINED", f"card {card_id} charges {card.currency}, not {amount}")
        available = Decimal(card.available)
        if amount.decimal > available:
            raise Refuse(
                "DECLINED", f"card {card_id} has {card.available} {card.currency} available"
            )
        auth_id = f"auth-{secrets.token_hex(8)}"
        payee = _payee(work)
        work.conn.execute(
            _AUTHORIZE,
            {
                "auth_id": auth_id,
                "txn_id": work.txn_id,
                "branch_id": work.branch.branch_id,
                "card_id": card_id,
                "amount": amount.value,
                "currency": amount.currency,
                "payee": payee,
                "status": "authorized",
            },
        )
        work.conn.execute(
            _SET_CARD, {"k_card_id": card_id, "available": money(available - amount.decimal)}
        )
        log(work, ledger, "authorized", f"{amount} on card {card_id} ({auth_id})")
        # The card row read (and locked) above holds the version the dry run saw.
        return Prepared(
            cost=amount,
            preconditions=_card_version(card_id, card.version),
            preview=self._preview(card_id, payee, amount),
            data={"authId": auth_id},
        )

    def quote(self, work: Work) -> Quoted:
        """The amount asked for, and it does not expire (nothing is authorized); a fee the
        bank adds at capture shows in the preview's bound, not in the cost."""
        try:
            amount = Amount.model_validate(work.branch.args.get("amount"))
        except ValidationError:
            return Quoted()
        card_id = work.branch.args.get("card")
        if not isinstance(card_id, str) or not card_id:
            return Quoted(cost=amount)
        return Quoted(cost=amount, preview=self._preview(card_id, _payee(work), amount))

    def _preview(self, card_id: str, payee: str | None, amount: Amount) -> EffectPreview:
        charge = _charge(card_id, payee, amount)
        if self.capture_fee is None:
            # Exact: the capture takes exactly the amount authorized at prepare.
            return preview(Certainty.EXACT, charge)
        bound = Amount(
            value=money(amount.decimal + self.capture_fee.up_to), currency=amount.currency
        )
        return preview(
            Certainty.PREDICTED,
            charge,
            summary=f"{render(charge)}, plus a fee the bank sets at capture "
            f"(at most {bound} in all)",
            bound=bound,
        )

    def preconditions(self, work: Work) -> Preconditions:
        card_id = text_arg(work, "card")
        found = work.conn.execute(_CARD_VERSION, {"card_id": card_id}).scalar_one_or_none()
        return _card_version(card_id, found)

    def commit(self, work: Work) -> Committed:
        auth = work.conn.execute(_CAPTURE, _open(work)).one_or_none()
        if auth is None:
            raise OutcomeConflict(
                f"cannot capture: no open authorization for {work.txn_id}/{work.branch.branch_id}",
                state=None,
                requested="commit",
            )
        captured = Amount(value=auth.amount, currency=auth.currency)
        detail = f"{captured} on card {auth.card_id} ({auth.auth_id})"
        if self.capture_fee is not None:
            captured = _add_fee(work, self.capture_fee, auth.auth_id, auth.card_id, captured)
            detail = f"{captured} on card {auth.card_id} ({auth.auth_id}, {auth.amount} authorized)"
        log(work, ledger, "captured", detail)
        return Committed(
            effect={
                "authId": auth.auth_id,
                "card": auth.card_id,
                "amount": str(captured),
                "payee": auth.payee,
            },
            observed=observed(_charge(auth.card_id, auth.payee, captured)),
        )

    def abort(self, work: Work) -> None:
        # Tolerant: no open authorization means nothing to void.
        auth = work.conn.execute(_OPEN_AUTH, _open(work)).one_or_none()
        if auth is None:
            return
        available = work.conn.execute(_AVAILABLE, {"card_id": auth.card_id}).scalar_one()
        restored = money(Decimal(available) + Decimal(auth.amount))
        work.conn.execute(_SET_CARD, {"k_card_id": auth.card_id, "available": restored})
        work.conn.execute(_VOID, _open(work))
        charged = f"{auth.amount} {auth.currency}"
        log(work, ledger, "voided", f"{charged} on card {auth.card_id} ({auth.auth_id})")

    def undo_terms(self, work: Work, committed: Committed) -> Undo:
        """A capture is refunded within :data:`REFUND_SECONDS`, up to all of it (fee
        included, if the bank added one); the undo plan takes off what the steps it
        paid for keep."""
        auth = work.conn.execute(_CAPTURED, {"auth_id": committed.effect["authId"]}).one()
        captured = Amount(value=auth.amount, currency=auth.currency)
        return Undo(refund=captured, undo_seconds=REFUND_SECONDS)


class Refund(Operation):
    """Refund ``args.refund`` of what a ``charge`` step captured (its inverse; undo plans
    only). Prepare is a dry run; commit pays the refund back to the card (tier final)."""

    name = "refund"
    tier = Tier.FINAL

    def prepare(self, work: Work) -> Prepared:
        auth, refund, refunded = _refundable(work, undoing(work))
        # Exact: commit pays back exactly this, unless the capture was refunded
        # since (the precondition below, checked again at commit).
        return Prepared(
            preconditions=_refunds_seen(auth.auth_id, refunded),
            preview=preview(Certainty.EXACT, _refunding(auth.card_id, auth.payee, refund)),
            data={"authId": auth.auth_id},
        )

    def quote(self, work: Work) -> Quoted:
        """Free, good while the charge's offer stands, and what a prepare now would preview."""
        step = undoing(work)
        auth, refund, _ = _refundable(work, step)
        return Quoted(
            valid_seconds=offer_seconds(step, work.now),
            preview=preview(Certainty.EXACT, _refunding(auth.card_id, auth.payee, refund)),
        )

    def preconditions(self, work: Work) -> Preconditions:
        auth = _capture(work, undoing(work))
        return _refunds_seen(auth.auth_id, _refunded(work.conn, auth.auth_id))

    def commit(self, work: Work) -> Committed:
        step = undoing(work)
        auth = work.conn.execute(_CAPTURED, {"auth_id": step.effect.get("authId")}).one_or_none()
        if auth is None or auth.status != "captured":
            raise OutcomeConflict(
                f"cannot refund: the capture {step.effect.get('authId')} of "
                f"{step.original.txn_id} is gone",
                state=None if auth is None else auth.status,
                requested="commit",
            )
        refund = _refund_arg(work, auth.currency)
        refund_id = f"refund-{secrets.token_hex(8)}"
        work.conn.execute(
            _REFUND,
            {
                "refund_id": refund_id,
                "txn_id": work.txn_id,
                "branch_id": work.branch.branch_id,
                "auth_id": auth.auth_id,
                "original_txn_id": step.original.txn_id,
                "amount": refund.value,
                "currency": refund.currency,
            },
        )
        available = work.conn.execute(_AVAILABLE, {"card_id": auth.card_id}).scalar_one()
        restored = money(Decimal(available) + refund.decimal)
        work.conn.execute(_SET_CARD, {"k_card_id": auth.card_id, "available": restored})
        kept = Amount(
            value=money(Decimal(auth.amount) - _refunded(work.conn, auth.auth_id)),
            currency=auth.currency,
        )
        detail = (
            f"{refund} to card {auth.card_id} ({auth.auth_id}, {refund_id}) of "
            f"{step.original.txn_id}: {auth.amount} {auth.currency} captured, {kept} kept"
        )
        log(work, ledger, "refunded", detail)
        return Committed(
            effect={
                "refundId": refund_id,
                "authId": auth.auth_id,
                "card": auth.card_id,
                "refund": str(refund),
                "kept": str(kept),
            },
            observed=observed(_refunding(auth.card_id, auth.payee, refund)),
        )

    def abort(self, work: Work) -> None:
        """Nothing to do: the dry run placed nothing."""

    def undo_terms(self, work: Work, committed: Committed) -> NotUndoable:
        return NotUndoable("a refund is not taken back: charge the card again")


def _refundable(work: Work, step: Undoing) -> tuple[Row[Any], Amount, Decimal]:
    """The step's capture, the refund asked for, and what was refunded of it before.

    Raises:
        Refuse: ``ORIGINAL_CHANGED`` (nothing captured to refund), ``BAD_ARGS``, or
            ``REFUND_ABOVE_CAPTURED`` (more than the capture less its refunds).
    """
    auth = _capture(work, step)
    refund = _refund_arg(work, auth.currency)
    refunded = _refunded(work.conn, auth.auth_id)
    left = Decimal(auth.amount) - refunded
    if refund.decimal > left:
        raise Refuse(
            "REFUND_ABOVE_CAPTURED",
            f"a refund of {refund} is more than the {money(left)} {auth.currency} left "
            f"of the {auth.amount} {auth.currency} captured ({auth.auth_id})",
        )
    return auth, refund, refunded


def _capture(work: Work, step: Undoing) -> Row[Any]:
    """The step's capture, locked; refuses ``ORIGINAL_CHANGED`` if it is not captured."""
    auth_id = step.effect.get("authId")
    auth = work.conn.execute(_CAPTURED, {"auth_id": auth_id}).one_or_none()
    if auth is None or auth.status != "captured" or auth.txn_id != step.original.txn_id:
        raise Refuse(
            "ORIGINAL_CHANGED",
            f"{step.original.txn_id}/{step.original.branch.branch_id} captured nothing "
            f"that is still captured here ({auth_id})",
        )
    return auth


def _refund_arg(work: Work, currency: str) -> Amount:
    try:
        refund = Amount.model_validate(work.branch.args.get("refund"))
    except ValidationError:
        raise Refuse("BAD_ARGS", "refund needs refund {value: '500.00', currency: 'USD'}") from None
    if refund.currency != currency:
        raise Refuse("BAD_ARGS", f"the capture is in {currency}; a refund of {refund} is not")
    return refund


def _refunded(conn: Connection, auth_id: str) -> Decimal:
    """What was refunded of the capture ``auth_id`` so far."""
    return sum(
        (Decimal(a) for a in conn.execute(_REFUNDED, {"auth_id": auth_id}).scalars()),
        Decimal(0),
    )


def _refunds_seen(auth_id: str, refunded: Decimal) -> Preconditions:
    return Preconditions(
        versions={f"refunded:{auth_id}": money(refunded)}, scope=f"refund:{auth_id}"
    )


def _refunding(card_id: str, payee: str | None, refund: Amount) -> list[Change]:
    """The one change a refund makes: ``refund`` paid back to the card, from the payee."""
    return [change(f"card {card_id}", "refund", field="payee", before=payee, amount=refund)]


def _add_fee(work: Work, fee: CaptureFee, auth_id: str, card_id: str, authorized: Amount) -> Amount:
    """Capture the bank's fee on top of ``authorized``: the authorization then holds, and
    the card's credit is lowered by, what was really charged; return that."""
    captured = Amount(value=money(authorized.decimal + fee.added), currency=authorized.currency)
    work.conn.execute(_SET_AUTH_AMOUNT, {"k_auth_id": auth_id, "amount": captured.value})
    available = work.conn.execute(_AVAILABLE, {"card_id": card_id}).scalar_one()
    lowered = money(Decimal(available) - fee.added)
    work.conn.execute(_SET_CARD, {"k_card_id": card_id, "available": lowered})
    if fee.added > fee.up_to:
        _log.warning(
            "card %s: the bank added a fee of %s %s at capture, above the %s it said it may",
            card_id,
            money(fee.added),
            authorized.currency,
            money(fee.up_to),
        )
    return captured


def _payee(work: Work) -> str | None:
    payee = work.branch.args.get("payee")
    return payee if isinstance(payee, str) else None


def _charge(card_id: str, payee: str | None, amount: Amount) -> list[Change]:
    """The one change a capture makes: ``amount`` charged to the card, for the payee."""
    return [change(f"card {card_id}", "charge", field="payee", after=payee, amount=amount)]


def _card_version(card_id: str, version: int | None) -> Preconditions:
    return Preconditions(
        versions={f"card:{card_id}": "absent" if version is None else str(version)},
        scope=f"charge:{card_id}",
    )


def _open(work: Work) -> dict[str, str]:
    return {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}


def edit(conn: Connection, card_id: str, available: str, now: datetime) -> int:
    """Change a card's available credit as its bank would; return the card's new version.

    Raises:
        KeyError: no such card.
    """
    found = conn.execute(
        select(cards.c.version).where(cards.c.card_id == card_id).with_for_update()
    ).scalar_one_or_none()
    if found is None:
        raise KeyError(card_id)
    conn.execute(
        update(cards)
        .where(cards.c.card_id == card_id)
        .values(available=money(Decimal(available)), version=found + 1)
    )
    detail = f"card {card_id}: available set to {available} (version {found + 1})"
    write_line(conn, ledger, PARTICIPANT, None, None, "edited", detail, now)
    return int(found) + 1


class CardDeclined(Exception):
    """The bank declined a direct charge; nothing was charged."""


def charge_now(
    conn: Connection,
    card_id: str,
    amount: Amount,
    payee: str,
    reference: str | None,
    now: datetime,
) -> str:
    """Charge a card at once (no authorization first), as the gated ``charge_card`` tool
    does; write the ledger line under ``reference`` and return what was done.

    Raises:
        CardDeclined: no such card, another currency, or not enough available credit.
    """
    found = conn.execute(_CARD, {"card_id": card_id}).first()
    if found is None:
        raise CardDeclined(f"no card {card_id} on file")
    if found.currency != amount.currency:
        raise CardDeclined(f"card {card_id} is in {found.currency}, not {amount.currency}")
    available = Decimal(found.available) - amount.decimal
    if available < 0:
        raise CardDeclined(f"card {card_id} has {found.available} {found.currency} available")
    conn.execute(_SET_CARD, {"k_card_id": card_id, "available": money(available)})
    detail = f"charged {amount} to {payee} on card {card_id}"
    write_line(conn, ledger, PARTICIPANT, reference, None, "charged", detail, now)
    return detail


def balance(conn: Connection, card_id: str) -> Amount | None:
    """The credit still available on a card (``None``: no such card on file)."""
    found = conn.execute(
        select(cards.c.available, cards.c.currency).where(cards.c.card_id == card_id)
    ).first()
    if found is None:
        return None
    return Amount.model_validate({"value": found.available, "currency": found.currency})


def seed(conn: Connection, stock: Seed) -> None:
    """Put the cards on file (once)."""
    if conn.execute(select(func.count()).select_from(cards)).scalar_one():
        return
    conn.execute(
        insert(cards),
        [
            {"card_id": card, "version": 1, "available": value, "currency": currency}
            for card, (value, currency) in CARDS.items()
        ],
    )


def effect(conn: Connection, txn_id: str) -> str:
    """Judge what ``txn_id`` left at payments: ``whole``, ``none``, ``undone`` (captured,
    then refunded by an undo transaction, at most what was captured) or ``broken:
    <why>``; for an undo transaction, ``whole`` once its refund is paid."""
    seen = kinds(conn, ledger, txn_id)
    paid = conn.execute(select(refunds.c.amount).where(refunds.c.txn_id == txn_id)).all()
    if seen["refunded"] or paid:
        if seen["refunded"] != len(paid):
            said = f"the ledger says refunded {seen['refunded']} times"
            return f"broken: {said}, the refunds table {len(paid)}"
        if len(paid) > 1:
            return f"broken: refunded {len(paid)} times"
        return "whole"
    rows = conn.execute(
        select(authorizations.c.auth_id, authorizations.c.status, authorizations.c.amount).where(
            authorizations.c.txn_id == txn_id
        )
    ).all()
    status = sorted(r.status for r in rows)
    if seen["captured"] > 1:
        return f"broken: captured {seen['captured']} times"
    if "authorized" in status:
        return "broken: an authorization is still open (neither captured nor voided)"
    if seen["captured"] == 1:
        if seen["voided"]:
            return "broken: captured and also voided"
        if status.count("captured") != 1:
            return f"broken: the ledger says captured but the authorizations show {status}"
        (capture,) = [r for r in rows if r.status == "captured"]
        back = conn.execute(
            select(refunds.c.amount).where(refunds.c.original_txn_id == txn_id)
        ).scalars()
        refunded = sum((Decimal(a) for a in back), Decimal(0))
        if refunded > Decimal(capture.amount):
            return f"broken: refunded {money(refunded)} of the {capture.amount} captured"
        return "undone" if refunded else "whole"
    if "captured" in status:
        return "broken: an authorization is captured with no capture in the ledger"
    if seen["authorized"] != seen["voided"]:
        return f"broken: authorized {seen['authorized']} times, voided {seen['voided']}"
    return "none"


SERVICE = Service(
    PARTICIPANT, "payments", metadata, ledger, lambda: (Charge(), Refund()), seed, effect
)
