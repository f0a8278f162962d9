"""A stock MCP host's client, the official TypeScript SDK (1.x), against the gated payments server.

The payments server runs as a real process (``hatp demo --gated --serve``,
and ``python -m hatp.demo._gated_server`` for stdio and for the listing that
changes); its scripted approvers (``--auto``) approve each ask about a second
after it arrives, as a person at the approver page would. The client is
``@modelcontextprotocol/sdk`` pinned in ``tests/ts/package.json``, run by
``tests/ts/client.mjs``: it declares no extension, calls the tools as the
scenario says and prints one JSON line per thing it saw; the judging is here.

``npm ci`` installs the SDK once per session (skipped when ``node_modules``
already matches ``package-lock.json``). Without node or npm the tests skip,
saying how to get them, except on CI (``CI=true``), where they fail, as a
failed ``npm ci`` always does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from hatp.clock import SystemClock
from hatp.demo import PAYMENTS, TripWorld
from hatp.demo.gated import ARGS, FINANCE, PAYMENTS_SERVER
from hatp.demo.trip import GATEWAY
from hatp.evidence import tool_digest
from hatp.mcp import GATE_EXTENSION_ID, listed_definition

#: Each test here starts server processes and a node process: seconds, not milliseconds.
pytestmark = pytest.mark.slow

TS = Path(__file__).parents[1] / "ts"
#: How long people may take to approve, as the client polls (it calls again every 0.25 s).
POLL_SECONDS = 60
#: How long a server process may take to print where it listens.
START_SECONDS = 30
#: How long ``npm ci`` may take.
NPM_SECONDS = 300
#: The same tool with other arguments: another call, which needs its own approval.
OTHER_ARGS = {**ARGS, "payee": "Condor"}
#: What ``edit_listing`` sets charge_card's listed description to.
NEW_DESCRIPTION = "Charge a company card now. Irreversible. Now with a surcharge."
#: The members of the requirement a stock client is shown, and of the ask made for it.
REQUIREMENT_MEMBERS = {
    "server",
    "tool",
    "callDigest",
    "toolDigest",
    "address",
    "action",
    "amountPointer",
    "amount",
    "price",
    "maxLifetimeSeconds",
}
ASK_MEMBERS = {"askId", "requestId", "gateway", "decideBy", "approverPage"}
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def _missing(message: str) -> NoReturn:
    """Skip, saying what is missing; on CI, fail: these tests are mandatory there."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def node() -> str:
    """The node executable, once ``tests/ts``'s locked packages are installed."""
    found, npm = shutil.which("node"), shutil.which("npm")
    if found is None or npm is None:
        _missing(
            "node and npm are needed to run the TypeScript SDK client "
            "(`apt-get install nodejs npm`, Node 18 or later)"
        )
    lock = (TS / "package-lock.json").read_bytes()
    stamp = TS / "node_modules" / ".hatp-lock.sha256"
    wanted = hashlib.sha256(lock).hexdigest()
    if stamp.exists() and stamp.read_text(encoding="utf-8") == wanted:
        return found  # installed from this very lock file already: no network needed
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=TS,
            capture_output=True,
            text=True,
            timeout=NPM_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`npm ci` in {TS} took longer than {NPM_SECONDS} s")
    if done.returncode != 0:
        pytest.fail(f"`npm ci` in {TS} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    stamp.write_text(wanted, encoding="utf-8")
    return found


class ServerProcess:
    """A payments server process on streamable HTTP: where it listens, and its stop."""

    def __init__(self, command: Sequence[str], log: Path) -> None:
        self.log = log
        self._stderr = log.open("w", encoding="utf-8")
        self._process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0
        )
        self.urls = self._announced({"mcp", "gateway", "approve"})
        # Whatever it prints later is read and dropped, so it never blocks on a full pipe.
        threading.Thread(target=self._process.communicate, daemon=True).start()

    def _announced(self, names: set[str]) -> dict[str, str]:
        """The ``name: url`` lines it prints once it listens, within START_SECONDS."""
        out = self._process.stdout
        assert out is not None
        found: dict[str, str] = {}
        with selectors.DefaultSelector() as waiting:
            waiting.register(out, selectors.EVENT_READ)
            while not names <= found.keys():
                line = out.readline() if waiting.select(START_SECONDS) else b""
                if not line:
                    self.stop()
                    out.close()
                    pytest.fail(f"the server printed {found} and no more:\n{self.log_tail()}")
                name, _, url = line.decode().partition(": ")
                if name in names:
                    found[name] = url.strip()
        return found

    def log_tail(self) -> str:
        """The end of what the server wrote to stderr."""
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> int:
        """Send SIGTERM and wait for it to exit; return its exit code.

        Raises:
            subprocess.TimeoutExpired: it did not exit within 15 s (it is then killed).
        """
        try:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
            return self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise
        finally:
            self._stderr.close()


@dataclass(frozen=True)
class Seen:
    """What the TypeScript client printed, one JSON object a line, the charges made, and
    where the server said it listens (over HTTP)."""

    lines: list[dict[str, Any]]
    charges: list[str]
    urls: dict[str, str] = field(default_factory=dict)
    #: The server process's exit status once sent SIGTERM (over HTTP).
    exit_code: int | None = None

    @property
    def connected(self) -> dict[str, Any]:
        return next(line for line in self.lines if line["event"] == "connected")

    def tools(self, step: str) -> dict[str, dict[str, Any]]:
        """The tools listed at ``step``, by name."""
        listed = next(x for x in self.lines if x["event"] == "tools" and x["step"] == step)
        return {tool["name"]: tool for tool in listed["tools"]}

    def result(self, step: str) -> dict[str, Any]:
        """The tool result of ``step``."""
        return self.line(step)["result"]

    def line(self, step: str) -> dict[str, Any]:
        return next(x for x in self.lines if x["event"] == "result" and x["step"] == step)

    def error(self, step: str) -> dict[str, Any]:
        """The refusal of ``step``: ``structuredContent.error`` of a result marked isError."""
        result = self.result(step)
        assert result["isError"] is True, result
        error: dict[str, Any] = result["structuredContent"]["error"]
        return error


def run_client(node: str, connect: dict[str, Any], scenario: str, **options: Any) -> list[Any]:
    """Run ``tests/ts/client.mjs`` for ``scenario``; the JSON lines it printed."""
    config = {
        "connect": connect,
        "scenario": scenario,
        "args": ARGS,
        "otherArgs": OTHER_ARGS,
        "plainArgs": {"card": ARGS["card"]},
        "description": NEW_DESCRIPTION,
        "pollSeconds": POLL_SECONDS,
        **options,
    }
    try:
        done = subprocess.run(
            [node, str(TS / "client.mjs"), json.dumps(config)],
            cwd=TS,
            capture_output=True,
            text=True,
            timeout=3 * POLL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the TypeScript client ran past {3 * POLL_SECONDS} s: {timeout.stdout!r}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines or lines[-1]["event"] != "done":
        pytest.fail(
            f"the TypeScript client ({scenario}) stopped ({done.returncode}):\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
        )
    return lines


def charges(folder: Path) -> list[str]:
    """The payments ledger's charges, read from the world's folder once its server is down."""
    with TripWorld.open(folder, SystemClock()) as world:
        return [line.detail for line in world.ledger(PAYMENTS) if line.kind == "charged"]


def _module_command(folder: Path, *how: str) -> list[str]:
    return [sys.executable, "-m", "hatp.demo._gated_server", str(folder), *how]


@pytest.fixture(scope="module")
def over_http(node: str, tmp_path_factory: pytest.TempPathFactory) -> Seen:
    """``hatp demo --gated --serve --auto`` and the basic walk over streamable HTTP."""
    here = tmp_path_factory.mktemp("gated-http")
    folder = here / "world"  # --out wants a new folder
    hatp = Path(sys.executable).with_name("hatp")
    command = [str(hatp), "demo", "--gated", "--serve", "--auto", "--port", "0"]
    server = ServerProcess([*command, "--out", str(folder)], here / "server.log")
    try:
        lines = run_client(node, {"http": server.urls["mcp"]}, "basic")
    finally:
        exit_code = server.stop()
    return Seen(lines, charges(folder), server.urls, exit_code)


@pytest.fixture(scope="module")
def listing_changed(node: str, tmp_path_factory: pytest.TempPathFactory) -> Seen:
    """The server with ``edit_listing`` (``--editable``): charge_card's listing changes
    while people decide on a call of it."""
    folder = tmp_path_factory.mktemp("gated-editable")
    command = _module_command(folder, "--http", "0", "--auto", "--editable")
    server = ServerProcess(command, folder / "server.log")
    try:
        lines = run_client(node, {"http": server.urls["mcp"]}, "changed")
    finally:
        exit_code = server.stop()
    return Seen(lines, charges(folder), server.urls, exit_code)


@pytest.fixture(scope="module")
def over_stdio(node: str, tmp_path_factory: pytest.TempPathFactory) -> Seen:
    """The basic walk over stdio: the client starts the server process itself."""
    folder = tmp_path_factory.mktemp("gated-stdio")
    command = _module_command(folder, "--stdio", "--auto")
    connect = {"stdio": {"command": command[0], "args": command[1:]}}
    lines = run_client(node, connect, "basic")
    return Seen(lines, charges(folder))


def _member_names(value: Any) -> Iterator[str]:
    """Every object member name in ``value``, at any depth."""
    if isinstance(value, dict):
        for key, member in value.items():
            yield key
            yield from _member_names(member)
    elif isinstance(value, list):
        for item in value:
            yield from _member_names(item)


def _ask_id(error: dict[str, Any]) -> str:
    ask_id: str = error["data"]["ask"]["askId"]
    return ask_id


# -- The session and the advert ------------------------------------------------------------


@pytest.mark.parametrize("run", ["over_http", "over_stdio"])
def test_the_typescript_client_negotiates_a_2025_protocol_version(
    run: str, request: pytest.FixtureRequest
) -> None:
    """Hosts on the TypeScript SDK 1.x speak a 2025 protocol version, and the server agrees."""
    seen: Seen = request.getfixturevalue(run)
    assert re.fullmatch(r"2025-\d\d-\d\d", seen.connected["protocolVersion"])


def test_the_gate_advert_is_under_capabilities_experimental(over_http: Seen) -> None:
    """[MCP-GATE] A 2025-era client sees no ``extensions`` capability; the gate's settings
    reach it under ``experimental``, in camelCase."""
    capabilities = over_http.connected["serverCapabilities"]
    advert = capabilities["experimental"][GATE_EXTENSION_ID]
    assert advert["serverId"] == PAYMENTS_SERVER
    assert advert["tools"] == {
        "charge_card": {"address": FINANCE, "action": "approve.spend", "amountPointer": "/amount"}
    }
    assert advert["trustedGateways"] == [GATEWAY]
    assert advert["asksForStockClients"] is True
    assert "card_balance" in over_http.tools("listed")


@pytest.mark.parametrize("run", ["over_http", "listing_changed"])
def test_the_server_process_stops_cleanly_on_sigterm(
    run: str, request: pytest.FixtureRequest
) -> None:
    """``hatp demo --gated --serve`` (and the module entry) serve until SIGTERM, then exit 0."""
    seen: Seen = request.getfixturevalue(run)
    assert seen.exit_code == 0


# -- The walk over streamable HTTP ---------------------------------------------------------


def test_a_plain_tool_runs_untouched(over_http: Seen) -> None:
    """[MCP-GATE] A tool that is not gated answers a stock client as any tool does."""
    before = over_http.result("plain-before")
    assert before["isError"] is False
    assert ARGS["card"] in before["content"][0]["text"]


def test_a_gated_call_is_refused_with_the_requirement_and_the_ask(over_http: Seen) -> None:
    """[GATE-REQUIRED] [CALL-DEFINITION] The first call does not run: the result says so
    (isError, text for the model) and carries the requirement, bound to the tool as the
    client lists it, and the ask the server made for it."""
    error = over_http.error("gated")
    assert error["code"] == "APPROVAL_REQUIRED"
    data = error["data"]
    assert data["tool"] == "charge_card"
    requirement = data["requirement"]
    assert set(requirement) == REQUIREMENT_MEMBERS
    assert requirement["server"] == PAYMENTS_SERVER
    assert requirement["tool"] == "charge_card"
    assert requirement["address"] == FINANCE
    assert requirement["action"] == "approve.spend"
    assert requirement["amountPointer"] == "/amount"
    assert requirement["amount"] == ARGS["amount"]
    listed = over_http.tools("listed")["charge_card"]
    assert requirement["toolDigest"] == tool_digest(listed_definition(listed))
    ask = data["ask"]
    assert set(ask) == ASK_MEMBERS
    assert ask["gateway"] == GATEWAY
    assert ask["approverPage"] == over_http.urls["approve"]
    text = over_http.result("gated")["content"][0]["text"]
    assert ask["askId"] in text
    assert "call charge_card again with exactly the same arguments" in text


def test_error_data_members_are_camel_case(over_http: Seen, listing_changed: Seen) -> None:
    """Every member name in a refusal's error (its data, an earlier refusal in it) is
    camelCase, as on every other hatp edge."""
    for seen, step in [
        (over_http, "gated"),
        (over_http, "replay"),
        (over_http, "other"),
        (listing_changed, "changed"),
    ]:
        names = set(_member_names(seen.error(step)))
        assert {name for name in names if not CAMEL.match(name)} == set(), step


def test_once_a_person_approved_the_same_call_runs_exactly_once(over_http: Seen) -> None:
    """[GATE-ONCE] Called again with the same arguments, the call is refused with the same
    ask while people decide, then runs once approved; the ledger holds one charge."""
    approved = over_http.line("approved")
    assert approved["result"]["isError"] is False
    assert approved["result"]["content"], approved
    assert approved["calls"] >= 1
    assert len(over_http.charges) == 1
    assert ARGS["payee"] in over_http.charges[0]
    balance = over_http.result("plain-after")
    assert balance["isError"] is False
    assert balance["content"][0]["text"].count(over_http.charges[0]) == 1


def test_the_same_call_again_is_refused_and_asked_for_anew(over_http: Seen) -> None:
    """[GATE-ONCE] The approval was used: the same call again needs a new approval."""
    first, replay = over_http.error("gated"), over_http.error("replay")
    assert replay["code"] == "APPROVAL_REQUIRED"
    assert _ask_id(replay) != _ask_id(first)
    assert replay["data"]["requirement"]["callDigest"] == first["data"]["requirement"]["callDigest"]
    assert len(over_http.charges) == 1


def test_other_arguments_are_another_call_with_its_own_approval(over_http: Seen) -> None:
    """[GATE-CALL] The same tool with another payee is another call: refused, asked for
    under its own call digest."""
    first, other = over_http.error("gated"), over_http.error("other")
    assert other["code"] == "APPROVAL_REQUIRED"
    assert other["data"]["requirement"]["callDigest"] != first["data"]["requirement"]["callDigest"]
    assert _ask_id(other) not in {_ask_id(first), _ask_id(over_http.error("replay"))}
    assert not any(OTHER_ARGS["payee"] in charge for charge in over_http.charges)


# -- A listing that changes while people decide --------------------------------------------


def test_an_approval_for_the_old_listing_is_refused_once_the_listing_changed(
    listing_changed: Seen,
) -> None:
    """[CALL-DEFINITION] The approval binds the tool as listed when it was asked for: after
    the description changed it is refused (TOOL_CHANGED), the server asks again for the
    tool as listed now, and that approval runs the call once."""
    first = listing_changed.error("gated")
    relisted = listing_changed.tools("relisted")["charge_card"]
    assert relisted["description"] == NEW_DESCRIPTION
    assert listing_changed.result("edit")["isError"] is False
    changed = listing_changed.error("changed")
    assert changed["code"] == "APPROVAL_REQUIRED"
    earlier = changed["data"]["earlier"]
    assert earlier["code"] == "APPROVAL_INVALID"
    assert earlier["data"]["reason"] == "TOOL_CHANGED"
    requirement = changed["data"]["requirement"]
    assert requirement["toolDigest"] != first["data"]["requirement"]["toolDigest"]
    assert requirement["toolDigest"] == tool_digest(listed_definition(relisted))
    assert _ask_id(changed) != _ask_id(first)
    assert listing_changed.result("approved")["isError"] is False
    assert len(listing_changed.charges) == 1


# -- The same walk over stdio --------------------------------------------------------------


def test_over_stdio_a_gated_call_is_refused_then_approved_then_runs_once(
    over_stdio: Seen,
) -> None:
    """[MCP-GATE] [GATE-ONCE] The stdio transport walks the same way: refused with the
    requirement, run once approved, refused again on a replay."""
    assert over_stdio.result("plain-before")["isError"] is False
    assert over_stdio.error("gated")["code"] == "APPROVAL_REQUIRED"
    assert over_stdio.result("approved")["isError"] is False
    assert over_stdio.error("replay")["code"] == "APPROVAL_REQUIRED"
    assert len(over_stdio.charges) == 1
