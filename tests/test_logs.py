"""How a hatp process logs: one JSON object a line with ``--log-json``, readable lines by
default, the level as set; ``hatp serve --log-level`` and ``[server] log_level``
(docs/spec.md §25 [HTTP-LOG])."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hatp._logs import configure_logging, parse_level
from hatp.cli import app as cli
from hatp.errors import ConfigInvalid
from hatp.http import parse_config

runner = CliRunner()


@pytest.fixture
def restored() -> Iterator[None]:
    """Give the root logger back as it was: its handlers and its level."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_the_extras(restored: None) -> None:
    """[HTTP-LOG] each record is one JSON object: time, level, logger, message and the
    structured members given as extra (txnId, status, durationMs, …); None members left out."""
    out = io.StringIO()
    configure_logging("debug", json_lines=True, stream=out)
    log = logging.getLogger("hatp.test")
    log.info("txn %s begun", "t-1", extra={"txnId": "t-1", "status": 201, "caller": None})
    log.debug("second", extra={"durationMs": 1.5, "unlisted": "kept out"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "txn t-1 begun"
    assert (first["level"], first["logger"]) == ("info", "hatp.test")
    assert (first["txnId"], first["status"]) == ("t-1", 201)
    assert "caller" not in first and first["time"].endswith("+00:00")
    assert second == {**second, "level": "debug", "durationMs": 1.5}
    assert "unlisted" not in second


def test_the_level_drops_what_is_below_it_and_readable_lines_are_the_default(
    restored: None,
) -> None:
    """[HTTP-LOG] at warning an info record is dropped; without json_lines a line reads
    ``time LEVEL logger: message``; configuring again replaces the handler."""
    configure_logging("info", stream=io.StringIO())
    out = io.StringIO()
    configure_logging("warning", stream=out)
    log = logging.getLogger("hatp.test")
    log.info("not shown")
    log.warning("shown %d", 2)
    (line,) = out.getvalue().splitlines()
    assert line.endswith("WARNING hatp.test: shown 2")
    ours = [h for h in logging.getLogger().handlers if h.get_name() == "hatp"]
    assert len(ours) == 1


def test_an_unknown_level_is_refused() -> None:
    """[HTTP-LOG] a level not debug, info, warning or error is a ValueError naming them."""
    assert parse_level("DEBUG") == logging.DEBUG
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        parse_level("loud")


def test_serve_refuses_an_unknown_log_level_with_exit_2() -> None:
    """[HTTP-LOG] hatp serve --log-level loud: CONFIG_INVALID naming the flag, exit 2."""
    result = runner.invoke(cli, ["serve", "--demo", "--log-level", "loud"])
    assert result.exit_code == 2, result.output
    assert "CONFIG_INVALID" in result.output and "--log-level" in result.output


def test_the_settings_file_sets_the_log_level(tmp_path: Path) -> None:
    """[HTTP-LOG] [server] log_level is read; another value is CONFIG_INVALID naming it."""
    directory = {"issuer": "https://directory.acme.com", "cards": "c.json", "gateway": "https://gw"}
    served = {"directory": directory}
    server = {"keyring": "keyring.json"}
    read = parse_config({"server": {**server, "log_level": "debug"}, **served}, tmp_path)
    assert read.log_level == "debug"
    assert parse_config({"server": server, **served}, tmp_path).log_level == "info"
    with pytest.raises(ConfigInvalid) as refused:
        parse_config({"server": {**server, "log_level": "loud"}, **served}, tmp_path)
    assert refused.value.data["key"] == "server.log_level"
