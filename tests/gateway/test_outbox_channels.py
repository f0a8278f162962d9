"""[OUTBOX] end to end: the gateway's outbox over the real webhook and e-mail channels,
to a real HTTP receiver (uvicorn) and a real mail server (aiosmtpd) on 127.0.0.1 that
fail, time out and recover."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from gateway.people import (
    AGENT,
    PRINCIPAL,
    START,
    human,
    people_directory,
    person_card,
    request,
    until,
    vote,
)
from gateway.routes import GATEWAY_ID, GATEWAY_KEY
from gateway.servers import BOUND, Keeper, Receiver, bound_socket, mail_server, serving
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import LinkRefused
from hatp.evidence import Keyring
from hatp.gateway import (
    ApproverSessions,
    EmailChannel,
    HumanGateway,
    MemoryChannel,
    SmtpSettings,
    WebApprovals,
    WebChannel,
    WebhookChannel,
    verify_webhook,
)
from hatp.gateway._notices import notice
from hatp.gateway._outbox import SendPolicy, link_token, read_link_token
from hatp.http import approver_routes
from hatp.store import AskStore, Outbox, OutboxState, PasskeyBook, Store, WebBook, open_store

#: The switchable checks this module plants violations of, and the tests that do.
SWITCH_OFF_TESTS = {"OUTBOX-LINK": ("test_switched_off_a_link_opens_twice",)}

ALICE = human("alice")
APPROVER_URL = "https://gateway.acme.com/approve"
POLICY = SendPolicy(attempts=3, first_retry_seconds=1.0, max_retry_seconds=4.0)


@dataclass
class Org:
    """acme's gateway on a store, its webhook receiver and mail server, one clock."""

    url: str
    receiver: Receiver
    sock: socket.socket
    keeper: Keeper
    smtp_port: int
    clock: ManualClock
    stores: list[Store]

    def gateway(self, *, timeout_seconds: float = 5.0) -> HumanGateway:
        """A gateway process: a webhook and an e-mail channel for alice, then the web."""
        self.stores.append(open_store(self.url))
        hook = WebhookChannel(
            GATEWAY_KEY,
            GATEWAY_ID,
            {ALICE: self.receiver.url()},
            timeout_seconds=timeout_seconds,
            clock=self.clock,
        )
        smtp = SmtpSettings(
            host="127.0.0.1",
            port=self.smtp_port,
            sender="gateway@acme.example",
            starttls=False,
            timeout_seconds=5.0,
        )
        mail = EmailChannel(smtp, {ALICE: "alice@acme.example"}, gateway_name="Acme")
        return HumanGateway(
            GATEWAY_ID,
            GATEWAY_KEY,
            people_directory(person_card("alice", channels=["webhook", "email", "web"])),
            AskStore(self.stores[-1]),
            [hook, mail, MemoryChannel("web")],
            self.clock,
            initiator_principals={AGENT: PRINCIPAL},
            approver_url=APPROVER_URL,
            send_policy=POLICY,
        )

    @property
    def outbox(self) -> Outbox:
        return Outbox(self.stores[-1])

    def verified(self) -> list[dict[str, Any]]:
        """Every webhook the receiver got, checked as a receiver with the gateway's key."""
        keyring = Keyring([(GATEWAY_KEY.public, GATEWAY_ID)], trusted_issuers=[GATEWAY_ID])
        return [verify_webhook(g.body, g.headers, keyring, now=START) for g in self.receiver.got]


@pytest.fixture
def org(store_url: str) -> Iterator[Org]:
    sock = bound_socket()
    with mail_server() as (keeper, port):
        made = Org(store_url, Receiver(), sock, keeper, port, ManualClock(START), [])
        made.receiver.port = sock.getsockname()[1]
        try:
            yield made
        finally:
            for store in made.stores:
                store.close()
            sock.close()


@asynccontextmanager
async def listening(org: Org) -> AsyncIterator[None]:
    async with serving(org.receiver, org.sock):
        yield


def settled(org: Org, ask_id: str) -> bool:
    return all(r.state is not OutboxState.PENDING for r in org.outbox.for_ask(ask_id))


def run(body: Any) -> None:
    asyncio.run(asyncio.wait_for(body(), 3 * BOUND))


def test_a_receiver_that_fails_then_recovers_gets_the_notice_with_one_key_OUTBOX_RETRY(
    org: Org,
) -> None:
    """[OUTBOX-RETRY] [WEBHOOK-SIGN] the receiver answers 500, then 200: two requests,
    both verifying as the gateway's, with one Idempotency-Key: a receiver that keeps the
    keys it has seen acts once."""
    org.receiver.answers = [500]

    async def body() -> None:
        async with listening(org):
            gateway = org.gateway()
            pending = await gateway.ask(request())
            ask_id = pending["askId"]
            await until(lambda: org.outbox.for_ask(ask_id)[0].last_error is not None, "a retry")
            org.clock.advance(1)
            await gateway.outbox.drain()
            (row,) = org.outbox.for_ask(ask_id)
            assert (row.state, row.attempts) == (OutboxState.DELIVERED, 2)
        notices = org.verified()
        assert [n["event"] for n in notices] == ["ask", "ask"]
        keys = {g.headers["idempotency-key"] for g in org.receiver.got}
        assert keys == {row.notice_id} == {n["noticeId"] for n in notices}
        assert notices[0]["askId"] == ask_id and notices[0]["human"] == ALICE
        assert org.keeper.got == []  # the webhook reached her: no e-mail

    run(body)


def test_a_receiver_that_is_down_is_tried_again_until_it_listens_OUTBOX_RETRY(
    org: Org,
) -> None:
    """[OUTBOX-RETRY] nothing listens at the receiver's address (CONNECT, retried); it
    starts listening; the next due attempt delivers."""

    async def body() -> None:
        gateway = org.gateway()
        pending = await gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: org.outbox.for_ask(ask_id)[0].last_error is not None, "a retry")
        assert org.outbox.for_ask(ask_id)[0].last_error.startswith("CONNECT")  # type: ignore[union-attr]
        async with listening(org):
            org.clock.advance(1)
            await gateway.outbox.drain()
        (row,) = org.outbox.for_ask(ask_id)
        assert (row.state, row.attempts) == (OutboxState.DELIVERED, 2)
        assert len(org.receiver.got) == 1

    run(body)


def test_a_receiver_that_times_out_is_retried_OUTBOX_RETRY(org: Org) -> None:
    """[OUTBOX-RETRY] the receiver hangs past the channel's timeout (TIMEOUT, retried),
    then answers."""
    org.receiver.hang = True

    async def body() -> None:
        async with listening(org):
            gateway = org.gateway(timeout_seconds=0.3)
            pending = await gateway.ask(request())
            ask_id = pending["askId"]
            await until(lambda: org.outbox.for_ask(ask_id)[0].last_error is not None, "a retry")
            assert org.outbox.for_ask(ask_id)[0].last_error.startswith("TIMEOUT")  # type: ignore[union-attr]
            org.receiver.hang = False
            org.clock.advance(1)
            await gateway.outbox.drain()
            assert org.outbox.for_ask(ask_id)[0].state is OutboxState.DELIVERED

    run(body)


def test_a_receiver_that_refuses_moves_alice_to_e_mail_with_a_single_use_link_GW_CHANNEL_NEXT(
    org: Org,
) -> None:
    """[GW-CHANNEL-NEXT] [OUTBOX-LINK] the receiver answers 410 (not worth retrying): alice
    is mailed instead, a mail that carries a link signed for this notice and asks nobody to
    reply; she votes on what the mail showed her."""
    org.receiver.answers = [410]

    async def body() -> None:
        async with listening(org):
            gateway = org.gateway()
            pending = await gateway.ask(request())
            ask_id = pending["askId"]
            await until(lambda: len(org.keeper.got) == 1, "the mail")
            await until(lambda: settled(org, ask_id), "the notices settled")
        (mail,) = org.keeper.mails()
        rows = {r.channel: r for r in org.outbox.for_ask(ask_id)}
        assert (rows["webhook"].state, rows["email"].state) == (
            OutboxState.FAILED,
            OutboxState.DELIVERED,
        )
        plain = mail.get_body(("plain",))
        assert plain is not None
        text = plain.get_content()
        link = next(w for w in text.split() if w.startswith(f"{APPROVER_URL}/link/"))
        token = link.rsplit("/", 1)[1]
        assert read_link_token(GATEWAY_KEY, token) == rows["email"].notice_id
        assert mail["To"] == "alice@acme.example"
        ask = gateway.asks.get(ask_id)
        (entry,) = [p for p in ask.doc["people"] if p["id"] == ALICE]
        assert (entry["channel"], entry["failedChannels"]) == ("email", ["webhook"])
        await gateway.submit_vote(ask_id, vote(notice(ask, entry)))
        assert (await gateway.poll(ask_id))["decision"] == "approve"

    run(body)


def test_a_restarted_gateway_sends_what_the_one_before_left_OUTBOX(org: Org) -> None:
    """[OUTBOX] the first gateway process stores the ask and its notice, and cannot reach
    the receiver; a second process on the same store, with the receiver back, sends it:
    one notice delivered, none lost, none sent twice."""

    async def body() -> None:
        first = org.gateway()
        pending = await first.ask(request())
        ask_id = pending["askId"]
        await until(lambda: org.outbox.for_ask(ask_id)[0].last_error is not None, "a retry")
        await first.outbox.close()
        second = org.gateway()
        async with listening(org):
            org.clock.advance(1)
            assert await second.outbox.drain() == 1
        (row,) = org.outbox.for_ask(ask_id)
        assert (row.state, row.attempts) == (OutboxState.DELIVERED, 2)
        assert [n["noticeId"] for n in org.verified()] == [row.notice_id]

    run(body)


def test_the_mailed_link_opens_once_on_the_approver_page_OUTBOX_LINK(org: Org) -> None:
    """[OUTBOX-LINK] the link in alice's mail, opened on the approver page: the first time
    it leads to the ask's page (which signs her in with her passkey first), the second
    time it is refused USED (410); a link changed or made up is INVALID (404)."""
    org.receiver.answers = [410]

    async def body() -> None:
        async with listening(org):
            gateway = org.gateway()
            pending = await gateway.ask(request())
            await until(lambda: len(org.keeper.got) == 1, "the mail")
        (mail,) = org.keeper.mails()
        plain = mail.get_body(("plain",))
        assert plain is not None
        link = next(w for w in plain.get_content().split() if "/link/" in w)
        path = link.removeprefix("https://gateway.acme.com")
        sessions = ApproverSessions(
            gateway.directory,
            WebBook(org.stores[-1]),
            PasskeyBook(org.stores[-1]),
            org.clock,
            rp_id="gateway.acme.com",
            origins=["https://gateway.acme.com"],
        )
        web = WebApprovals(gateway, WebChannel(org.clock), sessions)
        # [WEB-INBOX] asked by e-mail, she answers on the page: it lists the ask.
        assert [n.ask_id for n in web.inbox(ALICE)] == [pending["askId"]]
        app = Starlette(routes=approver_routes(web))
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(
            transport=transport, base_url="https://gateway.acme.com"
        ) as http:
            first = await http.get(path)
            assert first.status_code == 303
            assert first.headers["location"] == f"/approve/asks/{pending['askId']}"
            again = await http.get(path)
            assert again.status_code == 410 and "LINK_REFUSED" in again.text
            assert "opened before" in again.text
            token = path.rsplit("/", 1)[1]
            notice_id, signature = token.split(".")
            flipped = "B" if signature[10] == "A" else "A"  # one bit of R changed
            forged = await http.get(
                f"/approve/link/{notice_id}.{signature[:10]}{flipped}{signature[11:]}"
            )
            assert forged.status_code == 404 and "LINK_REFUSED" in forged.text
            made_up = await http.get("/approve/link/ntc_nothing.AAAA")
            assert made_up.status_code == 404

    run(body)


def test_a_link_refusal_is_typed_with_its_reason_OUTBOX_LINK(org: Org) -> None:
    """[OUTBOX-LINK] ``open_link`` refuses a token no notice of this gateway carries
    (INVALID), and one opened before (USED), with the ask it named."""

    async def body() -> None:
        gateway = org.gateway()
        pending = await gateway.ask(request())
        await until(lambda: len(org.outbox.for_ask(pending["askId"])) == 1, "the notice")
        (row,) = org.outbox.for_ask(pending["askId"])
        token = link_token(GATEWAY_KEY, row.notice_id)
        assert await gateway.open_link(token) == pending["askId"]
        with pytest.raises(LinkRefused) as used:
            await gateway.open_link(token)
        assert (used.value.reason, used.value.data["askId"]) == ("USED", pending["askId"])
        with pytest.raises(LinkRefused) as unknown:
            await gateway.open_link(link_token(GATEWAY_KEY, "ntc_never_sent"))
        assert unknown.value.reason == "INVALID"
        await gateway.outbox.close()

    run(body)


def test_switched_off_a_link_opens_twice(org: Org) -> None:
    """[OUTBOX-LINK] planted: a mailed link, forwarded after alice used it, opens again
    with the check off (USED with it on)."""

    async def body() -> None:
        gateway = org.gateway()
        pending = await gateway.ask(request())
        await until(lambda: len(org.outbox.for_ask(pending["askId"])) == 1, "the notice")
        (row,) = org.outbox.for_ask(pending["askId"])
        token = link_token(GATEWAY_KEY, row.notice_id)
        assert await gateway.open_link(token) == pending["askId"]
        with pytest.raises(LinkRefused):
            await gateway.open_link(token)
        with unsafe_switched_off("OUTBOX-LINK"):
            assert await gateway.open_link(token) == pending["askId"]
        await gateway.outbox.close()

    run(body)
