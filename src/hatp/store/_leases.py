"""A system of record's lease bookkeeping: epochs, granted leases, rejection receipts.

A system of record that grants compensation leases (docs/spec.md §23) keeps
three tables beside its own data, in the same database, so that a mutation,
the epoch it moves and the lease it spends commit together or not at all:

- ``hatp_lease_epoch``: each leased resource's epoch, moved only by a
  compare-and-swap (:meth:`LeaseBook.advance_epoch_txn`);
- ``hatp_lease``: each lease granted, with the pre-image it snapshotted,
  the mutation it covers and what became of it (:class:`LeaseStatus`);
- ``hatp_lease_rejection``: every signed rejection receipt, for audit;
- ``hatp_lease_escrow_told``: the escrowed leases whose case the escrow desk
  has been told (:meth:`LeaseBook.escrow_told`).

Methods named ``*_txn`` run inside the caller's transaction (the system of
record's, which also reads and writes its data); the others are a short
transaction of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from hatp.store._engine import Store, insert_or_ignore
from hatp.store._schema import (
    AnyRow,
    dump_json,
    dump_optional_json,
    load_json,
    load_optional_json,
    metadata,
)

__all__ = ["LeaseBook", "LeaseRow", "LeaseStatus"]

#: Each leased resource's fence epoch.
lease_epoch = sa.Table(
    "hatp_lease_epoch",
    metadata,
    sa.Column("resource", sa.Text, primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
)

#: Each compensation lease a system of record granted, and what became of it.
lease = sa.Table(
    "hatp_lease",
    metadata,
    sa.Column("lease_id", sa.Text, primary_key=True),
    sa.Column("resource", sa.Text, nullable=False),
    sa.Column("lease_digest", sa.Text, nullable=False),
    sa.Column("lease", sa.Text, nullable=False),  # canonical JSON of the signed lease
    sa.Column("mutation", sa.Text, nullable=False),  # canonical JSON {action, params}
    sa.Column("pre_image", sa.Text, nullable=False),  # canonical JSON of the state at grant
    sa.Column("status", sa.Text, nullable=False),  # a LeaseStatus value
    sa.Column("expires_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("post_image_hash", sa.Text, nullable=True),  # once applied
    sa.Column("commit_receipt", sa.Text, nullable=True),  # once applied
    sa.Column("recovery_receipt", sa.Text, nullable=True),  # once recovered, voided, escrowed
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_hatp_lease_resource", "resource"),
)

#: Every signed rejection receipt a system of record issued, oldest first.
lease_rejection = sa.Table(
    "hatp_lease_rejection",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource", sa.Text, nullable=False),
    sa.Column("lease_id", sa.Text, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),  # ms
    sa.Column("receipt", sa.Text, nullable=False),  # canonical JSON of the signed receipt
    sa.Index("ix_hatp_lease_rejection_resource", "resource", "seq"),
)


#: The HUMAN_ESCROW leases whose case the system of record's Escrow hook took.
lease_escrow_told = sa.Table(
    "hatp_lease_escrow_told",
    metadata,
    sa.Column("lease_id", sa.Text, primary_key=True),
    sa.Column("told_at", sa.BigInteger, nullable=False),  # ms
)


class LeaseStatus(StrEnum):
    """Where a granted lease stands. Each moves only forward, along
    granted → applied → recovered | escrowed → recovered, or granted → voided."""

    GRANTED = "granted"  # issued; its mutation has not run
    APPLIED = "applied"  # its mutation ran, under the fence
    RECOVERED = "recovered"  # the pre-image was restored
    ESCROWED = "escrowed"  # HUMAN_ESCROW: a person was asked to undo it
    VOIDED = "voided"  # recovered before it was applied: it can no longer be used


@dataclass(frozen=True)
class LeaseRow:
    """One granted lease as the system of record keeps it (JSON members parsed)."""

    lease_id: str
    resource: str
    lease_digest: str
    lease: dict[str, Any]
    mutation: dict[str, Any]
    pre_image: Any
    status: LeaseStatus
    expires_at: int
    post_image_hash: str | None
    commit_receipt: dict[str, Any] | None
    recovery_receipt: dict[str, Any] | None

    @classmethod
    def _from_row(cls, row: AnyRow) -> LeaseRow:
        return cls(
            lease_id=row.lease_id,
            resource=row.resource,
            lease_digest=row.lease_digest,
            lease=load_json(row.lease),
            mutation=load_json(row.mutation),
            pre_image=load_json(row.pre_image),
            status=LeaseStatus(row.status),
            expires_at=row.expires_at,
            post_image_hash=row.post_image_hash,
            commit_receipt=load_optional_json(row.commit_receipt),
            recovery_receipt=load_optional_json(row.recovery_receipt),
        )


class LeaseBook:
    """The lease tables of one system of record's database (a :class:`Store`)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def epoch_txn(self, conn: Connection, resource: str, *, lock: bool) -> int:
        """The resource's epoch (0 if it was never leased). With ``lock`` the row is
        created if missing and locked ``FOR UPDATE`` on PostgreSQL until the caller's
        transaction ends (SQLite's ``BEGIN IMMEDIATE`` already holds the write lock)."""
        if lock:
            conn.execute(
                insert_or_ignore(self._store.dialect, lease_epoch),
                {"resource": resource, "epoch": 0},
            )
        query = sa.select(lease_epoch.c.epoch).where(lease_epoch.c.resource == resource)
        if lock and self._store.dialect == "postgresql":
            query = query.with_for_update()
        found = conn.execute(query).scalar()
        return 0 if found is None else int(found)

    def advance_epoch_txn(
        self, conn: Connection, resource: str, *, expected: int, new: int
    ) -> bool:
        """Compare and swap: move the epoch from ``expected`` to ``new``; whether it moved."""
        moved = conn.execute(
            sa.update(lease_epoch)
            .where(lease_epoch.c.resource == resource, lease_epoch.c.epoch == expected)
            .values(epoch=new)
        )
        return bool(moved.rowcount == 1)

    def add_txn(
        self,
        conn: Connection,
        *,
        signed: dict[str, Any],
        lease_digest: str,
        mutation: dict[str, Any],
        pre_image: Any,
        expires_at: int,
        now: int,
    ) -> None:
        """Store a lease just granted, as ``granted``."""
        conn.execute(
            sa.insert(lease).values(
                lease_id=signed["leaseId"],
                resource=signed["resource"],
                lease_digest=lease_digest,
                lease=dump_json(signed),
                mutation=dump_json(mutation),
                pre_image=dump_json(pre_image),
                status=LeaseStatus.GRANTED.value,
                expires_at=expires_at,
                updated_at=now,
            )
        )

    def get_txn(self, conn: Connection, lease_id: str, *, lock: bool) -> LeaseRow | None:
        """The lease, or ``None`` if this system of record never granted it."""
        query = sa.select(lease).where(lease.c.lease_id == lease_id)
        if lock and self._store.dialect == "postgresql":
            query = query.with_for_update()
        found = conn.execute(query).first()
        return None if found is None else LeaseRow._from_row(found)

    def move_txn(
        self,
        conn: Connection,
        lease_id: str,
        *,
        was: LeaseStatus,
        to: LeaseStatus,
        now: int,
        post_image_hash: str | None = None,
        commit_receipt: dict[str, Any] | None = None,
        recovery_receipt: dict[str, Any] | None = None,
    ) -> bool:
        """Move the lease from status ``was`` to ``to``, setting the members given;
        whether it moved (it does not when its status is no longer ``was``)."""
        changes: dict[str, Any] = {"status": to.value, "updated_at": now}
        if post_image_hash is not None:
            changes["post_image_hash"] = post_image_hash
        if commit_receipt is not None:
            changes["commit_receipt"] = dump_optional_json(commit_receipt)
        if recovery_receipt is not None:
            changes["recovery_receipt"] = dump_optional_json(recovery_receipt)
        moved = conn.execute(
            sa.update(lease)
            .where(lease.c.lease_id == lease_id, lease.c.status == was.value)
            .values(**changes)
        )
        return bool(moved.rowcount == 1)

    def leases(self, resource: str) -> list[LeaseRow]:
        """Every lease granted on ``resource``, in lease id order."""
        query = sa.select(lease).where(lease.c.resource == resource).order_by(lease.c.lease_id)
        with self._store.transaction() as conn:
            return [LeaseRow._from_row(row) for row in conn.execute(query)]

    def escrow_told(self, lease_id: str) -> bool:
        """Whether the escrow desk took this escrowed lease's case (:meth:`mark_escrow_told`)."""
        query = sa.select(lease_escrow_told.c.lease_id).where(
            lease_escrow_told.c.lease_id == lease_id
        )
        with self._store.transaction() as conn:
            return conn.execute(query).first() is not None

    def mark_escrow_told(self, lease_id: str, *, at: int) -> None:
        """Note that the escrow desk took the case (again is harmless: the first note stays)."""
        with self._store.transaction() as conn:
            conn.execute(
                insert_or_ignore(self._store.dialect, lease_escrow_told),
                {"lease_id": lease_id, "told_at": at},
            )

    def add_rejection(self, receipt: dict[str, Any], *, at: int) -> None:
        """Keep a signed rejection receipt (in a transaction of its own: the refused
        mutation's was rolled back)."""
        with self._store.transaction() as conn:
            conn.execute(
                sa.insert(lease_rejection).values(
                    resource=receipt["resource"],
                    lease_id=receipt["leaseId"],
                    reason=receipt["reason"],
                    at=at,
                    receipt=dump_json(receipt),
                )
            )

    def rejections(self, resource: str | None = None) -> list[dict[str, Any]]:
        """The signed rejection receipts kept, oldest first; of ``resource`` only if given."""
        query = sa.select(lease_rejection.c.receipt).order_by(lease_rejection.c.seq)
        if resource is not None:
            query = query.where(lease_rejection.c.resource == resource)
        with self._store.transaction() as conn:
            return [load_json(text) for text in conn.execute(query).scalars()]
