"""Signing and verifying Human Cards: a card nobody trusts is never used."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hatp import _checks
from hatp.errors import CardInvalid, InvalidJson, SignatureInvalid, VersionUnsupported
from hatp.evidence import Keyring, SigningKey, sign, verify
from hatp.model import HumanCard, parse_card, parse_card_body

#: Signature refusals that mean "we do not know or trust who signed", not "bad bytes".
_ISSUER_REASONS = frozenset({"KID_UNKNOWN", "ISSUER_UNTRUSTED"})


def sign_card(card: Mapping[str, Any], directory_key: SigningKey) -> dict[str, Any]:
    """Check an unsigned card's form and return it signed by the directory's key.

    The signed form is the card's normal form: every member written out.

    Raises:
        CardInvalid: reason ``SHAPE``: the card is not a Human Card (or is signed already).
    """
    body = parse_card_body(card)
    return sign(body.to_wire(), directory_key)


def verify_card(doc: Any, keyring: Keyring) -> HumanCard:
    """Verify a signed Human Card; return it only after every step passed.

    Raises:
        CardInvalid: with ``data.reason`` and ``data.card`` (the id, when known):
            ``SHAPE`` (step 1 or 4, [CARD-SHAPE]),
            ``SIGNATURE`` (step 2, missing or bad signature, [CARD-SIGNED]),
            ``ISSUER`` (step 2 or 3: a key nobody trusts, or not the card's
            own issuer's key, [CARD-SIGNED]).
    """
    # 1. An object with a known version, so there is something to verify.
    if not isinstance(doc, Mapping):
        raise CardInvalid("a Human Card is a JSON object", reason="SHAPE", card=None)
    card_id = doc["id"] if isinstance(doc.get("id"), str) else None
    named = card_id or "(no id)"
    if not _checks.is_on("CARD-SIGNED"):  # the naive directory: takes any card on its word
        return parse_card(doc)
    # 2. The signature verifies under a key the keyring knows and trusts (§5).
    try:
        signer = verify(doc, keyring)
    except SignatureInvalid as exc:
        reason = "ISSUER" if exc.reason in _ISSUER_REASONS else "SIGNATURE"
        raise CardInvalid(
            f"card {named} is not used: {exc.message}",
            reason=reason,
            card=card_id,
            signatureReason=exc.reason,
        ) from None
    except (VersionUnsupported, InvalidJson) as exc:
        raise CardInvalid(f"card {named}: {exc.message}", reason="SHAPE", card=card_id) from None
    # 3. The signer speaks for the issuer the card names: one directory cannot
    #    vouch for another's people.
    if doc.get("issuer") != signer.issuer:
        raise CardInvalid(
            f"card {named} names issuer {doc.get('issuer')!r} but was signed by "
            f"{signer.kid!r} of {signer.issuer!r}; have the card's own directory sign it",
            reason="ISSUER",
            card=card_id,
        )
    # 4. The Human Card form.
    return parse_card(doc)
