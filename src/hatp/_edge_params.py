"""What the edges take and give: one request shape per role method, for MCP and HTTP alike.

The MCP binding (``hatp.mcp``) reads a method's JSON-RPC params with these
models; the HTTP API (``hatp.http``) reads the same members from a route's
path, query and body, assembled into one object, with the same models. So a
request has one shape whichever edge carries it (docs/spec.md §21, §25).
:func:`approval_request` and :func:`resolve_answer` turn a request into the
role's call and its answer into JSON, also once for both edges. The response
models (``*Answer``) describe answers that are not signed documents, for the
OpenAPI description; a signed document is always sent exactly as signed,
never re-serialized through a model.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Annotated, Any, Final, Literal

from pydantic import Field, StrictBool, StrictInt, StringConstraints, model_validator

from hatp.clock import format_time, parse_time
from hatp.coordinator import ApprovalRequest, Coordinator, Outcome, UndoOptions
from hatp.directory import Directory
from hatp.errors import AskInvalid
from hatp.model import Status, TxnState, WireModel, WireTime, parse_plan

__all__ = [
    "MAX_ASKED_WAIT_SECONDS",
    "MAX_DEADLINE_SECONDS",
    "MAX_FENCE",
    "MAX_LIST_LIMIT",
    "MAX_UNDO_STEPS",
    "MAX_WAIT_SECONDS",
    "AcquireParams",
    "AnsweredParams",
    "AskParams",
    "BeginParams",
    "CallParams",
    "CandidateAnswer",
    "DecimalText",
    "ExcludedAnswer",
    "HatpParams",
    "LockAnswer",
    "PollParams",
    "QuestionParams",
    "RecordAnswer",
    "ReleaseParams",
    "RenewParams",
    "ResolveAnswer",
    "ResolveParams",
    "TightenParams",
    "TxnListAnswer",
    "TxnListParams",
    "TxnParams",
    "TxnStateAnswer",
    "TxnSummary",
    "UndoAnswer",
    "UndoParams",
    "UndoPlanAnswer",
    "VoteParams",
    "WithdrawParams",
    "WithdrawTxnParams",
    "approval_request",
    "ask_params",
    "resolve_answer",
    "undo_answer",
]

#: The longest one long poll (``txn/voted``, ``ask/answered``, a tool round) waits, in seconds.
MAX_WAIT_SECONDS: Final = 30.0

#: The longest wait a poll may ask for, in seconds; it waits at most :data:`MAX_WAIT_SECONDS`.
MAX_ASKED_WAIT_SECONDS: Final = 3600.0
#: The latest deadline a resolution may be asked about, in seconds from now (ten years).
MAX_DEADLINE_SECONDS: Final = 10 * 366 * 86400.0
#: The largest fence a lease request may name: the strict reader's largest integer.
MAX_FENCE: Final = 2**53 - 1

#: The most transactions one ``GET /coordinator/txns`` lists.
MAX_LIST_LIMIT: Final = 500

#: A non-negative decimal amount as text, e.g. ``"730.00"``.
DecimalText = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,30}(\.[0-9]{1,30})?$")]


class HatpParams(WireModel):
    """Base of every hatp request's params: camelCase on the wire, strict types,
    unknown members refused. An edge reads them before the role is called and
    refuses params that do not fit, naming the member (MCP: ``PEER_INCOMPATIBLE``
    reason ``METHOD``; HTTP: 400 ``INVALID_JSON``). No string anywhere in them, member
    names included, may hold U+0000 [EDGE-NUL]: PostgreSQL cannot store it, and a
    client's bad input must not read as the store being down."""

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        if _holds_nul(data):
            raise ValueError("a string holds U+0000 (NUL), which hatp does not take: remove it")
        return data


def _holds_nul(data: Any) -> bool:
    """Whether a string in ``data`` (a parsed JSON value) holds U+0000; iterative, so no
    nesting can exhaust the stack."""
    todo = [data]
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
    return False


# -- the Human Gateway -----------------------------------------------------------


class AskParams(HatpParams):
    """``txn/ask`` and ``txn/estimate``: one approval group of a plan, answered by ``decideBy``."""

    txn_id: str = Field(min_length=1, max_length=512)
    plan: dict[str, Any] = Field(description="the Plan, wire form (schemas/Plan.json)")
    plan_digest: str = Field(min_length=1, max_length=256)
    group_id: str = Field(min_length=1, max_length=256)
    decide_by: WireTime
    terms: dict[str, Any] | None = Field(
        default=None, description="holds-first: the HoldTerms people approve with the plan"
    )


class PollParams(HatpParams):
    """``txn/voted``: the ask to poll, and how long to wait for its decision."""

    ask_id: str = Field(min_length=1, max_length=256)
    wait_seconds: float = Field(default=0.0, ge=0.0, le=MAX_ASKED_WAIT_SECONDS, allow_inf_nan=False)


class WithdrawParams(HatpParams):
    """``txn/withdraw``: the ask nobody needs any more, and why."""

    ask_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(max_length=1000)


class WithdrawTxnParams(HatpParams):
    """``txn/withdrawAll``: the transaction none of whose open asks are needed any more."""

    txn_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(max_length=1000)


class TightenParams(HatpParams):
    """``txn/tighten``: the open ask, and its new (earlier) deadline."""

    ask_id: str = Field(min_length=1, max_length=256)
    decide_by: WireTime


class VoteParams(HatpParams):
    """``POST /gateway/asks/{askId}/votes``: a person's signed HumanVote on the ask, from
    whoever holds it (its signature is checked, not who delivers it)."""

    ask_id: str = Field(min_length=1, max_length=256)
    vote: dict[str, Any] = Field(description="the signed HumanVote (schemas/HumanVote.json)")


class QuestionParams(HatpParams):
    """``ask/question``: the Question (wire form)."""

    question: dict[str, Any] = Field(description="the Question (schemas/Question.json)")


class CallParams(HatpParams):
    """``ask/call``: the CallRequest (wire form)."""

    request: dict[str, Any] = Field(description="the CallRequest (schemas/CallRequest.json)")


class AnsweredParams(HatpParams):
    """``ask/answered``: poll a call or question ask."""

    ask_id: str = Field(min_length=1, max_length=256)
    kind: Literal["call", "question"]
    wait_seconds: float = Field(default=0.0, ge=0.0, le=MAX_ASKED_WAIT_SECONDS, allow_inf_nan=False)


class ResolveParams(HatpParams):
    """``directory/resolve``: an address, the action and the amounts per currency."""

    address: str = Field(min_length=1, max_length=2048)
    action: str = Field(min_length=1, max_length=256)
    amounts: dict[str, DecimalText] = Field(default_factory=dict)
    on_behalf_of: str = Field(min_length=1, max_length=512)
    initiator_principal: str | None = None
    deadline_seconds: float | None = Field(
        default=None, ge=0.0, le=MAX_DEADLINE_SECONDS, allow_inf_nan=False
    )
    passkey_required: bool = False


def approval_request(params: AskParams) -> ApprovalRequest:
    """The gateway's :class:`~hatp.coordinator.ApprovalRequest` for ``params``.

    Raises:
        PlanInvalid, VersionUnsupported: the plan does not parse.
        AskInvalid: reason ``UNKNOWN_GROUP``: the plan has no group ``groupId``.
    """
    plan = parse_plan(params.plan)
    group = next((g for g in plan.approvals if g.group_id == params.group_id), None)
    if group is None:
        raise AskInvalid(
            f"plan {plan.txn_id!r} has no approval group {params.group_id!r}",
            reason="UNKNOWN_GROUP",
            group_id=params.group_id,
        )
    return ApprovalRequest(
        txn_id=params.txn_id,
        plan=plan,
        plan_digest=params.plan_digest,
        group=group,
        decide_by=parse_time(params.decide_by),
        terms=params.terms,
    )


def ask_params(request: ApprovalRequest) -> dict[str, Any]:
    """The params of ``txn/ask`` (and ``txn/estimate``) for ``request``: what a client of
    a gateway elsewhere sends (the reverse of :func:`approval_request`)."""
    return {
        "txnId": request.txn_id,
        "plan": request.plan.to_wire(),
        "planDigest": request.plan_digest,
        "groupId": request.group.group_id,
        "decideBy": format_time(request.decide_by),
        "terms": request.terms,
    }


def resolve_answer(directory: Directory, params: ResolveParams) -> dict[str, Any]:
    """``directory/resolve``: :meth:`Directory.resolve` as JSON (:class:`ResolveAnswer`), each
    candidate with its card as the directory signed it, so the caller verifies it.

    Raises:
        AddressInvalid: the address does not parse, or is an agent's.
    """
    resolution = directory.resolve(
        params.address,
        params.action,
        amounts={currency: Decimal(value) for currency, value in params.amounts.items()},
        on_behalf_of=params.on_behalf_of,
        initiator_principal=params.initiator_principal,
        deadline_seconds=params.deadline_seconds,
        passkey_required=params.passkey_required,
    )
    return {
        "directory": directory.issuer,
        "address": str(resolution.address),
        "needed": resolution.needed,
        "candidates": [
            {
                "id": c.id,
                "card": directory.signed(c.id),
                "status": c.status.value,
                "load": f"{c.load.numerator}/{c.load.denominator}",
                "slaFits": c.sla_fits,
            }
            for c in resolution.candidates
        ],
        "excluded": [e.to_json() for e in resolution.excluded],
    }


class CandidateAnswer(WireModel):
    """One candidate of a resolution, best first."""

    id: str
    card: dict[str, Any] = Field(description="the Human Card as its directory signed it")
    status: Status
    load: Annotated[str, StringConstraints(pattern=r"^[0-9]+/[1-9][0-9]*$")]
    sla_fits: bool


class ExcludedAnswer(WireModel):
    """One person the address matched who is not a candidate, and the rule why."""

    id: str
    result: Literal["excluded"]
    rule: str
    detail: str


class ResolveAnswer(WireModel):
    """The answer of ``directory/resolve`` (:func:`resolve_answer`)."""

    directory: str
    address: str
    needed: int = Field(ge=1)
    candidates: list[CandidateAnswer]
    excluded: list[ExcludedAnswer]


# -- the coordinator -------------------------------------------------------------------


class BeginParams(HatpParams):
    """``txn/begin``: the plan to run as one transaction."""

    plan: dict[str, Any] = Field(description="the Plan, wire form (schemas/Plan.json)")


class TxnParams(HatpParams):
    """``txn/state`` and ``txn/record``: which transaction."""

    txn_id: str


class TxnListParams(HatpParams):
    """``GET /coordinator/txns``: the newest transactions, in ``state`` if given."""

    state: TxnState | None = Field(default=None, strict=False)  # the query's text
    limit: StrictInt = Field(default=50, ge=1, le=MAX_LIST_LIMIT)


class AcquireParams(HatpParams):
    """``lock/acquire``: take the log's lease on a transaction for ``seconds``."""

    txn_id: str
    owner: str = Field(min_length=1, max_length=256)
    seconds: float = Field(gt=0, le=86400, allow_inf_nan=False)


class RenewParams(AcquireParams):
    """``lock/renew``: extend the lease held at ``fence``."""

    fence: StrictInt = Field(ge=0, le=MAX_FENCE)


class ReleaseParams(HatpParams):
    """``lock/release``: hand the lease held at ``fence`` back."""

    txn_id: str
    owner: str = Field(min_length=1, max_length=256)
    fence: StrictInt = Field(ge=0, le=MAX_FENCE)


class TxnStateAnswer(WireModel):
    """Where a transaction stands in the log (``txn/begin``, ``txn/state``)."""

    txn_id: str
    state: TxnState
    effect_differs: list[str] | None = Field(
        default=None,
        description="an ended transaction: the steps that committed other than their approved "
        "preview (absent when none did)",
    )


class TxnSummary(WireModel):
    """One transaction of a list: where it stands, whose plan it runs, since when."""

    txn_id: str
    state: TxnState
    initiator: str | None
    created_at: str
    updated_at: str


class TxnListAnswer(WireModel):
    """``GET /coordinator/txns``: the transactions, newest first."""

    transactions: list[TxnSummary]


class RecordAnswer(WireModel):
    """``txn/record``: the Transaction Record as logged so far."""

    record: dict[str, Any] = Field(description="the TransactionRecord (schemas/TransactionRecord)")


class LockAnswer(WireModel):
    """``lock/*``: the transaction and the fence of the lease (``null``: held elsewhere)."""

    txn_id: str
    fence: int | None


# --- txn/undo (docs/spec.md §28) ---

#: The most steps one ``txn/undo`` may name.
MAX_UNDO_STEPS: Final = 1000
#: A plan's ``txnId``, as the Plan model takes it.
_PlanTxnId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
_StepId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class UndoParams(HatpParams):
    """``txn/undo`` (``POST /coordinator/txns/{txnId}/undo``): the committed transaction whose
    steps to take back, and how."""

    txn_id: str = Field(min_length=1, description="the committed transaction to take back")
    steps: list[_StepId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_UNDO_STEPS,
        description="only these steps (branchIds); default: every step that can be undone",
    )
    differing: StrictBool = Field(
        default=False,
        description="only the steps that committed other than their approved preview",
    )
    decide_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_SECONDS,
        allow_inf_nan=False,
        description="how long people have to approve the undo (default: 30 minutes)",
    )
    undo_txn_id: _PlanTxnId | None = Field(
        default=None,
        description="the undo transaction's id (default: the original's with .undo- and "
        "eight random hex digits)",
    )
    dry_run: StrictBool = Field(
        default=False, description="build and answer the plan; begin nothing"
    )


class UndoPlanAnswer(WireModel):
    """``txn/undo`` with ``dryRun``: the undo plan as it would be begun; nothing was."""

    plan: dict[str, Any] = Field(
        description="the undo Plan (schemas/Plan.json): its undoes names the original and "
        "what it keeps; each branch the step it takes back"
    )


class UndoAnswer(WireModel):
    """``txn/undo``: the undo transaction, in the log and running, and the plan it runs."""

    txn_id: str = Field(description="the undo transaction's id")
    state: TxnState
    plan: dict[str, Any] = Field(description="the undo Plan it runs (schemas/Plan.json)")


async def undo_answer(
    coordinator: Coordinator, params: UndoParams
) -> tuple[dict[str, Any], asyncio.Task[Outcome] | None]:
    """``txn/undo`` for either edge: build the undo plan ``params`` asks for; with ``dryRun``
    answer it (:class:`UndoPlanAnswer`, no task), else begin it and answer the undo
    transaction (:class:`UndoAnswer`) with the task that drives it.

    Raises:
        TransactionUnknown: no such transaction.
        UndoRefused: nothing can be taken back as asked (``data.reason``); nothing was begun.
        OutcomeConflict: a transaction with ``undoTxnId`` is already in the log.
        PlanInvalid, StoreUnavailable: as :meth:`~hatp.coordinator.Coordinator.begin`.
    """
    options: UndoOptions = {
        "steps": params.steps,
        "differing": params.differing,
        "undo_txn_id": params.undo_txn_id,
    }
    if params.decide_seconds is not None:
        options["decide_seconds"] = params.decide_seconds
    plan = await coordinator.plan_undo(params.txn_id, **options)
    wire = plan.to_wire()
    if params.dry_run:
        return {"plan": wire}, None
    task = await coordinator.begin(plan)
    state = await coordinator.log.store.call(coordinator.state, plan.txn_id)
    return {"txnId": plan.txn_id, "state": state.value, "plan": wire}, task
