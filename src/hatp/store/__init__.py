"""The store layer: every byte of durable state hatp keeps, and all of its SQL.

:func:`open_store` opens a SQLite file or a PostgreSQL database. On top of
it, :class:`DecisionLog` is the coordinator's log of transactions and their
record events, :class:`BranchStore` a participant's state per branch,
:class:`AskStore` the Human Gateway's pending asks, and
:class:`UsedApprovals` the call approvals a tool server has used (each runs
its call once), and :class:`LeaseBook` a system of record's compensation
leases, epochs and rejection receipts; :class:`PasskeyBook` the gateway's
spent passkey nonces and each passkey's sign count; :class:`WebBook` the
approver page's sign-in challenges, sessions and passkey invitations;
:class:`GateAsks` the asks a tool server made of the gateway itself, for
calls that came without an approval (one open ask per call and requester);
:class:`AskChanges` hears, on PostgreSQL, the asks other processes write;
:class:`Outbox` keeps the gateway's notices over push channels until they are sent;
the log's undo journal (:class:`UndoClaim`) says which undo takes back each step.
Each database records its schema revision: :func:`open_store` creates a
fresh one and refuses one behind (:func:`upgrade_store`, ``hatp db upgrade``,
brings it up; :func:`schema_status` reports it). Async code calls a store
through :meth:`Store.call`, off its event loop and within :class:`StoreLimits`.
The durability rules are in ``docs/spec.md`` ([STORE-DURABLE] and after).
"""

from hatp.store._asks import AskKind, AskRow, AskState, AskStore
from hatp.store._branches import BranchRow, BranchStore
from hatp.store._changes import AskChanges
from hatp.store._engine import Store, open_store, schema_status, upgrade_store
from hatp.store._gate_asks import GateAsk, GateAsks
from hatp.store._journal import UndoClaim
from hatp.store._leases import LeaseBook, LeaseRow, LeaseStatus
from hatp.store._log import DecisionLog, TxnRow
from hatp.store._migrate import Found, Migrations, SchemaStatus
from hatp.store._offloop import StoreLimits, calls_in_flight
from hatp.store._outbox import Outbox, OutboxRow, OutboxState
from hatp.store._passkeys import PasskeyBook
from hatp.store._schema import from_ms, to_ms
from hatp.store._used import UsedApproval, UsedApprovals, UseOutcome
from hatp.store._web import ChallengePurpose, WebBook, WebInvite, WebSession, token_digest

__all__ = [
    "AskChanges",
    "AskKind",
    "AskRow",
    "AskState",
    "AskStore",
    "BranchRow",
    "BranchStore",
    "ChallengePurpose",
    "DecisionLog",
    "Found",
    "GateAsk",
    "GateAsks",
    "LeaseBook",
    "LeaseRow",
    "LeaseStatus",
    "Migrations",
    "Outbox",
    "OutboxRow",
    "OutboxState",
    "PasskeyBook",
    "SchemaStatus",
    "Store",
    "StoreLimits",
    "TxnRow",
    "UndoClaim",
    "UseOutcome",
    "UsedApproval",
    "UsedApprovals",
    "WebBook",
    "WebInvite",
    "WebSession",
    "calls_in_flight",
    "from_ms",
    "open_store",
    "schema_status",
    "to_ms",
    "token_digest",
    "upgrade_store",
]
