"""hatp over MCP, on the official ``mcp`` SDK (docs/spec.md §21).

An edge: it carries requests and renders refusals; every protocol rule stays
in the role it carries. On the server side one call adds hatp to an MCP
server its author already built, and the server's own tools keep working:

- :func:`serve_hatp`: the server is a participant (``dev.hatp/txn/*``);
- :func:`gate_tools`: chosen tools run only with an approval of the exact
  call (the tool as the server lists it), passed in
  ``_meta["dev.hatp/approval"]`` by a client that speaks hatp, or, for a stock
  client that cannot, asked of the Human Gateway by the server itself and
  used when the same call comes again (:func:`gated_tool` registers and
  gates a tool in one decorator); :func:`gated_tool`
  registers one more such tool with a decorator;
- :func:`lease_tools`: a system of record's mutations as tools, each call
  under the compensation lease it carries in ``_meta["compensationLease"]``;
- :func:`serve_gateway`: the Human Gateway, and its Directory's cards;
- :func:`serve_coordinator`: agents begin transactions and follow them.

On the client side :func:`mcp_participant`, :func:`mcp_gateway`,
:func:`mcp_directory` and :func:`mcp_coordinator` check what a server
advertises and return objects a coordinator or an agent uses exactly as the
in-process ones; :func:`call_gated` and :func:`await_call_approval` are an
agent's side of a gated call, :func:`call_leased` of a leased one. A hatp
client declares the extension: ``Client(server, extensions=[mcp.client.advertise(EXTENSION_ID)])``.
Every ``dev.hatp/*`` advert is also under ``capabilities.experimental``, which
sessions on 2025 protocol versions see, and a stock client reads a branch's or
a transaction's status and a transaction's record through plain tools.
"""

from hatp.mcp._advert import HatpAdvert, OperationAdvert, Role, check_advert
from hatp.mcp._coordinator_client import McpCoordinator, mcp_coordinator
from hatp.mcp._coordinator_server import CoordinatorExtension, serve_coordinator
from hatp.mcp._gate import (
    CallAsker,
    GateAdvert,
    GatedToolAdvert,
    GateExtension,
    RequesterOf,
    call_gated,
    gate_of,
    gate_tools,
    listed_definition,
)
from hatp.mcp._gated_tool import gated_tool
from hatp.mcp._gateway_client import (
    McpDirectory,
    McpGateway,
    await_call_approval,
    mcp_directory,
    mcp_gateway,
)
from hatp.mcp._gateway_server import GatewayExtension, serve_gateway
from hatp.mcp._lease import (
    LeaseAdvert,
    LeasedResult,
    LeasedTool,
    LeasedToolAdvert,
    ResourceOf,
    call_leased,
    lease_tools,
)
from hatp.mcp._link import McpLink
from hatp.mcp._participant_client import McpParticipant, mcp_participant
from hatp.mcp._participant_server import ParticipantExtension, serve_hatp
from hatp.mcp._wire import (
    APPROVAL_META_KEY,
    CALL_APPROVAL_TOOL,
    COMMIT_RECEIPT_META_KEY,
    EXTENSION_ID,
    FENCE_TOKEN_META_KEY,
    GATE_EXTENSION_ID,
    JSONRPC_CODES,
    LEASE_EXTENSION_ID,
    LEASE_META_KEY,
    MAX_WAIT_SECONDS,
    METHODS,
    PENDING_META_KEY,
    REFUSAL_CODE,
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
    "CallAsker",
    "CoordinatorExtension",
    "GateAdvert",
    "GateExtension",
    "GatedToolAdvert",
    "GatewayExtension",
    "HatpAdvert",
    "LeaseAdvert",
    "LeasedResult",
    "LeasedTool",
    "LeasedToolAdvert",
    "McpCoordinator",
    "McpDirectory",
    "McpGateway",
    "McpLink",
    "McpParticipant",
    "OperationAdvert",
    "ParticipantExtension",
    "RequesterOf",
    "ResourceOf",
    "Role",
    "await_call_approval",
    "call_gated",
    "call_leased",
    "check_advert",
    "gate_of",
    "gate_tools",
    "gated_tool",
    "lease_tools",
    "listed_definition",
    "mcp_coordinator",
    "mcp_directory",
    "mcp_gateway",
    "mcp_participant",
    "serve_coordinator",
    "serve_gateway",
    "serve_hatp",
]
