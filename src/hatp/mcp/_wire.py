"""What hatp puts on an MCP wire: the extension's id, method names, ``_meta`` keys, errors.

Every hatp method is a vendor-namespaced JSON-RPC request under our extension
id ``dev.hatp/hatp`` (docs/spec.md §21). A refusal travels as a JSON-RPC error
whose ``data`` is the hatp error's wire form ``{code, message, data}`` (§9),
so the other side rebuilds the same typed error. The codes sit outside
JSON-RPC's reserved -32768...-32000 block, which MCP itself draws on.
"""

from __future__ import annotations

from typing import Any, Final

from mcp.shared.exceptions import MCPError

from hatp._edge_params import MAX_WAIT_SECONDS
from hatp.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    CallInvalid,
    HatpError,
    LeaseRefused,
    LeaseRequired,
    error_from_dict,
)

__all__ = [
    "APPROVAL_META_KEY",
    "CALL_APPROVAL_TOOL",
    "COMMIT_RECEIPT_META_KEY",
    "EXTENSION_ID",
    "FENCE_TOKEN_META_KEY",
    "GATE_EXTENSION_ID",
    "JSONRPC_CODES",
    "LEASE_EXTENSION_ID",
    "LEASE_META_KEY",
    "MAX_WAIT_SECONDS",
    "METHODS",
    "PENDING_META_KEY",
    "REFUSAL_CODE",
    "hatp_error",
    "mcp_error",
]

#: The extension's reverse-DNS identifier, advertised under ``capabilities.extensions``.
EXTENSION_ID: Final = "dev.hatp/hatp"
#: The gate extension's identifier: a server whose tools need approvals (``gate_tools``).
GATE_EXTENSION_ID: Final = "dev.hatp/gate"
#: Where a gated call carries its CallApproval: ``params._meta[APPROVAL_META_KEY]``.
APPROVAL_META_KEY: Final = "dev.hatp/approval"
#: The lease extension's identifier: a server whose tools mutate under compensation leases.
LEASE_EXTENSION_ID: Final = "dev.hatp/lease"
#: Where a leased call carries its CompensationLease (the PTCL draft's name, unprefixed).
LEASE_META_KEY: Final = "compensationLease"
#: Where a leased call may carry its fence token (HTTP ``Agent-Fence-Token``).
FENCE_TOKEN_META_KEY: Final = "agentFenceToken"
#: Where a leased tool's result carries the signed ``lease-commit`` receipt.
COMMIT_RECEIPT_META_KEY: Final = "commitReceipt"
#: The gateway tool a plain agent calls to have one tool call approved.
CALL_APPROVAL_TOOL: Final = "request_call_approval"
#: Where an ``input_required`` round of :data:`CALL_APPROVAL_TOOL` shows the signed pending vote.
PENDING_META_KEY: Final = "dev.hatp/pending"

#: Every hatp JSON-RPC method, by its short name.
METHODS: Final[dict[str, str]] = {
    name: f"dev.hatp/{name}"
    for name in (
        # a participant (serve_hatp)
        "txn/prepare",
        "txn/quote",
        "txn/replace",
        "txn/commit",
        "txn/abort",
        "txn/compensate",
        "txn/renew",
        "txn/status",
        # the Human Gateway (serve_gateway)
        "txn/ask",
        "txn/voted",
        "txn/withdraw",
        "txn/withdrawAll",
        "txn/estimate",
        "txn/tighten",
        "ask/question",
        "ask/call",
        "ask/answered",
        # the Directory (served by serve_gateway when it is given one)
        "directory/resolve",
        # a coordinator (serve_coordinator)
        "txn/begin",
        "txn/undo",
        "txn/state",
        "txn/record",
        "lock/acquire",
        "lock/renew",
        "lock/release",
    )
}

#: Any hatp refusal not listed in :data:`JSONRPC_CODES`.
REFUSAL_CODE: Final = -31000
#: JSON-RPC error codes of the refusals a plain MCP client most needs to tell apart.
JSONRPC_CODES: Final[dict[str, int]] = {
    ApprovalRequired.code: -31050,
    ApprovalInvalid.code: -31051,
    CallInvalid.code: -31052,
    LeaseRefused.code: -31053,
    LeaseRequired.code: -31054,
}
_HATP_CODES = frozenset({REFUSAL_CODE, *JSONRPC_CODES.values()})


def mcp_error(error: HatpError) -> MCPError:
    """The JSON-RPC error a server raises for a hatp refusal: our code, the
    hatp message, and ``data`` the hatp error's wire form."""
    return MCPError(JSONRPC_CODES.get(error.code, REFUSAL_CODE), error.message, error.to_dict())


def hatp_error(error: MCPError) -> HatpError | None:
    """The typed hatp error a JSON-RPC error carries, or ``None`` when it is not
    one of ours (a transport failure, a timeout, an MCP-level refusal)."""
    data: Any = error.data
    if error.code not in _HATP_CODES or not isinstance(data, dict):
        return None
    if not isinstance(data.get("code"), str) or not isinstance(data.get("data", {}), dict):
        return None
    return error_from_dict(data)
