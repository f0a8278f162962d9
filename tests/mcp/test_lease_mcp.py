"""Leased MCP tools: a system of record's mutations, each call under a compensation lease.

The demo's ticket system (``hatp.demo._tickets``) runs on the parametrized
store, so every test here runs on SQLite and on PostgreSQL. Its MCP server
has one ordinary tool of its own (``ticket_title``) and two leased ones made
by :func:`hatp.mcp.lease_tools`: ``update_ticket`` (``tickets.update``, the
resource from the template ``ticket/{/id}``) and ``clear_notes``
(``tickets.clear_notes``, the resource from a function). Clients run in
process; refusals arrive as JSON-RPC errors with our codes and the hatp
error as ``data``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, ToolBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from hatp.clock import ManualClock
from hatp.demo._tickets import ISSUER, open_tickets, ticket_system
from hatp.errors import (
    EvidenceInvalid,
    LeaseRefused,
    PeerIncompatible,
)
from hatp.evidence import Keyring, SigningKey, canonicalize, digest
from hatp.lease import LeaseCommit, LeaseRejection, RecoveryMode, SystemOfRecord, verify_receipt
from hatp.mcp import (
    COMMIT_RECEIPT_META_KEY,
    FENCE_TOKEN_META_KEY,
    JSONRPC_CODES,
    LEASE_EXTENSION_ID,
    LEASE_META_KEY,
    LeaseAdvert,
    LeasedTool,
    call_leased,
    lease_tools,
)
from hatp.store import LeaseBook, LeaseStatus, Store

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

KEY = SigningKey.from_seed(bytes([61]) * 32, "tickets-1")
STRANGER = SigningKey.from_seed(bytes([62]) * 32, "tickets-1")
RESOURCE = "ticket/4711"
TICKET: dict[str, Any] = {
    "id": 4711,
    "title": "Refund for order 1234",
    "status": "open",
    "assignee": "dana",
    "notes": "called twice",
}
CLOSE_ARGS: dict[str, Any] = {"id": 4711, "status": "closed"}
CLOSE: dict[str, Any] = {"action": "tickets.update", "params": CLOSE_ARGS}
REASSIGN_ARGS: dict[str, Any] = {"id": 4711, "assignee": "erin"}
REASSIGN: dict[str, Any] = {"action": "tickets.update", "params": REASSIGN_ARGS}
UPDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "status": {"enum": ["open", "pending", "closed"]},
        "assignee": {"type": ["string", "null"]},
    },
    "required": ["id"],
    "additionalProperties": False,
}
TOOLS = [
    LeasedTool(
        "update_ticket",
        "tickets.update",
        "ticket/{/id}",
        description="Set a ticket's status or assignee, under a compensation lease.",
        input_schema=UPDATE_SCHEMA,
    ),
    LeasedTool("clear_notes", "tickets.clear_notes", lambda args: f"ticket/{args['id']}"),
]


def public_keyring() -> Keyring:
    """What the agent trusts: the ticket system's public key, nothing from the server."""
    return Keyring([(KEY.public, ISSUER)], trusted_issuers=[ISSUER])


@dataclass
class Tickets:
    """The ticket system, its MCP server, and what it keeps."""

    store: Store
    sor: SystemOfRecord
    server: MCPServer

    def grant(self, mutation: dict[str, Any] = CLOSE, **options: Any) -> dict[str, Any]:
        mode = options.pop("mode", RecoveryMode.COMPENSATING_ACTION)
        return self.sor.grant(RESOURCE, mutation, t_req_ms=300_000, mode=mode, **options)

    def state(self) -> tuple[dict[str, Any], int]:
        return self.sor.state(RESOURCE)

    def leases(self) -> dict[str, LeaseStatus]:
        return {row.lease_id: row.status for row in LeaseBook(self.store).leases(RESOURCE)}


def ticket_server(sor: SystemOfRecord, tools: Sequence[LeasedTool] = TOOLS) -> MCPServer:
    """The ticket system's ordinary MCP server, with its leased tools added."""
    server = MCPServer("tickets")

    @server.tool()
    def ticket_title(id: int) -> str:
        """The title of a ticket."""
        return f"{id}: {TICKET['title']}"

    lease_tools(server, sor, tools)
    return server


@pytest.fixture
def tickets(store: Store, clock: ManualClock) -> Tickets:
    sor = ticket_system(store, KEY, clock)
    open_tickets(store, [TICKET])
    return Tickets(store, sor, ticket_server(sor))


def run(server: MCPServer, go: Callable[[Client], Awaitable[T]]) -> T:
    """Run ``go`` with an in-process plain MCP client of ``server``."""

    async def main() -> T:
        async with Client(server) as client:
            return await go(client)

    return asyncio.run(main())


def raised(server: MCPServer, error: type[E], go: Callable[[Client], Awaitable[Any]]) -> E:
    """The ``error`` that ``go`` raises with an in-process plain MCP client of ``server``."""

    async def main() -> E:
        async with Client(server) as client:
            with pytest.raises(error) as caught:
                await go(client)
            return caught.value

    return asyncio.run(main())


def refused(error: MCPError) -> tuple[int, str, str | None, str | None]:
    """A JSON-RPC refusal as (code, hatp code, reason, rule)."""
    data: dict[str, Any] = error.data
    return error.code, data["code"], data["data"].get("reason"), data["data"].get("rule")


def rejection(receipt: dict[str, Any]) -> LeaseRejection:
    """The receipt verified offline, with the public key alone."""
    checked = verify_receipt(receipt, public_keyring())
    assert isinstance(checked, LeaseRejection)
    return checked


def test_the_server_advertises_its_leased_tools_and_lists_them(tickets: Tickets) -> None:
    """[MCP-LEASE] the advert names the issuer, each tool's action and resource template."""

    async def go(client: Client) -> tuple[Any, list[types.Tool]]:
        return client.server_capabilities.extensions, (await client.list_tools()).tools

    extensions, listed = run(tickets.server, go)
    advert = LeaseAdvert.model_validate(extensions[LEASE_EXTENSION_ID])
    assert advert.issuer == ISSUER
    assert advert.tools["update_ticket"].action == "tickets.update"
    assert advert.tools["update_ticket"].resource == "ticket/{/id}"
    assert advert.tools["clear_notes"].action == "tickets.clear_notes"
    assert advert.tools["clear_notes"].resource is None  # a function picks it
    shown = {tool.name: tool for tool in listed}
    assert sorted(shown) == ["clear_notes", "ticket_title", "update_ticket"]
    assert shown["update_ticket"].input_schema == UPDATE_SCHEMA
    assert shown["update_ticket"].annotations is not None
    assert shown["update_ticket"].annotations.idempotent_hint is True


def test_a_leased_call_applies_and_its_receipt_verifies_offline(tickets: Tickets) -> None:
    """[MCP-LEASE] the mutation runs under the lease; the result's _meta carries the
    signed lease-commit receipt, which verifies with the public key alone."""
    lease = tickets.grant()

    done = run(
        tickets.server,
        lambda c: call_leased(c, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring()),
    )

    state, epoch = tickets.state()
    assert state["status"] == "closed"
    assert epoch == lease["casFenceEpoch"] == done.receipt.epoch
    assert done.signed == (done.result.meta or {})[COMMIT_RECEIPT_META_KEY]
    offline = verify_receipt(done.signed, public_keyring())
    assert isinstance(offline, LeaseCommit)
    assert offline == done.receipt
    assert (offline.lease_id, offline.lease_digest) == (lease["leaseId"], digest(lease))
    assert offline.resource == RESOURCE
    assert offline.mutation_digest == digest(CLOSE) == lease["mutationDigest"]
    assert offline.post_image_state_hash == digest(state)
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.APPLIED}
    text = done.result.content[0]
    assert isinstance(text, types.TextContent)
    assert lease["leaseId"] in text.text and "epoch 1" in text.text


@pytest.mark.parametrize("meta", [None, {LEASE_META_KEY: None}], ids=["absent", "null"])
def test_a_call_without_a_lease_is_refused_saying_what_to_lease(
    tickets: Tickets, meta: dict[str, Any] | None
) -> None:
    """[MCP-LEASE] -31054 LEASE_REQUIRED; data names the resource and the exact mutation,
    which is what the system of record grants a lease for; nothing was written."""
    before = tickets.state()

    async def go(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raw:
            await client.call_tool("update_ticket", CLOSE_ARGS, meta=meta)
        return raw.value

    error = run(tickets.server, go)
    assert error.code == JSONRPC_CODES["LEASE_REQUIRED"] == -31054
    assert error.data["code"] == "LEASE_REQUIRED"
    needed = error.data["data"]
    assert needed["resource"] == RESOURCE
    assert needed["mutation"] == CLOSE
    assert needed["issuer"] == ISSUER
    assert tickets.state() == before
    assert tickets.leases() == {}
    # What it says to lease is what the tool then applies.
    lease = tickets.sor.grant(
        needed["resource"], needed["mutation"], t_req_ms=60_000, mode=RecoveryMode.SNAPSHOT_RESTORE
    )
    done = run(
        tickets.server,
        lambda c: call_leased(c, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring()),
    )
    assert done.receipt.lease_id == lease["leaseId"]


def test_a_second_lease_fenced_at_the_same_epoch_is_refused_as_stale(tickets: Tickets) -> None:
    """[MCP-LEASE] [LEASE-FENCE] -31053 LEASE_REFUSED, reason MONOTONIC_CAS_FENCING, with a
    signed rejection receipt that verifies offline; the first writer's change stands."""
    first, second = tickets.grant(CLOSE), tickets.grant(REASSIGN)

    async def go(client: Client) -> tuple[MCPError, LeaseRefused]:
        await call_leased(client, "update_ticket", CLOSE_ARGS, first, keyring=public_keyring())
        with pytest.raises(MCPError) as raw:
            await client.call_tool("update_ticket", REASSIGN_ARGS, meta={LEASE_META_KEY: second})
        with pytest.raises(LeaseRefused) as typed:
            await call_leased(
                client, "update_ticket", REASSIGN_ARGS, second, keyring=public_keyring()
            )
        return raw.value, typed.value

    raw, typed = run(tickets.server, go)
    assert refused(raw) == (-31053, "LEASE_REFUSED", "MONOTONIC_CAS_FENCING", "LEASE-FENCE")
    assert JSONRPC_CODES["LEASE_REFUSED"] == -31053
    assert typed.reason == "MONOTONIC_CAS_FENCING"
    receipt = rejection(typed.data["receipt"])
    assert (receipt.rule, receipt.lease_id, receipt.resource) == (
        "LEASE-FENCE",
        second["leaseId"],
        RESOURCE,
    )
    assert receipt.lease_digest == digest(second)
    state, epoch = tickets.state()
    assert (state["status"], state["assignee"], epoch) == ("closed", "dana", 1)
    assert tickets.sor.rejections(RESOURCE)[-1] == typed.data["receipt"]
    assert tickets.leases()[second["leaseId"]] is LeaseStatus.GRANTED


def test_a_tampered_lease_is_refused_by_its_signature(tickets: Tickets) -> None:
    """[MCP-LEASE] [LEASE-SIGNED] a lease changed after signing is refused SIGNATURE."""
    lease = tickets.grant()
    tampered = {**lease, "tReqMs": 1_000}
    before = tickets.state()

    async def go(client: Client) -> LeaseRefused:
        with pytest.raises(LeaseRefused) as typed:
            await call_leased(
                client, "update_ticket", CLOSE_ARGS, tampered, keyring=public_keyring()
            )
        return typed.value

    error = run(tickets.server, go)
    assert (error.reason, error.data["rule"]) == ("SIGNATURE", "LEASE-SIGNED")
    assert rejection(error.data["receipt"]).lease_digest == digest(tampered)
    assert tickets.state() == before
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.GRANTED}


def test_a_retried_call_gets_the_same_receipt_and_writes_nothing_again(tickets: Tickets) -> None:
    """[MCP-LEASE] a call is idempotent: the same lease and arguments again are answered
    with the stored receipt, and the resource does not move."""
    lease = tickets.grant()

    async def go(client: Client) -> tuple[Any, Any, tuple[dict[str, Any], int]]:
        first = await call_leased(
            client, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring()
        )
        after_first = tickets.state()
        again = await call_leased(
            client, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring()
        )
        return first, again, after_first

    first, again, after_first = run(tickets.server, go)
    assert again.signed == first.signed
    assert tickets.state() == after_first
    assert after_first[1] == lease["casFenceEpoch"]
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.APPLIED}
    assert tickets.sor.rejections() == []
    text = again.result.content[0]
    assert isinstance(text, types.TextContent) and "a retry" in text.text


def test_a_lease_used_with_other_arguments_is_refused_as_another_mutation(
    tickets: Tickets,
) -> None:
    """[MCP-LEASE] [LEASE-DIGEST] the mutation is exactly {action, params: the arguments}:
    a lease to close the ticket does not set it pending."""
    lease = tickets.grant(CLOSE)
    pending = {"id": 4711, "status": "pending"}

    async def go(client: Client) -> LeaseRefused:
        with pytest.raises(LeaseRefused) as typed:
            await call_leased(client, "update_ticket", pending, lease, keyring=public_keyring())
        return typed.value

    error = run(tickets.server, go)
    assert (error.reason, error.data["rule"]) == ("DIGEST_MISMATCH", "LEASE-DIGEST")
    assert tickets.state()[0]["status"] == "open"


@pytest.mark.parametrize(
    "junk",
    [
        "a lease, trust me",
        [1, 2],
        42,
        "base64url",  # replaced by the lease's own base64url canonical form below
    ],
    ids=["text", "array", "number", "base64url-form"],
)
def test_a_lease_that_is_not_a_json_object_is_refused_by_shape_with_a_receipt(
    tickets: Tickets, junk: Any
) -> None:
    """[MCP-LEASE-META] [LEASE-SHAPE] whatever sits in _meta.compensationLease is checked,
    never trusted: over MCP a lease is the JSON object itself, nothing else."""
    lease = tickets.grant()
    if junk == "base64url":
        junk = base64.urlsafe_b64encode(canonicalize(lease)).rstrip(b"=").decode()
    before = tickets.state()

    async def go(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raw:
            await client.call_tool("update_ticket", CLOSE_ARGS, meta={LEASE_META_KEY: junk})
        return raw.value

    error = run(tickets.server, go)
    assert refused(error) == (-31053, "LEASE_REFUSED", "SHAPE", "LEASE-SHAPE")
    receipt = rejection(error.data["data"]["receipt"])
    assert receipt.lease_id is None
    assert receipt.lease_digest == digest(junk)
    assert receipt.resource == RESOURCE
    assert tickets.state() == before
    assert tickets.sor.rejections(RESOURCE) == [error.data["data"]["receipt"]]


def test_the_fence_token_in_meta_must_be_the_leases_fence(tickets: Tickets) -> None:
    """[MCP-LEASE-META] [LEASE-FENCE] _meta.agentFenceToken is checked as HTTP's
    Agent-Fence-Token: another epoch is refused, the lease's own applies."""
    lease = tickets.grant()
    fence = lease["casFenceEpoch"]

    async def go(client: Client) -> tuple[LeaseRefused, LeaseCommit]:
        with pytest.raises(LeaseRefused) as stale:
            await call_leased(
                client,
                "update_ticket",
                CLOSE_ARGS,
                lease,
                keyring=public_keyring(),
                fence_token=fence + 1,
            )
        done = await call_leased(
            client, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring(), fence_token=fence
        )
        return stale.value, done.receipt

    stale, receipt = run(tickets.server, go)
    assert (stale.reason, stale.data["rule"]) == ("MONOTONIC_CAS_FENCING", "LEASE-FENCE")
    assert receipt.epoch == fence


@pytest.mark.parametrize("token", ["1", -1, True, 1.5])
def test_a_fence_token_that_is_not_an_epoch_is_refused_before_anything_runs(
    tickets: Tickets, token: Any
) -> None:
    """[MCP-LEASE-META] agentFenceToken is an integer >= 0: PEER_INCOMPATIBLE METHOD."""
    lease = tickets.grant()
    meta = {LEASE_META_KEY: lease, FENCE_TOKEN_META_KEY: token}

    async def go(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raw:
            await client.call_tool("update_ticket", CLOSE_ARGS, meta=meta)
        return raw.value

    error = run(tickets.server, go)
    assert error.code == -31000
    assert error.data["code"] == "PEER_INCOMPATIBLE"
    assert error.data["data"]["reason"] == "METHOD"
    assert error.data["data"]["where"] == f"/_meta/{FENCE_TOKEN_META_KEY}"
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.GRANTED}
    assert tickets.state()[1] == 0


@pytest.mark.parametrize(
    ("tool", "arguments", "where"),
    [
        ("update_ticket", {"status": "closed"}, "/id"),
        ("update_ticket", {"id": {"no": "id"}, "status": "closed"}, "/id"),
        ("clear_notes", {}, None),
    ],
    ids=["template-no-id", "template-not-an-id", "function-no-id"],
)
def test_arguments_that_name_no_resource_are_refused_as_an_invalid_mutation(
    tickets: Tickets, tool: str, arguments: dict[str, Any], where: str | None
) -> None:
    """[MCP-LEASE] the resource comes from the arguments; none there: MUTATION_INVALID."""
    lease = tickets.grant()

    async def go(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raw:
            await client.call_tool(tool, arguments, meta={LEASE_META_KEY: lease})
        return raw.value

    error = run(tickets.server, go)
    assert (error.code, error.data["code"]) == (-31000, "MUTATION_INVALID")
    assert error.data["data"].get("where") == where
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.GRANTED}


def test_a_plain_mcp_client_still_calls_the_servers_own_tools(tickets: Tickets) -> None:
    """[MCP-LEASE] tools that are not leased pass through untouched, no lease, no hatp."""
    result = run(tickets.server, lambda c: c.call_tool("ticket_title", {"id": 4711}))
    assert not result.is_error
    assert result.structured_content == {"result": "4711: Refund for order 1234"}


def test_call_leased_sends_no_lease_to_a_tool_that_is_not_leased(tickets: Tickets) -> None:
    """[MCP-LEASE-RECEIPT] the client checks the advert first: a lease would not guard
    ``ticket_title``, and no receipt would come back; nothing was sent."""
    lease = tickets.grant()

    def title(c: Client) -> Awaitable[Any]:
        return call_leased(c, "ticket_title", {"id": 4711}, lease, keyring=public_keyring())

    def update(c: Client) -> Awaitable[Any]:
        return call_leased(c, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring())

    assert raised(tickets.server, PeerIncompatible, title).reason == "METHOD"
    assert raised(MCPServer("bare"), PeerIncompatible, update).reason == "NO_EXTENSION"
    assert tickets.leases() == {lease["leaseId"]: LeaseStatus.GRANTED}


def test_a_receipt_the_callers_keyring_does_not_trust_is_refused_and_a_retry_recovers(
    tickets: Tickets,
) -> None:
    """[MCP-LEASE-RECEIPT] trust is the caller's: a receipt that does not verify against
    its keyring is EVIDENCE_INVALID SIGNATURE, not proof; the mutation may have applied,
    and the same call again returns the stored receipt."""
    lease = tickets.grant()
    strangers = Keyring([(STRANGER.public, ISSUER)], trusted_issuers=[ISSUER])

    async def go(client: Client) -> tuple[EvidenceInvalid, LeaseCommit]:
        with pytest.raises(EvidenceInvalid) as caught:
            await call_leased(client, "update_ticket", CLOSE_ARGS, lease, keyring=strangers)
        again = await call_leased(
            client, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring()
        )
        return caught.value, again.receipt

    error, receipt = run(tickets.server, go)
    assert (error.reason, error.data["what"]) == ("SIGNATURE", "commit receipt")
    assert receipt.lease_id == lease["leaseId"]
    assert tickets.state()[1] == lease["casFenceEpoch"]


class _Liar(Extension):
    """A server claiming to lease ``update_ticket`` that answers with ``meta``."""

    identifier = LEASE_EXTENSION_ID

    def __init__(self, meta: dict[str, Any] | None) -> None:
        self._meta = meta

    def settings(self) -> dict[str, Any]:
        return {
            "issuer": ISSUER,
            "tools": {"update_ticket": {"action": "tickets.update", "resource": None}},
        }

    def tools(self) -> Sequence[ToolBinding]:
        def update_ticket(id: int, status: str) -> str:
            return "done"

        return [ToolBinding(update_ticket, kwargs={"structured_output": False})]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        text = types.TextContent(type="text", text="done")
        return types.CallToolResult(content=[text], _meta=self._meta)


@pytest.mark.parametrize("answer", ["missing", "another-lease", "a-rejection"])
def test_a_result_without_a_commit_receipt_of_this_lease_is_refused(
    tickets: Tickets, answer: str
) -> None:
    """[MCP-LEASE-RECEIPT] no receipt is MISSING; a rejection receipt is SHAPE; a genuine
    receipt of another lease is MISMATCH: none of them proves this mutation applied."""
    other = tickets.grant(REASSIGN)
    lease = tickets.grant(CLOSE)
    applied = tickets.sor.apply(other, resource=RESOURCE, mutation=REASSIGN).receipt
    with pytest.raises(LeaseRefused) as stale:
        tickets.sor.apply(lease, resource=RESOURCE, mutation=CLOSE)
    meta = {
        "missing": None,
        "another-lease": {COMMIT_RECEIPT_META_KEY: applied},
        "a-rejection": {COMMIT_RECEIPT_META_KEY: stale.value.data["receipt"]},
    }[answer]
    liar = MCPServer("liar", extensions=[_Liar(meta)])

    def update(c: Client) -> Awaitable[Any]:
        return call_leased(c, "update_ticket", CLOSE_ARGS, lease, keyring=public_keyring())

    error = raised(liar, EvidenceInvalid, update)
    expected = {"missing": "MISSING", "another-lease": "MISMATCH", "a-rejection": "SHAPE"}
    assert error.reason == expected[answer]


def test_leased_tools_are_refused_at_start_up_when_they_cannot_be_served(
    tickets: Tickets,
) -> None:
    """Set-up errors are refused at start-up, not at the first call."""
    with pytest.raises(ValueError, match="already registered"):
        lease_tools(
            tickets.server, tickets.sor, [LeasedTool("other", "tickets.update", "ticket/{/id}")]
        )
    clash = MCPServer("clash")
    clash.add_tool(lambda id: id, name="update_ticket")
    with pytest.raises(ValueError, match="tools named"):
        lease_tools(clash, tickets.sor, TOOLS)
    with pytest.raises(ValueError, match="share a name"):
        lease_tools(MCPServer("y"), tickets.sor, [TOOLS[0], TOOLS[0]])
    with pytest.raises(ValueError, match=r"offers no action \['tickets.delete'\]"):
        lease_tools(
            MCPServer("z"), tickets.sor, [LeasedTool("drop", "tickets.delete", "ticket/{/id}")]
        )
    with pytest.raises(ValueError, match="not a JSON Pointer"):
        LeasedTool("t", "tickets.update", "ticket/{id}")
    with pytest.raises(ValueError, match="of an object"):
        LeasedTool("t", "tickets.update", "ticket/{/id}", input_schema={"type": "string"})
