"""``hatp keys``: make a key, print its public half."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hatp.cli._app import HatpCommand, err, escape, keys_app, reports_errors
from hatp.cli._paths import file_to_write


@keys_app.command("new", cls=HatpCommand)
@reports_errors
def new(
    kid: Annotated[str, typer.Option("--kid", help="Key id, e.g. coordinator-1.")],
    out: Annotated[Path, typer.Option("--out", help="Private key file to write (mode 0600).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Make a new Ed25519 signing key and write it as a private JWK.

    Exit 2 when the file exists (without --force) or cannot be written there.
    """
    from hatp.evidence import SigningKey

    file_to_write(out, "--out")
    key = SigningKey.generate(kid)
    key.save(out, overwrite=force)
    err.print(f"wrote private key [bold]{escape(kid)}[/] to {escape(out)} (keep it secret)")
    typer.echo(json.dumps(key.public.to_jwk()))


@keys_app.command("public", cls=HatpCommand)
@reports_errors
def public(
    file: Annotated[Path, typer.Argument(help="Private key file written by `hatp keys new`.")],
    issuer: Annotated[
        str | None,
        typer.Option("--issuer", help="Print a keyring entry vouched for by this issuer."),
    ] = None,
) -> None:
    """Print the public JWK of a key file (never the private part)."""
    from hatp.evidence import SigningKey

    jwk: dict[str, str] = SigningKey.load(file).public.to_jwk()
    if issuer is not None:
        jwk["issuer"] = issuer
    typer.echo(json.dumps(jwk, indent=2))
