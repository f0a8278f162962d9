"""The ``hatp`` command line: ``demo``, ``verify``, ``serve``, ``recover``, ``keys``, ``db``,
``init``, ``cards`` and ``txn``."""

from hatp.cli import _cards, _db, _demo, _init, _keys, _recover, _serve, _txn, _verify
from hatp.cli._app import app, main

__all__ = ["app", "main"]

# imported so that their commands register
del _cards, _db, _demo, _init, _keys, _recover, _serve, _txn, _verify
