"""The ``hatp`` command line: ``demo``, ``verify``, ``serve``, ``recover``, ``keys`` and ``db``."""

from hatp.cli import _db, _demo, _keys, _recover, _serve, _verify
from hatp.cli._app import app, main

__all__ = ["app", "main"]

del _db, _demo, _keys, _recover, _serve, _verify  # imported so that their commands register
