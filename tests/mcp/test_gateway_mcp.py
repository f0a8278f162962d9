"""The Human Gateway and Directory as an MCP server, and the clients that reach them.

acme's real gateway (``gateway_world``) is served with
:func:`hatp.mcp._gateway_server.serve_gateway` and reached over an in-process
MCP client: by a coordinator through :func:`hatp.mcp._gateway_client.mcp_gateway`
(a whole trip commits), by an agent asking for a call approval or an answer,
and by a plain agent through the ``request_call_approval`` tool, whose
``input_required`` loop the client drives itself while people take their
time (on a simulated clock: the clock moves only when everything waits).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import mcp_types as types
import pytest
from mcp.client import Client, advertise
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from gateway_world import (
    ARGS,
    DIRECTORY,
    GATEWAY,
    TRAVELLER,
    call_request,
    gateway_server,
    open_world,
    payments_server,
)
from hatp.clock import ManualClock, SystemClock, format_time
from hatp.coordinator import ApprovalRequest
from hatp.demo import TripWorld, trip_plan
from hatp.demo._time import simulate
from hatp.demo.trip import FINANCE_ADDRESS, PARTICIPANT_IDS
from hatp.directory import verify_card
from hatp.errors import (
    AskInvalid,
    AskUnknown,
    AskWithdrawn,
    CallInvalid,
    PeerIncompatible,
    PeerUnavailable,
    ResponseRefused,
)
from hatp.evidence import Keyring, digest, verify
from hatp.gateway import MemoryChannel, Person
from hatp.mcp import (
    CALL_APPROVAL_TOOL,
    EXTENSION_ID,
    METHODS,
    HatpAdvert,
    McpGateway,
    await_call_approval,
    call_gated,
    mcp_directory,
    mcp_gateway,
    serve_gateway,
)
from hatp.mcp._rpc import request
from hatp.model import TxnState, parse_plan
from hatp.store import DecisionLog, open_store
from hatp.version import PROTOCOL_VERSION

T = TypeVar("T")
BOUND = 30.0
START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
#: A call request missing nearly everything.
BAD_CALL = {"hatpVersion": PROTOCOL_VERSION, "kind": "call-request"}


@dataclass
class Served:
    """acme's gateway behind an MCP server, with the people it asks."""

    world: TripWorld
    people: MemoryChannel
    server: MCPServer


@pytest.fixture
def real_world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", SystemClock()) as opened:
        yield opened


@pytest.fixture
def sim_world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", ManualClock(START)) as opened:
        yield opened


def people(world: TripWorld, decision: str = "approve", after: float = 0.0) -> MemoryChannel:
    """Every acme person does ``decision`` after ``after`` seconds; asked a question, they
    answer "aisle"."""
    scripted = {
        pid: Person(key, decision, after, answer="aisle")  # type: ignore[arg-type]
        for pid, key in world.people.items()
    }
    return MemoryChannel("terminal", clock=world.clock, people=scripted)


@asynccontextmanager
async def served(
    world: TripWorld, decision: str = "approve", *, after: float = 0.0, directory: bool = True
) -> AsyncIterator[Served]:
    channel = people(world, decision, after)
    gateway = world.gateway(channel)
    gateway.start()
    try:
        yield Served(world, channel, gateway_server(world, gateway, directory=directory))
    finally:
        await gateway.stop()
        await channel.close()


@asynccontextmanager
async def remote(
    world: TripWorld, decision: str = "approve", *, after: float = 0.0
) -> AsyncIterator[McpGateway]:
    """The gateway as the coordinator reaches it: over MCP, its advert checked."""
    async with (
        served(world, decision, after=after) as up,
        Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
    ):
        yield await mcp_gateway(GATEWAY, client, world.keyring)


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


def simulated(clock: ManualClock, coro: Awaitable[T], step: float = 10.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(simulate(clock, coro, step), BOUND)

    return asyncio.run(bounded())


def approval_request(world: TripWorld, txn_id: str = "trip-mcp-1") -> ApprovalRequest:
    decide_by = world.clock.now() + timedelta(minutes=15)
    plan = parse_plan(trip_plan(txn_id, decide_by=decide_by))
    return ApprovalRequest(txn_id, plan, digest(plan.to_wire()), plan.approvals[0], decide_by)


def question(world: TripWorld, **members: Any) -> dict[str, Any]:
    return {
        "hatpVersion": "0.1",
        "kind": "question",
        "questionId": "q-seat-1",
        "asker": "agent://acme.com/travel-bot",
        "onBehalfOf": TRAVELLER,
        "address": "human://acme.com/bob",
        "type": "choose",
        "options": ["window", "aisle"],
        "prompt": {"summary": "Window or aisle?"},
        "decideBy": format_time(world.clock.now() + timedelta(minutes=10)),
        **members,
    }


# -- the advert ----------------------------------------------------------------


def test_the_gateway_advertises_its_roles_id_and_keys(real_world: TripWorld) -> None:
    """[MCP-ADVERTISED] roles gateway and directory, the gateway's id and its key."""

    async def go() -> McpGateway:
        async with remote(real_world) as gateway:
            return gateway

    gateway = run(go())
    assert gateway.gateway_id == GATEWAY
    assert gateway.advert.roles == ["gateway", "directory"]
    assert gateway.advert.keys == [real_world.keys["gateway"].public.to_jwk()]


def test_a_server_without_the_extension_is_refused_as_no_gateway(
    real_world: TripWorld,
) -> None:
    """[MCP-ADVERTISED] an ordinary MCP server is not a gateway: PEER_INCOMPATIBLE."""
    payments = payments_server(real_world)

    async def go() -> PeerIncompatible:
        async with Client(payments.server, extensions=[advertise(EXTENSION_ID)]) as client:
            with pytest.raises(PeerIncompatible) as refused:
                await mcp_gateway(GATEWAY, client, real_world.keyring)
            return refused.value

    assert run(go()).reason == "NO_EXTENSION"


@pytest.mark.parametrize(
    ("named", "trusting", "reason"),
    [
        ("https://gateway.other.example", True, "IDENTITY"),
        (GATEWAY, False, "KEY_UNTRUSTED"),
    ],
)
def test_a_gateway_that_is_not_the_one_named_or_trusted_is_refused(
    real_world: TripWorld, named: str, trusting: bool, reason: str
) -> None:
    """[MCP-IDENTITY] [MCP-KEYS]"""
    keyring = real_world.keyring if trusting else Keyring()

    async def go() -> PeerIncompatible:
        async with (
            served(real_world) as up,
            Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
        ):
            with pytest.raises(PeerIncompatible) as refused:
                await mcp_gateway(named, client, keyring)
            return refused.value

    assert run(go()).reason == reason


def test_a_gateway_without_a_directory_is_refused_as_a_directory(real_world: TripWorld) -> None:
    """[MCP-ROLE] no directory served: neither the role nor directory/resolve."""

    async def go() -> tuple[PeerIncompatible, PeerIncompatible]:
        async with (
            served(real_world, directory=False) as up,
            Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
        ):
            with pytest.raises(PeerIncompatible) as role:
                await mcp_directory(GATEWAY, client, real_world.keyring)
            with pytest.raises(PeerIncompatible) as method:
                await request(
                    client,
                    METHODS["directory/resolve"],
                    {
                        "address": FINANCE_ADDRESS,
                        "action": "approve.spend",
                        "onBehalfOf": TRAVELLER,
                    },
                    server=GATEWAY,
                )
            return role.value, method.value

    role, method = run(go())
    assert (role.reason, method.reason) == ("ROLE", "METHOD")


def test_serving_a_directory_under_another_id_is_refused(real_world: TripWorld) -> None:
    gateway = real_world.gateway(people(real_world))
    with pytest.raises(ValueError, match="not the directory's issuer"):
        serve_gateway(
            MCPServer("x"),
            gateway,
            keys=[real_world.keys["gateway"].public],
            directory=real_world.directory,
            directory_id="https://directory.other.example",
        )


# -- the coordinator's side ----------------------------------------------------------


def test_a_trip_commits_with_its_gateway_reached_over_mcp(
    real_world: TripWorld, tmp_path: Path
) -> None:
    """[MCP-GATEWAY] the coordinator asks and polls an McpGateway as it would the gateway."""
    store = open_store(tmp_path / "coordinator.db")
    log = DecisionLog(store)

    async def go() -> Any:
        async with remote(real_world) as gateway:
            coordinator = real_world.coordinator(log, gateway, poll_seconds=1.0)
            plan = trip_plan(
                "trip-over-mcp", decide_by=real_world.clock.now() + timedelta(minutes=15)
            )
            return await coordinator.run(plan)

    try:
        outcome = run(go())
    finally:
        store.close()
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert real_world.effects(outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "whole")


def test_ask_poll_estimate_tighten_and_withdraw_over_mcp(real_world: TripWorld) -> None:
    """[MCP-GATEWAY] every coordinator method; answers are the gateway's signed documents."""
    asked = approval_request(real_world)
    earlier = asked.decide_by - timedelta(minutes=5)

    async def go() -> dict[str, Any]:
        async with remote(real_world, "never") as gateway:
            out = {"estimate": await gateway.estimate(asked), "pending": await gateway.ask(asked)}
            ask_id = out["pending"]["askId"]
            out["again"] = await gateway.ask(asked)
            out["polled"] = await gateway.poll(ask_id, wait_seconds=0.0)
            out["tightened"] = await gateway.tighten(ask_id, earlier)
            await gateway.withdraw(ask_id, "the trip was called off")
            out["final"] = await gateway.poll(ask_id)
            return out

    out = run(go())
    keyring = real_world.keyring
    for name in ("estimate", "pending", "polled", "tightened", "final"):
        verify(out[name], keyring)  # signed by the gateway, verifiable as sent
    assert out["estimate"]["worstSeconds"] > 0
    assert out["pending"]["kind"] == "pending" and out["again"]["askId"] == out["pending"]["askId"]
    assert out["polled"]["kind"] == "pending"
    assert out["tightened"]["decideBy"] == format_time(earlier)
    assert (out["final"]["kind"], out["final"]["decision"]) == ("approval", "reject")


def test_every_open_ask_of_a_transaction_is_withdrawn_over_mcp_COORD_WITHDRAW(
    real_world: TripWorld,
) -> None:
    """[MCP-GATEWAY] [COORD-WITHDRAW] txn/withdrawAll: the ask the recovering coordinator
    never logged is withdrawn by its transaction; asked again, nothing is left open."""
    asked = approval_request(real_world)

    async def go() -> tuple[dict[str, Any], list[str], dict[str, Any], list[str]]:
        async with remote(real_world, "never") as gateway:
            pending = await gateway.ask(asked)
            withdrawn = await gateway.withdraw_transaction(asked.txn_id, "presumed abort")
            final = await gateway.poll(pending["askId"])
            again = await gateway.withdraw_transaction(asked.txn_id, "presumed abort")
            return pending, withdrawn, final, again

    pending, withdrawn, final, again = run(go())
    assert withdrawn == [pending["askId"]] and again == []
    verify(final, real_world.keyring)
    assert (final["kind"], final["decision"]) == ("approval", "reject")


def test_the_gateway_refusals_come_back_as_the_same_typed_errors(real_world: TripWorld) -> None:
    """[MCP-GATEWAY] unknown ask, unknown group, wrong digest, a question tightened."""
    asked = approval_request(real_world)
    other_group = ApprovalRequest(
        asked.txn_id,
        asked.plan,
        asked.plan_digest,
        asked.group.model_copy(update={"group_id": "legal"}),
        asked.decide_by,
    )
    wrong_digest = ApprovalRequest(
        asked.txn_id, asked.plan, "sha256:" + "A" * 43, asked.group, asked.decide_by
    )

    async def go() -> list[Exception]:
        errors: list[Exception] = []
        async with remote(real_world, "never") as gateway:
            for attempt in (
                gateway.poll("ask-nosuchask0000000000000"),
                gateway.ask(other_group),
                gateway.ask(wrong_digest),
                gateway.ask_call(BAD_CALL),
            ):
                with pytest.raises(Exception) as refused:
                    await attempt
                errors.append(refused.value)
            pending = await gateway.ask_question(question(real_world))
            with pytest.raises(ResponseRefused) as wrong_kind:
                await gateway.tighten(pending["askId"], real_world.clock.now())
            errors.append(wrong_kind.value)
        return errors

    unknown, group, mismatch, bad_call, wrong_kind = run(go())
    assert isinstance(unknown, AskUnknown)
    assert isinstance(group, AskInvalid) and group.data["reason"] == "UNKNOWN_GROUP"
    assert isinstance(mismatch, AskInvalid) and mismatch.data["reason"] == "DIGEST_MISMATCH"
    assert isinstance(bad_call, CallInvalid)
    assert isinstance(wrong_kind, ResponseRefused) and wrong_kind.data["reason"] == "WRONG_KIND"


def test_params_that_do_not_fit_are_refused_naming_the_member(real_world: TripWorld) -> None:
    """[MCP-METHOD] a bad decideBy, a negative wait, an unknown member, a wrong kind, an
    amount that is not a decimal."""
    bad = [
        ("txn/tighten", {"askId": "ask-1", "decideBy": "tomorrow"}),
        ("txn/voted", {"askId": "ask-1", "waitSeconds": -1}),
        ("txn/withdraw", {"askId": "ask-1", "reason": "x", "force": True}),
        ("ask/answered", {"askId": "ask-1", "kind": "approval"}),
        (
            "directory/resolve",
            {
                "address": FINANCE_ADDRESS,
                "action": "a",
                "onBehalfOf": TRAVELLER,
                "amounts": {"USD": "lots"},
            },
        ),
    ]

    async def go() -> list[PeerIncompatible]:
        out = []
        async with (
            served(real_world) as up,
            Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
        ):
            for name, params in bad:
                with pytest.raises(PeerIncompatible) as refused:
                    await request(client, METHODS[name], params, server=GATEWAY)
                out.append(refused.value)
        return out

    for refused in run(go()):
        assert refused.reason == "METHOD"


def test_no_answer_from_the_gateway_is_unavailable_not_a_refusal(real_world: TripWorld) -> None:
    """[MCP-GATEWAY] a closed connection: PEER_UNAVAILABLE, so not approved."""

    async def go() -> PeerUnavailable:
        async with remote(real_world) as gateway:
            pass
        with pytest.raises(PeerUnavailable) as silent:
            await gateway.poll("ask-1")
        return silent.value

    assert run(go()).data["gateway"] == GATEWAY


# -- an agent's side -------------------------------------------------------------------


def test_a_question_is_asked_and_answered_over_mcp(real_world: TripWorld) -> None:
    """[MCP-GATEWAY] ask/question then ask/answered: bob's signed answer."""

    async def go() -> dict[str, Any]:
        async with remote(real_world) as gateway:
            answer = await gateway.ask_question(question(real_world))
            while answer["kind"] == "pending":
                answer = await gateway.poll_question(answer["askId"], wait_seconds=5.0)
            return answer

    answer = run(go())
    verify(answer, real_world.keyring)
    assert (answer["kind"], answer["value"], answer["answeredBy"]) == (
        "answer",
        "aisle",
        "human://acme.com/bob",
    )


def test_an_unanswered_question_comes_back_withdrawn(sim_world: TripWorld) -> None:
    """[MCP-GATEWAY] [MCP-LONG-POLL] polled 30 s at a time until the deadline passes with
    nobody answering: ASK_WITHDRAWN."""
    assert isinstance(sim_world.clock, ManualClock)

    async def go() -> AskWithdrawn:
        async with remote(sim_world, "never") as gateway:
            pending = await gateway.ask_question(question(sim_world))
            with pytest.raises(AskWithdrawn) as withdrawn:
                while True:
                    await gateway.poll_question(pending["askId"], wait_seconds=30.0)
            return withdrawn.value

    assert isinstance(simulated(sim_world.clock, go(), step=60.0), AskWithdrawn)


def test_a_call_approved_over_mcp_runs_the_gated_tool(real_world: TripWorld) -> None:
    """[MCP-GATEWAY] [MCP-GATE] ask/call, ask/answered, then the payments server runs it."""
    payments = payments_server(real_world)

    async def go() -> Any:
        async with remote(real_world) as gateway:
            listed = await payments.listed("charge_card")
            request = call_request(real_world.clock, payments.gate, definition=listed)
            answer = await gateway.ask_call(request)
            while answer["kind"] == "pending":
                answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
        async with Client(payments.server) as client:
            return answer, await call_gated(client, "charge_card", ARGS, answer)

    approval, result = run(go())
    assert approval["decision"] == "approve"
    assert not result.is_error and len(payments.ran) == 1


# -- a plain agent: the input-required tool ----------------------------------------------


def test_a_plain_agent_waits_out_the_people_through_input_required_rounds(
    sim_world: TripWorld,
) -> None:
    """[MCP-INPUT] people take ten minutes; each round waits 30 s on the gateway's clock and
    answers input_required with the sealed ask id, until the approval is signed."""
    clock = sim_world.clock
    assert isinstance(clock, ManualClock)
    payments = payments_server(sim_world)
    rounds: list[dict[str, Any]] = []

    async def go() -> Any:
        async with served(sim_world, after=600.0) as up, Client(up.server) as agent:
            approval = await await_call_approval(
                agent,
                call_request(clock, payments.gate, definition=await payments.listed("charge_card")),
                until=clock.now() + timedelta(hours=2),
                clock=clock,
                on_pending=rounds.append,
            )
        async with Client(payments.server) as client:
            return approval, await call_gated(client, "charge_card", ARGS, approval.to_wire())

    approval, result = simulated(clock, go())
    assert approval.decision == "approve"
    assert len(rounds) >= 2 and {r["askId"] for r in rounds} == {rounds[0]["askId"]}
    assert not result.is_error and len(payments.ran) == 1


def test_the_driver_gives_up_at_until_with_the_ask_still_open(sim_world: TripWorld) -> None:
    """[MCP-INPUT] ``until`` bounds the client's wait; the ask itself stays open."""
    clock = sim_world.clock
    assert isinstance(clock, ManualClock)
    payments = payments_server(sim_world)

    async def go() -> TimeoutError:
        async with served(sim_world, "never") as up, Client(up.server) as agent:
            with pytest.raises(TimeoutError, match="still undecided") as gave_up:
                await await_call_approval(
                    agent,
                    call_request(clock, payments.gate),
                    until=clock.now() + timedelta(minutes=2),
                    clock=clock,
                )
            return gave_up.value

    assert isinstance(simulated(clock, go()), TimeoutError)


def test_the_tool_refuses_a_bad_request_and_a_forged_request_state(
    real_world: TripWorld,
) -> None:
    """[MCP-INPUT] a request that cannot be read is CALL_INVALID; a requestState the server
    did not seal is refused by the SDK's boundary before the tool runs."""

    async def go() -> tuple[CallInvalid, MCPError]:
        async with served(real_world) as up, Client(up.server) as agent:
            with pytest.raises(CallInvalid) as bad:
                await await_call_approval(agent, BAD_CALL, until=real_world.clock.now())
            with pytest.raises(MCPError) as forged:
                await agent.session.call_tool(
                    CALL_APPROVAL_TOOL,
                    {"request": {}},
                    request_state="ask-someone-elses",
                    allow_input_required=True,
                )
            return bad.value, forged.value

    bad, forged = run(go())
    assert bad.reason == "SHAPE"
    assert forged.code == types.INVALID_PARAMS


# -- the directory --------------------------------------------------------------------


def test_human_cards_are_resources_holding_the_signed_cards(real_world: TripWorld) -> None:
    """[MCP-CARDS] one resource per card; its text is the card as the directory signed it."""

    async def go() -> tuple[list[str], dict[str, Any], Any]:
        async with (
            served(real_world) as up,
            Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
        ):
            listed = await client.list_resources()
            read = await client.read_resource("human://acme.com/alice")
            directory = await mcp_directory(GATEWAY, client, real_world.keyring)
            loaded = await directory.load()
            content = read.contents[0]
            assert isinstance(content, types.TextResourceContents)
            return [str(r.uri) for r in listed.resources], json.loads(content.text), loaded

    uris, alice, loaded = run(go())
    ids = [card.id for card in real_world.directory.cards()]
    assert sorted(uris) == sorted(ids)
    assert alice == real_world.directory.signed("human://acme.com/alice")
    assert verify_card(alice, real_world.keyring).issuer == DIRECTORY
    assert [card.id for card in loaded] == ids


def test_resolve_over_mcp_matches_the_directory_in_process(real_world: TripWorld) -> None:
    """[MCP-DIRECTORY] same candidates in the same order, same exclusions and rules."""
    amounts = {"USD": Decimal("1480.00")}

    async def go() -> Any:
        async with (
            served(real_world) as up,
            Client(up.server, extensions=[advertise(EXTENSION_ID)]) as client,
        ):
            directory = await mcp_directory(GATEWAY, client, real_world.keyring)
            return await directory.resolve(
                FINANCE_ADDRESS, "approve.spend", amounts=amounts, on_behalf_of=TRAVELLER
            )

    remote_resolution = run(go())
    local = real_world.directory.resolve(
        FINANCE_ADDRESS, "approve.spend", amounts=amounts, on_behalf_of=TRAVELLER
    )
    assert remote_resolution.candidate_ids == local.candidate_ids
    assert remote_resolution.excluded == local.excluded
    assert [c.load for c in remote_resolution.candidates] == [c.load for c in local.candidates]
    assert remote_resolution.needed == local.needed


class _LyingDirectory(Extension):
    """A server that advertises acme's directory truthfully and answers resolve badly."""

    identifier = EXTENSION_ID

    def __init__(self, world: TripWorld, answer: dict[str, Any]) -> None:
        self._world = world
        self._answer = answer

    def settings(self) -> dict[str, Any]:
        return HatpAdvert(
            hatp_version=PROTOCOL_VERSION,
            id=GATEWAY,
            roles=["gateway", "directory"],
            keys=[self._world.keys["gateway"].public.to_jwk()],
        ).settings()

    def methods(self) -> list[MethodBinding]:
        async def resolve(params: Any, ctx: Any) -> dict[str, Any]:
            return self._answer

        return [MethodBinding(METHODS["directory/resolve"], types.RequestParams, resolve)]


@pytest.mark.parametrize(
    "shape",
    ["no-card", "load-not-a-fraction", "someone-else-s-card"],
)
def test_a_resolution_out_of_shape_is_refused_not_trusted(
    real_world: TripWorld, shape: str
) -> None:
    """[MCP-DIRECTORY] a directory's answer is read, never trusted: out of shape is METHOD."""
    cards = {card.id: real_world.directory.signed(card.id) for card in real_world.directory.cards()}
    first, second = sorted(cards)[:2]
    candidate: dict[str, Any] = {
        "id": first,
        "card": cards[first],
        "status": "available",
        "load": "0/1",
        "slaFits": True,
    }
    if shape == "no-card":
        del candidate["card"]
    elif shape == "load-not-a-fraction":
        candidate["load"] = "half"
    else:
        candidate["card"] = cards[second]
    answer = {"address": FINANCE_ADDRESS, "candidates": [candidate], "excluded": []}

    async def go() -> PeerIncompatible:
        server = MCPServer("liar", extensions=[_LyingDirectory(real_world, answer)])
        async with Client(server, extensions=[advertise(EXTENSION_ID)]) as client:
            directory = await mcp_directory(GATEWAY, client, real_world.keyring)
            with pytest.raises(PeerIncompatible) as refused:
                await directory.resolve(
                    FINANCE_ADDRESS, "approve.spend", amounts={}, on_behalf_of=TRAVELLER
                )
            return refused.value

    refused = run(go())
    assert refused.reason == "METHOD"
    assert refused.data["method"] == METHODS["directory/resolve"]
