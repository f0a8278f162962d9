"""[PART-PREVIEW] an operation says what its commit will change, and what it changed, signed.

``PreviewedSeat`` is the test airline's seat hold, giving an exact preview
from its own seat table at prepare and at quote, and the observed effect at
commit; the plain ``HoldSeat`` gives none, and is signed as certainty
``none``. The builder (``change``, ``preview``, ``observed``) is checked for
what it refuses and how it words a summary.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from hatp.clock import ManualClock
from hatp.evidence import verify
from hatp.model import (
    Amount,
    Certainty,
    Change,
    EffectPreview,
    EffectVerdict,
    ObservedEffect,
    effect_verdict,
)
from hatp.participant import (
    Committed,
    ParticipantServer,
    Prepared,
    Quoted,
    Work,
    change,
    observed,
    preview,
    render,
)
from hatp.store import Store
from participant.ops import AddEvent, Charge, HoldSeat, keyring, plan, run, seats, server

USD = "USD"


class PreviewedSeat(HoldSeat):
    """The seat hold, saying from its seat table what it will do, and what it did."""

    def prepare(self, work: Work) -> Prepared:
        prepared = super().prepare(work)
        return Prepared(
            cost=prepared.cost,
            lease_seconds=prepared.lease_seconds,
            preview=self._preview(work),
            data=prepared.data,
        )

    def quote(self, work: Work) -> Quoted:
        quoted = super().quote(work)
        return Quoted(
            cost=quoted.cost, valid_seconds=quoted.valid_seconds, preview=self._preview(work)
        )

    def commit(self, work: Work) -> Committed:
        done = super().commit(work)
        seat = str(work.branch.args["seat"])
        return Committed(
            effect=done.effect,
            observed=observed([change(f"seat {seat}", "ticket", field="status", after="ticketed")]),
        )

    @staticmethod
    def _preview(work: Work) -> EffectPreview:
        seat = str(work.branch.args["seat"])
        row = work.conn.execute(sa.select(seats).where(seats.c.seat == seat)).one()
        return preview(
            Certainty.EXACT,
            [change(f"seat {seat}", "ticket", field="status", after="ticketed")],
            summary=f"ticket seat {seat} for {row.price} {row.currency}",
        )


@pytest.fixture
def previewing(ledgers: Store, clock: ManualClock) -> ParticipantServer:
    return server(ledgers, clock, PreviewedSeat(), AddEvent(), Charge())


def test_a_yes_vote_signs_the_preview_and_the_commit_its_observed_effect(
    previewing: ParticipantServer,
) -> None:
    """[PART-PREVIEW] both are in the signed receipts, and an unchanged commit compares
    as previewed."""
    prepared = run(previewing.prepare(plan(), "seat", 1))
    verify(prepared, keyring())
    shown = EffectPreview.model_validate(prepared["preview"])
    assert (shown.certainty, shown.summary) == (Certainty.EXACT, "ticket seat 12A for 420.00 USD")
    committed = run(previewing.commit("txn-1", "seat", 1, prepared["planDigest"], None))
    verify(committed, keyring())
    seen = ObservedEffect.model_validate(committed["observed"])
    assert effect_verdict(shown, seen) is EffectVerdict.AS_PREVIEWED


def test_a_quote_carries_the_preview_too(previewing: ParticipantServer) -> None:
    """[PART-PREVIEW] approval-first shows people the quote's preview."""
    quote = run(previewing.quote(plan(), "seat", 1))
    verify(quote, keyring())
    assert quote["preview"]["certainty"] == "exact"
    assert quote["preview"]["changes"][0]["resource"] == "seat 12A"


def test_an_operation_that_gives_no_preview_is_signed_as_none_never_made_up(
    airline: ParticipantServer,
) -> None:
    """[PART-PREVIEW] certainty none, no changes; its commit observes nothing, unchecked."""
    prepared = run(airline.prepare(plan(), "seat", 1))
    assert prepared["preview"] == {
        "certainty": "none",
        "summary": "hold_seat gives no preview of what it will change",
        "changes": [],
        "bound": None,
    }
    committed = run(airline.commit("txn-1", "seat", 1, prepared["planDigest"], None))
    assert committed["observed"] is None
    shown = EffectPreview.model_validate(prepared["preview"])
    assert effect_verdict(shown, None) is EffectVerdict.UNCHECKED


def test_a_no_vote_signs_no_preview(airline: ParticipantServer) -> None:
    """A no vote changes nothing, so it previews nothing."""
    run(airline.prepare(plan(), "seat", 1))
    refused = run(airline.prepare(plan("txn-2"), "seat", 1))  # the seat is held by txn-1
    assert (refused["vote"], refused["preview"]) == ("no", None)


def test_the_builder_renders_a_summary_from_the_changes() -> None:
    when = datetime(2026, 12, 9, 9, 0, tzinfo=UTC)
    changes = [
        change("seat 14C", "hold", field="holder", before=None, after="dana"),
        change("card 4242", "charge", amount=Amount(value="420.00", currency=USD)),
        change("calendar dana", "create", after="Berlin trip", at=when),
    ]
    assert render(changes) == (
        "hold seat 14C: holder (none) → dana; charge card 4242 420.00 USD; "
        "create calendar dana: Berlin trip at 2026-12-09T09:00:00.000Z"
    )
    assert preview(Certainty.EXACT, changes).summary == render(changes)
    assert preview(Certainty.NONE, []).summary == "no change"
    assert len(preview(Certainty.EXACT, changes, summary="x" * 900).summary) == 500


def test_the_builder_refuses_what_a_receipt_could_not_carry() -> None:
    """A bound on anything but a predicted preview; a naive time; an empty resource; a kind
    that is not a name; a value that is not JSON."""
    usd = Amount(value="10.00", currency=USD)
    with pytest.raises(ValueError, match="only a predicted preview has a bound"):
        preview(Certainty.EXACT, [], bound=usd)
    with pytest.raises(ValueError):
        change("seat 14C", "hold", at=datetime(2026, 12, 9, 9, 0))
    for resource, kind, after in (("", "hold", None), ("seat", "two words", None)):
        with pytest.raises(ValidationError):
            change(resource, kind, after=after)
    with pytest.raises(ValidationError):
        change("seat", "hold", after=float("nan"))
    assert preview(Certainty.PREDICTED, [], bound=usd).bound == usd


def test_verdicts_follow_certainty_and_bounds() -> None:
    """``effect_verdict``: exact must match; predicted may move amounts within its bound."""

    def charge(value: str) -> list[Change]:
        return [change("card 4242", "charge", amount=Amount(value=value, currency=USD))]

    bound = Amount(value="450.00", currency=USD)
    exact = preview(Certainty.EXACT, charge("420.00"))
    predicted = preview(Certainty.PREDICTED, charge("420.00"), bound=bound)
    unbounded = preview(Certainty.PREDICTED, charge("420.00"))
    same, more, far = (observed(charge(v)) for v in ("420.00", "440.00", "460.00"))
    assert effect_verdict(exact, same) is EffectVerdict.AS_PREVIEWED
    assert effect_verdict(exact, more) is EffectVerdict.DIFFERS
    assert effect_verdict(predicted, more) is EffectVerdict.WITHIN_BOUNDS
    assert effect_verdict(predicted, far) is EffectVerdict.DIFFERS
    assert effect_verdict(unbounded, more) is EffectVerdict.DIFFERS
    other = observed([change("card 9999", "charge", amount=Amount(value="430.00", currency=USD))])
    assert effect_verdict(predicted, other) is EffectVerdict.DIFFERS  # another card
    euros = observed([change("card 4242", "charge", amount=Amount(value="400.00", currency="EUR"))])
    assert effect_verdict(predicted, euros) is EffectVerdict.DIFFERS  # another currency
    assert effect_verdict(exact, None) is EffectVerdict.DIFFERS  # observed nothing
    assert effect_verdict(None, same) is EffectVerdict.UNCHECKED
