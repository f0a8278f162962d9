"""Property tests over the JSON API's requests: whatever a caller sends, a typed answer.

Every JSON API route of ``hatp serve`` (the gateway's, the directory's, the
coordinator's) and a system of record's lease routes get a valid request
mutated: members dropped, given twice, retyped (string, number, list, object,
null), numbers past what the strict reader takes (integers past 2**53, ``1e400``
as written), impossible times, deep nesting, bodies that are not objects or not
UTF-8, odd path ids and query members. Whatever comes in, the answer is never a
5xx, and a refusal is the typed body ``{code, message, data}`` ([HTTP-TYPED],
[HTTP-PARAMS], [HTTP-NUMBERS]). On SQLite only: the store is not the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from gateway_world import call_request, payments_server
from hatp.demo import FINANCE_ADDRESS
from hatp.demo.trip import TRAVELLER
from hatp.errors import HatpError
from hatp.evidence import digest
from hatp.model import parse_plan
from serve_world import Served

T = TypeVar("T")
#: Puts a mutated body right where it can (a digest over a changed plan, say).
Fix = Callable[[Any], Any]

#: How long one request may take, at most: none of them waits on the (manual) clock.
BOUND = 20.0
FUZZ = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SQLITE = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (``1e400``, ``NaN``): what a serializer would not write."""

    text: str


@dataclass(frozen=True)
class Twice:
    """An object whose member ``name`` is written twice, the second time as ``again``."""

    members: dict[str, Any]
    name: str
    again: Any


def emit(value: Any) -> str:
    """``value`` as JSON text, :class:`Raw` and :class:`Twice` as they say."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Twice):
        pairs = [*value.members.items(), (value.name, value.again)]
        return "{" + ",".join(f"{json.dumps(k)}:{emit(v)}" for k, v in pairs) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{emit(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(emit(v) for v in value) + "]"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value)  # ensure_ascii: a lone surrogate is written \ud800
    if isinstance(value, int):
        return str(value)
    return repr(value)


def _nested(depth: int, leaf: Any = 1) -> Raw:
    return Raw("[" * depth + emit(leaf) + "]" * depth)


def _deep_object(depth: int) -> Raw:
    return Raw('{"a":' * depth + "1" + "}" * depth)


TIMES = [
    "2026-02-30T00:00:00.000Z",
    "9999-12-31T23:59:59.999Z",
    "0000-01-01T00:00:00.000Z",
    "0001-01-01T00:00:00.000Z",
    "2026-13-01T00:00:00.000Z",
    "2026-12-02T24:00:00.000Z",
    "2026-12-02T23:59:60.000Z",
    "2026-12-02T09:00:00Z",
    "2026-12-02T09:00:00.000+14:00",
    "2026-12-02t09:00:00.000z",
    "1969-12-31T23:59:59.999Z",
    "+12026-12-02T09:00:00.000Z",
]
NUMBERS: list[Any] = [
    0,
    -1,
    1.5,
    2**53 - 1,
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    2**64,
    10**400,
    -(10**400),
    1e308,
    5e-324,
    Raw("1e400"),
    Raw("-1e400"),
    Raw("1e-400"),
    Raw("-0"),
    Raw("-0.0"),
    Raw("1E+2"),
    Raw("0." + "0" * 400 + "1"),
    Raw("1" + "0" * 5000),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
]
TEXTS = [
    "",
    " ",
    "x",
    "\ud800",
    "\udfff",
    "\x00",
    "a\u0000b",
    "\u202e",
    "x" * 5000,
    "human://acme.com/bob",
    "agent://acme.com/travel-bot",
    "sha256:" + "0" * 64,
    "approve",
    "USD",
    "730.00",
    "-1",
    "1e400",
    "../../etc/passwd",
    "\ufeff",
]
#: Values a member may be given instead of its own.
WEIRD = st.one_of(
    st.sampled_from([None, True, False, [], {}, [None], {"": None}, {"a": []}]),
    st.sampled_from(NUMBERS),
    st.sampled_from(TEXTS),
    st.sampled_from(TIMES),
    st.sampled_from([_nested(2_000), _deep_object(2_000), _nested(50), _nested(100_000)]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.lists(st.integers() | st.text(max_size=5), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers() | st.none(), max_size=3),
)
#: Members added to an object: a path or query member, a fixed one, an unknown one.
ADDED = ["askId", "txnId", "kind", "waitSeconds", "cardId", "leaseId", "extra", "", "\u0000"]
#: Whole bodies that are not a request's object.
BODIES = [
    b"",
    b"   ",
    b"[]",
    b"null",
    b"true",
    b'"x"',
    b"1",
    b"1e400",
    b"{",
    b"}",
    b'{"a":1}x',
    b'{"a":1} {"b":2}',
    b"\xef\xbb\xbf{}",
    b'{"a":"\xff"}',
    b"\xff\xfe{\x00}\x00",
    b'{"a":"\\ud800"}',
    b'{"a":1,"a":1}',
    b"{'a':1}",
    b"{a:1}",
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'{"a":01}',
    b'{"a":1,}',
    b'{"a":"\x01"}',
    b"\x00",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b"[" * 100_000,
]


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in ``value``: ``()`` itself, then each member and item, depth first."""
    yield at
    if isinstance(value, dict):
        for key, member in value.items():
            yield from _paths(member, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*at, index))


def _retyped(value: Any) -> list[Any]:
    """``value`` as the other JSON types: string, number, list, object, null."""
    text = value if isinstance(value, str) else emit(value)[:50]
    number: Any = Raw(value) if isinstance(value, str) and _is_number(value) else 7
    return [text, number, [value], {"value": value}, None, not value, value == value]


def _is_number(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return text.strip() == text and text[:1] in "-0123456789"


def _replaced(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {k: _replaced(v, rest, new) if k == head else v for k, v in doc.items()}
    return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(doc)]


def _dropped(doc: Any, path: tuple[Any, ...]) -> Any:
    head, rest = path[0], path[1:]
    if rest:
        inner = doc[head]
        return _replaced(doc, (head,), _dropped(inner, rest))
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k != head}
    return [v for i, v in enumerate(doc) if i != head]


@st.composite
def mutated(draw: st.DrawFn, valid: Any, fix: Fix | None = None) -> bytes:
    """``valid``, changed in up to three places (or replaced by a body that is not an
    object), then put right by ``fix`` where it can be, as the bytes of a request body."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(BODIES))
    doc = valid
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(list(_paths(doc))))
        here: Any = doc
        for step in path:
            here = here[step]
        how = draw(st.sampled_from(["drop", "twice", "add", "retype", "weird", "weird", "empty"]))
        if how == "add" and isinstance(here, dict):
            name = draw(st.sampled_from(ADDED))
            doc = _replaced(doc, path, {**here, name: draw(WEIRD)})
        elif how == "drop" and path:
            doc = _dropped(doc, path)
        elif how == "twice" and path and isinstance(_parent(doc, path), dict):
            parent = _parent(doc, path)
            again = draw(st.sampled_from([here, *_retyped(here)]))
            doc = _replaced(doc, path[:-1], Twice(parent, path[-1], again))
            break  # a Twice is written, not walked again
        elif how == "retype":
            doc = _replaced(doc, path, draw(st.sampled_from(_retyped(here))))
        elif how == "empty":
            doc = _replaced(doc, path, draw(st.sampled_from([{}, [], ""])))
        else:
            doc = _replaced(doc, path, draw(WEIRD))
    if fix is not None and draw(st.booleans()):
        doc = fix(doc)
    return emit(doc).encode("utf-8", "surrogatepass")


def with_digest(doc: Any) -> Any:
    """An ask's body with ``planDigest`` the digest of its plan as it now is, where the
    plan still parses: so a mutated plan reaches the gateway's checks past the digest."""
    try:
        return {**doc, "planDigest": digest(parse_plan(doc["plan"]).to_wire())}
    except (HatpError, KeyError, TypeError, ValueError):
        return doc


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


ODD_IDS = [
    "nope",
    "x" * 300,
    "%ff",
    "%00",
    "%ed%a0%80",
    "..%2F..%2Fdirectory",
    "%20",
    "a%2Fb",
    quote("human://acme.com/bob", safe=""),
    quote("\u202e", safe=""),
    "%",
    "%zz",
]
#: Ids that stay one path segment: a host app's own 404 for another path is not the
#: lease routes' answer.
SEGMENT_IDS = [i for i in ODD_IDS if "%2F" not in i and "/" not in i and "%3A" not in i]
WAITS = [
    "0",
    "0.5",
    "-0",
    "-1",
    "3600",
    "3600.0000001",
    "1e400",
    "-1e400",
    "1e-400",
    "9007199254740993",
    "1" + "0" * 400,
    "NaN",
    "Infinity",
    "",
    "0x10",
    "1_0",
    "\u0661",
    "true",
    "null",
    "[]",
    "%ff",
]


@st.composite
def query(draw: st.DrawFn, takes: tuple[str, ...]) -> str:
    """A query string: usually none or the route's own members with odd values, at times
    a member given twice or one the route does not take."""
    parts: list[str] = []
    for name in takes:
        if draw(st.booleans()):
            parts.append(f"{name}={draw(st.sampled_from(WAITS))}")
    extra = draw(st.sampled_from([None] * 12 + ["x", "waitSeconds", "askId", "%ff", ""]))
    if extra is not None:
        parts.append(f"{extra}={draw(st.sampled_from(WAITS))}")
    return "&".join(parts)


@dataclass(frozen=True)
class Call:
    """One route of the API and a valid request to it: ``{id}`` in ``path`` is ``id``."""

    method: str
    path: str
    body: Any = None
    id: str = ""
    takes: tuple[str, ...] = ()
    fix: Fix | None = None


def wrong_with(response: httpx2.Response) -> str | None:
    """What is wrong with an answer, if anything: a 5xx; a refusal that is not
    ``{code, message, data}`` with a code; a success that says JSON and is not."""
    where = f"{response.request.method} {str(response.request.url)[:300]}"
    if response.status_code >= 500:
        return f"{where}: {response.status_code} {response.text[:500]}"
    if response.status_code >= 400:
        body = response.json()
        typed = (
            isinstance(body, dict)
            and isinstance(body.get("code"), str)
            and bool(body["code"])
            and isinstance(body.get("message"), str)
            and isinstance(body.get("data"), dict)
        )
        return None if typed else f"{where}: {body!r}"
    if response.headers.get("content-type", "").startswith("application/json"):
        response.json()
    return None


class Loop:
    """One event loop for a whole property test: the app's lifespan entered once, every
    example's request sent on it, each within :data:`BOUND`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.stack = contextlib.AsyncExitStack()

    def run(self, work: Awaitable[T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(work, BOUND))

    def client(self, app: Starlette, base: str, *, lifespan: bool = True) -> httpx2.AsyncClient:
        async def enter() -> httpx2.AsyncClient:
            if lifespan:
                await self.stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx2.ASGITransport(app=app)
            http = httpx2.AsyncClient(transport=transport, base_url=base)
            return await self.stack.enter_async_context(http)

        return self.run(enter())

    def close(self, *closing: Callable[[], Awaitable[Any]]) -> None:
        async def done() -> None:
            await self.stack.aclose()
            for close in closing:
                await close()

        try:
            self.run(done())
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


@dataclass
class Api:
    """An app under test: its loop, a client on it, and the valid request of each route."""

    loop: Loop
    http: httpx2.AsyncClient
    calls: list[Call]
    odd_ids: list[str] = field(default_factory=lambda: ODD_IDS)

    def send(self, data: st.DataObject) -> httpx2.Response:
        """Send one route's request mutated as ``data`` draws it; return the answer."""
        call = data.draw(st.sampled_from(self.calls), label="route")
        odd = data.draw(st.sampled_from([None, None, *self.odd_ids]), label="id")
        path = call.path.replace("{id}", call.id if odd is None else odd)
        body = (
            data.draw(mutated(call.body, call.fix), label="body") if call.method == "POST" else b""
        )
        q = data.draw(query(call.takes), label="query")
        url = path + (f"?{q}" if q else "")
        headers = {"content-type": "application/json"}
        return self.loop.run(self.http.request(call.method, url, content=body, headers=headers))


# -- hatp serve's JSON API ------------------------------------------------------------------


@pytest.fixture
def api(serve: Any) -> Iterator[Api]:
    """The trip world behind hatp serve's app, with an approval ask, a question, a call ask
    (each decided at once) and a transaction to act on, and every route's valid request."""
    served: Served = serve(decision="approve")
    loop = Loop()
    http = loop.client(served.app, served.BASE)
    request = call_request(served.clock, payments_server(served.world).gate)
    ask = served.ask_body("trip-fuzz-1")
    plan = served.plan("trip-fuzz-2")

    async def made() -> list[str]:
        asked = await http.post("/gateway/asks", json=ask)
        questioned = await http.post("/gateway/questions", json={"question": served.question()})
        called = await http.post("/gateway/calls", json={"request": request})
        begun = await http.post("/coordinator/txns", json={"plan": plan})
        assert begun.status_code == 201, begun.text
        return [a.json()["answer"]["askId"] for a in (asked, questioned, called)]

    try:
        ask_id, question_id, call_id = loop.run(made())
        resolve = {
            "address": FINANCE_ADDRESS,
            "action": "approve.spend",
            "amounts": {"USD": "730.00"},
            "onBehalfOf": TRAVELLER,
            "deadlineSeconds": 600,
            "passkeyRequired": False,
        }
        txn = "/coordinator/txns/{id}"
        waits = ("waitSeconds",)
        yield Api(
            loop,
            http,
            [
                Call("POST", "/gateway/asks", ask, fix=with_digest),
                Call("GET", "/gateway/asks/{id}", id=ask_id, takes=waits),
                Call("POST", "/gateway/asks/{id}/withdraw", {"reason": "not needed"}, ask_id),
                Call("POST", "/gateway/asks/{id}/tighten", {"decideBy": ask["decideBy"]}, ask_id),
                Call(
                    "POST",
                    "/gateway/asks/{id}/votes",
                    {"vote": {"hatpVersion": "0.1", "askId": ask_id, "decision": "approve"}},
                    ask_id,
                ),
                Call("POST", "/gateway/estimate", ask, fix=with_digest),
                Call("POST", "/gateway/questions", {"question": served.question("q-fuzz-2")}),
                Call("GET", "/gateway/questions/{id}", id=question_id, takes=waits),
                Call("POST", "/gateway/calls", {"request": request}),
                Call("GET", "/gateway/calls/{id}", id=call_id, takes=waits),
                Call("POST", "/directory/resolve", resolve),
                Call("GET", "/directory/cards"),
                Call("GET", "/directory/cards/{id}", id="human://acme.com/bob"),
                Call("POST", "/coordinator/txns", {"plan": served.plan("trip-fuzz-3")}),
                Call("GET", txn, id="trip-fuzz-2"),
                Call("GET", txn + "/record", id="trip-fuzz-2"),
                Call("POST", txn + "/lock", {"owner": "ops/ann", "seconds": 60}, "trip-fuzz-2"),
                Call("POST", txn + "/undo", {"dryRun": True, "steps": ["calendar"]}, "trip-fuzz-2"),
                Call(
                    "POST",
                    txn + "/lock/renew",
                    {"owner": "ops/ann", "fence": 1, "seconds": 60},
                    "trip-fuzz-2",
                ),
                Call(
                    "POST", txn + "/lock/release", {"owner": "ops/ann", "fence": 1}, "trip-fuzz-2"
                ),
            ],
        )
    finally:
        loop.close(served.people.close)
    assert served.app.state.hatp_coordinator.failures == [], "a transaction begun crashed"


@SQLITE
@FUZZ
@given(data=st.data())
def test_no_request_to_the_json_api_is_answered_with_a_server_error(
    api: Api, data: st.DataObject
) -> None:
    """[HTTP-TYPED] [HTTP-PARAMS] [HTTP-NUMBERS] every route of the gateway, directory and
    coordinator, given its valid request mutated (members dropped, twice, retyped, huge
    numbers, impossible times, deep nesting, not an object, not UTF-8, odd ids and query
    members): never a 5xx, and every refusal the typed body."""
    answer = api.send(data)
    assert wrong_with(answer) is None, wrong_with(answer)


# -- a system of record's lease routes -------------------------------------------------------


@pytest.fixture
def lease_api(tickets: Any) -> Iterator[Api]:
    """The ticket system's lease routes (restore by hand as lee), with a lease granted."""
    loop = Loop()
    http = loop.client(tickets.app(authenticate=tickets.person), tickets.BASE, lifespan=False)
    http.headers["authorization"] = "Person lee"
    grant = {
        "resource": tickets.RESOURCE,
        "mutation": tickets.CLOSE,
        "tReqMs": 60_000,
        "mode": "SNAPSHOT_RESTORE",
    }

    async def granted() -> str:
        answer = await http.post("/leases", json=grant)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["leaseId"])

    try:
        lease = loop.run(granted())
        yield Api(
            loop,
            http,
            [
                Call("POST", "/leases", grant),
                Call("GET", "/leases/{id}", id=lease),
                Call("POST", "/leases/{id}/recover", {}, lease),
                Call("POST", "/leases/{id}/restore", {"state": tickets.TICKET}, lease),
            ],
            SEGMENT_IDS,
        )
    finally:
        loop.close()


@SQLITE
@FUZZ
@given(data=st.data())
def test_no_request_to_the_lease_routes_is_answered_with_a_server_error(
    lease_api: Api, data: st.DataObject
) -> None:
    """[HTTP-TYPED] [HTTP-LEASE-ROUTES] grant, read, recover and restore, given a valid
    request mutated as above: never a 5xx, and every refusal the typed body."""
    answer = lease_api.send(data)
    assert wrong_with(answer) is None, wrong_with(answer)
