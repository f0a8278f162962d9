"""``@gated``: a plain Python function, sync or async, runs only with an approval of that call.

The gate is the payments server's (``gateway_world``), with no tools until the
decorator declares them; acme's real Human Gateway signs the approvals (its
people approve as scripted, on the real clock), asked for exactly the
arguments the decorated function binds.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_world import (
    ARGS,
    DIRECTORY,
    GATEWAY,
    PAYMENTS_SERVER,
    REQUESTER,
    acme_gateway,
    approved,
    call_request,
    issued_by,
    open_world,
)
from hatp.clock import SystemClock
from hatp.demo import TripWorld
from hatp.demo.trip import FINANCE_ADDRESS, PAYMENTS
from hatp.errors import ApprovalInvalid, ApprovalRequired, CallInvalid, GateInvalid, InvalidJson
from hatp.evidence import call_digest
from hatp.gate import ApprovalGate, Requester, gated
from hatp.model import CallRequirement
from hatp.store import UsedApprovals, UseOutcome

BOUND = 20.0
AMOUNT = ARGS["amount"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", SystemClock()) as opened:
        yield opened


@pytest.fixture
def gate(world: TripWorld) -> ApprovalGate:
    """The payments server's gate, gating nothing until a function is decorated."""
    return ApprovalGate(
        PAYMENTS_SERVER,
        [],
        gateways=issued_by(world.keyring, GATEWAY),
        directories=issued_by(world.keyring, DIRECTORY),
        used=UsedApprovals(world.stores[PAYMENTS]),
        clock=world.clock,
    )


class Charges:
    """``charge_card``, sync, gated on the finance approver; what its body ran with."""

    def __init__(self, gate: ApprovalGate) -> None:
        self.ran: list[dict[str, Any]] = []
        ran = self.ran

        @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
        def charge_card(card: str, amount: dict[str, str], payee: str) -> str:
            """Charge a company card now."""
            ran.append({"card": card, "amount": amount, "payee": payee})
            return f"charged {amount['value']} {amount['currency']} to {payee}"

        self.charge_card = charge_card


async def ask(world: TripWorld, gate: ApprovalGate, tool: str, args: dict[str, Any]) -> Any:
    async with acme_gateway(world) as gateway:
        request = call_request(world.clock, gate, tool=tool, args=args)
        return await asyncio.wait_for(approved(gateway, request), BOUND)


def test_a_call_without_an_approval_is_refused_with_what_to_ask_for(gate: ApprovalGate) -> None:
    """[GATE-REQUIRED] the requirement is the function's arguments by name, and nothing ran."""
    charges = Charges(gate)
    with pytest.raises(ApprovalRequired) as refused:
        charges.charge_card(ARGS["card"], AMOUNT, "Lufthansa", requester=REQUESTER)
    assert charges.ran == []
    needed = CallRequirement.model_validate(refused.value.data["requirement"])
    assert needed == charges.charge_card.requirement(ARGS["card"], AMOUNT, payee="Lufthansa")
    assert (needed.server, needed.tool, needed.address, needed.action) == (
        PAYMENTS_SERVER,
        "charge_card",
        FINANCE_ADDRESS,
        "approve.spend",
    )
    assert needed.call_digest == call_digest(PAYMENTS_SERVER, "charge_card", ARGS)
    assert needed.amount is not None and needed.amount.value == "1480.00"
    assert gate.gated("charge_card")


def test_an_approved_sync_call_runs_once_and_its_replay_is_refused_as_used(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[GATE-ONCE] the single use is claimed in the gate's store before the body runs."""
    charges = Charges(gate)
    approval = asyncio.run(ask(world, gate, "charge_card", ARGS))
    said = charges.charge_card(**ARGS, approval=approval, requester=REQUESTER)
    assert said == "charged 1480.00 USD to Lufthansa"
    assert charges.ran == [ARGS]
    with pytest.raises(ApprovalInvalid) as replay:
        charges.charge_card(**ARGS, approval=approval, requester=REQUESTER)
    assert replay.value.reason == "USED"
    assert len(charges.ran) == 1
    used = UsedApprovals(world.stores[PAYMENTS]).get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.RAN
    assert used.call_digest == call_digest(PAYMENTS_SERVER, "charge_card", ARGS)


def test_an_approved_async_call_runs_once_and_its_replay_is_refused_as_used(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[GATE-ONCE] an ``async def`` goes through ``ApprovalGate.run`` and stays a coroutine."""
    booked: list[str] = []

    @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
    async def book_hotel(hotel: str, amount: dict[str, str]) -> str:
        await asyncio.sleep(0)
        booked.append(hotel)
        return f"booked {hotel}"

    assert inspect.iscoroutinefunction(book_hotel)
    args = {"hotel": "Adlon", "amount": {"value": "640.00", "currency": "USD"}}

    async def go() -> tuple[str, ApprovalInvalid, ApprovalRequired]:
        approval = await ask(world, gate, "book_hotel", args)
        first = await book_hotel("Adlon", args["amount"], approval=approval, requester=REQUESTER)
        with pytest.raises(ApprovalInvalid) as replay:
            await book_hotel("Adlon", args["amount"], approval=approval, requester=REQUESTER)
        with pytest.raises(ApprovalRequired) as missing:
            await book_hotel("Adlon", args["amount"], requester=REQUESTER)
        return first, replay.value, missing.value

    first, replay, missing = asyncio.run(go())
    assert first == "booked Adlon"
    assert booked == ["Adlon"]
    assert replay.reason == "USED"
    assert missing.data["requirement"]["tool"] == "book_hotel"


def test_an_approval_used_with_other_arguments_is_refused_as_another_call(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[GATE-CALL] the approval binds the arguments the function is called with."""
    charges = Charges(gate)
    approval = asyncio.run(ask(world, gate, "charge_card", ARGS))
    more = {"value": "14800.00", "currency": "USD"}
    with pytest.raises(ApprovalInvalid) as refused:
        charges.charge_card(ARGS["card"], more, "Lufthansa", approval=approval, requester=REQUESTER)
    assert refused.value.reason == "OTHER_CALL"
    assert charges.ran == []
    assert UsedApprovals(world.stores[PAYMENTS]).get(approval["approvalId"]) is None


def test_default_values_are_part_of_the_call_the_approval_binds(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[CALL-DIGEST] a default the caller left out is bound like a passed argument."""
    ran: list[str] = []

    @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
    def refund(card: str, amount: dict[str, str], reason: str = "duplicate charge") -> str:
        ran.append(reason)
        return "refunded"

    bound = refund.arguments(ARGS["card"], AMOUNT)
    assert bound == {"card": ARGS["card"], "amount": AMOUNT, "reason": "duplicate charge"}
    without_default = {"card": ARGS["card"], "amount": AMOUNT}
    assert refund.requirement(ARGS["card"], AMOUNT).call_digest == call_digest(
        PAYMENTS_SERVER, "refund", bound
    )
    approval = asyncio.run(ask(world, gate, "refund", bound))
    assert refund(ARGS["card"], AMOUNT, approval=approval, requester=REQUESTER) == "refunded"
    assert ran == ["duplicate charge"]
    # An approval of the arguments without the default is for another call.
    other = asyncio.run(ask(world, gate, "refund", without_default))
    with pytest.raises(ApprovalInvalid) as refused:
        refund(ARGS["card"], AMOUNT, approval=other, requester=REQUESTER)
    assert refused.value.reason == "OTHER_CALL"
    assert ran == ["duplicate charge"]


def test_a_function_that_raises_has_used_its_approval_and_is_recorded_failed(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[GATE-ONCE] it may have had an effect: the approval stays used, outcome FAILED."""
    tries: list[str] = []

    @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
    def void_charge(charge: str, amount: dict[str, str]) -> str:
        tries.append(charge)
        raise RuntimeError("the bank is down")

    args = {"charge": "ch-1", "amount": {"value": "10.00", "currency": "USD"}}
    approval = asyncio.run(ask(world, gate, "void_charge", args))
    with pytest.raises(RuntimeError, match="the bank is down"):
        void_charge(**args, approval=approval, requester=REQUESTER)
    used = UsedApprovals(world.stores[PAYMENTS]).get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.FAILED
    assert used.detail is not None and "the bank is down" in used.detail
    with pytest.raises(ApprovalInvalid) as replay:
        void_charge(**args, approval=approval, requester=REQUESTER)
    assert replay.value.reason == "USED"
    assert tries == ["ch-1"]


def test_the_body_runs_on_the_arguments_as_approved_whatever_the_caller_does_meanwhile(
    world: TripWorld, gate: ApprovalGate
) -> None:
    """[GATE-CALL] the checked arguments are copied: a caller changing its dict while an
    async body awaits does not change what the body was approved to do."""
    paid: list[str] = []

    @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
    async def pay(payee: str, amount: dict[str, str]) -> None:
        await asyncio.sleep(0.05)
        paid.append(amount["value"])

    amount = {"value": "100.00", "currency": "USD"}

    async def go() -> None:
        approval = await ask(world, gate, "pay", {"payee": "Lufthansa", "amount": amount})
        running = asyncio.create_task(
            pay("Lufthansa", amount, approval=approval, requester=REQUESTER)
        )
        await asyncio.sleep(0.01)
        amount["value"] = "9999.00"  # after the check, while the body awaits
        await running

    asyncio.run(go())
    assert paid == ["100.00"]


def test_arguments_that_are_not_json_are_refused_naming_the_argument(
    gate: ApprovalGate,
) -> None:
    """[CALL-DIGEST] a call with no canonical JSON form has no digest to approve."""
    charges = Charges(gate)
    for bad in ({"value", "USD"}, {"value": float("nan"), "currency": "USD"}, {1: "USD"}):
        with pytest.raises(InvalidJson) as refused:
            charges.charge_card(ARGS["card"], bad, "Lufthansa", requester=REQUESTER)
        assert refused.value.data["where"] == "/amount"
        assert "amount" in refused.value.message
        with pytest.raises(InvalidJson):
            charges.charge_card.requirement(ARGS["card"], bad, "Lufthansa")
    assert charges.ran == []


def test_arguments_with_no_amount_where_one_is_declared_are_refused(gate: ApprovalGate) -> None:
    """[CALL-AMOUNT] the amount the approvers' authority must cover is not there."""
    charges = Charges(gate)
    with pytest.raises(CallInvalid) as refused:
        charges.charge_card(ARGS["card"], {"value": "a lot"}, "Lufthansa", requester=REQUESTER)
    assert refused.value.reason == "AMOUNT"
    with pytest.raises(CallInvalid):
        charges.charge_card.requirement(ARGS["card"], "a lot", "Lufthansa")
    assert charges.ran == []


def test_a_call_that_does_not_fit_the_signature_or_names_no_requester_is_a_type_error(
    gate: ApprovalGate,
) -> None:
    charges = Charges(gate)
    with pytest.raises(TypeError):
        charges.charge_card(ARGS["card"], AMOUNT, requester=REQUESTER)  # payee missing
    with pytest.raises(TypeError, match="Requester"):
        charges.charge_card(**ARGS, requester="agent://acme.com/travel-bot")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        charges.charge_card(**ARGS)  # type: ignore[call-arg]
    assert charges.ran == []


def test_the_decorated_function_keeps_its_name_doc_and_signature_plus_two_keywords(
    gate: ApprovalGate,
) -> None:
    charge_card = Charges(gate).charge_card
    assert charge_card.__name__ == "charge_card"  # type: ignore[attr-defined]
    assert charge_card.__doc__ == "Charge a company card now."
    parameters = inspect.signature(charge_card).parameters
    assert list(parameters) == ["card", "amount", "payee", "approval", "requester"]
    assert parameters["approval"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["approval"].default is None
    assert parameters["requester"].default is inspect.Parameter.empty
    assert charge_card.tool.address == FINANCE_ADDRESS
    assert charge_card.tool.amount == "/amount"


def test_name_sets_the_tool_name_approvals_name(gate: ApprovalGate) -> None:
    @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount", name="payments.charge")
    def charge(card: str, amount: dict[str, str], payee: str) -> str:
        return "charged"

    assert gate.gated("payments.charge") and not gate.gated("charge")
    assert charge.requirement(**ARGS).tool == "payments.charge"


def _declare(gate: ApprovalGate, fn: Callable[..., Any], **options: Any) -> None:
    settings: dict[str, Any] = {"action": "approve.spend", "amount": "/amount", **options}
    gated(gate, settings.pop("address", FINANCE_ADDRESS), **settings)(fn)


def _varargs(*cards: str) -> None: ...
def _varkw(card: str, **more: Any) -> None: ...
def _approval(card: str, approval: dict[str, Any]) -> None: ...
def _requester(card: str, *, requester: Requester) -> None: ...
def _plain(card: str, amount: dict[str, str]) -> None: ...


@pytest.mark.parametrize(
    ("fn", "options", "says"),
    [
        (_varargs, {}, "by name"),
        (_varkw, {}, "by name"),
        (_approval, {}, "'approval'"),
        (_requester, {}, "'requester'"),
        (_plain, {"address": "agent://acme.com/travel-bot"}, "people approve"),
        (_plain, {"address": "acme.com/finance"}, "address is not valid"),
        (_plain, {"action": "approve spend"}, "not an action name"),
        (_plain, {"amount": "amount"}, "not a JSON Pointer"),
        (_plain, {"name": "no spaces allowed"}, "not a tool name"),
        (lambda card: None, {}, "not a tool name"),
        (functools.partial(_plain, "card-1"), {}, "pass name="),
        (max, {}, "signature cannot be read"),
    ],
    ids=[
        "varargs",
        "varkw",
        "approval-param",
        "requester-param",
        "agent-address",
        "bad-address",
        "bad-action",
        "bad-pointer",
        "bad-name",
        "lambda",
        "no-name",
        "no-signature",
    ],
)
def test_a_bad_declaration_is_refused_when_decorating_and_gates_nothing(
    gate: ApprovalGate, fn: Callable[..., Any], options: dict[str, Any], says: str
) -> None:
    """GATE_INVALID at start-up, not a call let through later."""
    with pytest.raises(GateInvalid) as refused:
        _declare(gate, fn, **options)
    assert says in refused.value.message
    assert gate.tools == []


def test_gating_a_second_function_under_a_gated_name_is_refused(gate: ApprovalGate) -> None:
    _declare(gate, _plain)
    with pytest.raises(GateInvalid) as refused:
        _declare(gate, _plain)
    assert "declared twice" in refused.value.message
    assert [tool.name for tool in gate.tools] == ["_plain"]
