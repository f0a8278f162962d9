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
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from hatp.cli._app import app, err, reports_errors
from hatp.errors import ConfigInvalid
from hatp.http import (
    APPROVER_PATH,
    OPENAPI_PATH,
    ServeConfig,
    Services,
    demo_services,
    invite,
    load_config,
    new_api_token,
    open_services,
    parse_only,
)

_EPILOG = (
    "Try it: hatp serve --demo (then open the URL it prints, and /openapi.json).\n\n"
    "Your own: hatp serve --config hatp.toml [--only directory] [--port 8080] "
    "[--db postgresql://user@host/db]"
)


@app.command("serve", epilog=_EPILOG)
@reports_errors
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Settings file (TOML) with \\[server], \\[gateway], \\[directory], "
            "\\[coordinator], \\[web] and \\[api] tables; see docs/spec.md §25 and §27.",
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
) -> None:
    """Serve the Human Gateway, the Directory and the coordinator's JSON API over HTTP.

    One process serves each role configured (or those --only names), plus
    /.well-known/human-card.json, the OpenAPI description at /openapi.json and,
    with a \\[web] table, the approver page at /approve, where people sign in with
    a passkey and answer their asks (invite them with `hatp invite`). With an
    \\[api] table, the JSON API answers only its callers' bearer tokens (make
    one with `hatp api-token`). Settings come from --config, and the flags
    override them. Prints the URL on stdout once listening; Ctrl-C stops it.
    Exit 2 when the settings are unusable.
    """
    roles = None if only is None else parse_only(only)
    opener: Callable[[ServeConfig], contextlib.AbstractAsyncContextManager[Services]]
    if demo:
        if config is not None:
            raise ConfigInvalid("--demo needs no --config: leave one of them out", key="demo")
        folder = demo_folder or Path(tempfile.mkdtemp(prefix="hatp-serve-"))
        settings = ServeConfig(host=host or "127.0.0.1", port=8000 if port is None else port)
        opener = lambda _: demo_services(folder, db=db, only=roles)  # noqa: E731
    else:
        if config is None:
            raise ConfigInvalid(
                "say what to serve: --config FILE (see --help), or --demo to try it", key=None
            )
        settings = load_config(config).with_flags(db=db, host=host, port=port, only=roles)
        opener = open_services
    asyncio.run(_serve(settings, opener))


async def _serve(
    settings: ServeConfig,
    opener: Callable[[ServeConfig], contextlib.AbstractAsyncContextManager[Services]],
) -> None:
    sock = _listening(settings.host, settings.port)
    # The services open once the port is known: the approver page's default origin names it.
    bound = replace(settings, port=sock.getsockname()[1])
    try:
        async with opener(bound) as services:
            # Whose X-Forwarded-* headers count is web.trusted_proxies' alone (hatp_app), not
            # uvicorn's default trust of 127.0.0.1.
            served = uvicorn.Config(
                services.app(), log_level="warning", access_log=False, proxy_headers=False
            )
            server = _Server(served)
            url = f"http://{_shown(settings.host)}:{sock.getsockname()[1]}"
            _banner(url, services)
            loop = asyncio.get_running_loop()
            for sig in _SIGNALS:
                loop.add_signal_handler(sig, server.stop)
            try:
                await server.serve(sockets=[sock])
            finally:
                for sig in _SIGNALS:
                    loop.remove_signal_handler(sig)
    finally:
        sock.close()
    err.print("hatp serve: stopped")


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn, stopped by this command's own signal handlers: Ctrl-C or SIGTERM ends the
    serving, then the roles close (stores, links) and the command exits 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        """Finish the requests under way and stop (a second call: stop at once)."""
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def _banner(url: str, services: Services) -> None:
    served, notes = services.served, services.notes
    err.rule(f"hatp serve: {', '.join(served)}")
    for role in served:
        err.print(f"  {role:<12} {url}/{role}/…", soft_wrap=True)
    err.print(f"  {'openapi':<12} {url}{OPENAPI_PATH}", soft_wrap=True)
    if "directory" in served:
        err.print(f"  {'well-known':<12} {url}/.well-known/human-card.json", soft_wrap=True)
    if services.web is not None and "gateway" in served:
        page = f"{services.web.sessions.origins[0]}{APPROVER_PATH}"
        err.print(f"  {'approve':<12} {page}", soft_wrap=True)
    for note in notes:
        err.print(f"  {note}", soft_wrap=True, markup=False, highlight=False)
    if "coordinator" in served:
        err.print(
            f"  begin a transaction: curl -X POST {url}/coordinator/txns "
            "-H 'content-type: application/json' "
            f"--data @{services.example or 'BODY.json'}",
            soft_wrap=True,
            markup=False,
        )
    err.print("  Ctrl-C stops the server.")
    typer.echo(url)  # stdout carries only the URL, for scripts


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound and listening before the server starts, so the port is known (0:
    the system chooses) and a client may connect at once.

    Raises:
        ConfigInvalid: key ``server.port``: the address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigInvalid(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port or --host",
            key="server.port",
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@app.command("invite", epilog="Then hand the link to that person alone: it registers one passkey.")
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
    link = invite(load_config(config), human, valid_for=timedelta(hours=hours))
    err.print(f"invitation for {human}, good for {hours:g} h and one passkey:", soft_wrap=True)
    typer.echo(link)


@app.command(
    "api-token",
    epilog="Hand the token to that caller alone; the settings file keeps only its digest.",
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
    token, kept = new_api_token()
    line = f"{json.dumps(caller)} = {json.dumps(kept)}"
    err.print(f"add under [api] callers:\n  {line}", markup=False, soft_wrap=True)
    err.print(
        f"and send {caller}'s requests with  Authorization: Bearer <the token below>",
        markup=False,
        soft_wrap=True,
    )
    typer.echo(token)
