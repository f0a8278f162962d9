"""``hatp txn submit|status|record|list``: transactions at a running ``hatp serve``.

A thin caller of the coordinator's JSON API (docs/spec.md §25) through
:class:`hatp.http.CoordinatorClient`. The bearer token comes from
``--token-file`` or ``HATP_TOKEN``, never from a command-line argument (which
would land in the shell's history and in ``ps``). Every refusal of the server
is printed as its code and message, exit 2; so is a server that does not answer
(``PEER_UNAVAILABLE``, naming the URL).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hatp.cli._app import HatpCommand, HatpGroup, app, err, reports_errors
from hatp.errors import ConfigInvalid

if TYPE_CHECKING:
    from hatp.http import CoordinatorClient

# hatp.http (the client, httpx2) and the evidence layer load when a command runs.

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The environment variable a token is read from when no --token-file is given.
TOKEN_ENV = "HATP_TOKEN"
#: A token as ``hatp api-token`` makes it (base64url), as the server reads it.
_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{16,512}$")

txn_app = typer.Typer(
    help="Submit plans to a running hatp serve, follow them, fetch their records.",
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
