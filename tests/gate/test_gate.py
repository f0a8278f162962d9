"""The approval gate: what it asks for, what it refuses, and that a call runs once.

Each test runs on SQLite and on PostgreSQL (the ``store`` / ``store_url``
fixtures). The planted violations of every check are in
``test_planted_calls.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from gate.calls import (
    APPROVAL_ID,
    ARGS,
    DEFINITION,
    FINANCE,
    NOW,
    REQUESTER,
    SERVER,
    Approving,
    approval,
    charge_card,
    make_gate,
    terms,
    usd,
)
from hatp.clock import ManualClock
from hatp.errors import ApprovalInvalid, ApprovalRequired, CallInvalid, GateInvalid
from hatp.evidence import call_digest, digest, tool_digest
from hatp.gate import ApprovalGate, GatedTool, Price
from hatp.model import CallRequirement
from hatp.store import Store, UsedApprovals, UseOutcome, open_store
from racing import race

PAYEE = "https://payments.example/pay"


def run(gate: ApprovalGate, doc: Mapping[str, Any] | None, ran: list[Any], **kw: Any) -> Any:
    args = kw.pop("args", ARGS)
    return asyncio.run(
        gate.run("charge_card", args, doc, REQUESTER, lambda a: ran.append(a) or "ok")
    )


def test_a_gated_call_without_an_approval_says_what_to_ask_for(store: Store) -> None:
    """[GATE-REQUIRED]"""
    price = Price(usd("30.00"), PAYEE)
    gate = make_gate(store, ManualClock(NOW), [charge_card(price=price)])
    ran: list[Any] = []
    with pytest.raises(ApprovalRequired) as info:
        run(gate, None, ran)
    assert ran == []
    needed = CallRequirement.model_validate(info.value.data["requirement"])
    assert needed.server == SERVER
    assert needed.tool == "charge_card"
    assert needed.call_digest == call_digest(SERVER, "charge_card", ARGS)
    assert needed.tool_digest == tool_digest(DEFINITION)
    assert needed.address == FINANCE
    assert needed.action == "approve.spend"
    assert needed.amount == usd("2140.00")
    assert needed.price is not None and needed.price.pay_to == PAYEE
    assert needed.price.max_amount == usd("30.00")
    assert needed.max_lifetime_seconds == 3600
    assert "human://acme.com/role/finance-approver" in info.value.message
    assert gate.requirement("charge_card", ARGS) == needed


def test_the_approved_call_runs_once_with_exactly_its_arguments(store: Store) -> None:
    """[GATE-ONCE] the claim is durable before the tool runs; the outcome is recorded."""
    gate = make_gate(store, ManualClock(NOW))
    ran: list[Any] = []
    assert run(gate, approval(), ran) == "ok"
    assert ran == [ARGS]
    used = UsedApprovals(store).get(APPROVAL_ID)
    assert used is not None and used.outcome is UseOutcome.RAN
    assert used.call_digest == call_digest(SERVER, "charge_card", ARGS)
    with pytest.raises(ApprovalInvalid) as info:
        run(gate, approval(), ran)
    assert info.value.reason == "USED"
    assert "human://acme.com/bob was already used" in info.value.message
    assert ran == [ARGS]


def test_a_used_approval_stays_used_after_a_restart(store_url: str) -> None:
    """[GATE-ONCE] [STORE-USED-ONCE] the single-use store survives the server process."""
    first = open_store(store_url)
    ran: list[Any] = []
    run(make_gate(first, ManualClock(NOW)), approval(), ran)
    first.close()
    second = open_store(store_url)
    try:
        with pytest.raises(ApprovalInvalid) as info:
            run(make_gate(second, ManualClock(NOW)), approval(), ran)
        assert info.value.reason == "USED"
    finally:
        second.close()
    assert len(ran) == 1


def test_two_servers_using_one_approval_at_once_run_the_tool_once(store_url: str) -> None:
    """[GATE-ONCE] four server processes' worth of stores on one database, racing."""
    stores = [open_store(store_url) for _ in range(4)]
    checked = [(make_gate(store, ManualClock(NOW)), store) for store in stores]

    def serve(gate: ApprovalGate) -> Callable[[], str]:
        ready = gate.check("charge_card", ARGS, approval(), REQUESTER)

        def use() -> str:
            try:
                gate.use(ready)
            except ApprovalInvalid as exc:
                return exc.reason
            return "ran"

        return use

    try:
        outcomes = race([serve(gate) for gate, _ in checked])
    finally:
        for store in stores:
            store.close()
    assert sorted(outcomes) == ["USED", "USED", "USED", "ran"]


def test_a_tool_that_fails_still_uses_its_approval(store: Store) -> None:
    """[GATE-ONCE] a failed run may have had an effect: the approval is not given back."""
    gate = make_gate(store, ManualClock(NOW))

    def declined(_args: Mapping[str, Any]) -> None:
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError):
        asyncio.run(gate.run("charge_card", ARGS, approval(), REQUESTER, declined))
    used = UsedApprovals(store).get(APPROVAL_ID)
    assert used is not None and used.outcome is UseOutcome.FAILED
    assert used.detail is not None and "card declined" in used.detail
    with pytest.raises(ApprovalInvalid) as info:
        run(gate, approval(), [])
    assert info.value.reason == "USED" and "failed" in info.value.message


def test_an_async_tool_is_awaited(store: Store) -> None:
    gate = make_gate(store, ManualClock(NOW))

    async def charge(args: Mapping[str, Any]) -> str:
        await asyncio.sleep(0)
        return f"charged {args['amount']['value']}"

    assert asyncio.run(gate.run("charge_card", ARGS, approval(), REQUESTER, charge)) == (
        "charged 2140.00"
    )


def test_a_tool_that_is_not_gated_runs_without_an_approval(store: Store) -> None:
    gate = make_gate(store, ManualClock(NOW))
    ran: list[Any] = []
    asyncio.run(gate.run("list_cards", {}, None, REQUESTER, ran.append))
    assert ran == [{}]
    assert not gate.gated("list_cards") and gate.gated("charge_card")
    assert gate.requirement("list_cards", {}) is None
    with pytest.raises(GateInvalid):
        gate.check("list_cards", {}, approval(), REQUESTER)


def test_clock_skew_within_the_allowance_is_accepted(store: Store) -> None:
    """[GATE-EXPIRY] expired 20 s ago, and skew 30 s: still good; skew 10 s: refused."""
    late = ManualClock(NOW + timedelta(minutes=10, seconds=20))
    assert run(make_gate(store, late), approval(), []) == "ok"
    strict = make_gate(store, late, skew_seconds=10)
    other = approval(Approving(terms=terms(requestId="pay-lufthansa-2")))
    with pytest.raises(ApprovalInvalid) as info:
        run(strict, other, [])
    assert info.value.reason == "EXPIRED"


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ("an approval", None),
        ({"kind": "call-approval"}, "/hatpVersion"),
        ({**approval(), "kind": "approval"}, "/kind"),
        ({**approval(), "approvalId": "not-an-id"}, "/approvalId"),
        ({**approval(), "extra": 1}, "/extra"),
        ({k: v for k, v in approval().items() if k != "signature"}, "/signature"),
    ],
)
def test_an_approval_that_is_not_a_call_approval_is_refused(
    store: Store, doc: Any, where: str | None
) -> None:
    """[GATE-SHAPE]"""
    ran: list[Any] = []
    with pytest.raises(ApprovalInvalid) as info:
        run(make_gate(store, ManualClock(NOW)), doc, ran)
    assert info.value.reason == "SHAPE" and ran == []
    assert info.value.data.get("where") == where


def test_arguments_without_the_declared_amount_are_refused(store: Store) -> None:
    """[CALL-AMOUNT] the server reads the amount itself; no amount, no call."""
    ran: list[Any] = []
    gate = make_gate(store, ManualClock(NOW))
    for args in ({"payee": "Lufthansa"}, {**ARGS, "amount": {"value": 2140.5, "currency": "USD"}}):
        with pytest.raises(CallInvalid) as info:
            run(gate, approval(), ran, args=args)
        assert info.value.reason == "AMOUNT" and info.value.data["where"] == "/amount"
    assert ran == [] and UsedApprovals(store).get(APPROVAL_ID) is None


def test_an_integer_amount_is_read_as_its_decimal(store: Store) -> None:
    gate = make_gate(store, ManualClock(NOW))
    args = {**ARGS, "amount": {"value": 2140, "currency": "USD"}}
    requirement = gate.requirement("charge_card", args)
    assert requirement is not None and requirement.amount == usd("2140")


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([charge_card(), charge_card()], "declared twice"),
        ([GatedTool("charge card", FINANCE)], "not a tool name"),
        ([GatedTool("charge_card", "human://acme.com/role/")], "address is not valid"),
        ([GatedTool("charge_card", "agent://acme.com/bot")], "an agent's"),
        ([GatedTool("charge_card", FINANCE, action="approve spend")], "not an action"),
        ([GatedTool("charge_card", FINANCE, amount="amount")], "not a JSON Pointer"),
        ([charge_card(definition={**DEFINITION, "name": "refund"})], "definition's name"),
        ([charge_card(definition={**DEFINITION, "x": float("nan")})], "not JSON"),
    ],
)
def test_a_wrong_gate_declaration_fails_at_start(
    store: Store, tools: list[GatedTool], says: str
) -> None:
    with pytest.raises(GateInvalid) as info:
        make_gate(store, ManualClock(NOW), tools)
    assert says in info.value.message


@pytest.mark.parametrize(
    "options",
    [{"skew_seconds": -1}, {"skew_seconds": 301}, {"max_lifetime_seconds": 0}],
)
def test_a_gate_with_impossible_time_limits_is_refused(store: Store, options: Any) -> None:
    with pytest.raises(GateInvalid):
        make_gate(store, ManualClock(NOW), **options)


def test_a_price_function_that_returns_no_price_is_a_declaration_error(store: Store) -> None:
    tool = GatedTool("charge_card", FINANCE, price=lambda _a: "30 USD")  # type: ignore[arg-type,return-value]
    gate = make_gate(store, ManualClock(NOW), [tool])
    with pytest.raises(GateInvalid):
        gate.requirement("charge_card", ARGS)


def test_the_call_digest_binds_server_tool_and_exact_arguments() -> None:
    """[CALL-DIGEST] member order does not matter; any change to a value does."""
    reordered = {"payee": "Lufthansa", "amount": {"currency": "USD", "value": "2140.00"}}
    base = call_digest(SERVER, "charge_card", ARGS)
    assert call_digest(SERVER, "charge_card", reordered) == base
    assert base == digest({"server": SERVER, "tool": "charge_card", "arguments": ARGS})
    changed = [
        call_digest("https://other.example", "charge_card", ARGS),
        call_digest(SERVER, "refund_card", ARGS),
        call_digest(SERVER, "charge_card", {**ARGS, "payee": "Lufthansa "}),
        call_digest(SERVER, "charge_card", {**ARGS, "memo": None}),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    assert tool_digest(DEFINITION) != tool_digest({**DEFINITION, "description": "Charge."})


def test_a_price_function_that_fails_is_a_declaration_error(store: Store) -> None:
    tool = GatedTool("charge_card", FINANCE, price=lambda args: Price(usd(args["fare"]), PAYEE))
    gate = make_gate(store, ManualClock(NOW), [tool])
    ran: list[Any] = []
    with pytest.raises(GateInvalid) as info:
        run(gate, approval(), ran)
    assert "KeyError" in info.value.message and ran == []
