"""``hatp demo``: a walk through the evidence layer.

Until the coordinator exists, the demo shows what every later part rests
on: a plan signed and digested, the parties' events chained into a
Transaction Record, the record verified offline, and two tampered copies
that fail verification with findings that name the event and the rule.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from hatp.cli._app import app, err, reports_errors
from hatp.cli._verify import print_report
from hatp.clock import SystemClock
from hatp.evidence import Keyring, RecordWriter, SigningKey, digest, sign, verify, verify_record
from hatp.model import Result
from hatp.version import PROTOCOL_VERSION

ISSUER = "https://directory.acme.example"


@app.command("demo")
@reports_errors
def demo(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for record.json and keyring.json (default: a new temp dir)."
        ),
    ] = None,
) -> None:
    """Walk through signing, chaining, verifying and tampering with a record.

    Prints the walk on stderr and the folder holding record.json and
    keyring.json on stdout.
    """
    folder = out or Path(tempfile.mkdtemp(prefix="hatp-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    parties = {
        name: SigningKey.generate(f"{name}-1")
        for name in ("travel-bot", "coordinator", "airline", "gateway")
    }
    keyring = Keyring(((k.public, ISSUER) for k in parties.values()), trusted_issuers=[ISSUER])
    console = err

    console.rule("1. The agent signs a plan")
    plan = sign(_trip_plan(), parties["travel-bot"])
    plan_digest = digest(plan)
    signer = verify(plan, keyring)
    console.print(f"plan {plan['txnId']}: {len(plan['branches'])} branches, signed by {signer.kid}")
    console.print(f"planDigest {plan_digest}")

    console.rule("2. Each party's event is signed and chained")
    record = RecordWriter(plan["txnId"], SystemClock())
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("coordinator", "plan.proposed", {"plan": plan}),
        ("airline", "vote.cast", {"branchId": "seat", "vote": "yes"}),
        ("gateway", "approval.granted", {"groupId": "finance", "approver": "human://acme/bob"}),
        ("coordinator", "decision.logged", {"decision": "commit"}),
    ]
    for party, event_type, body in steps:
        event = record.append(event_type, {**body, "planDigest": plan_digest}, parties[party])
        console.print(f"  #{event['seq']} {event_type:<18} by {event['kid']:<14} {event['time']}")
    sealed = record.seal(parties["coordinator"])
    console.print(f"  #{sealed['seq']} record.sealed      head {record.head}")
    document = record.to_json()
    _write(folder / "record.json", document)
    _write(folder / "keyring.json", keyring.to_json())

    console.rule("3. Anyone with the public keys verifies it offline")
    report = verify_record(document, keyring)
    print_report(report, console)

    console.rule("4. Tampering is caught and named")
    edited = copy.deepcopy(document)
    edited["events"][0]["body"]["plan"]["branches"][3]["amount"]["value"] = "9400.00"
    _show_failures("an amount edited after signing", verify_record(edited, keyring), console)
    removed = copy.deepcopy(document)
    del removed["events"][2]
    _show_failures("the approval event removed", verify_record(removed, keyring), console)

    console.rule("Done")
    console.print(f"wrote {folder / 'record.json'} and {folder / 'keyring.json'}")
    console.print(
        f"check it yourself: hatp verify {folder / 'record.json'} --keys {folder / 'keyring.json'}"
    )
    typer.echo(str(folder))  # stdout carries only the folder, for scripts
    if not report.ok:
        raise typer.Exit(1)


def _trip_plan() -> dict[str, Any]:
    def branch(branch_id: str, participant: str, operation: str, tier: str, value: str) -> Any:
        return {
            "branchId": branch_id,
            "participant": participant,
            "operation": operation,
            "tier": tier,
            "amount": {"value": value, "currency": "USD"},
        }

    return {
        "hatpVersion": PROTOCOL_VERSION,
        "txnId": "txn-trip-0001",
        "initiator": "agent://acme.example/travel-bot",
        "onBehalfOf": "human://acme.example/dana",
        "branches": [
            branch("seat", "mcp://airline.example/hatp", "book_seat", "hold", "0.00"),
            branch("room", "mcp://hotel.example/hatp", "hold_room", "hold", "0.00"),
            branch("meeting", "mcp://calendar.example/hatp", "add_event", "compensate", "0.00"),
            branch("card", "mcp://payments.example/hatp", "charge_card", "final", "940.00"),
        ],
        "approvals": [
            {
                "groupId": "finance",
                "address": "human://acme.example/role/finance-approver",
                "requirement": {"action": "approve.spend", "tolerance": "0.02"},
            }
        ],
    }


def _show_failures(what: str, report: Any, console: Console) -> None:
    console.print(f"[bold]{what}[/]: {'VALID' if report.ok else 'INVALID'}")
    for finding in report.findings:
        if finding.result is not Result.PASS:
            console.print(f"  [red]{finding.result.value}[/] {finding.rule}: {finding.detail}")


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
