"""The system of record's side of compensation leases (docs/spec.md §23).

A :class:`SystemOfRecord` guards resources of its own database. It offers a
small vocabulary of typed mutations (:class:`Action`: a pure function of a
resource's state and params) and:

- **grants** a lease for one mutation of one resource: it snapshots the
  pre-image, runs the mutation on a copy, and stages the inverse of the mode
  asked for itself (an agent never writes the inverse it will be held to);
  for a compensating action it proves, before signing, that the inverse
  gives back the pre-image;
- **applies** a mutation under a lease in one database transaction: every
  rule of :func:`verify_lease` against the resource as it is now (read
  locked), then its own two ([LEASE-GRANTED], [LEASE-SHADOW]), then a
  compare-and-swap of the resource's epoch to the lease's fence, the write
  and the lease spent, with a signed commit receipt. Of any number of
  writers holding leases fenced at the same epoch, exactly one wins; the
  others are refused ``MONOTONIC_CAS_FENCING`` (HTTP 409). A retry with the
  same lease and mutation gets the stored receipt and writes nothing;
- **recovers** on demand, by the lease's mode: runs the staged compensating
  action, restores the staged snapshot, restores the pre-image it kept for
  a dry-run shadow, or escalates to a person (HUMAN_ESCROW), who restores
  it by hand. A restore is fenced too: the resource must still be what the
  mutation left, and what it writes back must digest to the leased pre-image.

Every refusal of a lease is kept, signed, in the audit table.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock, parse_time
from hatp.errors import (
    HatpError,
    InvalidJson,
    LeaseRefused,
    LeaseUnavailable,
    LeaseUnknown,
    MutationInvalid,
)
from hatp.evidence import Keyring, SigningKey, digest, parse_json
from hatp.lease._actions import Action, parse_mutation, run_action
from hatp.lease._issue import grant
from hatp.lease._model import (
    CompensationLease,
    LeaseBinding,
    Mutation,
    RecoveryMode,
    RecoveryOutcome,
)
from hatp.lease._receipts import signed_receipt
from hatp.lease._recovery import (
    Escrow,
    EscrowCase,
    Recovered,
    case_of,
    leased,
    recovered_before,
    recovery_refused,
    stored,
)
from hatp.lease._resources import Resources, State
from hatp.lease._verify import CheckedLease, lease_refusal, verify_lease
from hatp.model import parse_address
from hatp.store import LeaseBook, LeaseRow, LeaseStatus, Store, to_ms

__all__ = ["Applied", "LeaseObserver", "SystemOfRecord"]

_log = logging.getLogger(__name__)


class LeaseObserver(Protocol):
    """Told of each lease a :class:`SystemOfRecord` granted or applied, or refused."""

    def lease_decided(self, stage: str, refused: HatpError | None) -> None:
        """At ``stage`` (``grant`` or ``apply``) the lease passed (``refused`` None) or was
        refused with ``refused``."""


#: The longest rollback window granted unless the system of record says otherwise.
DEFAULT_MAX_WINDOW_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class Applied:
    """A mutation applied under a lease: the signed ``lease-commit`` receipt, and
    whether this call found it applied before (a retry: nothing was written)."""

    receipt: dict[str, Any]
    replayed: bool


class SystemOfRecord:
    """Grants compensation leases on its resources and applies mutations under them.

    ``store`` holds both its data (read and written through ``resources``)
    and the lease tables, so that a write, its epoch and its lease commit
    together. ``key`` signs leases and receipts for ``issuer``; ``keyring``
    must trust that key (leases are verified like anyone else's).
    ``escrow_address`` (a ``human://`` address) enables HUMAN_ESCROW, and
    ``escrow`` tells its people.

    Raises:
        ValueError: two actions share a name, the windows are not positive,
            or ``escrow_address`` does not name people.
    """

    def __init__(
        self,
        store: Store,
        *,
        issuer: str,
        key: SigningKey,
        keyring: Keyring,
        resources: Resources,
        actions: Iterable[Action],
        clock: Clock,
        max_window_ms: int = DEFAULT_MAX_WINDOW_MS,
        escrow_address: str | None = None,
        escrow: Escrow | None = None,
        observer: LeaseObserver | None = None,
    ) -> None:
        self.store = store
        self._observer = observer
        self.issuer = issuer
        self.key = key
        self.keyring = keyring
        self.resources = resources
        self.clock = clock
        self._book = LeaseBook(store)
        self._actions: dict[str, Action] = {}
        for action in actions:
            if action.name in self._actions:
                raise ValueError(f"two actions are named {action.name!r}")
            self._actions[action.name] = action
        if max_window_ms <= 0:
            raise ValueError("the longest window granted is a positive number of ms")
        self.max_window_ms = max_window_ms
        if escrow_address is not None and not parse_address(escrow_address).is_human:
            raise ValueError(f"the escrow address names people (human://), not {escrow_address}")
        self.escrow_address = escrow_address
        self._escrow = escrow

    # --- granting ---

    def grant(
        self,
        resource: str,
        mutation: Mapping[str, Any],
        *,
        t_req_ms: int,
        mode: RecoveryMode,
        binding: LeaseBinding | None = None,
    ) -> dict[str, Any]:
        """Grant a lease for ``mutation`` (``{action, params}``) of ``resource``.

        Returns:
            The signed lease (its window is ``min(t_req_ms, max_window_ms)``).

        Raises:
            MutationInvalid: an action not offered here, or params it refuses.
            ResourceUnknown: no such resource.
            LeaseUnavailable: the mode cannot be staged for this mutation
                (``MODE_UNSUPPORTED``, ``NOT_INVERTIBLE``).
            ValueError: ``t_req_ms`` is negative.
            StoreUnavailable: the database failed; nothing was granted.
        """
        try:
            signed = self._grant(resource, mutation, t_req_ms, mode, binding)
        except HatpError as error:
            self._tell("grant", error)
            raise
        self._tell("grant", None)
        return signed

    def _tell(self, stage: str, refused: HatpError | None) -> None:
        if self._observer is None:
            return
        try:
            self._observer.lease_decided(stage, refused)
        except Exception:  # watching must not change what the system of record does
            _log.warning("%s: its lease observer failed", self.issuer, exc_info=True)

    def _grant(
        self,
        resource: str,
        mutation: Mapping[str, Any],
        t_req_ms: int,
        mode: RecoveryMode,
        binding: LeaseBinding | None,
    ) -> dict[str, Any]:
        wanted = parse_mutation(mutation)
        action = self._action(wanted.action)
        now = self.clock.now()
        with self.store.transaction() as conn:
            epoch = self._book.epoch_txn(conn, resource, lock=True)
            state = self.resources.read_txn(conn, resource, lock=True)
            after = run_action(action, state, wanted.params)
            signed = grant(
                resource=resource,
                state=state,
                epoch=epoch,
                mutation=wanted.to_wire(),
                t_req_ms=t_req_ms,
                mode=mode,
                inverse=self._inverse(mode, resource, wanted, state, after, epoch),
                key=self.key,
                issuer=self.issuer,
                clock=self.clock,
                max_window_ms=self.max_window_ms,
                binding=binding,
            )
            self._book.add_txn(
                conn,
                signed=signed,
                lease_digest=digest(signed),
                mutation=wanted.to_wire(),
                pre_image=state,
                expires_at=to_ms(parse_time(signed["expiresAt"])),
                now=to_ms(now),
            )
        fault_point("lease.granted")
        return signed

    def _inverse(
        self,
        mode: RecoveryMode,
        resource: str,
        wanted: Mutation,
        state: State,
        after: State,
        epoch: int,
    ) -> dict[str, Any] | None:
        """Stage the inverse payload of ``mode`` (``None``: grant stages the snapshot)."""
        if mode is RecoveryMode.SNAPSHOT_RESTORE:
            return None
        if mode is RecoveryMode.DRY_RUN_SHADOW:
            return {"shadow": after, "result": {"stateHash": digest(after), "epoch": epoch + 1}}
        if mode is RecoveryMode.HUMAN_ESCROW:
            if self.escrow_address is None:
                raise LeaseUnavailable(
                    "this system of record has no escrow desk for HUMAN_ESCROW: ask for "
                    "another recovery mode",
                    reason="MODE_UNSUPPORTED",
                    mode=mode.value,
                )
            return {
                "address": self.escrow_address,
                "instructions": f"Undo {wanted.action} on {resource}: put it back to the state "
                f"whose digest is {digest(state)} (the system of record kept it).",
            }
        action = self._actions[wanted.action]
        if action.inverse is None:
            raise LeaseUnavailable(
                f"{wanted.action} has no compensating action: ask for SNAPSHOT_RESTORE, "
                "DRY_RUN_SHADOW or HUMAN_ESCROW",
                reason="MODE_UNSUPPORTED",
                mode=mode.value,
            )
        inverse = parse_mutation(action.inverse(copy.deepcopy(state), dict(wanted.params)))
        undone = run_action(self._action(inverse.action), after, inverse.params)
        if digest(undone) != digest(state):
            raise LeaseUnavailable(
                f"the compensating action of {wanted.action} does not give back the state "
                f"{resource} has now; it cannot be staged",
                reason="NOT_INVERTIBLE",
                mode=mode.value,
            )
        return inverse.to_wire()

    # --- applying ---

    def apply(
        self,
        lease_doc: Mapping[str, Any] | bytes,
        *,
        resource: str,
        mutation: Mapping[str, Any],
        fence_token: int | None = None,
        binding: LeaseBinding | None = None,
    ) -> Applied:
        """Apply ``mutation`` to ``resource`` under the lease, in one transaction.

        ``fence_token`` is the epoch the writer says it writes at (HTTP
        ``Agent-Fence-Token``); ``binding`` the transaction it runs in, if any.

        Returns:
            The signed commit receipt; ``replayed`` when this lease and
            mutation were applied before (nothing was written now).

        Raises:
            LeaseRefused: a rule refused the lease (``data.receipt`` is signed
                and kept in the audit table); nothing was written.
            MutationInvalid: the action refused its params; nothing was written.
            ResourceUnknown: no such resource.
            StoreUnavailable: the database failed; nothing was written.
        """
        wanted = parse_mutation(mutation).to_wire()
        try:
            with self.store.transaction() as conn:
                applied = self._apply_txn(conn, lease_doc, resource, wanted, fence_token, binding)
        except LeaseRefused as refused:
            self._book.add_rejection(refused.data["receipt"], at=to_ms(self.clock.now()))
            self._tell("apply", refused)
            raise
        self._tell("apply", None)
        if not applied.replayed:
            fault_point("lease.applied")
        return applied

    def _apply_txn(
        self,
        conn: Connection,
        lease_doc: Mapping[str, Any] | bytes,
        resource: str,
        wanted: dict[str, Any],
        fence_token: int | None,
        binding: LeaseBinding | None,
    ) -> Applied:
        epoch = self._book.epoch_txn(conn, resource, lock=True)
        state = self.resources.read_txn(conn, resource, lock=True)
        row = self._row_named(conn, lease_doc)
        before = _applied_before(row, lease_doc, resource, wanted, binding)
        if before is not None:
            return Applied(before, replayed=True)
        checked = verify_lease(
            lease_doc,
            resource=resource,
            current_state=state,
            current_epoch=epoch,
            mutation=wanted,
            keyring=self.keyring,
            clock=self.clock,
            verifier_key=self.key,
            binding=binding,
            fence_token=fence_token,
        )
        lease = checked.lease
        now = self.clock.now()
        # [LEASE-GRANTED] A lease this system of record granted, and still unspent.
        problem = _granted_problem(row, checked)
        if problem is not None:
            raise self._refusal(lease_doc, resource, "LEASE-GRANTED", problem)
        after = run_action(self._action(wanted["action"]), state, wanted["params"])
        # [LEASE-SHADOW] A dry-run shadow lease runs exactly the mutation it shadowed.
        if lease.recovery_mode == RecoveryMode.DRY_RUN_SHADOW and _checks.is_on("LEASE-SHADOW"):
            shadow = (lease.inverse or {}).get("shadow")
            if digest(after) != digest(shadow):
                raise self._refusal(
                    lease_doc,
                    resource,
                    "LEASE-SHADOW",
                    "the mutation leaves another state than its dry-run shadow",
                )
        if not self._book.advance_epoch_txn(
            conn, resource, expected=epoch, new=lease.cas_fence_epoch
        ):
            raise self._refusal(
                lease_doc, resource, "LEASE-FENCE", "another writer moved the epoch first"
            )
        self.resources.write_txn(conn, resource, after)
        receipt = signed_receipt(
            "lease-commit",
            {
                "leaseId": lease.lease_id,
                "leaseDigest": checked.digest,
                "resource": resource,
                "mutationDigest": lease.mutation_digest,
                "epoch": lease.cas_fence_epoch,
                "preImageStateHash": lease.pre_image_state_hash,
                "postImageStateHash": digest(after),
                "binding": None if lease.binding is None else lease.binding.to_wire(),
                "issuer": self.issuer,
            },
            at=now,
            key=self.key,
        )
        moved = self._book.move_txn(
            conn,
            lease.lease_id,
            was=LeaseStatus.GRANTED,
            to=LeaseStatus.APPLIED,
            now=to_ms(now),
            post_image_hash=digest(after),
            commit_receipt=receipt,
        )
        # The row is locked, so its status read above still holds: only a lease that
        # [LEASE-GRANTED] (switched off) let through gets here unmoved.
        if not moved and _checks.is_on("LEASE-GRANTED"):
            raise self._refusal(lease_doc, resource, "LEASE-GRANTED", "the lease was spent")
        return Applied(receipt, replayed=False)

    # --- recovering ---

    def recover(self, lease_id: str) -> Recovered:
        """Run the lease's recovery once: undo its mutation, or void an unspent lease.

        By mode: ``COMPENSATING_ACTION`` runs the staged inverse action;
        ``SNAPSHOT_RESTORE`` writes the staged snapshot back;
        ``DRY_RUN_SHADOW`` writes back the pre-image kept at grant;
        ``HUMAN_ESCROW`` stores the case and tells :class:`Escrow` (a person
        then calls :meth:`restore_by_hand`). A lease never applied is voided.

        Returns:
            The signed recovery receipt; ``replayed`` when it was run before.

        Raises:
            LeaseUnknown: this system of record never granted the lease.
            RecoveryRefused: ``MOVED``, ``MISMATCH`` or ``WINDOW_CLOSED``;
                nothing was written.
            StoreUnavailable: the database failed; nothing was written.
        """
        with self.store.transaction() as conn:
            row = self._known_txn(conn, lease_id)
            recovered = recovered_before(row)
            if recovered is None:
                if row.status is LeaseStatus.GRANTED:
                    recovered = self._settle_txn(conn, row, RecoveryOutcome.VOIDED, None, None)
                else:
                    recovered = self._undo_txn(conn, row)
        if recovered.case is not None:
            self._tell_escrow(recovered.case)
        if not recovered.replayed:
            fault_point("lease.recovered")
        return recovered

    def _tell_escrow(self, case: EscrowCase) -> None:
        """[SOR-RECOVER] Hand an escrowed case to the Escrow hook until it took it once.

        The escalation is stored before the hook is called, so a hook that raised,
        or a process that died in between, leaves the case untold: the next
        ``recover`` of the lease tells it (the hook may see a case twice, never
        zero times; once it returned, repeats tell nobody).
        """
        if self._escrow is None or self._book.escrow_told(case.lease_id):
            return
        self._escrow.open(case)
        self._book.mark_escrow_told(case.lease_id, at=to_ms(self.clock.now()))

    def restore_by_hand(self, lease_id: str, state: State, *, by: str) -> Recovered:
        """Record a person's restore of an escalated HUMAN_ESCROW lease.

        ``by`` is the person, as the caller's authentication knows them.
        ``state`` must digest to the leased pre-image; the resource must
        still be what the mutation left (it is written back) or already the
        pre-image (restored by the person in the system's own tools).

        Returns:
            The signed recovery receipt naming ``by``; ``replayed`` when the
            restore was recorded before (the receipt then names who did it).

        Raises:
            LeaseUnknown: never granted here.
            RecoveryRefused: ``NOT_ESCROWED`` (also for a lease the system
                recovered itself), ``MISMATCH`` or ``MOVED``;
                nothing was written.
            ValueError: ``by`` is empty.
            StoreUnavailable: the database failed; nothing was written.
        """
        if not by:
            raise ValueError("name the person who restored it, from authentication")
        with self.store.transaction() as conn:
            row = self._known_txn(conn, lease_id)
            escrow = row.lease["recoveryMode"] == RecoveryMode.HUMAN_ESCROW.value
            if row.status is LeaseStatus.RECOVERED and escrow:
                return stored(row)  # a retry; one the system recovered itself is not escrowed
            if row.status is not LeaseStatus.ESCROWED:
                raise recovery_refused(
                    "NOT_ESCROWED", row, f"the lease is {row.status.value}, not escrowed"
                )
            lease = leased(row)
            if digest(state) != lease.pre_image_state_hash:
                raise recovery_refused("MISMATCH", row, "the state is not the leased pre-image")
            self._fenced_txn(conn, row, lease, also=lease.pre_image_state_hash)
            return self._settle_txn(conn, row, RecoveryOutcome.RESTORED, state, by)

    def _undo_txn(self, conn: Connection, row: LeaseRow) -> Recovered:
        lease = leased(row)
        if to_ms(self.clock.now()) >= row.expires_at:
            raise recovery_refused(
                "WINDOW_CLOSED", row, f"the rollback window ended at {lease.expires_at}"
            )
        live = self._fenced_txn(conn, row, lease)
        mode = RecoveryMode(lease.recovery_mode)
        staged = lease.inverse or {}
        if mode is RecoveryMode.HUMAN_ESCROW:
            return self._settle_txn(conn, row, RecoveryOutcome.ESCROWED, None, None)
        if mode is RecoveryMode.COMPENSATING_ACTION:
            inverse = parse_mutation(staged)
            try:
                restored = run_action(self._action(inverse.action), live, inverse.params)
            except MutationInvalid as refused:  # it ran at grant; now it cannot restore
                raise recovery_refused("MISMATCH", row, refused.message) from None
        elif mode is RecoveryMode.SNAPSHOT_RESTORE:
            restored = staged["snapshot"]
        else:  # DRY_RUN_SHADOW: the shadow ran before; the pre-image was kept at grant
            restored = row.pre_image
        if digest(restored) != lease.pre_image_state_hash:
            raise recovery_refused("MISMATCH", row, f"{mode.value} would not restore it")
        return self._settle_txn(conn, row, RecoveryOutcome.RESTORED, restored, None)

    def _fenced_txn(
        self, conn: Connection, row: LeaseRow, lease: CompensationLease, also: str | None = None
    ) -> State:
        """The resource's live state, refused ``MOVED`` unless it is at the lease's fence
        and is what the mutation left (or ``also``)."""
        epoch = self._book.epoch_txn(conn, row.resource, lock=True)
        live = self.resources.read_txn(conn, row.resource, lock=True)
        if epoch != lease.cas_fence_epoch or digest(live) not in (row.post_image_hash, also):
            raise recovery_refused(
                "MOVED",
                row,
                f"{row.resource} changed after the leased mutation (epoch {epoch}, fence "
                f"{lease.cas_fence_epoch}): undoing it now would destroy that change",
            )
        return live

    def _settle_txn(
        self,
        conn: Connection,
        row: LeaseRow,
        outcome: RecoveryOutcome,
        restored: State | None,
        by: str | None,
    ) -> Recovered:
        """Write the restored state (if any) at a new epoch, sign the receipt, move the row."""
        lease = leased(row)
        epoch = self._book.epoch_txn(conn, row.resource, lock=True)
        if restored is not None:
            # Recovery moves the epoch up, never back: a lease granted on the state the
            # mutation left is fenced off by it.
            self._book.advance_epoch_txn(conn, row.resource, expected=epoch, new=epoch + 1)
            epoch += 1
            self.resources.write_txn(conn, row.resource, copy.deepcopy(restored))
        now = self.clock.now()
        receipt = signed_receipt(
            "lease-recovery",
            {
                "leaseId": row.lease_id,
                "leaseDigest": row.lease_digest,
                "resource": row.resource,
                "recoveryMode": lease.recovery_mode,
                "outcome": outcome.value,
                "epoch": epoch,
                "restoredStateHash": None if restored is None else digest(restored),
                "by": by,
                "issuer": self.issuer,
            },
            at=now,
            key=self.key,
        )
        status = {
            RecoveryOutcome.RESTORED: LeaseStatus.RECOVERED,
            RecoveryOutcome.VOIDED: LeaseStatus.VOIDED,
            RecoveryOutcome.ESCROWED: LeaseStatus.ESCROWED,
        }[outcome]
        self._book.move_txn(
            conn, row.lease_id, was=row.status, to=status, now=to_ms(now), recovery_receipt=receipt
        )
        moved = dataclasses.replace(row, status=status, recovery_receipt=receipt)
        return Recovered(receipt, replayed=False, case=case_of(moved))

    # --- reading ---

    @property
    def actions(self) -> list[str]:
        """The names of the typed mutations this system of record offers, sorted."""
        return sorted(self._actions)

    def post_image(self, state: State, mutation: Mapping[str, Any]) -> State:
        """The state ``mutation`` (``{action, params}``) leaves ``state`` in; writes nothing.

        Raises:
            MutationInvalid: an action not offered here, or params it refuses.
        """
        wanted = parse_mutation(mutation)
        return run_action(self._action(wanted.action), state, wanted.params)

    def lease(self, lease_id: str) -> LeaseRow:
        """The lease as this system of record keeps it: its status and receipts.

        Raises:
            LeaseUnknown: never granted here.
            StoreUnavailable: the database failed.
        """
        with self.store.transaction() as conn:
            return self._known_txn(conn, lease_id, lock=False)

    def rejections(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Every signed rejection receipt kept (of ``resource`` only, if given), oldest first."""
        return self._book.rejections(resource)

    def state(self, resource: str) -> tuple[State, int]:
        """The resource's state and epoch now.

        Raises:
            ResourceUnknown: no such resource.
            StoreUnavailable: the database failed.
        """
        with self.store.transaction() as conn:
            epoch = self._book.epoch_txn(conn, resource, lock=False)
            return self.resources.read_txn(conn, resource, lock=False), epoch

    # --- helpers ---

    def _action(self, name: str) -> Action:
        action = self._actions.get(name)
        if action is None:
            raise MutationInvalid(
                f"this system of record offers no action {name!r}; it offers "
                f"{sorted(self._actions)}",
                action=name,
            )
        return action

    def _row_named(self, conn: Connection, lease_doc: Mapping[str, Any] | bytes) -> LeaseRow | None:
        doc: object = lease_doc
        if isinstance(lease_doc, bytes):
            try:
                doc = parse_json(lease_doc)
            except InvalidJson:
                return None  # verify_lease refuses it, with a receipt
        lease_id = doc.get("leaseId") if isinstance(doc, dict) else None
        if not isinstance(lease_id, str):
            return None
        return self._book.get_txn(conn, lease_id, lock=True)

    def _known_txn(self, conn: Connection, lease_id: str, *, lock: bool = True) -> LeaseRow:
        """The lease; with ``lock``, locked after its resource's epoch, in the order
        :meth:`apply` takes them, so a recovery racing an apply of it waits, never
        deadlocks."""
        row = self._book.get_txn(conn, lease_id, lock=False)
        if row is None:
            raise LeaseUnknown(f"{self.issuer} never granted lease {lease_id!r}", lease_id=lease_id)
        if not lock:
            return row
        self._book.epoch_txn(conn, row.resource, lock=True)
        locked = self._book.get_txn(conn, lease_id, lock=True)
        return row if locked is None else locked  # leases are never deleted

    def _refusal(
        self, lease_doc: Mapping[str, Any] | bytes, resource: str, rule: str, message: str
    ) -> LeaseRefused:
        return lease_refusal(
            lease_doc,
            resource=resource,
            rule=rule,
            message=message,
            verifier_key=self.key,
            now=self.clock.now(),
        )


def _applied_before(
    row: LeaseRow | None,
    lease_doc: Mapping[str, Any] | bytes,
    resource: str,
    wanted: Mapping[str, Any],
    binding: LeaseBinding | None,
) -> dict[str, Any] | None:
    """The commit receipt, if this is a retry of the mutation applied under this very lease
    (on the same resource, in the same transaction); anything else is verified afresh."""
    if row is None or row.commit_receipt is None or row.resource != resource:
        return None
    if row.commit_receipt["binding"] != (None if binding is None else binding.to_wire()):
        return None
    try:
        same_lease = _lease_digest(lease_doc) == row.lease_digest
    except InvalidJson:
        return None
    if same_lease and digest(dict(wanted)) == row.lease["mutationDigest"]:
        return row.commit_receipt
    return None


def _lease_digest(lease_doc: Mapping[str, Any] | bytes) -> str:
    return digest(parse_json(lease_doc) if isinstance(lease_doc, bytes) else dict(lease_doc))


def _granted_problem(row: LeaseRow | None, checked: CheckedLease) -> str | None:
    if not _checks.is_on("LEASE-GRANTED"):
        return None
    if row is None or row.lease_digest != checked.digest:
        return "this system of record has no record of granting this lease"
    if row.status is not LeaseStatus.GRANTED:
        return f"the lease is {row.status.value}: a lease covers one mutation, once"
    return None
