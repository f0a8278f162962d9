"""The approver page over HTTP, on SQLite and PostgreSQL: register a passkey, sign in,
see the ask rendered from the structured plan, vote with the passkey, see it commit.

Every request goes through the page's own endpoints as the page's script
sends them (:mod:`web_world`); people's passkeys are software authenticators
that answer as a browser's platform authenticator does. The browser itself
is driven in ``tests/browser``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hatp._checks import unsafe_switched_off
from hatp.demo.trip import CaptureFee
from hatp.evidence import digest, is_digest, verify_record
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import AGENT_TEXT_LABEL, STEP_ARGUMENTS_LABEL, STEP_PREVIEW_LABEL, shown_json
from hatp.model import Result, TxnState
from hatp.store import Store
from web_world import (
    BOB,
    ORIGIN,
    WebServed,
    enrol,
    open_web_served,
    sign_in,
    the_ask,
    vote,
)


def _text(html: str) -> str:
    """The page's text: tags dropped, entities read, white space folded (none before
    punctuation)."""
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()
    return re.sub(r" ([:;,.)])", r"\1", text)


def _agent_box(html: str) -> str:
    """The text of the box that holds the agent's words."""
    found = re.search(r'<section class="agent-text" id="agent-text".*?</section>', html, re.S)
    assert found is not None, "the page has no box for the agent's words"
    return _text(found.group(0))


def _tolerant(plan: dict[str, Any], tolerance: str = "0.02") -> dict[str, Any]:
    plan["approvals"][0]["requirement"]["tolerance"] = tolerance
    return plan


def test_a_trip_approved_on_the_page_with_a_passkey_commits(served: WebServed) -> None:
    """[WEB-SIGN-IN] [WEB-VIEW] [WEB-VOTE] [TXN-PASSKEY]: register, sign in, read the ask
    as the plan states it, approve with the passkey; the trip commits and its record
    verifies offline, the passkey assertion checked against bob's card."""
    plan = _tolerant(served.plan(passkey=True))

    async def body(http: httpx2.AsyncClient) -> dict[str, Any]:
        device = await enrol(served, http, BOB)
        signed = await sign_in(http, device)
        assert signed.status_code == 200 and signed.json()["human"] == BOB
        cookie = signed.headers["set-cookie"]
        for attribute in ("HttpOnly", "SameSite=strict", "Path=/approve"):
            assert attribute.lower() in cookie.lower(), cookie
        begun = await http.post("/coordinator/txns", json={"plan": plan})
        assert begun.status_code == 201, begun.text
        ask_id = await the_ask(http)
        inbox = _text((await http.get("/approve")).text)
        assert "approve.spend for human://acme.com/alice (4 steps)" in inbox
        assert "730 USD, up to 744.60 USD" in inbox
        page = await http.get(f"/approve/asks/{ask_id}")
        assert page.status_code == 200
        text = _text(page.text)
        for shown in (
            "book_seat mcp://airline.example hold (held until commit) 420 USD",
            "hold_room mcp://hotel.example hold (held until commit) 310 USD",
            "add_event mcp://calendar.example compensate (can be undone) no amount",
            "charge mcp://payments.example final (cannot be undone) 730 USD",
            "settles seat, room",
            "730 USD, up to 744.60 USD",
            "passkey required",
            f"Transaction {plan['txnId']}",
            "Decide by 2026-12-02 09:15:00 UTC",
            "human://acme.com/bob (you): asked, no response yet",
            "human://acme.com/alice: passed over (separation-of-duties)",
        ):
            assert shown in text, shown
        assert _agent_box(page.text).startswith(AGENT_TEXT_LABEL)
        assert "Book Alice's trip to New York" in _agent_box(page.text)
        voted = await vote(http, device, ask_id, "approve")
        assert voted.status_code == 200, voted.text
        assert voted.json()["decision"] == "approve"
        (outcome,) = await served.finished()
        assert outcome.state is TxnState.COMMITTED
        state = await http.get(f"/coordinator/txns/{plan['txnId']}")
        assert state.json()["state"] == "committed"
        decided = _text((await http.get(f"/approve/asks/{ask_id}")).text)
        assert "Decided: approve" in decided and "human://acme.com/bob (you): approved" in decided
        record = await http.get(f"/coordinator/txns/{plan['txnId']}/record")
        return dict(record.json()["record"])

    record = served.run(body)
    report = verify_record(record, served.world.keyring)
    assert report.ok, report
    passkey = next(f for f in report.findings if f.rule == "TXN-PASSKEY")
    assert passkey.result is Result.PASS and "1 passkey assertion" in passkey.detail


def test_a_trip_rejected_on_the_page_aborts(served: WebServed) -> None:
    """[WEB-VOTE] a reject signed by the passkey: nothing is left behind."""
    plan = served.plan("trip-web-reject")

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        assert (await sign_in(http, device)).status_code == 200
        await http.post("/coordinator/txns", json={"plan": plan})
        voted = await vote(http, device, await the_ask(http), "reject")
        assert voted.json()["decision"] == "reject"
        (outcome,) = await served.finished()
        assert outcome.state is TxnState.ABORTED

    served.run(body)
    assert set(served.world.effects(plan["txnId"]).values()) == {"none"}


def test_a_bogus_signature_is_refused_with_its_reason_and_nothing_recorded(
    served: WebServed,
) -> None:
    """[GW-PASSKEY] 403 ``RESPONSE_REFUSED`` ``PASSKEY`` (``SIGNATURE``); the genuine
    vote that follows still counts."""

    def bogus(credential: dict[str, Any]) -> None:
        signature = bytearray(b64url_decode(credential["response"]["signature"]))
        signature[8] ^= 0xFF
        credential["response"]["signature"] = b64url_encode(bytes(signature))

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        await http.post("/coordinator/txns", json={"plan": served.plan(passkey=True)})
        ask_id = await the_ask(http)
        refused = await vote(http, device, ask_id, "approve", edit=bogus)
        assert refused.status_code == 403
        error = refused.json()
        assert (error["code"], error["data"]["reason"]) == ("RESPONSE_REFUSED", "PASSKEY")
        assert error["data"]["passkeyReason"] == "SIGNATURE"
        assert "Open: waiting for your response" in _text(
            (await http.get(f"/approve/asks/{ask_id}")).text
        )
        assert (await vote(http, device, ask_id, "approve")).status_code == 200
        (outcome,) = await served.finished()
        assert outcome.state is TxnState.COMMITTED

    served.run(body)


def test_without_a_session_nothing_is_shown_or_done(served: WebServed) -> None:
    """[WEB-SESSION] 401 ``UNAUTHENTICATED`` on the endpoints; the pages offer sign-in."""

    async def body(http: httpx2.AsyncClient) -> None:
        home = await http.get("/approve")
        assert home.status_code == 200 and 'id="sign-in"' in home.text
        page = await http.get("/approve/asks/ask-anything")
        assert page.status_code == 401 and 'data-next="/approve/asks/ask-anything"' in page.text
        for method, path, payload in (
            ("GET", "/approve/api/inbox", None),
            ("POST", "/approve/api/asks/ask-anything/vote", {"decision": "approve"}),
            ("POST", "/approve/api/asks/ask-anything/options", {"decision": "approve"}),
            ("POST", "/approve/api/asks/ask-anything/answer", {"value": "x"}),
            ("POST", "/approve/api/asks/ask-anything/decline", {}),
        ):
            answer = await http.request(method, path, json=payload)
            assert answer.status_code == 401, path
            assert answer.json()["code"] == "UNAUTHENTICATED"
            assert answer.json()["data"]["reason"] == "NO_SESSION"
        http.cookies.set("hatp_session", "not-a-session", domain="localhost.local")
        answer = await http.get("/approve/api/inbox")
        assert (answer.status_code, answer.json()["data"]["reason"]) == (401, "ENDED")

    served.run(body)


def test_the_inbox_version_is_the_digest_of_what_it_lists(served: WebServed) -> None:
    """[WEB-INBOX] the version an inbox answer gives is a digest of the inbox (the same in
    every gateway process); asked again since it, it answers when the wait ends; since
    another, at once."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        first = (await http.get("/approve/api/inbox")).json()
        assert is_digest(first["version"])
        same = await http.get(
            "/approve/api/inbox", params={"since": first["version"], "waitSeconds": 0}
        )
        assert same.json() == first
        other = await http.get(
            "/approve/api/inbox", params={"since": digest({"other": 1}), "waitSeconds": 30}
        )
        assert other.json() == first  # at once: the version it was asked since is not it

    served.run(body)


def test_signing_out_ends_the_session(served: WebServed) -> None:
    """[WEB-SESSION] the cookie is cleared and the session ended in the store."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        token = http.cookies["hatp_session"]
        assert (await http.get("/approve/api/inbox")).status_code == 200
        out = await http.post("/approve/api/sign-out", json={})
        assert out.status_code == 200 and "hatp_session=" in out.headers["set-cookie"]
        http.cookies.set("hatp_session", token, domain="localhost.local")
        assert (await http.get("/approve/api/inbox")).status_code == 401

    served.run(body)


def test_a_session_ends_with_its_lifetime(served: WebServed) -> None:
    """[WEB-SESSION] after eight hours on the gateway's clock, sign in again."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        served.clock.advance(8 * 3600)
        answer = await http.get("/approve/api/inbox")
        assert (answer.status_code, answer.json()["data"]["reason"]) == (401, "ENDED")
        home = await http.get("/approve")
        assert "expired" in _text(home.text) and 'id="sign-in"' in home.text

    served.run(body)


def test_a_request_from_another_origin_is_refused_and_changes_nothing(
    served: WebServed,
) -> None:
    """[WEB-ORIGIN] 403 ``ORIGIN_REFUSED`` for another site's page or no named origin,
    even with a live session; the ask stays open."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        await http.post("/coordinator/txns", json={"plan": served.plan()})
        ask_id = await the_ask(http)
        for origin in ("https://evil.example", "http://localhost:9999", None):
            headers = {"Origin": origin} if origin else {}
            if origin is None:
                http.headers.pop("Origin", None)
            answer = await http.post(
                f"/approve/api/asks/{ask_id}/decline", json={}, headers=headers
            )
            http.headers["Origin"] = ORIGIN
            assert answer.status_code == 403, origin
            assert answer.json()["code"] == "ORIGIN_REFUSED"
            assert answer.json()["data"]["origin"] == origin
        assert await the_ask(http) == ask_id

    served.run(body)


def test_a_foreign_origin_gets_through_only_with_the_origin_check_off(
    served: WebServed,
) -> None:
    """[WEB-ORIGIN] the planted violation: the check is what refuses it."""

    async def body(http: httpx2.AsyncClient) -> tuple[int, int]:
        foreign = {"Origin": "https://evil.example"}
        refused = await http.post("/approve/api/sign-in/options", json={}, headers=foreign)
        with unsafe_switched_off("WEB-ORIGIN"):
            taken = await http.post("/approve/api/sign-in/options", json={}, headers=foreign)
        return refused.status_code, taken.status_code

    assert served.run(body) == (403, 200)


#: Planted violations of the page's own checks, by name: the checks each names.
CASES: dict[str, tuple[str, ...]] = {"foreign-origin": ("WEB-ORIGIN",)}


@pytest.mark.parametrize(
    ("path", "payload", "where"),
    [
        ("/approve/api/sign-in", {}, "/credential"),
        ("/approve/api/sign-in", {"credential": "abc"}, "/credential"),
        ("/approve/api/enrol/options", {"invite": ""}, "/invite"),
        ("/approve/api/asks/x/options", {"decision": "maybe"}, "/decision"),
        ("/approve/api/asks/x/vote", {"decision": "approve", "extra": 1}, "/extra"),
    ],
)
def test_a_body_that_does_not_fit_is_refused_naming_the_member(
    served: WebServed, path: str, payload: dict[str, Any], where: str
) -> None:
    """400 ``INVALID_JSON`` with ``data.where``; nothing ran."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        answer = await http.post(path, json=payload)
        assert answer.status_code == 400
        assert (answer.json()["code"], answer.json()["data"]["where"]) == ("INVALID_JSON", where)

    served.run(body)


def test_a_body_that_is_not_json_or_too_large_is_refused(served: WebServed) -> None:
    """400 ``INVALID_JSON``, 413 ``BODY_TOO_LARGE``; a query that is no number, 400."""

    async def body(http: httpx2.AsyncClient) -> None:
        broken = await http.post(
            "/approve/api/sign-in/options", content=b"{nope", headers={"Content-Type": "x"}
        )
        assert (broken.status_code, broken.json()["code"]) == (400, "INVALID_JSON")
        large = await http.post("/approve/api/sign-in", content=b"[" + b" " * (2 << 20) + b"]")
        assert (large.status_code, large.json()["code"]) == (413, "BODY_TOO_LARGE")
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        for query in ("since=abc", "waitSeconds=-1", "human=human://acme.com/carol"):
            answer = await http.get(f"/approve/api/inbox?{query}")
            assert (answer.status_code, answer.json()["code"]) == (400, "INVALID_JSON")

    served.run(body)


def test_a_sign_in_that_does_not_verify_opens_no_session(served: WebServed) -> None:
    """[GW-SIGN-IN] 401 ``SIGN_IN_REFUSED`` naming the reason, and no cookie."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        options = await http.post("/approve/api/sign-in/options", json={})
        credential = device.assertion(b64url_decode(options.json()["challenge"]))
        credential["response"]["signature"] = credential["response"]["signature"][:-4] + "AAAA"
        answer = await http.post("/approve/api/sign-in", json={"credential": credential})
        assert answer.status_code == 401 and "set-cookie" not in answer.headers
        assert (answer.json()["code"], answer.json()["data"]["reason"]) == (
            "SIGN_IN_REFUSED",
            "SIGNATURE",
        )
        stranger = (await enrol(served, http, "human://acme.com/carol")).assertion(b"x" * 32)
        answer = await http.post("/approve/api/sign-in", json={"credential": stranger})
        assert answer.json()["data"]["reason"] == "CHALLENGE"
        assert (await http.get("/approve/api/inbox")).status_code == 401

    served.run(body)


def test_an_invitation_registers_one_passkey_once(served: WebServed) -> None:
    """[DIR-ENROL] 403 ``INVITE_INVALID``: an unknown invitation, and one used already."""

    async def body(http: httpx2.AsyncClient) -> None:
        unknown = await http.post("/approve/api/enrol/options", json={"invite": "nope"})
        assert unknown.status_code == 403
        assert (unknown.json()["code"], unknown.json()["data"]["reason"]) == (
            "INVITE_INVALID",
            "UNKNOWN",
        )
        token = served.enrolment.invite(BOB)
        options = await http.post("/approve/api/enrol/options", json={"invite": token})
        assert options.json()["human"] == BOB and options.json()["displayName"] == "Bob"
        device_challenge = b64url_decode(options.json()["options"]["challenge"])
        from hatp.gateway import SoftwareAuthenticator

        device = SoftwareAuthenticator("localhost", "k", origin=ORIGIN)
        first = await http.post(
            "/approve/api/enrol",
            json={"invite": token, "credential": device.register(device_challenge)},
        )
        assert first.json() == {"human": BOB, "kid": f"{BOB}#passkey-1"}
        again = await http.post("/approve/api/enrol/options", json={"invite": token})
        assert (again.status_code, again.json()["data"]["reason"]) == (403, "USED")
        page = await http.get("/approve/enrol")
        assert page.status_code == 200 and 'id="register"' in page.text

    served.run(body)


def test_an_ask_of_someone_else_is_not_shown(served: WebServed) -> None:
    """[WEB-INBOX] 404 ``ASK_UNKNOWN``, the same as for no ask at all."""

    async def body(http: httpx2.AsyncClient) -> None:
        await http.post("/coordinator/txns", json={"plan": served.plan()})
        bob = await enrol(served, http, BOB)
        await sign_in(http, bob)
        ask_id = await the_ask(http)
        await http.post("/approve/api/sign-out", json={})
        carol = await enrol(served, http, "human://acme.com/carol")
        await sign_in(http, carol)
        for target in (ask_id, "ask-none"):
            page = await http.get(f"/approve/asks/{target}")
            assert page.status_code == 404 and "ASK_UNKNOWN" in page.text
            answer = await http.post(
                f"/approve/api/asks/{target}/options", json={"decision": "approve"}
            )
            assert (answer.status_code, answer.json()["code"]) == (404, "ASK_UNKNOWN")

    served.run(body)


def test_the_agents_words_are_shown_under_their_label_and_escaped(served: WebServed) -> None:
    """[WEB-VIEW] the agent's summary sits in its labelled box, markup shown as text."""
    plan = served.plan()
    plan["agentText"]["summary"] = '<script>alert("x")</script>\nApproved by finance already!'

    async def body(http: httpx2.AsyncClient) -> str:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        await http.post("/coordinator/txns", json={"plan": plan})
        page = await http.get(f"/approve/asks/{await the_ask(http)}")
        for header, value in (
            ("content-security-policy", "script-src 'self'"),
            ("x-content-type-options", "nosniff"),
            ("cache-control", "no-store"),
        ):
            assert value in page.headers[header]
        return page.text

    html = served.run(body)
    assert '<script>alert("x")' not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    box = _agent_box(html)
    assert box.startswith(AGENT_TEXT_LABEL) and "Approved by finance already!" in box
    outside = html.replace(
        re.search(r'<section class="agent-text".*?</section>', html, re.S)[0], ""
    )  # type: ignore[index]
    assert "Approved by finance already!" not in outside


#: The policy every page is sent with: the steps' arguments need no change to it.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _step_args(html: str) -> dict[str, str]:
    """Each step's arguments row, by branch id."""
    return dict(re.findall(r'<tr class="step-args" data-step="([^"]+)">(.*?)</tr>', html, re.S))


def test_each_step_shows_its_arguments_from_the_plan_escaped_and_bounded(
    served: WebServed,
) -> None:
    """[WEB-VIEW] [GW-VIEW-ARGS] [GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED] Under each step, its
    arguments as the signed plan states them, in a box under their label: the seat's
    flight and seat, the charge's card and payee. Markup and a terminal escape in them
    are shown as text, a very long string cut with the gateway's note outside the box;
    the agent's summary keeps its own box; the page's policy is unchanged."""
    plan = served.plan()
    hostile = {
        "note": '<script>alert("x")</script>\x1b[2J</pre></div></td></tr>',
        "<img src=x onerror=alert(1)>": "y" * 5000,
    }
    plan["branches"][2]["args"].update(hostile)  # the calendar reads only its own args

    async def body(http: httpx2.AsyncClient) -> httpx2.Response:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        begun = await http.post("/coordinator/txns", json={"plan": plan})
        assert begun.status_code == 201, begun.text
        return await http.get(f"/approve/asks/{await the_ask(http)}")

    page = served.run(body)
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    html = page.text
    rows = _step_args(html)
    assert list(rows) == ["seat", "room", "calendar", "charge"]
    for row in rows.values():
        box = re.search(r'<div class="agent-text step-arguments".*?</div>', row, re.S)
        assert box is not None and _text(box[0]).startswith(STEP_ARGUMENTS_LABEL)
    assert _text(rows["seat"]) == f'{STEP_ARGUMENTS_LABEL} {{"flight": "LH400", "seat": "14C"}}'
    charge = _text(rows["charge"])
    for shown in ('"card": "corp-4242"', '"payee": "Acme Travel"', '"value": "730.00"'):
        assert shown in charge, shown
    calendar = rows["calendar"]
    assert "<script>" not in html and "<img src=x" not in html and "\x1b" not in html
    for shown in (
        "&#34;note&#34;: &#34;&lt;script&gt;alert(\\&#34;x\\&#34;)&lt;/script&gt;\\u001b[2J"
        "&lt;/pre&gt;&lt;/div&gt;&lt;/td&gt;&lt;/tr&gt;&#34;",
        "&#34;&lt;img src=x onerror=alert(1)&gt;&#34;: &#34;"
        + "y" * 300
        + "… (4,700 more characters)&#34;",
    ):
        assert shown in calendar, shown
    (pre,) = re.findall(r"<pre>(.*?)</pre>", calendar, re.S)
    assert unescape(pre) == shown_json(plan["branches"][2]["args"]).text
    box, after = calendar.split("</div>")
    assert "Shown in part" not in box
    assert _text(after) == "Shown in part: 1 string cut after 300 characters."
    assert "Book Alice's trip to New York" in _agent_box(html)
    assert "corp-4242" not in _agent_box(html).replace("card corp-4242 (730.00 USD)", "")


def _step_previews(html: str) -> dict[str, str]:
    """Each step's preview row, by branch id."""
    return dict(re.findall(r'<tr class="step-preview" data-step="([^"]+)">(.*?)</tr>', html, re.S))


def test_a_holds_first_ask_shows_each_steps_signed_preview_and_how_sure_it_is(
    store: Store, tmp_path: Path
) -> None:
    """[WEB-VIEW] [GW-VIEW-PREVIEW] [GW-VIEW-ESCAPE] Holds-first, the card's bank adding a
    fee at capture: under each step, its participant's signed preview in its own box
    (not the agent's), its certainty in words and in a class: the seat exact, the charge
    predicted with its bound. The calendar's title, the agent's choice, reaches its
    preview: markup and a terminal escape in it are shown as text. bob approves; the
    charge comes out beyond its bound and the record flags it."""
    served = open_web_served(
        tmp_path / "trip", store, capture_fee=CaptureFee(up_to=Decimal("20"), added=Decimal("35"))
    )
    plan = served.plan("trip-web-preview", mode="holds-first")
    plan["branches"][2]["args"]["title"] = '<script>alert("x")</script>\x1b[2J visit'

    async def body(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any]:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        begun = await http.post("/coordinator/txns", json={"plan": plan})
        assert begun.status_code == 201, begun.text
        ask_id = await the_ask(http)
        page = await http.get(f"/approve/asks/{ask_id}")
        voted = await vote(http, device, ask_id, "approve")
        assert voted.status_code == 200, voted.text
        (outcome,) = await served.finished()
        return page, outcome

    try:
        page, outcome = served.run(body)
    finally:
        served.world.close()
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    html = page.text
    rows = _step_previews(html)
    assert list(rows) == ["seat", "room", "calendar", "charge"]
    certainties = {}
    for branch_id, row in rows.items():
        box = re.search(r'<div class="effect-preview certainty-(\w+)" data-certainty="(\w+)"', row)
        assert box is not None and box[1] == box[2], branch_id
        certainties[branch_id] = box[1]
        assert "agent-text" not in row
        assert _text(row).startswith(STEP_PREVIEW_LABEL)
    assert certainties == {
        "seat": "exact",
        "room": "exact",
        "calendar": "exact",
        "charge": "predicted",
    }
    assert "Certainty: exact (will do exactly this)" in _text(rows["seat"])
    charge = _text(rows["charge"])
    for shown in (
        "Certainty: predicted (expects, may differ; at most 750 USD)",
        "plus a fee the bank sets at capture (at most 750.00 USD in all)",
        'card corp-4242: charge, payee null → "Acme Travel", 730 USD',
    ):
        assert shown in charge, shown
    calendar = rows["calendar"]
    assert "<script>" not in html and "\x1b" not in html
    # In the summary (the calendar writes the title as Python's repr) and in the event's value.
    assert "add &#39;&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;\\x1b[2J visit&#39;" in calendar
    assert (
        "&#34;title&#34;: &#34;&lt;script&gt;alert(\\&#34;x\\&#34;)&lt;/script&gt;\\u001b["
        in calendar
    )
    assert _text(calendar).endswith(
        "Shown in part: 1 value shown in part (at most 160 characters of each)."
    )
    assert "Book Alice's trip to New York" in _agent_box(html)
    assert "at most 750" not in _agent_box(html)
    assert outcome.state is TxnState.COMMITTED
    events = outcome.record["events"]
    effects = {
        e["body"]["branchId"]: e["body"]["verdict"] for e in events if e["type"] == "txn.effect"
    }
    assert effects["charge"] == "differs"
    (ended,) = [e["body"] for e in events if e["type"] == "txn.outcome"]
    assert ended["effectDiffers"] == ["charge"]
    assert verify_record(outcome.record, served.world.keyring).ok


def _question(served: WebServed, kind: str, **typed: Any) -> dict[str, Any]:
    from hatp.clock import format_time

    return {
        "hatpVersion": "0.1",
        "kind": "question",
        "questionId": f"q-{kind}",
        "asker": "agent://acme.com/travel-bot",
        "onBehalfOf": "human://acme.com/alice",
        "address": BOB,
        "type": kind,
        "prompt": {"summary": f"A {kind} question for bob"},
        "decideBy": format_time(served.clock.now().replace(minute=30)),
        **typed,
    }


@pytest.mark.parametrize(
    ("kind", "typed", "shown", "wrong", "reason", "right"),
    [
        (
            "choose",
            {"options": ["window", "aisle"]},
            ('type="radio"', 'data-value="aisle"', "Options (written by the agent)"),
            "middle",
            "NOT_AN_OPTION",
            "aisle",
        ),
        (
            "form",
            {
                "schema": {
                    "type": "object",
                    "properties": {
                        "nights": {"type": "integer", "title": "Nights"},
                        "late": {"type": "boolean"},
                        "room": {"enum": ["single", "double"]},
                    },
                    "required": ["nights"],
                    "additionalProperties": False,
                }
            },
            ('name="nights" data-kind="integer"', 'data-kind="boolean"', 'data-value="double"'),
            {"late": True},
            "SCHEMA",
            {"nights": 2, "room": "double"},
        ),
        (
            "text",
            {"maxLength": 20},
            ('maxlength="20"', "at most 20 characters"),
            "x" * 21,
            "TOO_LONG",
            "Aisle, please",
        ),
    ],
)
def test_a_question_is_answered_on_the_page_and_a_wrong_answer_refused_with_why(
    served: WebServed,
    kind: str,
    typed: dict[str, Any],
    shown: tuple[str, ...],
    wrong: Any,
    reason: str,
    right: Any,
) -> None:
    """[WEB-ANSWER] choose, form and text: the form the page shows, 422 ``ANSWER_INVALID``
    with the reason for an answer that does not fit, and the answer that does."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        asked = await http.post(
            "/gateway/questions", json={"question": _question(served, kind, **typed)}
        )
        assert asked.status_code == 200, asked.text
        ask_id = await the_ask(http)
        page = (await http.get(f"/approve/asks/{ask_id}")).text
        for piece in shown:
            assert piece in page, piece
        assert f"A {kind} question for bob" in _agent_box(page)
        refused = await http.post(f"/approve/api/asks/{ask_id}/answer", json={"value": wrong})
        assert refused.status_code == 422
        assert (refused.json()["code"], refused.json()["data"]["reason"]) == (
            "ANSWER_INVALID",
            reason,
        )
        done = await http.post(f"/approve/api/asks/{ask_id}/answer", json={"value": right})
        assert done.status_code == 200 and done.json()["answeredBy"] == BOB
        answer = await http.get(f"/gateway/questions/{ask_id}")
        assert answer.json()["answer"]["value"] == right

    served.run(body)


def test_declining_on_the_page_passes_the_ask_on(served: WebServed) -> None:
    """[GW-DECLINE] bob declines; the ask leaves his inbox and goes to the next person."""

    async def body(http: httpx2.AsyncClient) -> None:
        device = await enrol(served, http, BOB)
        await sign_in(http, device)
        await http.post("/coordinator/txns", json={"plan": served.plan()})
        ask_id = await the_ask(http)
        done = await http.post(f"/approve/api/asks/{ask_id}/decline", json={})
        assert done.status_code == 200
        people = {p["id"]: p["status"] for p in done.json()["people"]}
        assert people[BOB] == "declined" and "asked" in people.values()
        assert (await http.get("/approve/api/inbox")).json()["asks"] == []

    served.run(body)


def test_the_pages_script_and_style_are_served_and_the_index_names_the_page(
    served: WebServed,
) -> None:
    async def body(http: httpx2.AsyncClient) -> None:
        script = await http.get("/approve/static/approver.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert "navigator.credentials.get" in script.text
        style = await http.get("/approve/static/approver.css")
        assert style.status_code == 200 and ".agent-text" in style.text
        index = await http.get("/")
        assert index.json()["approve"] == "/approve"

    served.run(body)
