"""[OUTBOX] the gateway's notices over push channels: written with the change that causes
them, delivered at least once with the same idempotency key, retried with backoff, moved
to the person's next channel when one fails, and never lost to a restart.

The push channel here is a recording one (:class:`Recorder`): these tests are about the
outbox and the gateway's rules around it. The webhook and e-mail channels are tested
against a real HTTP receiver and a real SMTP server in ``test_webhook.py`` and
``test_email.py``, and end to end in ``test_outbox_webhook.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.people import (
    AGENT,
    FINANCE,
    PRINCIPAL,
    START,
    human,
    people_directory,
    person_card,
    plan_doc,
    request,
    until,
    vote,
)
from gateway.routes import GATEWAY_ID, GATEWAY_KEY
from hatp.clock import ManualClock
from hatp.directory import Directory
from hatp.errors import DeliveryFailed
from hatp.evidence import SigningKey
from hatp.gateway import HumanGateway, MemoryChannel, Notice, OutboxMessage
from hatp.gateway._notices import notice
from hatp.gateway._outbox import SendPolicy, link_token, read_link_token
from hatp.http import ServeMetrics
from hatp.store import AskStore, Outbox, OutboxRow, OutboxState, Store, open_store

APPROVER_URL = "https://gateway.acme.com/approve"
POLICY = SendPolicy(attempts=3, first_retry_seconds=1.0, max_retry_seconds=4.0, claim_seconds=60)


class Recorder:
    """A push channel that records what it is sent; ``failures`` are raised in turn,
    one per send, before it starts delivering."""

    def __init__(self, channel_type: str, addresses: set[str]) -> None:
        self.channel_type = channel_type
        self.addresses = addresses
        self.failures: list[DeliveryFailed | Exception] = []
        self.sent: list[OutboxMessage] = []
        self.tries: list[OutboxMessage] = []

    def reaches(self, human: str) -> bool:
        return human in self.addresses

    async def send(self, message: OutboxMessage) -> None:
        self.tries.append(message)
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(message)

    def events(self, name: str) -> list[str]:
        return [m.event for m in self.sent if m.human == human(name)]


def failure(reason: str, *, retryable: bool) -> DeliveryFailed:
    return DeliveryFailed(f"{reason} from the test", reason=reason, retryable=retryable)


class Gateways:
    """Gateway processes on one store, sharing a clock, a webhook and an e-mail channel."""

    def __init__(self, url: str, found: Directory) -> None:
        self.url = url
        self.directory = found
        self.clock = ManualClock(START)
        everyone = {human(n) for n in ("alice", "bob", "carol")}
        self.webhook = Recorder("webhook", set(everyone))
        self.email = Recorder("email", set(everyone))
        self.web = MemoryChannel("web")
        self.stores: list[Store] = []
        self.gateway = self.start()

    def start(self) -> HumanGateway:
        self.stores.append(open_store(self.url))
        self.gateway = HumanGateway(
            GATEWAY_ID,
            GATEWAY_KEY,
            self.directory,
            AskStore(self.stores[-1]),
            [self.webhook, self.email, self.web],
            self.clock,
            initiator_principals={AGENT: PRINCIPAL},
            approver_url=APPROVER_URL,
            send_policy=POLICY,
        )
        return self.gateway

    @property
    def outbox(self) -> Outbox:
        return Outbox(self.stores[-1])

    def rows(self, ask_id: str) -> list[OutboxRow]:
        return self.outbox.for_ask(ask_id)

    def close(self) -> None:
        for store in self.stores:
            store.close()


def pushed(*channels: str) -> Directory:
    """alice, bob and carol, each reached over ``channels`` in that order."""
    return people_directory(
        *(person_card(name, channels=list(channels)) for name in ("alice", "bob", "carol"))
    )


@pytest.fixture
def gws(store_url: str) -> Iterator[Gateways]:
    made = Gateways(store_url, pushed("webhook", "email", "web"))
    yield made
    made.close()


def settled(gws: Gateways, ask_id: str) -> bool:
    return all(row.state is not OutboxState.PENDING for row in gws.rows(ask_id))


def test_an_ask_over_a_push_channel_is_an_outbox_row_delivered_once_OUTBOX(
    gws: Gateways,
) -> None:
    """[OUTBOX] [NOTICE-DOC] the ask's notice to alice goes out over her first channel,
    the webhook: a notice document naming the ask, what she signs over, the text she is
    shown and the ask's page; the row says delivered after one attempt."""

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: len(gws.webhook.sent) == 1, "the notice delivered")
        (message,) = gws.webhook.sent
        doc = message.document
        assert (doc["type"], doc["event"], doc["askId"], doc["human"]) == (
            "hatp.notice",
            "ask",
            ask_id,
            human("alice"),
        )
        assert doc["gateway"] == GATEWAY_ID
        assert doc["payload"]["askId"] == ask_id
        assert doc["approverUrl"] == f"{APPROVER_URL}/asks/{ask_id}"
        assert "txn-gw-0001" in doc["text"]
        assert isinstance(message.notice, Notice) and message.notice.payload == doc["payload"]
        assert message.link is not None and message.link.startswith(f"{APPROVER_URL}/link/")
        assert message.attempt == 1
        await until(lambda: settled(gws, ask_id), "the row settled")
        (row,) = gws.rows(ask_id)
        assert (row.state, row.attempts, row.notice_id) == (
            OutboxState.DELIVERED,
            1,
            doc["noticeId"],
        )
        assert gws.email.sent == [] and gws.web.delivered == []

    asyncio.run(body())


def test_the_notice_is_written_in_the_asks_transaction_OUTBOX_ATOMIC(
    gws: Gateways, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[OUTBOX-ATOMIC] an outbox that cannot be written fails the ask: no ask stored
    without its notice, and no notice without its ask."""

    def broken(*_: Any) -> None:
        raise RuntimeError("the outbox table is gone")

    monkeypatch.setattr(Outbox, "add", staticmethod(broken))

    async def body() -> None:
        with pytest.raises(RuntimeError):
            await gws.gateway.ask(request())

    asyncio.run(body())
    store = gws.stores[-1]
    assert AskStore(store).open_asks() == []
    assert Outbox(store).counts() == {}


def test_a_retryable_failure_is_tried_again_with_the_same_key_OUTBOX_RETRY(
    gws: Gateways,
) -> None:
    """[OUTBOX-RETRY] two failures worth retrying, then a delivery: three attempts, each
    with the same noticeId, the second after 1 s and the third after 2 s more."""
    gws.webhook.failures = [
        failure("SERVER_ERROR", retryable=True),
        failure("TIMEOUT", retryable=True),
    ]

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: gws.rows(ask_id)[0].last_error is not None, "the retry recorded")
        (row,) = gws.rows(ask_id)
        assert row.next_at == START + timedelta(seconds=1)
        assert row.last_error is not None and row.last_error.startswith("SERVER_ERROR")
        assert await gws.gateway.outbox.drain() == 0  # not due yet
        gws.clock.advance(1)
        assert await gws.gateway.outbox.drain() == 1
        assert gws.rows(ask_id)[0].next_at == START + timedelta(seconds=3)
        gws.clock.advance(2)
        assert await gws.gateway.outbox.drain() == 1
        (row,) = gws.rows(ask_id)
        assert (row.state, row.attempts) == (OutboxState.DELIVERED, 3)
        keys = {m.notice_id for m in gws.webhook.tries}
        assert keys == {row.notice_id}
        assert [m.attempt for m in gws.webhook.tries] == [1, 2, 3]
        stats = gws.gateway.outbox.stats
        assert (stats.retried["webhook"], stats.delivered["webhook"]) == (2, 1)

    asyncio.run(body())


def test_a_failure_for_good_asks_over_the_next_channel_GW_CHANNEL_NEXT(gws: Gateways) -> None:
    """[GW-CHANNEL-NEXT] the webhook refuses alice's notice (not worth retrying): she is
    asked over e-mail, her SLA from then, and the routing record says why; the webhook's
    row is failed, the e-mail's delivered."""
    gws.webhook.failures = [failure("REJECTED", retryable=False)]

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: len(gws.email.sent) == 1, "the e-mail sent")
        await until(lambda: settled(gws, ask_id), "both rows settled")
        rows = {r.channel: r for r in gws.rows(ask_id)}
        assert (rows["webhook"].state, rows["email"].state) == (
            OutboxState.FAILED,
            OutboxState.DELIVERED,
        )
        failed = rows["webhook"].last_error
        assert failed is not None and failed.startswith("REJECTED")
        row = gws.gateway.asks.get(ask_id)
        (alice,) = [p for p in row.doc["people"] if p["id"] == human("alice")]
        assert (alice["status"], alice["channel"], alice["failedChannels"]) == (
            "asked",
            "email",
            ["webhook"],
        )
        assert "webhook failed (REJECTED)" in alice["detail"]
        # She votes on what the e-mail showed her; the routing record keeps the detail.
        (message,) = gws.email.sent
        assert message.notice is not None
        await gws.gateway.submit_vote(ask_id, vote(message.notice))
        approval = await gws.gateway.poll(ask_id)
        assert approval["decision"] == "approve"
        (routed,) = [h for h in approval["routing"]["humans"] if h["id"] == human("alice")]
        assert routed["result"] == "decided"

    asyncio.run(body())


def test_every_channel_failing_makes_the_person_unreachable_and_asks_the_next_GW_CHANNEL_NEXT(
    gws: Gateways,
) -> None:
    """[GW-CHANNEL-NEXT] alice's webhook and e-mail both fail for good and the web is
    not hers here: she is unreachable (the routing record says every channel failed)
    and bob is asked."""
    gws.directory = pushed("webhook", "email")
    gws.start()
    gws.webhook.failures = [failure("REJECTED", retryable=False)]
    gws.email.failures = [failure("REJECTED", retryable=False)]

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: gws.webhook.events("bob") == ["ask"], "bob asked")
        row = gws.gateway.asks.get(ask_id)
        people = {p["id"]: p for p in row.doc["people"]}
        alice = people[human("alice")]
        assert alice["status"] == "unreachable"
        assert alice["detail"].startswith("every channel failed (webhook, email)")
        assert people[human("bob")]["status"] == "asked"
        await gws.gateway.withdraw(ask_id, "test over")
        result = await gws.gateway.poll(ask_id)
        (routed,) = [h for h in result["routing"]["humans"] if h["id"] == human("alice")]
        assert "every channel failed" in routed["detail"]

    asyncio.run(body())


def test_a_retryable_failure_runs_out_of_attempts_then_moves_on_OUTBOX_RETRY(
    gws: Gateways,
) -> None:
    """[OUTBOX-RETRY] a webhook that keeps timing out is tried ``attempts`` times, then
    alice is asked over e-mail."""
    gws.webhook.failures = [failure("TIMEOUT", retryable=True) for _ in range(3)]

    async def body() -> None:
        await gws.gateway.ask(request())
        await until(lambda: len(gws.webhook.tries) == 1, "the first attempt")
        for _ in range(2):
            gws.clock.advance(POLICY.max_retry_seconds)
            await gws.gateway.outbox.drain()
        await until(lambda: len(gws.email.sent) == 1, "the e-mail sent")
        assert len(gws.webhook.tries) == 3
        assert gws.gateway.outbox.stats.failed["webhook"] == 1

    asyncio.run(body())


def test_no_address_on_a_channel_skips_it_when_asking_GW_CHANNEL(gws: Gateways) -> None:
    """[GW-CHANNEL] the webhook holds no URL for alice: she is asked by e-mail at once,
    and the outbox never holds a webhook row for her."""
    gws.webhook.addresses.discard(human("alice"))

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        await until(lambda: len(gws.email.sent) == 1, "the e-mail sent")
        assert [r.channel for r in gws.rows(pending["askId"])] == ["email"]

    asyncio.run(body())


def test_a_restart_loses_no_notice_and_a_lapsed_claim_is_sent_again_OUTBOX_CLAIM(
    gws: Gateways,
) -> None:
    """[OUTBOX] [OUTBOX-CLAIM] a gateway that claimed a notice and died before recording
    it: a new process sends it once the claim lapses, with the same noticeId, and a
    receiver keeping ids acts on it once."""

    async def body() -> None:
        gws.webhook.failures = [failure("CONNECT", retryable=True)]
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: gws.rows(ask_id)[0].last_error is not None, "the retry recorded")
        await gws.gateway.outbox.close()
        # The first process dies holding a claim on the notice, due again at 1 s.
        gws.clock.advance(1)
        dead = gws.outbox.claim(gws.clock.now(), gws.clock.now() + timedelta(seconds=60), 5)
        assert [r.attempts for r in dead] == [2]
        gateway = gws.start()
        assert await gateway.outbox.drain() == 0  # the claim still holds
        gws.clock.advance(60)
        assert await gateway.outbox.drain() == 1
        (row,) = gws.rows(ask_id)
        assert (row.state, row.attempts) == (OutboxState.DELIVERED, 3)
        seen = {m.notice_id for m in gws.webhook.sent}
        assert seen == {row.notice_id}

    asyncio.run(body())


def test_a_notice_nobody_needs_any_more_is_superseded_not_sent_OUTBOX(gws: Gateways) -> None:
    """[OUTBOX] alice votes (on the web page, say) before her webhook notice goes out:
    the notice is superseded; she is told the outcome instead."""
    gws.webhook.failures = [failure("CONNECT", retryable=True)]

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: len(gws.webhook.tries) == 1, "the first attempt")
        ask = gws.gateway.asks.get(ask_id)
        (entry,) = [p for p in ask.doc["people"] if p["id"] == human("alice")]
        await gws.gateway.submit_vote(ask_id, vote(notice(ask, entry)))
        gws.clock.advance(1)
        await gws.gateway.outbox.drain()
        rows = {r.event: r for r in gws.rows(ask_id)}
        assert rows["ask"].state is OutboxState.SUPERSEDED
        assert rows["outcome"].state is OutboxState.DELIVERED
        (told,) = [m for m in gws.webhook.sent if m.event == "outcome"]
        assert (told.document["outcome"], told.notice, told.link) == ("approve", None, None)
        assert gws.gateway.outbox.stats.superseded["webhook"] == 1

    asyncio.run(body())


def test_withdrawal_and_deadline_notices_go_out_too_OUTBOX(store_url: str) -> None:
    """[OUTBOX] a 2-of-3 ask: alice and bob are asked; the deadline moves earlier (both are
    told), then the ask is withdrawn (both are told)."""
    gws = Gateways(store_url, pushed("webhook"))
    try:

        async def body() -> None:
            pending = await gws.gateway.ask(request(plan_doc(FINANCE + "?quorum=2-of-3")))
            ask_id = pending["askId"]
            await until(lambda: settled(gws, ask_id), "the asks sent")
            await gws.gateway.tighten(ask_id, START + timedelta(minutes=30))
            await gws.gateway.withdraw(ask_id, "the agent gave up")
            await until(lambda: settled(gws, ask_id), "every notice settled")
            for name in ("alice", "bob"):
                assert gws.webhook.events(name) == ["ask", "deadline", "withdrawal"]
            (moved,) = [m for m in gws.webhook.sent if m.event == "deadline"][:1]
            assert moved.document["decideBy"] == "2026-12-02T09:30:00.000Z"
            assert gws.webhook.events("carol") == []

        asyncio.run(body())
    finally:
        gws.close()


def test_an_escalation_is_sent_as_such_OUTBOX(store_url: str) -> None:
    """[OUTBOX] alice misses her SLA; her delegate carol is asked: an ``escalation``
    notice to carol, a ``withdrawal`` to alice."""
    found = people_directory(
        person_card("alice", channels=["webhook"], delegates=[human("carol")]),
        person_card("carol", channels=["webhook"]),
    )
    gws = Gateways(store_url, found)
    try:

        async def body() -> None:
            pending = await gws.gateway.ask(request())
            await until(lambda: settled(gws, pending["askId"]), "the ask sent")
            gws.clock.advance(901)
            await gws.gateway.tick()
            await until(lambda: settled(gws, pending["askId"]), "every notice settled")
            assert gws.webhook.events("alice") == ["ask", "withdrawal"]
            assert gws.webhook.events("carol") == ["escalation"]

        asyncio.run(body())
    finally:
        gws.close()


def test_the_background_loop_sends_what_is_due_OUTBOX(gws: Gateways) -> None:
    """[OUTBOX] a started gateway's loop retries a due notice without being told."""
    gws.webhook.failures = [failure("CONNECT", retryable=True)]

    async def body() -> None:
        gws.gateway.start()
        try:
            pending = await gws.gateway.ask(request())
            await until(lambda: len(gws.webhook.tries) == 1, "the first attempt")
            await until(lambda: gws.clock.sleepers > 0, "the loop waiting")
            gws.clock.advance(1)
            await until(lambda: len(gws.webhook.sent) == 1, "the retry delivered")
            await until(lambda: settled(gws, pending["askId"]), "the row settled")
            (row,) = gws.rows(pending["askId"])
            assert (row.state, row.attempts) == (OutboxState.DELIVERED, 2)
            assert [m.attempt for m in gws.webhook.tries] == [1, 2]
        finally:
            await gws.gateway.stop()

    asyncio.run(body())


def test_a_link_token_is_the_gateways_signature_over_the_notice_OUTBOX_LINK() -> None:
    """[OUTBOX-LINK] a link token reads back to its notice id under the gateway's key, and
    not under another key, nor changed."""
    token = link_token(GATEWAY_KEY, "ntc_abc")
    assert read_link_token(GATEWAY_KEY, token) == "ntc_abc"
    other = SigningKey.from_seed(b"\x07" * 32, "other")
    assert read_link_token(other, token) is None
    assert read_link_token(GATEWAY_KEY, token.replace("ntc_abc", "ntc_abd")) is None
    assert read_link_token(GATEWAY_KEY, "ntc_abc.!!") is None
    assert read_link_token(GATEWAY_KEY, "nonsense") is None


def test_a_send_policy_refuses_nonsense() -> None:
    """Retry settings that cannot work are refused when made."""
    for bad in (
        {"attempts": 0},
        {"first_retry_seconds": 0},
        {"first_retry_seconds": 10, "max_retry_seconds": 5},
        {"claim_seconds": 0},
        {"batch": 0},
    ):
        with pytest.raises(ValueError):
            SendPolicy(**bad)
    assert SendPolicy(first_retry_seconds=2, max_retry_seconds=5).retry_after(3).seconds == 5


def test_the_outbox_is_counted_in_the_metrics_HTTP_METRICS(gws: Gateways) -> None:
    """[HTTP-METRICS] [OUTBOX] the scrape shows the outbox by channel and state, and this
    process's sends by result: one retried, one failed for good, one delivered."""
    gws.webhook.failures = [
        failure("CONNECT", retryable=True),
        failure("REJECTED", retryable=False),
    ]

    async def body() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        pending = await gws.gateway.ask(request())
        await until(lambda: gws.rows(pending["askId"])[0].last_error is not None, "a retry")
        gws.clock.advance(1)
        await gws.gateway.outbox.drain()
        await until(lambda: settled(gws, pending["askId"]), "every notice settled")
        text = (await ServeMetrics(gateway=gws.gateway).render()).decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    found = asyncio.run(body())
    gauge = "hatp_outbox_notices"
    assert found[(gauge, (("channel", "webhook"), ("state", "failed")))] == 1
    assert found[(gauge, (("channel", "email"), ("state", "delivered")))] == 1
    sends = "hatp_outbox_sends_total"
    assert found[(sends, (("channel", "webhook"), ("result", "retried")))] == 1
    assert found[(sends, (("channel", "webhook"), ("result", "failed")))] == 1
    assert found[(sends, (("channel", "email"), ("result", "delivered")))] == 1


def test_a_person_asked_over_a_push_channel_is_reminded_once_halfway_GW_REMIND(
    gws: Gateways,
) -> None:
    """[GW-REMIND] alice, asked by webhook with a 900 s SLA, is reminded at 450 s (the
    view, what she signs, and the link again), once; someone asked on the web page is
    not reminded (the page shows the ask)."""

    async def body() -> None:
        pending = await gws.gateway.ask(request())
        ask_id = pending["askId"]
        await until(lambda: settled(gws, ask_id), "the ask sent")
        row = gws.gateway.asks.get(ask_id)
        assert row.next_due == START + timedelta(seconds=450)
        gws.clock.advance(449)
        await gws.gateway.tick()
        assert gws.webhook.events("alice") == ["ask"]
        gws.clock.advance(1)
        await gws.gateway.tick()
        await until(lambda: settled(gws, ask_id), "the reminder sent")
        assert gws.webhook.events("alice") == ["ask", "reminder"]
        reminder = gws.webhook.sent[-1]
        assert reminder.notice is not None and reminder.link is not None
        assert reminder.document["respondBy"] == "2026-12-02T09:15:00.000Z"
        gws.clock.advance(200)
        await gws.gateway.tick()
        assert gws.webhook.events("alice") == ["ask", "reminder"]
        assert gws.gateway.asks.get(ask_id).next_due == START + timedelta(seconds=900)

    asyncio.run(body())


def test_someone_on_the_web_page_is_not_reminded_GW_REMIND(store_url: str) -> None:
    """[GW-REMIND] only push channels remind: an ask on the web waits for the SLA."""
    gws = Gateways(store_url, pushed("web"))
    try:

        async def body() -> None:
            pending = await gws.gateway.ask(request())
            row = gws.gateway.asks.get(pending["askId"])
            assert row.next_due == START + timedelta(seconds=900)
            gws.clock.advance(600)
            await gws.gateway.tick()
            (alice,) = [p for p in gws.gateway.asks.get(row.ask_id).doc["people"]
                        if p["id"] == human("alice")]  # fmt: skip
            assert "remindedAt" not in alice and gws.webhook.sent == []

        asyncio.run(body())
    finally:
        gws.close()
