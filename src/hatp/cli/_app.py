"""The ``hatp`` Typer application: commands are thin; the work is in the library."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from hatp import __version__
from hatp.errors import HatpError

app = typer.Typer(
    name="hatp",
    help="Human-Agent Transaction Protocol: signed approvals, transactions, offline evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="Make and publish Ed25519 signing keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

#: Where people read: progress, tables, errors. Stdout stays machine-readable.
err = Console(stderr=True, highlight=False)

#: Exit code for unusable input (an unreadable file, not a record, a bad key).
EXIT_UNUSABLE = 2

P = ParamSpec("P")
R = TypeVar("R")


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`HatpError` into its code and message on stderr, exit 2."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except HatpError as exc:
            err.print(f"[bold red]error[/] {exc.code}: {exc.message}", soft_wrap=True)
            raise typer.Exit(EXIT_UNUSABLE) from None

    return wrapper


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"hatp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """hatp command line."""


def main() -> None:
    """Entry point of the ``hatp`` console script."""
    app()
