"""How a hatp process writes its log: human-readable lines, or one JSON object a line.

:func:`configure_logging` sets the root logger up once for a command such as
``hatp serve`` (docs/spec.md §25 [HTTP-LOG]); library code only ever calls
``logging.getLogger(__name__)`` and passes structured members as
``extra={...}`` (:data:`EXTRA_KEYS` are the ones a JSON line carries). A log
line never carries a secret: no bearer token, session cookie, invitation,
private key or passkey secret is handed to a logger in the first place.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["EXTRA_KEYS", "LEVELS", "JsonFormatter", "configure_logging", "parse_level"]

#: The structured members a log call may pass as ``extra=``, as a JSON line names them.
EXTRA_KEYS = (
    "txnId",
    "askId",
    "state",
    "method",
    "path",
    "route",
    "status",
    "durationMs",
    "caller",
    "code",
)
#: The levels ``--log-level`` and ``[server] log_level`` take.
LEVELS = ("debug", "info", "warning", "error")

_HUMAN = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_handler_name = "hatp"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: ``time`` (RFC 3339, UTC), ``level``,
    ``logger``, ``message``, each of :data:`EXTRA_KEYS` the record carries, and
    ``exception`` (the formatted traceback) when it has one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in EXTRA_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class _Stderr(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record comes (a test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def parse_level(text: str) -> int:
    """The ``logging`` level named ``text`` (one of :data:`LEVELS`, any case).

    Raises:
        ValueError: another name.
    """
    name = text.strip().lower()
    if name not in LEVELS:
        raise ValueError(f"log level {text!r} is not one of {', '.join(LEVELS)}")
    return logging.getLevelNamesMapping()[name.upper()]


def configure_logging(
    level: str = "info", *, json_lines: bool = False, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (standard error): as
    human-readable lines, or with ``json_lines`` as one JSON object a line. Calling it
    again replaces the handler it set before. Returns the handler.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    number = parse_level(level)
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.set_name(_handler_name)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(_HUMAN))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _handler_name]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    return handler
