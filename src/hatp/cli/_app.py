"""The ``hatp`` Typer application: commands are thin; the work is in the library.

Start-up is kept cheap: this module and the command modules import typer and
hatp's error tree only; each command imports the roles it runs (and rich, for
its console) when it runs, so ``hatp --version`` or ``hatp verify`` never load
the HTTP server, MCP or the store.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from hatp import __version__
from hatp.errors import ConfigInvalid, HatpError

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger(__name__)

#: Exit code for unusable input (an unreadable file, not a record, a bad key).
EXIT_UNUSABLE = 2


def _plain_params(params: list[Any]) -> list[Any]:
    """A flag takes no value: show none (typer would print ``--auto <bool>``); a default
    described in words shows as written (click would print ``[default: (8000)]``)."""
    for param in params:
        if not isinstance(param, TyperOption):
            continue
        if param.is_flag and param.metavar is None:
            param.metavar = ""
        if isinstance(param.show_default, str):
            param.help = f"{param.help or ''}  [default: {param.show_default}]".strip()
            param.show_default = False
    return params


class HatpCommand(TyperCommand):
    """A command whose help shows flags bare and arguments as ``RECORD`` (not ``{record}``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_params(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = (param.metavar or param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces


class HatpGroup(TyperGroup):
    """The ``hatp`` group, its flags shown bare like its commands'."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_params(super().get_params(ctx))


#: Help text is plain text: ``[api]`` and other TOML table names show as written.
app = typer.Typer(
    name="hatp",
    help="Human-Agent Transaction Protocol: signed approvals, transactions, offline evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=HatpGroup,
)
keys_app = typer.Typer(
    help="Make and publish Ed25519 signing keys.",
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=HatpGroup,
)
app.add_typer(keys_app, name="keys")


class _Stderr:
    """Where people read: progress, tables, errors (stdout stays machine-readable).

    The rich console is made at first use (rich costs start-up time). Lines are
    never wrapped mid-line: a command or path printed to copy stays whole, in a
    terminal or a pipe alike.
    """

    @functools.cached_property
    def console(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    def print(self, *objects: Any, **options: Any) -> None:
        """``rich.console.Console.print`` on stderr."""
        self.console.print(*objects, **options)

    def rule(self, title: str = "") -> None:
        """A rule with ``title`` (plain text: markup in it is shown as written)."""
        from rich.text import Text

        self.console.rule(Text(title))


err = _Stderr()

P = ParamSpec("P")
R = TypeVar("R")


def escape(text: object) -> str:
    """``text`` as rich markup that shows it as written (``[api]`` stays ``[api]``)."""
    from rich.markup import escape as _escape

    return _escape(str(text))


def refuse(message: str, *, key: str | None = None) -> NoReturn:
    """Refuse the command's input: ``CONFIG_INVALID`` with ``message``, exit 2."""
    raise ConfigInvalid(message, key=key)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`HatpError` into its code and message on stderr, exit 2; a file
    error nobody named first (``OSError``) becomes ``CONFIG_INVALID`` the same way."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except HatpError as exc:
            _report(exc.code, exc.message)
        except OSError as exc:
            log.info("hatp %s: file error %s", command.__name__, exc)
            where = f" {exc.filename}" if exc.filename else ""
            _report(ConfigInvalid.code, f"cannot use{where}: {exc.strerror or exc}")

    return wrapper


def _report(code: str, message: str) -> NoReturn:
    err.print(f"[bold red]error[/] {code}: {escape(message)}")
    raise typer.Exit(EXIT_UNUSABLE) from None


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
