"""The Directory: verified Human Cards, and routing an address to the right people.

A card is used only after its signature, its issuer and its form have been
checked (:func:`verify_card`); :class:`Directory` holds such cards, loaded
from a file; :func:`resolve` turns an address into ranked candidates plus
everyone passed over and the rule why (docs/spec.md §17).
:func:`register_passkey` verifies a WebAuthn registration and returns the
card's passkey entry; :func:`add_passkey` puts it on a card, signed anew;
:class:`PasskeyEnrolment` invites a person to register one from their
browser and puts it on their card. :func:`read_people` reads a hand-written
``people.toml`` and :func:`build_directory` (:func:`write_directory`) signs its cards.
"""

from hatp.directory._cards import sign_card, verify_card
from hatp.directory._directory import CardSource, Directory, resolve, well_known
from hatp.directory._enrol import PasskeyEnrolment, user_handle
from hatp.directory._passkeys import add_passkey, register_passkey
from hatp.directory._people_file import (
    People,
    Person,
    build_directory,
    parse_people,
    read_people,
    write_directory,
)
from hatp.directory._resolve import (
    RULES,
    Candidate,
    Exclusion,
    ExclusionRule,
    Resolution,
    matches,
)

__all__ = [
    "RULES",
    "Candidate",
    "CardSource",
    "Directory",
    "Exclusion",
    "ExclusionRule",
    "PasskeyEnrolment",
    "People",
    "Person",
    "Resolution",
    "add_passkey",
    "build_directory",
    "matches",
    "parse_people",
    "read_people",
    "register_passkey",
    "resolve",
    "sign_card",
    "user_handle",
    "verify_card",
    "well_known",
    "write_directory",
]
