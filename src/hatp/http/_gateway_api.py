"""The Human Gateway's JSON API: the MCP binding's gateway methods, as routes.

Each route reads the same params as its MCP method (:mod:`hatp._edge_params`)
and answers what :class:`~hatp.gateway.HumanGateway` signed, unchanged under
``answer`` (``estimate`` for an estimate), so the caller verifies it as it would
an in-process one. The polls are long polls on the gateway's own clock: they
answer as soon as the ask is decided, or after ``waitSeconds`` (at most
:data:`~hatp._edge_params.MAX_WAIT_SECONDS`); waiting never holds the event loop.
``POST …/asks/{askId}/votes`` takes a person's signed vote from whoever holds
it (a webhook's receiver, a mail reader's tool): the gateway checks its
signature, not its deliverer.
"""

from __future__ import annotations

from typing import Any

from hatp._edge_params import (
    MAX_WAIT_SECONDS,
    AnsweredParams,
    AskParams,
    CallParams,
    PollParams,
    QuestionParams,
    TightenParams,
    VoteParams,
    WithdrawParams,
    approval_request,
)
from hatp.clock import parse_time
from hatp.gateway import HumanGateway
from hatp.http._api import Carrying, Operation
from hatp.http._callers import Owner, member
from hatp.model import Answer, Approval, CallApproval, ChainEstimate, PendingVote
from hatp.store import AskKind

__all__ = ["gateway_operations"]

_ROUTING = ("PLAN_INVALID", "VERSION_UNSUPPORTED", "REQUIREMENT_BELOW_TOTAL", "ADDRESS_INVALID")


def gateway_operations(gateway: HumanGateway, prefix: str = "/gateway") -> list[Operation]:
    """The gateway's operations under ``prefix`` (see docs/spec.md §25)."""

    async def ask(params: AskParams) -> dict[str, Any]:
        return {"answer": await gateway.ask(approval_request(params))}

    async def voted(params: PollParams) -> dict[str, Any]:
        wait = min(params.wait_seconds, MAX_WAIT_SECONDS)
        return {"answer": await gateway.poll(params.ask_id, wait_seconds=wait)}

    async def withdraw(params: WithdrawParams, *, by: str | None) -> dict[str, Any]:
        await gateway.withdraw(params.ask_id, params.reason, by=by)
        return {}

    async def owner(
        params: PollParams | WithdrawParams | TightenParams | AnsweredParams | VoteParams,
    ) -> Owner:
        return Owner(await gateway.agent_of(params.ask_id), f"ask {params.ask_id}")

    async def vote(params: VoteParams) -> dict[str, Any]:
        await gateway.submit_vote(params.ask_id, params.vote)
        # submit_vote refuses a vote on a question (WRONG_KIND): this ask is an approval or a call.
        asks = gateway.asks
        row = await asks.store.call(asks.get, params.ask_id)
        polled = gateway.poll_call if row.kind is AskKind.CALL else gateway.poll
        return {"answer": await polled(params.ask_id)}

    async def estimate(params: AskParams) -> dict[str, Any]:
        return {"estimate": await gateway.estimate(approval_request(params))}

    async def tighten(params: TightenParams) -> dict[str, Any]:
        return {"answer": await gateway.tighten(params.ask_id, parse_time(params.decide_by))}

    async def question(params: QuestionParams) -> dict[str, Any]:
        return {"answer": await gateway.ask_question(params.question)}

    async def call(params: CallParams) -> dict[str, Any]:
        return {"answer": await gateway.ask_call(params.request)}

    async def answered(params: AnsweredParams) -> dict[str, Any]:
        wait = min(params.wait_seconds, MAX_WAIT_SECONDS)
        if params.kind == "call":
            return {"answer": await gateway.poll_call(params.ask_id, wait_seconds=wait)}
        return {"answer": await gateway.poll_question(params.ask_id, wait_seconds=wait)}

    decision = Carrying("answer", (PendingVote, Approval))
    call_decision = Carrying("answer", (PendingVote, CallApproval))
    answer = Carrying("answer", (PendingVote, Answer))
    asks = f"{prefix}/asks"
    return [
        Operation(
            "POST",
            asks,
            "txn/ask",
            "Ask an approval group of a plan (a coordinator's request)",
            AskParams,
            ask,
            decision,
            ("ASK_INVALID", *_ROUTING, "STORE_UNAVAILABLE"),
            names_agent=lambda p: member(p, "plan", "initiator"),
        ),
        Operation(
            "GET",
            asks + "/{askId}",
            "txn/voted",
            "Poll an approval ask: the pending vote, or the Approval once decided",
            PollParams,
            voted,
            decision,
            ("ASK_UNKNOWN", "STORE_UNAVAILABLE"),
            query=("waitSeconds",),
            owned_by=owner,
        ),
        Operation(
            "POST",
            asks + "/{askId}/withdraw",
            "txn/withdraw",
            "Withdraw an ask nobody needs any more",
            WithdrawParams,
            withdraw,
            Carrying(None),
            ("ASK_UNKNOWN", "ASK_CONFLICT", "STORE_UNAVAILABLE"),
            owned_by=owner,
            takes_caller=True,
        ),
        Operation(
            "POST",
            asks + "/{askId}/tighten",
            "txn/tighten",
            "Move an open ask's deadline earlier",
            TightenParams,
            tighten,
            Carrying("answer", (PendingVote, Approval, CallApproval)),
            ("RESPONSE_REFUSED", "ASK_UNKNOWN", "ASK_CONFLICT", "STORE_UNAVAILABLE"),
            owned_by=owner,
        ),
        Operation(
            "POST",
            asks + "/{askId}/votes",
            "gateway/vote",
            "Deliver a person's signed vote on an approval or call ask (anyone may deliver it)",
            VoteParams,
            vote,
            Carrying("answer", (PendingVote, Approval, CallApproval)),
            (
                "RESPONSE_REFUSED",
                "ASK_UNKNOWN",
                "ASK_CONFLICT",
                "INVALID_JSON",
                "STORE_UNAVAILABLE",
            ),
            mcp=False,
            mcp_note="HTTP only: no MCP method carries it; a person's signed vote, checked by "
            "its signature whoever delivers it (docs/spec.md §19, §25)",
            owned_by=owner,
        ),
        Operation(
            "POST",
            f"{prefix}/estimate",
            "txn/estimate",
            "Estimate the chain of people an ask would reach, asking nobody",
            AskParams,
            estimate,
            Carrying("estimate", (ChainEstimate,)),
            ("ASK_INVALID", *_ROUTING),
            names_agent=lambda p: member(p, "plan", "initiator"),
        ),
        Operation(
            "POST",
            f"{prefix}/questions",
            "ask/question",
            "Ask a person a question (an agent's request)",
            QuestionParams,
            question,
            answer,
            ("QUESTION_INVALID", "ADDRESS_INVALID", "ASK_WITHDRAWN", "STORE_UNAVAILABLE"),
            names_agent=lambda p: member(p, "question", "asker"),
        ),
        Operation(
            "GET",
            f"{prefix}/questions/{{askId}}",
            "ask/answered",
            "Poll a question: the pending, or the signed Answer",
            AnsweredParams,
            answered,
            answer,
            ("ASK_UNKNOWN", "ASK_WITHDRAWN", "STORE_UNAVAILABLE"),
            query=("waitSeconds",),
            fixed={"kind": "question"},
            owned_by=owner,
        ),
        Operation(
            "POST",
            f"{prefix}/calls",
            "ask/call",
            "Ask people to approve one exact tool call (an agent's request)",
            CallParams,
            call,
            call_decision,
            ("CALL_INVALID", "VERSION_UNSUPPORTED", "STORE_UNAVAILABLE"),
            names_agent=lambda p: member(p, "request", "requester"),
        ),
        Operation(
            "GET",
            f"{prefix}/calls/{{askId}}",
            "ask/answered",
            "Poll a call ask: the pending vote, or the signed CallApproval",
            AnsweredParams,
            answered,
            call_decision,
            ("ASK_UNKNOWN", "STORE_UNAVAILABLE"),
            query=("waitSeconds",),
            fixed={"kind": "call"},
            owned_by=owner,
        ),
    ]
