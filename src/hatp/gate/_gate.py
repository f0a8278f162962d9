"""The approval gate: a gated tool runs once, with an approval for exactly that call.

A tool server builds one :class:`ApprovalGate` from its gated tools, the
gateways and directories it trusts, and a durable
:class:`~hatp.store.UsedApprovals`. :meth:`ApprovalGate.run` refuses a call
with no approval (``APPROVAL_REQUIRED``, saying what to ask for), checks the
approval (:func:`hatp.gate._rules.check_approval`), claims its single use in
the store, and only then runs the tool: the claim is durable before the tool
starts, so a crash mid-run can never let the approval run the tool twice.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from hatp import _checks
from hatp.clock import Clock, format_time, parse_time
from hatp.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    GateInvalid,
    HatpError,
    StoreUnavailable,
)
from hatp.evidence import Keyring, call_digest, tool_digest
from hatp.gate._cards import VerifiedCards
from hatp.gate._rules import Call, check_approval
from hatp.gate._tools import GatedTool, Price, Requester, Tools, _Declared, declare
from hatp.model import CallApproval, CallRequirement, PriceCap, read_amount
from hatp.store import UsedApprovals, UseOutcome

__all__ = ["ApprovalGate", "CheckedApproval", "GateObserver"]

_log = logging.getLogger(__name__)


class GateObserver(Protocol):
    """Told of each gated call :meth:`ApprovalGate.run` checked (metrics, say)."""

    def gate_checked(self, tool: str, refused: HatpError | None) -> None:
        """``tool``'s call passed (``refused`` None) or was refused with ``refused``."""


T = TypeVar("T")

#: The most clock skew a gate may allow, and the longest approval it may accept.
MAX_SKEW_SECONDS = 300
MAX_LIFETIME_SECONDS = 86_400


@dataclass(frozen=True)
class CheckedApproval:
    """An approval that passed every check for one call; not yet used."""

    approval: CallApproval
    call: Call

    @property
    def approval_id(self) -> str:
        """The approval's single-use id."""
        return self.approval.approval_id


class ApprovalGate:
    """One tool server's gate: which tools need approval, whom it trusts, what was used.

    ``gateways`` holds the keys of the Human Gateways the server trusts (a key
    of an issuer the keyring does not trust is refused as
    ``UNTRUSTED_GATEWAY``); ``directories`` the keys of the directories whose
    cards it trusts. ``skew_seconds`` is how far the gateway's clock may be
    from the server's; ``max_lifetime_seconds`` the longest validity window
    the server accepts, however long the gateway granted.
    """

    def __init__(
        self,
        server_id: str,
        tools: Iterable[GatedTool],
        *,
        gateways: Keyring,
        directories: Keyring,
        used: UsedApprovals,
        clock: Clock,
        skew_seconds: float = 30,
        max_lifetime_seconds: int = 3600,
        observer: GateObserver | None = None,
    ) -> None:
        if not server_id or server_id != server_id.strip() or " " in server_id:
            raise GateInvalid(f"server id {server_id!r} must be a non-empty id with no spaces")
        if not 0 <= skew_seconds <= MAX_SKEW_SECONDS:
            raise GateInvalid(f"skew_seconds must be within 0..{MAX_SKEW_SECONDS}")
        if not 1 <= max_lifetime_seconds <= MAX_LIFETIME_SECONDS:
            raise GateInvalid(f"max_lifetime_seconds must be within 1..{MAX_LIFETIME_SECONDS}")
        self._server = server_id
        self._tools = Tools(tools)
        self._gateways = gateways
        self._cards = VerifiedCards(directories)
        self._used = used
        self._clock = clock
        self._skew = timedelta(seconds=skew_seconds)
        self._max_lifetime = timedelta(seconds=max_lifetime_seconds)
        self._observer = observer

    @property
    def server_id(self) -> str:
        """The server id approvals must name."""
        return self._server

    @property
    def tools(self) -> list[GatedTool]:
        """The gated tools as declared, by name."""
        return [
            declared.tool for name in self._tools.names() if (declared := self._tools.get(name))
        ]

    @property
    def clock(self) -> Clock:
        """The clock the gate checks approvals on."""
        return self._clock

    @property
    def max_lifetime_seconds(self) -> int:
        """The longest validity window the gate accepts."""
        return int(self._max_lifetime.total_seconds())

    @property
    def trusted_gateways(self) -> list[str]:
        """The ids of the gateways whose approvals this server accepts, sorted."""
        return self._gateways.trusted_issuers

    def gated(self, tool: str) -> bool:
        """Whether ``tool`` runs only with an approval."""
        return self._tools.get(tool) is not None

    def declare(self, tool: GatedTool) -> None:
        """Gate one more tool, from now on (the ``@gated`` decorators use this).

        Raises:
            GateInvalid: the declaration is not one a gate takes, or the tool is gated already.
        """
        self._tools.add(declare(tool))

    def requirement(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        definition: Mapping[str, Any] | None = None,
    ) -> CallRequirement | None:
        """Return what to ask the gateway for to call ``tool`` with ``arguments``
        (``None``: the tool is not gated). ``definition`` is the tool as the server
        lists it now; without it, the declared definition (if any) is bound.

        Raises:
            CallInvalid: reason ``AMOUNT``: the arguments hold no amount where
                the tool declares one.
            InvalidJson: the arguments or the definition have no canonical JSON form.
        """
        declared = self._tools.get(tool)
        if declared is None:
            return None
        return self._requirement(
            self._call(declared, arguments, Requester("", ""), definition=definition)
        )

    def _requirement(self, call: Call) -> CallRequirement:
        declared = call.declared
        return CallRequirement(
            server=self._server,
            tool=call.tool,
            call_digest=call.call_digest,
            tool_digest=call.tool_digest,
            address=str(declared.address),
            action=declared.tool.action,
            amount_pointer=declared.tool.amount,
            amount=call.amount,
            price=None
            if call.price is None
            else PriceCap(max_amount=call.price.amount, pay_to=call.price.pay_to),
            max_lifetime_seconds=int(self._max_lifetime.total_seconds()),
        )

    def check(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        approval: Mapping[str, Any] | None,
        requester: Requester,
        *,
        definition: Mapping[str, Any] | None = None,
    ) -> CheckedApproval:
        """Check ``approval`` for this call without using it. ``definition`` is the tool
        as the server lists it now (bound when given; else the declared one, if any).

        Raises:
            GateInvalid: ``tool`` is not gated (run it without an approval).
            ApprovalRequired: no approval; ``data.requirement`` says what to ask for.
            ApprovalInvalid: refused; ``data.reason`` says which check.
            CallInvalid: the arguments hold no amount where the tool declares one.
        """
        declared = self._tools.get(tool)
        if declared is None:
            raise GateInvalid(f"tool {tool!r} is not gated; call it without an approval", tool=tool)
        call = self._call(declared, arguments, requester, definition=definition)
        if approval is None:
            raise ApprovalRequired(
                f"{tool} needs an approval from {declared.address}; ask the Human Gateway for "
                "exactly this call and call again with it",
                tool=tool,
                requirement=self._requirement(call).to_wire(),
            )
        return CheckedApproval(check_approval(call, approval), call)

    def use(self, checked: CheckedApproval) -> None:
        """Claim the approval's single use, durably, before the tool runs. [GATE-ONCE]

        Raises:
            ApprovalInvalid: reason ``USED``: it was used before, by any process.
            StoreUnavailable: the store failed; the approval is not used.
        """
        approval, call = checked.approval, checked.call
        prior = self._used.claim(
            approval.approval_id,
            server=call.server,
            tool=call.tool,
            call_digest=call.call_digest,
            expires_at=parse_time(approval.expires_at),
            now=self._clock.now(),
        )
        if prior is not None and _checks.is_on("GATE-ONCE"):
            outcome = "its outcome is unknown" if prior.outcome is None else prior.outcome.value
            people = ", ".join(dict.fromkeys(approval.approvers))
            raise ApprovalInvalid(
                f"approval {approval.approval_id} by {people} was already used at "
                f"{format_time(prior.used_at)} ({outcome}); an approval works once: ask again",
                reason="USED",
                rule="GATE-ONCE",
                approval_id=approval.approval_id,
                used_at=format_time(prior.used_at),
            )

    async def run(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        approval: Mapping[str, Any] | None,
        requester: Requester,
        fn: Callable[[Mapping[str, Any]], Awaitable[T] | T],
        *,
        definition: Mapping[str, Any] | None = None,
    ) -> T:
        """Run ``fn(arguments)`` once the call may run; return what it returns.

        A tool that is not gated runs at once. A gated one runs only after
        :meth:`check` passed and :meth:`use` claimed the approval; the outcome
        (ran or failed) is recorded against the approval afterwards (if the
        store fails at that point, the outcome stays unknown; the approval
        stays used). ``definition`` is the tool as the server lists it now.

        Raises:
            ApprovalRequired, ApprovalInvalid, CallInvalid: refused; ``fn`` did not run.
            StoreUnavailable: the store failed before the claim; ``fn`` did not run.
            Exception: whatever ``fn`` raised (the approval stays used).
        """
        if not self.gated(tool):
            return await _result(fn(arguments))
        checked = self._admit(tool, arguments, approval, requester, definition)
        try:
            result = await _result(fn(arguments))
        except BaseException as exc:
            self._finish(checked, UseOutcome.FAILED, repr(exc)[:500])
            raise
        self._finish(checked, UseOutcome.RAN, None)
        return result

    def run_sync(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        approval: Mapping[str, Any] | None,
        requester: Requester,
        fn: Callable[[Mapping[str, Any]], T],
        *,
        definition: Mapping[str, Any] | None = None,
    ) -> T:
        """:meth:`run` for a plain function, on the caller's thread; the same checks,
        the same single use, the same refusals."""
        if not self.gated(tool):
            return fn(arguments)
        checked = self._admit(tool, arguments, approval, requester, definition)
        try:
            result = fn(arguments)
        except BaseException as exc:
            self._finish(checked, UseOutcome.FAILED, repr(exc)[:500])
            raise
        self._finish(checked, UseOutcome.RAN, None)
        return result

    def _admit(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        approval: Mapping[str, Any] | None,
        requester: Requester,
        definition: Mapping[str, Any] | None,
    ) -> CheckedApproval:
        """Check the approval and claim its single use; tell the observer either way."""
        try:
            checked = self.check(tool, arguments, approval, requester, definition=definition)
            self.use(checked)
        except HatpError as error:
            self._tell(tool, error)
            raise
        self._tell(tool, None)
        return checked

    def _tell(self, tool: str, refused: HatpError | None) -> None:
        if refused is not None:
            _log.info("gate %s refused %s: %s", self._server, tool, refused.code)
        if self._observer is None:
            return
        try:
            self._observer.gate_checked(tool, refused)
        except Exception:  # watching must not change what the gate does
            _log.warning("gate %s: its observer failed", self._server, exc_info=True)

    def _finish(self, checked: CheckedApproval, outcome: UseOutcome, detail: str | None) -> None:
        # The tool has run (or failed) by now: a store failure here must not stand in
        # for what the tool did. The approval stays used, its outcome unknown.
        with contextlib.suppress(StoreUnavailable):
            self._used.finish(checked.approval_id, outcome, detail, self._clock.now())

    def _call(
        self,
        declared: _Declared,
        arguments: Mapping[str, Any],
        requester: Requester,
        *,
        definition: Mapping[str, Any] | None = None,
    ) -> Call:
        tool = declared.tool.name
        pointer = declared.tool.amount
        price_of = declared.tool.price
        price = None if price_of is None else _price(tool, price_of, arguments)
        return Call(
            declared=declared,
            server=self._server,
            arguments=arguments,
            requester=requester,
            call_digest=call_digest(self._server, tool, arguments),
            amount=None if pointer is None else read_amount(arguments, pointer),
            price=price,
            now=self._clock.now(),
            skew=self._skew,
            max_lifetime=self._max_lifetime,
            gateways=self._gateways,
            cards=self._cards,
            tool_digest=declared.tool_digest if definition is None else tool_digest(definition),
        )


def _price(
    tool: str, price_of: Callable[[Mapping[str, Any]], Price], args: Mapping[str, Any]
) -> Price:
    try:
        price = price_of(args)
    except HatpError:
        raise
    except Exception as exc:  # the server's own code: say where it failed
        raise GateInvalid(
            f"the price function of {tool!r} failed on these arguments: {exc!r}", tool=tool
        ) from exc
    if not isinstance(price, Price):
        raise GateInvalid(f"the price of {tool!r} is not a Price: {price!r}", tool=tool)
    return price


async def _result(value: Awaitable[T] | T) -> T:
    if inspect.isawaitable(value):
        return await value
    return value
