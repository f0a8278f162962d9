"""The approval side as the coordinator sees it: a :class:`Gateway` it asks and polls.

The Human Gateway (:class:`hatp.gateway.HumanGateway`) routes each ask to
people, who may take hours. So an ask usually answers with a signed
*pending vote* naming the ask, and the coordinator polls that ask until the
gateway signs the group's final :class:`~hatp.model.Approval`, or the plan's
``decideBy`` passes. The coordinator also asks the gateway how long the worst
case along a group's escalation chain is (``estimate``), and tells it when
the approval deadline moves earlier to fit inside the holds (``tighten``).
A poll returns as soon as the ask is decided, which is how an in-process
gateway notifies the coordinator without a busy loop.

Each organisation has its own Human Gateway, with its own directory and key.
:class:`GatewayRoutes` is a gateway made of several: an approval group is asked
at the gateway of its address's organisation, else at the default one
[COORD-GATEWAYS], and :func:`gateway_for` says which gateway that is, so that
the group's answers are checked as signed by that gateway's key.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from hatp.errors import AddressInvalid, AskUnknown
from hatp.model import ApprovalGroup, Plan, parse_address

_log = logging.getLogger(__name__)

__all__ = [
    "ApprovalRequest",
    "Gateway",
    "GatewayRoutes",
    "every_gateway",
    "gateway_for",
    "withdraw_open_asks",
]

#: How many ask ids a :class:`GatewayRoutes` remembers the gateway of (the oldest
#: forgotten first); a forgotten one is asked at its group's gateway instead.
_REMEMBERED_ASKS = 10_000


@dataclass(frozen=True)
class ApprovalRequest:
    """One ask: this approval group, about this plan, answered by ``decide_by``.

    ``terms`` (holds-first mode) is the HoldTerms wire dict people approve with
    the plan: the holds' end times and the approval deadline that fits inside
    them. Their votes and the approval carry its digest (``termsDigest``).
    """

    txn_id: str
    plan: Plan
    plan_digest: str
    group: ApprovalGroup
    decide_by: datetime
    terms: dict[str, Any] | None = None


class Gateway(Protocol):
    """Where the coordinator asks for approvals."""

    @property
    def gateway_id(self) -> str:
        """The gateway's id; its signing key's issuer in the keyring."""
        ...

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask the group; return a signed PendingVote, or the signed final Approval.

        Asking again for the same transaction, group and plan returns the same ask.
        """
        ...

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Return the signed PendingVote while the ask is open, else the final Approval.

        Waits up to ``wait_seconds`` (on the gateway's clock) for a decision
        and returns as soon as there is one.
        """
        ...

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Withdraw an ask the transaction no longer needs; a decided ask stays decided."""
        ...

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw every open ask about the transaction, whether or not its asker
        logged it; return their ids. A decided ask stays decided."""
        ...

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the signed ChainEstimate of asking the group: the worst case along
        its escalation chain, nobody answering. Asks nobody."""
        ...

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a person a question (§19); return the signed pending, or the signed Answer.
        The coordinator asks one when it brings a person in [COORD-ESCALATE]."""
        ...

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Move an open ask's deadline earlier (never later); return the signed
        PendingVote with the deadline now in force, or the final Approval."""
        ...


class GatewayRoutes:
    """Several organisations' gateways as one: each approval group is asked at the
    gateway of its address's organisation, else at ``default`` [COORD-GATEWAYS].

    It is a :class:`Gateway` itself, so a coordinator given one works unchanged:
    ``gateway_id`` is the default's; :meth:`ask` and :meth:`estimate` go by the
    request's group (:meth:`route`); :meth:`poll`, :meth:`withdraw` and
    :meth:`tighten` go to the gateway that answered the ask
    (its ``askId``, remembered for the last asks this process made);
    :meth:`withdraw_transaction` asks every gateway; :meth:`ask_question` the
    default. The coordinator itself asks each group at :func:`gateway_for`, and
    checks the group's answers as signed by that gateway.

    Args:
        default: where a group of an organisation not named is asked.
        by_organisation: the gateway of each organisation, by its bare domain
            (``globex.com``, as in ``human://globex.com/role/partner-approver``;
            compared in lower case, as addresses write it).

    Raises:
        ValueError: a key is not a bare domain (a DNS name: no scheme, port, path,
            query or ``@``), or names an organisation another key names too.
    """

    def __init__(self, default: Gateway, by_organisation: Mapping[str, Gateway]) -> None:
        routes: dict[str, Gateway] = {}
        for name, gateway in by_organisation.items():
            org = _bare_domain(name)
            if org in routes:
                raise ValueError(
                    f"organisation {org!r} is named twice in by_organisation "
                    f"({name!r} is another spelling of it): name each organisation once"
                )
            routes[org] = gateway
        self._default = default
        self._routes = routes
        every: list[Gateway] = []
        for gateway in (default, *routes.values()):
            if not any(gateway is seen for seen in every):
                every.append(gateway)
        self._every = tuple(every)
        self._asked: OrderedDict[str, Gateway] = OrderedDict()

    @property
    def gateway_id(self) -> str:
        """The default gateway's id."""
        return self._default.gateway_id

    @property
    def gateways(self) -> tuple[Gateway, ...]:
        """Every distinct gateway, the default first."""
        return self._every

    def route(self, group: ApprovalGroup) -> Gateway:
        """The gateway ``group`` is asked at: its address's organisation's, else the
        default (also for an address that does not parse: the default refuses it)."""
        try:
            org = parse_address(group.address).org
        except AddressInvalid:
            return self._default
        return self._routes.get(org, self._default)

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask the group at its gateway (:meth:`route`); remember which gateway holds the ask."""
        gateway = self.route(request.group)
        return self._remember(gateway, await gateway.ask(request))

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Poll the ask at the gateway that answered it.

        Raises:
            AskUnknown: these routes did not ask it, and have more than one gateway.
        """
        gateway = self._holder(ask_id)
        return self._remember(gateway, await gateway.poll(ask_id, wait_seconds=wait_seconds))

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Withdraw the ask at the gateway that answered it.

        Raises:
            AskUnknown: these routes did not ask it, and have more than one gateway.
        """
        await self._holder(ask_id).withdraw(ask_id, reason)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw the transaction's open asks at every gateway; return all their ids.

        Every gateway is asked even when one fails; then the first failure is raised.
        """
        answers = await asyncio.gather(
            *(g.withdraw_transaction(txn_id, reason) for g in self._every),
            return_exceptions=True,
        )
        withdrawn: list[str] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            withdrawn.extend(answer)
        return withdrawn

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """The group's chain estimate, from its gateway (:meth:`route`)."""
        return await self.route(request.group).estimate(request)

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask the question at the default gateway."""
        return await self._default.ask_question(question)

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Tighten the ask at the gateway that answered it.

        Raises:
            AskUnknown: these routes did not ask it, and have more than one gateway.
        """
        gateway = self._holder(ask_id)
        return self._remember(gateway, await gateway.tighten(ask_id, decide_by))

    def _remember(self, gateway: Gateway, answer: dict[str, Any]) -> dict[str, Any]:
        ask_id = answer.get("askId")
        if isinstance(ask_id, str):
            self._asked[ask_id] = gateway
            self._asked.move_to_end(ask_id)
            while len(self._asked) > _REMEMBERED_ASKS:
                self._asked.popitem(last=False)
        return answer

    def _holder(self, ask_id: str) -> Gateway:
        """The gateway that answered ``ask_id``. One these routes never asked (asked by
        another process, or before a restart) is not guessed at among several gateways."""
        gateway = self._asked.get(ask_id)
        if gateway is not None:
            return gateway
        if len(self._every) == 1:
            return self._default
        raise AskUnknown(
            f"ask {ask_id} was not asked through these gateway routes, so which of their "
            f"{len(self._every)} gateways holds it is not known: ask it at its approval "
            "group's gateway (gateway_for(routes, group))",
            ask_id=ask_id,
            gateways=[g.gateway_id for g in self._every],
        )


def gateway_for(gateway: Gateway, group: ApprovalGroup) -> Gateway:
    """The gateway ``group`` is asked at, and whose key signs its answers
    [COORD-GATEWAYS]: the routed one of a :class:`GatewayRoutes`, else ``gateway``."""
    if isinstance(gateway, GatewayRoutes):
        return gateway.route(group)
    return gateway


def every_gateway(gateway: Gateway) -> tuple[Gateway, ...]:
    """Every distinct gateway behind ``gateway``: those of a :class:`GatewayRoutes`
    (the default first), else ``gateway`` alone."""
    if isinstance(gateway, GatewayRoutes):
        return gateway.gateways
    return (gateway,)


async def withdraw_open_asks(gateways: Iterable[Gateway], txn_id: str, reason: str) -> None:
    """Have each gateway withdraw every ask of ``txn_id`` it still holds open
    [COORD-WITHDRAW]; one that fails does not stop the others (it withdraws its asks
    at their deadline on its own), and is logged."""
    for gateway in gateways:
        try:
            withdrawn = await gateway.withdraw_transaction(txn_id, reason)
        except Exception as exc:
            _log.warning(
                "txn %s: its asks at %s could not be withdrawn now: %s",
                txn_id,
                gateway.gateway_id,
                exc,
            )
            continue
        if withdrawn:
            _log.info("txn %s: withdrew asks %s", txn_id, ", ".join(withdrawn))


def _bare_domain(name: str) -> str:
    """``name`` as an organisation, lower-cased, as addresses name it (``globex.com``).

    Raises:
        ValueError: it is not a DNS name (a scheme, port, path, user or blank).
    """
    if not isinstance(name, str):
        raise ValueError(f"by_organisation key {name!r} is not a domain name (a string)")
    org = name.lower()
    try:
        parsed = parse_address(f"human://{org}/someone")
    except AddressInvalid as exc:
        raise ValueError(
            f"by_organisation key {name!r} is not a bare domain like globex.com: {exc.message}"
        ) from None
    if parsed.org != org:
        raise ValueError(
            f"by_organisation key {name!r} is not a bare domain like globex.com "
            "(no scheme, port, path or query)"
        )
    return org
