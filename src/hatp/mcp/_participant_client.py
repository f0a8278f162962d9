"""A participant reached over MCP, as the coordinator sees it: :class:`McpParticipant`.

:func:`mcp_participant` checks what the server advertises (it must be the
participant the caller names, with keys the caller trusts) and returns an
object that implements :class:`hatp.participant.Participant` by sending the
``dev.hatp/txn/*`` requests. A refusal comes back as the same typed error the
participant raised; no answer at all (a timeout, a lost connection) is
:class:`~hatp.errors.ParticipantUnavailable`, which the coordinator treats as
"in doubt" and retries with the same idempotency key (txnId + branchId).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.client import Client
from pydantic import ValidationError

from hatp.errors import HatpError, ParticipantUnavailable
from hatp.evidence import Keyring
from hatp.mcp._advert import HatpAdvert, check_server
from hatp.mcp._rpc import request
from hatp.mcp._wire import METHODS
from hatp.model import BranchStatus, Plan, Preconditions

__all__ = ["McpParticipant", "mcp_participant"]


async def mcp_participant(
    participant_id: str,
    client: Client,
    keyring: Keyring,
    *,
    timeout: float | None = None,
) -> McpParticipant:
    """Check the MCP server behind ``client`` and return it as the participant ``participant_id``.

    ``client`` must be entered (``async with``) and built with
    ``extensions=[mcp.client.advertise(hatp.mcp.EXTENSION_ID)]``.

    Args:
        timeout: seconds to wait for each answer (the client's default if ``None``);
            no answer in time is :class:`~hatp.errors.ParticipantUnavailable`.

    Raises:
        PeerIncompatible: the server does not advertise the hatp extension, or not as
            the participant ``participant_id`` with keys trusted in ``keyring``
            (``data.reason``: ``NO_EXTENSION``, ``SETTINGS``, ``VERSION``, ``ROLE``,
            ``IDENTITY``, ``KEY_UNTRUSTED``).
    """
    advert = check_server(client, role="participant", server_id=participant_id, keyring=keyring)
    return McpParticipant(participant_id, client, advert, timeout=timeout)


class McpParticipant:
    """A :class:`~hatp.participant.Participant` on the other end of an MCP session.

    Build it with :func:`mcp_participant`, which checks the server first.
    Each call raises what the participant raised (see
    :class:`~hatp.participant.Participant`), plus:

    Raises:
        ParticipantUnavailable: no answer (timeout, lost connection), or an answer
            without the receipt, quote or status asked for: the request may have
            taken effect; ask again with the same ids.
        PeerIncompatible: reason ``METHOD``: the server does not serve the method
            with these params.
    """

    def __init__(
        self,
        participant_id: str,
        client: Client,
        advert: HatpAdvert,
        *,
        timeout: float | None = None,
    ) -> None:
        self._id = participant_id
        self._client = client
        self._advert = advert
        self._timeout = timeout

    @property
    def participant_id(self) -> str:
        """The participant's id, as the caller named it and the server advertises it."""
        return self._id

    @property
    def advert(self) -> HatpAdvert:
        """What the server advertised, checked."""
        return self._advert

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Send ``txn/prepare``; return the signed PrepareReceipt."""
        params = {"plan": plan.to_wire(), "branchId": branch_id, "fence": fence}
        return await self._member("txn/prepare", params, "receipt")

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        """Send ``txn/quote``; return the signed Quote."""
        params = {"plan": plan.to_wire(), "branchId": branch_id, "fence": fence}
        return await self._member("txn/quote", params, "quote")

    async def replace(self, plan: Plan, branch_id: str, fence: int, attempt: int) -> dict[str, Any]:
        """Send ``txn/replace``; return the signed PrepareReceipt of ``attempt``."""
        params = {"plan": plan.to_wire(), "branchId": branch_id, "fence": fence}
        return await self._member("txn/replace", {**params, "attempt": attempt}, "receipt")

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        """Send ``txn/commit``; return the signed commit receipt."""
        params = {
            **_branch(txn_id, branch_id, fence),
            "planDigest": plan_digest,
            "preconditions": None if preconditions is None else preconditions.to_wire(),
        }
        return await self._member("txn/commit", params, "receipt")

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Send ``txn/abort``; return the signed abort (or stored compensate) receipt."""
        return await self._member("txn/abort", _branch(txn_id, branch_id, fence), "receipt")

    async def compensate(
        self, txn_id: str, branch_id: str, fence: int, undo_token: str
    ) -> dict[str, Any]:
        """Send ``txn/compensate``; return the signed compensate receipt."""
        params = {**_branch(txn_id, branch_id, fence), "undoToken": undo_token}
        return await self._member("txn/compensate", params, "receipt")

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        """Send ``txn/renew``; return the signed RenewReceipt."""
        return await self._member("txn/renew", _branch(txn_id, branch_id, fence), "receipt")

    async def status(self, txn_id: str, branch_id: str) -> BranchStatus:
        """Send ``txn/status``; return where the branch stands."""
        found = await self._member("txn/status", {"txnId": txn_id, "branchId": branch_id}, "status")
        try:
            return BranchStatus.model_validate(found)
        except ValidationError as exc:
            raise self._garbled(
                "txn/status", f"a status that is not a BranchStatus: {exc}"
            ) from None

    async def _member(self, name: str, params: Mapping[str, Any], member: str) -> dict[str, Any]:
        answer = await request(
            self._client,
            METHODS[name],
            params,
            server=self._id,
            timeout=self._timeout,
            silence=self._silence,
        )
        found = answer.get(member)
        if not isinstance(found, dict):
            raise self._garbled(name, f"an answer without a {member!r} object")
        return found

    def _silence(self, why: str) -> HatpError:
        return ParticipantUnavailable(why, participant=self._id)

    def _garbled(self, name: str, what: str) -> HatpError:
        # Not a refusal: whatever the request did is unknown, so the coordinator
        # asks again rather than unwinding on a guess.
        return ParticipantUnavailable(
            f"{self._id} answered {METHODS[name]} with {what}", participant=self._id
        )


def _branch(txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
    return {"txnId": txn_id, "branchId": branch_id, "fence": fence}
