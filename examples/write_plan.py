"""An approval-bound write plan against your own SQLite table (``hatp.writes``).

Shows: an allowlist of one typed correction (``set_price``) on your own
``prices`` table; an agent drafting a write plan from the live rows and
proposing it; the policy sending it to a person; executing it before the
approval refused (``NOT_APPROVED``); a person approving that exact version;
the write, its drift check and its journal entry committed in one transaction
in your database; a double click answered from the stored result, nothing
written twice.

Run it: ``python examples/write_plan.py`` (it works in a temporary folder).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from hatp.clock import SystemClock
from hatp.errors import NotApproved
from hatp.store import open_store
from hatp.writes import (
    Correction,
    Policy,
    Principal,
    RecordSet,
    Registry,
    TypeRule,
    Verdict,
    Writes,
    draft_plan,
    format_diff,
)

# Your own table: hatp reads and writes it only through the corrections you allow.
metadata = sa.MetaData()
prices = sa.Table(
    "prices",
    metadata,
    sa.Column("sku", sa.String(32), primary_key=True),
    sa.Column("cents", sa.Integer, nullable=False),
)
PRICES = RecordSet("prices", prices, "sku", ("cents",))


class PriceParams(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    sku: str = Field(pattern=r"^SKU-[0-9]{1,8}$")
    cents: int = Field(ge=0, le=10_000_000)


class SetPrice(Correction[PriceParams]):
    """``set_price(sku, cents)``: the one correction an agent may propose."""

    name = "set_price"
    params = PriceParams

    def records(self, params: PriceParams) -> list[str]:
        return [PRICES.record(params.sku)]

    def expect(
        self, params: PriceParams, before: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, dict[str, Any] | None]:
        row = before[PRICES.record(params.sku)]
        if row is None:
            raise ValueError(f"{params.sku} has no price")
        return {PRICES.record(params.sku): {**row, "cents": params.cents}}

    def apply(
        self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: PriceParams
    ) -> None:
        table = sets["prices"].table
        conn.execute(table.update().where(table.c.sku == params.sku).values(cents=params.cents))


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="hatp-write-plan-"))
    store = open_store(folder / "shop.db")  # your data and hatp's bookkeeping, one database
    try:
        with store.transaction() as conn:
            metadata.create_all(conn)
            conn.execute(prices.insert(), [{"sku": "SKU-1", "cents": 1999}])
        registry = Registry([PRICES], [SetPrice()])
        policy = Policy({"set_price": TypeRule(Verdict.REQUIRE_APPROVAL)}, default=Verdict.DENY)
        writes = Writes(store, registry, policy, SystemClock(), lease_seconds=30.0)

        bot = Principal("agent://shop.example/pricing-bot", "agent")
        with store.transaction() as conn:  # the snapshot is read from the live rows
            doc = draft_plan(
                conn,
                registry,
                plan_id="reprice-1",
                version=1,
                corrections=[("set_price", {"sku": "SKU-1", "cents": 1799})],
                proposed_by=bot.id,
                on_behalf_of="human://shop.example/dana",
            )
        proposal = writes.propose(doc, bot)
        print(format_diff(proposal.diff))
        print("policy:", proposal.decision.verdict.name)

        try:
            writes.execute("reprice-1", 1, "worker-1")
        except NotApproved as refused:
            print("before approval:", refused.code)

        # Who approves comes from your authentication layer, never from the plan.
        writes.approve("reprice-1", 1, Principal("human://shop.example/erin", "human"))
        done = writes.execute("reprice-1", 1, "worker-1")
        again = writes.execute("reprice-1", 1, "worker-1")  # a double click
        with store.transaction() as conn:
            cents = conn.execute(sa.select(prices.c.cents)).scalar_one()
        print("executed:", done.status.name, "then", again.status.name, "; price now", cents)
        if (done.status.name, again.status.name, cents) == ("EXECUTED", "ALREADY_EXECUTED", 1799):
            print("OK: approved write plan executed once")
    finally:
        store.close()


if __name__ == "__main__":
    main()
