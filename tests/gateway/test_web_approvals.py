"""The web channel and what the approver page does for a signed-in person, on SQLite and
PostgreSQL.

:class:`~hatp.gateway.WebApprovals` lists the asks that wait on a person on the
``web`` channel (read from the gateway's durable asks, so a restarted gateway
shows them again), shows one with how it stands, and records their response
through the gateway: a vote signed by their passkey over the vote's challenge
(the gateway cannot make it), or, where the channel holds their Ed25519 key,
signed with that. Every refusal leaves the ask as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from directory.people import authenticator
from gateway.people import (
    KEYS,
    START,
    human,
    people_directory,
    person_card,
    plan_doc,
    question_doc,
    request,
)
from gateway.routes import GATEWAY_ID, GATEWAY_KEY
from gateway.test_gateway_calls import call_request
from hatp.clock import ManualClock
from hatp.errors import AnswerInvalid, AskUnknown, ResponseRefused
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import (
    WEB,
    ApproverSessions,
    HumanGateway,
    Notice,
    WebApprovals,
    WebChannel,
    vote_challenge,
)
from hatp.store import AskState, AskStore, PasskeyBook, Store, WebBook, open_store

ORIGIN = "https://acme.com"


class Page:
    """A gateway on the web channel alone, and the approver page's work over it."""

    def __init__(self, store_url: str, *, keys: dict[str, Any] | None = None) -> None:
        self.clock = ManualClock(START)
        self.store_url = store_url
        self.stores: list[Store] = []
        self.directory = people_directory(
            person_card("alice"), person_card("bob"), person_card("dana", "50000")
        )
        self.keys = keys or {}
        self.web = self.restart()

    def restart(self) -> WebApprovals:
        """A new gateway process on the same database, with a new web channel."""
        store = open_store(self.store_url)
        self.stores.append(store)
        channel = WebChannel(self.clock, self.keys)
        gateway = HumanGateway(
            GATEWAY_ID, GATEWAY_KEY, self.directory, AskStore(store), [channel], self.clock
        )
        sessions = ApproverSessions(
            self.directory,
            WebBook(store),
            PasskeyBook(store),
            self.clock,
            rp_id="acme.com",
            origins=[ORIGIN],
        )
        self.web = WebApprovals(gateway, channel, sessions)
        return self.web

    def asked(self) -> tuple[str, Notice]:
        """The one person whose inbox holds an ask, and its notice."""
        found = [(n, self.web.inbox(human(n))) for n in ("alice", "bob", "dana")]
        (name, (notice,)), *rest = [(n, items) for n, items in found if items]
        assert rest == []
        return name, notice

    def close(self) -> None:
        for store in self.stores:
            store.close()


@pytest.fixture
def page(store_url: str) -> Iterator[Page]:
    made = Page(store_url)
    yield made
    made.close()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 30))


def assertion(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``name``'s passkey answering the page's request options, as a browser would."""
    return authenticator(name).assertion(b64url_decode(options["challenge"]))


def test_an_approval_ask_waits_in_the_inbox_of_the_person_asked(page: Page) -> None:
    """[WEB-INBOX] the notice the gateway made for them: the plan's view and a nonce."""

    async def body() -> None:
        pending = await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        assert notice.ask_id == pending["askId"]
        assert notice.kind == "approval" and notice.nonce is not None
        assert notice.payload["human"] == human(name)
        others = [n for n in ("alice", "bob", "dana") if n != name]
        assert all(page.web.inbox(human(n)) == [] for n in others)
        shown, progress = page.web.ask(pending["askId"], human(name))
        assert shown == notice
        assert progress.state is AskState.OPEN and progress.needed == 1
        assert {p.id: p.status for p in progress.people}[human(name)] == "asked"

    run(body)


def test_a_restarted_gateway_shows_the_open_asks_again(page: Page) -> None:
    """[WEB-INBOX] the inbox is read from the durable asks, not from notices in memory."""

    async def body() -> None:
        pending = await page.web.gateway.ask(request(plan_doc()))
        name, _ = page.asked()
        web = page.restart()
        (notice,) = web.inbox(human(name))
        assert notice.ask_id == pending["askId"]

    run(body)


def test_the_vote_options_are_the_votes_challenge_for_the_persons_passkeys(page: Page) -> None:
    """[WEB-VOTE] the challenge binds the plan, group, decision, person and their nonce."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        assert notice.nonce is not None
        for decision in ("approve", "reject"):
            options = page.web.vote_options(notice.ask_id, human(name), decision)
            expected = vote_challenge(notice.payload, decision, notice.nonce)
            assert b64url_decode(options["challenge"]) == expected
            assert options["rpId"] == "acme.com"
            assert options["userVerification"] == "required"
            assert [c["id"] for c in options["allowCredentials"]] == [
                authenticator(name).credential_id
            ]

    run(body)


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_passkey_vote_decides_the_group(page: Page, decision: str) -> None:
    """[WEB-VOTE] the vote carries the assertion alone: the gateway holds no key of theirs."""

    async def body() -> None:
        pending = await page.web.gateway.ask(request(plan_doc(passkey_required=True)))
        name, notice = page.asked()
        options = page.web.vote_options(notice.ask_id, human(name), decision)  # type: ignore[arg-type]
        done = await page.web.vote(
            notice.ask_id,
            human(name),
            decision,  # type: ignore[arg-type]
            assertion(name, options),
        )
        assert done.state is AskState.DECIDED and done.decision == decision
        approval = await page.web.gateway.poll(pending["askId"])
        (cast,) = approval["votes"]
        assert cast["decision"] == decision and "signature" not in cast
        assert cast["passkey"]["nonce"] == notice.nonce
        assert page.web.inbox(human(name)) == []

    run(body)


def _refused_and_still_open(page: Page, ask_id: str, error: ResponseRefused, reason: str) -> None:
    assert error.reason == reason
    _, progress = page.web.ask(ask_id, error.data["human"])
    assert progress.state is AskState.OPEN


def test_an_assertion_by_another_persons_passkey_is_refused(page: Page) -> None:
    """[WEB-VOTE] only a passkey on the voter's own card: ``KEY_UNKNOWN``, nothing recorded."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        other = "dana" if name != "dana" else "alice"
        options = page.web.vote_options(notice.ask_id, human(name), "approve")
        forged = authenticator(other).assertion(b64url_decode(options["challenge"]))
        forged["id"] = "bm90LW9uLXRoZS1jYXJk"  # a credential no card of theirs holds
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", forged)
        _refused_and_still_open(page, notice.ask_id, refused.value, "PASSKEY")
        assert refused.value.data["passkeyReason"] == "KEY_UNKNOWN"

    run(body)


def test_an_assertion_made_to_reject_does_not_approve(page: Page) -> None:
    """[GW-PASSKEY] the challenge binds the decision: ``CHALLENGE``, nothing recorded."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        options = page.web.vote_options(notice.ask_id, human(name), "reject")
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", assertion(name, options))
        _refused_and_still_open(page, notice.ask_id, refused.value, "PASSKEY")
        assert refused.value.data["passkeyReason"] == "CHALLENGE"

    run(body)


def test_a_bogus_signature_is_refused_and_a_good_one_then_counts(page: Page) -> None:
    """[GW-PASSKEY] ``SIGNATURE``; the nonce is not spent by a refused vote."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc(passkey_required=True)))
        name, notice = page.asked()
        options = page.web.vote_options(notice.ask_id, human(name), "approve")
        bogus = assertion(name, options)
        signature = bytearray(b64url_decode(bogus["response"]["signature"]))
        signature[-1] ^= 0x01
        bogus["response"]["signature"] = b64url_encode(bytes(signature))
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", bogus)
        _refused_and_still_open(page, notice.ask_id, refused.value, "PASSKEY")
        assert refused.value.data["passkeyReason"] == "SIGNATURE"
        options = page.web.vote_options(notice.ask_id, human(name), "approve")
        done = await page.web.vote(notice.ask_id, human(name), "approve", assertion(name, options))
        assert done.decision == "approve"

    run(body)


def test_a_credential_that_is_not_an_assertion_is_refused_shape(page: Page) -> None:
    """[WEB-VOTE] ``SHAPE``: the browser's answer must be an assertion response."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        broken = {"id": authenticator(name).credential_id, "response": {"clientDataJSON": "e30"}}
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", broken)
        _refused_and_still_open(page, notice.ask_id, refused.value, "SHAPE")

    run(body)


def test_without_a_passkey_answer_or_a_key_there_is_no_vote(page: Page) -> None:
    """[WEB-VOTE] ``SIGNATURE``: the gateway never signs for a person it holds no key of."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", None)
        _refused_and_still_open(page, notice.ask_id, refused.value, "SIGNATURE")

    run(body)


def test_a_key_the_channel_holds_signs_a_vote_but_never_stands_in_for_a_passkey(
    store_url: str,
) -> None:
    """[WEB-VOTE] with the person's Ed25519 key, a group that needs no passkey takes the
    vote; one that needs it refuses ``REQUIRED``."""
    page = Page(store_url, keys={human(n): KEYS[n] for n in ("alice", "bob", "dana")})

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc(passkey_required=True, txn_id="t-pk")))
        name, notice = page.asked()
        with pytest.raises(ResponseRefused) as refused:
            await page.web.vote(notice.ask_id, human(name), "approve", None)
        assert refused.value.data["passkeyReason"] == "REQUIRED"
        await page.web.gateway.withdraw(notice.ask_id, "done with it")
        await page.web.gateway.ask(request(plan_doc(txn_id="t-plain")))
        name, notice = page.asked()
        done = await page.web.vote(notice.ask_id, human(name), "approve", None)
        assert done.decision == "approve"
        approval = await page.web.gateway.poll(notice.ask_id)
        assert "signature" in approval["votes"][0] and "passkey" not in approval["votes"][0]

    try:
        run(body)
    finally:
        page.close()


def test_a_tool_call_is_voted_with_the_key_the_channel_holds(store_url: str) -> None:
    """[WEB-VOTE] a call ask gives no nonce: no passkey options, the held key signs."""
    page = Page(store_url, keys={human(n): KEYS[n] for n in ("alice", "bob", "dana")})

    async def body() -> None:
        await page.web.gateway.ask_call(call_request())
        name, notice = page.asked()
        assert notice.kind == "call" and notice.nonce is None
        with pytest.raises(ResponseRefused) as refused:
            page.web.vote_options(notice.ask_id, human(name), "approve")
        assert refused.value.data["passkeyReason"] == "NONCE"
        done = await page.web.vote(notice.ask_id, human(name), "approve", None)
        assert done.decision == "approve"
        approval = await page.web.gateway.poll_call(notice.ask_id)
        assert approval["kind"] == "call-approval" and approval["decision"] == "approve"

    try:
        run(body)
    finally:
        page.close()


def test_a_question_is_answered_only_with_an_answer_that_fits(page: Page) -> None:
    """[WEB-ANSWER] ``ANSWER_INVALID`` keeps the question open; a fitting answer closes it."""

    async def body() -> None:
        question = question_doc("choose", {"options": ["window", "aisle"]})
        pending = await page.web.gateway.ask_question(question)
        (notice,) = page.web.inbox(human("dana"))
        assert notice.kind == "question" and notice.ask_id == pending["askId"]
        with pytest.raises(AnswerInvalid) as refused:
            await page.web.answer(notice.ask_id, human("dana"), "middle")
        assert refused.value.data["reason"] == "NOT_AN_OPTION"
        assert page.web.ask(notice.ask_id, human("dana"))[1].state is AskState.OPEN
        done = await page.web.answer(notice.ask_id, human("dana"), "aisle")
        assert done.state is AskState.DECIDED and done.answered_by == human("dana")
        answer = await page.web.gateway.poll_question(notice.ask_id)
        assert answer["value"] == "aisle"

    run(body)


def test_declining_passes_the_ask_to_the_next_person(page: Page) -> None:
    """[GW-DECLINE] through the page: the decliner's inbox empties, the next one's fills."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        done = await page.web.decline(notice.ask_id, human(name))
        assert {p.id: p.status for p in done.people}[human(name)] == "declined"
        assert page.web.inbox(human(name)) == []
        successor, following = page.asked()
        assert successor != name and following.ask_id == notice.ask_id

    run(body)


def test_nobody_sees_an_ask_they_were_not_asked_on(page: Page) -> None:
    """[WEB-INBOX] ``ASK_UNKNOWN`` for another person's ask and for no ask at all alike."""

    async def body() -> None:
        await page.web.gateway.ask(request(plan_doc()))
        name, notice = page.asked()
        other = next(n for n in ("alice", "bob") if n != name)
        for ask_id, who in ((notice.ask_id, other), ("ask-none", name)):
            with pytest.raises(AskUnknown):
                page.web.ask(ask_id, human(who))
            with pytest.raises(AskUnknown):
                await page.web.vote(ask_id, human(who), "approve", None)
            with pytest.raises(AskUnknown):
                await page.web.decline(ask_id, human(who))

    run(body)


def test_a_page_waiting_on_its_person_wakes_when_their_asks_change(page: Page) -> None:
    """[WEB-INBOX] ``changed`` answers at once when the version moved, wakes on a
    delivery, and otherwise returns after its wait on the gateway's clock."""

    async def body() -> None:
        web = page.web
        assert web.channel.channel_type == WEB
        empty = {name: web.version(human(name)) for name in ("alice", "bob", "dana")}
        assert len(set(empty.values())) == 1  # an empty inbox is the same for everyone
        waiting = asyncio.create_task(web.changed(human("alice"), empty["alice"], 30))
        await asyncio.sleep(0)
        await web.gateway.ask(request(plan_doc()))
        name, _ = page.asked()
        moved = web.version(human(name))
        assert moved != empty[name]
        if name == "alice":
            assert await waiting == moved
        else:
            page.clock.advance(31)
            assert await waiting == empty["alice"]
        assert await web.changed(human(name), empty[name], 30) == moved  # at once
        idle = asyncio.create_task(web.changed(human("dana"), empty["dana"], 5))
        while page.clock.sleepers == 0:
            await asyncio.sleep(0)
        page.clock.advance(5)
        assert await idle == empty["dana"]

    run(body)


def test_a_page_served_by_one_process_sees_an_ask_another_made_at_its_recheck(
    page: Page,
) -> None:
    """[WEB-INBOX] two gateway processes on one store: a page waiting in the second is
    not woken by the first's delivery, and reads the inbox again within the recheck
    (2 s here, no recheck being set): its version is the same in both processes."""

    async def body() -> None:
        first = page.web
        second = page.restart()
        people = [human(n) for n in ("alice", "bob", "dana")]
        before = {who: second.version(who) for who in people}
        waiting = {who: asyncio.create_task(second.changed(who, before[who], 30)) for who in people}
        while page.clock.sleepers < len(people):
            await asyncio.sleep(0)
        await first.gateway.ask(request(plan_doc()))
        asked = human(page.asked()[0])
        assert not any(task.done() for task in waiting.values())
        page.clock.advance(2)
        assert await waiting[asked] == first.version(asked) != before[asked]
        for who in people:
            if who != asked:
                assert not waiting[who].done()  # their inboxes did not change
        page.clock.advance(28)
        for who in people:
            if who != asked:
                assert await waiting[who] == before[who]

    run(body)
