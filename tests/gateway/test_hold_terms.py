"""Holds-first: people approve the plan and the hold terms; votes and the Approval name them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.people import (
    KEYS,
    START,
    TERMS_APPROVE_BY,
    World,
    hold_terms,
    human,
    keyring,
    plan_doc,
    request,
    run,
    terms_request,
    vote,
)
from gateway.routes import GATEWAY_ID
from hatp.clock import format_time
from hatp.errors import AskInvalid, ResponseRefused
from hatp.evidence import digest, verify, verify_approval
from hatp.gateway import TermsView, render_text, sign_vote
from hatp.gateway._people import TERMS_VOTE_PAYLOAD_MEMBERS, VOTE_PAYLOAD_MEMBERS
from hatp.gateway._view import TERMS_LABEL
from hatp.model import Approval, HumanVote, Result
from hatp.store import AskKind


def terms_digest_of(req: Any) -> str:
    return digest(req.terms)


def test_a_vote_naming_the_terms_is_counted_and_the_approval_carries_them(world: World) -> None:
    """[GW-TERMS] [GW-VOTE-BINDS] [TXN-VOTE-SIGNED]"""
    req = terms_request()
    bound = terms_digest_of(req)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(req)
        (notice,) = w.inbox("alice")
        assert set(notice.payload) == TERMS_VOTE_PAYLOAD_MEMBERS
        assert notice.payload["termsDigest"] == bound
        signed = vote(notice)
        assert HumanVote.model_validate(signed).terms_digest == bound
        await w.gateway.submit_vote(pending["askId"], signed)
        approval = await w.gateway.poll(pending["askId"])
        assert verify(approval, keyring()).issuer == GATEWAY_ID
        parsed = Approval.model_validate(approval)
        assert (parsed.decision.value, parsed.terms_digest) == ("approve", bound)
        assert approval["votes"] == [signed]
        findings = verify_approval(approval, plan_doc(), keyring())
        assert [f.rule for f in findings if f.result is not Result.PASS] == []
        # [GW-ASK-ONCE] the same ask, decided, whatever terms come with the ask again
        again = replace(req, terms=hold_terms(req, approveBy=format_time(START)))
        assert await w.gateway.ask(again) == approval

    run(world, body)


def test_the_approver_sees_the_hold_ends_and_approve_by_as_the_coordinators_statement(
    world: World,
) -> None:
    """[GW-TERMS] [GW-VIEW]"""

    async def body(w: World) -> None:
        await w.gateway.ask(terms_request())
        (notice,) = w.inbox("alice")
        terms = notice.view.terms  # type: ignore[union-attr]
        assert isinstance(terms, TermsView)
        assert terms.approve_by == TERMS_APPROVE_BY
        assert terms.terms_digest == notice.payload["termsDigest"]
        text = render_text(notice.view)  # type: ignore[arg-type]
        assert TERMS_LABEL in text
        assert (
            "  charge: held until 2026-12-02T09:30:00.000Z (UTC), "
            "at most until 2026-12-02T11:00:00.000Z\n"
        ) in text
        assert "  Approve by: 2026-12-02T09:20:00.000Z (UTC)\n" in text
        assert f"  Terms {terms.terms_digest}\n" in text

    run(world, body)


@pytest.mark.parametrize(
    "terms_digest",
    [None, digest({"kind": "hold-terms", "other": True})],
    ids=["without-the-terms", "other-terms"],
)
def test_a_vote_not_naming_the_asks_terms_is_refused_as_a_mismatch(
    world: World, terms_digest: str | None
) -> None:
    """[GW-TERMS] [GW-VOTE-BINDS] refused like a vote for another plan; nothing recorded."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(terms_request())
        (notice,) = w.inbox("alice")
        payload = {k: v for k, v in notice.payload.items() if k != "termsDigest"}
        if terms_digest is not None:
            payload["termsDigest"] = terms_digest
        planted = sign_vote(KEYS["alice"], payload, "approve", START)
        with pytest.raises(ResponseRefused) as refused:
            await w.gateway.submit_vote(pending["askId"], planted)
        assert refused.value.reason == "MISMATCH"
        assert refused.value.data["members"] == ["termsDigest"]
        assert (await w.gateway.poll(pending["askId"]))["kind"] == "pending"

    run(world, body)


def test_a_vote_naming_terms_on_an_ask_without_terms_is_refused(world: World) -> None:
    """[GW-TERMS] [GW-VOTE-BINDS]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        payload = {**notice.payload, "termsDigest": digest({"kind": "hold-terms"})}
        with pytest.raises(ResponseRefused) as refused:
            await w.gateway.submit_vote(
                pending["askId"], sign_vote(KEYS["alice"], payload, "approve", START)
            )
        assert refused.value.reason == "MISMATCH"

    run(world, body)


def test_without_terms_nothing_names_them(world: World) -> None:
    """[GW-TERMS] no terms: the payload, the vote and the Approval are as they always were."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        assert set(notice.payload) == VOTE_PAYLOAD_MEMBERS
        assert notice.view.terms is None  # type: ignore[union-attr]
        assert TERMS_LABEL not in render_text(notice.view)  # type: ignore[arg-type]
        signed = vote(notice)
        assert "termsDigest" not in signed
        await w.gateway.submit_vote(pending["askId"], signed)
        approval = await w.gateway.poll(pending["askId"])
        assert "termsDigest" not in approval
        assert Approval.model_validate(approval).terms_digest is None

    run(world, body)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"planDigest": digest({"another": "plan"})}, "TERMS_MISMATCH"),
        ({"kind": "terms"}, "TERMS_INVALID"),
        ({"approveBy": "tomorrow"}, "TERMS_INVALID"),
        ({"extra": 1}, "TERMS_INVALID"),
    ],
    ids=["another-plan", "wrong-kind", "bad-time", "unknown-member"],
)
def test_terms_that_are_not_this_plans_hold_terms_are_refused(
    world: World, change: dict[str, Any], reason: str
) -> None:
    """[GW-TERMS] ASK_INVALID; nothing stored, nobody asked."""
    req = request()
    bad = replace(req, terms=hold_terms(req, **change))

    async def body(w: World) -> None:
        with pytest.raises(AskInvalid) as refused:
            await w.gateway.ask(bad)
        assert refused.value.data["reason"] == reason
        assert w.channel.delivered == []
        found = w.gateway._asks.find(AskKind.APPROVAL, req.txn_id, "finance", req.plan_digest)
        assert found is None

    run(world, body)


def test_sign_vote_takes_the_payload_of_an_ask_with_terms_and_nothing_else() -> None:
    """[GW-TERMS]"""
    payload = {
        "askId": "ask-aaaaaaaaaaaa",
        "txnId": "t",
        "planDigest": digest({}),
        "groupId": "finance",
        "human": human("alice"),
        "termsDigest": digest({"kind": "hold-terms"}),
    }
    assert sign_vote(KEYS["alice"], payload, "approve", START)["termsDigest"] == digest(
        {"kind": "hold-terms"}
    )
    with pytest.raises(ValueError, match="termsDigest"):
        sign_vote(KEYS["alice"], {**payload, "extra": "x"}, "approve", START)
