"""``hatp txn submit|status|record|list|undo``: transactions at a running ``hatp serve``.

A thin caller of the coordinator's JSON API (docs/spec.md §25) through
:class:`hatp.http.CoordinatorClient`. The bearer token comes from
``--token-file`` or ``HATP_TOKEN``, never from a command-line argument (which
would land in the shell's history and in ``ps``). Every refusal of the server
is printed as its code and message, exit 2; so is a server that does not answer
(``PEER_UNAVAILABLE``, naming the URL). ``hatp txn undo`` prints a refusal's
``data.reason`` too (``UNDO_REFUSED``: why nothing is taken back).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hatp.cli._app import (
    EXIT_UNUSABLE,
    HatpCommand,
    HatpGroup,
    app,
    err,
    escape,
    reports_errors,
)
from hatp.errors import ConfigInvalid, HatpError

if TYPE_CHECKING:
    from hatp._undo_ask import UndoAsk
    from hatp.http import CoordinatorClient

# hatp.http (the client, httpx2) and the evidence layer load when a command runs.

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The environment variable a token is read from when no --token-file is given.
TOKEN_ENV = "HATP_TOKEN"
#: A token as ``hatp api-token`` makes it (base64url), as the server reads it.
_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{16,512}$")

txn_app = typer.Typer(
    help="Submit plans to a running hatp serve, follow them, fetch their records, undo them.",
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=HatpGroup,
)
app.add_typer(txn_app, name="txn")

_EPILOG = (
    "The token: --token-file FILE, else the HATP_TOKEN environment variable. "
    "Exit 0: done; 2: refused by the server (its code and message), unreachable, "
    "or unusable input."
)

Server = Annotated[
    str,
    typer.Option(
        "--server",
        "-s",
        help="The hatp serve to call, e.g. http://127.0.0.1:8000.",
        show_default=False,
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="A file holding the bearer token hatp api-token made (else $HATP_TOKEN).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the server's answer as JSON.")]


@txn_app.command("submit", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def submit(
    plan: Annotated[Path, typer.Argument(help='The plan (JSON): the Plan itself, or {"plan": …}.')],
    server: Server,
    token_file: TokenFile = None,
    as_json: AsJson = False,
) -> None:
    """Begin a transaction for a plan at the server; print its txnId and state.

    The transaction runs at the server (asking people, preparing, committing
    or aborting); follow it with hatp txn status.
    """
    doc = _plan(plan)
    begun = _call(server, token_file, lambda c: c.begin(doc))
    _print(begun, as_json, f"{begun.get('txnId')}\t{begun.get('state')}")


@txn_app.command("status", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def status(
    txn: Annotated[str, typer.Argument(help="The transaction's txnId.")],
    server: Server,
    token_file: TokenFile = None,
    as_json: AsJson = False,
) -> None:
    """Print where a transaction stands: its txnId and state."""
    found = _call(server, token_file, lambda c: c.state(txn))
    _print(found, as_json, f"{found.get('txnId')}\t{found.get('state')}")


@txn_app.command("record", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def record(
    txn: Annotated[str, typer.Argument(help="The transaction's txnId.")],
    server: Server,
    token_file: TokenFile = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the record to this file.", show_default="stdout"),
    ] = None,
) -> None:
    """Fetch a transaction's record as logged so far (JSON).

    Check it offline with hatp verify FILE --keys KEYRING.json.
    """
    from hatp.cli._paths import file_to_write

    if out is not None:
        file_to_write(out, "--out")
    doc = _call(server, token_file, lambda c: c.record(txn))
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    err.print(f"record of {txn}: {len(doc.get('events') or [])} events, written to {out}")
    err.print(f"check it: hatp verify {out} --keys KEYRING.json", soft_wrap=True)


@txn_app.command("list", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def list_txns(
    server: Server,
    token_file: TokenFile = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="Only transactions in this state (active, committed, aborted, …).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="At most this many (1 to 500), newest first.")
    ] = 50,
    as_json: AsJson = False,
) -> None:
    """List the newest transactions, one line each: txnId, state, initiator, created.

    An agent's token lists only its own transactions.
    """
    found = _call(server, token_file, lambda c: c.list(state=state, limit=limit))
    if as_json:
        typer.echo(json.dumps({"transactions": found}, indent=2, ensure_ascii=False))
        return
    for row in found:
        typer.echo(
            f"{row.get('txnId')}\t{row.get('state')}\t{row.get('initiator') or '-'}\t"
            f"{row.get('createdAt')}"
        )
    err.print(f"{len(found)} transaction(s)")


@txn_app.command("undo", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def undo(
    txn: Annotated[str, typer.Argument(help="The committed transaction's txnId.")],
    server: Server,
    token_file: TokenFile = None,
    steps: Annotated[
        list[str] | None,
        typer.Option(
            "--step",
            metavar="<branch>",
            help="Only this step (a branchId); give it again for more. Default: every step "
            "that can be undone.",
            show_default=False,
        ),
    ] = None,
    differing: Annotated[
        bool,
        typer.Option(
            "--differing", help="Only the steps that committed other than their approved preview."
        ),
    ] = False,
    decide_in: Annotated[
        float | None,
        typer.Option(
            "--decide-in",
            metavar="<seconds>",
            help="Seconds people have to approve the undo.",
            show_default="1800",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the undo plan (its costs, what it keeps); begin nothing."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Take a committed transaction's steps back, with fresh consent.

    The server builds the undo plan from what each step offered when it
    committed: the steps that can be undone, last done first, each at its
    signed fee or refund; every other step kept, and why. --dry-run prints
    it. Otherwise it begins as a transaction of its own, which people approve
    before anything is taken back (then all of it is, or none); this prints
    its txnId and state: follow it with hatp txn status.
    """
    options: UndoAsk = {
        "steps": steps or None,
        "differing": differing,
        "decide_seconds": decide_in,
    }
    if dry_run:
        plan = _reasoned(lambda: _call(server, token_file, lambda c: c.plan_undo(txn, **options)))
        if as_json:
            typer.echo(json.dumps({"plan": plan}, indent=2, ensure_ascii=False))
            return
        typer.echo("\n".join(_undo_plan_lines(plan)))
        again = [f"--step {step}" for step in steps or ()]
        again += ["--differing"] if differing else []
        again += [] if decide_in is None else [f"--decide-in {decide_in:g}"]
        err.print(
            f"a dry run: nothing was begun; begin it: hatp txn undo {txn} --server {server}"
            + "".join(f" {flag}" for flag in again),
            soft_wrap=True,
            markup=False,
        )
        return
    begun = _reasoned(lambda: _call(server, token_file, lambda c: c.undo(txn, **options)))
    _print(begun, as_json, f"{begun.get('txnId')}\t{begun.get('state')}")
    if not as_json:
        taken = [str(b.get("branchId")) for b in (begun.get("plan") or {}).get("branches") or ()]
        err.print(
            f"undo of {txn} begun, taking back {', '.join(taken)}; nothing is taken back until "
            f"people approve it: follow it with hatp txn status {begun.get('txnId')} "
            f"--server {server}",
            soft_wrap=True,
            markup=False,
        )


def _undo_plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """An undo plan for a person: each step it takes back, in order, with its operation and
    its fee or refund; each step it keeps as it is, and why; who approves it, by when."""
    undoes = plan.get("undoes") or {}
    branches = list(plan.get("branches") or ())
    kept = list(undoes.get("kept") or ())
    lines = [
        f"undo plan {plan.get('txnId')} for {undoes.get('txnId')}: "
        f"{len(branches)} step(s) to take back, {len(kept)} kept",
        "take back, in this order:",
    ]
    for branch in branches:
        fee, refund = _fee_and_refund(branch)
        lines.append(
            f"  {branch.get('branchId')}: {branch.get('operation')} at "
            f"{branch.get('participant')} ({branch.get('tier')}); fee {fee}"
            + ("" if refund is None else f"; refund {refund}")
        )
    lines.append("kept as they are (not undone):" if kept else "kept as they are: none")
    lines += [f"  {step.get('branchId')}: {step.get('reason')}" for step in kept]
    decide_by = (plan.get("deadlines") or {}).get("decideBy")
    lines += [
        f"approved by: {group.get('address')} ({group.get('groupId')}), by {decide_by}"
        for group in plan.get("approvals") or ()
    ]
    return lines


def _fee_and_refund(branch: Mapping[str, Any]) -> tuple[str, str | None]:
    """A step's fee and the refund it pays back, as text. The branch's amount is its fee,
    or, when it refunds (``args.refund``, the net refund), that refund plus its fee."""
    amount = branch.get("amount")
    refund = (branch.get("args") or {}).get("refund")
    refund_text = _money(refund) if isinstance(refund, dict) else None
    if not isinstance(amount, dict):
        return "none", refund_text
    if not isinstance(refund, dict) or refund.get("currency") != amount.get("currency"):
        return _money(amount), refund_text
    try:
        fee = Decimal(str(amount.get("value"))) - Decimal(str(refund.get("value")))
    except InvalidOperation:
        return f"{_money(amount)} less the refund", refund_text
    return (_money({**amount, "value": str(fee)}) if fee else "none"), refund_text


def _money(amount: Mapping[str, Any]) -> str:
    return f"{amount.get('value')} {amount.get('currency')}"


def _reasoned(work: Callable[[], T]) -> T:
    """``work()``; a refusal that names its reason (``data.reason``: an ``UNDO_REFUSED``'s
    why, and the step) is printed with it, exit 2 (others as every command prints them)."""
    try:
        return work()
    except HatpError as exc:
        reason = exc.data.get("reason")
        if not isinstance(reason, str):
            raise
        step = exc.data.get("branchId")
        where = f" (step {step})" if isinstance(step, str) else ""
        err.print(
            f"[bold red]error[/] {exc.code}: {escape(reason)}{escape(where)}: {escape(exc.message)}"
        )
        raise typer.Exit(EXIT_UNUSABLE) from None


def _print(answer: dict[str, Any], as_json: bool, line: str) -> None:
    typer.echo(json.dumps(answer, indent=2, ensure_ascii=False) if as_json else line)


def _call(
    server: str, token_file: Path | None, work: Callable[[CoordinatorClient], Awaitable[T]]
) -> T:
    """``work(client)`` against ``server``, with the caller's token, on a loop of its own."""
    from hatp.http import CoordinatorClient

    if not re.match(r"^https?://[^/\s]+", server):
        raise ConfigInvalid(
            f"--server: {server[:200]!r} is not an http:// or https:// URL of a hatp serve",
            key="server",
        )
    token = _token(token_file)

    async def go() -> T:
        async with CoordinatorClient(server, token=token) as client:
            return await work(client)

    return asyncio.run(go())


def _token(token_file: Path | None) -> str | None:
    """The bearer token: the file's, else ``$HATP_TOKEN``'s, else none.

    Raises:
        ConfigInvalid: the file cannot be read, or what it (or the variable) holds is
            not a token as hatp api-token makes it (the token itself is never shown).
    """
    if token_file is not None:
        where = f"--token-file {token_file}"
        try:
            text = token_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            log.info("cannot read the token file %s: %s", token_file, type(exc).__name__)
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigInvalid(
                f"{where}: cannot read it ({reason}): give the file hatp api-token's "
                "token was saved to",
                key="token-file",
            ) from None
    elif (text_env := os.environ.get(TOKEN_ENV)) is not None:
        where, text = f"${TOKEN_ENV}", text_env
    else:
        return None
    token = text.strip()
    if not _TOKEN.match(token):
        log.info("refused the token of %s: not a token's form", where)
        raise ConfigInvalid(
            f"{where} does not hold a token as hatp api-token makes it (16 to 512 "
            "letters, digits, - and _ on one line)",
            key="token-file" if token_file is not None else TOKEN_ENV,
        )
    return token


def _plan(path: Path) -> dict[str, Any]:
    """The plan in ``path``: the Plan itself, or the ``plan`` of a ``{"plan": …}`` body.

    Raises:
        ConfigInvalid: the file cannot be read.
        InvalidJson: it is not strict JSON, or not a JSON object.
    """
    from hatp.errors import InvalidJson
    from hatp.evidence import parse_json

    try:
        raw = path.read_bytes()
    except OSError as exc:
        log.info("cannot read the plan %s: %s", path, exc.strerror)
        raise ConfigInvalid(f"PLAN: cannot read {path}: {exc.strerror}", key="plan") from None
    doc = parse_json(raw)
    if isinstance(doc, dict) and set(doc) == {"plan"}:
        doc = doc["plan"]
    if not isinstance(doc, dict):
        log.info("refused the plan %s: not a JSON object", path)
        raise InvalidJson(
            f'{path} holds no plan: give a Plan (a JSON object) or {{"plan": {{…}}}}',
            where="",
        )
    return doc
