"""The Human Gateway asks people to approve one exact tool call and signs a CallApproval."""

from __future__ import annotations

import asyncio
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.people import (
    AGENT,
    DECIDE_BY,
    FINANCE,
    KEYS,
    PRINCIPAL,
    START,
    World,
    check_card,
    human,
    keyring,
    people_directory,
    person_card,
    request,
    run,
    vote,
)
from gateway.routes import GATEWAY_ID, GATEWAY_KEY
from hatp.clock import ManualClock, format_time, parse_time
from hatp.errors import AskUnknown, CallInvalid, ResponseRefused, VersionUnsupported
from hatp.evidence import call_digest, card_keyring, digest, tool_digest, verify
from hatp.gateway import (
    CallView,
    HumanGateway,
    TerminalChannel,
    call_view,
    render_call_text,
)
from hatp.gateway._view import AGENT_TEXT_LABEL
from hatp.model import (
    APPROVAL_ID_PATTERN,
    Amount,
    CallApproval,
    HumanCard,
    HumanVote,
    PendingVote,
    RoutingRecord,
)
from hatp.store import AskStore, Store

PAYMENTS = "https://payments.example"
TOOL = "send_payment"
ARGUMENTS = {"to": "acct-42", "amount": {"value": "1000.00", "currency": "USD"}}
DEFINITION = {
    "name": TOOL,
    "description": "Send money from the company account.",
    "inputSchema": {"type": "object"},
}


def call_request(**members: Any) -> dict[str, Any]:
    """The travel bot, for dana, asks finance to approve paying 1,000 USD; ``members``
    replace any member."""
    return {
        "hatpVersion": "0.1",
        "kind": "call-request",
        "requestId": "pay-0001",
        "requester": AGENT,
        "onBehalfOf": human("dana"),
        "call": {"server": PAYMENTS, "tool": TOOL, "arguments": ARGUMENTS},
        "toolDefinition": DEFINITION,
        "address": FINANCE,
        "action": "approve.spend",
        "amountPointer": "/amount",
        "price": None,
        "passkey": False,
        "reason": {"summary": "Pay the hotel invoice."},
        "decideBy": format_time(DECIDE_BY),
        "validSeconds": 300,
        **members,
    }


def with_arguments(arguments: dict[str, Any], **members: Any) -> dict[str, Any]:
    return call_request(call={"server": PAYMENTS, "tool": TOOL, "arguments": arguments}, **members)


def with_people(store_url: str, *names: str, limit: str = "10000") -> World:
    return World(store_url, people_directory(*(person_card(n, limit) for n in names)))


def humans(approval: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Each person of the final routing record: (result, rule or detail)."""
    record = RoutingRecord.model_validate(approval["routing"])
    return {h.id: (h.result.value, h.rule or h.detail) for h in record.humans}


def check_call_approval(approval: dict[str, Any]) -> CallApproval:
    """The gateway's signed word on the call: its signature, its votes bound to the terms
    and signed by the voters' card keys, the cards and the routing record it carries."""
    assert verify(approval, keyring()).issuer == GATEWAY_ID
    parsed = CallApproval.model_validate(approval)
    bound = digest(parsed.terms.to_wire())
    cards = {check_card(c): HumanCard.model_validate(c) for c in parsed.cards}
    for signed in parsed.votes:
        cast = HumanVote.model_validate(signed)
        assert (cast.ask_id, cast.txn_id, cast.plan_digest, cast.group_id) == (
            parsed.ask_id,
            parsed.terms.request_id,
            bound,
            "call",
        )
        assert verify(signed, card_keyring(cards[cast.human])).issuer == cast.human
    record = RoutingRecord.model_validate(approval["routing"])
    assert verify(approval["routing"], keyring()).issuer == GATEWAY_ID
    assert (record.txn_id, record.plan_digest, record.group_id) == (
        parsed.terms.request_id,
        bound,
        "call",
    )
    assert record.address == parsed.terms.address
    assert (record.plan_totals, record.checked) == (owed(parsed), owed(parsed))
    valid = timedelta(seconds=parsed.terms.valid_seconds)
    assert parse_time(parsed.expires_at) == parse_time(parsed.decided_at) + valid
    return parsed


def owed(approval: CallApproval) -> list[Amount]:
    """What the approvers had to cover: the amount and the price cap, the larger per currency."""
    terms = approval.terms
    most: dict[str, Amount] = {}
    price = None if terms.price is None else terms.price.max_amount
    for money in (terms.amount, price):
        if money is not None and (
            money.currency not in most or money.decimal > most[money.currency].decimal
        ):
            most[money.currency] = money
    return [most[c] for c in sorted(most)]


# --- approving a call -------------------------------------------------------------------


def test_an_approved_call_is_a_signed_call_approval_over_the_terms(world: World) -> None:
    """[GW-CALL-TERMS] [GW-CALL-APPROVAL] [GW-VOTE-SIGNED] [GW-ROUTING-FINAL]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        assert verify(pending, keyring()).issuer == GATEWAY_ID
        parsed = PendingVote.model_validate(pending)
        (notice,) = w.inbox("alice")
        assert notice.kind == "call"
        assert notice.payload == {
            "askId": parsed.ask_id,
            "txnId": "pay-0001",
            "planDigest": parsed.plan_digest,
            "groupId": "call",
            "human": human("alice"),
        }
        signed_vote = vote(notice)
        await w.gateway.submit_vote(parsed.ask_id, signed_vote)
        approval = await w.gateway.poll_call(parsed.ask_id)
        result = check_call_approval(approval)
        terms = result.terms
        assert terms.call_digest == call_digest(PAYMENTS, TOOL, ARGUMENTS)
        assert terms.tool_digest == tool_digest(DEFINITION)
        assert digest(terms.to_wire()) == parsed.plan_digest
        assert (terms.server, terms.tool, terms.requester, terms.on_behalf_of) == (
            PAYMENTS,
            TOOL,
            AGENT,
            human("dana"),
        )
        assert (terms.address, terms.action, terms.valid_seconds) == (
            FINANCE,
            "approve.spend",
            300,
        )
        assert (result.decision, result.approvers, result.withdrawn) == (
            "approve",
            [human("alice")],
            False,
        )
        assert result.votes == [signed_vote]
        assert [c["id"] for c in result.cards] == [human("alice")]
        assert result.approval_id.startswith("apv-")
        assert (result.decided_at, result.expires_at) == (
            "2026-12-02T09:00:00.000Z",
            "2026-12-02T09:05:00.000Z",
        )
        assert humans(approval) == {
            human("alice"): ("decided", "approve"),
            human("bob"): ("not-reached", None),
            human("dana"): ("excluded", "separation-of-duties"),
            human("erin"): ("excluded", "authority"),
        }
        assert await w.gateway.ask_call(call_request()) == approval

    run(world, body)


def test_the_approval_id_is_chosen_at_ask_time_and_kept(world: World) -> None:
    """[GW-CALL-APPROVAL] one id per ask, whatever the outcome and however often it is read."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        await w.gateway.withdraw(pending["askId"], "no longer needed")
        first = await w.gateway.poll_call(pending["askId"])
        again = await w.restart().poll_call(pending["askId"])
        assert first == again
        assert re.match(APPROVAL_ID_PATTERN, first["approvalId"])
        other = await w.gateway.ask_call(call_request(requestId="pay-0002"))
        await w.gateway.withdraw(other["askId"], "no longer needed")
        assert (await w.gateway.poll_call(other["askId"]))["approvalId"] != first["approvalId"]

    run(world, body)


def test_the_amount_is_read_from_the_arguments_not_stated_by_the_agent(world: World) -> None:
    """[GW-CALL-AMOUNT] 25,000 USD in the arguments is what authority is checked against,
    whatever the agent writes; a request that states an amount of its own is refused."""
    big = {"to": "acct-42", "amount": {"value": "25000", "currency": "USD"}}
    cheap = {"summary": "Only 5 USD, a formality. Amount: 5 USD."}

    async def body(w: World) -> None:
        with pytest.raises(CallInvalid) as info:
            await w.gateway.ask_call(with_arguments(big, amount={"value": "5", "currency": "USD"}))
        assert (info.value.reason, info.value.data["where"]) == ("SHAPE", "/amount")
        approval = await w.gateway.ask_call(with_arguments(big, reason=cheap))
        result = check_call_approval(approval)
        assert result.terms.amount is not None
        assert (result.terms.amount.value, result.terms.amount.currency) == ("25000", "USD")
        assert (result.decision, result.reason) == ("reject", "needs 1, only 0 eligible")
        assert humans(approval)[human("alice")] == ("excluded", "authority")
        assert w.channel.delivered == []

    run(world, body)


def test_authority_covers_the_price_cap_too(world: World) -> None:
    """[GW-CALL-ROUTE] a 1,000 USD call capped at a price of 12,000 USD needs an approver
    who may approve 12,000 USD, as the tool server checks ([GATE-AUTHORITY])."""
    cap = {"maxAmount": {"value": "12000", "currency": "USD"}, "payTo": "0xabc"}
    small = {"maxAmount": {"value": "0.50", "currency": "USD"}, "payTo": "0xabc"}

    async def body(w: World) -> None:
        approval = await w.gateway.ask_call(call_request(price=cap))
        result = check_call_approval(approval)
        assert (result.decision, result.reason) == ("reject", "needs 1, only 0 eligible")
        assert humans(approval)[human("alice")] == ("excluded", "authority")
        record = RoutingRecord.model_validate(approval["routing"])
        assert [str(a) for a in record.checked] == ["12000 USD"]
        pending = await w.gateway.ask_call(call_request(requestId="pay-0002", price=small))
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        record = RoutingRecord.model_validate(
            (await w.gateway.poll_call(pending["askId"]))["routing"]
        )
        assert [str(a) for a in record.checked] == ["1000.00 USD"]

    run(world, body)


def test_the_approver_sees_the_amount_the_gateway_read(world: World) -> None:
    """[GW-CALL-AMOUNT] [GW-CALL-VIEW] [GW-VIEW-AGENT-TEXT]"""
    arguments = {"to": "acct-42", "amount": {"value": 2140, "currency": "USD"}}
    reason = {"summary": "Small refund.\nYou approve spending: 1 USD"}

    async def body(w: World) -> None:
        await w.gateway.ask_call(with_arguments(arguments, reason=reason))
        (notice,) = w.inbox("alice")
        view = notice.view
        assert isinstance(view, CallView)
        assert (view.amount, view.amount_pointer) == ("2,140 USD", "/amount")
        assert (view.server, view.tool, view.arguments) == (PAYMENTS, TOOL, arguments)
        assert (view.requester, view.on_behalf_of) == (AGENT, human("dana"))
        assert view.tool_description == DEFINITION["description"]
        assert view.agent_text == reason["summary"]
        text = render_call_text(view)
        lines = text.splitlines()
        assert (
            "You approve spending: 2,140 USD (read by the gateway from the arguments at '/amount')"
            in lines
        )
        assert "  | You approve spending: 1 USD" in lines
        assert lines.index(AGENT_TEXT_LABEL) < lines.index("  | You approve spending: 1 USD")

    run(world, body)


def test_a_quorum_of_two_needs_two_distinct_people(store_url: str) -> None:
    """[GW-QUORUM] [GW-VOTE-ONCE] 2-of-3: one person's approval, however often sent, is not two."""
    w = with_people(store_url, "alice", "bob", "carol")

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request(address=FINANCE + "?quorum=2-of-3"))
        ask_id = pending["askId"]
        assert [n.human for n in w.channel.delivered] == [human("alice"), human("bob")]
        alice = w.inbox("alice")[0]
        await w.gateway.submit_vote(ask_id, vote(alice))
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(ask_id, vote(alice, at=START + timedelta(seconds=1)))
        assert info.value.reason == "TWICE"
        assert (await w.gateway.poll_call(ask_id))["kind"] == "pending"
        await w.gateway.submit_vote(ask_id, vote(w.inbox("bob")[0]))
        result = check_call_approval(await w.gateway.poll_call(ask_id))
        assert (result.decision, result.approvers) == ("approve", [human("alice"), human("bob")])
        assert len({c["id"] for c in result.cards}) == 2

    try:
        run(w, body)
    finally:
        w.close()


def test_the_person_the_agent_acts_for_is_never_asked(store_url: str) -> None:
    """[GW-CALL-ROUTE] [DIR-SOD] dana (onBehalfOf) and frank (the agent's principal) rank
    first by authority, yet neither is asked; bob is."""
    found = people_directory(
        person_card("dana", "50000"), person_card("frank", "50000"), person_card("bob")
    )
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        assert [n.human for n in w.channel.delivered] == [human("bob")]
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0]))
        approval = await w.gateway.poll_call(pending["askId"])
        assert check_call_approval(approval).approvers == [human("bob")]
        assert humans(approval)[human("dana")] == ("excluded", "separation-of-duties")
        assert humans(approval)[PRINCIPAL] == ("excluded", "separation-of-duties")

    try:
        run(w, body)
    finally:
        w.close()


def test_a_call_that_requires_a_passkey_asks_only_people_with_one(store_url: str) -> None:
    """[GW-CALL-ROUTE] alice has no passkey on her card: passed over, bob asked."""
    found = people_directory(
        person_card("alice", keys=[KEYS["alice"].public.to_jwk()]), person_card("bob")
    )
    w = World(store_url, found)

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request(passkey=True))
        assert [n.human for n in w.channel.delivered] == [human("bob")]
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0]))
        approval = await w.gateway.poll_call(pending["askId"])
        assert humans(approval)[human("alice")] == ("excluded", "passkey")

    try:
        run(w, body)
    finally:
        w.close()


def test_one_reject_is_a_signed_reject(store_url: str) -> None:
    """[GW-REJECT]"""
    w = with_people(store_url, "alice", "bob", "carol")

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request(address=FINANCE + "?quorum=2-of-3"))
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("bob")[0], "reject"))
        result = check_call_approval(await w.gateway.poll_call(pending["askId"]))
        assert (result.decision, result.approvers, result.withdrawn) == ("reject", [], False)
        assert result.reason == f"{human('bob')} rejected"
        assert len(result.votes) == 2

    try:
        run(w, body)
    finally:
        w.close()


def test_at_the_deadline_the_call_is_withdrawn_and_rejected(world: World) -> None:
    """[GW-DEADLINE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        w.clock.advance((DECIDE_BY - START).total_seconds() + 0.001)
        await w.gateway.tick()
        result = check_call_approval(await w.gateway.poll_call(pending["askId"]))
        assert (result.decision, result.withdrawn, result.votes) == ("reject", True, [])
        assert result.reason.startswith("deadline 2026-12-02T10:15:00.000Z passed with 0 of 1")
        assert w.inbox("alice") == [] and w.inbox("bob") == []

    run(world, body)


def test_withdrawing_a_call_ask_is_a_withdrawn_reject(world: World) -> None:
    """[GW-WITHDRAW]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        await w.gateway.withdraw(pending["askId"], "the agent gave up")
        await w.gateway.withdraw(pending["askId"], "again")
        result = check_call_approval(await w.gateway.poll_call(pending["askId"]))
        assert (result.decision, result.withdrawn) == ("reject", True)
        assert result.reason == "withdrawn by its asker: the agent gave up"
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]

    run(world, body)


def test_a_missed_sla_escalates_and_a_new_gateway_continues(world: World) -> None:
    """[GW-ESCALATE] [GW-DURABLE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        w.clock.advance(900)
        second = w.restart()
        await second.tick()
        assert w.inbox("alice") == []
        await second.submit_vote(pending["askId"], vote(w.inbox("bob")[0]))
        approval = await w.restart().poll_call(pending["askId"])
        assert check_call_approval(approval).approvers == [human("bob")]
        assert humans(approval)[human("alice")] == (
            "asked",
            f"missed SLA 900 s; escalated to the next candidate {human('bob')}",
        )

    run(world, body)


def test_too_few_eligible_people_is_an_immediate_reject(world: World) -> None:
    """[GW-FEW]"""

    async def body(w: World) -> None:
        approval = await w.gateway.ask_call(call_request(address=FINANCE + "?quorum=3-of-4"))
        result = check_call_approval(approval)
        assert (result.decision, result.reason) == ("reject", "needs 3, only 2 eligible")
        assert w.channel.delivered == []

    run(world, body)


def test_asking_again_with_the_same_terms_is_the_same_ask(world: World) -> None:
    """[GW-ASK-ONCE] the same requestId and terms, from any gateway process, is one ask;
    other arguments under the same requestId are other terms, so another ask."""

    async def body(w: World) -> None:
        one = await w.gateway.ask_call(call_request())
        two = await w.restart().ask_call(call_request(reason={"summary": "asking again"}))
        assert two["askId"] == one["askId"]
        assert len(w.channel.delivered) == 1
        other = {**ARGUMENTS, "to": "acct-666"}
        three = await w.gateway.ask_call(with_arguments(other))
        assert three["askId"] != one["askId"]
        assert three["planDigest"] != one["planDigest"]

    run(world, body)


def test_a_call_ask_takes_votes_not_answers(world: World) -> None:
    """[GW-VOTE-SHAPE] and poll_call is for call asks only, not an approval group's."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_answer(pending["askId"], human("alice"), "yes")
        assert info.value.reason == "WRONG_KIND"
        with pytest.raises(AskUnknown):
            await w.gateway.poll_call("ask-does-not-exist")
        group = await w.gateway.ask(request())
        with pytest.raises(AskUnknown) as info:
            await w.gateway.poll_call(group["askId"])
        assert info.value.message.endswith("poll it with poll")
        for wrong in (w.gateway.poll, w.gateway.poll_question):
            with pytest.raises(AskUnknown) as info:
                await wrong(pending["askId"])
            assert "poll it with poll_call" in info.value.message

    run(world, body)


def test_a_vote_for_other_terms_is_refused(world: World) -> None:
    """[GW-VOTE-BINDS] a vote carried over from another call does not count on this one."""

    async def body(w: World) -> None:
        first = await w.gateway.ask_call(call_request())
        other = await w.gateway.ask_call(call_request(requestId="pay-0002"))
        (to_first, to_other) = w.inbox("alice")
        assert to_other.ask_id == other["askId"]
        forged = vote(to_first)
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(other["askId"], forged)
        assert info.value.reason == "MISMATCH"
        assert first["askId"] != other["askId"]

    run(world, body)


# --- refusals ---------------------------------------------------------------------------


def _arguments(arguments: Any) -> dict[str, Any]:
    return {"call": {"server": PAYMENTS, "tool": TOOL, "arguments": arguments}}


REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "a null requestId": ({"requestId": None}, "SHAPE", "/requestId"),
    "a stated amount": ({"amount": {"value": "5", "currency": "USD"}}, "SHAPE", "/amount"),
    "requester not an agent": ({"requester": human("dana")}, "SHAPE", "/requester"),
    "on behalf of a role": ({"onBehalfOf": FINANCE}, "SHAPE", "/onBehalfOf"),
    "arguments not an object": (_arguments(["a"]), "SHAPE", "/call/arguments"),
    "bad tool name": (
        {"call": {"server": PAYMENTS, "tool": "send payment", "arguments": {}}},
        "SHAPE",
        "/call/tool",
    ),
    "valid for no time": ({"validSeconds": 0}, "SHAPE", "/validSeconds"),
    "no canonical form": (
        {**_arguments({"n": 2**64}), "amountPointer": None},
        "SHAPE",
        "/call/arguments",
    ),
    "nothing at the pointer": ({"amountPointer": "/total"}, "AMOUNT", "/total"),
    "a float amount": (
        _arguments({"amount": {"value": 10.5, "currency": "USD"}}),
        "AMOUNT",
        "/amount",
    ),
    "a negative amount": (
        _arguments({"amount": {"value": "-5", "currency": "USD"}}),
        "AMOUNT",
        "/amount",
    ),
    "an amount with more members": (
        _arguments({"amount": {"value": "5", "currency": "USD", "fx": "1"}}),
        "AMOUNT",
        "/amount",
    ),
    "another tool's definition": (
        {"toolDefinition": {**DEFINITION, "name": "read_balance"}},
        "DEFINITION",
        "/toolDefinition/name",
    ),
    "a definition without a name": (
        {"toolDefinition": {"description": "x"}},
        "DEFINITION",
        "/toolDefinition/name",
    ),
    "an agent's address": ({"address": "agent://acme.com/approver-bot"}, "ADDRESS", "/address"),
    "no address at all": ({"address": "finance"}, "ADDRESS", "/address"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_request_that_cannot_be_read_is_refused_and_nothing_stored(
    world: World, case: str
) -> None:
    """[CALL-SHAPE] [CALL-AMOUNT] [GW-CALL-AMOUNT] [CALL-DEFINITION]"""
    members, reason, where = REFUSED[case]

    async def body(w: World) -> None:
        with pytest.raises(CallInvalid) as info:
            await w.gateway.ask_call(call_request(**members))
        assert (info.value.reason, info.value.data["where"]) == (reason, where)
        assert info.value.message.startswith(where) or reason == "AMOUNT"
        assert AskStore(w.stores[-1]).open_asks() == []
        assert w.channel.delivered == []

    run(world, body)


def test_a_request_that_is_not_an_object_or_of_another_version_is_refused(world: World) -> None:
    """[CALL-SHAPE]"""

    async def body(w: World) -> None:
        with pytest.raises(CallInvalid) as info:
            await w.gateway.ask_call(["not", "a", "request"])  # type: ignore[arg-type]
        assert (info.value.reason, info.value.data["where"]) == ("SHAPE", "")
        with pytest.raises(VersionUnsupported):
            await w.gateway.ask_call(call_request(hatpVersion="9.9"))
        with pytest.raises(CallInvalid) as info:
            await w.gateway.ask_call(call_request(kind="call-approval"))
        assert info.value.data["where"] == "/kind"
        assert AskStore(w.stores[-1]).open_asks() == []

    run(world, body)


# --- what the approver sees -------------------------------------------------------------


def test_strings_in_the_arguments_cannot_forge_a_line() -> None:
    """[GW-VIEW-ESCAPE] [GW-CALL-VIEW] a newline or a terminal escape in an argument stays
    inside its JSON string, behind the bar; the tool's description is labelled as the
    server's."""
    sneaky = "x\nYou approve spending: 1 USD\x1b[2K"
    view = call_view(
        call_request(
            call={"server": PAYMENTS, "tool": TOOL, "arguments": {**ARGUMENTS, "memo": sneaky}},
            toolDefinition={**DEFINITION, "description": "Sends money.\nApproved already."},
        )
    )
    lines = render_call_text(view).splitlines()
    assert "You approve spending: 1 USD" not in lines
    assert '  |   "memo": "x\\nYou approve spending: 1 USD\\u001b[2K",' in lines
    assert all(line.isprintable() for line in lines)
    label = "Tool description (the tool server's words, not checked by hatp):"
    at = lines.index(label)
    assert lines[at + 1 : at + 3] == ["  | Sends money.", "  | Approved already."]


@given(memo=st.text(max_size=100), reason=st.text(min_size=1, max_size=100))
def test_no_argument_or_reason_adds_hides_or_changes_a_gateway_line(memo: str, reason: str) -> None:
    """[GW-VIEW-ESCAPE] [GW-VIEW-AGENT-TEXT] the lines not behind the bar are the same
    (but for the digests) whatever the agent puts in an argument or its reason."""

    def gateway_lines(memo: str, reason: str) -> list[str]:
        arguments = {**ARGUMENTS, "memo": memo}
        view = call_view(with_arguments(arguments, reason={"summary": reason}))
        lines = render_call_text(view).splitlines()
        assert all(line.isprintable() for line in lines)
        # The digests are of the arguments: the one thing meant to change.
        return [re.sub(r"sha256:\S+", "sha256:…", line) for line in lines if line[:4] != "  | "]

    assert gateway_lines(memo, reason) == gateway_lines("", "x")


def test_a_call_without_an_amount_definition_or_reason_says_so() -> None:
    """[GW-CALL-VIEW] and the price cap and payee, when set, are shown."""
    view = call_view(
        call_request(
            amountPointer=None,
            toolDefinition=None,
            reason=None,
            passkey=True,
            price={"maxAmount": {"value": "0.50", "currency": "USD"}, "payTo": "0xabc"},
        )
    )
    text = render_call_text(view)
    assert (view.amount, view.tool_digest, view.agent_text) == (None, None, None)
    assert "You approve spending: no amount is named in this call\n" in text
    assert "  no tool definition bound\n" in text
    assert "Price: at most 0.50 USD, paid to 0xabc\n" in text
    assert ", passkey required\n" in text
    assert AGENT_TEXT_LABEL not in text


# --- the terminal -----------------------------------------------------------------------


def test_a_person_at_the_terminal_approves_a_call(store: Store) -> None:
    """[GW-TERMINAL] [GW-CALL-VIEW] bob reads the call's view on his terminal and types
    approve; his signed vote decides the call."""
    clock = ManualClock(START)
    found = people_directory(person_card("bob", channels=["terminal"]))
    out = io.StringIO()
    terminal = TerminalChannel(
        io.StringIO("maybe\napprove\n"), out, {human("bob"): KEYS["bob"]}, clock
    )
    gateway = HumanGateway(
        GATEWAY_ID,
        GATEWAY_KEY,
        found,
        AskStore(store),
        {"terminal": terminal},
        clock,
        initiator_principals={AGENT: PRINCIPAL},
    )

    async def scenario() -> tuple[dict[str, Any], CallView]:
        pending = await gateway.ask_call(call_request())
        await terminal.idle()
        return await gateway.poll_call(pending["askId"]), call_view(call_request())

    approval, view = asyncio.run(scenario())
    result = check_call_approval(approval)
    assert (result.decision, result.approvers) == ("approve", [human("bob")])
    screen = out.getvalue()
    assert render_call_text(view).rstrip("\n") in screen
    assert "Type approve, reject or decline." in screen
    assert screen.endswith("approve / reject / decline? Recorded: approve.\n")
