"""[HTTP-NUMBERS] Every number that crosses the wire is bounded: a query number or a body
number out of its range is 400 INVALID_JSON naming the member and the range, never a 500."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from serve_world import Served

HUGE = "9" * 5000


@pytest.mark.parametrize(
    "value", [HUGE, "-1", "NaN", "1e400", "-1e400", "3601", "1" + "0" * 400 + ".5"]
)
def test_a_wait_out_of_its_range_is_refused_naming_it(serve: Any, value: str) -> None:
    """[HTTP-NUMBERS] waitSeconds is a finite number from 0 to 3600 (waiting at most 30)."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [
            await http.get(f"/gateway/{kind}/ask-x?waitSeconds={value}")
            for kind in ("asks", "calls", "questions")
        ]

    for response in served.run(go):
        assert response.status_code == 400, response.text
        body = response.json()
        assert (body["code"], body["data"]["where"]) == ("INVALID_JSON", "/waitSeconds")


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/directory/resolve", {"deadlineSeconds": 1e300}, "/deadlineSeconds"),
        ("/directory/resolve", {"deadlineSeconds": -1}, "/deadlineSeconds"),
        ("/coordinator/txns/t/lock/renew", {"fence": -1}, "/fence"),
        ("/coordinator/txns/t/lock", {"seconds": 1e308}, "/seconds"),
    ],
)
def test_a_body_number_out_of_its_range_is_refused_naming_it(
    serve: Any, path: str, body: dict[str, Any], where: str
) -> None:
    """[HTTP-NUMBERS] deadlineSeconds (0 to ten years), a fence (0 to 2**53-1) and a lease's
    seconds (up to a day) are bounded in the params models."""
    served: Served = serve()
    base = {
        "/directory/resolve": {
            "address": "human://acme.com/role/finance-approver",
            "action": "approve.spend",
            "onBehalfOf": "human://acme.com/alice",
        },
        "/coordinator/txns/t/lock/renew": {"owner": "w", "seconds": 30, "fence": 1},
        "/coordinator/txns/t/lock": {"owner": "w", "seconds": 30},
    }[path]

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post(path, json={**base, **body})

    response = served.run(go)
    assert response.status_code == 400, response.text
    assert response.json()["data"]["where"] == where
    assert "than" in response.json()["message"]  # the bound it broke
