"""The public surface: what each package exports, and the one error tree."""

from __future__ import annotations

import pytest

import hatp
import hatp.coordinator
import hatp.demo
import hatp.directory
import hatp.errors
import hatp.evidence
import hatp.gate
import hatp.gateway
import hatp.http
import hatp.lease
import hatp.mcp
import hatp.model
import hatp.participant
import hatp.store
import hatp.writes
from hatp.errors import (
    SIGNATURE_REASON_RULES,
    HatpError,
    PlanInvalid,
    SignatureInvalid,
    error_from_dict,
)

PACKAGES = [
    hatp,
    hatp.coordinator,
    hatp.demo,
    hatp.directory,
    hatp.errors,
    hatp.evidence,
    hatp.gate,
    hatp.gateway,
    hatp.http,
    hatp.lease,
    hatp.mcp,
    hatp.model,
    hatp.participant,
    hatp.store,
    hatp.writes,
]


@pytest.mark.parametrize("module", PACKAGES, ids=lambda m: m.__name__)
def test_exported_members_exist_and_are_public(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names, "a package with no public surface"
    for name in names:
        assert hasattr(module, name), name
    public = {n for n in dir(module) if not n.startswith("_")}
    exported = set(names)
    stray = {
        n
        for n in public - exported
        if getattr(getattr(module, n), "__module__", "").startswith(module.__name__)  # type: ignore[attr-defined]
        and not isinstance(getattr(module, n), type(hatp))
    }
    assert not stray, f"public but not in __all__: {stray}"


def test_every_error_has_a_stable_unique_code() -> None:
    classes = [HatpError, *HatpError.__subclasses__()]
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes))
    assert all(code.isupper() for code in codes)


@pytest.mark.parametrize("cls", HatpError.__subclasses__())
def test_errors_round_trip_through_their_wire_form(cls: type[HatpError]) -> None:
    if cls is SignatureInvalid:
        error: HatpError = cls("BAD_SIGNATURE", "boom", kid="k")
    elif cls is PlanInvalid:
        error = cls("SECOND_FINAL", "boom", where="/branches")
    else:
        error = cls("boom", x=1)
    wire = error.to_dict()
    assert set(wire) == {"code", "message", "data"}
    back = error_from_dict(wire)
    assert type(back) is cls
    assert back.to_dict() == wire
    assert str(back).startswith(cls.code)


def test_signature_reasons_map_to_spec_rules() -> None:
    for reason, rule in SIGNATURE_REASON_RULES.items():
        assert SignatureInvalid(reason, "m").data["rule"] == rule
        assert rule.startswith("SIG-")
