"""Checking a Human Gateway's routing record offline, against the plan it routed.

The verifier does not take the gateway's word for the amounts: it recomputes
what the approval group had to cover from the plan (the same pure function
the gateway uses, :func:`hatp.model.required_amounts`) and fails a record
that claims a check it did not make. A record saying ``checked: "absent"``
is reported absent, and absent is never a pass (docs/spec.md §18). A record an
approval in a Transaction Record carries is checked at the time of the event
that carries the approval ([VER-PERIOD]).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from hatp.errors import AskInvalid, HatpError
from hatp.evidence._digest import digest
from hatp.evidence._keys import Keyring
from hatp.evidence._tally import Place, Signatures, Tally
from hatp.model import ABSENT, Amount, Finding, Plan, RoutingRecord, parse_plan, required_amounts

#: The routing rules, in report order, with what a pass means.
ROUTING_RULES: dict[str, str] = {
    "RTE-SIGNED": "the record has the routing-record form and is signed by the gateway it names",
    "RTE-DIGEST": "the record names this plan (digest and transaction) and one of its "
    "approval groups, at that group's address",
    "RTE-CHECKED": "checked is what the plan requires of the group: its totals plus "
    "tolerance, per currency",
    "RTE-TOTALS": "planTotals are what the plan spends, per currency",
}


@dataclass(frozen=True, slots=True)
class _Routing:
    doc: Mapping[str, Any]
    record: RoutingRecord | None
    record_problem: str
    plan_doc: Mapping[str, Any] | Plan
    plan: Plan | None
    plan_problem: str | None
    keyring: Keyring
    #: The digest of ``plan``, when the caller has it; else computed.
    plan_digest: str | None = None
    #: Where the record sits in a Transaction Record, and when: what its signature is
    #: checked at ([VER-PERIOD]); noted in ``signatures``.
    place: Place = field(default_factory=Place)
    signatures: Signatures = field(default_factory=Signatures)


def verify_routing(
    record: Mapping[str, Any], plan: Mapping[str, Any] | Plan, keyring: Keyring
) -> list[Finding]:
    """Check a signed routing record against ``plan``; return one finding per rule
    of :data:`ROUTING_RULES` (one per failure for a failing rule).

    Never raises on a bad record or plan: what cannot be read fails or is absent.
    """
    return _findings(_read(record, plan, keyring))


def routing_findings(
    doc: Mapping[str, Any],
    record: RoutingRecord,
    plan: Plan,
    plan_digest: str,
    keyring: Keyring,
    signatures: Signatures,
    place: Place,
) -> list[Finding]:
    """:func:`verify_routing`, for a caller that has read ``doc`` as ``record`` and holds
    ``plan``'s digest (checking an approval that carries it): the same findings, the
    signature checked at ``place``'s time and noted in ``signatures``."""
    routing = _Routing(doc, record, "", plan, plan, None, keyring, plan_digest, place, signatures)
    return _findings(routing)


def carried_routing_findings(
    doc: Mapping[str, Any],
    plan: Mapping[str, Any] | Plan,
    keyring: Keyring,
    signatures: Signatures,
    place: Place,
) -> list[Finding]:
    """:func:`verify_routing` of a routing record an approval in a record carries: the
    same findings, the signature checked at ``place``'s time and noted in ``signatures``."""
    return _findings(replace(_read(doc, plan, keyring), place=place, signatures=signatures))


def _findings(routing: _Routing) -> list[Finding]:
    tally = Tally(ROUTING_RULES)
    passes: dict[str, str] = {}
    for rule, check in _RULES.items():
        detail = check(routing, tally)
        if detail is not None:
            passes[rule] = detail
    return tally.findings(passes)


def _read(record: Mapping[str, Any], plan: Mapping[str, Any] | Plan, keyring: Keyring) -> _Routing:
    parsed: RoutingRecord | None = None
    shape = ""
    try:
        parsed = RoutingRecord.model_validate(record)
    except ValidationError as exc:
        error = exc.errors()[0]
        shape = f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
    try:
        plan_obj: Plan | None = parse_plan(plan)
        problem = None
    except HatpError as exc:
        plan_obj, problem = None, f"{exc.code}: {exc.message}"
    return _Routing(record, parsed, shape, plan, plan_obj, problem, keyring)


def _check_signed(routing: _Routing, tally: Tally) -> str | None:
    rule = "RTE-SIGNED"
    if routing.record is None:
        tally.fail(rule, f"not a routing record: {routing.record_problem}")
        return None
    try:
        signer = routing.signatures.verify(routing.doc, routing.keyring, routing.place)
    except HatpError as exc:
        tally.fail(
            rule, f"the record does not verify: {exc.data.get('reason', exc.code)}: {exc.message}"
        )
        return None
    gateway = routing.record.gateway
    tally.expect(
        rule,
        signer.issuer == gateway,
        None,
        lambda: (
            f"signed by {signer.issuer!r} (key {signer.kid!r}), not by the gateway it "
            f"names, {gateway!r}"
        ),
    )
    return f"signed by {gateway} (key {signer.kid})"


def _check_digest(routing: _Routing, tally: Tally) -> str | None:
    rule = "RTE-DIGEST"
    record, plan = routing.record, routing.plan
    if record is None:
        return None
    if plan is None:
        tally.absent(rule, f"the plan cannot be read: {routing.plan_problem}")
        return None
    computed = routing.plan_digest or digest(plan.to_wire())
    if record.plan_digest != computed:
        tally.fail(rule, f"names plan {record.plan_digest}, but the plan digests to {computed}")
    if record.txn_id != plan.txn_id:
        tally.fail(rule, f"names transaction {record.txn_id!r}, not {plan.txn_id!r}")
    group = next((g for g in plan.approvals if g.group_id == record.group_id), None)
    if group is None:
        tally.fail(rule, f"names approval group {record.group_id!r}, which is not in the plan")
    elif group.address != record.address:
        tally.fail(rule, f"routed {record.address!r}, but the group's address is {group.address!r}")
    tally.ran(rule)
    return f"plan {computed}, group {record.group_id!r}"


def _check_checked(routing: _Routing, tally: Tally) -> str | None:
    rule = "RTE-CHECKED"
    record = routing.record
    if record is None:
        return None
    if record.checked == ABSENT:
        tally.absent(rule, "the gateway ran no amount check (checked: absent)")
        return None
    try:
        required = required_amounts(routing.plan_doc, record.group_id)
    except AskInvalid:  # RTE-DIGEST reports the record naming a group the plan lacks
        tally.absent(rule, f"the plan has no approval group {record.group_id!r}")
        return None
    except HatpError as exc:
        tally.fail(rule, f"the plan cannot be routed, yet it was: {exc.code}: {exc.message}")
        return None
    expected = {currency: r.with_tolerance for currency, r in required.items()}
    claimed = _per_currency(record.checked if isinstance(record.checked, list) else [])
    tally.expect(
        rule,
        claimed == expected,
        None,
        lambda: (
            f"checked {_text(claimed)}, but the plan requires {_text(expected)} "
            "(totals plus tolerance): the gateway recorded a check it did not make"
        ),
    )
    return f"checked {_text(expected)}, recomputed from the plan"


def _check_totals(routing: _Routing, tally: Tally) -> str | None:
    rule = "RTE-TOTALS"
    record, plan = routing.record, routing.plan
    if record is None:
        return None
    if plan is None:
        tally.absent(rule, f"the plan cannot be read: {routing.plan_problem}")
        return None
    stated, spends = _per_currency(record.plan_totals), plan.totals()
    tally.expect(
        rule,
        stated == spends,
        None,
        lambda: f"planTotals {_text(stated)}, but the plan spends {_text(spends)}",
    )
    return f"planTotals {_text(spends)}"


def _per_currency(amounts: list[Amount]) -> dict[str, Decimal] | None:
    out = {a.currency: Decimal(a.value) for a in amounts}
    return out if len(out) == len(amounts) else None  # a currency twice matches nothing


def _text(amounts: Mapping[str, Decimal] | None) -> str:
    if amounts is None:
        return "a currency twice"
    return ", ".join(f"{v} {c}" for c, v in sorted(amounts.items())) or "nothing"


_RULES: dict[str, Callable[[_Routing, Tally], str | None]] = {
    "RTE-SIGNED": _check_signed,
    "RTE-DIGEST": _check_digest,
    "RTE-CHECKED": _check_checked,
    "RTE-TOTALS": _check_totals,
}
