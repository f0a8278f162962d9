"""A participant over MCP answers every call as it does in process: same receipts, same refusals.

Each test drives the airline of the participant tests through its own MCP
server (``serve_hatp``) with ``mcp_participant``, in process, and compares
with what the :class:`~hatp.participant.ParticipantServer` itself signs or
raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp.client import Client, advertise
from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer

from hatp.clock import ManualClock
from hatp.errors import (
    HatpError,
    HoldExpired,
    NotPrepared,
    NotRenewable,
    NotReplaceable,
    OutcomeConflict,
    ParticipantUnavailable,
    PeerIncompatible,
    PlanInvalid,
    PreconditionChanged,
    StaleFence,
    UndoInvalid,
)
from hatp.evidence import digest, verify
from hatp.mcp import (
    EXTENSION_ID,
    METHODS,
    McpParticipant,
    ParticipantExtension,
    mcp_participant,
    serve_hatp,
)
from hatp.mcp._participant_server import PlanParams, StatusParams
from hatp.mcp._rpc import method, request
from hatp.model import BranchState, BranchStatus, Preconditions
from hatp.participant import Participant, ParticipantServer
from hatp.store import open_store
from participant.ops import AIRLINE, KEY, branch, keyring, plan, run, seen, server, setup_ledgers

T = TypeVar("T")
Connect = Callable[..., Any]
DIGEST = digest(plan().to_wire())


def over_mcp(mcp: MCPServer, connect: Connect, body: Callable[[McpParticipant], Awaitable[T]]) -> T:
    """Run ``body`` with the participant behind ``mcp``, reached over an in-process client."""

    async def go() -> T:
        async with connect(mcp) as client:
            return await body(await mcp_participant(AIRLINE, client, keyring()))

    return run(go())


# --- every method ---------------------------------------------------------------------------


def test_prepare_answers_the_receipt_the_participant_signed_and_keeps_the_plan_digest(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def body(link: McpParticipant) -> tuple[dict[str, Any], dict[str, Any]]:
        return await link.prepare(plan(), "seat", 1), await link.prepare(plan(), "seat", 1)

    first, repeat = over_mcp(airline_mcp, connect, body)
    assert first["vote"] == "yes"
    assert first["planDigest"] == DIGEST, "the plan crossed the wire without changing its digest"
    assert repeat == first, "a repeat returns the stored receipt [PART-IDEMPOTENT]"
    assert first == run(airline.prepare(plan(), "seat", 1))
    assert first == run(airline.status("txn-1", "seat")).receipt
    assert verify(first, keyring()).kid == KEY.kid


def test_quote_answers_the_quote_the_participant_signs_and_places_nothing(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    quote = over_mcp(airline_mcp, connect, lambda link: link.quote(plan(), "seat", 1))
    assert quote == run(airline.quote(plan(), "seat", 1))
    assert quote["cost"] == {"value": "420.00", "currency": "USD"}
    assert run(airline.status("txn-1", "seat")).state is BranchState.UNKNOWN


def test_commit_answers_the_stored_commit_receipt_also_when_repeated(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def body(link: McpParticipant) -> list[dict[str, Any]]:
        voted = await link.prepare(plan(), "event", 1)
        return [await link.commit("txn-1", "event", 1, DIGEST, seen(voted)) for _ in range(2)]

    first, repeat = over_mcp(airline_mcp, connect, body)
    assert first["kind"] == "commit"
    assert repeat == first
    assert first == run(airline.status("txn-1", "event")).receipt


def test_compensate_answers_the_stored_compensate_receipt(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def body(link: McpParticipant) -> list[dict[str, Any]]:
        voted = await link.prepare(plan(), "event", 1)
        done = await link.commit("txn-1", "event", 1, DIGEST, seen(voted))
        token = done["undoToken"]
        return [await link.compensate("txn-1", "event", 1, token) for _ in range(2)]

    first, repeat = over_mcp(airline_mcp, connect, body)
    assert first["kind"] == "compensate"
    assert repeat == first
    assert first == run(airline.status("txn-1", "event")).receipt


def test_abort_answers_the_stored_abort_receipt(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def body(link: McpParticipant) -> list[dict[str, Any]]:
        await link.prepare(plan(), "charge", 1)
        return [await link.abort("txn-1", "charge", 1) for _ in range(2)]

    first, repeat = over_mcp(airline_mcp, connect, body)
    assert first["kind"] == "abort"
    assert repeat == first
    assert first == run(airline.status("txn-1", "charge")).receipt


def test_renew_answers_a_signed_renew_receipt_with_the_longer_lease(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect, clock: ManualClock
) -> None:
    async def body(link: McpParticipant) -> tuple[dict[str, Any], dict[str, Any]]:
        voted = await link.prepare(plan(), "seat", 1)
        clock.advance(300)
        return voted, await link.renew("txn-1", "seat", 1)

    voted, renewed = over_mcp(airline_mcp, connect, body)
    assert renewed["kind"] == "renew"
    assert renewed["leaseExpiresAt"] == voted["holdHorizon"]  # 09:05 + 10 min, capped at 09:15
    verify(renewed, keyring())


def test_replace_answers_the_receipt_of_the_new_attempt(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect, clock: ManualClock
) -> None:
    async def body(link: McpParticipant) -> list[dict[str, Any]]:
        await link.prepare(plan(), "seat", 1)
        clock.advance(600)  # the lease ended: the hold is lost
        return [await link.replace(plan(), "seat", 1, 2) for _ in range(2)]

    first, repeat = over_mcp(airline_mcp, connect, body)
    assert (first["kind"], first["attempt"], first["vote"]) == ("prepare", 2, "yes")
    assert repeat == first
    assert first == run(airline.status("txn-1", "seat")).receipt


def test_status_comes_back_as_the_branch_status_the_participant_reports(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def body(link: McpParticipant) -> tuple[BranchStatus, BranchStatus]:
        unknown = await link.status("txn-1", "seat")
        await link.prepare(plan(), "seat", 1)
        return unknown, await link.status("txn-1", "seat")

    unknown, prepared = over_mcp(airline_mcp, connect, body)
    assert unknown == run(airline.status("txn-0", "seat")).model_copy(update={"txn_id": "txn-1"})
    assert (unknown.state, unknown.receipt) == (BranchState.UNKNOWN, None)
    assert isinstance(prepared, BranchStatus)
    assert prepared == run(airline.status("txn-1", "seat"))
    assert prepared.state is BranchState.PREPARED


def test_the_link_is_a_participant(airline_mcp: MCPServer, connect: Connect) -> None:
    async def body(link: McpParticipant) -> McpParticipant:
        return link

    link = over_mcp(airline_mcp, connect, body)
    assert isinstance(link, Participant)
    assert link.participant_id == AIRLINE
    assert link.advert.id == AIRLINE


# --- refusals -------------------------------------------------------------------------------

Case = Callable[[Participant, ManualClock], Awaitable[object]]


async def _stale_fence(p: Participant, clock: ManualClock) -> object:
    await p.prepare(plan(), "seat", 2)
    return await p.abort("txn-1", "seat", 1)


async def _plan_invalid(p: Participant, clock: ManualClock) -> object:
    return await p.prepare(plan("txn-1", branch("seat", tier="final")), "seat", 1)


async def _not_prepared(p: Participant, clock: ManualClock) -> object:
    return await p.commit("txn-1", "seat", 1, DIGEST, None)


async def _outcome_conflict(p: Participant, clock: ManualClock) -> object:
    voted = await p.prepare(plan(), "charge", 1)
    await p.abort("txn-1", "charge", 1)
    return await p.commit("txn-1", "charge", 1, DIGEST, seen(voted))


async def _hold_expired(p: Participant, clock: ManualClock) -> object:
    await p.prepare(plan(), "seat", 1)
    clock.advance(600)
    return await p.commit("txn-1", "seat", 1, DIGEST, None)


async def _not_renewable(p: Participant, clock: ManualClock) -> object:
    await p.prepare(plan(), "event", 1)
    return await p.renew("txn-1", "event", 1)


async def _not_replaceable(p: Participant, clock: ManualClock) -> object:
    await p.prepare(plan(), "seat", 1)
    clock.advance(300)  # the lease runs to 09:10: the hold is not lost
    return await p.replace(plan(), "seat", 1, 2)


async def _undo_invalid(p: Participant, clock: ManualClock) -> object:
    voted = await p.prepare(plan(), "event", 1)
    await p.commit("txn-1", "event", 1, DIGEST, seen(voted))
    return await p.compensate("txn-1", "event", 1, "guessed")


async def _precondition_changed(p: Participant, clock: ManualClock) -> object:
    await p.prepare(plan(), "event", 1)
    changed = Preconditions(versions={"calendar/mon-9": "9"}, scope="calendar.write")
    return await p.commit("txn-1", "event", 1, DIGEST, changed)


REFUSALS: dict[str, tuple[type[HatpError], Case]] = {
    "STALE_FENCE": (StaleFence, _stale_fence),
    "PLAN_INVALID": (PlanInvalid, _plan_invalid),
    "NOT_PREPARED": (NotPrepared, _not_prepared),
    "OUTCOME_CONFLICT": (OutcomeConflict, _outcome_conflict),
    "HOLD_EXPIRED": (HoldExpired, _hold_expired),
    "NOT_RENEWABLE": (NotRenewable, _not_renewable),
    "NOT_REPLACEABLE": (NotReplaceable, _not_replaceable),
    "UNDO_INVALID": (UndoInvalid, _undo_invalid),
    "PRECONDITION_CHANGED": (PreconditionChanged, _precondition_changed),
}


def _refusal(call: Awaitable[object]) -> HatpError:
    async def go() -> HatpError:
        try:
            await call
        except HatpError as exc:
            return exc
        raise AssertionError("not refused")

    return run(go())


@pytest.mark.parametrize("code", sorted(REFUSALS))
def test_a_refusal_arrives_as_the_same_typed_error_with_its_data(
    code: str, airline_mcp: MCPServer, connect: Connect, clock: ManualClock, tmp_path: Path
) -> None:
    cls, case = REFUSALS[code]

    async def body(link: McpParticipant) -> HatpError:
        try:
            await case(link, clock)
        except HatpError as exc:
            return exc
        raise AssertionError(f"{code} was not refused over MCP")

    twin_clock = ManualClock(clock.now())
    over = over_mcp(airline_mcp, connect, body)
    # The same steps on a twin participant, in process, on its own store and clock.
    twin_store = open_store(f"sqlite:///{tmp_path / 'twin.db'}")
    try:
        setup_ledgers(twin_store)
        here = _refusal(case(server(twin_store, twin_clock), twin_clock))
    finally:
        twin_store.close()
    assert type(over) is cls and over.code == code
    assert type(here) is cls
    assert over.to_dict() == here.to_dict()


def test_a_plan_that_does_not_parse_is_refused_plan_invalid(
    airline_mcp: MCPServer, connect: Connect
) -> None:
    broken = {k: v for k, v in plan().to_wire().items() if k != "txnId"}

    async def send() -> HatpError:
        async with connect(airline_mcp) as client:
            params = {"plan": broken, "branchId": "seat", "fence": 1}
            try:
                await request(client, METHODS["txn/prepare"], params, server=AIRLINE)
            except HatpError as exc:
                return exc
        raise AssertionError("a plan without txnId was taken")

    refused = run(send())
    assert isinstance(refused, PlanInvalid)
    assert refused.data["where"] == "/txnId"


VALID: dict[str, dict[str, Any]] = {
    "txn/prepare": {"plan": plan().to_wire(), "branchId": "seat", "fence": 1},
    "txn/commit": {
        "txnId": "txn-1",
        "branchId": "seat",
        "fence": 1,
        "planDigest": DIGEST,
        "preconditions": None,
    },
    "txn/abort": {"txnId": "txn-1", "branchId": "seat", "fence": 1},
    "txn/status": {"txnId": "txn-1", "branchId": "seat"},
}
MALFORMED: list[tuple[str, str, dict[str, Any]]] = [
    ("fence-as-text", "txn/commit", {**VALID["txn/commit"], "fence": "1"}),
    ("fence-negative", "txn/abort", {**VALID["txn/abort"], "fence": -1}),
    ("fence-bool", "txn/abort", {**VALID["txn/abort"], "fence": True}),
    ("branch-missing", "txn/abort", {"txnId": "txn-1", "fence": 1}),
    ("unknown-member", "txn/prepare", {**VALID["txn/prepare"], "vote": "yes"}),
    ("plan-not-object", "txn/prepare", {**VALID["txn/prepare"], "plan": "txn-1"}),
    (
        "preconditions-shape",
        "txn/commit",
        {**VALID["txn/commit"], "preconditions": {"versions": 1, "scope": "x"}},
    ),
    ("attempt-zero", "txn/replace", {**VALID["txn/prepare"], "attempt": 0}),
    ("not-served", "txn/voted", VALID["txn/status"]),
]


@pytest.mark.parametrize(
    ("name", "method_name", "params"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_params_that_do_not_fit_are_refused_peer_incompatible_method_MCP_METHOD(
    name: str,
    method_name: str,
    params: dict[str, Any],
    airline: ParticipantServer,
    airline_mcp: MCPServer,
    connect: Connect,
) -> None:
    """[MCP-METHOD] refused before the participant sees them; nothing was done."""

    async def send() -> HatpError:
        async with connect(airline_mcp) as client:
            try:
                await request(client, METHODS[method_name], params, server=AIRLINE)
            except HatpError as exc:
                return exc
        raise AssertionError(f"{name} was taken")

    refused = run(send())
    assert isinstance(refused, PeerIncompatible)
    assert refused.reason == "METHOD"
    assert run(airline.status("txn-1", "seat")).state is BranchState.UNKNOWN


# --- no answer ------------------------------------------------------------------------------


class Hang:
    """Server middleware that never lets a ``method`` request through (a server that hangs)."""

    def __init__(self, method_name: str) -> None:
        self.method = method_name
        self.arrived = 0

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.method == self.method:
            self.arrived += 1
            await asyncio.Event().wait()  # cancelled when the caller gives up
        return await call_next(ctx)


def test_no_answer_in_time_is_participant_unavailable(airline: ParticipantServer) -> None:
    hang = Hang(METHODS["txn/status"])
    mcp = MCPServer("airline", middleware=[hang])
    serve_hatp(mcp, airline, keys=[KEY.public])

    async def go() -> HatpError:
        async with Client(mcp, extensions=[advertise(EXTENSION_ID)]) as client:
            link = await mcp_participant(AIRLINE, client, keyring(), timeout=0.2)
            try:
                await link.status("txn-1", "seat")
            except HatpError as exc:
                return exc
        raise AssertionError("a hanging server answered")

    silence = run(go())
    assert isinstance(silence, ParticipantUnavailable)
    assert silence.data == {"participant": AIRLINE}
    assert hang.arrived == 1


def test_a_closed_connection_is_participant_unavailable(
    airline_mcp: MCPServer, connect: Connect
) -> None:
    async def go() -> HatpError:
        async with connect(airline_mcp) as client:
            link = await mcp_participant(AIRLINE, client, keyring())
        try:
            await link.abort("txn-1", "seat", 1)
        except HatpError as exc:
            return exc
        raise AssertionError("a closed link answered")

    silence = run(go())
    assert isinstance(silence, ParticipantUnavailable)
    assert "not connected" in silence.message


class Garbled(Extension):
    """A server that advertises as the airline but answers without the members asked for."""

    identifier = EXTENSION_ID

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)

    def settings(self) -> dict[str, Any]:
        return self._settings

    def methods(self) -> Sequence[MethodBinding]:
        async def no_receipt(p: PlanParams, ctx: Any) -> Mapping[str, Any]:
            return {"receipt": "yes"}

        async def odd_status(p: StatusParams, ctx: Any) -> Mapping[str, Any]:
            return {"status": {"state": "prepared"}}

        return [
            method(METHODS["txn/prepare"], PlanParams, no_receipt),
            method(METHODS["txn/status"], StatusParams, odd_status),
        ]


def test_an_answer_without_what_was_asked_is_not_taken_for_a_refusal(
    airline: ParticipantServer, connect: Connect
) -> None:
    """Whatever the request did is unknown: ParticipantUnavailable, so it is asked again."""
    advert = ParticipantExtension(airline, keys=[KEY.public]).settings()
    mcp = MCPServer("garbled", extensions=[Garbled(advert)])

    async def go() -> list[HatpError]:
        out: list[HatpError] = []
        async with connect(mcp) as client:
            link = await mcp_participant(AIRLINE, client, keyring())
            for call in (link.prepare(plan(), "seat", 1), link.status("txn-1", "seat")):
                try:
                    await call
                except HatpError as exc:
                    out.append(exc)
        return out

    prepare, status = run(go())
    assert isinstance(prepare, ParticipantUnavailable) and "'receipt'" in prepare.message
    assert isinstance(status, ParticipantUnavailable) and "BranchStatus" in status.message


# --- the server's own tools, and setting it up ----------------------------------------------


@pytest.mark.parametrize("hatp", [True, False], ids=["hatp-client", "plain-client"])
def test_the_servers_own_tools_keep_working_after_serve_hatp(
    hatp: bool, airline_mcp: MCPServer, connect: Connect
) -> None:
    async def go() -> tuple[list[str], str]:
        async with connect(airline_mcp, hatp=hatp) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("seat_map", {"row": 12})
            return tools, result.content[0].text  # type: ignore[union-attr]

    tools, text = run(go())
    assert tools == ["seat_map", "hatp_branch_status"], "the participant adds one read-only tool"
    assert text == "row 12: A B C D E F"


def test_the_extension_can_be_passed_when_the_server_is_built(
    airline: ParticipantServer, connect: Connect
) -> None:
    mcp = MCPServer("airline", extensions=[ParticipantExtension(airline, keys=[KEY.public])])
    receipt = over_mcp(mcp, connect, lambda link: link.prepare(plan(), "seat", 1))
    assert receipt == run(airline.status("txn-1", "seat")).receipt


def test_serving_twice_or_without_keys_is_refused(airline: ParticipantServer) -> None:
    mcp = MCPServer("airline")
    with pytest.raises(ValueError, match="at least one public key"):
        serve_hatp(mcp, airline, keys=[])
    serve_hatp(mcp, airline, keys=[KEY.public])
    with pytest.raises(ValueError, match="already registered"):
        serve_hatp(mcp, airline, keys=[KEY.public])


def test_a_participant_that_crashes_gives_no_answer_not_a_refusal(
    airline: ParticipantServer, airline_mcp: MCPServer, connect: Connect
) -> None:
    """An operation's own bug is not a typed refusal: the coordinator must not unwind on it."""
    failing = plan("txn-1", branch("charge", args={"cost": _COST, "fail_after_write": True}))

    async def body(link: McpParticipant) -> HatpError:
        voted = await link.prepare(failing, "charge", 1)
        try:
            await link.commit("txn-1", "charge", 1, digest(failing.to_wire()), seen(voted))
        except HatpError as exc:
            return exc
        raise AssertionError("a crashed commit answered")

    silence = over_mcp(airline_mcp, connect, body)
    assert isinstance(silence, ParticipantUnavailable)
    assert run(airline.status("txn-1", "charge")).state is BranchState.PREPARED


_COST = {"value": "420.00", "currency": "USD"}
