"""``@gated``: any Python function, sync or async, runs only with an approval of that call.

The decorator declares the function as a :class:`~hatp.gate.GatedTool` on an
:class:`~hatp.gate.ApprovalGate` and routes every call through
:meth:`ApprovalGate.run` (``async def``) or :meth:`ApprovalGate.run_sync`
(plain ``def``): the same checks, the same single use in the gate's
:class:`~hatp.store.UsedApprovals`, the same refusals as a gated MCP tool.

The call an approval binds is the function's arguments by parameter name,
defaults included (``{"card": ..., "amount": {...}, "payee": ...}``), so
only functions whose every parameter has a name can be gated (no ``*args``
or ``**kwargs``), and only with JSON values (str, int, float, bool, None,
lists and dicts with string keys).
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from hatp.errors import GateInvalid, InvalidJson
from hatp.evidence import canonicalize
from hatp.gate._gate import ApprovalGate
from hatp.gate._tools import GatedTool, Price, Requester
from hatp.model import CallRequirement

__all__ = ["GatedFunction", "gated"]

_log = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: The keyword-only parameters ``@gated`` adds; a gated function may not have its own.
ADDED = ("approval", "requester")


class GatedFunction(Protocol[R_co]):
    """A function ``@gated`` wrapped: called as before plus ``approval=`` and ``requester=``.

    ``ParamSpec`` cannot express "the function's own parameters plus two
    keyword-only ones", so the type checker sees ``*args, **kwargs`` here;
    ``inspect.signature`` shows the real signature. An ``async def`` function
    stays a coroutine function (its ``R_co`` is the coroutine).
    """

    @property
    def tool(self) -> GatedTool:
        """The declaration the gate holds for this function."""
        ...

    def __call__(
        self,
        *args: Any,
        approval: Mapping[str, Any] | None = None,
        requester: Requester,
        **kwargs: Any,
    ) -> R_co:
        """Run the function once ``approval`` (a signed CallApproval) is good for this call.

        Raises:
            ApprovalRequired: no approval; ``data.requirement`` says what to ask for.
            ApprovalInvalid: refused; ``data.reason`` says which check (``USED`` on a replay).
            CallInvalid: the arguments hold no amount where the tool declares one.
            InvalidJson: an argument is not JSON (``data.where`` names it).
            StoreUnavailable: the store failed before the claim.
            TypeError: the arguments do not fit the function's signature, or
                ``requester`` is not a :class:`~hatp.gate.Requester`.
            Exception: whatever the function raised (the approval stays used).
        """
        ...

    def arguments(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments object a call with these arguments binds (defaults included),
        as it goes into a CallRequest's ``call.arguments``.

        Raises:
            InvalidJson: an argument is not JSON.
            TypeError: the arguments do not fit the function's signature.
        """
        ...

    def requirement(self, *args: Any, **kwargs: Any) -> CallRequirement:
        """What to ask the Human Gateway for, to call with these arguments; nothing runs.

        Raises:
            CallInvalid: the arguments hold no amount where the tool declares one.
            InvalidJson: an argument is not JSON.
            TypeError: the arguments do not fit the function's signature.
        """
        ...


def gated(
    gate: ApprovalGate,
    address: str,
    *,
    action: str = "approve.call",
    amount: str | None = None,
    name: str | None = None,
    price: Callable[[Mapping[str, Any]], Price] | None = None,
) -> Callable[[Callable[..., R]], GatedFunction[R]]:
    """Gate a function on ``gate``: it runs only with an approval of exactly that call.

    ``address`` is who must approve (``human://acme.com/role/finance-approver``),
    ``action`` the authority they need, ``amount`` a JSON Pointer to the
    ``{value, currency}`` in the arguments their authority must cover, ``name``
    the tool name approvals name (the function's name by default), ``price``
    the server's own price for a call (see :class:`~hatp.gate.GatedTool`).
    No tool definition is bound: a plain function has no listing.

    Example::

        @gated(gate, "human://acme.com/role/finance-approver",
               action="approve.spend", amount="/amount")
        def charge_card(card: str, amount: dict[str, str], payee: str) -> str: ...

        charge_card.requirement(card, amount, payee)  # what to ask for
        charge_card(card, amount, payee, approval=approval, requester=requester)

    The decorated function takes two more keyword-only arguments:
    ``approval`` (the signed CallApproval, or ``None`` to learn what to ask
    for) and ``requester`` (who is calling, as your own authentication says:
    the agent and the person it acts for).

    Raises:
        GateInvalid: at decoration: the declaration is not one the gate takes
            (name, address, action, amount pointer, a tool of that name gated
            already), or the function has ``*args``/``**kwargs``, a parameter
            named ``approval`` or ``requester``, or no signature or name.
    """

    def decorate(fn: Callable[..., R]) -> GatedFunction[R]:
        tool_name = name or _name_of(fn)
        tool = GatedTool(tool_name, address, action=action, amount=amount, price=price)
        signature = _signature_of(fn, tool.name)
        try:  # after the signature passed: a refused function gates nothing
            gate.declare(tool)
        except GateInvalid as refused:
            _log.warning("cannot gate %s: %s", tool.name, refused.message)
            raise
        binder = _Binder(tool.name, signature)

        async def run_async(
            *args: Any,
            approval: Mapping[str, Any] | None = None,
            requester: Requester,
            **kwargs: Any,
        ) -> Any:
            call = binder.bind(args, kwargs, requester)
            body = functools.partial(_body, fn, call)
            return await gate.run(tool.name, call.arguments, approval, requester, body)

        def run_sync(
            *args: Any,
            approval: Mapping[str, Any] | None = None,
            requester: Requester,
            **kwargs: Any,
        ) -> Any:
            call = binder.bind(args, kwargs, requester)
            body = functools.partial(_body, fn, call)
            return gate.run_sync(tool.name, call.arguments, approval, requester, body)

        def arguments(*args: Any, **kwargs: Any) -> dict[str, Any]:
            return dict(binder.bind(args, kwargs).arguments)

        def requirement(*args: Any, **kwargs: Any) -> CallRequirement:
            needed = gate.requirement(tool.name, binder.bind(args, kwargs).arguments)
            assert needed is not None  # declared above, and a gate never forgets a tool
            return needed

        wrapper: Any = functools.wraps(fn)(
            run_async if inspect.iscoroutinefunction(fn) else run_sync
        )
        wrapper.__signature__ = signature.replace(
            parameters=[*signature.parameters.values(), *_ADDED_PARAMETERS]
        )
        wrapper.tool = tool
        wrapper.arguments = arguments
        wrapper.requirement = requirement
        gated_fn: GatedFunction[R] = wrapper
        return gated_fn

    return decorate


_ADDED_PARAMETERS = (
    inspect.Parameter(
        "approval", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Mapping[str, Any] | None,
    ),
    inspect.Parameter("requester", inspect.Parameter.KEYWORD_ONLY, annotation=Requester),
)  # fmt: skip


def _body(fn: Callable[..., R], call: inspect.BoundArguments, _: Mapping[str, Any]) -> R:
    """The function's own call, on the bound (checked and copied) arguments."""
    return fn(*call.args, **call.kwargs)


_UNSET = object()


class _Binder:
    """Turns one call's Python arguments into the JSON arguments object an approval binds."""

    def __init__(self, tool: str, signature: inspect.Signature) -> None:
        self._tool = tool
        self._signature = signature

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], requester: object = _UNSET
    ) -> inspect.BoundArguments:
        """Bind by name, defaults applied, each argument checked to be JSON, and copied:
        the body runs on exactly the values the approval was checked against, whatever
        the caller does to its own objects meanwhile.

        Raises:
            InvalidJson: an argument is not JSON (``data.where`` is ``/NAME``).
            TypeError: the arguments do not fit, or ``requester`` is given and not a
                :class:`Requester`.
        """
        if requester is not _UNSET and not isinstance(requester, Requester):
            raise TypeError(
                f"{self._tool}: requester must be a hatp.gate.Requester (the agent and the "
                f"person it acts for, as your authentication says), not {type(requester)!r}"
            )
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for key, value in bound.arguments.items():
            try:
                canonicalize(value)
            except InvalidJson as exc:
                _log.info("gated %s refused: argument %r is not JSON", self._tool, key)
                raise InvalidJson(
                    f"argument {key!r} of {self._tool} is not JSON ({exc.message}); a gated "
                    "function takes JSON values: str, int, float, bool, None, lists, "
                    "dicts with str keys",
                    where=f"/{key}",
                    tool=self._tool,
                ) from None
        return inspect.BoundArguments(self._signature, copy.deepcopy(bound.arguments))


def _name_of(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise _refuse(None, f"{fn!r} has no __name__; pass name= to @gated")
    return name


def _signature_of(fn: Callable[..., Any], tool: str) -> inspect.Signature:
    """The function's signature, if every parameter binds to a named JSON argument.

    Raises:
        GateInvalid: it has no signature, ``*args``/``**kwargs``, or a parameter
            ``@gated`` adds.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise _refuse(tool, f"its signature cannot be read ({exc})") from None
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise _refuse(
                tool,
                f"it takes {parameter}; an approval binds arguments by name, so give every "
                "parameter a name",
            )
        if parameter.name in ADDED:
            raise _refuse(
                tool,
                f"it has a parameter named {parameter.name!r}, which @gated adds; rename it",
            )
    return signature


def _refuse(tool: str | None, why: str) -> GateInvalid:
    _log.warning("cannot gate %s: %s", tool or "a function", why)
    return GateInvalid(f"@gated {tool or 'function'}: {why}", tool=tool)
