"""The Directory's JSON API (``hatp serve``): resolve, the cards, the well-known document,
and each role served alone."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx2

from hatp.demo import FINANCE_ADDRESS, GATEWAY
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import TRAVELLER
from hatp.directory import Directory, verify_card
from hatp.model import WellKnown
from serve_world import Served

BOB = "human://acme.com/bob"


def test_resolve_ranks_the_candidates_and_names_who_was_passed_over(serve: Any) -> None:
    """[HTTP-SERVE-DIRECTORY] POST /directory/resolve answers as Directory.resolve, each
    candidate with its signed card ([DIR-SOD] alice, [DIR-AUTHORITY] erin passed over)."""
    served: Served = serve()
    body = {
        "address": FINANCE_ADDRESS,
        "action": "approve.spend",
        "amounts": {"USD": "730.00"},
        "onBehalfOf": TRAVELLER,
    }

    async def go(http: httpx2.AsyncClient) -> Any:
        return await http.post("/directory/resolve", json=body)

    response = served.run(go)
    assert response.status_code == 200
    answer = response.json()
    assert (answer["directory"], answer["address"], answer["needed"]) == (
        DIRECTORY,
        FINANCE_ADDRESS,
        1,
    )
    assert [c["id"] for c in answer["candidates"]] == [BOB, "human://acme.com/carol"]
    for candidate in answer["candidates"]:
        assert verify_card(candidate["card"], served.keyring).id == candidate["id"]
    assert {e["id"]: e["rule"] for e in answer["excluded"]} == {
        "human://acme.com/alice": "separation-of-duties",
        "human://acme.com/erin": "authority",
    }


def test_resolve_refuses_what_is_not_an_address_or_not_the_form(serve: Any) -> None:
    """[HTTP-STATUS] a bad address is 422 ADDRESS_INVALID with its reason; an amount that is
    not decimal text is 400 INVALID_JSON naming it."""
    served: Served = serve()
    body = {"address": "human://acme.com/role/", "action": "approve.spend", "onBehalfOf": BOB}

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.post("/directory/resolve", json=body),
            await http.post("/directory/resolve", json={**body, "amounts": {"USD": 730}}),
        ]

    address, amount = served.run(go)
    assert (address.status_code, address.json()["code"]) == (422, "ADDRESS_INVALID")
    assert address.json()["data"]["reason"] == "TRAILING_SLASH"
    assert (amount.status_code, amount.json()["code"]) == (400, "INVALID_JSON")
    assert amount.json()["data"]["where"] == "/amounts/USD"


def test_the_cards_are_served_as_signed(serve: Any) -> None:
    """[HTTP-SERVE-DIRECTORY] GET /directory/cards is the directory file (every card verifies
    again); GET /directory/cards/{cardId} one card, its id raw or percent-encoded; an
    unknown one is 404 CARD_UNKNOWN."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.get("/directory/cards"),
            await http.get(f"/directory/cards/{BOB}"),
            await http.get(f"/directory/cards/{quote(BOB, safe='')}"),
            await http.get("/directory/cards/human://acme.com/zed"),
        ]

    every, raw, encoded, unknown = served.run(go)
    assert len(Directory.from_json(every.json(), served.keyring)) == len(served.world.directory)
    assert raw.json() == encoded.json() == served.world.directory.signed(BOB)
    assert verify_card(raw.json(), served.keyring).id == BOB
    assert (unknown.status_code, unknown.json()["code"]) == (404, "CARD_UNKNOWN")
    assert unknown.json()["data"]["card"] == "human://acme.com/zed"


def test_the_well_known_document_names_directory_gateway_and_card_keys(serve: Any) -> None:
    """[DIR-WELLKNOWN] GET /.well-known/human-card.json: a WellKnown naming acme's directory,
    its gateway and the key the cards verify under."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> Any:
        return await http.get("/.well-known/human-card.json")

    response = served.run(go)
    document = WellKnown.model_validate(response.json())
    assert (document.directory, document.gateway) == (DIRECTORY, GATEWAY)
    keys = [k.to_jwk() for k in served.keyring.issued_by(DIRECTORY)]
    assert [k.to_wire() for k in document.card_signing_keys] == keys


def test_each_role_can_be_served_alone(serve: Any) -> None:
    """[HTTP-SERVE-ROLES] an app of the directory alone answers its routes and the
    well-known; the gateway's and the coordinator's are not there, nor in its OpenAPI."""
    served: Served = serve(roles=("directory",))

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.get("/"),
            await http.get(f"/directory/cards/{BOB}"),
            await http.get("/gateway/asks/ask-x"),
            await http.get("/coordinator/txns/t-1"),
            await http.get("/openapi.json"),
        ]

    index, card, gateway, coordinator, openapi = served.run(go)
    assert index.json()["serves"] == ["directory"]
    assert card.status_code == 200
    assert gateway.status_code == coordinator.status_code == 404
    assert all(
        p.startswith(("/directory", "/.well-known", "/openapi", "/"))
        for p in openapi.json()["paths"]
    )
    assert not any(p.startswith(("/gateway", "/coordinator")) for p in openapi.json()["paths"])
