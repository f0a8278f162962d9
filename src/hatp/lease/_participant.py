"""A leased mutation as a compensate-tier branch of a hatp transaction (docs/spec.md §23).

:class:`LeasedOperation` is a participant :class:`~hatp.participant.Operation`
whose commit mutates a resource of a :class:`SystemOfRecord` under a
compensation lease, so the undo a compensate-tier yes vote promises is one
the system of record has signed for and staged. A branch's args are
``{"resource": str, "mutation": {"action": str, "params": object}}``.

- prepare is the dry run [LEASE-PARTICIPANT]: the system of record grants a
  lease for exactly that mutation, bound to the transaction and its plan
  digest, and the lease must pass :func:`verify_lease` against the resource
  as it is now (``tGrantedMs >= tReqMs`` included) and outlive the plan's
  ``decideBy``; otherwise the lease is voided and the vote is no. The yes
  vote's preconditions are the resource's pre-image digest, and as scope the
  lease's id and digest, so the signed prepare receipt names the lease the
  undo rests on; the commit's re-read of the resource refuses drift with
  ``PRECONDITION_CHANGED`` [PART-PRECONDITION].
- commit applies the mutation under the lease (the system of record checks
  it again, moves the fence and signs a commit receipt); the undo token is
  the lease id. A retry finds the mutation applied and writes nothing.
- compensate runs the lease's recovery [LEASE-PARTICIPANT-UNDO]; a
  ``HUMAN_ESCROW`` recovery handed to a person is ``RECOVERY_REQUIRED``.
- abort voids the lease, so no late apply can run under it; a lease this
  branch applied whose branch state was lost is recovered instead
  [LEASE-PARTICIPANT-ABORT].

The system of record commits in its own store's transactions, apart from
the participant's. On one SQLite file the two would wait on each other's
write lock, so prepare refuses that set-up [LEASE-PARTICIPANT-SAMEDB].

The yes vote's preview is ``exact``: the resource's fields the mutation
changes, from the state the lease was verified against to the state the
action leaves it in, since the commit runs under the lease's epoch fence
only on that very state. The commit observes the same, from the pre-image the
system of record kept to its post-image, checked against the digests its
signed commit receipt names.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from hatp.clock import parse_time
from hatp.errors import (
    LeaseRefused,
    LeaseUnavailable,
    MutationInvalid,
    NotPrepared,
    RecoveryRequired,
    ResourceUnknown,
)
from hatp.evidence import digest
from hatp.lease._model import LeaseBinding, RecoveryMode, RecoveryOutcome
from hatp.lease._recovery import Recovered
from hatp.lease._resources import State
from hatp.lease._sor import SystemOfRecord
from hatp.lease._verify import verify_lease
from hatp.model import Certainty, Change, Preconditions, Tier
from hatp.model.effects import MAX_CHANGES
from hatp.participant import (
    Committed,
    Operation,
    Prepared,
    Refuse,
    Work,
    change,
    observed,
    preview,
    render,
)
from hatp.store import LeaseStatus, Store

__all__ = ["LeasedOperation"]

_log = logging.getLogger(__name__)

#: The longest window a lease may be asked for (the wire's bound on ``tReqMs``).
_MAX_T_REQ_MS = 10**12


class LeasedOperation(Operation):
    """Mutations of a system of record, each under a compensation lease, as a
    compensate-tier participant operation.

    ``sor`` grants the leases and applies the mutations; ``name`` is the
    operation's name in plans; ``mode`` the recovery mode asked for;
    ``t_req_ms`` the rollback window asked for, from prepare. A branch's
    args are ``{"resource": str, "mutation": {"action": str, "params": {...}}}``.

    Raises:
        ValueError: ``name`` is empty or ``t_req_ms`` is not a positive integer
            of at most 10**12 ms.
    """

    tier = Tier.COMPENSATE

    def __init__(
        self,
        sor: SystemOfRecord,
        *,
        name: str,
        mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION,
        t_req_ms: int,
    ) -> None:
        if not name:
            raise ValueError("name the operation, as plans will")
        if isinstance(t_req_ms, bool) or not isinstance(t_req_ms, int):
            raise ValueError(f"t_req_ms is an integer number of ms, not {t_req_ms!r}")
        if not 0 < t_req_ms <= _MAX_T_REQ_MS:
            raise ValueError(f"t_req_ms is between 1 and {_MAX_T_REQ_MS} ms, not {t_req_ms}")
        self.name = name
        self.mode = RecoveryMode(mode)
        self.t_req_ms = t_req_ms
        self._sor = sor

    def prepare(self, work: Work) -> Prepared:
        """The dry run: get a lease for the branch's mutation, and vote yes only if it holds.

        Returns:
            The yes vote: preconditions ``{resource: preImageStateHash}`` with
            scope ``lease <leaseId> <digest of the lease>``; the lease in ``data``.

        Raises:
            Refuse: ``BAD_ARGS``, ``SAME_DATABASE``, the system of record's
                refusal (``MUTATION_INVALID``, ``RESOURCE_UNKNOWN``,
                ``LEASE_UNAVAILABLE``), the lease's (a ``LEASE_REFUSED`` reason,
                e.g. ``RECOVERY_WINDOW_INEQUALITY``) or ``LEASE_TOO_SHORT``.
            HatpError: the system of record could not be reached
                (``STORE_UNAVAILABLE``).
        """
        resource, mutation = _target(work)
        if _same_sqlite_file(work.conn, self._sor.store):
            raise Refuse(
                "SAME_DATABASE",
                "the system of record's store is the participant's own SQLite file; its "
                "transactions would wait on the participant's write lock. Give the system "
                f"of record {self._sor.issuer} its own database",
            )
        binding = _binding(work)
        try:
            lease = self._sor.grant(
                resource, mutation, t_req_ms=self.t_req_ms, mode=self.mode, binding=binding
            )
        except (MutationInvalid, ResourceUnknown) as error:
            raise Refuse(error.code, error.message) from None
        except LeaseUnavailable as error:
            raise Refuse(error.code, f"{error.data.get('reason')}: {error.message}") from None
        state, epoch = self._sor.state(resource)
        refusal = self._refusal(work, lease, resource, mutation, binding, state, epoch)
        if refusal is not None:
            self._sor.recover(lease["leaseId"])  # void it: a no vote leaves no live lease
            raise refusal
        # The lease was verified against ``state`` just now, so the mutation starts from it.
        changes = self._changes(resource, mutation, state)
        return Prepared(
            preconditions=_prepared_preconditions(lease),
            preview=None
            if changes is None
            else preview(Certainty.EXACT, changes, summary=_said(mutation, changes)),
            data={"lease": lease},
        )

    def _refusal(
        self,
        work: Work,
        lease: dict[str, Any],
        resource: str,
        mutation: dict[str, Any],
        binding: LeaseBinding,
        state: State,
        epoch: int,
    ) -> Refuse | None:
        """Why the granted lease does not carry a yes vote against ``state`` at ``epoch``
        (the resource now), or ``None``."""
        try:
            verify_lease(
                lease,
                resource=resource,
                current_state=state,
                current_epoch=epoch,
                mutation=mutation,
                keyring=self._sor.keyring,
                clock=self._sor.clock,
                verifier_key=self._sor.key,
                binding=binding,
            )
        except LeaseRefused as refused:
            return Refuse(refused.reason, refused.message)
        decide_by = work.plan.deadlines.decide_by
        if parse_time(lease["expiresAt"]) <= parse_time(decide_by):
            # A commit decided at decideBy would find the lease expired, and the undo gone.
            return Refuse(
                "LEASE_TOO_SHORT",
                f"the lease on {resource} ends at {lease['expiresAt']}, not after the plan's "
                f"decideBy {decide_by}: ask for a longer window or decide sooner",
            )
        return None

    def preconditions(self, work: Work) -> Preconditions:
        """The resource's state digest now, re-read at commit [PART-PRECONDITION].

        Raises:
            ResourceUnknown: the resource is gone.
            StoreUnavailable: the system of record could not be reached.
        """
        resource, _ = _target(work)
        lease = _lease(work)
        seen = work.prepared.preconditions if work.prepared is not None else None
        if seen is not None and self._sor.lease(lease["leaseId"]).status is LeaseStatus.APPLIED:
            # This branch's own mutation, applied by an earlier attempt whose branch state
            # was lost (the system of record commits apart from the participant's store):
            # the commit only finds its receipt.
            return seen
        state, _ = self._sor.state(resource)
        return Preconditions(versions={resource: digest(state)}, scope=_scope(lease))

    def commit(self, work: Work) -> Committed:
        """Apply the mutation under the lease; the undo token is the lease id.

        Returns:
            The effect: ``leaseId``, ``resource``, ``epoch``, ``postImageStateHash``
            and the system of record's signed ``lease-commit`` receipt as ``receipt``.

        Raises:
            LeaseRefused: the system of record refused the lease now (expired,
                fenced off, voided); nothing was written.
            HatpError: ``RESOURCE_UNKNOWN``, ``STORE_UNAVAILABLE``; nothing was written.
        """
        resource, mutation = _target(work)
        lease = _lease(work)
        applied = self._sor.apply(
            lease, resource=resource, mutation=mutation, binding=_binding(work)
        )
        receipt = applied.receipt
        changes = self._applied(lease["leaseId"], resource, mutation, receipt)
        return Committed(
            effect={
                "leaseId": lease["leaseId"],
                "resource": resource,
                "epoch": receipt["epoch"],
                "postImageStateHash": receipt["postImageStateHash"],
                "receipt": receipt,
            },
            observed=None
            if changes is None
            else observed(changes, summary=_said(mutation, changes)),
            undo_token=lease["leaseId"],
        )

    def _changes(
        self, resource: str, mutation: Mapping[str, Any], before: State
    ) -> list[Change] | None:
        """What ``mutation`` changes from ``before`` (``None``: it does not fit a preview)."""
        return _changes(resource, before, self._sor.post_image(before, mutation))

    def _applied(
        self, lease_id: str, resource: str, mutation: Mapping[str, Any], receipt: dict[str, Any]
    ) -> list[Change] | None:
        """What the mutation changed: from the pre-image the system of record kept for the
        lease; ``None`` (nothing observed) unless the images are the ones its receipt signs."""
        before = self._sor.lease(lease_id).pre_image
        after = self._sor.post_image(before, mutation) if isinstance(before, dict) else None
        if (
            after is None
            or digest(before) != receipt["preImageStateHash"]
            or digest(after) != receipt["postImageStateHash"]
        ):
            _log.warning(
                "lease %s on %s: the kept pre-image and the mutation do not give the images "
                "the commit receipt signs; nothing observed",
                lease_id,
                resource,
            )
            return None
        return _changes(resource, before, after)

    def compensate(self, work: Work, undo_token: str) -> None:
        """Run the lease's recovery once [LEASE-PARTICIPANT-UNDO].

        The lease recovered is the one this branch prepared, whatever the
        token says (the SDK has checked the token).

        Raises:
            RecoveryRequired: a ``HUMAN_ESCROW`` recovery was handed to a person
                (``data.reason`` ``ESCROWED``); the resource is not undone until
                they restore it, and the branch stays committed.
            RecoveryRefused: ``MOVED``, ``MISMATCH`` or ``WINDOW_CLOSED``; nothing
                was written.
            StoreUnavailable: the system of record could not be reached.
        """
        self._recover(work)

    def abort(self, work: Work) -> None:
        """Void the lease, so no later apply can run under it [LEASE-PARTICIPANT-ABORT].

        If the system of record shows it applied (a commit of this branch ran
        and its branch state was lost), its recovery runs instead.

        Raises:
            RecoveryRequired, RecoveryRefused, StoreUnavailable: as :meth:`compensate`.
        """
        self._recover(work)

    def _recover(self, work: Work) -> Recovered:
        lease = _lease(work)
        recovered = self._sor.recover(lease["leaseId"])
        if recovered.outcome is RecoveryOutcome.ESCROWED:
            case = recovered.case
            address = case.address if case is not None else None
            raise RecoveryRequired(
                f"the undo of lease {lease['leaseId']} on {lease['resource']} was handed to "
                f"a person ({address}, HUMAN_ESCROW): it is not undone until they restore it "
                f"(SystemOfRecord.restore_by_hand); branch {work.branch.branch_id!r} stays "
                "committed",
                reason="ESCROWED",
                lease_id=lease["leaseId"],
                resource=lease["resource"],
                address=address,
                receipt=recovered.receipt,
            )
        return recovered


def _changes(resource: str, before: State, after: State) -> list[Change] | None:
    """The resource's fields that differ, each an ``update``, in name order; the whole
    state as one change when they do not fit a preview; ``None`` when even that does not
    (a resource id longer than a change names), which is signed as certainty ``none``."""
    # In name order: a state read from the resource and one kept as JSON list their
    # fields in different orders, and a preview and its observed effect must agree.
    fields = sorted(set(before) | set(after))
    try:
        changed = [
            change(resource, "update", field=name, before=before.get(name), after=after.get(name))
            for name in fields
            if name not in after
            or name not in before
            or digest({"v": before[name]}) != digest({"v": after[name]})
        ]
        if len(changed) <= MAX_CHANGES:
            return changed
    except ValidationError:
        pass  # a field name longer than a change names: the state as a whole, below
    try:
        return [change(resource, "update", before=before, after=after)]
    except ValidationError:
        _log.warning("the changes to %s do not fit a preview: none given", resource[:80])
        return None


def _said(mutation: Mapping[str, Any], changes: list[Change]) -> str:
    return f"{mutation['action']}: {render(changes)}"


def _target(work: Work) -> tuple[str, dict[str, Any]]:
    """The resource and mutation the branch names; a no vote if its args do not."""
    args = work.branch.args
    resource, mutation = args.get("resource"), args.get("mutation")
    if (
        set(args) != {"resource", "mutation"}
        or not isinstance(resource, str)
        or not resource
        or not isinstance(mutation, dict)
        or set(mutation) != {"action", "params"}
        or not isinstance(mutation["action"], str)
        or not mutation["action"]
        or not isinstance(mutation["params"], dict)
    ):
        raise Refuse(
            "BAD_ARGS",
            'a leased branch\'s args are {"resource": <string>, "mutation": {"action": '
            f'<string>, "params": <object>}}}}, not {_shape(args)}',
        )
    return resource, mutation


def _shape(args: dict[str, Any]) -> str:
    mutation = args.get("mutation")
    inner = sorted(mutation) if isinstance(mutation, dict) else type(mutation).__name__
    return f"{sorted(args)} (mutation: {inner})"


def _binding(work: Work) -> LeaseBinding:
    return LeaseBinding(txn_id=work.txn_id, plan_digest=work.plan_digest)


def _lease(work: Work) -> dict[str, Any]:
    """The lease this branch's prepare got (kept in ``Prepared.data``)."""
    lease = work.prepared.data.get("lease") if work.prepared is not None else None
    if not isinstance(lease, dict):
        raise NotPrepared(
            f"branch {work.branch.branch_id!r} of {work.txn_id!r} holds no lease: it was "
            "never prepared with one here",
            txn_id=work.txn_id,
            branch_id=work.branch.branch_id,
        )
    return lease


def _scope(lease: dict[str, Any]) -> str:
    return f"lease {lease['leaseId']} {digest(lease)}"


def _prepared_preconditions(lease: dict[str, Any]) -> Preconditions:
    return Preconditions(
        versions={lease["resource"]: lease["preImageStateHash"]}, scope=_scope(lease)
    )


def _same_sqlite_file(conn: Connection, store: Store) -> bool:
    """Whether ``conn`` and ``store`` are one SQLite database (whose write lock they share)."""
    ours, theirs = conn.engine.url, make_url(store.url)
    if ours.get_backend_name() != "sqlite" or theirs.get_backend_name() != "sqlite":
        return False
    mine, other = ours.database or "", theirs.database or ""
    if mine in ("", ":memory:") or other in ("", ":memory:"):
        return ours.render_as_string(hide_password=False) == store.url
    return os.path.realpath(mine) == os.path.realpath(other)
