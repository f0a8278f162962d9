"""Rendering a transaction for a person: its record as a timeline.

Everything here is drawn from structured data (the plan, the signed
receipts). Text an agent wrote appears only under an "agent-written" label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

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
    line = "; ".join(parts)
    preview = receipt.get("preview")
    if preview:
        line += f"\n{'':24}{_certainty(preview)}: {escape(preview['summary'])}"
    return who, line


_CERTAINTY = {
    "exact": "[green]will do exactly[/]",
    "predicted": "[yellow]predicts[/]",
    "none": "[dim]gives no preview[/]",
}


def _certainty(preview: Mapping[str, Any]) -> str:
    """How sure the preview is, in words a person reads (exact reads unlike predicted)."""
    said = _CERTAINTY.get(str(preview.get("certainty")), escape(str(preview.get("certainty"))))
    bound = preview.get("bound")
    return said + (f" (at most {bound['value']} {bound['currency']})" if bound else "")


_VERDICTS = {
    "as-previewed": "[green]as previewed[/]",
    "within-bounds": "[yellow]within the previewed bounds[/]",
    "differs": "[red bold]NOT AS PREVIEWED[/] (flagged; nothing changed for it)",
}


def _effect(body: Mapping[str, Any], who: str) -> tuple[str, str]:
    verdict = _VERDICTS.get(str(body.get("verdict")), escape(str(body.get("verdict"))))
    return who, f"{body['branchId']} committed {verdict}"


def _pending(body: Mapping[str, Any], address: str) -> tuple[str, str]:
    pending = body["pending"]
    return "gateway", (
        f"asked {address} ('{body['groupId']}'): [yellow]PENDING[/] as {pending['askId']}, "
        f"to be decided by {pending['decideBy'][11:19]}"
    )


def _approval(body: Mapping[str, Any], address: str) -> tuple[str, str]:
    approval, group = body.get("approval") or {}, body["groupId"]
    asked = f"'{group}' ({address})"
    routing = _routing(approval.get("routing") or {})
    if approval and not body.get("problem"):
        return "gateway", (
            f"{asked}: [green]APPROVED[/] by {', '.join(approval['approvers'])} at "
            f"{approval['decidedAt'][11:19]}{routing}"
        )
    return "gateway", f"{asked}: [red]NOT APPROVED[/] — {body.get('problem')}{routing}"


def _routing(record: Mapping[str, Any]) -> str:
    """Who the address matched and what became of each, from the signed routing record."""
    people = []
    for human in record.get("humans") or []:
        name = human["id"].rsplit("/", 1)[-1]
        why = human.get("rule") or human.get("detail")
        people.append(f"{name} {human['result']}" + (f" ({why})" if why else ""))
    return f"\n{'':24}routing: " + "; ".join(people) if people else ""


_Line = Callable[[Mapping[str, Any], str], tuple[str, str]]


def _phase2(verb: str, colour: str) -> _Line:
    def line(body: Mapping[str, Any], who: str) -> tuple[str, str]:
        receipt = body["receipt"]
        effect = receipt.get("effect") or {}
        seen = receipt.get("observed") or {}
        summary = (
            seen.get("summary")
            or effect.get("summary")
            or ", ".join(f"{k}={v}" for k, v in effect.items())
        )
        text = f"[{colour}]{verb}[/] [bold]{body['branchId']}[/]"
        return who, text + (f" — {summary}" if summary else "")

    return line


def _mode(body: Mapping[str, Any], _: str) -> tuple[str, str]:
    chosen = f"mode [bold]{body['chosen']}[/]"
    if body.get("worstSeconds") is None:
        return "coordinator", f"{chosen} (asked for {body['requested']})"
    return "coordinator", (
        f"{chosen}: asking can take {body['worstSeconds']:g} s along the escalation chain, "
        f"+{body['commitSeconds']:g} s to commit, against {body['shortestHoldSeconds']:g} s "
        f"for the shortest hold ({body['basis']})"
    )


def _terms(body: Mapping[str, Any], _: str) -> tuple[str, str]:
    """What people approve with the plan: the holds' ends (none placed yet in
    approval-first), the deadline, and each step's signed preview."""
    terms = body["terms"]
    holds = ", ".join(
        f"{h['branchId']} held until {h['holdHorizon'][11:19]}" for h in terms["holds"]
    )
    line = (
        f"terms for the approvers: {holds or 'no holds placed yet'}; "
        f"approve by {terms['approveBy'][11:19]}"
    )
    for branch, preview in (terms.get("previews") or {}).items():
        line += f"\n{'':24}{branch}: {_certainty(preview)}: {escape(preview['summary'])}"
    return "coordinator", line


def _holds(body: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{h['branchId']} {'live' if h['live'] else '[red]lapsed[/]'}" for h in body["holds"]
    )


_LINES: dict[str, _Line] = {
    TxnEvent.MODE: _mode,
    TxnEvent.PREPARED: _prepared,
    TxnEvent.TERMS: _terms,
    TxnEvent.REPLACED: lambda b, who: (
        who,
        f"[yellow]placed again[/] {b['branchId']} (the hold was lost; nobody asked twice)"
        if b.get("problem") is None
        else f"[red]could not place {b['branchId']} again[/]: {b['problem']}",
    ),
    TxnEvent.RENEWED: lambda b, who: (
        who,
        f"renewed {b['branchId']} until {b['receipt']['leaseExpiresAt'][11:19]}",
    ),
    TxnEvent.DEADLINE: lambda b, _: (
        "coordinator",
        f"approval deadline moved to {b['approveBy'][11:19]} to fit inside {b['basis']}",
    ),
    TxnEvent.ESCALATED: lambda b, _: (
        "coordinator",
        f"[yellow]escalated[/] the in-doubt {b['branchId']} to {b['to']} before the holds "
        f"end at {(b['firstHoldEnds'] or '')[11:19]}; still asking",
    ),
    TxnEvent.LATE_ANSWER: lambda b, _: (
        "coordinator",
        f"[yellow]late answer[/] from {b['branchId']}: {_holds(b)}",
    ),
    TxnEvent.RECOVERY_OFFERED: lambda b, _: (
        "coordinator",
        f"recovery offered, not performed: {b['linkedTxnId']} places "
        f"{', '.join(b['lapsed'])} again "
        + ("with the payer present" if b["payerPresent"] else "off-session"),
    ),
    TxnEvent.PENDING: _pending,
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
    TxnEvent.EFFECT: _effect,
    TxnEvent.COMPENSATED: _phase2("undone", "yellow"),
    TxnEvent.ABORTED: _phase2("released", "yellow"),
    TxnEvent.OUTCOME: lambda b, _: (
        "coordinator",
        f"outcome [bold]{b['state'].upper()}[/]"
        + (
            f" — [red bold]committed other than previewed: {', '.join(b['effectDiffers'])}[/]"
            if b.get("effectDiffers")
            else ""
        ),
    ),
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
        kind, body = event["type"], _shown(event["body"])
        if kind == TxnEvent.PLANNED:
            plan = parse_plan(event["body"]["plan"])
            parties = {b.branch_id: escape(short(b.participant)) for b in plan.branches}
            parties.update({g.group_id: escape(g.address) for g in plan.approvals})
            who, text = "coordinator", escape(_planned(plan))
        else:
            render = _LINES.get(kind)
            party = parties.get(
                str(event["body"].get("branchId", event["body"].get("groupId"))), "?"
            )
            who, text = render(body, party) if render else ("?", escape(str(kind)))
        console.print(f"  +{offset:8.3f}s  {who:<12} {text}", soft_wrap=True)


def _shown(value: Any) -> Any:
    """``value`` with every string escaped: what the record says shows as written (a
    problem that reads ``[api] down`` stays so), the markup is this module's alone."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, Mapping):
        return {key: _shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


def _planned(plan: Plan) -> str:
    groups = ", ".join(f"'{g.group_id}' ({g.address})" for g in plan.approvals) or "none"
    return (
        f"plan {plan.txn_id} logged: {len(plan.branches)} branches, approvals {groups}, "
        f"decide by {plan.deadlines.decide_by[11:19]}"
    )
