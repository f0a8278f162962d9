"""Rendering a transaction for a person: its record as a timeline, and an approval card.

Everything here is drawn from structured data (the plan, the signed
receipts). Text an agent wrote appears only under an "agent-written" label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.table import Table

from hatp.clock import parse_time
from hatp.model import Plan, TxnEvent, parse_plan


def short(party: str) -> str:
    """``mcp://airline.example`` -> ``airline``."""
    host = party.split("://", 1)[-1].split("/", 1)[0]
    return host.split(".", 1)[0] if "." in host else host


def _prepared(body: Mapping[str, Any], who: str) -> tuple[str, str]:
    receipt, branch = body.get("receipt") or {}, body["branchId"]
    if body.get("problem"):
        return who, f"prepare [bold]{branch}[/]: [red]NO[/] — {body['problem']}"
    parts = [f"prepare [bold]{branch}[/] ({receipt['tier']}): [green]YES[/]"]
    if receipt.get("leaseExpiresAt"):
        parts.append(f"held until {receipt['leaseExpiresAt'][11:19]}")
    if receipt.get("preconditions"):
        versions = ", ".join(f"{k}@{v}" for k, v in receipt["preconditions"]["versions"].items())
        parts.append(f"saw {versions}")
    if receipt.get("cost"):
        parts.append(f"costs {receipt['cost']['value']} {receipt['cost']['currency']}")
    return who, "; ".join(parts)


def _approval(body: Mapping[str, Any], address: str) -> tuple[str, str]:
    approval, group = body.get("approval") or {}, body["groupId"]
    asked = f"asked {address} ('{group}')"
    if approval and not body.get("problem"):
        return "gateway", (
            f"{asked}: [green]APPROVED[/] by {approval['approver']} at "
            f"{approval['decidedAt'][11:19]}"
        )
    return "gateway", f"{asked}: [red]NOT APPROVED[/] — {body.get('problem')}"


_Line = Callable[[Mapping[str, Any], str], tuple[str, str]]


def _phase2(verb: str, colour: str) -> _Line:
    def line(body: Mapping[str, Any], who: str) -> tuple[str, str]:
        receipt = body["receipt"]
        effect = receipt.get("effect") or {}
        summary = effect.get("summary") or ", ".join(f"{k}={v}" for k, v in effect.items())
        text = f"[{colour}]{verb}[/] [bold]{body['branchId']}[/]"
        return who, text + (f" — {summary}" if summary else "")

    return line


_LINES: dict[str, _Line] = {
    TxnEvent.PREPARED: _prepared,
    TxnEvent.APPROVAL: _approval,
    TxnEvent.DECIDED: lambda b, _: (
        "coordinator",
        f"decision logged: [bold]{b['decision'].upper()}[/] — {b['reason']}",
    ),
    TxnEvent.TAKEN_OVER: lambda b, _: (
        "coordinator",
        f"[yellow]taken over[/] by {b['owner']} with fencing token {b['fence']}",
    ),
    TxnEvent.IN_DOUBT: lambda b, _: (
        "coordinator",
        f"[yellow]IN DOUBT[/] on {b['branchId']}: {b['detail']} — neither capture nor void; "
        "holds kept; retrying the idempotent commit",
    ),
    TxnEvent.UNWINDING: lambda b, _: (
        "coordinator",
        f"[red]{b['branchId']} failed[/] ({b['error']['code']}): undoing what ran",
    ),
    TxnEvent.COMMITTED: _phase2("committed", "green"),
    TxnEvent.COMPENSATED: _phase2("undone", "yellow"),
    TxnEvent.ABORTED: _phase2("released", "yellow"),
    TxnEvent.OUTCOME: lambda b, _: ("coordinator", f"outcome [bold]{b['state'].upper()}[/]"),
    "record.sealed": lambda b, _: ("coordinator", f"record sealed after {b['eventCount']} events"),
}


def print_timeline(record: Mapping[str, Any], console: Console) -> None:
    """Print one line per record event: time since the start, who, what."""
    events = record.get("events") or []
    if not events:
        return
    start = parse_time(events[0]["time"])
    parties: dict[str, str] = {}
    for event in events:
        offset = (parse_time(event["time"]) - start).total_seconds()
        kind, body = event["type"], event["body"]
        if kind == TxnEvent.PLANNED:
            plan = parse_plan(body["plan"])
            parties = {b.branch_id: short(b.participant) for b in plan.branches}
            parties.update({g.group_id: g.address for g in plan.approvals})
            who, text = "coordinator", _planned(plan)
        else:
            render = _LINES.get(kind)
            party = parties.get(str(body.get("branchId", body.get("groupId"))), "?")
            who, text = render(body, party) if render else ("?", kind)
        console.print(f"  +{offset:7.3f}s  {who:<12} {text}", soft_wrap=True)


def _planned(plan: Plan) -> str:
    groups = ", ".join(f"'{g.group_id}' ({g.address})" for g in plan.approvals) or "none"
    return (
        f"plan {plan.txn_id} logged: {len(plan.branches)} branches, approvals {groups}, "
        f"decide by {plan.deadlines.decide_by[11:19]}"
    )


def approval_card(plan: Plan, group_id: str) -> Table:
    """The approval screen, drawn from the structured plan only."""
    group = next(g for g in plan.approvals if g.group_id == group_id)
    table = Table(title=f"Approval requested: {group.requirement.action} ({group.address})")
    for column in ("step", "participant", "operation", "tier", "amount"):
        table.add_column(column)
    for branch in plan.branches:
        amount = str(branch.amount) if branch.amount else "—"
        if branch.settles:
            amount += f" (pays for {', '.join(branch.settles)})"
        table.add_row(
            branch.branch_id, branch.participant, branch.operation, branch.tier.value, amount
        )
    tolerance = Decimal(group.requirement.tolerance)
    totals = "; ".join(
        f"{total} {currency}, up to {total * (1 + tolerance):.2f} {currency}"
        for currency, total in plan.totals().items()
    )
    table.caption = f"total {totals or 'nothing'} · on behalf of {plan.on_behalf_of}"
    if plan.agent_text:
        table.caption += f"\nagent-written (not checked): {plan.agent_text.summary}"
    return table
