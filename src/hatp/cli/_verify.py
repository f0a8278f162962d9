"""``hatp verify``: check a record offline against a keyring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hatp.cli._app import app, reports_errors
from hatp.evidence import Keyring, load_record, verify_record
from hatp.model import Result, VerificationReport

_STYLE = {Result.PASS: "green", Result.FAIL: "bold red", Result.ABSENT: "yellow"}


@app.command("verify")
@reports_errors
def verify_command(
    record: Annotated[Path, typer.Argument(help="Transaction Record (JSON).")],
    keys: Annotated[Path, typer.Option("--keys", help="Keyring (JSON) of trusted public keys.")],
    head: Annotated[
        str | None, typer.Option("--head", help="Expected head digest, if known.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Verify a Transaction Record offline.

    Exit 0 when every rule passes; 1 when any rule fails or could not be
    checked (absent); 2 when the input is unusable.
    """
    keyring = Keyring.load(keys)
    report = verify_record(load_record(record), keyring, expected_head=head)
    if as_json:
        typer.echo(json.dumps(report.to_wire(), indent=2))
    else:
        print_report(report, Console(highlight=False))
    raise typer.Exit(0 if report.ok else 1)


def print_report(report: VerificationReport, console: Console) -> None:
    """Render a report as a table of findings and a verdict line."""
    table = Table(title=f"record {report.record_id} · {report.events} events", title_justify="left")
    table.add_column("rule")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for finding in report.findings:
        style = _STYLE[finding.result]
        table.add_row(finding.rule, f"[{style}]{finding.result.value}[/]", finding.detail)
    console.print(table)
    if report.ok:
        console.print(f"[green]VALID[/] head {report.head}")
    else:
        failed = sum(f.result is not Result.PASS for f in report.findings)
        console.print(f"[bold red]INVALID[/] {failed} finding(s) did not pass")
