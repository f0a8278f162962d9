"""The scripted gateway: a real gateway's signed approvals, with a script for the person."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from coordinator.trips import sleepers
from hatp.clock import ManualClock, format_time
from hatp.coordinator import ApprovalRequest, ScriptedAnswer, ScriptedGateway, sign_approval
from hatp.demo import GATEWAY, trip_plan
from hatp.errors import HatpError
from hatp.evidence import Keyring, SigningKey, digest, verify
from hatp.model import Approval, ApprovalDecision, parse_plan
from hatp.version import PROTOCOL_VERSION

KEY = SigningKey.from_seed(bytes([7]) * 32, f"{GATEWAY}#key-1")
KEYRING = Keyring([(KEY.public, GATEWAY)], trusted_issuers=[GATEWAY])
BOB = "human://acme.com/bob"


@pytest.fixture
def finance_ask(clock: ManualClock) -> ApprovalRequest:
    decide_by = clock.now() + timedelta(minutes=15)
    plan = parse_plan(trip_plan("txn-gw", decide_by=decide_by))
    return ApprovalRequest("txn-gw", plan, digest(plan.to_wire()), plan.approvals[0], decide_by)


def test_sign_approval_is_signed_by_the_gateway_over_every_field(
    clock: ManualClock, finance_ask: ApprovalRequest
) -> None:
    approval = sign_approval(KEY, GATEWAY, finance_ask, ApprovalDecision.APPROVE, BOB, clock.now())
    assert verify(approval, KEYRING).issuer == GATEWAY
    assert {k: v for k, v in approval.items() if k != "signature"} == {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "approval",
        "txnId": "txn-gw",
        "planDigest": finance_ask.plan_digest,
        "groupId": "finance",
        "decision": "approve",
        "approver": BOB,
        "gateway": GATEWAY,
        "decidedAt": format_time(clock.now()),
    }
    assert Approval.model_validate(approval).decision is ApprovalDecision.APPROVE


def test_a_rejection_cannot_be_flipped_to_an_approval(
    clock: ManualClock, finance_ask: ApprovalRequest
) -> None:
    rejected = sign_approval(KEY, GATEWAY, finance_ask, ApprovalDecision.REJECT, BOB, clock.now())
    with pytest.raises(HatpError):
        verify({**rejected, "decision": "approve"}, KEYRING)


def test_the_scripted_person_answers_per_group_after_waiting_on_the_clock(
    clock: ManualClock, finance_ask: ApprovalRequest
) -> None:
    answer = ScriptedAnswer(ApprovalDecision.REJECT, BOB, after_seconds=300)
    gateway = ScriptedGateway(GATEWAY, KEY, clock, {"finance": answer})

    async def ask() -> dict[str, object]:
        task = asyncio.create_task(gateway.ask(finance_ask))
        await sleepers(clock, 1)
        assert not task.done()
        clock.advance(300)
        return await task

    started = clock.now()
    approval = asyncio.run(ask())
    assert (approval["decision"], approval["approver"]) == ("reject", BOB)
    assert approval["decidedAt"] == format_time(started + timedelta(seconds=300))
    assert gateway.gateway_id == GATEWAY
    assert gateway.asked == [finance_ask]


def test_a_script_coroutine_decides_per_request(
    clock: ManualClock, finance_ask: ApprovalRequest
) -> None:
    seen: list[str] = []

    async def person(request: ApprovalRequest) -> ScriptedAnswer:
        seen.append(request.plan_digest)
        return ScriptedAnswer(ApprovalDecision.APPROVE, BOB)

    approval = asyncio.run(ScriptedGateway(GATEWAY, KEY, clock, person).ask(finance_ask))
    assert seen == [finance_ask.plan_digest]
    assert approval["decision"] == "approve"
    assert verify(approval, KEYRING).issuer == GATEWAY


def test_a_person_who_never_answers_waits_until_cancelled(
    clock: ManualClock, finance_ask: ApprovalRequest
) -> None:
    silent = ScriptedAnswer(ApprovalDecision.APPROVE, BOB, never=True)
    gateway = ScriptedGateway(GATEWAY, KEY, clock, {"finance": silent})

    async def ask() -> bool:
        task = asyncio.create_task(gateway.ask(finance_ask))
        for _ in range(100):
            await asyncio.sleep(0)
        clock.advance(24 * 3600)
        for _ in range(100):
            await asyncio.sleep(0)
        still_waiting = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return still_waiting

    assert asyncio.run(ask())
    assert gateway.asked == [finance_ask]
