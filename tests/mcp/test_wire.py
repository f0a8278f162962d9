"""The MCP wire: refusals cross as JSON-RPC errors and come back as the same typed error."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from mcp import Client
from mcp.client import advertise
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, METHOD_NOT_FOUND, REQUEST_TIMEOUT
from pydantic import StrictInt

from hatp.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    CallInvalid,
    HatpError,
    ParticipantUnavailable,
    PeerIncompatible,
    PlanInvalid,
    SignatureInvalid,
    StaleFence,
    _all_subclasses,
)
from hatp.mcp import EXTENSION_ID, JSONRPC_CODES, REFUSAL_CODE
from hatp.mcp._rpc import HatpParams, method, request
from hatp.mcp._wire import hatp_error, mcp_error


def _sample(cls: type[HatpError]) -> HatpError:
    if cls is SignatureInvalid:
        return SignatureInvalid("KID_UNKNOWN", "no such key", kid="k-1")
    if cls is PlanInvalid:
        return PlanInvalid("SHAPE", "not a plan", where="/branches")
    return cls(f"{cls.code} happened", detail={"n": 1}, where="/x")


@pytest.mark.parametrize("cls", _all_subclasses(HatpError), ids=lambda c: c.code)
def test_every_refusal_crosses_as_itself(cls: type[HatpError]) -> None:
    """[MCP-ERRORS] every hatp error, out as a JSON-RPC error and back as itself."""
    sent = _sample(cls)
    wire = mcp_error(sent)
    assert wire.code == JSONRPC_CODES.get(sent.code, REFUSAL_CODE)
    assert not -32768 <= wire.code <= -32000, "our codes stay out of JSON-RPC's reserved block"
    assert wire.message == sent.message
    back = hatp_error(MCPError(wire.code, wire.message, wire.data))
    assert type(back) is cls
    assert back is not None and back.to_dict() == sent.to_dict()


def test_the_gate_refusals_have_codes_of_their_own() -> None:
    codes = {c: JSONRPC_CODES[c.code] for c in (ApprovalRequired, ApprovalInvalid, CallInvalid)}
    assert codes[ApprovalRequired] == -31050
    assert len(set(codes.values()) | {REFUSAL_CODE}) == 4


@pytest.mark.parametrize(
    "error",
    [
        MCPError(REQUEST_TIMEOUT, "timed out"),
        MCPError(INTERNAL_ERROR, "boom", {"code": "STALE_FENCE"}),
        MCPError(REFUSAL_CODE, "no data"),
        MCPError(REFUSAL_CODE, "data not ours", ["STALE_FENCE"]),
        MCPError(REFUSAL_CODE, "code not a string", {"code": 7}),
        MCPError(REFUSAL_CODE, "data not an object", {"code": "STALE_FENCE", "data": [1]}),
    ],
    ids=["timeout", "foreign-code", "no-data", "list-data", "int-code", "list-inner"],
)
def test_an_error_that_is_not_ours_is_not_read_as_a_refusal(error: MCPError) -> None:
    assert hatp_error(error) is None


class _Params(HatpParams):
    branch_id: str
    fence: StrictInt


async def _echo(params: _Params, ctx: object) -> Mapping[str, Any]:
    if params.fence < 1:
        raise StaleFence("a newer coordinator owns this branch", fence=params.fence, current=2)
    return {"branchId": params.branch_id}


async def _crash(params: _Params, ctx: object) -> Mapping[str, Any]:
    raise RuntimeError("a bug in the handler")


async def _slow(params: _Params, ctx: object) -> Mapping[str, Any]:
    await asyncio.sleep(30)
    return {}


class _Echo(Extension):
    identifier = EXTENSION_ID

    def methods(self) -> list[Any]:
        return [
            method("dev.hatp/test/echo", _Params, _echo),
            method("dev.hatp/test/crash", _Params, _crash),
            method("dev.hatp/test/slow", _Params, _slow),
        ]


def _ask(name: str, params: Mapping[str, Any], timeout: float | None = None) -> Any:
    # Raised inside the client's block: an error leaving it would come out of the
    # SDK's task group wrapped in an ExceptionGroup.
    async def go() -> Any:
        server = MCPServer("echo", extensions=[_Echo()])
        async with Client(server, extensions=[advertise(EXTENSION_ID)]) as client:
            try:
                return await request(client, name, params, server="echo", timeout=timeout)
            except HatpError as exc:
                return exc

    answer = asyncio.run(go())
    if isinstance(answer, HatpError):
        raise answer
    return answer


def test_a_result_comes_back_without_the_sdk_s_members() -> None:
    assert _ask("dev.hatp/test/echo", {"branchId": "seat", "fence": 1}) == {"branchId": "seat"}


def test_a_refusal_comes_back_typed() -> None:
    with pytest.raises(StaleFence) as caught:
        _ask("dev.hatp/test/echo", {"branchId": "seat", "fence": 0})
    assert caught.value.data == {"fence": 0, "current": 2}


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"branchId": "seat", "fence": "1"}, "/fence"),
        ({"branchId": "seat"}, "/fence"),
        ({"branchId": "seat", "fence": 1, "extra": True}, "/extra"),
    ],
    ids=["string-fence", "missing", "unknown-member"],
)
def test_params_that_do_not_fit_are_refused_naming_the_member(
    params: dict[str, Any], where: str
) -> None:
    with pytest.raises(PeerIncompatible) as caught:
        _ask("dev.hatp/test/echo", params)
    assert caught.value.reason == "METHOD"
    assert caught.value.data["where"] == where


def test_a_method_the_server_does_not_serve_is_refused() -> None:
    with pytest.raises(PeerIncompatible) as caught:
        _ask("dev.hatp/test/missing", {})
    assert caught.value.reason == "METHOD"
    assert caught.value.data["method"] == "dev.hatp/test/missing"


def test_a_crash_in_the_handler_is_no_answer_not_a_refusal() -> None:
    with pytest.raises(ParticipantUnavailable):
        _ask("dev.hatp/test/crash", {"branchId": "seat", "fence": 1})


def test_a_timeout_is_no_answer() -> None:
    with pytest.raises(ParticipantUnavailable) as caught:
        _ask("dev.hatp/test/slow", {"branchId": "seat", "fence": 1}, timeout=0.05)
    assert "no answer" in caught.value.message


def test_method_not_found_is_the_sdk_s_own_code() -> None:
    # The client reads METHOD_NOT_FOUND as "does not serve": keep the constant honest.
    assert METHOD_NOT_FOUND == -32601
