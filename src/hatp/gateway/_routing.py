"""Routing one approval group: the gateway's own amounts, the directory, a signed record.

Also routing one tool call's terms (the amount the gateway read from the
call's arguments), a question (no money, so no authority or
separation-of-duties rule), and re-signing a routing record with what
became of each person.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from hatp import _checks
from hatp.clock import Clock, format_time
from hatp.directory import (
    CardSource,
    Exclusion,
    ExclusionRule,
    Resolution,
    resolve,
)
from hatp.errors import AskInvalid
from hatp.evidence import SigningKey, digest, sign
from hatp.model import (
    ABSENT,
    CALL_GROUP,
    Address,
    CallTerms,
    HumanResult,
    Plan,
    RoutedHuman,
    RoutingRecord,
    owed,
    recheck_plan,
    required_amounts,
)
from hatp.version import PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class Routed:
    """A routed approval group: the resolution, the signed routing record (wire form),
    and the amounts per currency an approver had to cover."""

    resolution: Resolution
    record: dict[str, Any]
    amounts: Mapping[str, Decimal] = field(default_factory=dict)
    #: Whether approve votes need the approver's passkey ([GW-PASSKEY]); only people
    #: with one on their card were candidates ([DIR-PASSKEY]).
    passkey: bool = False


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
    passkey_required: bool | None = None,
    wire: Mapping[str, Any] | None = None,
) -> Routed:
    """Route approval group ``group`` of ``plan``; return the resolution and a signed record.

    ``wire``: the wire form of ``plan`` (a :class:`Plan`), when the caller has just
    made it (the gateway stores it with the ask); it is digested as it is.

    The gateway works the amounts out itself ([GW-AMOUNT]) and resolves the
    group's address against them on behalf of ``plan.onBehalfOf``. With the
    amount check switched off (tests only) it routes on the amount the agent
    declared, if any, and the record says ``checked: "absent"``.
    ``passkey_required`` defaults to the group's ``requirement.passkey``: true, or
    a threshold the amounts are above ([GW-PASSKEY]).

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
    if wire is None or not isinstance(plan, Plan):
        wire = parsed.to_wire()
    if (actual := digest(wire)) != plan_digest:
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
    return _route(
        directory,
        approval.address,
        approval.requirement.action,
        amounts,
        on_behalf_of=parsed.on_behalf_of,
        initiator_principal=initiator_principal,
        deadline_seconds=deadline_seconds,
        passkey_required=approval.requirement.passkey_needed(amounts)
        if passkey_required is None
        else passkey_required,
        record={
            "txnId": parsed.txn_id,
            "planDigest": plan_digest,
            "groupId": group,
            "planTotals": _money(parsed.totals()),
            "checked": checked,
        },
        gateway_id=gateway_id,
        key=key,
        clock=clock,
    )


def route_call(
    terms: CallTerms,
    directory: CardSource,
    *,
    gateway_id: str,
    key: SigningKey,
    clock: Clock,
    initiator_principal: str | None = None,
    deadline_seconds: float | None = None,
    passkey_required: bool = False,
) -> Routed:
    """Route one tool call's terms; return the resolution and a signed record. [GW-CALL-ROUTE]

    The same resolution as an approval group's (:func:`route`): the terms'
    address and action, on behalf of ``terms.onBehalfOf``. An approver must
    cover, per currency, the amount the gateway read from the call's
    arguments and the price cap, the larger where they share a currency (the
    price is that same money), as the tool server checks ([GATE-AUTHORITY]);
    a call with neither checks no amount. The record names the request
    (``txnId``), the digest of the terms (``planDigest``) and the group
    ``"call"``; ``planTotals`` and ``checked`` are those amounts.

    Raises:
        AddressInvalid: the terms' address does not resolve to people.
    """
    amounts = owed(terms.amount, None if terms.price is None else terms.price.max_amount)
    return _route(
        directory,
        terms.address,
        terms.action,
        amounts,
        on_behalf_of=terms.on_behalf_of,
        initiator_principal=initiator_principal,
        deadline_seconds=deadline_seconds,
        passkey_required=passkey_required,
        record={
            "txnId": terms.request_id,
            "planDigest": digest(terms.to_wire()),
            "groupId": CALL_GROUP,
            "planTotals": _money(amounts),
            "checked": _money(amounts),
        },
        gateway_id=gateway_id,
        key=key,
        clock=clock,
    )


def _route(
    directory: CardSource,
    address: str,
    action: str,
    amounts: dict[str, Decimal],
    *,
    on_behalf_of: str,
    initiator_principal: str | None,
    deadline_seconds: float | None,
    passkey_required: bool,
    record: dict[str, Any],
    gateway_id: str,
    key: SigningKey,
    clock: Clock,
) -> Routed:
    """Resolve ``address`` for ``action`` against ``amounts`` and sign the routing record
    (``record`` gives what it is about: txnId, planDigest, groupId, planTotals, checked)."""
    resolution = resolve(
        directory,
        address,
        action,
        amounts=amounts,
        on_behalf_of=on_behalf_of,
        initiator_principal=initiator_principal,
        deadline_seconds=deadline_seconds,
        passkey_required=passkey_required,
    )
    humans = [RoutedHuman(id=c.id, result=HumanResult.CANDIDATE) for c in resolution.candidates]
    humans += [excluded_human(e) for e in resolution.excluded]
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "routing",
        "txnId": record["txnId"],
        "planDigest": record["planDigest"],
        "groupId": record["groupId"],
        "address": address,
        "gateway": gateway_id,
        "planTotals": record["planTotals"],
        "checked": record["checked"],
        "humans": [h.to_wire() for h in humans],
        "time": format_time(clock.now()),
    }
    return Routed(resolution, _signed(body, key), amounts, passkey_required)


def excluded_human(exclusion: Exclusion, detail_prefix: str = "") -> RoutedHuman:
    """Return the routing record's entry for a person passed over by ``exclusion``."""
    return RoutedHuman(
        id=exclusion.id,
        result=HumanResult.EXCLUDED,
        rule=exclusion.rule.value,
        detail=detail_prefix + exclusion.detail,
    )


def resign_routing(
    record: Mapping[str, Any], humans: Sequence[RoutedHuman], key: SigningKey, at: datetime
) -> dict[str, Any]:
    """Return ``record`` with its ``humans`` and ``time`` replaced, signed again by ``key``.

    The gateway signs a first record when it routes, and a final one when the
    group is decided, saying what became of each person ([GW-ROUTING-FINAL]).

    Raises:
        pydantic.ValidationError: the result is not a routing record.
    """
    body = {k: v for k, v in record.items() if k != "signature"}
    body.update(humans=[h.to_wire() for h in humans], time=format_time(at))
    return _signed(body, key)


def _signed(body: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    signed = sign(body, key)
    RoutingRecord.model_validate(signed)  # the record we sign has the wire form
    return signed


#: The exclusion rules that apply to a question: it carries no money and may
#: well be for the very person the agent acts for.
QUESTION_RULES = frozenset({ExclusionRule.SKILL, ExclusionRule.OFFLINE, ExclusionRule.CAPACITY})


def resolve_question(
    source: CardSource, address: Address | str, *, deadline_seconds: float | None = None
) -> Resolution:
    """Resolve a question's address to ranked people who may answer it ([GW-QUESTION-ROUTE]).

    The same matching and ranking as :func:`hatp.directory.resolve`, with
    only the rules of :data:`QUESTION_RULES`.

    Raises:
        AddressInvalid: the address does not parse, or is an agent's.
    """
    return resolve(
        source,
        address,
        "answer",
        amounts={},
        on_behalf_of="",
        deadline_seconds=deadline_seconds,
        rules=QUESTION_RULES,
    )


def _money(amounts: Mapping[str, Decimal]) -> list[dict[str, str]]:
    return [{"value": str(value), "currency": c} for c, value in sorted(amounts.items())]
