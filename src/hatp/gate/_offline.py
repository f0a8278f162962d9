"""Checking a call approval offline: what an auditor can confirm with the keyring alone.

A tool server checks an approval against the call it is handed and its own
declaration of the tool ([GATE-*], :mod:`hatp.gate._rules`). An auditor who
holds only the approval and the public keys runs the same checks, with the
declaration the approval's own terms state: who approved (the gateway's
signature by a trusted key, every approver's own vote under their
directory-signed card), that enough distinct people did, that none of them
is the person the agent acted for, that their authority covers the amount,
and that it was valid when decided. Given the call's arguments, it also
checks that they are the ones approved. What only the server knows (its
price, its tool's definition now, whether the approval was used) is not
checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from hatp.clock import parse_time
from hatp.errors import ApprovalInvalid, GateInvalid
from hatp.evidence import Keyring, call_digest
from hatp.gate._cards import VerifiedCards
from hatp.gate._rules import Call, check_approval, parse_approval
from hatp.gate._tools import GatedTool, Requester, declare
from hatp.model import CallApproval

__all__ = ["verify_call_approval"]

#: The longest validity an approval may state (the most any gate accepts).
_MAX_LIFETIME = timedelta(days=1)


def verify_call_approval(
    doc: Any, keyring: Keyring, *, arguments: Mapping[str, Any] | None = None
) -> CallApproval:
    """Check a CallApproval offline against ``keyring`` (the gateways' and directories'
    public keys it trusts); return it parsed once every check passed.

    The checks are the gate's (docs/spec.md §20), run at the approval's
    ``decidedAt`` with the tool as its terms state it. With ``arguments``, the
    terms' ``callDigest`` must be the digest of exactly those arguments on the
    terms' server and tool ([GATE-CALL]); without, it is not checked.

    Raises:
        ApprovalInvalid: the first check that failed (``data.reason``, ``data.rule``),
            as a tool server would have refused it; ``SHAPE`` also when the terms
            name a tool or an address no gate could declare.
        InvalidJson: ``arguments`` have no canonical JSON form.
    """
    approval = parse_approval(doc)
    terms = approval.terms
    try:
        declared = declare(GatedTool(terms.tool, terms.address, action=terms.action))
    except GateInvalid as exc:
        raise ApprovalInvalid(
            f"approval {approval.approval_id}'s terms name no tool a gate could declare: "
            f"{exc.message}",
            reason="SHAPE",
            rule="GATE-SHAPE",
            approval_id=approval.approval_id,
        ) from None
    call = Call(
        declared=declared,
        server=terms.server,
        arguments=arguments or {},
        requester=Requester(terms.requester, terms.on_behalf_of),
        call_digest=terms.call_digest
        if arguments is None
        else call_digest(terms.server, terms.tool, arguments),
        amount=terms.amount,
        price=None,
        now=parse_time(approval.decided_at),
        skew=timedelta(0),
        max_lifetime=_MAX_LIFETIME,
        gateways=keyring,
        cards=VerifiedCards(keyring),
    )
    return check_approval(call, doc)
