"""The approval gate: a tool server runs a risky tool only with an approval for the exact call.

A server declares its :class:`GatedTool` s and builds an :class:`ApprovalGate`
over the gateways and directories it trusts and a durable
:class:`~hatp.store.UsedApprovals`. A call without an approval is refused
with ``APPROVAL_REQUIRED`` and what to ask for; an approval is checked
against the call the server itself sees (docs/spec.md §20) and works once.
:func:`gated` does the same for any Python function, sync or async.
:func:`verify_call_approval` runs the same checks offline, for an auditor
holding only the approval and the public keys.
"""

from hatp.gate._decorator import GatedFunction, gated
from hatp.gate._gate import ApprovalGate, CheckedApproval, GateObserver
from hatp.gate._offline import verify_call_approval
from hatp.gate._tools import GatedTool, Price, Requester

__all__ = [
    "ApprovalGate",
    "CheckedApproval",
    "GateObserver",
    "GatedFunction",
    "GatedTool",
    "Price",
    "Requester",
    "gated",
    "verify_call_approval",
]
