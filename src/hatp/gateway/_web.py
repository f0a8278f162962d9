"""The web channel: people answer their asks on the approver page, signed in with a passkey.

:class:`WebChannel` is the gateway's channel of type ``web``. It pushes
nothing: a person comes to the page, and the page reads what waits on them
from the gateway's durable asks (:func:`hatp.gateway._inbox.inbox`), so a
restarted gateway still shows every open ask. Delivering and withdrawing
only wake the pages waiting on that person. What a page compares is the
digest of the inbox as the store holds it (:meth:`WebApprovals.version`),
the same in every gateway process on one store; a change another process
made is seen at the next recheck.

:class:`WebApprovals` is what the page does for the person a session names
(:class:`~hatp.gateway.ApproverSessions`; never a name the page sends):
list their asks, show one, and record their response through the gateway
like any channel's. A vote on an approval group is signed by their passkey
over the vote's challenge (:func:`~hatp.gateway.vote_challenge`, with the
nonce the gateway issued them), so the gateway cannot make it alone; the
gateway checks it as [GW-PASSKEY] says. Where the channel holds an Ed25519
key of the person (``keys``, as a terminal does), the vote is signed with it
too, and a tool-call vote, which takes no passkey, is signed with it alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from webauthn import generate_authentication_options, options_to_json
from webauthn.helpers.structs import PublicKeyCredentialDescriptor, UserVerificationRequirement

from hatp._waiting import first_of
from hatp.clock import Clock
from hatp.evidence import SigningKey, digest
from hatp.evidence._b64 import b64url_decode
from hatp.gateway._channels import Notice, Responder
from hatp.gateway._gateway import HumanGateway
from hatp.gateway._inbox import AskProgress, inbox, notice_of, progress, waiting
from hatp.gateway._people import passkey_vote, sign_vote, vote_challenge
from hatp.gateway._responses import refused
from hatp.gateway._sessions import ApproverSessions
from hatp.model import HumanCard, WebAuthnKey

__all__ = ["WEB", "WebApprovals", "WebChannel"]

#: The channel type the approver page serves (a card's ``channels`` value).
WEB = "web"
#: The longest a page waits for its person's asks to change, in seconds.
MAX_WAIT_SECONDS = 30.0
#: How often a waiting page's inbox is read again when the gateway sets no recheck.
RECHECK_SECONDS = 2.0

Decision = Literal["approve", "reject"]


class WebChannel:
    """The ``web`` channel: it wakes the approver pages of the people it is told about.

    ``keys`` maps people to an Ed25519 key on their card that this gateway
    holds for them (as a terminal does): with one, their votes are signed with
    it as well as by their passkey, and they can vote on tool calls.
    """

    def __init__(self, clock: Clock, keys: Mapping[str, SigningKey] | None = None) -> None:
        self._clock = clock
        self._keys = dict(keys or {})
        self._changed: dict[str, asyncio.Event] = {}

    @property
    def channel_type(self) -> str:
        return WEB

    def key(self, human: str) -> SigningKey | None:
        """The Ed25519 key this channel holds for ``human``, if any."""
        return self._keys.get(human)

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        """The ask is read from the store when the person comes; wake their pages."""
        self._bump(notice.human)

    async def withdraw(self, ask_id: str, human: str) -> None:
        """The ask leaves the person's page; wake it."""
        self._bump(human)

    def watch(self, human: str) -> asyncio.Event:
        """An event set when this process next delivers or withdraws an ask of
        ``human``'s (take it before reading their inbox, so a change during the read
        is not missed)."""
        return self._changed.setdefault(human, asyncio.Event())

    async def wait(self, human: str, wake: datetime, watched: asyncio.Event | None = None) -> None:
        """Return when this process delivers or withdraws an ask of ``human``'s (since
        ``watched`` was taken from :meth:`watch`, else from now), or the clock reaches
        ``wake``."""
        event = self.watch(human) if watched is None else watched
        await first_of(event.wait(), self._clock.sleep_until(wake))

    def _bump(self, human: str) -> None:
        event = self._changed.pop(human, None)
        if event is not None:
            event.set()


class WebApprovals:
    """The approver page's work for a signed-in person: their asks, and their responses.

    Every method takes ``human`` from the caller's session
    (:meth:`ApproverSessions.session`), never from the request. The async methods
    use the store off the event loop; async code calls the plain ones through the
    store too (``await web.gateway.asks.store.call(web.inbox, human)``).
    """

    def __init__(
        self, gateway: HumanGateway, channel: WebChannel, sessions: ApproverSessions
    ) -> None:
        self.gateway = gateway
        self.channel = channel
        self.sessions = sessions
        # People asked over a push channel (webhook, e-mail) answer here too: a notice
        # there links to this page, and no channel carries a vote back ([EMAIL-NO-VOTE]).
        self._shown = frozenset({WEB, *gateway.push_channel_types})

    def inbox(self, human: str) -> list[Notice]:
        """The notices of every open ask that waits on ``human`` on the web, or over a
        push channel whose notices send them here, oldest first.

        Raises:
            StoreUnavailable: the store failed.
        """
        return inbox(self.gateway.asks, human, self._shown)

    def version(self, human: str) -> str:
        """The digest of ``human``'s inbox as the store holds it: each waiting ask's id
        and deadline and their entry in its routing. It moves whenever what their page
        lists does (an ask delivered, escalated, withdrawn, its deadline moved), and is
        the same in every gateway process. Read from the rows alone, without building a
        notice: a waiting page computes it at every recheck.

        Raises:
            StoreUnavailable: the store failed.
        """
        shown = [
            {"askId": row.ask_id, "decideBy": row.doc["decideBy"], "entry": entry}
            for row, entry in waiting(self.gateway.asks, human, self._shown)
        ]
        return digest({"inbox": shown})

    async def changed(self, human: str, since: str, wait_seconds: float) -> str:
        """Wait until ``human``'s inbox is no longer the version ``since``, or
        ``wait_seconds`` (at most :data:`MAX_WAIT_SECONDS`) pass on the clock; return
        the version now. A change this process makes wakes the wait at once; one
        another process made is seen at the next recheck (the gateway's
        ``recheck_seconds``, else :data:`RECHECK_SECONDS`).

        Raises:
            StoreUnavailable: the store failed.
        """
        clock = self.gateway.clock
        end = clock.now() + timedelta(seconds=min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS))
        every = timedelta(seconds=self.gateway.recheck_seconds or RECHECK_SECONDS)
        while True:
            watched = self.channel.watch(human)
            current = await self.gateway.asks.store.call(self.version, human)
            if current != since or clock.now() >= end:
                return current
            await self.channel.wait(human, min(end, clock.now() + every), watched)

    def ask(self, ask_id: str, human: str) -> tuple[Notice, AskProgress]:
        """``human``'s notice of ask ``ask_id`` and how the ask stands.

        Raises:
            AskUnknown: no such ask, or ``human`` was never asked on it (the same
                refusal, so the page tells nobody which asks exist).
            StoreUnavailable: the store failed.
        """
        row = self.gateway.asks.get(ask_id)
        return notice_of(row, human), progress(row)

    def vote_options(self, ask_id: str, human: str, decision: Decision) -> dict[str, Any]:
        """WebAuthn request options for ``human``'s passkey vote ``decision`` on the ask
        (``PublicKeyCredentialRequestOptionsJSON``): the challenge is the vote's
        (:func:`vote_challenge` of their notice's payload, the decision and their
        nonce); only their card's passkeys may answer; user verification required.

        Raises:
            AskUnknown: as :meth:`ask`.
            ResponseRefused: ``PASSKEY`` (``passkeyReason`` ``NONCE``): this ask gave
                them no nonce (a tool call, or they had no passkey when asked).
            ValueError: ``decision`` is neither approve nor reject.
        """
        notice, _ = self.ask(ask_id, human)
        if notice.nonce is None:
            raise refused(
                ask_id,
                human,
                "PASSKEY",
                "this ask takes no passkey vote: it is a tool call, or you had no passkey "
                "on your card when you were asked",
                passkeyReason="NONCE",
            )
        challenge = vote_challenge(notice.payload, decision, notice.nonce)
        card = self.gateway.card(human)
        options = generate_authentication_options(
            rp_id=self.sessions.rp_id,
            challenge=challenge,
            allow_credentials=[
                PublicKeyCredentialDescriptor(id=b64url_decode(key.credential_id))
                for key in _passkeys(card)
            ],
            user_verification=UserVerificationRequirement.REQUIRED,
        )
        doc: dict[str, Any] = json.loads(options_to_json(options))
        return doc

    async def vote(
        self,
        ask_id: str,
        human: str,
        decision: Decision,
        credential: Mapping[str, Any] | None,
    ) -> AskProgress:
        """Record ``human``'s vote: signed by their passkey (``credential``: the browser's
        answer to :meth:`vote_options`), and by the Ed25519 key the channel holds for
        them if any; without a credential, by that key alone. Return how the ask stands.

        Raises:
            AskUnknown: as :meth:`ask`.
            ResponseRefused: what the gateway refuses ([GW-VOTE-*], [GW-PASSKEY]), or
                ``SHAPE`` (the credential is not an assertion response), ``SIGNATURE``
                (no credential, and no key to sign with), ``PASSKEY`` ``KEY_UNKNOWN``
                (the credential is no passkey on their card); nothing was recorded.
            StoreUnavailable: the store failed; nothing was recorded.
        """
        notice, _ = await self.gateway.asks.store.call(self.ask, ask_id, human)
        key = self.channel.key(human)
        now = self.gateway.clock.now()
        if credential is not None:
            kid = _kid_of(self.gateway.card(human), credential)
            if kid is None:
                raise refused(
                    ask_id,
                    human,
                    "PASSKEY",
                    "the passkey that answered is not one on your card: use the one you registered",
                    passkeyReason="KEY_UNKNOWN",
                )
            if notice.nonce is None:
                raise refused(
                    ask_id,
                    human,
                    "PASSKEY",
                    "this ask gave you no nonce to sign over: it takes no passkey vote",
                    passkeyReason="NONCE",
                )
            try:
                vote = passkey_vote(
                    notice.payload, decision, notice.nonce, credential, now, kid=kid, key=key
                )
            except ValueError as exc:
                raise refused(ask_id, human, "SHAPE", str(exc)) from None
        elif key is not None:
            vote = sign_vote(key, notice.payload, decision, now)
        else:
            raise refused(
                ask_id,
                human,
                "SIGNATURE",
                "sign this vote with your passkey: this gateway holds no key of yours to "
                "sign it with",
            )
        await self.gateway.submit_vote(ask_id, vote)
        return await self._progress(ask_id)

    async def answer(self, ask_id: str, human: str, value: Any) -> AskProgress:
        """Record ``human``'s answer to a question; return how the ask stands.

        Raises:
            AskUnknown: as :meth:`ask`.
            AnswerInvalid: the answer does not fit the question (the reason says why);
                the question stays open.
            ResponseRefused: ``WRONG_KIND``, ``CLOSED``, ``LATE`` or ``NOT_ASKED``.
            StoreUnavailable: the store failed.
        """
        await self.gateway.asks.store.call(self.ask, ask_id, human)
        await self.gateway.submit_answer(ask_id, human, value)
        return await self._progress(ask_id)

    async def decline(self, ask_id: str, human: str) -> AskProgress:
        """Pass the ask on from ``human`` ([GW-DECLINE]); return how it stands.

        Raises:
            AskUnknown: as :meth:`ask`.
            ResponseRefused: ``CLOSED`` or ``NOT_ASKED``.
            StoreUnavailable: the store failed.
        """
        await self.gateway.asks.store.call(self.ask, ask_id, human)
        await self.gateway.decline(ask_id, human)
        return await self._progress(ask_id)

    async def _progress(self, ask_id: str) -> AskProgress:
        asks = self.gateway.asks
        return progress(await asks.store.call(asks.get, ask_id))


def _passkeys(card: HumanCard | None) -> list[WebAuthnKey]:
    return [] if card is None else [k for k in card.keys if isinstance(k, WebAuthnKey)]


def _kid_of(card: HumanCard | None, credential: Mapping[str, Any]) -> str | None:
    """The kid of the passkey on ``card`` that made ``credential``, if any."""
    credential_id = credential.get("id") if isinstance(credential, Mapping) else None
    return next((k.kid for k in _passkeys(card) if k.credential_id == credential_id), None)
