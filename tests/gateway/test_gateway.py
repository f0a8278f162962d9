"""The Human Gateway asks people, counts their signed votes, and signs the outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.people import (
    DECIDE_BY,
    FINANCE,
    START,
    World,
    check_card,
    human,
    keyring,
    passkey_vote,
    people_directory,
    person_card,
    plan_doc,
    request,
    run,
    until,
    vote,
)
from gateway.routes import GATEWAY_ID
from hatp.errors import ResponseRefused
from hatp.evidence import verify, verify_routing
from hatp.model import Approval, PendingVote, Result, RoutingRecord
from hatp.store import AskStore


def humans(approval: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Each person of the final routing record: (result, rule or detail)."""
    record = RoutingRecord.model_validate(approval["routing"])
    return {h.id: (h.result.value, h.rule or h.detail) for h in record.humans}


def check_approval(approval: dict[str, Any], plan: dict[str, Any] | None = None) -> Approval:
    """The approval, and its routing record, are the gateway's signed word about the plan."""
    assert verify(approval, keyring()).issuer == GATEWAY_ID
    parsed = Approval.model_validate(approval)
    findings = verify_routing(approval["routing"], plan or plan_doc(), keyring())
    assert {f.rule: f.result for f in findings} == {
        "RTE-SIGNED": Result.PASS,
        "RTE-DIGEST": Result.PASS,
        "RTE-CHECKED": Result.PASS,
        "RTE-TOTALS": Result.PASS,
    }
    for card in parsed.cards:
        check_card(card)
    return parsed


def test_ask_signs_a_pending_vote_and_asks_the_top_candidate(world: World) -> None:
    """[GW-ASK-ONCE] [GW-QUORUM]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        assert verify(pending, keyring()).issuer == GATEWAY_ID
        parsed = PendingVote.model_validate(pending)
        assert (parsed.txn_id, parsed.group_id, parsed.decide_by) == (
            "txn-gw-0001",
            "finance",
            "2026-12-02T10:15:00.000Z",
        )
        (notice,) = w.inbox("alice")
        assert notice.payload == {
            "askId": parsed.ask_id,
            "txnId": "txn-gw-0001",
            "planDigest": parsed.plan_digest,
            "groupId": "finance",
            "human": human("alice"),
        }
        assert notice.view.txn_id == "txn-gw-0001"
        assert (notice.respond_by - START).total_seconds() == 900
        assert w.inbox("bob") == []
        again = await w.gateway.ask(request())
        assert again["askId"] == parsed.ask_id
        assert len(w.channel.delivered) == 1

    run(world, body)


def test_one_approval_decides_a_one_person_group(world: World) -> None:
    """[GW-QUORUM] [GW-ROUTING-FINAL] [GW-VOTE-SIGNED]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        signed_vote = vote(notice)
        await w.gateway.submit_vote(pending["askId"], signed_vote)
        approval = await w.gateway.poll(pending["askId"])
        parsed = check_approval(approval)
        assert parsed.decision.value == "approve"
        assert parsed.approvers == [human("alice")]
        assert parsed.votes == [signed_vote]
        assert [c["id"] for c in parsed.cards] == [human("alice")]
        assert humans(approval) == {
            human("alice"): ("decided", "approve"),
            human("bob"): ("not-reached", None),
            human("dana"): ("excluded", "separation-of-duties"),
            human("erin"): ("excluded", "authority"),
        }
        assert await w.gateway.ask(request()) == approval

    run(world, body)


def test_any_reject_decides_the_group_reject(store_url: str) -> None:
    """[GW-REJECT] one no among a 2-of-3 group's votes is the group's no."""
    found = people_directory(person_card("alice"), person_card("bob"), person_card("carol"))
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(plan_doc(FINANCE + "?quorum=2-of-3")))
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        assert (await w.gateway.poll(pending["askId"]))["kind"] == "pending"
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0], "reject"))
        approval = await w.gateway.poll(pending["askId"])
        parsed = check_approval(approval, plan_doc(FINANCE + "?quorum=2-of-3"))
        assert (parsed.decision.value, parsed.approvers) == ("reject", [])
        assert parsed.reason == f"{human('bob')} rejected"
        assert len(parsed.votes) == 2
        assert humans(approval)[human("carol")] == ("not-reached", None)

    try:
        run(w, body)
    finally:
        w.close()


def test_a_quorum_needs_n_distinct_people_and_asks_the_top_n(store_url: str) -> None:
    """[GW-QUORUM]"""
    found = people_directory(person_card("alice"), person_card("bob"), person_card("carol"))
    w = World(store_url, found)
    doc = plan_doc(FINANCE + "?quorum=2-of-3")

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(doc))
        assert [n.human for n in w.channel.delivered] == [human("alice"), human("bob")]
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0]))
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        parsed = check_approval(await w.gateway.poll(pending["askId"]), doc)
        assert parsed.approvers == [human("bob"), human("alice")]
        assert parsed.reason.startswith("2 of 2 needed approved")

    try:
        run(w, body)
    finally:
        w.close()


def test_too_few_people_left_after_a_decline_waits_for_the_deadline(store_url: str) -> None:
    """[GW-FEW-LATER] 2-of-2: alice declines, so bob alone cannot make the quorum. The
    gateway neither approves on bob's vote nor rejects early: at decideBy it says no."""
    found = people_directory(person_card("alice"), person_card("bob"))
    w = World(store_url, found)
    doc = plan_doc(FINANCE + "?quorum=2-of-2")

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(doc))
        ask_id = pending["askId"]
        await w.gateway.decline(ask_id, human("alice"))
        await w.gateway.submit_vote(ask_id, vote(w.inbox("bob")[0]))
        assert (await w.gateway.poll(ask_id))["kind"] == "pending"
        w.clock.advance((DECIDE_BY - START).total_seconds() + 0.001)
        await w.gateway.tick()
        parsed = check_approval(await w.gateway.poll(ask_id), doc)
        assert (parsed.decision.value, parsed.withdrawn) == ("reject", True)
        assert parsed.reason.startswith("deadline 2026-12-02T10:15:00.000Z passed with 1 of 2")

    try:
        run(w, body)
    finally:
        w.close()


def test_fewer_eligible_people_than_the_quorum_is_an_immediate_reject(world: World) -> None:
    """[GW-FEW]"""
    doc = plan_doc(FINANCE + "?quorum=3-of-4")

    async def body(w: World) -> None:
        approval = await w.gateway.ask(request(doc))
        parsed = check_approval(approval, doc)
        assert (parsed.kind, parsed.decision.value) == ("approval", "reject")
        assert parsed.reason == "needs 3, only 2 eligible"
        assert humans(approval)[human("alice")] == ("not-reached", None)
        assert w.channel.delivered == []

    run(world, body)


def test_a_decline_passes_the_ask_to_the_next_candidate(world: World) -> None:
    """[GW-DECLINE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.decline(pending["askId"], human("alice"))
        assert w.inbox("alice") == []
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0]))
        approval = await w.gateway.poll(pending["askId"])
        assert humans(approval)[human("alice")] == ("asked", "declined")
        assert check_approval(approval).approvers == [human("bob")]

    run(world, body)


def test_someone_with_no_channel_the_gateway_serves_is_passed_over(store_url: str) -> None:
    """[GW-CHANNEL]"""
    found = people_directory(person_card("alice", channels=["slack"]), person_card("bob"))
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        assert [n.human for n in w.channel.delivered] == [human("bob")]
        await w.gateway.withdraw(pending["askId"], "test over")
        approval = await w.gateway.poll(pending["askId"])
        assert humans(approval)[human("alice")] == ("asked", "no channel the gateway serves")

    try:
        run(w, body)
    finally:
        w.close()


def test_a_group_that_requires_a_passkey_asks_only_people_with_one(store_url: str) -> None:
    """[GW-AMOUNT] routing runs the directory's passkey rule for the group."""
    found = people_directory(
        person_card("alice", keys=[person_card("bob")["keys"][1]]), person_card("bob")
    )
    w = World(store_url, found)
    doc = plan_doc(passkey_required=True)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(doc))
        await w.gateway.submit_vote(pending["askId"], passkey_vote(w.inbox("bob")[0]))
        approval = await w.gateway.poll(pending["askId"])
        assert humans(approval)[human("alice")] == ("excluded", "passkey")

    try:
        run(w, body)
    finally:
        w.close()


def test_missing_the_sla_escalates_to_an_eligible_delegate(store_url: str) -> None:
    """[GW-ESCALATE]"""
    found = people_directory(
        person_card("alice", delegates=[human("carol")]),
        person_card("bob"),
        person_card("carol", roles=["travel"]),
    )
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        w.clock.advance(899)
        await w.gateway.tick()
        assert w.inbox("carol") == []
        w.clock.advance(1)
        await w.gateway.tick()
        assert w.inbox("alice") == []
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]
        (notice,) = w.inbox("carol")
        with refused("NOT_ASKED"):
            await w.gateway.submit_vote(pending["askId"], vote(w.channel.delivered[0]))
        await w.gateway.submit_vote(pending["askId"], vote(notice))
        approval = await w.gateway.poll(pending["askId"])
        assert humans(approval) == {
            human("alice"): ("asked", f"missed SLA 900 s; escalated to delegates {human('carol')}"),
            human("bob"): ("not-reached", None),
            human("carol"): ("decided", "approve"),
        }
        assert check_approval(approval).approvers == [human("carol")]

    try:
        run(w, body)
    finally:
        w.close()


def test_an_ineligible_delegate_is_recorded_and_the_next_candidate_asked(store_url: str) -> None:
    """[GW-ESCALATE] the delegate's card goes through the same exclusion rules."""
    found = people_directory(
        person_card("alice", delegates=[human("erin")]),
        person_card("bob"),
        person_card("erin", "500", roles=["travel"]),
    )
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        w.clock.advance(900)
        await w.gateway.poll(pending["askId"])  # a poll acts on what is due, too
        (notice,) = w.inbox("bob")
        await w.gateway.submit_vote(pending["askId"], vote(notice))
        record = RoutingRecord.model_validate((await w.gateway.poll(pending["askId"]))["routing"])
        by_id = {h.id: h for h in record.humans}
        assert by_id[human("erin")].rule == "authority"
        assert (
            by_id[human("erin")].detail == f"delegate of {human('alice')}: limit 500 USD < 1000 USD"
        )
        assert by_id[human("alice")].detail == (
            f"missed SLA 900 s; escalated to the next candidate {human('bob')}"
        )

    try:
        run(w, body)
    finally:
        w.close()


def test_at_the_deadline_every_ask_is_withdrawn_and_the_gateway_says_no(world: World) -> None:
    """[GW-DEADLINE]"""
    world.directory = people_directory(person_card("alice"))
    world.restart()

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        w.clock.advance((DECIDE_BY - START).total_seconds())
        await w.gateway.tick()
        assert (await w.gateway.poll(pending["askId"]))["kind"] == "pending"
        w.clock.advance(0.001)
        await w.gateway.tick()
        approval = await w.gateway.poll(pending["askId"])
        parsed = check_approval(approval)
        assert (parsed.decision.value, parsed.withdrawn, parsed.votes) == ("reject", True, [])
        assert parsed.reason.startswith("deadline 2026-12-02T10:15:00.000Z passed with 0 of 1")
        assert humans(approval)[human("alice")] == (
            "asked",
            "missed SLA 900 s; nobody left to escalate to",
        )
        assert w.inbox("alice") == []

    run(world, body)


def test_a_long_poll_returns_as_soon_as_the_group_is_decided(world: World) -> None:
    """[GW-POLL]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=600))
        await _until(lambda: w.clock.sleepers > 0)
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        approval = await polling
        assert approval["decision"] == "approve"
        assert w.clock.now() == START

    run(world, body)


def test_a_long_poll_woken_by_the_deciding_vote_takes_the_stored_row(world: World) -> None:
    """[GW-POLL] The vote this gateway stored closed the ask: the poll it wakes returns
    that approval, as the store has it, without reading the ask again."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=600))
        await _until(lambda: w.clock.sleepers > 0)
        reads: list[str] = []
        get = w.gateway.asks.get

        def counted(ask_id: str) -> Any:
            reads.append(ask_id)
            return get(ask_id)

        w.gateway.asks.get = counted  # type: ignore[method-assign]
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        approval = await polling
        assert reads == [pending["askId"]], "the vote read it once; the poll read nothing"
        assert approval == await w.gateway.poll(pending["askId"])
        assert approval["decision"] == "approve"

    run(world, body)


def test_a_long_poll_returns_the_pending_vote_when_its_wait_is_over(world: World) -> None:
    """[GW-POLL]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=600))
        await _until(lambda: w.clock.sleepers > 0)
        w.clock.advance(599)
        await asyncio.sleep(0)
        assert not polling.done()
        w.clock.advance(1)
        assert await polling == pending

    run(world, body)


@pytest.mark.parametrize("turns", range(6))
def test_a_long_poll_cancelled_as_the_ask_changes_ends_cancelled(world: World, turns: int) -> None:
    """[GW-POLL] a poll cancelled while it wakes for a change (its caller shutting down)
    ends at once, whatever step of waking the cancellation meets; it never swallows the
    cancellation and waits on."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=600))
        await _until(lambda: w.clock.sleepers > 0)
        await w.gateway.decline(pending["askId"], w.inbox("alice")[0].human)
        for _ in range(turns):
            await asyncio.sleep(0)
        polling.cancel()
        done, _ = await asyncio.wait([polling], timeout=5)
        assert done == {polling}
        assert polling.cancelled() or polling.exception() is None

    run(world, body)


def test_withdraw_takes_the_ask_back_and_is_idempotent(world: World) -> None:
    """[GW-WITHDRAW]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.withdraw(pending["askId"], "transaction aborted")
        await w.gateway.withdraw(pending["askId"], "again")
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]
        approval = await w.gateway.poll(pending["askId"])
        parsed = check_approval(approval)
        assert (parsed.decision.value, parsed.withdrawn) == ("reject", True)
        assert parsed.reason == "withdrawn by its asker: transaction aborted"

    run(world, body)


def test_a_decided_ask_stays_decided_when_withdrawn(world: World) -> None:
    """[GW-WITHDRAW]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        decided = await w.gateway.poll(pending["askId"])
        await w.gateway.withdraw(pending["askId"], "too late")
        assert await w.gateway.poll(pending["askId"]) == decided

    run(world, body)


def test_a_new_gateway_on_the_same_store_continues_every_open_ask(world: World) -> None:
    """[GW-DURABLE]"""
    world.directory = people_directory(person_card("alice"), person_card("bob"))

    async def body(w: World) -> None:
        first = w.restart()
        pending = await first.ask(request())
        (notice,) = w.inbox("alice")
        del first
        second = w.restart()
        assert await second.poll(pending["askId"]) == pending
        w.clock.advance(900)
        await second.tick()  # alice missed her SLA: the new gateway asks bob
        (to_bob,) = w.inbox("bob")
        with refused("NOT_ASKED"):
            await second.submit_vote(pending["askId"], vote(notice))
        third = w.restart()
        await third.submit_vote(pending["askId"], vote(to_bob))
        approval = await w.restart().poll(pending["askId"])
        assert check_approval(approval).approvers == [human("bob")]

    run(world, body)


def test_two_gateways_asking_the_same_group_make_one_ask(world: World) -> None:
    """[GW-ASK-ONCE] [STORE-ASK-VERSION]"""

    async def body(w: World) -> None:
        first = w.gateway
        second = w.restart()
        one = await first.ask(request())
        two = await second.ask(request())
        assert one["askId"] == two["askId"]
        await first.submit_vote(one["askId"], vote(w.inbox("alice")[0]))
        assert (await second.poll(one["askId"]))["decision"] == "approve"

    run(world, body)


def test_asking_again_returns_the_ask_made_whoever_the_directory_holds_now(
    world: World,
) -> None:
    """[GW-ASK-ONCE] asked again by a gateway whose directory now holds nobody (a new ask
    would be rejected at once, [GW-FEW]): the ask first made is returned as it stands,
    and nobody is told anything new."""

    async def body(w: World) -> None:
        first = await w.gateway.ask(request())
        w.directory = people_directory()
        again = await w.restart().ask(request())
        assert (again["askId"], again["decideBy"]) == (first["askId"], first["decideBy"])
        assert "decision" not in again, "still pending, not the rejection a new ask gets"
        assert len(w.channel.delivered) == 1

    run(world, body)


@pytest.mark.parametrize("recheck", [5.0, None])
def test_a_long_poll_sees_a_vote_another_gateway_took_at_its_next_recheck(
    world: World, recheck: float | None
) -> None:
    """[GW-RECHECK] two gateway processes on one store: the vote reaches the first, while
    the second long-polls for 10 minutes. Rechecking every 5 s, the poll answers once the
    clock has moved 5 s; without, it waits for its own end (alice's SLA is later)."""

    async def body(w: World) -> None:
        taker = w.gateway
        poller = w.restart(recheck_seconds=recheck)
        pending = await poller.ask(request())
        poll = asyncio.create_task(poller.poll(pending["askId"], wait_seconds=600))
        await _until(lambda: w.clock.sleepers > 0)
        await taker.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        await _until(lambda: w.clock.sleepers > 0)
        assert not poll.done()  # the taker wakes only its own waiters
        w.clock.advance(5)
        if recheck is None:
            await _until(lambda: w.clock.sleepers > 0)
            assert not poll.done()
            w.clock.advance(595)
        await _until(poll.done)
        assert poll.result()["decision"] == "approve"

    run(world, body)


def test_a_recheck_is_a_positive_number_of_seconds_up_to_an_hour(world: World) -> None:
    for bad in (0.0, -1.0, 3601.0):
        with pytest.raises(ValueError, match="recheck_seconds"):
            world.restart(recheck_seconds=bad)


def test_the_background_loop_escalates_when_a_sla_runs_out(store_url: str) -> None:
    """[GW-ESCALATE] the loop sleeps on the clock until the earliest SLA or deadline."""
    found = people_directory(person_card("alice"), person_card("bob"))
    w = World(store_url, found)

    async def body(w: World) -> None:
        w.gateway.start()
        pending = await w.gateway.ask(request())
        assert [n.human for n in w.channel.delivered] == [human("alice")]
        await _until(lambda: w.clock.sleepers > 0)
        w.clock.advance(900)
        await _until(lambda: bool(w.inbox("bob")))
        await w.gateway.stop()
        # Nobody polled: the loop alone moved the ask from alice to bob.
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]
        assert [n.human for n in w.channel.delivered] == [human("alice"), human("bob")]

    try:
        run(w, body)
    finally:
        w.close()


@contextmanager
def refused(reason: str) -> Iterator[None]:
    """The block raises ResponseRefused with ``reason``."""
    with pytest.raises(ResponseRefused) as info:
        yield
    assert info.value.reason == reason, info.value


async def _until(condition: Callable[[], bool]) -> None:
    """Let other tasks and the store's workers run until ``condition`` holds (bounded)."""
    await until(condition)


def test_a_long_poll_hears_at_once_a_vote_another_gateway_took_on_postgresql_GW_LISTEN(
    world: World,
) -> None:
    """[GW-LISTEN] two gateway processes on one store, the poller's loop running: on
    PostgreSQL the taker's commit is announced (NOTIFY) and the poller, listening, wakes its
    long poll with the clock not moved at all; on SQLite there is nothing to hear, and the
    poll answers at its recheck."""

    async def body(w: World) -> None:
        taker = w.gateway
        poller = w.restart(recheck_seconds=5.0)
        poller.start()
        try:
            postgres = w.stores[-1].dialect == "postgresql"
            await _until(lambda: poller.listening == postgres)
            pending = await poller.ask(request())
            poll = asyncio.create_task(poller.poll(pending["askId"], wait_seconds=600))
            await _until(lambda: w.clock.sleepers > 0)
            await taker.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
            if not postgres:
                await _until(lambda: w.clock.sleepers > 0)
                assert not poll.done()
                w.clock.advance(5)
            await _until(poll.done)
            assert poll.result()["decision"] == "approve"
            assert poller.listen_failures == 0
        finally:
            await poller.stop()

    run(world, body)


def test_a_listener_whose_connection_is_killed_listens_again_and_counts_it_GW_LISTEN(
    world: World,
) -> None:
    """[GW-LISTEN] the server ends the listening session (pg_terminate_backend): the failure
    is counted and logged, and the gateway listens again and hears the next vote."""
    if world.stores[-1].dialect != "postgresql":
        pytest.skip("only PostgreSQL announces ask writes")

    async def body(w: World) -> None:
        taker = w.gateway
        poller = w.restart(recheck_seconds=5.0)
        poller.start()
        try:
            await _until(lambda: poller.listening)
            with w.stores[-1].transaction() as conn:
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query = 'LISTEN hatp_ask' AND pid <> pg_backend_pid()"
                    )
                )
            await _until(lambda: poller.listen_failures == 1)
            await _until(lambda: poller.listening)  # after a backoff of half a second
            pending = await poller.ask(request())
            poll = asyncio.create_task(poller.poll(pending["askId"], wait_seconds=600))
            await _until(lambda: w.clock.sleepers > 0)
            await taker.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
            await _until(poll.done)
            assert poll.result()["decision"] == "approve"
        finally:
            await poller.stop()

    run(world, body)


def test_withdrawing_a_transaction_finds_the_ask_still_being_stored_COORD_WITHDRAW(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-WITHDRAW] the transaction is withdrawn while its ask's write is still on a
    store worker: the gateway reads which asks are open after that write, in its own
    order, so the ask is withdrawn rather than left open until its deadline."""
    entered, release = threading.Event(), threading.Event()
    create = AskStore.create

    def slow_create(self: AskStore, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)
        return create(self, *args, **kwargs)

    monkeypatch.setattr(AskStore, "create", slow_create)

    async def body(w: World) -> None:
        asking = asyncio.create_task(w.gateway.ask(request()))
        assert await asyncio.to_thread(entered.wait, 30)
        withdrawing = asyncio.create_task(w.gateway.withdraw_transaction("txn-gw-0001", "ended"))
        # It waits for the write: one that read at once would have found nothing by now.
        await asyncio.wait({withdrawing}, timeout=0.2)
        assert not withdrawing.done()
        release.set()
        pending = await asking
        assert await withdrawing == [pending["askId"]]
        assert not AskStore(w.stores[-1]).get(pending["askId"]).is_open

    run(world, body)
