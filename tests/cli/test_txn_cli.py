"""``hatp txn submit|status|record|list`` against a running ``hatp serve --demo`` (a process
of its own, over TCP): the plan begun, followed, its record verified offline, the list
filtered; every refusal of the server its code and message with exit 2, an unreachable
server ``PEER_UNAVAILABLE`` naming the URL; the token read from a file or ``HATP_TOKEN``,
never from an argument."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner, Result

import hatp.http
from cli.served_demo import Demo
from hatp.cli import app
from hatp.http import CoordinatorClient


def _hatp(*argv: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(argv), env=env)


def _refused(done: Result, code: str) -> str:
    """The refusal's message line, once it is ``code`` with exit 2 and nothing on stdout."""
    assert done.exit_code == 2, (done.exit_code, done.stdout, done.stderr)
    assert done.stdout == ""
    assert f"error {code}: " in done.stderr, done.stderr
    return done.stderr


def test_a_plan_is_submitted_followed_listed_and_its_record_verifies(
    demo: Demo, tmp_path: Path
) -> None:
    """[SERVE-TXN-CLI] submit prints the txnId and state (a bare plan, or a {"plan": …} body);
    status and list see it committed, newest first, filtered by state and limit; the record
    written with --out verifies offline with hatp verify."""
    bare, wrapped = tmp_path / "bare.json", tmp_path / "wrapped.json"
    bare.write_text(json.dumps(demo.plan("trip-cli-1")), encoding="utf-8")
    wrapped.write_text(json.dumps({"plan": demo.plan("trip-cli-2", seat="15A")}), encoding="utf-8")

    first = _hatp("txn", "submit", str(bare), "--server", demo.url)
    assert first.exit_code == 0, first.stderr
    txn_id, state = first.stdout.strip().split("\t")
    assert (txn_id, state in ("active", "committing", "committed")) == ("trip-cli-1", True)
    # Both trips add to the same traveller's calendar: one begun while the other is still
    # open would see the calendar change under its dry run and abort, as it should.
    assert demo.finished("trip-cli-1") == {"trip-cli-1": "committed"}
    second = _hatp("txn", "submit", str(wrapped), "--server", demo.url, "--json")
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["txnId"] == "trip-cli-2"
    assert demo.finished("trip-cli-1", "trip-cli-2") == {
        "trip-cli-1": "committed",
        "trip-cli-2": "committed",
    }

    status = _hatp("txn", "status", "trip-cli-1", "--server", demo.url)
    assert status.stdout == "trip-cli-1\tcommitted\n"
    as_json = _hatp("txn", "status", "trip-cli-2", "-s", demo.url, "--json")
    assert json.loads(as_json.stdout) == {"txnId": "trip-cli-2", "state": "committed"}

    listed = _hatp("txn", "list", "--server", demo.url)
    assert listed.exit_code == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [row[:3] for row in rows] == [
        ["trip-cli-2", "committed", "agent://acme.com/travel-bot"],
        ["trip-cli-1", "committed", "agent://acme.com/travel-bot"],
    ]
    newest = _hatp("txn", "list", "-s", demo.url, "--state", "committed", "--limit", "1", "--json")
    assert [t["txnId"] for t in json.loads(newest.stdout)["transactions"]] == ["trip-cli-2"]
    none_active = _hatp("txn", "list", "-s", demo.url, "--state", "aborted", "--json")
    assert json.loads(none_active.stdout) == {"transactions": []}

    out = tmp_path / "record.json"
    fetched = _hatp("txn", "record", "trip-cli-1", "--server", demo.url, "--out", str(out))
    assert fetched.exit_code == 0, fetched.stderr
    assert "hatp verify" in fetched.stderr
    verified = _hatp("verify", str(out), "--keys", str(demo.folder / "keyring.json"))
    assert verified.exit_code == 0, verified.stdout
    printed = _hatp("txn", "record", "trip-cli-2", "--server", demo.url)
    assert json.loads(printed.stdout)["recordId"] == "trip-cli-2"


def test_every_refusal_of_the_server_is_its_code_and_message_with_exit_2(
    demo_sqlite: Demo, tmp_path: Path
) -> None:
    """An unknown transaction, a plan begun twice, a plan that is no plan, a state or limit
    the list does not take: each the server's code and message on stderr, exit 2."""
    url = demo_sqlite.url
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(demo_sqlite.plan("trip-twice")), encoding="utf-8")
    empty = tmp_path / "empty.json"
    empty.write_text('{"hatpVersion": "0.1", "txnId": "trip-empty"}', encoding="utf-8")
    assert _hatp("txn", "submit", str(plan), "-s", url).exit_code == 0

    assert "trip-none" in _refused(_hatp("txn", "status", "trip-none", "-s", url), "TXN_UNKNOWN")
    _refused(_hatp("txn", "record", "trip-none", "-s", url), "TXN_UNKNOWN")
    _refused(_hatp("txn", "submit", str(plan), "-s", url), "OUTCOME_CONFLICT")
    _refused(_hatp("txn", "submit", str(empty), "-s", url), "PLAN_INVALID")
    assert "/state" in _refused(_hatp("txn", "list", "-s", url, "--state", "bogus"), "INVALID_JSON")
    assert "/limit" in _refused(_hatp("txn", "list", "-s", url, "--limit", "0"), "INVALID_JSON")
    assert "/limit" in _refused(_hatp("txn", "list", "-s", url, "--limit", "501"), "INVALID_JSON")


def test_an_unreachable_server_is_peer_unavailable_naming_the_url() -> None:
    """[SERVE-TXN-CLI] no answer from --server: PEER_UNAVAILABLE with the URL, exit 2."""
    with socket.socket() as taken:  # a port nobody listens on
        taken.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{taken.getsockname()[1]}"
    for argv in (["status", "trip-1"], ["list"], ["record", "trip-1"]):
        message = _refused(_hatp("txn", *argv, "--server", url), "PEER_UNAVAILABLE")
        assert url in message


def test_unusable_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """A server that is no http(s) URL, a plan file missing, not JSON or not an object, a
    token file missing or holding no token, $HATP_TOKEN holding none, --out a folder:
    CONFIG_INVALID or INVALID_JSON, exit 2; a token's text is never shown."""
    url = "http://127.0.0.1:9"
    (tmp_path / "list.json").write_text("[1]", encoding="utf-8")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    (tmp_path / "plan.json").write_text('{"plan": {"txnId": "t"}}', encoding="utf-8")
    secret = "not a token: s3cr3t"
    (tmp_path / "token").write_text(secret, encoding="utf-8")
    plan = str(tmp_path / "plan.json")

    _refused(_hatp("txn", "list", "--server", "ftp://x"), "CONFIG_INVALID")
    _refused(_hatp("txn", "submit", str(tmp_path / "missing.json"), "-s", url), "CONFIG_INVALID")
    _refused(_hatp("txn", "submit", str(tmp_path / "bad.json"), "-s", url), "INVALID_JSON")
    _refused(_hatp("txn", "submit", str(tmp_path / "list.json"), "-s", url), "INVALID_JSON")
    missing = ["--token-file", str(tmp_path / "nope")]
    _refused(_hatp("txn", "submit", plan, "-s", url, *missing), "CONFIG_INVALID")
    bad_file = _hatp("txn", "list", "-s", url, "--token-file", str(tmp_path / "token"))
    assert secret not in _refused(bad_file, "CONFIG_INVALID")
    bad_env = _hatp("txn", "list", "-s", url, env={"HATP_TOKEN": secret})
    assert "HATP_TOKEN" in _refused(bad_env, "CONFIG_INVALID")
    assert secret not in bad_env.stderr
    out = ["--out", str(tmp_path)]
    _refused(_hatp("txn", "record", "t", "-s", url, *out), "CONFIG_INVALID")


def test_the_token_comes_from_a_file_or_hatp_token_never_an_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[API-TOKEN] --token-file (over $HATP_TOKEN), else $HATP_TOKEN, is sent as
    Authorization: Bearer; no token, no header; --token is no option."""
    seen: list[str | None] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        return httpx2.Response(200, json={"transactions": []})

    class Recorded(CoordinatorClient):
        def __init__(self, base_url: str, **options: Any) -> None:
            transport = httpx2.MockTransport(answer)
            super().__init__(base_url, client=httpx2.AsyncClient(transport=transport), **options)

    monkeypatch.setattr(hatp.http, "CoordinatorClient", Recorded)
    from_file, from_env = "f" * 43, "e" * 43
    (tmp_path / "token").write_text(from_file + "\n", encoding="utf-8")
    url = "http://hatp.test"
    file_option = ["--token-file", str(tmp_path / "token")]

    assert _hatp("txn", "list", "-s", url, *file_option).exit_code == 0
    assert (
        _hatp("txn", "list", "-s", url, *file_option, env={"HATP_TOKEN": from_env}).exit_code == 0
    )
    assert _hatp("txn", "list", "-s", url, env={"HATP_TOKEN": from_env}).exit_code == 0
    assert _hatp("txn", "list", "-s", url, env={"HATP_TOKEN": None}).exit_code == 0  # type: ignore[dict-item]
    assert seen == [f"Bearer {from_file}", f"Bearer {from_file}", f"Bearer {from_env}", None]
    assert "No such option" in _hatp("txn", "list", "-s", url, "--token", from_file).stderr
