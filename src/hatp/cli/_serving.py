"""``hatp serve``'s server: the listening socket, uvicorn, the start-up banner and the
signals that stop it. Imported when ``hatp serve`` runs (uvicorn and Starlette are
heavy to load)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace

import typer
import uvicorn

from hatp._sockets import listening
from hatp.cli._app import err
from hatp.errors import ConfigInvalid
from hatp.http import APPROVER_PATH, OPENAPI_PATH, ServeConfig, Services


async def serve_until_stopped(
    settings: ServeConfig,
    opener: Callable[[ServeConfig], contextlib.AbstractAsyncContextManager[Services]],
) -> None:
    """Open the roles ``opener`` makes of ``settings``, serve them until SIGINT or SIGTERM,
    then close them.

    Raises:
        ConfigInvalid: key ``server.port``: the address cannot be bound.
    """
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
        err.print(f"  {role:<12} {url}/{role}/…", markup=False)
    err.print(f"  {'openapi':<12} {url}{OPENAPI_PATH}", markup=False)
    if "directory" in served:
        err.print(f"  {'well-known':<12} {url}/.well-known/human-card.json", markup=False)
    if services.web is not None and "gateway" in served:
        page = f"{services.web.sessions.origins[0]}{APPROVER_PATH}"
        err.print(f"  {'approve':<12} {page}", markup=False)
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
    try:
        return listening(host, port)
    except OSError as exc:
        raise ConfigInvalid(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port or --host",
            key="server.port",
        ) from None


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host
