"""Routing one approval group: the gateway's own amounts, the directory, a signed record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from hatp import _checks
from hatp.clock import Clock, format_time
from hatp.directory import CardSource, Resolution, resolve
from hatp.errors import AskInvalid
from hatp.evidence import SigningKey, digest, sign
from hatp.model import (
    ABSENT,
    HumanResult,
    Plan,
    RoutedHuman,
    RoutingRecord,
    recheck_plan,
    required_amounts,
)
from hatp.version import PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class Routed:
    """A routed approval group: the resolution, and the signed routing record (wire form)."""

    resolution: Resolution
    record: dict[str, Any]


def route(
    plan: Mapping[str, Any] | Plan,
    plan_digest: str,
    group: str,
    directory: CardSource,
    *,
    gateway_id: str,
    key: SigningKey,
    clock: Clock,
    initiator_principal: str | None = None,
    deadline_seconds: float | None = None,
    passkey_required: bool = False,
) -> Routed:
    """Route approval group ``group`` of ``plan``; return the resolution and a signed record.

    The gateway works the amounts out itself ([GW-AMOUNT]) and resolves the
    group's address against them on behalf of ``plan.onBehalfOf``. With the
    amount check switched off (tests only) it routes on the amount the agent
    declared, if any, and the record says ``checked: "absent"``.

    Raises:
        PlanInvalid: the plan is invalid; a negative amount or tolerance is
            refused by the gateway itself ([GW-NEGATIVE]).
        RequirementBelowTotal: the group declares less than the plan needs
            ([GW-BELOW-TOTAL]).
        AddressInvalid: the group's address does not resolve to people.
        AskInvalid: the plan has no approval group ``group`` (``UNKNOWN_GROUP``), or
            ``plan_digest`` is not the plan's digest (``DIGEST_MISMATCH``).
    """
    parsed = recheck_plan(plan)
    approval = next((g for g in parsed.approvals if g.group_id == group), None)
    if approval is None:
        raise AskInvalid(
            f"plan {parsed.txn_id!r} has no approval group {group!r}",
            reason="UNKNOWN_GROUP",
            group_id=group,
        )
    if (actual := digest(parsed.to_wire())) != plan_digest:
        raise AskInvalid(
            f"{plan_digest} is not the digest of plan {parsed.txn_id!r} ({actual}); "
            "ask about the plan the parties signed",
            reason="DIGEST_MISMATCH",
            sent=plan_digest,
            actual=actual,
        )
    checked: list[dict[str, str]] | str
    amounts: dict[str, Decimal]
    if _checks.is_on("GW-AMOUNT"):
        required = required_amounts(parsed, group)
        amounts = {currency: r.with_tolerance for currency, r in required.items()}
        checked = _money(amounts)
    else:
        # What a gateway without the check does: trust the agent's number.
        declared = approval.requirement.amount
        amounts = {} if declared is None else {declared.currency: Decimal(declared.value)}
        checked = ABSENT
    resolution = resolve(
        directory,
        approval.address,
        approval.requirement,
        amounts=amounts,
        on_behalf_of=parsed.on_behalf_of,
        initiator_principal=initiator_principal,
        deadline_seconds=deadline_seconds,
        passkey_required=passkey_required,
    )
    humans = [RoutedHuman(id=c.id, result=HumanResult.CANDIDATE) for c in resolution.candidates]
    humans += [
        RoutedHuman(id=e.id, result=HumanResult.EXCLUDED, rule=e.rule.value, detail=e.detail)
        for e in resolution.excluded
    ]
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "routing",
        "txnId": parsed.txn_id,
        "planDigest": plan_digest,
        "groupId": group,
        "address": approval.address,
        "gateway": gateway_id,
        "planTotals": _money(parsed.totals()),
        "checked": checked,
        "humans": [h.to_wire() for h in humans],
        "time": format_time(clock.now()),
    }
    signed = sign(body, key)
    RoutingRecord.model_validate(signed)  # the record we sign has the wire form
    return Routed(resolution, signed)


def _money(amounts: Mapping[str, Decimal]) -> list[dict[str, str]]:
    return [{"value": str(value), "currency": c} for c, value in sorted(amounts.items())]
