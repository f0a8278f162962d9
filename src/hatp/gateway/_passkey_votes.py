"""[GW-PASSKEY] what the gateway checks of a vote's passkey assertion before it counts.

An approval group that needs a passkey (its requirement's ``passkey``: true,
or a threshold the group's amount is above) was routed only to people with
a passkey on their card ([DIR-PASSKEY]), and each of them got a nonce when
asked. An approve vote in such a group counts only with an assertion of the
voter's passkey over the vote's challenge (:func:`hatp.gateway.vote_challenge`)
made with that nonce; a reject needs none (a no always counts). Any vote that
carries an assertion has it checked, required or not:

1. it names a passkey on the voter's current card (``KEY_UNKNOWN``);
2. its nonce is the one this ask issued this person (``NONCE``) and no vote
   spent it yet (``NONCE_USED``);
3. it verifies (:func:`hatp.evidence.verify_passkey`): client data of type
   ``webauthn.get``, this vote's challenge, an origin the gateway serves and
   that fits the rpId, not cross-origin, the rpId hash, user presence and
   verification, a sign count above the last one kept, the ES256 signature.

Each refusal is ``RESPONSE_REFUSED`` reason ``PASSKEY`` with
``data.passkeyReason`` the step's reason (:data:`hatp.errors.PASSKEY_REASONS`).
What passes returns a :class:`Spend`: the nonce to spend and the count to
keep, written in the same transaction as the vote ([STORE-PASSKEY-NONCE],
[STORE-PASSKEY-COUNT]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from hatp import _checks
from hatp.errors import HatpError, PasskeyInvalid
from hatp.evidence import digest, verify_passkey
from hatp.gateway._responses import refused
from hatp.model import HumanCard, HumanVote
from hatp.store import AskKind, AskRow, PasskeyBook

__all__ = ["Spend", "check_passkey"]


@dataclass(frozen=True)
class Spend:
    """What recording a passkey vote writes besides the ask: its nonce, spent, and the
    passkey's new sign count."""

    book: PasskeyBook
    nonce: str
    ask_id: str
    human: str
    credential_id: str
    sign_count: int
    vote_digest: str
    now: datetime

    def __call__(self, conn: Connection) -> None:
        """Write both in the caller's transaction.

        Raises:
            ResponseRefused: reason ``PASSKEY`` (``NONCE_USED``, ``SIGN_COUNT``): another
                vote got there first; the transaction rolls back.
        """
        try:
            self.book.use_nonce_txn(
                conn,
                self.nonce,
                ask_id=self.ask_id,
                human=self.human,
                vote_digest=self.vote_digest,
                now=self.now,
            )
            self.book.advance_count_txn(
                conn, self.human, self.credential_id, self.sign_count, self.now
            )
        except PasskeyInvalid as exc:
            raise _refused(self.ask_id, self.human, exc.reason, exc.message) from None


def check_passkey(
    row: AskRow,
    entry: Mapping[str, Any] | None,
    vote: Mapping[str, Any],
    parsed: HumanVote,
    card: HumanCard | None,
    *,
    book: PasskeyBook,
    origins: Sequence[str] | None,
    now: datetime,
) -> Spend | None:
    """[GW-PASSKEY] check the vote's passkey assertion, and that an approve in a group
    that needs one has it; return what to write with the vote (``None``: no assertion).

    ``entry`` is the voter's entry in the ask; ``origins`` the origins the
    gateway serves (``None``: any that fits the passkey's rpId).

    Raises:
        ResponseRefused: reason ``PASSKEY``, ``data.passkeyReason`` the step that failed.
    """
    if not _checks.is_on("GW-PASSKEY"):
        return None
    ask_id, human = row.ask_id, parsed.human
    needed = row.kind is AskKind.APPROVAL and bool(row.doc.get("passkey"))
    assertion = parsed.passkey
    if assertion is None:
        if needed and parsed.decision == "approve":
            raise _refused(
                ask_id,
                human,
                "REQUIRED",
                f"group {row.group_id} needs the approver's passkey: sign the vote's "
                "challenge with the passkey on your card (an approve without it does not count)",
            )
        return None
    if row.kind is not AskKind.APPROVAL or card is None:
        raise _refused(
            ask_id,
            human,
            "KEY_UNKNOWN",
            "a passkey vote goes to an approval group's ask, by someone whose card the "
            "directory has",
        )
    issued = None if entry is None else entry.get("nonce")
    if assertion.nonce != issued:
        raise _refused(
            ask_id,
            human,
            "NONCE",
            f"the assertion's nonce is not the one ask {ask_id} issued {human}; sign over "
            "the nonce of your own notice",
        )
    if book.is_used(assertion.nonce):
        raise _refused(
            ask_id, human, "NONCE_USED", f"nonce {assertion.nonce} was spent by a vote already"
        )
    try:
        verified = verify_passkey(
            vote,
            card,
            origins=origins,
            sign_count=book.sign_count(human, assertion.credential_id),
        )
    except PasskeyInvalid as exc:
        raise _refused(ask_id, human, exc.reason, exc.message) from None
    return Spend(
        book,
        assertion.nonce,
        ask_id,
        human,
        verified.credential_id,
        verified.sign_count,
        digest(dict(vote)),
        now,
    )


def _refused(ask_id: str, human: str, reason: str, message: str) -> HatpError:
    return refused(ask_id, human, "PASSKEY", message, passkeyReason=reason)
