"""[API-TOKEN] [API-CALLER] [API-OWNER] hatp serve's JSON API for its callers alone.

With ``[api] callers``: the trip world behind the app, one token for the travel
bot (an agent, the trip plan's initiator), one for another agent, and one for a
service (a coordinator elsewhere). Without a token, or with one nobody holds,
nothing runs (401); an agent's token speaks only for that agent (403) and acts
only on its own asks and transactions (403); the pages that are not the API stay
open; and with the checks switched off the planted requests go through.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from gateway_world import call_request, payments_server
from hatp._checks import unsafe_switched_off
from hatp.cli import app as cli
from hatp.clock import SystemClock
from hatp.demo import GATEWAY, TripWorld
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import INITIATOR
from hatp.errors import ConfigInvalid
from hatp.evidence import verify
from hatp.http import (
    ApiCallers,
    api_token_digest,
    load_config,
    new_api_token,
    open_services,
    openapi_document,
    parse_config,
)
from serve_world import Served

OTHER_AGENT = "agent://acme.com/expense-bot"
SERVICE = "https://coordinator.other.example"
TOKENS = {who: new_api_token() for who in (INITIATOR, OTHER_AGENT, SERVICE)}
CALLERS = ApiCallers({who: kept for who, (_, kept) in TOKENS.items()})


def _as(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


def _code(response: httpx2.Response) -> tuple[int, str, Any]:
    body = response.json()
    return response.status_code, body.get("code", ""), body.get("data", {}).get("reason")


def test_without_a_token_the_api_runs_nothing_and_says_how_to_call_it(serve: Any) -> None:
    """[API-TOKEN] no Authorization header, one not of a bearer token, one nobody holds:
    401 UNAUTHENTICATED with the reason; the plan was not begun."""
    served: Served = serve(callers=CALLERS)
    plan = served.plan("trip-no-token")

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [
            await http.post("/coordinator/txns", json={"plan": plan}),
            await http.post(
                "/coordinator/txns", json={"plan": plan}, headers={"Authorization": "Basic x"}
            ),
            await http.post(
                "/coordinator/txns",
                json={"plan": plan},
                headers={"Authorization": f"Bearer {new_api_token()[0]}"},
            ),
            await http.get("/coordinator/txns/trip-no-token", headers=_as(SERVICE)),
        ]

    missing, basic, unknown, state = served.run(go)
    assert _code(missing) == (401, "UNAUTHENTICATED", "NO_TOKEN")
    assert "Authorization: Bearer" in missing.json()["message"]
    assert _code(basic) == (401, "UNAUTHENTICATED", "NO_TOKEN")
    assert _code(unknown) == (401, "UNAUTHENTICATED", "BAD_TOKEN")
    assert _code(state) == (404, "TXN_UNKNOWN", None)  # nothing was begun


def test_an_agent_begins_its_own_plan_and_not_another_agents(serve: Any) -> None:
    """[API-CALLER] the travel bot's token begins the travel bot's plan; the expense bot's
    token cannot begin it (403 CALLER_REFUSED naming both), and nothing ran."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, httpx2.Response]:
        refused = await http.post(
            "/coordinator/txns", json={"plan": served.plan("trip-a")}, headers=_as(OTHER_AGENT)
        )
        lowercase = {"Authorization": _as(INITIATOR)["Authorization"].replace("Bearer", "bearer")}
        begun = await http.post(
            "/coordinator/txns", json={"plan": served.plan("trip-b")}, headers=lowercase
        )
        return refused, begun

    refused, begun = served.run(go)
    assert _code(refused)[:2] == (403, "CALLER_REFUSED")
    assert refused.json()["data"] == {"caller": OTHER_AGENT, "named": INITIATOR}
    assert begun.status_code == 201, begun.text
    assert begun.json()["txnId"] == "trip-b"


def test_a_service_may_speak_for_any_agent(serve: Any) -> None:
    """[API-CALLER] a caller that is not an agent (a coordinator elsewhere asking this
    gateway) is not bound to the agent a request names."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post(
            "/gateway/asks", json=served.ask_body("trip-c"), headers=_as(SERVICE)
        )

    asked = served.run(go)
    assert asked.status_code in (200, 201), asked.text


@pytest.mark.parametrize("who", [OTHER_AGENT, INITIATOR])
def test_a_call_and_a_question_are_asked_only_by_the_agent_they_name(serve: Any, who: str) -> None:
    """[API-CALLER] ask/call names its requester and ask/question its asker (the travel
    bot): only the travel bot's token (or a service's) asks them."""
    served: Served = serve(callers=CALLERS)
    request = call_request(served.clock, payments_server(served.world).gate)
    question = served.question()

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, httpx2.Response]:
        return (
            await http.post("/gateway/calls", json={"request": request}, headers=_as(who)),
            await http.post("/gateway/questions", json={"question": question}, headers=_as(who)),
        )

    call, asked = served.run(go)
    if who == INITIATOR:
        assert call.status_code == 200 and asked.status_code == 200, (call.text, asked.text)
    else:
        assert _code(call)[:2] == _code(asked)[:2] == (403, "CALLER_REFUSED")


def test_an_agent_reads_and_changes_only_its_own_asks(serve: Any) -> None:
    """[API-OWNER] an ask for the travel bot's plan (asked by a service), its call and its
    question: the expense bot's token can neither poll, tighten nor withdraw them (403
    CALLER_REFUSED naming the owner), and the ask stays open; the travel bot's and the
    service's tokens can."""
    served: Served = serve(callers=CALLERS, decision="never")
    request = call_request(served.clock, payments_server(served.world).gate)
    ask_body = served.ask_body("trip-own")

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        asked = await http.post("/gateway/asks", json=ask_body, headers=_as(SERVICE))
        ask_id = asked.json()["answer"]["askId"]
        call = await http.post("/gateway/calls", json={"request": request}, headers=_as(INITIATOR))
        call_id = call.json()["answer"]["askId"]
        question = await http.post(
            "/gateway/questions", json={"question": served.question()}, headers=_as(INITIATOR)
        )
        question_id = question.json()["answer"]["askId"]
        other = _as(OTHER_AGENT)
        tightened = {"decideBy": ask_body["decideBy"]}
        return {
            "poll": await http.get(f"/gateway/asks/{ask_id}", headers=other),
            "tighten": await http.post(
                f"/gateway/asks/{ask_id}/tighten", json=tightened, headers=other
            ),
            "withdraw": await http.post(
                f"/gateway/asks/{ask_id}/withdraw", json={"reason": "mine now"}, headers=other
            ),
            "call": await http.get(f"/gateway/calls/{call_id}", headers=other),
            "question": await http.get(f"/gateway/questions/{question_id}", headers=other),
            "unknown": await http.get("/gateway/asks/ask-nobody-made", headers=other),
            "own": await http.get(f"/gateway/asks/{ask_id}", headers=_as(INITIATOR)),
            "own call": await http.get(f"/gateway/calls/{call_id}", headers=_as(INITIATOR)),
            "service": await http.get(f"/gateway/questions/{question_id}", headers=_as(SERVICE)),
            "ask_id": ask_id,
        }

    got = served.run(go)
    for what in ("poll", "tighten", "withdraw", "call", "question"):
        assert _code(got[what])[:2] == (403, "CALLER_REFUSED"), (what, got[what].text)
        data = got[what].json()["data"]
        assert (data["caller"], data["named"]) == (OTHER_AGENT, INITIATOR), what
    assert got["poll"].json()["data"]["about"] == f"ask {got['ask_id']}"
    assert _code(got["unknown"]) == (404, "ASK_UNKNOWN", None)
    for what in ("own", "own call", "service"):
        assert got[what].status_code == 200, (what, got[what].text)
    assert got["own"].json()["answer"]["kind"] == "pending"  # not withdrawn


def test_an_agent_reads_and_holds_only_its_own_transactions(serve: Any) -> None:
    """[API-OWNER] the travel bot's transaction: the expense bot's token cannot read its
    state or record, nor take, renew or release its lease (403); the travel bot's can."""
    served: Served = serve(callers=CALLERS, decision="never")
    txn = "/coordinator/txns/trip-held"
    lock = {"owner": "other-worker", "seconds": 30}

    async def go(http: httpx2.AsyncClient) -> dict[str, httpx2.Response]:
        plan = served.plan("trip-held")
        begun = await http.post("/coordinator/txns", json={"plan": plan}, headers=_as(INITIATOR))
        assert begun.status_code == 201, begun.text
        other = _as(OTHER_AGENT)
        return {
            "state": await http.get(txn, headers=other),
            "record": await http.get(txn + "/record", headers=other),
            "lock": await http.post(txn + "/lock", json=lock, headers=other),
            "renew": await http.post(txn + "/lock/renew", json={**lock, "fence": 1}, headers=other),
            "release": await http.post(
                txn + "/lock/release", json={"owner": "x", "fence": 1}, headers=other
            ),
            "own": await http.get(txn + "/record", headers=_as(INITIATOR)),
            "service": await http.get(txn, headers=_as(SERVICE)),
        }

    got = served.run(go)
    for what in ("state", "record", "lock", "renew", "release"):
        assert _code(got[what])[:2] == (403, "CALLER_REFUSED"), (what, got[what].text)
        assert got[what].json()["data"]["about"] == "transaction trip-held"
    assert got["own"].status_code == got["service"].status_code == 200


def test_a_withdrawal_names_who_withdrew_the_ask(serve: Any) -> None:
    """[GW-WITHDRAWN-BY] the signed withdrawn reject names the caller whose token withdrew
    the ask, not "its asker"."""
    served: Served = serve(callers=CALLERS, decision="never")

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        asked = await http.post(
            "/gateway/asks", json=served.ask_body("trip-gone"), headers=_as(SERVICE)
        )
        ask_id = asked.json()["answer"]["askId"]
        done = await http.post(
            f"/gateway/asks/{ask_id}/withdraw",
            json={"reason": "plan changed"},
            headers=_as(INITIATOR),
        )
        assert done.status_code == 200, done.text
        polled = await http.get(f"/gateway/asks/{ask_id}", headers=_as(INITIATOR))
        answer: dict[str, Any] = polled.json()["answer"]
        return answer

    approval = served.run(go)
    verify(approval, served.keyring)
    assert (approval["kind"], approval["decision"], approval["withdrawn"]) == (
        "approval",
        "reject",
        True,
    )
    assert approval["reason"] == f"withdrawn by {INITIATOR}: plan changed"
    details = {h["detail"] for h in approval["routing"]["humans"] if h["result"] == "asked"}
    assert f"withdrawn: {INITIATOR} withdrew it" in details


def test_the_pages_that_are_not_the_api_stay_open(serve: Any) -> None:
    """The index, the OpenAPI document (which names the bearer scheme) and the well-known
    document answer without a token."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [
            await http.get(path) for path in ("/", "/openapi.json", "/.well-known/human-card.json")
        ]

    index, openapi, known = served.run(go)
    assert (index.status_code, openapi.status_code, known.status_code) == (200, 200, 200)
    document = openapi.json()
    assert document["components"]["securitySchemes"]["callerToken"]["scheme"] == "bearer"
    begin = document["paths"]["/coordinator/txns"]["post"]
    assert begin["security"] == [{"callerToken": []}]
    assert "UNAUTHENTICATED" in begin["responses"]["401"]["x-hatp-codes"]
    assert "CALLER_REFUSED" in begin["responses"]["403"]["x-hatp-codes"]
    state = document["paths"]["/coordinator/txns/{txnId}"]["get"]
    assert state["responses"]["403"]["x-hatp-codes"] == ["CALLER_REFUSED"]  # [API-OWNER]
    cards = document["paths"]["/directory/cards"]["get"]
    assert "403" not in cards["responses"]  # it names no agent


def test_an_open_api_describes_no_security(serve: Any) -> None:
    served: Served = serve()
    document = openapi_document(served.app.state.hatp_operations)
    assert "securitySchemes" not in document["components"]
    assert all("security" not in op for path in document["paths"].values() for op in path.values())


#: Planted requests: case -> the checks that refuse them.
CASES: dict[str, tuple[str, ...]] = {
    "no-token": ("API-TOKEN",),
    "another-agents-plan": ("API-CALLER",),
}
#: Each case's headers for beginning the travel bot's plan.
PLANTED: dict[str, Any] = {
    "no-token": lambda: {},
    "another-agents-plan": lambda: _as(OTHER_AGENT),
}


#: Each check this module proves by switching it off in a test of its own: check -> test.
SWITCH_OFF_TESTS: dict[str, tuple[str, ...]] = {
    "API-OWNER": ("test_switched_off_another_agent_reads_the_transaction",),
}


def test_switched_off_another_agent_reads_the_transaction(serve: Any) -> None:
    """[API-OWNER] with the check on the expense bot's token cannot read the travel bot's
    transaction; with it off it can: that check is what refuses it."""
    served: Served = serve(callers=CALLERS, decision="never")

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        plan = served.plan("trip-owner-off")
        await http.post("/coordinator/txns", json={"plan": plan}, headers=_as(INITIATOR))
        return await http.get("/coordinator/txns/trip-owner-off", headers=_as(OTHER_AGENT))

    assert served.run(go).status_code == 403
    with unsafe_switched_off("API-OWNER"):
        assert served.run(go).status_code == 200


@pytest.mark.parametrize("case", sorted(CASES))
def test_switched_off_the_planted_request_goes_through(serve: Any, case: str) -> None:
    """[API-TOKEN] [API-CALLER] with its check on the planted request is refused; with the
    check off the same request begins the plan: that check is what refuses it."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        plan = served.plan(f"trip-{case}")
        return await http.post("/coordinator/txns", json={"plan": plan}, headers=PLANTED[case]())

    assert served.run(go).status_code in (401, 403)
    with unsafe_switched_off(*CASES[case]):
        assert served.run(go).status_code == 201


# -- the settings and the token ----------------------------------------------------------


@pytest.mark.parametrize(
    ("callers", "fragment"),
    [
        ({}, "at least one"),
        ({"agent://acme.com/bot": "abc"}, "sha256:"),
        ({"agent://acme.com/bot": "sha256:" + "A" * 64}, "sha256:"),
        ({"agent bot": "sha256:" + "a" * 64}, "no spaces"),
        ({"agent://a.example/x": "sha256:" + "a" * 64, "agent://b.example/y": "sha256:" + "a" * 64},
         "the same token"),
    ],
)  # fmt: skip
def test_callers_that_cannot_be_served_are_refused_naming_the_setting(
    tmp_path: Any, callers: dict[str, str], fragment: str
) -> None:
    doc = {
        "directory": {"issuer": "https://directory.acme.com", "cards": "d.json", "gateway": "g"},
        "server": {"keyring": "k.json"},
        "api": {"callers": callers},
    }
    with pytest.raises(ConfigInvalid) as refused:
        parse_config(doc, tmp_path)
    assert refused.value.data["key"] == "api.callers"
    assert fragment in refused.value.message


def test_hatp_api_token_prints_a_token_and_the_line_that_keeps_its_digest() -> None:
    """[SERVE-API-TOKEN] the token on stdout, the settings line (its digest) on stderr."""
    done = CliRunner().invoke(cli, ["api-token", INITIATOR])
    assert done.exit_code == 0, done.output
    token = done.stdout.strip()
    assert len(token) >= 43
    assert f'"{INITIATOR}" = "{api_token_digest(token)}"' in done.stderr
    assert token not in done.stderr  # the settings file gets the digest, never the token

    refused = CliRunner().invoke(cli, ["api-token", "agent bot"])
    assert refused.exit_code == 2


def test_hatp_serve_settings_with_api_callers_serve_their_tokens_alone(tmp_path: Path) -> None:
    """[API-TOKEN] from a settings file: [api] callers reaches the app open_services
    builds; the banner names the callers; without [api] it says the API is open."""
    with TripWorld.open(tmp_path / "world", SystemClock()) as world:
        world.directory.save(tmp_path / "directory.json")
        world.keyring.save(tmp_path / "keyring.json")
    token, kept = new_api_token()
    tables = (
        '[server]\nkeyring = "keyring.json"\ndb = "serve.db"\n\n'
        f'[gateway]\nid = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"\n\n'
        f'[directory]\nissuer = "{DIRECTORY}"\ncards = "directory.json"\n\n'
    )
    (tmp_path / "open.toml").write_text(tables, encoding="utf-8")
    (tmp_path / "hatp.toml").write_text(
        tables + f'[api]\ncallers = {{ "{SERVICE}" = "{kept}" }}\n', encoding="utf-8"
    )

    async def answers(settings: str, headers: dict[str, str]) -> tuple[int, list[str]]:
        async with open_services(load_config(tmp_path / settings)) as services:
            app = services.app()
            transport = httpx2.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx2.AsyncClient(transport=transport, base_url="http://hatp.test") as http,
            ):
                found = await http.get("/gateway/asks/ask-nobody-made", headers=headers)
            return found.status_code, services.notes

    async def go() -> list[tuple[int, list[str]]]:
        return [
            await answers("hatp.toml", {}),
            await answers("hatp.toml", {"Authorization": f"Bearer {token}"}),
            await answers("open.toml", {}),
        ]

    (without, _), (with_token, notes), (open_api, open_notes) = asyncio.run(
        asyncio.wait_for(go(), 30)
    )
    assert (without, with_token, open_api) == (401, 404, 404)
    assert f"api: bearer tokens of {SERVICE}" in notes
    assert any(note.startswith("api: open to whoever reaches it") for note in open_notes)
