"""The person's side of an ask: what their device or channel signs.

:func:`sign_vote` signs a vote with the Ed25519 key on the person's card.
:func:`passkey_vote` builds a vote from their passkey's assertion (the
browser's ``navigator.credentials.get`` response) over
:func:`vote_challenge`, optionally signed with their Ed25519 key too;
:func:`sign_passkey_vote` does both steps with a :class:`SoftwareAuthenticator`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from hatp.clock import format_time
from hatp.evidence import SigningKey, passkey_challenge, sign
from hatp.gateway._authenticator import SoftwareAuthenticator
from hatp.model import PasskeyAssertion
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "TERMS_VOTE_PAYLOAD_MEMBERS",
    "VOTE_PAYLOAD_MEMBERS",
    "passkey_vote",
    "sign_passkey_vote",
    "sign_vote",
    "vote_challenge",
]

#: What a vote's payload names (a channel hands it to the person's device as it came).
VOTE_PAYLOAD_MEMBERS = frozenset({"askId", "txnId", "planDigest", "groupId", "human"})
#: What it names when the ask has terms (holds-first, approval-first): their digest too.
TERMS_VOTE_PAYLOAD_MEMBERS = VOTE_PAYLOAD_MEMBERS | {"termsDigest"}


def sign_vote(
    key: SigningKey,
    payload: Mapping[str, Any],
    decision: Literal["approve", "reject"],
    at: datetime,
) -> dict[str, Any]:
    """Return the person's signed HumanVote on an ask: ``payload`` (the notice's
    ``askId``, ``txnId``, ``planDigest``, ``groupId`` and ``human``, and
    ``termsDigest`` when the ask has hold terms) with the decision and the
    time, signed by ``key`` (an Ed25519 key on their card).

    Raises:
        ValueError: ``payload`` does not name exactly those members, or the
            decision is neither ``approve`` nor ``reject``.
    """
    return sign(_body(payload, decision, at), key)


def vote_challenge(
    payload: Mapping[str, Any], decision: Literal["approve", "reject"], nonce: str
) -> bytes:
    """Return the WebAuthn challenge the person's passkey signs to vote ``decision`` on
    the ask of ``payload`` (a notice's), with the ``nonce`` the notice carries: the 32
    bytes of the digest of ``{txnId, groupId, planDigest, decision, nonce, human}``
    (and ``termsDigest`` when the ask has hold terms).

    Raises:
        ValueError: ``payload`` is not a vote payload, or the decision is neither
            ``approve`` nor ``reject``.
    """
    _body(payload, decision, None)
    return passkey_challenge(
        txn_id=payload["txnId"],
        group_id=payload["groupId"],
        plan_digest=payload["planDigest"],
        decision=decision,
        nonce=nonce,
        human=payload["human"],
        terms_digest=payload.get("termsDigest"),
    )


def passkey_vote(
    payload: Mapping[str, Any],
    decision: Literal["approve", "reject"],
    nonce: str,
    credential: Mapping[str, Any],
    at: datetime,
    *,
    kid: str,
    key: SigningKey | None = None,
) -> dict[str, Any]:
    """Return the person's HumanVote carrying their passkey's assertion: ``credential``
    is the browser's answer (``PublicKeyCredential.toJSON()``) to a
    ``navigator.credentials.get`` for :func:`vote_challenge` of the same payload,
    decision and nonce; ``kid`` names the passkey on their card. With ``key`` (an
    Ed25519 key on their card) the vote is signed too; without, the assertion is its
    only signature.

    Raises:
        ValueError: ``payload`` or the decision as for :func:`sign_vote`, or
            ``credential`` is not an assertion response (the message says which member).
    """
    body = _body(payload, decision, at)
    response = credential.get("response") if isinstance(credential, Mapping) else None
    if not isinstance(response, Mapping):
        raise ValueError("credential is not an assertion response: it has no response object")
    member = {
        "kid": kid,
        "credentialId": credential.get("id"),
        "nonce": nonce,
        "authenticatorData": response.get("authenticatorData"),
        "clientDataJSON": response.get("clientDataJSON"),
        "signature": response.get("signature"),
    }
    try:
        PasskeyAssertion.model_validate(member)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ValueError(
            f"credential is not an assertion response: {error['loc']}: {error['msg']}"
        ) from None
    body["passkey"] = member
    return body if key is None else sign(body, key)


def sign_passkey_vote(
    authenticator: SoftwareAuthenticator,
    payload: Mapping[str, Any],
    decision: Literal["approve", "reject"],
    nonce: str,
    at: datetime,
    *,
    key: SigningKey | None = None,
) -> dict[str, Any]:
    """Return the vote ``authenticator`` makes: it signs :func:`vote_challenge` from its
    origin, and :func:`passkey_vote` builds the vote (signed by ``key`` too, if given).

    Raises:
        ValueError: as :func:`vote_challenge`.
    """
    challenge = vote_challenge(payload, decision, nonce)
    credential = authenticator.assertion(challenge)
    return passkey_vote(payload, decision, nonce, credential, at, kid=authenticator.kid, key=key)


def _body(payload: Mapping[str, Any], decision: str, at: datetime | None) -> dict[str, Any]:
    if set(payload) not in (VOTE_PAYLOAD_MEMBERS, TERMS_VOTE_PAYLOAD_MEMBERS):
        raise ValueError(
            f"a vote payload names exactly {sorted(VOTE_PAYLOAD_MEMBERS)} (and termsDigest "
            f"when the ask has terms), not {sorted(payload)}"
        )
    if decision not in ("approve", "reject"):
        raise ValueError(f"a vote is approve or reject, not {decision!r}")
    body = {**payload, "hatpVersion": PROTOCOL_VERSION, "kind": "human-vote", "decision": decision}
    if at is not None:
        body["time"] = format_time(at)
    return body
