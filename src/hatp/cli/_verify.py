"""``hatp verify`` and ``hatp verify-call``: check a record (or an undo record with its
original), or a tool-call approval, offline against a keyring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hatp.cli._app import HatpCommand, app, escape, reports_errors
from hatp.errors import ApprovalInvalid, ConfigInvalid, InvalidJson

if TYPE_CHECKING:
    from rich.console import Console

    from hatp.model import SignatureUse, VerificationReport

# The evidence layer, rich and (for verify-call) the gate load when a command runs.


@app.command("verify", cls=HatpCommand)
@reports_errors
def verify_command(
    records: Annotated[
        list[Path],
        typer.Argument(
            help="Transaction Record (JSON); with --original, an undo record and any further "
            "undo records of the same original.",
            metavar="RECORD...",
            show_default=False,
        ),
    ],
    keys: Annotated[Path, typer.Option("--keys", help="Keyring (JSON) of trusted public keys.")],
    original: Annotated[
        Path | None,
        typer.Option(
            "--original",
            help="The record the (first) undo record takes back: check the undo rules against it.",
        ),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option("--head", help="Expected head digest (of the first record), if known."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Verify a Transaction Record offline.

    Every signature is checked at the time of its event; with a keyring from a key
    set (keys with periods), a table of the signatures, each with its key's period
    and status, follows the findings. With --original, the first record is an undo
    record: it, the original and each further undo record given are verified, and
    then the undo rules: its signed link to the original, the steps it takes back,
    and that no step is taken back twice. Exit 0 when every rule passes; 1 when any
    rule fails or could not be checked (absent); 2 when the input is unusable.
    """
    from rich.console import Console

    from hatp.evidence import Keyring, load_record, verify_record, verify_undo

    if len(records) > 1 and original is None:
        raise ConfigInvalid(
            f"{len(records)} records given without --original: several records are an undo "
            "record and further undo records of one original; name it with --original "
            "ORIGINAL.json (or verify one record at a time)",
            key="original",
        )
    keyring = Keyring.load(keys)
    first = load_record(records[0])
    if original is None:
        report = verify_record(first, keyring, expected_head=head)
    else:
        report = verify_undo(
            first,
            load_record(original),
            keyring,
            others=[load_record(path) for path in records[1:]],
            expected_head=head,
        )
    if as_json:
        typer.echo(json.dumps(report.to_wire(), indent=2))
    else:
        print_report(report, Console(highlight=False, soft_wrap=True))
    raise typer.Exit(0 if report.ok else 1)


def print_report(report: VerificationReport, console: Console) -> None:
    """Render a report as a table of findings, the signatures when any was checked
    against a key with a period, and a verdict line."""
    from rich.table import Table

    from hatp.model import Result

    styles = {Result.PASS: "green", Result.FAIL: "bold red", Result.ABSENT: "yellow"}
    table = Table(
        title=f"record {escape(report.record_id)} · {report.events} events", title_justify="left"
    )
    table.add_column("rule")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for finding in report.findings:
        style = styles[finding.result]
        table.add_row(
            escape(finding.rule), f"[{style}]{finding.result.value}[/]", escape(finding.detail)
        )
    console.print(table)
    if any(use.status is not None for use in report.signatures):
        print_signatures(report.signatures, console)
    if report.ok:
        console.print(f"[green]VALID[/] head {report.head}")
    else:
        failed = sum(f.result is not Result.PASS for f in report.findings)
        console.print(f"[bold red]INVALID[/] {failed} finding(s) did not pass")


def print_signatures(uses: list[SignatureUse], console: Console) -> None:
    """Render the signatures a report lists: where, which key, the time it was checked
    at, the key's period and the status."""
    from rich.table import Table

    from hatp.model.findings import SIGNATURE_VALID

    table = Table(title="signatures", title_justify="left")
    for column in ("where", "kid", "issuer", "at", "period"):
        table.add_column(column, overflow="fold")
    table.add_column("status", no_wrap=True)
    for use in uses:
        if use.status is None:
            status = "[dim]no period[/]"
        elif use.status == SIGNATURE_VALID:
            status = f"[green]{use.status}[/]"
        else:
            status = f"[bold red]{escape(use.status)}[/]"
        table.add_row(
            escape(use.where),
            escape(use.kid or "-"),
            escape(use.issuer or "-"),
            escape(use.at or "-"),
            escape(_period(use)),
            status,
        )
    console.print(table)


def _period(use: SignatureUse) -> str:
    """A key's period as the signatures table shows it, with the key set that listed it."""
    if use.not_before is None:
        return "-"
    text = f"{use.not_before} to {use.not_after or 'open-ended'}"
    if use.revoked_at is not None:
        text += f", revoked {use.revoked_at}"
    version = None if use.set_version is None else f"set v{use.set_version}"
    listed = " ".join(part for part in (use.role, use.organisation, version) if part)
    return f"{text} ({listed})" if listed else text


@app.command("verify-call", cls=HatpCommand)
@reports_errors
def verify_call_command(
    approval: Annotated[
        Path, typer.Argument(help="CallApproval (JSON), as the gateway signed it.")
    ],
    keys: Annotated[
        Path, typer.Option("--keys", help="Keyring (JSON) of the trusted gateways and directories.")
    ],
    args: Annotated[
        Path | None,
        typer.Option(
            "--args", help="The call's arguments (JSON object), to check the call digest."
        ),
    ] = None,
) -> None:
    """Verify a tool-call approval offline, as the tool server checked it.

    Checks the gateway's signature, every approver's own vote and card, the
    quorum, that nobody approved their own request, their authority over the
    amount and the validity when decided; with --args, that the approval is for
    exactly those arguments. Exit 0 when it verifies; 1 when a check fails
    (the reason is printed); 2 when the input is unusable.
    """
    from rich.console import Console

    from hatp.evidence import Keyring
    from hatp.gate import verify_call_approval

    keyring = Keyring.load(keys)
    doc = _read_json(approval)
    arguments = None if args is None else _read_json(args)
    if arguments is not None and not isinstance(arguments, dict):
        raise InvalidJson(f"{args} is not a JSON object of arguments", where="")
    console = Console(highlight=False, soft_wrap=True)
    try:
        checked = verify_call_approval(doc, keyring, arguments=arguments)
    except ApprovalInvalid as refused:
        console.print(
            "[bold red]INVALID[/] "
            + escape(f"{refused.data.get('rule')} {refused.reason}: {refused.message}"),
            markup=True,
        )
        raise typer.Exit(1) from None
    terms = checked.terms
    digest_said = "checked against --args" if arguments is not None else "not checked (no --args)"
    console.print(
        "[green]VALID[/] "
        + escape(
            f"approval {checked.approval_id}: {terms.tool} on {terms.server} "
            f"for {terms.requester}, approved by {', '.join(dict.fromkeys(checked.approvers))} "
            f"at {checked.decided_at}; call digest {digest_said}"
        )
    )


def _read_json(path: Path) -> Any:
    from hatp.evidence import parse_json

    try:
        return parse_json(path.read_bytes())
    except OSError as exc:
        raise InvalidJson(f"cannot read {path}: {exc.strerror}", where="") from None
