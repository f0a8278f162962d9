"""The journal: undo plans built from what a committed transaction's steps offered.

:meth:`UndoPlanner.build` reads a committed transaction from the decision log,
takes each committed step's signed undo offer from its commit receipt, and
writes an ordinary plan that takes them back: one branch per step that can be
undone, in the reverse of the order phase 2 committed them, each naming the
step it undoes; amounts from the offers (a fee is a cost, a refund is money
moving); the original's approval groups (or those the caller names), so it is
approved like any plan; and the coordinator's signed reference to
the original record's head, with every step it leaves as it is and why
[UNDO-PLAN]. Nothing is ever undone without that approval.

:meth:`UndoPlanner.check` is what the coordinator runs before it logs any plan
that has ``undoes`` (built here or sent from outside): the reference is its own,
the original is committed and unchanged, and each branch matches its step's
signed offer [UNDO-CHECK]. The log then claims the steps in the same database
transaction that logs the plan [UNDO-CLAIM].
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypedDict, Unpack

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import Clock, format_time, parse_time
from hatp.errors import SignatureInvalid, TransactionUnknown, UndoRefused
from hatp.evidence import Keyring, SigningKey, sign, verify
from hatp.model import (
    COMMIT_ORDER,
    Amount,
    ApprovalGroup,
    Branch,
    KeptStep,
    Mode,
    OutcomeReceipt,
    Plan,
    StepRef,
    TxnEvent,
    TxnState,
    UndoOffer,
    UndoReference,
    parse_plan,
)
from hatp.store import DecisionLog, UndoClaim
from hatp.version import PROTOCOL_VERSION

__all__ = ["UndoOptions", "UndoPlanner", "committed_steps"]

#: How long people have to approve an undo plan, unless the caller says.
DEFAULT_DECIDE_SECONDS = 1800.0


class UndoOptions(TypedDict, total=False):
    """How an undo plan is built (:meth:`UndoPlanner.build`); every member optional.

    ``steps``: the step ids to take back (default: every step that can be).
    ``differing``: only the steps that committed other than their approved preview
    [COORD-EFFECT] (with ``steps``: those of them named). ``undo_txn_id``: the undo
    transaction's id (default: the original's, with ``.undo-`` and eight random hex
    digits). ``initiator``: the agent asking (default: the original's initiator).
    ``decide_seconds``: how long people have to approve it (default 1800).
    ``approvals``: who approves it (default: the original's groups, each without its
    declared amount; required when it had none).
    """

    steps: Sequence[str] | None
    differing: bool
    undo_txn_id: str | None
    initiator: str | None
    decide_seconds: float
    approvals: Sequence[ApprovalGroup] | None


@dataclass(frozen=True)
class Step:
    """A committed step of the original: its branch, its signed commit receipt and offer."""

    branch: Branch
    receipt: OutcomeReceipt
    offer: UndoOffer | None


def committed_steps(plan: Plan, events: Sequence[Mapping[str, Any]]) -> dict[str, Step]:
    """The committed steps of a transaction's record, by branch id (a step compensated in
    the same transaction is not committed)."""
    steps: dict[str, Step] = {}
    for event in events:
        body = event.get("body") or {}
        if event.get("type") == TxnEvent.COMPENSATED:
            steps.pop(str(body.get("branchId")), None)
            continue
        if event.get("type") != TxnEvent.COMMITTED:
            continue
        try:
            receipt = OutcomeReceipt.model_validate(body.get("receipt"))
            branch = plan.branch(receipt.branch_id)
        except (ValidationError, KeyError):  # the record's own verifier names it
            continue
        steps[branch.branch_id] = Step(branch, receipt, receipt.undo)
    return steps


def _refused(reason: str, message: str, txn_id: str, **data: Any) -> UndoRefused:
    return UndoRefused(message, reason=reason, txn_id=txn_id, **data)


class UndoPlanner:
    """Builds undo plans from the decision log, and checks any undo plan before it is logged."""

    def __init__(
        self,
        *,
        coordinator_id: str,
        key: SigningKey,
        keyring: Keyring,
        log: DecisionLog,
        clock: Clock,
    ) -> None:
        self._id = coordinator_id
        self._key = key
        self._keyring = keyring
        self._log = log
        self._clock = clock

    def build(self, txn_id: str, **options: Unpack[UndoOptions]) -> Plan:
        """Build the plan that takes back ``txn_id``'s steps, as ``options`` say
        (:class:`UndoOptions`) (runs on the store: from async code, call it through
        ``log.store.call``).

        Raises:
            TransactionUnknown: no such transaction in the log.
            UndoRefused: ``NOT_COMMITTED``, ``UNKNOWN_STEP``, ``NOT_UNDOABLE``,
                ``UNDO_LAPSED``, ``ALREADY_UNDONE``, ``UNDO_PENDING`` (a step asked
                for), ``NO_DIFFERENCE``, ``NOTHING_TO_UNDO`` or ``NO_APPROVER``;
                nothing was written.
            PlanInvalid: ``approvals`` or ``initiator`` make no valid plan.
            ValueError: ``decide_seconds`` is not positive (nothing was read).
        """
        steps, approvals = options.get("steps"), options.get("approvals")
        decide_seconds = options.get("decide_seconds", DEFAULT_DECIDE_SECONDS)
        if not decide_seconds > 0:
            raise ValueError(f"decide_seconds must be a positive number, not {decide_seconds}")
        row = self._log.get(txn_id)
        if row.state is not TxnState.COMMITTED:
            raise _refused(
                "NOT_COMMITTED",
                f"transaction {txn_id} is {row.state.value}; only a committed transaction's "
                "steps can be taken back",
                txn_id,
                state=row.state.value,
            )
        original = parse_plan(row.plan)
        events = self._log.events(txn_id)
        found = committed_steps(original, events)
        wanted = self._wanted(
            txn_id, found, events, steps, differing=options.get("differing", False)
        )
        claims = self._log.undo_claims(txn_id)
        now = self._clock.now()
        chosen: list[Step] = []
        kept: list[KeptStep] = []
        for branch in original.branches:
            step = found.get(branch.branch_id)
            if step is None:
                continue
            problem = _problem(step, claims.get(branch.branch_id), now)
            if wanted is not None and branch.branch_id not in wanted:
                kept.append(KeptStep(branch_id=branch.branch_id, reason="not asked to undo"))
            elif problem is None:
                chosen.append(step)
            elif wanted is not None or problem[0] == "UNDO_PENDING":
                raise _refused(problem[0], problem[1], txn_id, branch_id=branch.branch_id)
            else:
                kept.append(KeptStep(branch_id=branch.branch_id, reason=problem[1]))
        if not chosen:
            raise _refused(
                "NOTHING_TO_UNDO",
                f"no step of {txn_id} can be taken back: "
                + "; ".join(f"{k.branch_id}: {k.reason}" for k in kept),
                txn_id,
            )
        if not approvals and not original.approvals:
            raise _refused(
                "NO_APPROVER",
                f"{txn_id} needed no approval, and an undo is never automatic: name who "
                "approves this undo (approvals)",
                txn_id,
            )
        undo_id = options.get("undo_txn_id") or f"{txn_id[:110]}.undo-{secrets.token_hex(4)}"
        reference = self._reference(txn_id, str(row.head), kept)
        plan = {
            "hatpVersion": PROTOCOL_VERSION,
            "txnId": undo_id,
            "initiator": options.get("initiator") or original.initiator,
            "onBehalfOf": original.on_behalf_of,
            "branches": [_undo_branch(txn_id, s, chosen, original) for s in _reversed(chosen)],
            "approvals": [g.to_wire() for g in approvals or _consent(original)],
            "deadlines": {"decideBy": format_time(now + timedelta(seconds=decide_seconds))},
            "mode": Mode.AUTO.value,
            "undoes": reference,
        }
        return parse_plan(plan)

    def _wanted(
        self,
        txn_id: str,
        found: Mapping[str, Step],
        events: Sequence[Mapping[str, Any]],
        steps: Sequence[str] | None,
        *,
        differing: bool,
    ) -> set[str] | None:
        wanted = None if steps is None else set(steps)
        for step_id in sorted(wanted or ()):
            if step_id not in found:
                raise _refused(
                    "UNKNOWN_STEP",
                    f"{step_id!r} is not a committed step of {txn_id}; its committed steps are "
                    + (", ".join(sorted(found)) or "none"),
                    txn_id,
                    branch_id=step_id,
                )
        if not differing:
            return wanted
        differ = _differing(events)
        if not differ:
            raise _refused(
                "NO_DIFFERENCE",
                f"no step of {txn_id} committed other than its approved preview",
                txn_id,
            )
        return differ if wanted is None else differ & wanted

    def _reference(self, txn_id: str, head: str, kept: list[KeptStep]) -> dict[str, Any]:
        body = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "undo-reference",
            "txnId": txn_id,
            "head": head,
            "coordinator": self._id,
            "kept": [k.to_wire() for k in kept],
            "time": format_time(self._clock.now()),
        }
        return sign(body, self._key)

    def check(self, plan: Plan) -> tuple[str, list[str]]:
        """Check an undo plan before it is logged [UNDO-CHECK]; return the original's id
        and the steps it takes back, to claim (runs on the store).

        Raises:
            UndoRefused: ``REFERENCE_INVALID`` (not this coordinator's signed reference,
                or a branch other than its step's offer), ``NOT_COMMITTED``,
                ``ORIGINAL_CHANGED``, ``UNKNOWN_STEP``, ``NOT_UNDOABLE``, ``UNDO_LAPSED``;
                nothing was written.
        """
        ref = plan.undoes
        if ref is None:  # pragma: no cover - callers check
            raise TypeError("not an undo plan")
        self._check_reference(ref, plan.txn_id)
        try:
            row = self._log.get(ref.txn_id)
        except TransactionUnknown:
            raise _refused(
                "NOT_COMMITTED", f"transaction {ref.txn_id} is not in this log", ref.txn_id
            ) from None
        if row.state is not TxnState.COMMITTED:
            raise _refused(
                "NOT_COMMITTED",
                f"transaction {ref.txn_id} is {row.state.value}, not committed",
                ref.txn_id,
                state=row.state.value,
            )
        if row.head != ref.head and _checks.is_on("UNDO-HEAD"):
            raise _refused(
                "ORIGINAL_CHANGED",
                f"the record of {ref.txn_id} is at head {row.head}, not {ref.head} the undo "
                "plan was built from; build it again",
                ref.txn_id,
                head=row.head,
                built_from=ref.head,
            )
        original = parse_plan(row.plan)
        found = committed_steps(original, self._log.events(ref.txn_id))
        now = self._clock.now()
        for branch in plan.branches:
            assert branch.undoes is not None  # the plan's own rule [UNDO-PLAN]
            self._check_branch(ref.txn_id, branch, found.get(branch.undoes.branch_id), now)
        taken = [found[b.undoes.branch_id] for b in plan.branches if b.undoes is not None]
        for branch, step in zip(plan.branches, taken, strict=True):
            self._check_refund(ref.txn_id, branch, step, taken, original)
        return ref.txn_id, [b.undoes.branch_id for b in plan.branches if b.undoes is not None]

    def _check_reference(self, ref: UndoReference, undo_txn_id: str) -> None:
        problem = None
        try:
            signer = verify(ref.to_wire(), self._keyring, at=parse_time(ref.time))
        except SignatureInvalid as exc:
            problem = f"its signature does not verify: {exc.message}"
        else:
            if signer.issuer != self._id or ref.coordinator != self._id:
                problem = f"it is {ref.coordinator}'s (signed by {signer.issuer}), not {self._id}'s"
        if problem is not None and _checks.is_on("UNDO-REFERENCE"):
            raise _refused(
                "REFERENCE_INVALID",
                f"undo plan {undo_txn_id}'s reference to {ref.txn_id} is refused: {problem}; "
                "build undo plans with this coordinator's undo",
                ref.txn_id,
            )

    def _check_branch(self, txn_id: str, branch: Branch, step: Step | None, now: datetime) -> None:
        ref = branch.undoes
        assert ref is not None
        if step is None:
            raise _refused(
                "UNKNOWN_STEP",
                f"branch {branch.branch_id!r} undoes {ref.branch_id!r}, which is not a "
                f"committed step of {txn_id}",
                txn_id,
                branch_id=ref.branch_id,
            )
        problem = _problem(step, None, now)
        if problem is not None:
            raise _refused(problem[0], problem[1], txn_id, branch_id=ref.branch_id)
        offer = step.offer
        assert offer is not None
        if (branch.participant, branch.operation, branch.tier) != (
            step.branch.participant,
            offer.operation,
            offer.tier,
        ) and _checks.is_on("UNDO-OFFER"):
            raise _refused(
                "REFERENCE_INVALID",
                f"branch {branch.branch_id!r} would undo {ref.branch_id!r} with "
                f"{branch.operation} at {branch.participant}, but the step's signed offer is "
                f"{offer.operation} at {step.branch.participant}",
                txn_id,
                branch_id=ref.branch_id,
            )

    def _check_refund(
        self, txn_id: str, branch: Branch, step: Step, taken: list[Step], original: Plan
    ) -> None:
        """A refund is what the rule of [UNDO-PLAN] gives for the steps this plan takes
        back, to the cent: a plan edited to refund more (or keep a fee twice) is refused."""
        offer = step.offer
        asked = branch.args.get("refund")
        expected = None if offer is None else offer.args.get("refund")  # the offer's own
        if offer is not None and offer.refund is not None:
            expected = _refund(step, offer.refund, taken, original).to_wire()
        if asked == expected or not _checks.is_on("UNDO-OFFER"):
            return
        raise _refused(
            "REFERENCE_INVALID",
            f"branch {branch.branch_id!r} asks a refund of {asked}, but the step's signed "
            f"offer gives {expected} for the steps this plan takes back",
            txn_id,
            branch_id=branch.branch_id,
        )


def _problem(step: Step, claim: UndoClaim | None, now: datetime) -> tuple[str, str] | None:
    """Why ``step`` cannot be taken back now (a reason code and a sentence), or ``None``."""
    offer = step.offer
    if offer is None:
        return "NOT_UNDOABLE", "it was committed without an undo offer"
    if not offer.undoable:
        return "NOT_UNDOABLE", f"not undoable: {offer.reason or 'no reason given'}"
    if claim is not None and claim.undone:
        return "ALREADY_UNDONE", f"already taken back by undo {claim.undo_txn_id}"
    if claim is not None and not claim.void:
        standing = "still open"
        if claim.state is not None and claim.state.finished:
            standing = f"which ended {claim.state.value}: resolve it first"
        return "UNDO_PENDING", f"claimed by undo {claim.undo_txn_id}, {standing}"
    if offer.undo_by is not None and parse_time(offer.undo_by) < now:
        return "UNDO_LAPSED", f"its undo offer lapsed at {offer.undo_by}"
    return None


def _differing(events: Sequence[Mapping[str, Any]]) -> set[str]:
    for event in reversed(events):
        if event.get("type") == TxnEvent.OUTCOME:
            return {str(b) for b in (event.get("body") or {}).get("effectDiffers") or ()}
    return set()


def _reversed(chosen: list[Step]) -> list[Step]:
    """The steps in the reverse of the order phase 2 committed them in (by tier, then
    plan order), so that the last thing done is the first taken back."""
    order = sorted(chosen, key=lambda s: COMMIT_ORDER.index(s.branch.tier))
    return list(reversed(order))


def _undo_branch(txn_id: str, step: Step, chosen: list[Step], original: Plan) -> dict[str, Any]:
    offer = step.offer
    assert offer is not None and offer.operation is not None and offer.tier is not None
    args = dict(offer.args)
    amount = offer.fee
    if offer.refund is not None:
        back = _refund(step, offer.refund, chosen, original)
        args["refund"] = back.to_wire()
        amount = _plus(back, offer.fee)
    return {
        "branchId": step.branch.branch_id,
        "participant": step.branch.participant,
        "operation": offer.operation,
        "tier": offer.tier.value,
        "args": args,
        "amount": None if amount is None else amount.to_wire(),
        "undoes": StepRef(txn_id=txn_id, branch_id=step.branch.branch_id).to_wire(),
    }


def _refund(step: Step, refund: Amount, chosen: list[Step], original: Plan) -> Amount:
    """What the payer gets back: the offered refund, less this step's fee, less, for each
    step this one paid for, its fee if it is taken back too, or its whole price if not."""
    currency = refund.currency
    back = refund.decimal - _in(step.offer.fee if step.offer else None, currency)
    undone = {s.branch.branch_id: s for s in chosen}
    for paid_id in step.branch.settles:
        paid = undone.get(paid_id)
        if paid is not None:
            back -= _in(paid.offer.fee if paid.offer else None, currency)
        else:
            back -= _in(original.branch(paid_id).amount, currency)
    exponent = Decimal(refund.value).as_tuple().exponent
    places = Decimal(1).scaleb(exponent if isinstance(exponent, int) else 0)
    return Amount(value=str(max(back, Decimal(0)).quantize(places)), currency=currency)


def _in(amount: Amount | None, currency: str) -> Decimal:
    return amount.decimal if amount is not None and amount.currency == currency else Decimal(0)


def _plus(amount: Amount, fee: Amount | None) -> Amount:
    if fee is None or fee.currency != amount.currency:
        return amount
    total = amount.decimal + fee.decimal
    return Amount(value=str(total), currency=amount.currency)


def _consent(original: Plan) -> list[ApprovalGroup]:
    """Who approves the undo: the original's groups, each without the amount the agent
    declared then (the gateway computes the undo's own)."""
    return [
        group.model_copy(
            update={"requirement": group.requirement.model_copy(update={"amount": None})}
        )
        for group in original.approvals
    ]
