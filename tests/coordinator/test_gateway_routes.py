"""Two organisations: each approval group is asked at its own organisation's gateway, and
its answers count only as signed by that gateway's key [COORD-GATEWAYS].

acme runs the trip (the trip world: its participants, directory, people and Human
Gateway). globex is another organisation with its own directory, its own key and
its own Human Gateway on its own store, where gina holds the partner-approver role.
The trip plan gets a second approval group at globex, and acme's coordinator asks
it there through a :class:`~hatp.coordinator.GatewayRoutes`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import ALL_NONE, ALL_WHOLE, ForgeApproval, Trip, events
from hatp.clock import ManualClock
from hatp.coordinator import Coordinator, Gateway, GatewayRoutes, Outcome, gateway_for
from hatp.demo import COORDINATOR, GATEWAY, PARTICIPANT_IDS, TripWorld
from hatp.demo.two_orgs import GINA, GLOBEX_DIRECTORY, GLOBEX_GATEWAY, gina_card
from hatp.directory import Directory, sign_card
from hatp.errors import AskUnknown, Unavailable
from hatp.evidence import Keyring, SigningKey, verify, verify_record
from hatp.gateway import HumanGateway, MemoryChannel, Person
from hatp.model import ApprovalGroup, Result, TxnState
from hatp.store import AskKind, AskStore, Store, open_store

PARTNER = "human://globex.com/role/partner-approver"
GLOBEX_DIRECTORY_KEY = SigningKey.from_seed(bytes([71]) * 32, f"{GLOBEX_DIRECTORY}#key-1")
GLOBEX_GATEWAY_KEY = SigningKey.from_seed(bytes([72]) * 32, f"{GLOBEX_GATEWAY}#key-1")
GINA_KEY = SigningKey.from_seed(bytes([73]) * 32, f"{GINA}#key-1")


def _gina_card() -> dict[str, Any]:
    return sign_card(gina_card(GINA_KEY, ["terminal"]), GLOBEX_DIRECTORY_KEY)


@dataclass
class Globex:
    """globex.com: its directory (gina's card) and its Human Gateway's asks, on its own store."""

    directory: Directory
    asks: AskStore
    clock: ManualClock

    def gateway(self, decision: str = "approve") -> HumanGateway:
        """globex's Human Gateway, where gina does ``decision`` with every ask."""
        people = {GINA: Person(GINA_KEY, decision)}  # type: ignore[arg-type]
        channel = MemoryChannel("terminal", clock=self.clock, people=people)
        return HumanGateway(
            GLOBEX_GATEWAY, GLOBEX_GATEWAY_KEY, self.directory, self.asks, [channel], self.clock
        )


@pytest.fixture
def globex(tmp_path: Path, clock: ManualClock) -> Iterator[Globex]:
    trusting = Keyring(
        [(GLOBEX_DIRECTORY_KEY.public, GLOBEX_DIRECTORY)], trusted_issuers=[GLOBEX_DIRECTORY]
    )
    directory = Directory(GLOBEX_DIRECTORY, [_gina_card()], trusting)
    store: Store = open_store(tmp_path / "globex-gateway.db")
    try:
        yield Globex(directory, AskStore(store), clock)
    finally:
        store.close()


def _keyring(world: TripWorld, *, gateway: bool = True, directory: bool = True) -> Keyring:
    """acme's keys (every one the trip world trusts), and globex's gateway key and
    directory key (unless told not), each vouched for by its own issuer, all trusted."""
    assert world.directory_key is not None
    keys = [(world.keys[pid].public, pid) for pid in PARTICIPANT_IDS] + [
        (world.keys["coordinator"].public, COORDINATOR),
        (world.keys["gateway"].public, GATEWAY),
        (world.directory_key.public, world.directory.issuer),
    ]
    if gateway:
        keys.append((GLOBEX_GATEWAY_KEY.public, GLOBEX_GATEWAY))
    if directory:
        keys.append((GLOBEX_DIRECTORY_KEY.public, GLOBEX_DIRECTORY))
    return Keyring(keys, trusted_issuers=[issuer for _, issuer in keys])


def _plan(trip: Trip, **options: Any) -> dict[str, Any]:
    """The trip plan with a second approval group, ``partner``, at globex."""
    plan = trip.plan(**options)
    finance = plan["approvals"][0]
    plan["approvals"].append(
        {"groupId": "partner", "address": PARTNER, "requirement": dict(finance["requirement"])}
    )
    return plan


def _coordinator(trip: Trip, gateway: Gateway, **options: Any) -> Coordinator:
    """acme's coordinator on the trip's log and clock, verifying with acme's and globex's keys."""
    world = trip.world
    options.setdefault("retry_delay", 0.0)
    return Coordinator(
        coordinator_id=COORDINATOR,
        key=world.keys["coordinator"],
        log=trip.log,
        participants={**world.participants, **trip.links},
        gateway=gateway,
        keyring=_keyring(world),
        clock=trip.clock,
        **options,
    )


def _routes(trip: Trip, globex: Globex, decision: str = "approve") -> GatewayRoutes:
    """acme's gateway as the default, globex's for globex.com; everyone does ``decision``."""
    acme = trip.world.gateway(trip.world.scripted_people(decision))
    return GatewayRoutes(acme, {"globex.com": globex.gateway(decision)})


def _approvals(outcome: Outcome) -> dict[str, dict[str, Any]]:
    """Each group's ``txn.approval`` event body, by group id."""
    return {e["body"]["groupId"]: e["body"] for e in events(outcome.record, "txn.approval")}


def _failed(record: Mapping[str, Any], keyring: Keyring) -> list[str]:
    report = verify_record(record, keyring)
    return [f"{f.rule}: {f.detail}" for f in report.findings if f.result is not Result.PASS]


def test_each_group_is_approved_at_its_own_organisations_gateway_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] finance is asked at acme's gateway, partner at globex's: the trip
    commits, each approval signed by its own gateway's key, and the record verifies
    offline with both organisations' keys."""
    plan = _plan(trip)
    outcome = asyncio.run(_coordinator(trip, _routes(trip, globex)).run(plan))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    approvals = _approvals(outcome)
    assert {name: body["problem"] for name, body in approvals.items()} == {
        "finance": None,
        "partner": None,
    }
    keyring = _keyring(trip.world)
    signers = {
        name: (body["approval"]["gateway"], verify(body["approval"], keyring).issuer)
        for name, body in approvals.items()
    }
    assert signers == {"finance": (GATEWAY, GATEWAY), "partner": (GLOBEX_GATEWAY, GLOBEX_GATEWAY)}
    assert approvals["partner"]["approval"]["approvers"] == [GINA]
    pendings = {
        e["body"]["groupId"]: e["body"]["pending"] for e in events(outcome.record, "txn.pending")
    }
    assert {name: p["gateway"] for name, p in pendings.items()} == {
        "finance": GATEWAY,
        "partner": GLOBEX_GATEWAY,
    }
    assert _failed(outcome.record, keyring) == []


def test_a_record_with_globexs_approval_does_not_verify_without_globexs_keys_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] the verifier must hold the key of each gateway that signed an
    approval: with acme's keys alone, globex's signatures do not verify; with globex's
    gateway key but not its directory's, gina's card is not a trusted Human Card."""
    outcome = asyncio.run(_coordinator(trip, _routes(trip, globex)).run(_plan(trip)))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    unknown = f"does not verify: KID_UNKNOWN: no key with kid '{GLOBEX_GATEWAY_KEY.kid}'"
    failed = _failed(outcome.record, _keyring(trip.world, gateway=False, directory=False))
    assert failed, "the record verified without globex's keys"
    assert all(f.startswith("TXN-SIGNER: ") and unknown in f for f in failed), failed
    assert any("(txn.approval): body.approval " in f for f in failed), failed
    failed = _failed(outcome.record, _keyring(trip.world, directory=False))
    assert len(failed) == 1 and failed[0].startswith("TXN-CARD-SIGNED: "), failed
    assert f"cards[0] ({GINA}), which is not a trusted Human Card" in failed[0]


def test_the_chain_estimates_come_from_each_groups_own_gateway_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] in auto mode each group's ChainEstimate is asked at its own
    gateway and counts as signed by it; the record keeps both."""
    plan = _plan(trip, mode="auto")
    outcome = asyncio.run(_coordinator(trip, _routes(trip, globex)).run(plan))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (mode,) = events(outcome.record, "txn.mode")
    estimates = {e["groupId"]: e["gateway"] for e in mode["body"]["estimates"]}
    assert estimates == {"finance": GATEWAY, "partner": GLOBEX_GATEWAY}
    assert _failed(outcome.record, _keyring(trip.world)) == []


def test_a_group_asked_at_another_organisations_gateway_is_not_approved_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] routes that send globex's group to acme's gateway: acme's
    directory has nobody at globex, so acme's gateway routes the address to no one and
    decides reject at once ([GW-FEW]); the trip aborts, nothing done."""
    acme = trip.world.gateway(trip.world.scripted_people())
    misrouted = GatewayRoutes(acme, {"globex.com": acme})
    outcome = asyncio.run(_coordinator(trip, misrouted).run(_plan(trip)))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == "approval partner: the group decided reject: needs 1, only 0 eligible"
    partner = _approvals(outcome)["partner"]["approval"]
    assert (partner["gateway"], partner["routing"]["humans"]) == (GATEWAY, [])
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


@pytest.mark.parametrize(
    ("forged", "problem"),
    [
        ("partner", f"approval partner: signed by {GATEWAY}, not by {GLOBEX_GATEWAY}"),
        ("finance", f"approval finance: signed by {GLOBEX_GATEWAY}, not by {GATEWAY}"),
    ],
)
def test_an_approval_signed_by_the_other_organisations_gateway_does_not_count_COORD_GATEWAYS(
    trip: Trip, globex: Globex, forged: str, problem: str
) -> None:
    """[COORD-GATEWAYS] [COORD-SIGNER] each gateway's approvals re-signed with the other
    organisation's (trusted) gateway key: the group's approval must be signed by the
    gateway it was asked at, so the trip aborts."""
    acme: Gateway = trip.world.gateway(trip.world.scripted_people())
    partner: Gateway = globex.gateway()
    if forged == "partner":
        partner = ForgeApproval(partner, trip.world.keys["gateway"])
    else:
        acme = ForgeApproval(acme, GLOBEX_GATEWAY_KEY)
    routes = GatewayRoutes(acme, {"globex.com": partner})
    outcome = asyncio.run(_coordinator(trip, routes).run(_plan(trip)))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == problem
    assert _approvals(outcome)[forged]["problem"] == problem.split(": ", 1)[1]
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


async def _until(check: Callable[[], bool]) -> None:
    """Let the loop and the stores' worker threads run until ``check()`` holds (bounded)."""
    for _ in range(4000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


def _open_at_both(trip: Trip, globex: Globex, txn: str) -> Callable[[], bool]:
    return lambda: bool(
        trip.world.asks.open_for(AskKind.APPROVAL, txn)
        and globex.asks.open_for(AskKind.APPROVAL, txn)
    )


def test_at_the_deadline_each_open_ask_is_withdrawn_at_its_own_gateway_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] [COORD-WITHDRAW] nobody answers at either organisation: at
    decideBy both asks are withdrawn, each at its own gateway, whose signed withdrawn
    reject the record keeps."""
    plan = _plan(trip)
    txn = plan["txnId"]

    async def go() -> Outcome:
        routes = _routes(trip, globex, "never")
        task = asyncio.create_task(_coordinator(trip, routes).run(plan))
        await trip.votes.wait(txn, 4)
        await _until(_open_at_both(trip, globex, txn))
        trip.clock.advance(16 * 60)
        return await task

    outcome = asyncio.run(go())
    assert outcome.state is TxnState.ABORTED
    assert "passed" in outcome.reason
    assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == []
    assert globex.asks.open_for(AskKind.APPROVAL, txn) == []
    keyring = _keyring(trip.world)
    last_words = {
        name: (body["approval"]["withdrawn"], verify(body["approval"], keyring).issuer)
        for name, body in _approvals(outcome).items()
    }
    assert last_words == {"finance": (True, GATEWAY), "partner": (True, GLOBEX_GATEWAY)}
    assert trip.world.effects(txn) == ALL_NONE
    assert _failed(outcome.record, keyring) == []


async def _die_while_asking(trip: Trip, globex: Globex, plan: dict[str, Any]) -> None:
    """Run ``plan`` until both asks are open, one at each gateway; then stop the run as a
    killed process would (nothing of phase 1 logged yet)."""
    task = asyncio.create_task(_coordinator(trip, _routes(trip, globex, "never")).run(plan))
    await trip.votes.wait(plan["txnId"], 4)
    await _until(_open_at_both(trip, globex, plan["txnId"]))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_presumed_abort_withdraws_the_open_asks_at_every_gateway_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] [COORD-RECOVER] the next owner (a new process: its routes know no
    ask) withdraws the transaction's open asks at acme's gateway and at globex's."""
    plan = _plan(trip)
    txn = plan["txnId"]
    asyncio.run(_die_while_asking(trip, globex, plan))
    [acme_ask] = trip.world.asks.open_for(AskKind.APPROVAL, txn)
    [globex_ask] = globex.asks.open_for(AskKind.APPROVAL, txn)
    trip.clock.advance(31)
    later = _coordinator(trip, _routes(trip, globex, "never"), owner="second")
    (outcome,) = asyncio.run(later.recover())
    assert outcome.state is TxnState.ABORTED
    assert not trip.world.asks.get(acme_ask).is_open
    assert not globex.asks.get(globex_ask).is_open
    assert trip.world.effects(txn) == ALL_NONE


def test_withdraw_transaction_returns_the_asks_withdrawn_at_every_gateway_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] routes made after the asks (they remember none) still withdraw the
    transaction's asks at both gateways, and return both ids."""
    plan = _plan(trip)
    txn = plan["txnId"]
    asyncio.run(_die_while_asking(trip, globex, plan))
    asks = trip.world.asks.open_for(AskKind.APPROVAL, txn) + globex.asks.open_for(
        AskKind.APPROVAL, txn
    )
    routes = _routes(trip, globex, "never")
    withdrawn = asyncio.run(routes.withdraw_transaction(txn, "the trip was called off"))
    assert sorted(withdrawn) == sorted(asks) and len(asks) == 2
    assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == []
    assert globex.asks.open_for(AskKind.APPROVAL, txn) == []


class Unreachable(ForgeApproval):
    """A real gateway that a transaction-wide withdrawal cannot reach (the rest forwarded
    unchanged)."""

    def __init__(self, inner: Gateway) -> None:
        super().__init__(inner, GLOBEX_GATEWAY_KEY)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        raise Unavailable(f"{self.gateway_id} did not answer", gateway=self.gateway_id)

    def _forge(self, answer: dict[str, Any]) -> dict[str, Any]:
        return answer


def test_a_gateway_that_cannot_be_reached_does_not_stop_the_others_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] acme's gateway cannot be reached: the routes still withdraw the
    transaction's ask at globex's, then report acme's failure."""
    plan = _plan(trip)
    txn = plan["txnId"]
    asyncio.run(_die_while_asking(trip, globex, plan))
    [acme_ask] = trip.world.asks.open_for(AskKind.APPROVAL, txn)
    down = Unreachable(trip.world.gateway(trip.world.scripted_people("never")))
    routes = GatewayRoutes(down, {"globex.com": globex.gateway("never")})
    with pytest.raises(Unavailable, match="did not answer"):
        asyncio.run(routes.withdraw_transaction(txn, "the trip was called off"))
    assert globex.asks.open_for(AskKind.APPROVAL, txn) == []
    assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == [acme_ask]


def test_presumed_abort_withdraws_at_the_gateways_it_reaches_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] [COORD-WITHDRAW] the next owner cannot reach acme's gateway: it
    still withdraws globex's ask and aborts; acme's ask closes at its own deadline."""
    plan = _plan(trip)
    txn = plan["txnId"]
    asyncio.run(_die_while_asking(trip, globex, plan))
    [acme_ask] = trip.world.asks.open_for(AskKind.APPROVAL, txn)
    trip.clock.advance(31)
    down = Unreachable(trip.world.gateway(trip.world.scripted_people("never")))
    routes = GatewayRoutes(down, {"globex.com": globex.gateway("never")})
    (outcome,) = asyncio.run(_coordinator(trip, routes, owner="second").recover())
    assert outcome.state is TxnState.ABORTED
    assert globex.asks.open_for(AskKind.APPROVAL, txn) == []
    assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == [acme_ask]
    assert trip.world.effects(txn) == ALL_NONE


def _group(address: str) -> ApprovalGroup:
    return ApprovalGroup.model_validate(
        {
            "groupId": "g",
            "address": address,
            "requirement": {"action": "approve.spend", "tolerance": "0", "passkey": False},
        }
    )


def test_a_group_goes_to_its_organisations_gateway_else_the_default_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] the host of the group's address picks the gateway; an organisation
    not named (or an address that does not parse) goes to the default."""
    acme = trip.world.gateway()
    partner = globex.gateway()
    routes = GatewayRoutes(acme, {"Globex.com": partner})
    assert routes.gateway_id == GATEWAY
    assert routes.gateways == (acme, partner)
    assert gateway_for(routes, _group(PARTNER)) is partner
    assert gateway_for(routes, _group("human://globex.com/gina")) is partner
    assert gateway_for(routes, _group("human://acme.com/role/finance-approver")) is acme
    assert gateway_for(routes, _group("human://initech.com/role/boss")) is acme
    assert gateway_for(routes, _group("not an address")) is acme
    assert gateway_for(acme, _group(PARTNER)) is acme
    same = GatewayRoutes(acme, {"acme.com": acme})
    assert same.gateways == (acme,)


def test_an_ask_the_routes_never_made_is_not_guessed_at_COORD_GATEWAYS(
    trip: Trip, globex: Globex
) -> None:
    """[COORD-GATEWAYS] polling, withdrawing or tightening an ask id these routes did
    not ask is refused ASK_UNKNOWN when there is more than one gateway to guess from."""
    routes = GatewayRoutes(trip.world.gateway(), {"globex.com": globex.gateway()})
    with pytest.raises(AskUnknown) as refused:
        asyncio.run(routes.poll("ask-from-another-process"))
    assert refused.value.data == {
        "askId": "ask-from-another-process",
        "gateways": [GATEWAY, GLOBEX_GATEWAY],
    }
    assert "gateway_for" in refused.value.message
    with pytest.raises(AskUnknown):
        asyncio.run(routes.withdraw("ask-from-another-process", "no longer needed"))
    with pytest.raises(AskUnknown):
        asyncio.run(routes.tighten("ask-from-another-process", trip.clock.now()))


def test_with_one_gateway_an_unknown_ask_goes_to_it_COORD_GATEWAYS(trip: Trip) -> None:
    """[COORD-GATEWAYS] with one gateway there is nothing to guess: its own answer comes
    back (here, that it has no such ask)."""
    acme = trip.world.gateway()
    routes = GatewayRoutes(acme, {"acme.com": acme})
    with pytest.raises(AskUnknown) as refused:
        asyncio.run(routes.poll("ask-nobody-made"))
    assert "gateways" not in refused.value.data


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["globex.com", "GLOBEX.com"], "named twice"),
        (["https://globex.com"], "not a bare domain"),
        (["globex.com:443"], "not a bare domain"),
        (["globex.com/role"], "not a bare domain"),
        (["bob@globex.com"], "not a bare domain"),
        (["human://globex.com"], "not a bare domain"),
        ([""], "not a bare domain"),
        ([42], "not a domain name"),
    ],
)
def test_routes_refuse_an_organisation_named_twice_or_not_a_bare_domain_COORD_GATEWAYS(
    trip: Trip, globex: Globex, names: list[Any], says: str
) -> None:
    """[COORD-GATEWAYS] each organisation is named once, by its bare domain."""
    partner = globex.gateway()
    with pytest.raises(ValueError, match=says):
        GatewayRoutes(trip.world.gateway(), dict.fromkeys(names, partner))
