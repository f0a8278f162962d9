"""[GW-PASSKEY] votes signed by the approver's passkey, on SQLite and PostgreSQL.

A group that needs a passkey asks only people with one on their card; each
gets a nonce with the notice, and their approve counts only with their
passkey's assertion over the vote's challenge (the digest of txnId, groupId,
planDigest, decision, nonce and human). Each way of getting it wrong is
refused with ``RESPONSE_REFUSED`` reason ``PASSKEY`` and the step's
``passkeyReason``; nothing is recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, derive_private_key

from directory.people import authenticator
from gateway.people import (
    FINANCE,
    KEYS,
    START,
    World,
    human,
    keyring,
    passkey_vote,
    people_directory,
    person_card,
    plan_doc,
    request,
    vote,
)
from hatp._checks import unsafe_switched_off
from hatp.errors import ResponseRefused
from hatp.evidence import digest, verify_approval
from hatp.gateway import Notice, SoftwareAuthenticator, vote_challenge
from hatp.gateway import passkey_vote as build_passkey_vote
from hatp.model import Result, RoutingRecord
from hatp.store import PasskeyBook

OTHER_PLAN = digest({"another": "plan"})


def _world(store_url: str, *, origins: list[str] | None = None) -> World:
    """alice, bob and carol with passkeys and vote keys; erin with a vote key only."""
    found = people_directory(
        person_card("alice"),
        person_card("bob"),
        person_card("carol"),
        person_card("erin", keys=[KEYS["erin"].public.to_jwk()]),
    )
    return World(store_url, found, passkey_origins=origins)


def _device(
    name: str, *, user_verified: bool = True, seed: int | None = None
) -> SoftwareAuthenticator:
    """``name``'s passkey as :func:`authenticator` has it, or (``seed``) another key
    under the same kid and credential id."""
    scalar = len(name) + 1000 if seed is None else seed
    return SoftwareAuthenticator(
        "acme.com",
        f"human://acme.com/{name}#passkey-1",
        private_key=derive_private_key(scalar, SECP256R1()),
        credential_id=b"cred-1",
        user_verified=user_verified,
        counting=False,
    )


def forged(
    notice: Notice,
    decision: str = "approve",
    *,
    signed_decision: str | None = None,
    device: SoftwareAuthenticator | None = None,
    nonce: str | None = None,
    signed_nonce: str | None = None,
    payload: dict[str, Any] | None = None,
    **assertion: Any,
) -> dict[str, Any]:
    """A passkey vote of ``notice``'s person, made wrong in one way: the passkey signed
    for ``signed_decision``, another ``payload`` or ``signed_nonce``; the vote names
    ``nonce``; ``device`` signs; ``assertion`` goes to the authenticator (origin, rp_id,
    cross_origin)."""
    name = notice.human.rsplit("/", 1)[1]
    device = device or authenticator(name)
    nonce = nonce or notice.nonce or "n" * 22
    challenge = vote_challenge(
        payload or notice.payload,
        signed_decision or decision,
        signed_nonce or nonce,  # type: ignore[arg-type]
    )
    credential = device.assertion(challenge, **assertion)
    return build_passkey_vote(
        notice.payload,
        decision,
        nonce,
        credential,
        START,
        kid=device.kid,  # type: ignore[arg-type]
    )


async def _refusal(world: World, ask_id: str, doc: dict[str, Any]) -> str:
    with pytest.raises(ResponseRefused) as info:
        await world.gateway.submit_vote(ask_id, doc)
    assert info.value.reason == "PASSKEY", info.value
    return str(info.value.data["passkeyReason"])


def _run(world: World, body: Callable[[World], Any]) -> Any:
    try:
        return asyncio.run(body(world))
    finally:
        world.close()


def test_a_passkey_group_asks_only_people_with_a_passkey_and_says_why(store_url: str) -> None:
    """[GW-PASSKEY] [DIR-PASSKEY] erin has no passkey: excluded, reason stated; the others
    get a nonce each."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(
            request(plan_doc(FINANCE + "?quorum=2-of-3", passkey_required=True))
        )
        nonces = {name: w.inbox(name)[0].nonce for name in ("alice", "bob")}
        assert all(nonces.values()) and len(set(nonces.values())) == 2
        await w.gateway.submit_vote(pending["askId"], passkey_vote(w.inbox("alice")[0]))
        await w.gateway.submit_vote(pending["askId"], passkey_vote(w.inbox("bob")[0]))
        approval = await w.gateway.poll(pending["askId"])
        assert approval["decision"] == "approve"
        routing = RoutingRecord.model_validate(approval["routing"])
        erin = next(h for h in routing.humans if h.id == human("erin"))
        assert (erin.result.value, erin.rule) == ("excluded", "passkey")
        assert erin.detail == "the group requires a passkey and the card has no webauthn key"

    _run(_world(store_url), body)


def test_an_approve_without_the_passkey_is_refused_a_reject_without_it_counts(
    store_url: str,
) -> None:
    """[GW-PASSKEY] REQUIRED: the Ed25519 signature alone does not approve; a no always counts."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(plan_doc(passkey_required=True)))
        (notice,) = w.inbox("alice")
        assert await _refusal(w, pending["askId"], vote(notice)) == "REQUIRED"
        await w.gateway.submit_vote(pending["askId"], vote(notice, "reject"))
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "reject"

    _run(_world(store_url), body)


def test_a_vote_signed_by_the_passkey_alone_approves_and_verifies_offline(store_url: str) -> None:
    """[GW-PASSKEY] [TXN-PASSKEY] no Ed25519 signature: the assertion is the vote's signature."""
    doc = plan_doc(passkey_required=True)

    async def body(w: World) -> dict[str, Any]:
        pending = await w.gateway.ask(request(doc))
        (notice,) = w.inbox("alice")
        cast = passkey_vote(notice)
        assert "signature" not in cast
        await w.gateway.submit_vote(pending["askId"], cast)
        return await w.gateway.poll(pending["askId"])

    approval = _run(_world(store_url), body)
    assert approval["decision"] == "approve" and approval["votes"][0]["passkey"]
    findings = verify_approval(approval, doc, keyring())
    assert all(f.result is Result.PASS for f in findings), findings


def test_a_passkey_threshold_needs_one_only_above_it(store_url: str) -> None:
    """[GW-PASSKEY] {"above": 500 USD}: a 1000 USD plan needs a passkey, a 400 USD plan not."""
    above = {"above": {"value": "500", "currency": "USD"}}

    async def body(w: World) -> None:
        big = await w.gateway.ask(request(plan_doc(passkey_required=above)))  # type: ignore[arg-type]
        (notice,) = w.inbox("alice")
        assert await _refusal(w, big["askId"], vote(notice)) == "REQUIRED"
        small_doc = plan_doc(FINANCE, "400", txn_id="txn-gw-small")
        small_doc["approvals"][0]["requirement"]["passkey"] = above
        small = await w.gateway.ask(request(small_doc))
        notice = next(n for n in w.inbox("alice") if n.ask_id == small["askId"])
        await w.gateway.submit_vote(small["askId"], vote(notice))
        assert (await w.gateway.poll(small["askId"]))["decision"] == "approve"

    _run(_world(store_url), body)


@dataclass(frozen=True)
class Bad:
    """A passkey vote wrong in one way, and the reason it is refused with."""

    make: Callable[[Notice], dict[str, Any]]
    reason: str


BAD: dict[str, Bad] = {
    "reject-assertion-replayed-as-approve": Bad(
        lambda n: forged(n, "approve", signed_decision="reject"), "CHALLENGE"
    ),
    "assertion-for-another-plan": Bad(
        lambda n: forged(n, payload={**n.payload, "planDigest": OTHER_PLAN}), "CHALLENGE"
    ),
    "nonce-of-another-ask": Bad(lambda n: forged(n, nonce="x" * 22), "NONCE"),
    "wrong-rp-id": Bad(lambda n: forged(n, rp_id="evil.example"), "RP_ID"),
    "origin-of-another-site": Bad(lambda n: forged(n, origin="https://evil.example"), "ORIGIN"),
    "plain-http-origin": Bad(lambda n: forged(n, origin="http://acme.com"), "ORIGIN"),
    "cross-origin": Bad(lambda n: forged(n, cross_origin=True), "ORIGIN"),
    "user-not-verified": Bad(
        lambda n: forged(n, device=_device("alice", user_verified=False)), "USER_VERIFICATION"
    ),
    "signed-by-another-key": Bad(
        lambda n: forged(n, device=_device("alice", seed=4242)), "SIGNATURE"
    ),
    "unknown-credential": Bad(
        lambda n: {**forged(n), "passkey": {**forged(n)["passkey"], "credentialId": "b3RoZXI"}},
        "KEY_UNKNOWN",
    ),
    "kid-not-on-the-card": Bad(
        lambda n: {
            **forged(n),
            "passkey": {**forged(n)["passkey"], "kid": "human://acme.com/alice#passkey-9"},
        },
        "KEY_UNKNOWN",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_passkey_vote_is_refused_and_nothing_is_recorded(store_url: str, name: str) -> None:
    """[GW-PASSKEY] each step's refusal, and the ask still open for the honest vote."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(plan_doc(passkey_required=True)))
        (notice,) = w.inbox("alice")
        assert await _refusal(w, pending["askId"], BAD[name].make(notice)) == BAD[name].reason
        await w.gateway.submit_vote(pending["askId"], passkey_vote(notice))
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "approve"

    _run(_world(store_url), body)


def test_an_origin_the_gateway_does_not_serve_is_refused(store_url: str) -> None:
    """[GW-PASSKEY] configured origins: https://acme.com fits the rpId, but is not served."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(plan_doc(passkey_required=True)))
        (notice,) = w.inbox("alice")
        assert await _refusal(w, pending["askId"], forged(notice)) == "ORIGIN"
        served = forged(notice, origin="https://approve.acme.com")
        await w.gateway.submit_vote(pending["askId"], served)
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "approve"

    _run(_world(store_url, origins=["https://approve.acme.com"]), body)


def test_a_nonce_is_spent_once_even_without_the_one_vote_rule(store_url: str) -> None:
    """[GW-PASSKEY] [STORE-PASSKEY-NONCE] with [GW-VOTE-ONCE] off, a second vote on the same
    nonce is still refused: NONCE_USED."""

    async def body(w: World) -> None:
        doc = plan_doc(FINANCE + "?quorum=2-of-3", passkey_required=True)
        pending = await w.gateway.ask(request(doc))
        (notice,) = w.inbox("alice")
        await w.gateway.submit_vote(pending["askId"], passkey_vote(notice))
        with unsafe_switched_off("GW-VOTE-ONCE"):
            again = passkey_vote(notice)
            assert await _refusal(w, pending["askId"], again) == "NONCE_USED"
        assert PasskeyBook(w.stores[-1]).is_used(str(notice.nonce))

    _run(_world(store_url), body)


def test_a_sign_count_that_does_not_go_up_is_refused(store_url: str) -> None:
    """[GW-PASSKEY] [STORE-PASSKEY-COUNT] a cloned authenticator replays count 1."""
    alice = authenticator("alice")

    async def body(w: World) -> None:
        first = await w.gateway.ask(request(plan_doc(passkey_required=True, txn_id="txn-pk-1")))
        (notice,) = w.inbox("alice")
        await w.gateway.submit_vote(first["askId"], passkey_vote(notice))
        seen = PasskeyBook(w.stores[-1]).sign_count(human("alice"), alice.credential_id)
        assert seen == alice.sign_count > 0
        second = await w.gateway.ask(request(plan_doc(passkey_required=True, txn_id="txn-pk-2")))
        later = next(n for n in w.inbox("alice") if n.ask_id == second["askId"])
        clone = _device("alice")
        clone.counting, clone.sign_count = True, seen - 1  # its next count is `seen` again
        assert await _refusal(w, second["askId"], forged(later, device=clone)) == "SIGN_COUNT"
        await w.gateway.submit_vote(second["askId"], passkey_vote(later))

    _run(_world(store_url), body)


def test_a_passkey_vote_survives_a_gateway_restart(store_url: str) -> None:
    """[GW-DURABLE] the nonce a notice carried is the ask's, stored: a new gateway takes it."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request(plan_doc(passkey_required=True)))
        (notice,) = w.inbox("alice")
        w.restart()
        await w.gateway.submit_vote(pending["askId"], passkey_vote(notice))
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "approve"

    _run(_world(store_url), body)


def test_a_vote_on_a_tool_call_is_not_signed_by_a_passkey_alone(store_url: str) -> None:
    """[GW-VOTE-SIGNED] call asks issue no nonce; a vote without an Ed25519 signature is
    refused."""
    from gateway.test_gateway_calls import call_request

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request(passkey=True))
        (notice,) = w.inbox("alice")
        assert notice.nonce is None
        unsigned = {k: v for k, v in forged(notice).items() if k != "signature"}
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(pending["askId"], unsigned)
        assert info.value.reason == "SIGNATURE"

    _run(_world(store_url), body)


# --- planted votes: each refused by [GW-PASSKEY], recorded with it off ---------------


@dataclass(frozen=True)
class Case:
    """A planted vote on a passkey group, and the checks whose switch-off records it."""

    make: Callable[[Notice], dict[str, Any]]
    checks: frozenset[str]


CASES: dict[str, Case] = {
    "approve-without-the-passkey": Case(vote, frozenset({"GW-PASSKEY"})),
    "reject-assertion-replayed-as-approve": Case(
        lambda n: forged(n, "approve", signed_decision="reject"), frozenset({"GW-PASSKEY"})
    ),
}


def _outcome(store_url: str, case: Case) -> str:
    async def body(w: World) -> str:
        pending = await w.gateway.ask(request(plan_doc(passkey_required=True)))
        (notice,) = w.inbox("alice")
        try:
            await w.gateway.submit_vote(pending["askId"], case.make(notice))
        except ResponseRefused as exc:
            return str(exc.reason)
        return "recorded"

    return str(_run(_world(store_url), body))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_planted_passkey_vote_is_recorded_only_with_its_check_off(
    sqlite_url: Callable[[], str], name: str
) -> None:
    """[GW-PASSKEY]"""
    case = CASES[name]
    assert _outcome(sqlite_url(), case) == "PASSKEY"
    with unsafe_switched_off(*case.checks):
        assert _outcome(sqlite_url(), case) == "recorded"
    with unsafe_switched_off("GW-VOTE-SIGNED", "GW-VOTE-BINDS", "GW-VOTE-ONCE"):
        assert _outcome(sqlite_url(), case) == "PASSKEY"
