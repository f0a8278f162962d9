"""What the coordinator checks in every receipt and approval before it counts.

Fail closed: anything that does not verify, names another plan, branch or
party, or has the wrong shape is a problem, and a problem counts as a no.
Each function returns ``None`` when the object counts, or the problem as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import parse_time
from hatp.coordinator._txn import TxnRun
from hatp.errors import HatpError
from hatp.evidence import Keyring, Verified, verify, verify_read_approval
from hatp.model import (
    Approval,
    ApprovalDecision,
    ApprovalGroup,
    Branch,
    BranchState,
    ChainEstimate,
    OutcomeReceipt,
    PendingVote,
    Plan,
    PrepareReceipt,
    Quote,
    RenewReceipt,
    Result,
    Vote,
)


def _signed_by(obj: Mapping[str, Any], keyring: Keyring, party: str) -> str | None:
    return _signer(obj, keyring, party)[1]


def _signer(
    obj: Mapping[str, Any], keyring: Keyring, party: str
) -> tuple[Verified | None, str | None]:
    """Who signed ``obj``, and the problem if it does not verify as ``party``'s."""
    try:
        verified = verify(obj, keyring)
    except HatpError as exc:
        return None, f"signature: {exc.data.get('reason', exc.code)}: {exc.message}"
    if verified.issuer != party and _checks.is_on("COORD-SIGNER"):
        return verified, f"signed by {verified.issuer}, not by {party}"
    return verified, None


def vet_prepare(
    receipt: Mapping[str, Any],
    keyring: Keyring,
    *,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    fence: int,
    quote: Quote | None = None,
) -> tuple[PrepareReceipt | None, str | None]:
    """Check a prepare receipt; return it parsed, and the problem if it is not a yes.

    With a ``quote`` (approval-first), a yes counts only at the quoted cost
    [COORD-QUOTE]: people approved that price, and are not asked again.
    """
    parsed, problem = _fenced_receipt(
        PrepareReceipt, "prepare", receipt, keyring, txn_id, branch, plan_digest, fence
    )
    if parsed is None:
        return None, problem
    if problem is None and parsed.tier is not branch.tier:
        problem = f"participant prepared tier {parsed.tier}, the plan says {branch.tier}"
    if problem is None and parsed.vote is not Vote.YES:
        problem = f"voted no: {parsed.reason or 'no reason given'}"
    if (
        problem is None
        and quote is not None
        and quote.cost is not None
        and parsed.cost != quote.cost
        and _checks.is_on("COORD-QUOTE")
    ):
        cost = "no cost" if parsed.cost is None else str(parsed.cost)
        problem = f"QUOTE_CHANGED: prepared at {cost}, but people approved the quote {quote.cost}"
    return parsed, problem


def vet_vote(
    receipt: Mapping[str, Any], keyring: Keyring, run: TxnRun, branch: Branch
) -> tuple[PrepareReceipt | None, str | None]:
    """:func:`vet_prepare` for a branch of ``run``: its transaction, plan, fence and quote."""
    return vet_prepare(
        receipt,
        keyring,
        txn_id=run.txn_id,
        branch=branch,
        plan_digest=run.digest,
        fence=run.fence,
        quote=run.quotes.get(branch.branch_id),
    )


def vet_renew(
    receipt: Mapping[str, Any],
    keyring: Keyring,
    *,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    fence: int,
) -> tuple[RenewReceipt | None, str | None]:
    """Check a renew receipt as a prepare receipt is checked; return it parsed, and the problem.

    A renewal that does not count leaves the hold's lease where the record
    last showed it [COORD-RENEW].
    """
    return _fenced_receipt(
        RenewReceipt, "renew", receipt, keyring, txn_id, branch, plan_digest, fence
    )


def vet_quote(
    quote: Mapping[str, Any],
    keyring: Keyring,
    *,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    fence: int,
) -> tuple[Quote | None, str | None]:
    """Check a quote as a prepare receipt is checked, and that it quotes the branch's tier."""
    parsed, problem = _fenced_receipt(
        Quote, "quote", quote, keyring, txn_id, branch, plan_digest, fence
    )
    if problem is None and parsed is not None and parsed.tier is not branch.tier:
        problem = f"participant quoted tier {parsed.tier}, the plan says {branch.tier}"
    return parsed, problem


def vet_estimate(
    estimate: Mapping[str, Any],
    keyring: Keyring,
    *,
    gateway_id: str,
    txn_id: str,
    group_id: str,
    plan_digest: str,
) -> tuple[ChainEstimate | None, str | None]:
    """Check a chain estimate: the asked gateway's word on this group of this plan."""
    parsed, _, problem = _said(
        ChainEstimate, "chain estimate", estimate, keyring, gateway_id, txn_id, group_id,
        plan_digest,
    )  # fmt: skip
    return parsed, problem


def describe(exc: BaseException, timeout: float | None) -> str:
    """A failed call, as the problem the record shows."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    code = getattr(exc, "code", type(exc).__name__)
    message = getattr(exc, "message", str(exc))
    return f"{code}: {message}"


_Fenced = TypeVar("_Fenced", PrepareReceipt, RenewReceipt, Quote)
_Parsed = TypeVar(
    "_Parsed", PrepareReceipt, RenewReceipt, Quote, OutcomeReceipt, Approval, PendingVote,
    ChainEstimate,
)  # fmt: skip
_Said = TypeVar("_Said", Approval, PendingVote, ChainEstimate)


def _parsed(model: type[_Parsed], what: str, doc: Mapping[str, Any]) -> _Parsed | str:
    """``doc`` as ``model``, or why it is malformed."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        return f"malformed {what}: {exc.errors()[0]['msg']}"


def _fenced_receipt(
    model: type[_Fenced],
    what: str,
    receipt: Mapping[str, Any],
    keyring: Keyring,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    fence: int,
) -> tuple[_Fenced | None, str | None]:
    """Parse a branch's receipt; check its signer, transaction, branch, plan and fence."""
    parsed = _parsed(model, f"{what} receipt", receipt)
    if isinstance(parsed, str):
        return None, parsed
    problem = _signed_by(receipt, keyring, branch.participant) or _same_branch(
        parsed, txn_id, branch, plan_digest
    )
    if problem is None and parsed.fence != fence:
        problem = f"receipt is for fence {parsed.fence}, not {fence}"
    return parsed, problem


def vet_outcome(
    receipt: Mapping[str, Any],
    keyring: Keyring,
    *,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    expected: BranchState,
) -> tuple[OutcomeReceipt | None, str | None]:
    """Check a phase-2 receipt; return it parsed, and the problem if it is not ``expected``."""
    parsed = _parsed(OutcomeReceipt, "receipt", receipt)
    if isinstance(parsed, str):
        return None, parsed
    problem = _signed_by(receipt, keyring, branch.participant)
    # An abort before any prepare names no plan; everything else must name ours.
    digest_seen = plan_digest if parsed.plan_digest is None else None
    if problem is None:
        problem = _same_branch(parsed, txn_id, branch, plan_digest, digest_seen)
    if problem is None and parsed.outcome is not expected:
        problem = f"the participant reports {parsed.outcome}, not {expected}"
    return parsed, problem


def _same_branch(
    parsed: PrepareReceipt | RenewReceipt | OutcomeReceipt | Quote,
    txn_id: str,
    branch: Branch,
    plan_digest: str,
    digest_seen: str | None = None,
) -> str | None:
    seen = digest_seen or parsed.plan_digest
    if seen != plan_digest and _checks.is_on("COORD-DIGEST"):
        return f"receipt is for plan {parsed.plan_digest}, not {plan_digest}"
    if (parsed.txn_id, parsed.branch_id) != (txn_id, branch.branch_id):
        return f"receipt is for {parsed.txn_id}/{parsed.branch_id}"
    if parsed.participant != branch.participant:
        return f"receipt names participant {parsed.participant}"
    return None


def vet_approval(
    approval: Mapping[str, Any],
    keyring: Keyring,
    *,
    gateway_id: str,
    txn_id: str,
    group: ApprovalGroup,
    plan: Plan,
    plan_digest: str,
    ask_id: str | None,
    decide_by: datetime,
    terms_digest: str | None = None,
) -> tuple[Approval | None, str | None]:
    """Check an approval; return it parsed, and the problem if it does not approve in time
    (holds-first: the terms with digest ``terms_digest`` too).

    An approval counts only with the evidence an auditor will check offline:
    the people's own signed votes, their directory-signed cards and the
    gateway's routing record, and it must satisfy the group (quorum,
    separation of duties, authority) by that evidence, not by the gateway's word.
    """
    parsed, signer, problem = _said(
        Approval, "approval", approval, keyring, gateway_id, txn_id, group.group_id, plan_digest
    )
    if parsed is None:
        return None, problem
    if problem is None and ask_id is not None and parsed.ask_id != ask_id:
        problem = f"approval answers ask {parsed.ask_id}, not {ask_id}"
    approved_terms = approval.get("termsDigest")
    if problem is None and approved_terms != terms_digest and _checks.is_on("COORD-DIGEST"):
        # Holds-first: people approve the plan and the holds' terms [COORD-TERMS].
        problem = f"approval is for terms {approved_terms}, not {terms_digest}"
    if problem is None and parsed.decision is not ApprovalDecision.APPROVE:
        problem = f"the group decided reject: {parsed.reason}"
    if (
        problem is None
        and parse_time(parsed.decided_at) > decide_by
        and _checks.is_on("COORD-DEADLINE")
    ):
        problem = f"decided at {parsed.decided_at}, after the deadline"
    if problem is None and signer is not None:
        problem = _evidence_problem(approval, parsed, signer, plan, plan_digest, keyring)
    return parsed, problem


def _evidence_problem(
    approval: Mapping[str, Any],
    parsed: Approval,
    signer: Verified,
    plan: Plan,
    plan_digest: str,
    keyring: Keyring,
) -> str | None:
    """The first thing the approval's own evidence does not show, if any [COORD-EVIDENCE].

    The same checks the offline verifier makes (one definition, in the
    evidence layer), so the coordinator never counts an approval that its
    own record would then fail on. The approval was read and its signature
    verified just before (``parsed``, ``signer``): they are not done twice.
    """
    if not _checks.is_on("COORD-EVIDENCE"):  # the naive coordinator: the gateway's word will do
        return None
    for finding in verify_read_approval(approval, parsed, signer, plan, plan_digest, keyring):
        if finding.result is not Result.PASS:
            return f"[{finding.rule}] {finding.result.value}: {finding.detail}"
    return None


def vet_pending(
    pending: Mapping[str, Any],
    keyring: Keyring,
    *,
    gateway_id: str,
    txn_id: str,
    group_id: str,
    plan_digest: str,
) -> tuple[PendingVote | None, str | None]:
    """Check a pending vote; return it parsed, and the problem if it is not for this ask."""
    parsed, _, problem = _said(
        PendingVote, "pending vote", pending, keyring, gateway_id, txn_id, group_id, plan_digest
    )
    return parsed, problem


def _said(
    model: type[_Said],
    what: str,
    doc: Mapping[str, Any],
    keyring: Keyring,
    gateway_id: str,
    txn_id: str,
    group_id: str,
    plan_digest: str,
) -> tuple[_Said | None, Verified | None, str | None]:
    """``doc`` parsed; who signed it (``None`` if it does not verify); and the first
    reason it is not the asked gateway's word on this group of this plan, if any."""
    parsed = _parsed(model, what, doc)
    if isinstance(parsed, str):
        return None, None, parsed
    signer, problem = _signer(doc, keyring, gateway_id)
    if problem is None and parsed.gateway != gateway_id:
        problem = f"{what} names gateway {parsed.gateway}, not {gateway_id}"
    if problem is None and parsed.plan_digest != plan_digest and _checks.is_on("COORD-DIGEST"):
        problem = f"{what} is for plan {parsed.plan_digest}, not {plan_digest}"
    if problem is None and (parsed.txn_id, parsed.group_id) != (txn_id, group_id):
        problem = f"{what} is for {parsed.txn_id}/{parsed.group_id}"
    return parsed, signer, problem
