"""``hatp serve``, ``hatp invite`` and ``hatp api-token``: the gateway, directory,
coordinator and approver page, and who may call them.

The command reads the settings (a TOML file, then flags over it), opens the
roles (:func:`hatp.http.open_services`, or the demo world's with ``--demo``),
binds the socket, prints where it listens and serves with uvicorn until
Ctrl-C. The work is in :mod:`hatp.http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hatp.cli._app import HatpCommand, app, err, reports_errors
from hatp.cli._paths import folder_to_use
from hatp.errors import ConfigInvalid

if TYPE_CHECKING:
    from hatp.http import ServeConfig, Services

# hatp.http (Starlette, the roles, the store) and uvicorn load when a command runs.

_EPILOG = (
    "Try it: hatp serve --demo (then open the URL it prints, and /openapi.json).\n\n"
    "Your own: hatp serve --config hatp.toml [--only directory] [--port 8080] "
    "[--db postgresql://user@host/db]"
)


@app.command("serve", epilog=_EPILOG, cls=HatpCommand)
@reports_errors
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Settings file (TOML) with [server], [gateway] (and [gateway.webhook], "
            "[gateway.email], [gateway.outbox]), [directory], [coordinator], [web], [keys] "
            "and [api] tables; see docs/spec.md §25 and §27.",
            show_default=False,
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database for the gateway's asks and the coordinator's log: a SQLite file "
            "or a postgresql:// URL.",
            show_default="hatp.db",
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on.", show_default="127.0.0.1"),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            help="Port to listen on; 0 lets the system choose.",
            show_default="8000",
            min=0,
            max=65535,
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            help="Serve only these roles: gateway, directory, coordinator, comma-separated.",
            show_default="every role configured",
        ),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Serve the demo trip world (acme's gateway and directory, the trip's "
            "coordinator, scripted approvers); no settings needed.",
        ),
    ] = False,
    demo_folder: Annotated[
        Path | None,
        typer.Option(
            "--demo-folder",
            help="Where --demo keeps its world, keys and plan.",
            show_default="a new temp folder",
        ),
    ] = None,
    log_json: Annotated[
        bool,
        typer.Option(
            "--log-json",
            help="Log one JSON object a line (time, level, logger, message, txnId, askId, "
            "method, path, status, durationMs, caller) on stderr.",
        ),
    ] = False,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help="Log at this level and above: debug, info, warning, error.",
            show_default="[server] log_level, else info",
        ),
    ] = None,
) -> None:
    """Serve the Human Gateway, the Directory and the coordinator's JSON API over HTTP.

    One process serves each role configured (or those --only names), plus
    /.well-known/human-card.json, the OpenAPI description at /openapi.json and,
    with a [web] table, the approver page at /approve, where people sign in with
    a passkey and answer their asks (invite them with `hatp invite`). With an
    [api] table, the JSON API answers only its callers' bearer tokens (make
    one with `hatp api-token`). Settings come from --config, and the flags
    override them. Prints the URL on stdout once listening; Ctrl-C stops it.
    Exit 2 when the settings are unusable.
    """
    from hatp._logs import configure_logging, parse_level
    from hatp.cli._serving import serve_until_stopped
    from hatp.http import ServeConfig, load_config, open_services, parse_only

    if log_level is not None:
        try:
            parse_level(log_level)
        except ValueError as exc:
            raise ConfigInvalid(f"--log-level: {exc}", key="log_level") from None
    roles = None if only is None else parse_only(only)
    opener: Callable[[ServeConfig], contextlib.AbstractAsyncContextManager[Services]]
    if demo:
        if config is not None:
            raise ConfigInvalid("--demo needs no --config: leave one of them out", key="demo")
        folder = (
            Path(tempfile.mkdtemp(prefix="hatp-serve-"))
            if demo_folder is None
            else folder_to_use(demo_folder, "--demo-folder")
        )
        settings = ServeConfig(host=host or "127.0.0.1", port=8000 if port is None else port)
        from hatp.demo.serve import demo_services

        opener = lambda _: demo_services(folder, db=db, only=roles)  # noqa: E731
    else:
        if config is None:
            raise ConfigInvalid(
                "say what to serve: --config FILE (see --help), or --demo to try it", key=None
            )
        settings = load_config(config).with_flags(db=db, host=host, port=port, only=roles)
        opener = open_services
    configure_logging(log_level or settings.log_level, json_lines=log_json)
    asyncio.run(serve_until_stopped(settings, opener))


@app.command(
    "invite",
    epilog="Then hand the link to that person alone: it registers one passkey.",
    cls=HatpCommand,
)
@reports_errors
def invite_person(
    human: Annotated[str, typer.Argument(help="Whose card gets the passkey: human://org/name.")],
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            help="The settings file of the hatp serve that registers passkeys ([web] with "
            "directory_key).",
        ),
    ],
    hours: Annotated[
        float, typer.Option("--hours", help="How long the invitation is good for.", min=0.01)
    ] = 24.0,
) -> None:
    """Invite a person to register a passkey on the approver page; print the link.

    The link opens the page's registration with a single-use invitation for that
    person's Human Card. Exit 2 when the settings cannot register passkeys or the
    directory has no such card.
    """
    from hatp.http import invite, load_config

    link = invite(load_config(config), human, valid_for=timedelta(hours=hours))
    err.print(f"invitation for {human}, good for {hours:g} h and one passkey:", soft_wrap=True)
    typer.echo(link)


@app.command(
    "api-token",
    epilog="Hand the token to that caller alone; the settings file keeps only its digest.",
    cls=HatpCommand,
)
@reports_errors
def api_token(
    caller: Annotated[
        str,
        typer.Argument(
            help="Who will call hatp serve's JSON API with it: agent://org/name for an "
            "agent (it then speaks only for itself), or a service's id."
        ),
    ],
) -> None:
    """Make a bearer token for a caller of hatp serve's JSON API.

    Prints the token (standard output) and the line to add under [api] callers
    in the settings file (standard error). Exit 2 for a caller id that is empty
    or has spaces.
    """
    if not caller or caller != caller.strip() or " " in caller:
        raise ConfigInvalid(f"caller {caller!r} must be an id with no spaces", key="caller")
    from hatp.http import new_api_token

    token, kept = new_api_token()
    line = f"{json.dumps(caller)} = {json.dumps(kept)}"
    err.print(f"add under [api] callers:\n  {line}", markup=False, soft_wrap=True)
    err.print(
        f"and send {caller}'s requests with  Authorization: Bearer <the token below>",
        markup=False,
        soft_wrap=True,
    )
    typer.echo(token)
